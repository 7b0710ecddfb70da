#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""An HTTPS upstream for the integration tests: Python's http.server wrapped in ssl.

Listens on 127.0.0.1, port 0, with --cert and --key; prints "port N" once listening. Answers
every GET and POST with 200 and the body "https upstream: METHOD TARGET connection=K", K
counting the TLS connections accepted (HTTP/1.1 keep-alive, Content-Length). Stops on
SIGTERM.
"""

import argparse
import http.server
import ssl
import sys
import threading

connections = 0
lock = threading.Lock()


class handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        global connections
        super().setup()
        with lock:
            connections += 1
            self.connection_number = connections

    def answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = ("https upstream: %s %s connection=%d" %
                (self.command, self.path, self.connection_number)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = answer
    do_POST = answer

    def log_message(self, *args):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    a = ap.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(a.cert, a.key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print("port %d" % server.server_address[1], flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
