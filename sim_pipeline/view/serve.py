"""Serve the written view on loopback: one file, one URL, nothing else from the disk.

The standard library's `http.server` is enough for one reader on this machine; it is bound to 127.0.0.1 (never
0.0.0.0) because the page holds every transcript and the situations' hidden facts.
"""

from __future__ import annotations

import http.server
from pathlib import Path

from sim_pipeline.defaults import VIEW_HOST


class _OneFile(http.server.BaseHTTPRequestHandler):
    """GET / (or /<the file's name>) answers the file, read afresh so a re-written view shows on reload; any other
    path is 404, so no other file of its folder is reachable."""

    page: Path  # set on the subclass `server` makes

    def do_GET(self) -> None:  # noqa: N802 -- the name http.server dispatches to
        """The file, or 404 for any other path."""
        if self.path.split("?", 1)[0] not in ("/", f"/{self.page.name}"):
            self.send_error(404, f"only / is served (the view {self.page.name})")
            return
        body = self.page.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 -- http.server's signature
        """Quiet: a request line per reload would bury the URL the command printed."""


def server(page: Path, port: int) -> http.server.ThreadingHTTPServer:
    """A server of `page` bound to 127.0.0.1:`port` (0: a free port; `url` gives the one bound), not yet serving."""
    handler = type("ViewFile", (_OneFile,), {"page": Path(page).resolve()})
    return http.server.ThreadingHTTPServer((VIEW_HOST, port), handler)


def url(httpd: http.server.HTTPServer) -> str:
    """The address a browser opens: host and the port actually bound."""
    host, port = httpd.server_address[:2]
    return f"http://{host}:{port}/"
