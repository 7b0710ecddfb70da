#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""WebSocket client for the integration tests (Debian's python3-websockets).

Connects to --url, expects the echo upstream's greeting ("hello K"), sends --texts text
messages and, with --binary N, one binary message of N random bytes, and checks that each
comes back unchanged. Then, by option:
  --expect-status S   the handshake must be refused with HTTP status S (nothing else runs)
  --command C         send C ("close-me" or "drop-me") and expect the connection to close
                      within 3 s
  --idle T            send nothing and expect the connection to be closed within T seconds
  --hold T            send nothing for T seconds (the connection must stay open), then close
  (none)              close the connection normally
For a wss:// url, --cafile F verifies the gateway's certificate against the CAs in F.
Prints one line: "ok key=value ..." (exit 0) or "fail: reason" (exit 1). Keys: status,
greeting, texts, binary, closed_after (seconds from the last message sent to the close),
close_code. Every wait has a deadline.
"""

import argparse
import asyncio
import os
import ssl
import sys
import time

import websockets


def done(ok: bool, text: str) -> int:
    print(("ok " if ok else "fail: ") + text, flush=True)
    return 0 if ok else 1


async def wait_closed(ws, limit: float):
    """Waits up to `limit` seconds for the connection to close; (seconds, code) or None."""
    start = time.monotonic()
    try:
        while True:
            left = limit - (time.monotonic() - start)
            if left <= 0:
                return None
            await asyncio.wait_for(ws.recv(), timeout=left)  # anything received is dropped
    except asyncio.TimeoutError:
        return None
    except websockets.ConnectionClosed as e:
        code = e.rcvd.code if e.rcvd is not None else 1006
        return time.monotonic() - start, code


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--texts", type=int, default=3)
    parser.add_argument("--binary", type=int, default=0)
    parser.add_argument("--expect-status", type=int, default=0)
    parser.add_argument("--command", default="")
    parser.add_argument("--idle", type=float, default=0.0)
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--cafile", default="")
    args = parser.parse_args()

    extra = {}
    if args.url.startswith("wss://"):
        extra["ssl"] = ssl.create_default_context(cafile=args.cafile or None)
    try:
        ws = await websockets.connect(args.url, open_timeout=5, close_timeout=2, max_size=None,
                                      ping_interval=None, compression=None, **extra)
    except websockets.InvalidStatusCode as e:
        if args.expect_status and e.status_code == args.expect_status:
            return done(True, f"status={e.status_code}")
        return done(False, f"handshake refused with HTTP {e.status_code}")
    except (OSError, asyncio.TimeoutError, websockets.InvalidHandshake) as e:
        return done(False, f"handshake failed: {type(e).__name__}: {e}")
    if args.expect_status:
        await ws.close()
        return done(False, f"connected (101), expected HTTP {args.expect_status}")

    facts = ["status=101"]
    try:
        greeting = await asyncio.wait_for(ws.recv(), timeout=5)
        if not isinstance(greeting, str) or not greeting.startswith("hello "):
            return done(False, f"unexpected greeting {greeting!r}")
        facts.append("greeting=" + greeting.split(" ", 1)[1])
        for i in range(args.texts):
            text = f"message {i}: caf\u00e9 \u2603 " + "x" * (i * 100)
            await ws.send(text)
            echo = await asyncio.wait_for(ws.recv(), timeout=5)
            if echo != text:
                return done(False, f"text {i} came back as {echo!r:.80}")
        facts.append(f"texts={args.texts}")
        if args.binary:
            data = os.urandom(args.binary)
            await ws.send(data)
            echo = await asyncio.wait_for(ws.recv(), timeout=10)
            if echo != data:
                size = len(echo) if isinstance(echo, (bytes, str)) else -1
                return done(False, f"binary of {args.binary} bytes came back different ({size})")
            facts.append(f"binary={args.binary}")
    except asyncio.TimeoutError:
        return done(False, "no echo within the deadline (" + " ".join(facts) + ")")
    except websockets.ConnectionClosed as e:
        return done(False, f"closed during the exchange: {e} (" + " ".join(facts) + ")")

    if args.command or args.idle:
        if args.command:
            await ws.send(args.command)
        limit = args.idle if args.idle else 3.0
        closed = await wait_closed(ws, limit)
        if closed is None:
            ws.transport.abort()
            return done(False, f"still open {limit:.1f} s later (" + " ".join(facts) + ")")
        facts.append(f"closed_after={closed[0]:.3f} close_code={closed[1]}")
        return done(True, " ".join(facts))

    if args.hold:
        closed = await wait_closed(ws, args.hold)
        if closed is not None:
            return done(False, f"closed after {closed[0]:.3f} s of {args.hold:.1f} s held, code "
                        f"{closed[1]} (" + " ".join(facts) + ")")
        facts.append(f"held={args.hold:.1f}")

    await ws.close()
    return done(True, " ".join(facts))


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
