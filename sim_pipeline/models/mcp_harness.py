"""An agent harness as the policy under test: `mcp-agent:<command>` in the registry's `model` field.

The harness drives the conversation itself: for each rollout the runner serves the situation's world over MCP
(rollout/mcp_world.py) and starts the command, which connects to it as an MCP client (rollout/mcp_agent.py). So
the gateway never completes a chat for it; it only checks, before a run spends anything, that the command exists.
"""

from __future__ import annotations

import shlex
import shutil

from sim_pipeline.errors import ModelCallError

MCP_AGENT_PREFIX = "mcp-agent:"
URL_VARIABLE = "SIM_WORLD_MCP_URL"  # the harness's environment: the streamable HTTP endpoint of its rollout's world
SEED_VARIABLE = "SIM_WORLD_SEED"  # the rollout's sampling seed, for a harness that samples reproducibly


def is_mcp_agent(model: str) -> bool:
    """Whether a model string names an MCP agent harness."""
    return model.startswith(MCP_AGENT_PREFIX)


def harness_command(model: str) -> list[str]:
    """The command an `mcp-agent:<command>` model string names, split as a POSIX shell would (no shell runs it)."""
    text = model.removeprefix(MCP_AGENT_PREFIX).strip()
    try:
        command = shlex.split(text)
    except ValueError as exc:
        raise ModelCallError(f"model '{model}': the harness command does not parse ({exc}). Fix: quote it as a "
                             "shell would, e.g. mcp-agent:python my_harness.py --flag 'two words'") from None
    if not command:
        raise ModelCallError(f"model '{model}': no harness command after {MCP_AGENT_PREFIX}. Fix: e.g. "
                             "mcp-agent:python my_harness.py")
    return command


def check_harness(model: str) -> None:
    """Fail before spending: the harness command must be a program found on PATH (or a path to one)."""
    program = harness_command(model)[0]
    if shutil.which(program) is None:
        raise ModelCallError(f"model '{model}': the harness program {program!r} is not found. Fix: give its full "
                             "path or put it on PATH")
