"""A local OpenAI-compatible chat-completions server whose replies a test scripts.

Tests that must exercise the real litellm HTTP path (request building, the OpenAI SDK, response parsing and the
exception mapping) point litellm at `ScriptedServer.base_url`; a `responder` callable decides every reply:

    with ScriptedServer(replies({"content": "hi"}, 500)) as server:
        litellm.completion(model="openai/scripted-agent", messages=..., api_base=server.base_url, api_key="sk-test")

A responder gets the parsed request body and returns one of:
  - a reply dict `{"content": str | None, "tool_calls": [{"name": str, "arguments": dict | str, "id"?: str}],
    "finish_reason"?: str, "logprob_per_token"?: float | list[float], "logprobs"?: False}`: the server wraps it in a
    full chat.completion (usage and, when the request asks for logprobs and the reply does not say `logprobs:
    False`, as some backends do on tool-call turns, per-token logprobs over whitespace tokens);
  - an int: that HTTP status with an OpenAI-style error body;
  - a tuple `(status, body)`: sent as is (a dict as JSON, a str verbatim, e.g. invalid JSON with status 200), or
    `(status, body, headers)` with response headers (e.g. `{"Retry-After": "1"}`).
The server records each request's body, headers and arrival time (`requests`, `headers`, `times`).
A responder that raises yields a 500. The standard library only: no dependency beyond what tests already have.
"""

from __future__ import annotations

import http
import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = dict[str, Any] | int | tuple[int, dict[str, Any] | str] | tuple[int, dict[str, Any] | str, dict[str, str]]
Responder = Callable[[dict[str, Any]], Reply]

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
CREATED = 1_700_000_000  # a fixed timestamp: identical requests give byte-identical responses
DEFAULT_LOGPROB = -0.1
_REPLY_KEYS = {"content", "tool_calls", "finish_reason", "logprob_per_token", "logprobs"}
_CALL_KEYS = {"name", "arguments", "id"}


def _tokens(text: str) -> list[str]:
    """Whitespace tokens that keep their leading whitespace, like real BPE tokens: joined they give the text back."""
    return re.findall(r"\s*\S+", text)


def _prompt_tokens(messages: Any) -> int:
    count = 0
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            count += len(content.split())
        elif isinstance(content, list):  # content parts: only text parts carry tokens here
            count += sum(len(str(part.get("text", "")).split()) for part in content if isinstance(part, dict))
    return count


def _logprob_values(spec: Any, n: int) -> list[float]:
    if spec is None:
        return [DEFAULT_LOGPROB] * n
    if isinstance(spec, int | float):
        return [float(spec)] * n
    values = [float(v) for v in spec]
    if len(values) != n:
        raise ValueError(f"logprob_per_token has {len(values)} values for {n} tokens")
    return values


def build_completion(reply: dict[str, Any], request: dict[str, Any], index: int) -> dict[str, Any]:
    """The chat.completion JSON for a scripted reply dict (the request supplies the model and the logprobs flag)."""
    unknown = set(reply) - _REPLY_KEYS
    if unknown:
        # A typo in a script must fail loudly (as a 500 naming the key), not silently drop part of the reply.
        raise ValueError(f"unknown reply keys {sorted(unknown)}; allowed: {sorted(_REPLY_KEYS)}")
    content = reply.get("content")
    calls = []
    for n, call in enumerate(reply.get("tool_calls") or []):
        unknown = set(call) - _CALL_KEYS
        if unknown or "name" not in call:
            raise ValueError(f"tool call {call!r}: needs 'name', allows {sorted(_CALL_KEYS)}")
        arguments = call.get("arguments", {})
        calls.append({"id": call.get("id") or f"call_{n}", "type": "function",
                      "function": {"name": call["name"],
                                   "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}})
    # A tool-call-only reply still has tokens: score the serialized calls, as a provider would.
    text = content or " ".join(f"{c['function']['name']} {c['function']['arguments']}" for c in calls)
    tokens = _tokens(text)
    prompt = _prompt_tokens(request.get("messages"))
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    choice: dict[str, Any] = {"index": 0, "message": message,
                              "finish_reason": reply.get("finish_reason") or ("tool_calls" if calls else "stop"),
                              "logprobs": None}
    if request.get("logprobs") is True and reply.get("logprobs", True):  # logprobs: False leaves them out
        values = _logprob_values(reply.get("logprob_per_token"), len(tokens))
        choice["logprobs"] = {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode("utf-8")), "top_logprobs": []}
                                          for t, lp in zip(tokens, values)]}
    return {
        "id": f"chatcmpl-scripted-{index}", "object": "chat.completion", "created": CREATED,
        "model": request.get("model", "scripted"), "choices": [choice],
        "usage": {"prompt_tokens": prompt, "completion_tokens": len(tokens), "total_tokens": prompt + len(tokens)},
    }


def error_body(status: int, message: str | None = None) -> dict[str, Any]:
    """An OpenAI-style error body for an HTTP status."""
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Scripted status"
    # The words "quota"/"insufficient" are avoided on purpose: the gateway reads them as a fatal quota error.
    return {"error": {"message": message or f"scripted {status} {phrase}",
                      "type": "server_error" if status >= 500 else "invalid_request_error", "param": None,
                      "code": str(status)}}


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and hung up mid-reply is a scenario tests script, not a failure to print.
        pass


class ScriptedServer:
    """An OpenAI-compatible server on 127.0.0.1 (OS-chosen port) answering chat completions with `responder`."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self._lock = threading.Lock()
        self._requests: list[dict[str, Any] | None] = []
        self._headers: list[dict[str, str]] = []
        self._times: list[float] = []
        self._statuses: list[int] = []
        self._errors: list[str] = []
        self._misses: list[tuple[str, str]] = []
        self._httpd: _QuietServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> ScriptedServer:
        """Bind and serve in a daemon thread; returns self."""
        if self._httpd is not None:
            raise RuntimeError("ScriptedServer already started")
        self._httpd = _QuietServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"scripted-server-{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what a test reads ---------------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        """The OS-chosen port."""
        if self._httpd is None:
            raise RuntimeError("ScriptedServer not started")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, e.g. http://127.0.0.1:PORT/v1."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[dict[str, Any] | None]:
        """A snapshot of the chat request bodies received, in order (None for a body that was not a JSON object)."""
        with self._lock:
            return list(self._requests)

    @property
    def headers(self) -> list[dict[str, str]]:
        """The headers of each entry of `requests` (names lower-cased)."""
        with self._lock:
            return list(self._headers)

    @property
    def times(self) -> list[float]:
        """When each entry of `requests` arrived (time.monotonic())."""
        with self._lock:
            return list(self._times)

    @property
    def statuses(self) -> list[int]:
        """The HTTP status returned for each entry of `requests`."""
        with self._lock:
            return list(self._statuses)

    @property
    def errors(self) -> list[str]:
        """Why each 500 caused by the responder or a malformed script happened (repr of the exception)."""
        with self._lock:
            return list(self._errors)

    @property
    def misses(self) -> list[tuple[str, str]]:
        """(method, path) of requests to paths this server does not serve (answered 404)."""
        with self._lock:
            return list(self._misses)

    # -- serving ---------------------------------------------------------------------------------------------------
    def _answer(self, raw: bytes, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        """Status, body and extra headers for one chat request; records it. Runs on a handler thread."""
        try:
            request = json.loads(raw or b"null")
        except ValueError:
            request = None
        with self._lock:
            index = len(self._requests)
            self._requests.append(request if isinstance(request, dict) else None)
            self._headers.append(headers)
            self._times.append(time.monotonic())
            self._statuses.append(0)  # placeholder keeps the lists aligned while the responder runs
        if not isinstance(request, dict):
            with self._lock:
                self._statuses[index] = 400
            return 400, json.dumps(error_body(400, "request body is not a JSON object")).encode(), {}
        extra: dict[str, str] = {}
        try:
            status, payload, extra = self._render(self.responder(request), request, index)
        except Exception as exc:  # noqa: BLE001 -- any responder or script error is the scripted 500, seen via .errors
            status, payload = 500, error_body(500, f"scripted responder raised {exc!r}")
            with self._lock:
                self._errors.append(repr(exc))
        with self._lock:
            self._statuses[index] = status
        return status, payload if isinstance(payload, bytes) else json.dumps(payload).encode(), extra

    @staticmethod
    def _render(result: Reply, request: dict[str, Any],
                index: int) -> tuple[int, dict[str, Any] | bytes, dict[str, str]]:
        if isinstance(result, bool):  # bool is an int subclass; True as a status is surely a scripting mistake
            raise TypeError(f"responder returned {result!r}")
        if isinstance(result, int):
            return result, error_body(result), {}
        if isinstance(result, tuple):
            status, body, *rest = result
            return int(status), body.encode() if isinstance(body, str) else body, dict(rest[0]) if rest else {}
        if isinstance(result, dict):
            return 200, build_completion(result, request, index), {}
        raise TypeError(f"responder returned {type(result).__name__}; expected dict, int or (status, body)")

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            # HTTP/1.0: one request per connection, so no idle keep-alive threads outlive a test.
            protocol_version = "HTTP/1.0"

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep pytest output clean: no access log on stderr

            def _send(self, status: int, body: bytes, extra: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for name, value in (extra or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def _miss(self) -> None:
                with server._lock:
                    server._misses.append((self.command, self.path))
                self._send(404, json.dumps(error_body(404, f"no route {self.command} {self.path}")).encode())

            def do_POST(self) -> None:  # the name BaseHTTPRequestHandler dispatches to
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if self.path.split("?", 1)[0].rstrip("/") not in CHAT_PATHS:
                    self._miss()
                    return
                self._send(*server._answer(raw, {k.lower(): v for k, v in self.headers.items()}))

            def do_GET(self) -> None:  # the name BaseHTTPRequestHandler dispatches to
                self._miss()

        return Handler


def always(status: int) -> Responder:
    """A responder that answers every request with `status` and an OpenAI-style error body."""
    return lambda request: status


def replies(*items: Reply) -> Responder:
    """A responder that answers `items` in order, then repeats the last one (thread-safe)."""
    if not items:
        raise ValueError("replies() needs at least one item")
    lock = threading.Lock()
    position = [0]

    def responder(request: dict[str, Any]) -> Reply:
        with lock:
            item = items[min(position[0], len(items) - 1)]
            position[0] += 1
        return item

    return responder
