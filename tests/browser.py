"""A real browser for page tests: Debian's headless Chromium, driven over the DevTools protocol.

``--dump-dom`` cannot test a page that keeps a stream open (Server-Sent Events): its virtual time waits for the
network to go quiet, which a stream never does. Over the DevTools protocol a test loads the page, lets it run in
real time, and reads what it rendered (``Page.evaluate``) while the daemon keeps publishing.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect

from tests.conftest import need

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0", "--remote-allow-origins=*", "--window-size=1280,800"]


class Page:
    def __init__(self, socket: ClientConnection) -> None:
        self.socket = socket
        self._ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        request = next(self._ids)
        self.socket.send(json.dumps({"id": request, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=30))
            if message.get("id") == request:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def text(self, element_id: str) -> str:
        return str(self.evaluate(f"document.getElementById({json.dumps(element_id)}).textContent"))

    def wait_for(self, expression: str, timeout: float = 20.0) -> Any:
        """Poll a JavaScript expression until it is truthy; its value. An expression that throws is not true yet
        (the page may still be loading: on a loaded machine a new tab's document is about:blank for a while)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.evaluate(expression)
            except AssertionError as exc:
                if time.monotonic() > deadline:
                    raise AssertionError(f"not true after {timeout} s: {exc}") from None
            else:
                if value:
                    return value
                if time.monotonic() > deadline:
                    raise AssertionError(f"not true after {timeout} s: {expression}")
            time.sleep(0.1)

    def screenshot(self, path: Path) -> None:
        import base64

        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))


class Browser:
    def __init__(self, profile: Path) -> None:
        chromium = shutil.which("chromium")
        need(chromium is not None, "Debian's chromium package (apt-get install chromium)")
        assert chromium is not None
        self.process = subprocess.Popen([chromium, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert self.process.stderr is not None
        deadline = time.monotonic() + 60
        self.endpoint = ""
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            m = re.search(r"DevTools listening on ws://([^/]+)/", line)
            if m:
                self.endpoint = m.group(1)
                break
            if not line and self.process.poll() is not None:
                break
        if not self.endpoint:
            self.close()
            raise AssertionError("chromium did not start its DevTools endpoint")
        self._sockets = contextlib.ExitStack()

    def open(self, url: str) -> Page:
        target = httpx.put(f"http://{self.endpoint}/json/new?{url}", timeout=30).json()
        socket = self._sockets.enter_context(
            connect(target["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024, open_timeout=30))
        page = Page(socket)
        page.call("Page.enable")
        page.call("Runtime.enable")
        # a new tab starts on about:blank: wait until it shows the page asked for
        page.wait_for(f"location.href.startsWith({json.dumps(url)}) && document.readyState === 'complete'", 60)
        return page

    def close(self) -> None:
        if hasattr(self, "_sockets"):
            self._sockets.close()
        self.process.kill()
        self.process.wait(timeout=30)
        if self.process.stderr is not None:
            self.process.stderr.close()
