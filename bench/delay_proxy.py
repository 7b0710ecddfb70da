#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A loopback TCP proxy that delays replies, for bench/cluster.sh.

    delay_proxy.py --delay-ms D LISTEN_PORT:TARGET_PORT [LISTEN_PORT:TARGET_PORT ...]

For each pair it listens on 127.0.0.1:LISTEN_PORT and forwards every connection to
127.0.0.1:TARGET_PORT. Bytes from the client go through at once; bytes from the server reach
the client D ms after they were read, in order (nothing is lost or reordered), so every round
trip through it takes at least D ms: a network between the gateway and each Redis node that
makes sending in parallel and sending one after another tell apart. Runs until killed.
"""

import argparse
import asyncio
import socket


async def forward(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def forward_delayed(reader, writer, delay):
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()

    async def deliver():
        try:
            while True:
                due, data = await queue.get()
                if data is None:
                    return
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    task = asyncio.create_task(deliver())
    try:
        while data := await reader.read(65536):
            queue.put_nowait((loop.time() + delay, data))
    except (ConnectionError, OSError):
        pass
    finally:
        queue.put_nowait((0, None))
        await task


def handler(target, delay):
    async def handle(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_writer.close()
            return
        for w in (client_writer, server_writer):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(
            forward(client_reader, server_writer),
            forward_delayed(server_reader, client_writer, delay),
        )

    return handle


async def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delay-ms", type=float, required=True)
    ap.add_argument("pairs", nargs="+", help="LISTEN_PORT:TARGET_PORT")
    args = ap.parse_args()
    servers = []
    for pair in args.pairs:
        listen, target = (int(x) for x in pair.split(":"))
        servers.append(
            await asyncio.start_server(
                handler(target, args.delay_ms / 1000.0), "127.0.0.1", listen
            )
        )
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    asyncio.run(main())
