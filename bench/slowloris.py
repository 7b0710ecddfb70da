#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A slowloris client for bench/slowloris.sh: holds N connections to 127.0.0.1:PORT, each
trickling a request head that never ends (one header line every --interval seconds). A
connection the server closes (a 408 at its header deadline, or a reset) is opened again after
a short pause, so the attack holds N connections for --duration seconds, then stops by itself.

Prints one JSON line: connections asked, opened in all, how many were open at each second
(min and mean after the ramp), how many ended with a 408, without an answer, or failed to
connect."""

import argparse
import asyncio
import json
import time


async def one(port, interval, until, stats):
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port), timeout=2)
        except (OSError, asyncio.TimeoutError):
            stats["connect_failures"] += 1
            await asyncio.sleep(0.2)
            continue
        stats["opened"] += 1
        stats["open"] += 1
        answer = b""
        try:
            writer.write(b"GET /slow HTTP/1.1\r\nHost: bench\r\n")
            await writer.drain()
            i = 0
            while time.monotonic() < until:
                try:
                    # A read that returns means the server answered or closed.
                    answer = await asyncio.wait_for(reader.read(256), timeout=interval)
                    break
                except asyncio.TimeoutError:
                    pass
                writer.write(b"X-Slow-%d: 1\r\n" % i)
                await writer.drain()
                i += 1
        except (OSError, ConnectionError):
            pass
        finally:
            stats["open"] -= 1
            writer.close()
        if time.monotonic() >= until:
            break
        if answer.startswith(b"HTTP/1.1 408"):
            stats["answered_408"] += 1
        else:
            stats["closed_without_408"] += 1
        await asyncio.sleep(0.1)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--connections", type=int, default=2000)
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--ramp", type=float, default=4.0, help="seconds to open them all")
    a = ap.parse_args()
    stats = {"opened": 0, "open": 0, "answered_408": 0, "closed_without_408": 0,
             "connect_failures": 0}
    start = time.monotonic()
    until = start + a.duration
    tasks = []
    batch = max(1, a.connections // max(1, int(a.ramp * 10)))
    for i in range(0, a.connections, batch):
        for _ in range(min(batch, a.connections - i)):
            tasks.append(asyncio.create_task(one(a.port, a.interval, until, stats)))
        await asyncio.sleep(0.1)
    samples = []
    while time.monotonic() < until:
        await asyncio.sleep(1)
        samples.append(stats["open"])
    await asyncio.wait(tasks, timeout=a.interval + 3)
    for t in tasks:
        t.cancel()
    held = samples[1:] or samples or [0]
    print(json.dumps({"connections": a.connections, "opened": stats["opened"],
                      "held_min": min(held), "held_mean": round(sum(held) / len(held)),
                      "answered_408": stats["answered_408"],
                      "closed_without_408": stats["closed_without_408"],
                      "connect_failures": stats["connect_failures"]}))


if __name__ == "__main__":
    asyncio.run(main())
