#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""HTTP/2 flow control, 100-continue and drain peers (python3-h2) for tests/integration/
h2_flow_test.cpp. Every socket operation waits at most 20 s.

  h2_flow.py upstream
      an HTTP/1.1 upstream on 127.0.0.1 port 0 (prints `ready PORT`, then `call METHOD PATH`
      per request): GET /big/N streams N pattern bytes (chunked) as fast as the socket takes
      them; POST /slow/... reads the body 64 KiB at a time with a 2 ms pause after each piece
      and answers `got N intact` (or `broken`: not the pattern); GET /hold/MS answers `held` after MS milliseconds; anything
      else is answered `ok PATH`.
  h2_flow.py slow-read PORT PATH WINDOW
      GET PATH over h2c with SETTINGS_INITIAL_WINDOW_SIZE WINDOW, each DATA frame acknowledged
      only after a 1 ms pause; prints `status S bytes N intact` (or `broken`).
  h2_flow.py upload PORT PATH N
      POST N pattern bytes as fast as flow control lets; prints `status S body BODY`.
  h2_flow.py continue PORT PATH N KEY
      POST with `expect: 100-continue` and `content-length: N` (API key KEY), the body sent only
      after a 100; prints JSON {interim: [...], status, body, sent: bytes sent, reset: code}.
  h2_flow.py drain PORT PATH STARTED
      opens stream 1 (GET PATH), writes the file STARTED, waits for a GOAWAY, then sends HEADERS
      of a stream 3 anyway (raw frames, as a client that did not see the GOAWAY yet would);
      prints JSON {goaway: code, last_stream: id, status1, body1, stream3: "answered" |
      "refused" | "ignored", closed: whether the gateway closed the connection}.
  h2_flow.py trailers PORT PATH
      POST `abc` then the trailer `x-checksum: abc-sum` (HEADERS with END_STREAM); prints
      `status S`.
  h2_flow.py twice PORT PATH1 PATH2 TRIGGER
      GET PATH1, then waits for the file TRIGGER, then GET PATH2 on the same connection; prints
      `S1 S2`.
"""
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hpack
import hyperframe.frame

PATTERN = bytes(range(256)) * 256  # 64 KiB


def matches(data, offset):
    """Whether DATA is the pattern's bytes from OFFSET on."""
    i = 0
    while i < len(data):
        at = (offset + i) % len(PATTERN)
        n = min(len(data) - i, len(PATTERN) - at)
        if data[i:i + n] != PATTERN[at:at + n]:
            return False
        i += n
    return True


def pattern(n):
    """N bytes of the repeating pattern, in pieces of at most 64 KiB."""
    while n > 0:
        piece = PATTERN[: min(n, len(PATTERN))]
        n -= len(piece)
        yield piece


# --- the upstream --------------------------------------------------------------------------

class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, body, status=200):
        data = body.encode()
        self.send_response(status)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        print("call GET %s" % self.path, flush=True)
        if self.path.startswith("/big/"):
            n = int(self.path.split("/")[2])
            self.send_response(200)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for piece in pattern(n):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        elif self.path.startswith("/hold/"):
            time.sleep(int(self.path.split("/")[2]) / 1000)
            self.answer("held")
        else:
            self.answer("ok " + self.path)

    def do_POST(self):
        print("call POST %s" % self.path, flush=True)
        intact = True
        got = 0
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                left = size
                while left:
                    piece = self.rfile.read(min(left, 65536))
                    left -= len(piece)
                    intact = intact and matches(piece, got)
                    got += len(piece)
                    if self.path.startswith("/slow"):
                        time.sleep(0.002)
                self.rfile.readline()
        else:
            left = int(self.headers.get("content-length", "0"))
            while left:
                piece = self.rfile.read(min(left, 65536))
                if not piece:
                    break
                left -= len(piece)
                intact = intact and matches(piece, got)
                got += len(piece)
                if self.path.startswith("/slow"):
                    time.sleep(0.002)
        self.answer("got %d %s" % (got, "intact" if intact else "broken"))


def upstream():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    server.daemon_threads = True
    print("ready %d" % server.server_address[1], flush=True)
    server.serve_forever()


# --- HTTP/2 clients --------------------------------------------------------------------------

def connect(port, window=None):
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True,
                                                                header_encoding="utf-8"))
    conn.initiate_connection()
    if window is not None:
        conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
    sock.sendall(conn.data_to_send())
    return sock, conn


def head(method, path, extra=()):
    return [(":method", method), (":path", path), (":scheme", "http"),
            (":authority", "a.test")] + list(extra)


def events(sock, conn):
    """The next events from the socket ([] when the connection ended)."""
    data = sock.recv(65536)
    if not data:
        return None
    out = conn.receive_data(data)
    sock.sendall(conn.data_to_send())
    return out


def get(sock, conn, sid, path):
    conn.send_headers(sid, head("GET", path), end_stream=True)
    sock.sendall(conn.data_to_send())
    status, body = None, b""
    while True:
        evs = events(sock, conn)
        if evs is None:
            return status, body
        for e in evs:
            if isinstance(e, h2.events.ResponseReceived) and e.stream_id == sid:
                status = int(dict(e.headers)[":status"])
            elif isinstance(e, h2.events.DataReceived) and e.stream_id == sid:
                body += e.data
                conn.acknowledge_received_data(e.flow_controlled_length, sid)
            elif isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)) and \
                    e.stream_id == sid:
                sock.sendall(conn.data_to_send())
                return status, body


def slow_read(port, path, window):
    sock, conn = connect(port, window)
    conn.send_headers(1, head("GET", path), end_stream=True)
    sock.sendall(conn.data_to_send())
    status, got, intact = None, 0, True
    done = False
    while not done:
        evs = events(sock, conn)
        if evs is None:
            break
        for e in evs:
            if isinstance(e, h2.events.ResponseReceived):
                status = int(dict(e.headers)[":status"])
            elif isinstance(e, h2.events.DataReceived):
                intact = intact and matches(e.data, got)
                got += len(e.data)
                time.sleep(0.001)  # the slow reader
                conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                sock.sendall(conn.data_to_send())
            elif isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)):
                done = True
    print("status %s bytes %d %s" % (status, got, "intact" if intact else "broken"))


def send_body(sock, conn, sid, n, on_events):
    """Sends N pattern bytes on stream SID as flow control lets, END_STREAM with the last;
    events read meanwhile go to ON_EVENTS (which returns False to stop sending). Bytes sent."""
    sent = 0
    pending = b""
    source = pattern(n)
    while sent < n:
        if not pending:
            pending = next(source)
        room = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
        if room > 0:
            piece, pending = pending[:room], pending[room:]
            conn.send_data(sid, piece, end_stream=(sent + len(piece) == n))
            sent += len(piece)
            sock.sendall(conn.data_to_send())
            continue
        evs = events(sock, conn)
        if evs is None or on_events(evs) is False:
            break
    return sent


def upload(port, path, n):
    sock, conn = connect(port)
    conn.send_headers(1, head("POST", path, [("content-length", str(n))]))
    sock.sendall(conn.data_to_send())
    answer = {"status": None, "body": b"", "done": False}

    def on(evs):
        for e in evs:
            if isinstance(e, h2.events.ResponseReceived):
                answer["status"] = int(dict(e.headers)[":status"])
            elif isinstance(e, h2.events.DataReceived):
                answer["body"] += e.data
                conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
            elif isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)):
                answer["done"] = True
        return not answer["done"]

    send_body(sock, conn, 1, n, on)
    while not answer["done"]:
        evs = events(sock, conn)
        if evs is None:
            break
        on(evs)
    print("status %s body %s" % (answer["status"], answer["body"].decode()))


def expect_continue(port, path, n, key):
    sock, conn = connect(port)
    extra = [("content-length", str(n)), ("expect", "100-continue")]
    if key:
        extra.append(("x-api-key", key))
    conn.send_headers(1, head("POST", path, extra))
    sock.sendall(conn.data_to_send())
    out = {"interim": [], "status": None, "body": "", "sent": 0, "reset": None}
    ended = False

    def on(evs):
        nonlocal ended
        for e in evs:
            if isinstance(e, h2.events.InformationalResponseReceived):
                out["interim"].append(int(dict(e.headers)[":status"]))
            elif isinstance(e, h2.events.ResponseReceived):
                out["status"] = int(dict(e.headers)[":status"])
            elif isinstance(e, h2.events.DataReceived):
                out["body"] += e.data.decode(errors="replace")
                conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
            elif isinstance(e, h2.events.StreamReset):
                out["reset"] = int(e.error_code)
                ended = True
            elif isinstance(e, h2.events.StreamEnded):
                ended = True

    # The body waits for the 100 (or a final answer, then it is never sent).
    while not out["interim"] and out["status"] is None and not ended:
        evs = events(sock, conn)
        if evs is None:
            break
        on(evs)
    if out["interim"] and out["status"] is None and not ended:
        def sending(evs):
            on(evs)
            return out["status"] is None and not ended
        out["sent"] = send_body(sock, conn, 1, n, sending)
    # Then the answer's end; a reset after a whole answer (RFC 9113 §8.1) ends it too.
    sock.settimeout(5)
    try:
        while not ended or out["reset"] is None:
            evs = events(sock, conn)
            if evs is None:
                break
            on(evs)
            if ended and out["status"] is not None and out["sent"] == n:
                break
    except socket.timeout:
        pass
    print(json.dumps(out))


def read_frame(sock, buf):
    """The next frame from the socket (buf holds bytes read ahead); None when it closed."""
    while True:
        if len(buf) >= 9:
            frame, length = hyperframe.frame.Frame.parse_frame_header(memoryview(bytes(buf[:9])))
            if len(buf) >= 9 + length:
                frame.parse_body(memoryview(bytes(buf[9:9 + length])))
                del buf[:9 + length]
                return frame
        data = sock.recv(65536)
        if not data:
            return None
        buf += data


def drain(port, path, started):
    # Raw frames (hyperframe, hpack): h2's state machine takes no frame after a GOAWAY, and
    # the in-flight stream's answer comes after it.
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    encoder, decoder = hpack.Encoder(), hpack.Decoder()

    def send_headers(sid, p):
        frame = hyperframe.frame.HeadersFrame(sid)
        frame.data = encoder.encode(head("GET", p))
        frame.flags.add("END_HEADERS")
        frame.flags.add("END_STREAM")
        sock.sendall(frame.serialize())

    sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" +
                 hyperframe.frame.SettingsFrame(0).serialize())
    send_headers(1, path)
    open(started, "w").close()
    out = {"goaway": None, "last_stream": None, "status1": None, "body1": "",
           "stream3": "ignored", "closed": False}
    buf = bytearray()
    while True:
        try:
            frame = read_frame(sock, buf)
        except (socket.timeout, OSError):
            break
        if frame is None:
            out["closed"] = True
            break
        if isinstance(frame, hyperframe.frame.SettingsFrame) and "ACK" not in frame.flags:
            ack = hyperframe.frame.SettingsFrame(0)
            ack.flags.add("ACK")
            sock.sendall(ack.serialize())
        elif isinstance(frame, hyperframe.frame.GoAwayFrame):
            out["goaway"] = frame.error_code
            out["last_stream"] = frame.last_stream_id
            # A client that did not see the GOAWAY yet opens a stream all the same.
            send_headers(3, path.replace("hold", "new"))
        elif isinstance(frame, hyperframe.frame.HeadersFrame):
            fields = dict(decoder.decode(frame.data))
            if frame.stream_id == 1 and out["status1"] is None:
                out["status1"] = int(fields[":status"])
            elif frame.stream_id == 3:
                out["stream3"] = "answered"
        elif isinstance(frame, hyperframe.frame.DataFrame) and frame.stream_id == 1:
            out["body1"] += frame.data.decode(errors="replace")
        elif isinstance(frame, hyperframe.frame.RstStreamFrame) and frame.stream_id == 3:
            out["stream3"] = "refused"
    print(json.dumps(out))


def trailers(port, path):
    sock, conn = connect(port)
    conn.send_headers(1, head("POST", path, [("te", "trailers")]))
    conn.send_data(1, b"abc")
    conn.send_headers(1, [("x-checksum", "abc-sum")], end_stream=True)
    sock.sendall(conn.data_to_send())
    status = None
    while True:
        evs = events(sock, conn)
        if evs is None:
            break
        for e in evs:
            if isinstance(e, h2.events.ResponseReceived):
                status = int(dict(e.headers)[":status"])
            elif isinstance(e, h2.events.DataReceived):
                conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
        if any(isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)) for e in evs):
            break
    print("status %s" % status)


def twice(port, path1, path2, trigger):
    sock, conn = connect(port)
    s1, _ = get(sock, conn, 1, path1)
    print(s1, end=" ", flush=True)
    for _ in range(2000):
        if os.path.exists(trigger):
            break
        time.sleep(0.01)
    s2, _ = get(sock, conn, 3, path2)
    print(s2, flush=True)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "upstream":
        upstream()
    elif mode == "slow-read":
        slow_read(int(args[0]), args[1], int(args[2]))
    elif mode == "upload":
        upload(int(args[0]), args[1], int(args[2]))
    elif mode == "continue":
        expect_continue(int(args[0]), args[1], int(args[2]), args[3])
    elif mode == "drain":
        drain(int(args[0]), args[1], args[2])
    elif mode == "trailers":
        trailers(int(args[0]), args[1])
    elif mode == "twice":
        twice(int(args[0]), args[1], args[2], args[3])
    else:
        sys.exit("unknown mode " + mode)
