"""`make dev` stopped with Ctrl-C leaves nothing behind: what the command started, and what that started, is stopped."""

import os
import signal
import subprocess
import sys
import textwrap
import time

# A stand-in for dagster dev: it exits on Ctrl-C, but first starts a worker that ignores Ctrl-C and would run on
# (as the code server's run workers outlived dagster dev), and prints the worker's pid.
COMMAND = textwrap.dedent("""
    import signal, subprocess, sys, time
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    print(worker.pid, flush=True)
    try:
        time.sleep(300)
    except KeyboardInterrupt:
        sys.exit(0)
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is gone for our purpose
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_ctrl_c_stops_the_command_and_every_process_it_started():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    launcher = subprocess.Popen(
        [sys.executable, "-c", "import sys; from sim_pipeline.defs.dev_server import run; "
                               f"sys.exit(run([sys.executable, '-c', {COMMAND!r}], grace_s=10, kill_after_s=2))"],
        stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
    worker = int(launcher.stdout.readline())
    assert _alive(worker)
    os.killpg(launcher.pid, signal.SIGINT)  # what the terminal's Ctrl-C does: the whole foreground group
    assert launcher.wait(timeout=20) == 130
    deadline = time.monotonic() + 5
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker), "a process the command started outlived Ctrl-C"
