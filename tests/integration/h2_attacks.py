#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""HTTP/2 attacks with crafted frames (python3-h2) against an h2c listener.

Usage: h2_attacks.py PORT rapid-reset
Prints one line: `goaway <error code>` when the gateway sent GOAWAY, `closed` when the
connection ended without one, `open` when it was still open after the attack.
"""
import socket
import sys

import h2.config
import h2.connection
import h2.events
import h2.exceptions


def rapid_reset(port):
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    # Open and cancel streams at once (CVE-2023-44487), far over the per-second bound.
    for i in range(500):
        sid = 1 + 2 * i
        try:
            conn.send_headers(sid, [(":method", "GET"), (":path", "/open/x"),
                                    (":scheme", "http"), (":authority", "a.test")])
            conn.reset_stream(sid)
        except h2.exceptions.ProtocolError:
            break
    try:
        sock.sendall(conn.data_to_send())
    except OSError:
        pass
    while True:
        try:
            data = sock.recv(65535)
        except (socket.timeout, OSError):
            return "open"
        if not data:
            return "closed"
        try:
            events = conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            continue
        for e in events:
            if isinstance(e, h2.events.ConnectionTerminated):
                return "goaway %d" % int(e.error_code)


if __name__ == "__main__":
    print(rapid_reset(int(sys.argv[1])), flush=True)
