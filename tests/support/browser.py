#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Drives headless Chromium (Debian's `chromium`) through the DevTools protocol for the
browser tests: opens a page, runs steps in it, and saves what the test asserts on.

    browser.py --chromium PATH --profile DIR --url URL --steps FILE
               [--dom OUT.html] [--screenshot OUT.png] [--timeout SECONDS] [--scripts-off]

FILE holds a JSON list of steps, run in order in the page:
  {"wait": "JS expression"}      poll (every 50 ms) until it is truthy
  {"eval": "JS expression"}      evaluate it (a promise is awaited)
and the last DOM (document.documentElement.outerHTML) and a PNG screenshot of the page are
written after the steps. Prints one JSON line: {"ok": true} or {"ok": false, "error": "..."}
and exits 0 or 1. Chromium runs in its own process group and is killed on exit; the whole
run is bounded by --timeout. Only loopback URLs are opened.
"""

import argparse
import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse

import websockets


class Session:
    """One page target, attached with a flat session id, on the browser's socket."""

    def __init__(self, ws):
        self.ws = ws
        self.next_id = 0
        self.session = None

    async def call(self, method, params=None, session=True):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        await self.ws.send(json.dumps(msg))
        while True:
            reply = json.loads(await self.ws.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    async def evaluate(self, expression):
        r = await self.call("Runtime.evaluate", {"expression": expression,
                                                 "awaitPromise": True, "returnByValue": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression[:80]}: {r['exceptionDetails'].get('text')} "
                               f"{r['exceptionDetails'].get('exception', {}).get('description')}")
        return r.get("result", {}).get("value")


async def drive(args, port_file):
    deadline = time.monotonic() + args.timeout
    while not os.path.exists(port_file) or len(open(port_file).read().split("\n")) < 2:
        if time.monotonic() > deadline:
            raise RuntimeError("chromium wrote no DevToolsActivePort")
        await asyncio.sleep(0.05)
    port, path = open(port_file).read().split("\n")[:2]
    async with websockets.connect(f"ws://127.0.0.1:{port}{path}", max_size=None) as ws:
        s = Session(ws)
        target = await s.call("Target.createTarget", {"url": "about:blank"})
        attached = await s.call("Target.attachToTarget",
                                {"targetId": target["targetId"], "flatten": True})
        s.session = attached["sessionId"]
        await s.call("Page.enable")
        await s.call("Emulation.setDeviceMetricsOverride",
                     {"width": 1100, "height": 900, "deviceScaleFactor": 1, "mobile": False})
        if args.scripts_off:
            # Chromium with JavaScript disabled for the page (the DevTools protocol's own
            # evaluations still run): what the server's HTML shows alone.
            await s.call("Emulation.setScriptExecutionDisabled", {"value": True})
        await s.call("Page.navigate", {"url": args.url})
        await wait_for(s, "document.readyState === 'complete'", deadline)
        for step in json.load(open(args.steps)):
            if "wait" in step:
                await wait_for(s, step["wait"], deadline)
            elif "eval" in step:
                await s.evaluate(step["eval"])
        if args.dom:
            with open(args.dom, "w") as f:
                f.write(await s.evaluate("document.documentElement.outerHTML"))
        if args.screenshot:
            shot = await s.call("Page.captureScreenshot", {"format": "png",
                                                           "captureBeyondViewport": True})
            with open(args.screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
        await s.call("Browser.close", session=False)


async def wait_for(s, expression, deadline):
    while not await s.evaluate(f"Boolean({expression})"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for: {expression}")
        await asyncio.sleep(0.05)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--chromium", required=True)
    p.add_argument("--profile", required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--steps", required=True)
    p.add_argument("--dom")
    p.add_argument("--screenshot")
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--scripts-off", action="store_true",
                   help="disable the page's JavaScript (Emulation.setScriptExecutionDisabled)")
    args = p.parse_args()
    host = urllib.parse.urlsplit(args.url).hostname
    if host not in ("127.0.0.1", "::1", "localhost"):
        print(json.dumps({"ok": False, "error": "only loopback URLs are opened"}))
        return 1
    os.makedirs(args.profile, exist_ok=True)
    port_file = os.path.join(args.profile, "DevToolsActivePort")
    if os.path.exists(port_file):
        os.remove(port_file)
    browser = subprocess.Popen(
        [args.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--disable-extensions", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--remote-debugging-address=127.0.0.1",
         "--remote-debugging-port=0", "--user-data-dir=" + args.profile, "about:blank"],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(args.profile, "stderr.txt"), "w"),
        start_new_session=True)
    try:
        asyncio.run(asyncio.wait_for(drive(args, port_file), args.timeout))
        print(json.dumps({"ok": True}))
        return 0
    except Exception as e:  # reported to the test, which prints it
        print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}))
        return 1
    finally:
        try:
            os.killpg(browser.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        browser.wait()


if __name__ == "__main__":
    sys.exit(main())
