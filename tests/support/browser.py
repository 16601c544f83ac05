"""Debian's chromium, headless, driven over the Chrome DevTools Protocol (its own documented wire: JSON commands on a
WebSocket): open a page, read it with JavaScript, collect every console error, uncaught exception and failed load,
and take a screenshot. A few dozen lines where a browser-automation framework would bring its own browser builds."""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

if TYPE_CHECKING:  # the plugin loads for every test module, the GPU machine's too, which has no websockets
    from websockets.sync.client import ClientConnection


class Page:
    """One tab: `evaluate` runs JavaScript in it; `errors` gathers what the page got wrong, as it happens."""

    def __init__(self, socket: ClientConnection) -> None:
        self.socket = socket
        self.errors: list[str] = []
        self._ids = itertools.count(1)
        self._answers: dict[int, dict] = {}
        self._arrived = threading.Condition()
        threading.Thread(target=self._listen, daemon=True).start()
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")

    def _listen(self) -> None:
        for raw in self.socket:
            message = json.loads(raw)
            if "id" in message:
                with self._arrived:
                    self._answers[message["id"]] = message
                    self._arrived.notify_all()
                continue
            method, params = message.get("method"), message.get("params", {})
            if method == "Runtime.exceptionThrown":
                self.errors.append(f"uncaught: {params['exceptionDetails'].get('text')}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                self.errors.append(f"console.error: {[a.get('value') for a in params.get('args', [])]}")
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                self.errors.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")

    def send(self, method: str, **params: Any) -> dict:
        number = next(self._ids)
        self.socket.send(json.dumps({"id": number, "method": method, "params": params}))
        with self._arrived:
            if not self._arrived.wait_for(lambda: number in self._answers, timeout=30):
                raise TimeoutError(f"{method}: no answer from the browser")
            answer = self._answers.pop(number)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return dict(answer.get("result", {}))

    def open(self, url: str) -> None:
        self.send("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete'", what=f"{url} to load")

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def text(self, element_id: str) -> str:
        return str(self.evaluate(f"document.getElementById({json.dumps(element_id)}).textContent"))

    def wait_for(self, expression: str, timeout: float = 60, what: str = "the page") -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"waited {timeout:g} s for {what}: {expression}")

    def screenshot(self, path: Path) -> None:
        shot = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(shot["data"]))


class Browser:
    def __init__(self, width: int = 1280, height: int = 900) -> None:
        from tests.conftest import free_port  # this module is one of conftest's plugins: imported before it is

        executable = shutil.which("chromium")
        if executable is None:
            raise RuntimeError("no chromium on this machine (scripts/packages-for-tests.sh installs Debian's)")
        self.port = free_port()
        self.profile = tempfile.TemporaryDirectory(ignore_cleanup_errors=True)
        self.proc = subprocess.Popen(
            [
                executable,
                "--headless=new",
                "--no-sandbox",  # as root in CI; the page is ours, on loopback
                "--disable-gpu",
                "--no-first-run",
                f"--window-size={width},{height}",
                f"--remote-debugging-port={self.port}",
                "--remote-debugging-address=127.0.0.1",
                f"--user-data-dir={self.profile.name}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its helper processes in one group, stopped together
        )
        self._sockets: list[ClientConnection] = []
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/json/version", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("chromium did not open its DevTools port") from None
                time.sleep(0.1)

    def page(self) -> Page:
        target = httpx.put(f"http://127.0.0.1:{self.port}/json/new?about:blank", timeout=10).json()
        from websockets.sync.client import connect

        socket = connect(target["webSocketDebuggerUrl"], max_size=None, open_timeout=10)
        self._sockets.append(socket)
        return Page(socket)

    def close(self) -> None:
        for socket in self._sockets:
            socket.close()
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=15)
        self.profile.cleanup()


@pytest.fixture
def browser() -> Iterator[Callable[[], Page]]:
    """`browser()`: a new tab of one headless chromium, closed after the test."""
    opened = Browser()
    yield opened.page
    opened.close()
