"""`view --serve`: the written file, byte for byte, on 127.0.0.1 only (never 0.0.0.0), at the URL it prints."""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from sim_pipeline.cli import main
from sim_pipeline.view.serve import server, url

PROC_TCP = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
LISTEN = "0A"  # the kernel's TCP_LISTEN state in /proc/net/tcp
URL_LINE = re.compile(r"at (http://127\.0\.0\.1:(\d+)/) ")


def _listeners(port: int) -> set[str]:
    """The local addresses (kernel hex, e.g. 0100007F is 127.0.0.1, 00000000 is 0.0.0.0) listening on `port`."""
    found = set()
    for table in PROC_TCP:
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if int(hex_port, 16) == port and fields[3] == LISTEN:
                found.add(address)
    return found


def _other_address() -> str | None:
    """An address of this machine that is not loopback (the one its default route leaves from), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: no packet is sent by a UDP connect
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def _get(address: str) -> bytes:
    with urllib.request.urlopen(address, timeout=30) as answer:  # noqa: S310 -- a loopback URL the test built
        return answer.read()


@pytest.fixture
def serving(tmp_path):
    page = tmp_path / "report.html"
    page.write_bytes("<!DOCTYPE html><p>é view</p>".encode() * 1000)
    httpd = server(page, 0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield page, httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(10)


def test_the_server_answers_the_file_on_loopback_only(serving):
    page, httpd = serving
    host, port = httpd.server_address[:2]
    assert host == "127.0.0.1" and port > 0 and url(httpd) == f"http://127.0.0.1:{port}/"
    assert _get(url(httpd)) == page.read_bytes()
    assert _get(url(httpd) + page.name) == page.read_bytes()
    if PROC_TCP[0].exists():
        assert _listeners(port) == {"0100007F"}  # 127.0.0.1, not 00000000 (every interface)
    other = _other_address()
    if other is not None:
        with pytest.raises(OSError):
            socket.create_connection((other, port), timeout=5).close()


def test_no_other_file_of_its_folder_is_reachable(serving):
    page, httpd = serving
    (page.parent / "secret.txt").write_text("not for the browser")
    for path in ("secret.txt", "../secret.txt", "%2e%2e/secret.txt"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            _get(url(httpd) + path)
        assert refused.value.code == 404


def test_a_rewritten_view_is_served_on_reload(serving):
    page, httpd = serving
    page.write_text("<p>rewritten</p>")
    assert _get(url(httpd)) == b"<p>rewritten</p>"


def test_port_without_serve_is_refused(capsys, tmp_path):
    assert main(["view", "--out", str(tmp_path / "r.html"), "--port", "8765"]) == 2
    assert "--port 8765 without --serve" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


def test_view_serve_serves_the_written_file_until_ctrl_c(two_version_run, tmp_path):
    base, home = two_version_run
    out = tmp_path / "served.html"
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-m", "sim_pipeline.cli", "view", "--domain", "retail", "--warehouse", str(base),
               "--out", str(out), "--serve", "--port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = []
        for line in process.stdout:  # "wrote ...", then "serving ... at URL ..."
            lines.append(line)
            if line.startswith("serving"):
                break
        match = URL_LINE.search(lines[-1]) if lines else None
        assert match, f"no URL printed: {lines} {process.stderr.read() if process.poll() is not None else ''}"
        assert _get(match.group(1)) == out.read_bytes()
        if PROC_TCP[0].exists():
            assert _listeners(int(match.group(2))) == {"0100007F"}
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
        assert process.stdout.read().strip() == "stopped"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
