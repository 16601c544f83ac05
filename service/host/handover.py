"""Handing the GPU over between SGLang and us, pluggable: SGLang's memory saver, operator commands, or nothing.

The ledger writes the intent to release *before* asking SGLang to let go, so a service that dies while holding the
GPU finds the hand-over half done at its next start and completes it (resumes SGLang) before anything else.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import Protocol

import httpx

from schemas.files import atomic_write
from schemas.timestamps import utc_now
from service.errors import HandoverFailed

log = logging.getLogger("hsstore.handover")


class GpuHandover(Protocol):
    name: str

    def release(self) -> None:
        """SGLang gives the GPU up (before we load)."""

    def resume(self) -> None:
        """SGLang takes the GPU back (after we unloaded); returns once it is healthy again."""


class NoHandover:
    name = "none"

    def release(self) -> None:
        return None

    def resume(self) -> None:
        return None


def _wait_healthy(url: str, timeout_s: float, http: httpx.Client) -> None:
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            response = http.get(url, timeout=10)
            if response.status_code == 200:
                return
            last = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(0.2)
    raise HandoverFailed(f"SGLang at {url} not healthy after {timeout_s:.0f} s ({last})")


class MemorySaverHandover:
    """SGLang's `--enable-memory-saver`: release/resume memory occupation, then `/health_generate`."""

    name = "memory_saver"

    def __init__(self, url: str, timeout_s: float = 600.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.http = httpx.Client(timeout=timeout_s)

    def _post(self, path: str) -> None:
        try:
            response = self.http.post(f"{self.url}{path}", json={})
        except httpx.HTTPError as exc:
            raise HandoverFailed(f"{path}: SGLang at {self.url} did not answer ({exc!r})") from None
        if response.status_code >= 300:
            raise HandoverFailed(f"{path}: SGLang answered {response.status_code}: {response.text[:300]}")

    def release(self) -> None:
        self._post("/release_memory_occupation")

    def resume(self) -> None:
        self._post("/resume_memory_occupation")
        _wait_healthy(f"{self.url}/health_generate", self.timeout_s, self.http)


class CommandHandover:
    """Operator commands (e.g. `systemctl stop sglang` / `systemctl start sglang`), then poll SGLang's `/health`."""

    name = "commands"

    def __init__(self, stop: str, start: str, url: str, timeout_s: float = 600.0) -> None:
        self.stop, self.start = shlex.split(stop), shlex.split(start)
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.http = httpx.Client(timeout=timeout_s)

    def _run(self, command: list[str]) -> None:
        result = subprocess.run(command, capture_output=True, text=True, timeout=self.timeout_s)
        if result.returncode != 0:
            raise HandoverFailed(f"{shlex.join(command)} exited {result.returncode}: {result.stderr[-300:]}")

    def release(self) -> None:
        self._run(self.stop)

    def resume(self) -> None:
        self._run(self.start)
        _wait_healthy(f"{self.url}/health", self.timeout_s, self.http)


class HandoverLedger:
    """`held`: we asked SGLang for the GPU and have not given it back yet. Kept in a file beside the store."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def held(self) -> bool:
        try:
            return json.loads(self.path.read_text()).get("state") == "released"
        except (FileNotFoundError, json.JSONDecodeError):
            return False

    def _write(self, state: str) -> None:
        # durable: this is the write-ahead record a restart relies on to give SGLang its GPU back
        atomic_write(self.path, json.dumps({"state": state, "at": utc_now(), "pid": os.getpid()}).encode())

    def mark_released(self) -> None:
        self._write("released")

    def mark_resumed(self) -> None:
        self._write("resumed")
