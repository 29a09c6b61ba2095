"""A situation's sandbox world as an MCP server: the domain's tools and `message_user`, answered by the simulated user.

One `WorldSession` is one rollout: an Episode (the world, the user, the transcript) that every MCP call of the
session acts on, under one lock so that concurrent calls are recorded in the order the world saw them. The
transcript is the one the rollout runner records for a chat model and the RL environment records for a trainer:
each domain tool call is an agent turn with one tool call and its result; each `message_user` is an agent text turn
and the user's answer. The agent's system prompt is the server's `instructions`; the customer's opening is the
`opening` prompt. Each result carries `structured_content` too: a domain tool's the world's result; message_user's
{reply, ended}, where `ended` says the conversation is over (the harness may then close its session and exit).

Served over stdio (`sim-pipeline serve-world`, one session per process) or over streamable HTTP on 127.0.0.1 (the
runner's `mcp-agent:` backend, one server per rollout). The official `mcp` SDK (the [mcp] extra) is imported only
here, when a world is served.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim_pipeline import defaults
from sim_pipeline.errors import ModelCallError, SimPipelineError
from sim_pipeline.models.gateway import Completion, Gateway, ProviderError, Sampling
from sim_pipeline.protocol.environment_tools import MESSAGE_USER
from sim_pipeline.protocol.statuses import AGENT_ERROR, OK, TURN_CAP, USER_ERROR, USER_LEFT
from sim_pipeline.protocol.user_events import (
    FINISH_AGENT_EXITED,
    FINISH_ERROR,
    FINISH_TURN_CAP,
    FINISH_USER_LEFT,
    FINISH_USER_SATISFIED,
    LEAVE,
    SATISFIED,
)
from sim_pipeline.domain import Domain
from sim_pipeline.rollout.environment import MESSAGE_USER_SCHEMA
from sim_pipeline.rollout.episode import Episode, UserProtocolError, text_message
from sim_pipeline.situation import Situation
from sim_pipeline.world.state import State

if TYPE_CHECKING:
    from sim_pipeline.rollout.runner import Policy

OPENING_PROMPT = "opening"  # the MCP prompt holding the customer's first message
# message_user as an MCP tool: a harness has no turn "without a tool call", so the closing words go through it too.
MESSAGE_USER_DESCRIPTION = (
    "Send the customer a message (a question, a confirmation request, an update, or your closing words) and return "
    "their reply. Everything the customer reads goes through this tool. The conversation ends when the customer's "
    "request is settled and you have told them, when they leave, or when they say they are done; after that every "
    "tool answers that the conversation is over.")
_READ_ONLY_KINDS = ("read", "verify", "compute")  # kinds that change nothing in the world (annotations' readOnlyHint)
OVER = "(The conversation is over: nothing was done.)"
_UNREACHABLE = "(The customer could not be reached. The conversation has ended.)"


def _mcp() -> Any:
    """The `mcp` SDK, or the error that says how to install it."""
    try:
        import mcp
        import mcp.server.lowlevel  # noqa: F401 -- the submodules used below
        import mcp.types  # noqa: F401
    except ImportError:
        raise SimPipelineError("serving the world over MCP needs the `mcp` package. Fix: pip install -e '.[mcp]' "
                               "(make test installs it)") from None
    return mcp


class WorldSession:
    """One rollout's world behind MCP: the episode it acts on, the simulated user, and how the conversation ended."""

    def __init__(self, episode: Episode, *, gateway: Gateway, user_model: str, user_sampling: Sampling,
                 max_turns: int = defaults.MAX_TURNS) -> None:
        self.episode = episode
        self.gateway = gateway
        self.user_model = user_model
        self.user_sampling = user_sampling
        self.max_turns = max_turns
        self.ending: tuple[str, str] | None = None  # (status, finish reason) once the conversation is over
        self.error: str | None = None  # the user model's failure, when that ended it
        self.fatal: ModelCallError | None = None  # an auth/quota error: the run must stop (the runner re-raises it)
        self.user_calls: list[Completion] = []  # the user model's completions (their tokens and cost)
        self.ended = asyncio.Event()
        self._lock = asyncio.Lock()

    def tools(self) -> list[dict[str, Any]]:
        """The session's tools as (name, description, input schema, read-only) records: the domain's, then message_user."""
        out = []
        for schema in self.episode.domain.tool_schemas:
            function = schema["function"]
            tool = self.episode.domain.tool(function["name"])
            out.append({"name": function["name"], "description": function.get("description") or "",
                        "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
                        "read_only": tool is not None and tool.kind in _READ_ONLY_KINDS})
        out.append({"name": MESSAGE_USER, "description": MESSAGE_USER_DESCRIPTION, "input_schema": MESSAGE_USER_SCHEMA,
                    "read_only": False})
        return out

    def instructions(self) -> str:
        """The agent's system prompt, as the transcript records it (the customer's opening is the `opening` prompt)."""
        return str(self.episode.messages[0]["content"])

    def _turns(self) -> int:
        return sum(1 for m in self.episode.messages if m["role"] == "assistant")

    def _end(self, status: str, finish: str) -> None:
        if self.ending is None:
            self.ending = (status, finish)
            self.ended.set()

    async def call(self, name: str, arguments: dict[str, Any] | None) -> tuple[str, bool, dict[str, Any]]:
        """Run one MCP tool call: (the text the harness reads, whether it is an MCP tool error, the structured
        result: the world's answer to a domain tool; {reply, ended} for message_user)."""
        async with self._lock:  # one call at a time: the transcript is the order the world saw them in
            if self.ending is not None:
                return OVER, True, {"reply": None, "ended": True}
            if self._turns() >= self.max_turns:
                self._end(TURN_CAP, FINISH_TURN_CAP)
                return (f"(The conversation is over its {self.max_turns} agent turns: nothing was done.)", True,
                        {"reply": None, "ended": True})
            if name == MESSAGE_USER:
                return await self._message_user((arguments or {}).get("message"))
            call = {"id": f"call_{len(self.episode.messages)}", "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments or {}, sort_keys=True)}}
            # An unknown tool or bad arguments are the world's answer (a rejection the oracle and rules see), as
            # when a chat model calls them.
            (result,) = self.episode.act({"role": "assistant", "content": None, "tool_calls": [call]})
            return json.dumps(result, sort_keys=True), False, result

    async def _message_user(self, message: Any) -> tuple[str, bool, dict[str, Any]]:
        if not isinstance(message, str) or not message.strip():
            return "(Your message was empty or not text: nothing was sent.)", True, {"reply": None, "ended": False}
        ending = self.episode.reply(text_message("assistant", message))
        if ending:  # the world shows the goal met (or a hand-off) and the agent has said so: as the runner ends it
            self._end(*ending)
            return ("(The customer has read your message. The conversation has ended.)", False,
                    {"reply": None, "ended": True})
        try:
            said, decision = await self.episode.user_turn(self.gateway, self.user_model, self.user_sampling)
        except ProviderError as exc:  # not the agent's conduct: the row keeps the error and is never graded
            if isinstance(exc, UserProtocolError):
                self.user_calls.append(exc.completion)  # answered outside the protocol: the call was still made
            self.error = str(exc)
            self._end(USER_ERROR, FINISH_ERROR)
            return _UNREACHABLE, True, {"reply": None, "ended": True}
        except ModelCallError as exc:  # auth or quota: every later call fails the same way; the run stops
            self.fatal = exc
            self.error = str(exc)
            self._end(USER_ERROR, FINISH_ERROR)
            return _UNREACHABLE, True, {"reply": None, "ended": True}
        self.user_calls.append(said)
        if decision == LEAVE:
            self._end(USER_LEFT, FINISH_USER_LEFT)
        elif decision == SATISFIED:
            self._end(OK, FINISH_USER_SATISFIED)
        reply = str(self.episode.messages[-1]["content"])
        return reply, False, {"reply": reply, "ended": self.ending is not None}


def mcp_server(session: WorldSession, name: str = "sim-pipeline-world") -> Any:
    """The session as an `mcp` low-level Server: tools/list, tools/call, prompts/list and prompts/get."""
    _mcp()
    from mcp import types
    from mcp.server.lowlevel import Server

    tools = [types.Tool(name=t["name"], description=t["description"], input_schema=t["input_schema"],
                        annotations=types.ToolAnnotations(read_only_hint=True) if t["read_only"] else None)
             for t in session.tools()]

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: Any) -> Any:
        text, failed, structured = await session.call(params.name, params.arguments)
        return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=structured,
                                    is_error=failed)

    async def list_prompts(ctx: Any, params: Any) -> Any:
        return types.ListPromptsResult(prompts=[types.Prompt(name=OPENING_PROMPT,
                                                             description="The customer's first message")])

    async def get_prompt(ctx: Any, params: Any) -> Any:
        if params.name != OPENING_PROMPT:
            raise ValueError(f"no prompt '{params.name}': this server has '{OPENING_PROMPT}'")
        opening = types.PromptMessage(role="user", content=types.TextContent(text=session.episode.opening))
        return types.GetPromptResult(description="The customer's first message", messages=[opening])

    return Server(name, title=session.episode.domain.title, instructions=session.instructions(),
                  on_list_tools=list_tools, on_call_tool=call_tool, on_list_prompts=list_prompts,
                  on_get_prompt=get_prompt)


async def serve_stdio(session: WorldSession) -> None:
    """Serve the session on this process's stdin/stdout until the client closes it."""
    _mcp()
    from mcp.server.stdio import stdio_server

    server = mcp_server(session)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


@asynccontextmanager
async def serve_http(session: WorldSession) -> AsyncIterator[str]:
    """Serve the session over streamable HTTP on 127.0.0.1 (a port of the system's choosing); yields the URL."""
    _mcp()
    import uvicorn

    class Server(uvicorn.Server):
        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            # Many rollouts serve at once in the runner's process: their servers must not swap its signal handlers
            # (uvicorn restores each server's predecessors, out of order when they overlap). Ctrl-C stays the run's.
            yield

    app = mcp_server(session).streamable_http_app()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))  # bound before the harness starts: no race for a port, no port to configure
    port = sock.getsockname()[1]
    server = Server(uvicorn.Config(app, lifespan="on", log_level="warning", access_log=False))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():  # it failed to start: its exception says why
                task.result()
                raise SimPipelineError("the world's MCP server stopped before it started")
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        await task
        sock.close()


def seed_situations(domain: Domain, seed: int, n_phrasings: int) -> tuple[State, list[Situation]]:
    """A seed's world and its planned situations, built as the pipeline's world and situations steps build them."""
    from sim_pipeline.axes import axis_values
    from sim_pipeline.cover import covering_array
    from sim_pipeline.search.situations import build_situations
    from sim_pipeline.world.state import build_state

    state = build_state(domain, seed)
    cells = covering_array(axis_values(domain), seed=seed, constraints=domain.constraints)
    table = build_situations(domain, state, cells, seed=seed, n_phrasings=n_phrasings)
    return state, [Situation.from_row(r) for r in table.to_dict("records")]


def find_situation(situations: list[Situation], situation_id: str, phrasing_index: int) -> Situation:
    """The situation of that id, with an opening of that index; else an error listing some ids."""
    found = next((s for s in situations if s.situation_id == situation_id), None)
    if found is None:
        shown = ", ".join(s.situation_id for s in situations[:5])
        raise SimPipelineError(f"--situation {situation_id}: no situation of that id in this seed ({len(situations)} "
                               f"planned, e.g. {shown}). Fix: `sim-pipeline serve-world --list` prints them")
    if not 0 <= phrasing_index < len(found.phrasings):
        raise SimPipelineError(f"--phrasing {phrasing_index}: situation {situation_id} has {len(found.phrasings)} "
                               f"openings. Fix: give 0..{len(found.phrasings) - 1}")
    return found


async def serve_situation(situation: Situation, *, domain: Domain, state: State, gateway: Gateway,
                          policy: Policy, phrasing_index: int = 0, sample_index: int = 0,
                          serve: Callable[[WorldSession], Awaitable[None]] | None = None) -> dict[str, Any]:
    """Serve one situation's world to one MCP session (stdio by default) and return the rollout row it made.

    The row is the runner's: graded by the oracle, `agent_error`/`agent_exited` when the client left before the
    conversation ended, `user_error` (not graded) when the user model failed."""
    from sim_pipeline.rollout.runner import RolloutSpec, finished_row, sample_seed

    seed = sample_seed(situation.situation_id, phrasing_index, sample_index)
    user_sampling = Sampling(1.0, 1.0, policy.max_tokens, seed)
    episode = Episode(situation, domain=domain, state=state, phrasing_index=phrasing_index,
                      system_prompt=policy.system_prompt)
    session = WorldSession(episode, gateway=gateway, user_model=policy.user_model, user_sampling=user_sampling)
    started = time.perf_counter()
    await (serve or serve_stdio)(session)
    if session.fatal is not None:
        raise session.fatal
    status, finish = session.ending or (AGENT_ERROR, FINISH_AGENT_EXITED)
    calls = session.user_calls
    usage = (sum(c.prompt_tokens for c in calls), sum(c.cost for c in calls), len(calls), 0)
    return await finished_row(RolloutSpec(situation, phrasing_index, sample_index, situation.split), policy,
                              episode=episode, gateway=gateway, status=status, finish=finish, error=session.error,
                              turns=[], agent_sampling=Sampling(policy.temperature, policy.top_p, policy.max_tokens,
                                                                seed),
                              user_sampling=user_sampling, usage=usage, dropped=set(), started=started)


def write_row(row: dict[str, Any], path: Path) -> None:
    """A rollout row as one JSON file, written whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(row, sort_keys=True, default=str) + "\n")
    os.replace(temporary, path)  # readers see no file or the whole row
