"""Who holds a job item's lease: one identity per process, whatever the process is called.

A worker's name is a label for people (`HSSTORE_WORKER_NAME`, default host:device): two workers on one host may well
share it. Leases are held by the process — label, host, PID namespace, PID and a nonce drawn at start — so a
survivor's heartbeat never renews what a killed namesake held; those leases run out and the items go to whoever
claims them next. A restarted worker hands back at once what a dead predecessor on the same host held (same label,
same PID namespace, its PID gone), which is all a name stable across restarts was for.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from dataclasses import dataclass

_ID = re.compile(r"(?P<label>.*) \[(?P<host>\S+) pidns (?P<namespace>\d+) pid (?P<pid>\d+) (?P<nonce>[0-9a-f]+)\]")


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:  # no procfs: one namespace as far as we can tell
        return 0


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


@dataclass(frozen=True, slots=True)
class LeaseHolder:
    label: str
    host: str
    namespace: int
    pid: int
    nonce: str

    @classmethod
    def this_process(cls, label: str) -> LeaseHolder:
        return cls(label, socket.gethostname(), _pid_namespace(), os.getpid(), secrets.token_hex(4))

    @classmethod
    def parse(cls, holder_id: str) -> LeaseHolder | None:
        """The holder a lease names, or None for one written before leases named processes."""
        found = _ID.fullmatch(holder_id)
        if found is None:
            return None
        return cls(found["label"], found["host"], int(found["namespace"]), int(found["pid"]), found["nonce"])

    @property
    def id(self) -> str:
        return f"{self.label} [{self.host} pidns {self.namespace} pid {self.pid} {self.nonce}]"

    def succeeds(self, other: LeaseHolder) -> bool:
        """`other` was an earlier run of this worker, now dead: same label, same host and PID namespace (where a
        PID names one process), another run (nonce), and its PID no longer running (or now ours)."""
        same_slot = (other.label, other.host, other.namespace) == (self.label, self.host, self.namespace)
        return same_slot and other.nonce != self.nonce and (other.pid == self.pid or not _running(other.pid))
