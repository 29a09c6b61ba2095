"""One `sim-pipeline` process per partition at a time: an exclusive OS file lock per partition, which the kernel
releases when the process holding it ends, however it ends (SIGKILL and out-of-memory included).

Why flock and not a lease in the instance: a lease outlives a killed process until someone notices its pid is gone,
while a flock dies with the process. The lock file keeps the last holder's pid, host, start time and command, so a
refusal can say who holds the partition; a file left behind by a dead holder is never taken for a live lock.
flock is per host (and unreliable over NFS): the lock directory must be on a local disk. Lock files are kept after
use (deleting one would race with a process opening it): one small file per partition ever run. A child process
forked without exec would keep a lock past its parent; the descriptors are not inherited across exec (PEP 446).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sim_pipeline.errors import PartitionBusy
from sim_pipeline.redaction import redact

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")  # a lock name becomes a file name


def holder_record() -> dict[str, Any]:
    """Who this process is, as a lock file records it: pid, host, start time (UTC) and command line."""
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": redact(" ".join([Path(sys.argv[0]).name, *sys.argv[1:]]))}


class PartitionClaim:
    """Exclusive locks on named partitions, held until `release` (or the end of a `with` block, or the process).

    Each lock is its own open file description, so two threads of one process exclude each other as two processes
    do. Names are taken in sorted order, so two claims that wait never deadlock."""

    def __init__(self, directory: Path | str, *, wait: bool = False, log: Callable[[str], None] = print) -> None:
        self.directory = Path(directory)
        self.wait = wait
        self.log = log
        self._held: dict[str, int] = {}  # name -> the open file descriptor holding its lock

    def path(self, name: str) -> Path:
        """The lock file of a name."""
        return self.directory / f"{_UNSAFE.sub('_', name)}.lock"

    def holds(self, name: str) -> bool:
        """Whether this claim holds the name."""
        return name in self._held

    def acquire(self, names: Iterable[str]) -> None:
        """Take every name not yet held, all or none: a name another process holds is waited for (`wait`) or raises
        PartitionBusy naming its holder, releasing the names this call took."""
        taken: list[str] = []
        try:
            for name in sorted(set(names) - set(self._held)):
                self._lock(name, wait=self.wait)
                taken.append(name)
        except BaseException:
            for name in taken:
                self._unlock(name)
            raise

    @contextmanager
    def held(self, name: str) -> Iterator[None]:
        """Hold the name for the block, waiting for it when another process holds it (steps that call no model and
        take seconds: waiting beats refusing a command half way); a name already held is simply kept."""
        if name in self._held:
            yield
            return
        self._lock(name, wait=True)
        try:
            yield
        finally:
            self._unlock(name)

    def release(self) -> None:
        """Release every name held."""
        for name in list(self._held):
            self._unlock(name)

    def __enter__(self) -> PartitionClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _lock(self, name: str, *, wait: bool) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path(name), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = self._holder(fd)
                if not wait:
                    raise PartitionBusy(f"partition lock {self.path(name)} is held by {describe(holder)}. Fix: "
                                        "wait for it to finish, or wait for it with --wait", name, holder) from None
                self.log(f"  waiting for {name}: {describe(holder)}")
                fcntl.flock(fd, fcntl.LOCK_EX)
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(holder_record()) + "\n").encode(), 0)
        except BaseException:
            os.close(fd)  # closing the descriptor drops its lock, if it got one
            raise
        self._held[name] = fd

    def _unlock(self, name: str) -> None:
        fd = self._held.pop(name)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    @staticmethod
    def _holder(fd: int) -> dict[str, Any]:
        """The record the current holder wrote ({} when it has not written it yet)."""
        try:
            record = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        except ValueError:
            record = {}
        return record if isinstance(record, dict) else {}


def describe(holder: dict[str, Any]) -> str:
    """A lock holder in words: 'pid 123 on host, since <time> (sim-pipeline run ...)'."""
    if not holder.get("pid"):
        return "another process (it is still writing who it is)"
    return (f"pid {holder['pid']} on {holder.get('host', '?')}, since {holder.get('since', '?')} "
            f"({holder.get('command', '?')})")
