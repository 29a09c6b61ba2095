"""The litellm `sim` provider gives the same reply as the in-process model, with the logprob on the first token."""

import litellm

from sim_pipeline.domain import load_domain
from sim_pipeline.models import sim_models
from sim_pipeline.models.sim_provider import register

DOMAIN = load_domain("retail")
MESSAGES = [{"role": "system", "content": "You are an agent."},
            {"role": "user", "content": "I'd like to track my shipment. My order id is 62535."}]


def test_litellm_path_matches_in_process_model():
    register()
    for seed in range(5):
        direct = sim_models.respond("sim/agent-v1", MESSAGES, tools=DOMAIN.tool_schemas, temperature=1.0, seed=seed)
        response = litellm.completion(model="sim/agent-v1", messages=MESSAGES, tools=DOMAIN.tool_schemas,
                                      temperature=1.0, seed=seed, logprobs=True)
        message = response.choices[0].message
        calls = [{"id": c.id, "type": "function", "function": {"name": c.function.name,
                                                                "arguments": c.function.arguments}}
                 for c in message.tool_calls or []] or None
        assert (message.content, calls) == (direct.message["content"], direct.message["tool_calls"])
        token_logprobs = [t.logprob for t in response.choices[0].logprobs.content]
        assert token_logprobs[0] == direct.logprob and set(token_logprobs[1:]) <= {0.0}
        assert message.provider_specific_fields["logprob_source"] == "decision"
        assert response.usage.completion_tokens == direct.n_tokens


def test_unknown_embedded_model_names_the_choices():
    import pytest

    from sim_pipeline.errors import ModelCallError

    with pytest.raises(ModelCallError, match="no embedded model of that name. Fix: use one of"):
        sim_models.respond("sim/agent-v9", MESSAGES)
