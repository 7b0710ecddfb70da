#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The soak's mixed and hostile clients (bench/soak.sh): for --seconds, every --period seconds,
against one gateway, one of each:

  stream     POST /v1/chat/completions, an SSE response streamed by the upstream, read whole
  slow       the same, read a few bytes at a time with pauses (a slow reader)
  ws         a WebSocket handshake on /ws, one message echoed, a close (when --ws)
  tls        GET /v1/items over TLS (when --tls-port; the soak's own certificate, not verified;
             with --tls-only the only kind, for a TLS listener)
  malformed  a request line that is not HTTP: expects 400
  oversized  a head over max_header_size: expects 431
  slowloris  a head that never ends: expects 408 at header_timeout (held in the background)
  vanish     a POST announcing 100,000 bytes that sends 10 and disconnects
  cut        a streamed completion dropped after its first bytes

Prints one JSON object at the end: per kind, the answers it got by status (or "error:<what>"
when the connection failed). A kind's answers other than what it expects are the soak's
business to judge: this client only counts."""

import argparse
import asyncio
import base64
import collections
import json
import os
import ssl
import time

counts = collections.defaultdict(collections.Counter)


def status_of(head: bytes) -> str:
    line = head.split(b"\r\n", 1)[0].split(b" ")
    return line[1].decode() if len(line) > 1 else "none"


async def exchange(port, raw, read_all=True, ssl_ctx=None, slow=False, cut_after=0):
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, ssl=ssl_ctx,
                                server_hostname="localhost" if ssl_ctx else None), timeout=5)
    try:
        writer.write(raw)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
        status = status_of(head)
        if cut_after:
            await reader.read(cut_after)
            writer.transport.abort()  # gone mid-stream
            return status
        if read_all:
            while True:
                chunk = await asyncio.wait_for(reader.read(64 if slow else 65536), timeout=30)
                if not chunk:
                    break
                if slow:
                    await asyncio.sleep(0.02)
        return status
    finally:
        if not writer.is_closing():
            writer.close()


STREAM_BODY = b'{"messages":[{"role":"user","content":"soak"}],"max_tokens":16,"stream":true}'


def stream_request():
    """A streamed chat completion (the upstream answers text/event-stream, chunked)."""
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: soak\r\nX-API-Key: soak-mixed\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n"
            b"\r\n%s" % (len(STREAM_BODY), STREAM_BODY))


def get(path, key, extra=b""):
    return (b"GET %s HTTP/1.1\r\nHost: soak\r\nX-API-Key: %s\r\nConnection: close\r\n%s\r\n"
            % (path.encode(), key.encode(), extra))


async def run_kind(kind, coro):
    try:
        counts[kind][await coro] += 1
    except asyncio.TimeoutError:
        counts[kind]["error:timeout"] += 1
    except (OSError, asyncio.IncompleteReadError, ssl.SSLError) as e:
        counts[kind]["error:" + type(e).__name__] += 1


async def slowloris(port, hold):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /v1/items HTTP/1.1\r\nHost: soak\r\n")
        await writer.drain()
        end = time.monotonic() + hold
        while time.monotonic() < end:
            writer.write(b"X-Slow: 1\r\n")
            await writer.drain()
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=1)
                return status_of(head)
            except asyncio.TimeoutError:
                continue
        return "held"
    finally:
        writer.close()


async def vanish(port):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/items HTTP/1.1\r\nHost: soak\r\nX-API-Key: soak-mixed\r\n"
                 b"Content-Length: 100000\r\n\r\n0123456789")
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.transport.abort()
    return "vanished"


async def websocket(port):
    key = base64.b64encode(os.urandom(16))
    raw = (b"GET /ws HTTP/1.1\r\nHost: soak\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\nX-API-Key: soak-mixed\r\n\r\n"
           % key)
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
    try:
        writer.write(raw)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
        status = status_of(head)
        if status != "101":
            return status
        # One masked text frame, then a close frame; read until the server closes.
        payload, mask = b"soak", os.urandom(4)
        writer.write(bytes([0x81, 0x80 | len(payload)]) + mask +
                     bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
        writer.write(bytes([0x88, 0x80]) + os.urandom(4))
        await writer.drain()
        while await asyncio.wait_for(reader.read(4096), timeout=10):
            pass
        return status
    finally:
        writer.close()


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--tls-port", type=int, default=0)
    ap.add_argument("--ws", action="store_true")
    ap.add_argument("--tls-only", action="store_true", help="only the tls kind (a TLS listener)")
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--period", type=float, default=1.0)
    ap.add_argument("--slowloris-hold", type=float, default=15.0)
    a = ap.parse_args()
    ctx = None
    if a.tls_port:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    background = []
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        tick = time.monotonic()
        jobs = [] if a.tls_only else [
            run_kind("stream", exchange(a.port, stream_request())),
            run_kind("slow", exchange(a.port, stream_request(), slow=True)),
            run_kind("malformed", exchange(a.port, b"NOT HTTP AT ALL\r\n\r\n")),
            run_kind("oversized", exchange(
                a.port, get("/v1/items", "soak-mixed", b"X-Big: " + b"a" * 40000 + b"\r\n"))),
            run_kind("vanish", vanish(a.port)),
            run_kind("cut", exchange(a.port, stream_request(), cut_after=16)),
        ]
        if a.ws:
            jobs.append(run_kind("ws", websocket(a.port)))
        if a.tls_port:
            jobs.append(run_kind("tls", exchange(a.tls_port, get("/v1/items", "soak-mixed"),
                                                 ssl_ctx=ctx)))
        if not a.tls_only and len([t for t in background if not t.done()]) < 4:
            background.append(asyncio.ensure_future(
                run_kind("slowloris", slowloris(a.port, a.slowloris_hold))))
        await asyncio.gather(*jobs)
        await asyncio.sleep(max(0.0, a.period - (time.monotonic() - tick)))
    await asyncio.gather(*background)
    print(json.dumps({k: dict(v) for k, v in sorted(counts.items())}, sort_keys=True))


if __name__ == "__main__":
    asyncio.run(main())
