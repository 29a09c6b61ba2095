"""The RL environment's own tool, beside the domain's: the exports (verl's tool config) and the environment agree."""

from sim_pipeline.protocol.user_events import USER_ACTION

MESSAGE_USER = "message_user"  # the tool through which the agent talks to the simulated user mid-episode
MESSAGE_USER_TOOL = {  # its JSON schema, for trainers that take schemas (verl) rather than methods (TRL)
    "type": "function",
    "function": {
        "name": MESSAGE_USER,
        "description": "Send the customer a message (a question, a confirmation request or an update) and return "
                       "their reply. Your last message, the one without a tool call, closes the conversation; use "
                       "this tool for everything you say before it.",
        "parameters": {
            "type": "object",
            "properties": {"message": {"type": "string", "description": "What you say to the customer."}},
            "required": ["message"],
        },
    },
}

# Tool names the project's own protocol uses: the agent's tool to the simulated user, and the tool the user answers
# through. A domain tool of either name would sit beside the protocol's own in a trainer's tool list (verl's config
# would list message_user twice), so pack loading refuses it.
RESERVED_TOOL_NAMES: tuple[str, ...] = (MESSAGE_USER, USER_ACTION)
