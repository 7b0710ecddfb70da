#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""TLS client for the integration tests (Python's ssl module, OpenSSL underneath).

Connects to 127.0.0.1:--port, makes the TLS handshake as told, then sends each --path as a
GET on the same connection (keep-alive) and reads each response. Options:
  --cafile F         trust these CAs (the peer certificate is then required and verified)
  --servername N     SNI, and the name checked against the certificate (with --cafile)
  --no-hostname      verify the chain but not the name (to see which certificate is served)
  --cert F --key F   a client certificate
  --min V --max V    protocol versions: 1.1, 1.2, 1.3 (1.1 lowers the security level so that
                     this client can offer it at all)
  --alpn a,b         ALPN protocols offered
  --pipeline         send every request in one write before reading any response
  --wait-for FILE    after the first response, print "first" and wait (10 s at most) until
                     FILE exists before the next request
  --partial TEXT     send TEXT (a partial head, \\r\\n written as such), then read the answer
  --read-close       after the last response, read until the server closes and say how:
                     "close_notify" (a TLS close) or "eof" (TCP closed without one)
Prints one JSON line: {"ok", "error", "version", "alpn", "subject", "responses": [{"status",
"headers", "body"}], "close"}. Every wait has a deadline (10 s).
"""

import argparse
import json
import os
import socket
import ssl
import sys
import time

VERSIONS = {"1.1": ssl.TLSVersion.TLSv1_1, "1.2": ssl.TLSVersion.TLSv1_2,
            "1.3": ssl.TLSVersion.TLSv1_3}
NAMES = {"commonName": "CN", "organizationName": "O"}


def subject_of(cert):
    parts = []
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            parts.append(NAMES.get(key, key) + "=" + value)
    return ",".join(parts)


class reader:
    def __init__(self, sock):
        self.sock = sock
        self.data = b""

    def more(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("connection closed")
        self.data += chunk

    def until(self, marker):
        while marker not in self.data:
            self.more()
        i = self.data.index(marker) + len(marker)
        out, self.data = self.data[:i], self.data[i:]
        return out

    def take(self, n):
        while len(self.data) < n:
            self.more()
        out, self.data = self.data[:n], self.data[n:]
        return out

    def response(self, head_request=False):
        head = self.until(b"\r\n\r\n").decode("latin-1")
        lines = head.split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        body = b""
        if head_request or status in (204, 304) or status // 100 == 1:
            pass
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int(self.until(b"\r\n").strip().split(b";")[0], 16)
                if size == 0:
                    self.until(b"\r\n")
                    break
                body += self.take(size)
                self.take(2)
        elif "content-length" in headers:
            body = self.take(int(headers["content-length"]))
        return {"status": status, "headers": headers, "body": body.decode("utf-8", "replace")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--cafile")
    ap.add_argument("--servername")
    ap.add_argument("--no-hostname", action="store_true")
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--min")
    ap.add_argument("--max")
    ap.add_argument("--alpn")
    ap.add_argument("--path", action="append", default=[])
    ap.add_argument("--host-header", default="gateway.test")
    ap.add_argument("--pipeline", action="store_true")
    ap.add_argument("--wait-for")
    ap.add_argument("--partial")
    ap.add_argument("--read-close", action="store_true")
    a = ap.parse_args()

    out = {"ok": False, "error": "", "version": "", "alpn": "", "subject": "", "responses": [],
           "close": ""}
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if a.cafile:
        ctx.load_verify_locations(a.cafile)
        ctx.check_hostname = not a.no_hostname and a.servername is not None
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if a.min == "1.1" or a.max == "1.1":
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    if a.min:
        ctx.minimum_version = VERSIONS[a.min]
    if a.max:
        ctx.maximum_version = VERSIONS[a.max]
    if a.alpn:
        ctx.set_alpn_protocols(a.alpn.split(","))
    if a.cert:
        ctx.load_cert_chain(a.cert, a.key)
    try:
        raw = socket.create_connection(("127.0.0.1", a.port), timeout=10)
        s = ctx.wrap_socket(raw, server_hostname=a.servername)
        out["version"] = s.version()
        out["alpn"] = s.selected_alpn_protocol() or ""
        if a.cafile:
            out["subject"] = subject_of(s.getpeercert())
        r = reader(s)
        if a.partial is not None:
            s.sendall(a.partial.replace("\\r\\n", "\r\n").encode())
            out["responses"].append(r.response())
        requests = [("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (p, a.host_header)).encode()
                    for p in a.path]
        if a.pipeline:
            s.sendall(b"".join(requests))
            for _ in requests:
                out["responses"].append(r.response())
        else:
            for i, req in enumerate(requests):
                if i == 1 and a.wait_for:
                    print("first", flush=True)
                    deadline = time.monotonic() + 10
                    while not os.path.exists(a.wait_for) and time.monotonic() < deadline:
                        time.sleep(0.01)
                s.sendall(req)
                out["responses"].append(r.response())
        if a.read_close:
            try:
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        out["close"] = "close_notify"
                        break
            except ssl.SSLEOFError:
                out["close"] = "eof"
            except OSError as e:
                out["close"] = "error: " + str(e)
        out["ok"] = True
    except Exception as e:  # the test reads the reason
        out["error"] = "%s: %s" % (type(e).__name__, e)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
