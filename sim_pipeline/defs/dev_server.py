"""`make dev`: run `dagster dev` so that Ctrl-C stops everything it started.

On Ctrl-C, dagster dev stops its webserver and daemon and exits, but the run workers its code server spawned (a
backfill's or a sensor's runs in progress) outlived it for a minute or more, and `make` had already returned the
prompt. Here dagster dev runs in a process group of its own: Ctrl-C is passed on to it once, and when it has exited
(or after `DEV_STOP_GRACE_S`), every process left in its group is terminated, then killed. Runs stopped this way are
marked failed by run monitoring or by the next `sim-pipeline` command.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from sim_pipeline import defaults


def _restore_signals() -> None:
    """In the child: Ctrl-C's default action (a shell that started `make` in the background ignores it), own group."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.setpgid(0, 0)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def stop_group(group: int, child: subprocess.Popen, *, grace_s: float, kill_after_s: float) -> None:
    """Wait up to grace_s for the child to exit, then terminate its whole process group, then kill what is left."""
    try:
        child.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    for sig, wait_s in ((signal.SIGTERM, kill_after_s), (signal.SIGKILL, 0.0)):
        if not _group_alive(group):
            return
        os.killpg(group, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _group_alive(group):
            time.sleep(0.1)
    child.wait()


def run(command: list[str], *, grace_s: float = defaults.DEV_STOP_GRACE_S,
        kill_after_s: float = defaults.DEV_KILL_AFTER_S) -> int:
    """Run `command` in its own process group; on SIGINT/SIGTERM or its exit, stop every process of that group."""
    child = subprocess.Popen(command, preexec_fn=_restore_signals)
    stopping = {"signal": None}

    def forward(signum: int, _frame: object) -> None:
        if stopping["signal"] is None:  # once: a second Ctrl-C must not cut dagster dev's own shutdown short
            stopping["signal"] = signum
            os.killpg(child.pid, signal.SIGINT)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    while child.poll() is None and stopping["signal"] is None:
        try:
            child.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
    code = child.returncode
    stop_group(child.pid, child, grace_s=grace_s, kill_after_s=kill_after_s)
    return 130 if stopping["signal"] is not None else (code if code is not None else child.returncode)


def main(argv: list[str] | None = None) -> int:
    """Command line: the command to run after `--` (`python -m sim_pipeline.defs.dev_server -- dagster dev ...`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m sim_pipeline.defs.dev_server -- <command> [args ...]", file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
