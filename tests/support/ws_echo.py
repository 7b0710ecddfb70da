#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""WebSocket echo upstream for the integration tests (Debian's python3-websockets).

Listens on 127.0.0.1 on a free port and prints "port N" on stdout once it is listening. Each
accepted connection first gets the text message "hello K" (K: the handshake's 1-based index),
then every message it sends is echoed back as is, text or binary, with two commands:
"close-me" closes with a close frame (code 1000, reason "bye"), "drop-me" drops the TCP
connection with no close frame.

--count-file FILE is rewritten (write then rename) after every HTTP request the server reads
and every handshake it accepts, as two lines "requests N" and "handshakes N", so the test can
see what reached the upstream. --lifetime bounds how long the server runs (seconds).
"""

import argparse
import asyncio
import os
import sys

import websockets


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count-file", required=True)
    parser.add_argument("--lifetime", type=float, default=60.0)
    args = parser.parse_args()

    counts = {"requests": 0, "handshakes": 0}

    def record() -> None:
        tmp = args.count_file + ".tmp"
        with open(tmp, "w", encoding="ascii") as out:
            out.write(f"requests {counts['requests']}\nhandshakes {counts['handshakes']}\n")
        os.replace(tmp, args.count_file)

    async def process_request(path, headers):  # every request read, upgrade or not
        counts["requests"] += 1
        record()
        return None  # go on with the handshake

    async def handler(ws):
        counts["handshakes"] += 1
        record()
        await ws.send(f"hello {counts['handshakes']}")
        try:
            async for message in ws:
                if message == "close-me":
                    await ws.close(1000, "bye")
                    return
                if message == "drop-me":
                    ws.transport.abort()
                    return
                await ws.send(message)
        except websockets.ConnectionClosed:
            pass

    record()
    async with websockets.serve(handler, "127.0.0.1", 0, process_request=process_request,
                                max_size=None, ping_interval=None, compression=None) as server:
        port = server.sockets[0].getsockname()[1]
        print(f"port {port}", flush=True)
        await asyncio.sleep(args.lifetime)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
