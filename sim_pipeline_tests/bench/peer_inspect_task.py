"""The inspect_ai side of bench_peer_inspect: the same conversations as sim_pipeline's, written as an inspect task.

Run by `inspect eval` in the inspect venv (.venv-inspect, `make .venv-inspect/.inspect`), never imported by the
project: the agent (the task's model) answers through two lookup tools, then the simulated user (a second model on
its own endpoint, `user_base_url`) answers once through a `user_action` tool, as sim_pipeline's user does; a
string scorer grades the agent's reply. `dataset` is a JSON-lines file of {id, input, target} the bench writes from
sim_pipeline's own conversations (input: the domain's agent system prompt and the opening).
"""

import json

from inspect_ai import Task, task
from inspect_ai.dataset import json_dataset
from inspect_ai.model import ChatMessageSystem, ChatMessageUser, get_model
from inspect_ai.scorer import includes
from inspect_ai.solver import Generate, Solver, TaskState, generate, solver, use_tools
from inspect_ai.tool import Tool, ToolFunction, tool

USER_PROMPT = "You are a customer of an online shop. Answer the agent through the user_action tool."


@tool
def get_order() -> Tool:
    async def execute(order_id: str) -> str:
        """Look up one order by its order id: status, item, total, placed date and the customer's email.

        Args:
            order_id: The order id, digits only, e.g. 48213.
        """
        return json.dumps({"order_id": order_id, "status": "shipped", "item": "lamp", "total": 42.0})

    return execute


@tool
def track_shipment() -> Tool:
    async def execute(order_id: str) -> str:
        """Track the shipment of an order: carrier and where the parcel is.

        Args:
            order_id: The order id to track.
        """
        return json.dumps({"order_id": order_id, "carrier": "UPS", "location": "depot"})

    return execute


@tool
def user_action() -> Tool:
    async def execute(message: str, decision: str) -> str:
        """Say something to the agent and decide how the conversation goes on.

        Args:
            message: What the customer says to the agent.
            decision: One of confirm, refuse, provide_fact, ask, leave, satisfied.
        """
        return decision

    return execute


@solver
def user_turn(user_base_url: str) -> Solver:
    """The simulated user's one answer to the agent's reply (it sees the conversation from the customer's side)."""
    user = get_model("openai/scripted-user", base_url=user_base_url, responses_api=False)

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        view = [ChatMessageSystem(content=USER_PROMPT), ChatMessageUser(content=state.output.completion)]
        said = await user.generate(view, tools=[user_action()], tool_choice=ToolFunction("user_action"))
        call = (said.message.tool_calls or [None])[0]
        if call is None:
            raise ValueError(f"the user model did not call user_action: {said.completion[:120]!r}")
        state.messages.append(ChatMessageUser(content=str(call.arguments["message"])))
        if call.arguments.get("decision") == "satisfied":
            state.completed = True
        return state

    return solve


@task
def peer(dataset: str, user_base_url: str) -> Task:
    """Agent with two tools, then one user answer; scored on the agent's reply."""
    return Task(
        dataset=json_dataset(dataset),
        solver=[use_tools([get_order(), track_shipment()]), generate(),
                user_turn(user_base_url)],
        scorer=includes(),
    )
