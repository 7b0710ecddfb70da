#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""An OpenAI-compatible upstream for the integration tests: POST /v1/chat/completions.

Listens on 127.0.0.1, port 0; prints "port N" once listening; stops on SIGTERM. HTTP/1.1
keep-alive, one thread per connection.

A request body {"messages": [...], "max_tokens": M, "stream": S, "stream_options":
{"include_usage": U}} is answered
- without "stream": true, as one `application/json` chat.completion object (Content-Length)
  whose "usage" holds prompt_tokens P, completion_tokens C and total_tokens T = P + C;
- with "stream": true, as `text/event-stream` in chunked transfer coding, one event per chunk,
  --delay-ms apart: a first chunk with the assistant role, --chunks content deltas, a chunk with
  finish_reason "stop", then (when stream_options.include_usage is true, as OpenAI does) a chunk
  with "choices": [] and the usage, then `data: [DONE]`.

The usage of request number n (from 0, in arrival order) is, by default, deterministic:
P = 1 + (characters of the messages' contents) // 4 and C = 1 + (n * 7919 + 13) % M (M: the
request's max_tokens, 256 when absent). Request headers set it instead:
  X-Test-Total-Tokens: T    P = T // 4, C = T - P
  X-Test-Delay-Ms: D        the pause between events (default --delay-ms)
  X-Test-Chunks: K          content deltas sent (default --chunks)
  X-Test-Status: S          answer S (e.g. 500) with an OpenAI error object and no usage
  X-Test-Cut-After: K       close the connection after K events, without the usage or [DONE]

Every answered completion is charged: one JSON line is appended to --record (flushed before the
response's last bytes are sent, so a client that has the whole response can read its line) with
n, id, stream, prompt_tokens, completion_tokens, total_tokens, usage_sent (whether the usage
went out: false when cut, when the client went away first, or a stream without include_usage)
and in_flight (completions being answered when this one began, itself included).
"""

import argparse
import http.server
import json
import sys
import threading
import time

lock = threading.Lock()
state = {"n": 0, "in_flight": 0}
options = None


def record(entry):
    if not options.record:
        return
    with lock:
        with open(options.record, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, separators=(",", ":")) + "\n")
            f.flush()


class handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def send_json(self, status, obj, extra=()):
        body = json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        return body

    def error(self, status, message):
        body = self.send_json(status, {"error": {"message": message, "type": "invalid_request_error"}})
        self.wfile.write(body)

    def do_GET(self):
        self.read_body()
        self.error(404, "no such endpoint: GET " + self.path)

    def do_POST(self):
        raw = self.read_body()
        if self.path.split("?")[0] != "/v1/chat/completions":
            self.error(404, "no such endpoint: POST " + self.path)
            return
        try:
            req = json.loads(raw or b"{}")
            if not isinstance(req, dict):
                raise ValueError("not an object")
        except ValueError as e:
            self.error(400, "the body is not a JSON object: %s" % e)
            return
        with lock:
            n = state["n"]
            state["n"] += 1
            state["in_flight"] += 1
            in_flight = state["in_flight"]
        try:
            self.complete(n, in_flight, req)
        finally:
            with lock:
                state["in_flight"] -= 1

    def usage(self, n, req):
        total = self.headers.get("X-Test-Total-Tokens")
        if total is not None:
            t = int(total)
            p = t // 4
            return p, t - p
        chars = 0
        for m in req.get("messages") or []:
            c = m.get("content") if isinstance(m, dict) else None
            if isinstance(c, str):
                chars += len(c)
        max_tokens = req.get("max_tokens")
        if not isinstance(max_tokens, int) or max_tokens <= 0:
            max_tokens = 256
        return 1 + chars // 4, 1 + (n * 7919 + 13) % max_tokens

    def complete(self, n, in_flight, req):
        status = int(self.headers.get("X-Test-Status") or 200)
        stream = req.get("stream") is True
        cid = "chatcmpl-%d" % n
        entry = {"n": n, "id": cid, "stream": stream, "in_flight": in_flight}
        if status != 200:
            entry.update(prompt_tokens=0, completion_tokens=0, total_tokens=0, usage_sent=False,
                         status=status)
            body = self.send_json(status, {"error": {"message": "scripted failure",
                                                     "type": "server_error"}})
            record(entry)
            self.wfile.write(body)
            return
        p, c = self.usage(n, req)
        usage = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
        entry.update(usage)
        model = req.get("model") or "test-model"
        created = 1700000000 + n
        if not stream:
            entry["usage_sent"] = True
            body = self.send_json(200, {
                "id": cid, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant",
                                                     "content": "word " * min(c, 16)},
                             "finish_reason": "stop"}],
                "usage": usage})
            record(entry)
            self.wfile.write(body)
            return
        self.stream(entry, cid, created, model, usage, req)

    def stream(self, entry, cid, created, model, usage, req):
        delay = int(self.headers.get("X-Test-Delay-Ms") or options.delay_ms) / 1000.0
        chunks = int(self.headers.get("X-Test-Chunks") or options.chunks)
        cut_after = self.headers.get("X-Test-Cut-After")
        cut_after = int(cut_after) if cut_after is not None else None
        include_usage = bool((req.get("stream_options") or {}).get("include_usage"))

        def chunk(choices, with_usage=None):
            obj = {"id": cid, "object": "chat.completion.chunk", "created": created,
                   "model": model, "choices": choices}
            if include_usage:
                obj["usage"] = with_usage  # null on every chunk but the last, as OpenAI sends
            return "data: " + json.dumps(obj, separators=(",", ":")) + "\n\n"

        events = [chunk([{"index": 0, "delta": {"role": "assistant", "content": ""},
                          "finish_reason": None}])]
        for i in range(chunks):
            events.append(chunk([{"index": 0, "delta": {"content": "word%d " % i},
                                  "finish_reason": None}]))
        events.append(chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]))
        usage_at = None
        if include_usage:
            usage_at = len(events)
            events.append(chunk([], usage))
        events.append("data: [DONE]\n\n")

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        entry["usage_sent"] = False
        recorded = False
        try:
            for i, ev in enumerate(events):
                if cut_after is not None and i >= cut_after:
                    break
                if i > 0 and delay > 0:
                    time.sleep(delay)
                data = ev.encode()
                if i == len(events) - 1:
                    record(entry)  # before the last bytes: a client with them can read the line
                    recorded = True
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                if i == usage_at:
                    entry["usage_sent"] = True
            else:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                return
        except (BrokenPipeError, ConnectionResetError):
            pass
        if not recorded:
            record(entry)
        self.close_connection = True  # cut, or the client went away: no more on this connection

    def log_message(self, *args):
        pass


def main():
    global options
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", help="append one JSON line per charged completion")
    ap.add_argument("--delay-ms", type=int, default=20, help="pause between SSE events")
    ap.add_argument("--chunks", type=int, default=4, help="content deltas per stream")
    options = ap.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    print("port %d" % server.server_address[1], flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
