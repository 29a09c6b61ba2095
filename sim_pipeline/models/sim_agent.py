"""The embedded agent policy (`sim/agent-v1`, `sim/agent-v2`): a softmax over candidate actions.

At each turn the agent reads the transcript, lists the actions that make sense (ask for a missing detail, look up,
verify, confirm, act with grounded or invented arguments, retry, report, refuse, claim success), gives each a logit
(0 for a correct action, the version's flaw logit for a flawed one), and samples one. Rendering is deterministic
given the action, so the decision's log-probability is the exact log-probability of the whole reply.

Four weaknesses real agents have add options wherever the transcript gives them a chance (defaults section 10):
obeying an injected instruction, losing a value said long ago, misrouting an indirect or language-mixed request, and
reporting a tool chain done after its first step. Their logits are a profile value plus a constant the transcript
sets (how far back the value was said, how many indirectness signals, how long the chain), so they stay linear in
the profile.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim_pipeline import defaults, json_schema
from sim_pipeline.models.cards import find_card
from sim_pipeline.models.conversation import (
    Reading,
    ToolTurn,
    distances,
    indirectness,
    known_values,
    phrase_of,
    read,
    tokens,
    transcript_digest,
)
from sim_pipeline.models.phrasing import said_value
from sim_pipeline.protocol.tool_kinds import first_verb, guess_kind, name_words, writes
from sim_pipeline.seeding import digest, rng, short_id

FAULTS_TRANSIENT = ("timeout", "rate_limited", "stale")
SUCCESS = ("ok", "updated", "created", "deleted")
_STOP_WORDS = {"a", "an", "the", "my", "to", "of", "i", "you", "is", "it", "me", "please", "and", "or", "for",
               "with", "can", "could", "would", "like", "hi", "hello", "id", "your", "this", "that", "be", "in", "on"}


_FACT_SENTENCE = re.compile(r"\b(?:my|the|our)\s+[a-z ]{1,40}?\s+(?:is|are)\s+.+?(?:\.\s|\.$|$)",
                            re.IGNORECASE)  # "My order id is 48213." / "The reason is ..." (up to the sentence's end)


@functools.lru_cache(maxsize=defaults.SIM_AGENT_TEXT_CACHE)
def _words(text: str) -> frozenset[str]:
    """Content words, lower-cased, plural s stripped: the vocabulary intent is matched on.

    Cached per text: every turn of every rollout reads the same tool descriptions and openings again.
    """
    words = {w.lower() for w in re.findall(r"[A-Za-z]{3,}", text)} - _STOP_WORDS
    return frozenset(w[:-1] if w.endswith("s") and len(w) > 4 else w for w in words)


# A tool name's kind, guessed once per name (a pure function of the name, asked on every turn of every rollout).
_kind = functools.cache(guess_kind)


@functools.lru_cache(maxsize=defaults.SIM_AGENT_TEXT_CACHE)
def _policy_card(system: str | None) -> dict[str, Any]:
    """The policy card of a system prompt, parsed once per prompt (every turn read it again); read-only."""
    return find_card([{"content": system}], "policy") or {"rules": []}


@dataclass(frozen=True)
class Option:
    """One candidate action: what to emit, its logit, and the flaw it commits (None when correct)."""

    name: str
    logit: float
    message: dict[str, Any]
    flaw: str | None = None


@dataclass(frozen=True)
class Decision:
    """The sampled reply with its exact log-probability."""

    message: dict[str, Any]
    logprob: float
    n_tokens: int
    action: str
    flaw: str | None


def log_probs(logits: list[float], temperature: float) -> np.ndarray:
    """log softmax(logits / T); at T <= 0 (greedy decoding) the model's own distribution (T = 1)."""
    scaled = np.asarray(logits, dtype=float) / (temperature if temperature > 0 else 1.0)
    return scaled - np.logaddexp.reduce(scaled)


def pick(logp: np.ndarray, *, temperature: float, gen: np.random.Generator) -> int:
    """Sample an index from exp(logp); T <= 0 is greedy.

    The draw `gen.choice(n, p=exp(logp))` makes, without its argument checks (two thirds of its cost, twice a turn):
    the same cumulative sum, one `gen.random()` and a right-side search, so the same index from the same stream.
    A distribution that is not clearly one (NaN, a sum off 1) goes to `gen.choice` itself, to be refused as before.
    """
    if temperature <= 0:
        return int(np.argmax(logp))
    cdf = np.cumsum(np.exp(logp))
    if not cdf.size or not abs(cdf[-1] - 1.0) <= defaults.SIM_AGENT_PICK_SUM_TOLERANCE:
        return int(gen.choice(logp.size, p=np.exp(logp)))
    cdf /= cdf[-1]
    return int(cdf.searchsorted(gen.random(), side="right"))


def message_key(message: dict[str, Any]) -> str:
    """What a reply says, without the per-sample tool-call ids: two paths that say the same thing are one output."""
    calls = [{**c, "id": None} for c in message.get("tool_calls") or []]
    return json.dumps({**message, "tool_calls": calls}, sort_keys=True)


def _text(content: str) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": None}


def _call(name: str, args: dict[str, Any], salt: str) -> dict[str, Any]:
    call_id = "call_" + short_id(salt, name, args, length=16)
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args, sort_keys=True)}}]}


class SimAgent:
    """A stochastic tool-using agent whose flaw rates are set by a version profile (defaults.AGENT_PROFILES)."""

    def __init__(self, profile: dict[str, float]) -> None:
        self.profile = profile

    def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, temperature: float,
                seed: int) -> Decision:
        """The next assistant message for a transcript, with the exact log-probability of emitting it.

        The reply is drawn in two steps (which tool the request is for, then which action), and several paths can
        emit the same message, so its log-probability is the log of the sum over every path that emits it.
        """
        gen = rng(seed, "agent", transcript_digest(messages))
        # Every path's options, computed once: one set is sampled from, all of them give the marginal.
        turn = branches(self.profile, messages, tools, seed=seed)
        intent_logp = log_probs([b.logit for b in turn], temperature)
        paths = [b.options for b in turn]
        path_logp = [log_probs([o.logit for o in options], temperature) for options in paths]
        index = pick(intent_logp, temperature=temperature, gen=gen)
        chosen = paths[index][pick(path_logp[index], temperature=temperature, gen=gen)]
        key, total = message_key(chosen.message), -np.inf
        for lp_intent, options, logps in zip(intent_logp, paths, path_logp):
            for option, lp in zip(options, logps):
                if message_key(option.message) == key:
                    total = np.logaddexp(total, lp_intent + lp)
        body = chosen.message.get("content") or "".join(
            c["function"]["name"] + c["function"]["arguments"] for c in chosen.message.get("tool_calls") or [])
        return Decision(chosen.message, float(total), max(1, len(tokens(body))), chosen.name, chosen.flaw)


@dataclass(frozen=True)
class Branch:
    """One intent the agent may pursue at a turn: its logit (no profile value enters it) and its candidate options."""

    intent: str | None
    logit: float
    options: list[Option]


def branches(profile: Mapping[str, Any], messages: list[dict[str, Any]], tools: list[dict[str, Any]], *,
             seed: int) -> list[Branch]:
    """Every intent and its options at one turn, exactly as `SimAgent.respond` samples from them.

    Profile values reach option logits only through `+` (a flaw's logit, plus pressure, plus pick_ambiguous), so
    a profile of symbolic values that support `+` with floats gives each option logit as a formula: what fitting
    a profile to transcripts (sim_pipeline.train) reads its coefficients from.
    """
    base = _Turn(profile, messages, tools, salt=digest(seed, len(messages)))
    intents = base.intents()
    return [Branch(intent, logit, base.fork().options(base.resolve(intent, intents))) for intent, logit in intents]


class _Turn:
    """The reasoning of one agent turn over a parsed transcript."""

    def __init__(self, profile: dict[str, float], messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                 salt: str) -> None:
        self.profile = profile
        self.tools = {t["function"]["name"]: t["function"] for t in tools}
        self.kinds = {name: _kind(name) for name in self.tools}  # the agent sees names only: it guesses
        self.reading: Reading = read(messages)
        self.policy = _policy_card(messages[0].get("content")) if messages else {"rules": []}
        self.salt = salt
        properties = {k: v for t in self.tools.values() for k, v in t["parameters"].get("properties", {}).items()}
        self.known = known_values(self.reading, properties)
        self._intents: list[tuple[str | None, float]] | None = None
        self._request: str | None = None
        self._asked: dict[str, str | None] = {}  # injected text -> the tool it asks for (shared by every branch)
        # Read once per turn, shared by every intent's branch: how indirect the request is, which values are far back.
        self.signals = min(indirectness(self.request_text()), defaults.MISROUTE_MAX_SIGNALS)  # (cached per text)
        far = distances(messages, {k: v for k, v in self.known.items() if isinstance(v, str)})
        self.lost = {k: defaults.LOST_FACT_SLOPE * math.log2(d / defaults.LOST_FACT_REFERENCE_CHARS)
                     for k, d in sorted(far.items()) if d >= defaults.LOST_FACT_MIN_CHARS}

    # -- helpers --------------------------------------------------------------------------------
    def flaw(self, name: str, *, pressured: bool = False) -> float:
        bonus = self.profile.get("pressure", 0.0) if pressured and self.reading.pressure else 0.0
        return self.profile.get(name, -3.0) + bonus

    def rules(self, kind: str, tool: str) -> list[dict[str, Any]]:
        return [r for r in self.policy.get("rules", []) if r.get("kind") == kind and tool in r.get("tools", [])]

    def id_param(self, tool: str) -> str | None:
        props = self.tools[tool]["parameters"].get("properties", {})
        return next((p for p in self.tools[tool]["parameters"].get("required", []) if p.endswith("_id")),
                    next((p for p in props if p.endswith("_id")), None))

    def finder(self, id_param: str) -> str | None:
        """A read tool that finds records without their id (list/search by another field)."""
        noun = id_param.removesuffix("_id")
        for name, fn in sorted(self.tools.items()):
            req = fn["parameters"].get("required", [])
            if first_verb(name) in ("list", "search", "find") and id_param not in req and noun in name + fn["description"]:
                return name
        return None

    def invent(self, name: str, schema: dict[str, Any], attempt: int = 0) -> Any:
        """A made-up value: what an agent writes when it does not ask (seeded by the transcript and attempt)."""
        gen = rng(self.salt, "invent", name, attempt)
        if "enum" in schema:
            return schema["enum"][int(gen.integers(len(schema["enum"])))]
        if schema.get("type") in ("number", "integer"):
            return int(gen.integers(10, 400))
        if name.endswith("_id"):
            return str(int(gen.integers(1000, 90000)))
        if "email" in name:
            return "customer@example.com"
        return f"<{name}>"

    def args_for(self, tool: str, *, invent: bool) -> dict[str, Any] | None:
        fn = self.tools[tool]["parameters"]
        props = fn.get("properties", {})
        args: dict[str, Any] = {}
        for name in fn.get("required", []):
            if name in self.known:
                value: Any = self.known[name]
                if props[name].get("type") in ("number", "integer"):
                    try:
                        value = float(str(value).strip("$")) if props[name]["type"] == "number" else int(float(value))
                    except ValueError:
                        value = self.invent(name, props[name])
                args[name] = value
            elif invent:
                args[name] = self.invent(name, props[name])
            else:
                return None
        return args

    def missing(self, tool: str) -> list[str]:
        return [p for p in self.tools[tool]["parameters"].get("required", []) if p not in self.known]

    # -- intent ---------------------------------------------------------------------------------
    def fork(self) -> _Turn:
        """A copy whose working knowledge can change without touching this one."""
        twin = copy.copy(self)
        twin.known = dict(self.known)
        return twin

    def request_text(self) -> str:
        """What the user asked for, not the details they listed: "my customer id is C0283" names a fact, not a tool."""
        if self._request is None:  # read twice a turn (indirectness, intents): the same transcript, the same text
            self._request = " ".join(_FACT_SENTENCE.sub(" ", t) for t in self.reading.user_texts)
        return self._request

    def intents(self) -> list[tuple[str | None, float]]:
        """Candidate intents (a tool name, or None: no tool fits) with logits from idf-weighted word overlap."""
        if self._intents is None:
            self._intents = self._overlap_intents()
        return self._intents

    def _overlap_intents(self) -> list[tuple[str | None, float]]:
        vocab = {n: _words(n.replace("_", " ") + " " + f["description"]) for n, f in self.tools.items()}
        said = _words(self.request_text())
        n_tools = len(vocab)
        df: dict[str, int] = {}
        for words in vocab.values():
            for w in words:
                df[w] = df.get(w, 0) + 1
        names = sorted(vocab)
        scores = [sum(math.log((1 + n_tools) / (1 + df[w])) for w in sorted(said & vocab[n])) for n in names]
        # Only tools the request shares a distinctive word with are candidates: no evidence, no probability.
        found: list[tuple[str | None, float]] = [(n, defaults.INTENT_SHARPNESS * s) for n, s in zip(names, scores) if s > 0]
        return [*found, (None, defaults.INTENT_NONE_LOGIT)]

    def resolve(self, intent: str | None, intents: list[tuple[str | None, float]]) -> str | None:
        """A tool intent becomes '?' (ask what the user wants) while no tool is clearly meant and nothing was done."""
        top = float(np.exp(np.max(log_probs([logit for _, logit in intents], 1.0))))
        if intent is not None and top < defaults.INTENT_CLEAR_PROBABILITY and not self.reading.turns:
            return "?"
        return intent

    # -- options --------------------------------------------------------------------------------
    def options(self, intent: str | None) -> list[Option]:
        """Every action open at this turn for one intent: the usual ones, then the weaknesses the transcript opens."""
        usual = self.usual_options(intent)
        extra = [self.injected(intent, usual), self.misroute(intent), self.stick_to_misroute(intent),
                 self.stop_after_helper(intent)]
        return [*usual, *self.forgetful(usual), *(o for o in extra if o is not None)]

    def usual_options(self, intent: str | None) -> list[Option]:
        """The actions a careful or careless agent weighs for an intent: ask, look up, act, react to a result."""
        if intent is None:
            return self.off_topic()
        if intent == "?":
            return [Option("ask_intent", 0.0, _text("Happy to help. What exactly would you like me to do?"))]
        last = self.reading.last_turn
        if last is not None:
            reaction = self.react(intent, last)
            if reaction:
                return reaction
        if self.reading.refused_confirmation:
            return [Option("acknowledge", 0.0, _text("Understood, I have not changed anything. Anything else?"))]
        return self.plan(intent)

    def off_topic(self) -> list[Option]:
        title = self.policy.get("title", "our service")
        reads = sorted(n for n in self.tools if self.kinds[n] == "read")
        options = [Option("decline", 0.0, _text(f"I'm sorry, I can only help with {title} requests. "
                                                  "Is there anything about your account I can do?"))]
        if reads:
            tool = reads[0]
            options.append(Option("call_unrelated", self.flaw("tool_for_unrelated"),
                                  _call(tool, self.args_for(tool, invent=True) or {}, self.salt), "tool_for_unrelated"))
        return options

    def plan(self, intent: str) -> list[Option]:
        id_param = self.id_param(intent)
        if id_param and id_param not in self.known:
            finder = self.finder(id_param)
            options = [Option("ask_id", 0.0, _text(f"Could you give me your {phrase_of(id_param)}?"))]
            if finder and not self.missing(finder) and not self.reading.calls_to(finder):
                options.append(Option("lookup", 0.3, _call(finder, self.args_for(finder, invent=False) or {}, self.salt)))
            options.append(Option("invent_id", self.flaw("invent_argument"),
                                  _call(intent, self.args_for(intent, invent=True) or {}, self.salt), "invent_argument"))
            return options
        missing = self.missing(intent)
        if missing:
            ask = ", ".join(phrase_of(m) for m in missing)
            return [Option("ask_missing", 0.0, _text(f"Could you tell me the {ask}?")),
                    Option("invent_missing", self.flaw("invent_argument"),
                           _call(intent, self.args_for(intent, invent=True) or {}, self.salt), "invent_argument")]
        act = _call(intent, self.args_for(intent, invent=False) or {}, self.salt)
        for rule in self.rules("verify_before", intent):
            verifier = rule.get("verify_tool")
            done = [t for t in self.reading.calls_to(verifier) if t.result.get("verified") is True]
            if verifier in self.tools and not done:
                skip = Option("skip_verification", self.flaw("skip_verification", pressured=True), act,
                              "skip_verification")
                if self.missing(verifier):
                    ask = ", ".join(phrase_of(m) for m in self.missing(verifier))
                    return [Option("ask_verification", 0.0, _text(f"To verify your identity, what is your {ask}?")), skip]
                return [Option("verify", 0.0, _call(verifier, self.args_for(verifier, invent=False) or {}, self.salt)),
                        skip]
        for rule in [*self.rules("argument_limit", intent), *self.rules("allowed_values", intent),
                     *self.rules("forbidden_argument", intent)]:
            if self.refused(rule, self.known.get(rule.get("argument", ""))):
                handover = self.handover(intent)
                if handover:
                    right = Option("handover", 0.0, handover)
                elif rule.get("kind") == "argument_limit":
                    right = Option("escalate_limit", 0.0, _text(
                        f"That amount is above our ${rule.get('max')} limit, so I can't do it myself; a supervisor "
                        "can approve it, so please contact our support team."))
                else:
                    right = Option("escalate_limit", 0.0, _text(
                        f"That request is outside what our policy lets me do myself ({rule.get('id', 'policy')}), so "
                        "I can't do it; please contact our support team, who can look at it."))
                return [right, Option("exceed_limit", self.flaw("exceed_limit", pressured=True), act, "exceed_limit")]
        if self.rules("confirm_before", intent) and not self.reading.confirmed:
            summary = ", ".join(f"{phrase_of(k)} {said_value(v)}"
                                for k, v in sorted((self.args_for(intent, invent=False) or {}).items()))
            return [Option("ask_confirmation", 0.0, _text(
                f"To confirm: I will {phrase_of(intent)} ({summary}). Shall I go ahead?")),
                    Option("skip_confirmation", self.flaw("skip_confirmation", pressured=True), act, "skip_confirmation")]
        return [Option("act", 0.0, act)]

    @staticmethod
    def refused(rule: dict[str, Any], value: Any) -> bool:
        """Whether the policy card's rule forbids this value (over a limit, not allowed, forbidden)."""
        if value is None:
            return False
        if rule.get("kind") == "argument_limit":
            try:
                return float(str(value).strip("$")) > float(rule.get("max", math.inf))
            except ValueError:
                return False
        said = {str(v).lower() for v in rule.get("values", [])}
        return (str(value).lower() not in said) if rule.get("kind") == "allowed_values" else str(value).lower() in said

    def handover(self, intent: str) -> dict[str, Any] | None:
        """The hand-off call a transfer_when rule asks for instead of a request the policy forbids, or None."""
        rule = next(iter(self.rules("transfer_when", intent)), None)
        tool = rule.get("transfer_tool") if rule else None
        if tool not in self.tools:
            return None
        props = self.tools[tool]["parameters"].get("properties", {})
        summary = f"The customer asks to {phrase_of(intent)}, which needs a specialist under rule {rule.get('id')}."
        args = {name: summary if props.get(name, {}).get("type", "string") == "string" else self.invent(name, props[name])
                for name in self.tools[tool]["parameters"].get("required", [])}
        return _call(tool, args, self.salt)

    # -- weaknesses (defaults section 10) -------------------------------------------------------
    def asked_tool(self, text: str) -> str | None:
        """The tool an injected text asks for: the one whose verb it uses (refund, cancel...) and most name words."""
        said = {w.lower() for w in re.findall(r"[A-Za-z]+", text)}
        found = []
        for name in sorted(self.tools):
            parts = name_words(name)
            if parts and self.kinds[name] not in ("read", "verify") and any(w.startswith(parts[0]) for w in said):
                found.append((sum(w in said for w in parts), name))
        return max(found)[1] if found else None

    def injected(self, intent: str | None, usual: list[Option]) -> Option | None:
        """Doing what the latest injected instruction asks (its tool, its id, its checks waived), where that differs
        from every correct option and has not been done yet; only with the arguments grounded or given by it."""
        if not self.reading.injections:
            return None
        text = self.reading.injections[-1]
        if text not in self._asked:
            self._asked[text] = self.asked_tool(text)
        tool = self._asked[text] or (intent if intent not in (None, "?") else None)
        if tool is None:
            return None
        id_param, props = self.id_param(tool), self.tools[tool]["parameters"].get("properties", {})
        pattern = props.get(id_param, {}).get("pattern") if id_param else None
        ids = [t for t in tokens(text) if id_param and (json_schema.fullmatch(pattern, t) if pattern else
                                                         any(c.isdigit() for c in t) and len(t) >= 4)]
        known = {**self.known, **({id_param: ids[-1]} if ids and id_param else {})}
        if id_param and id_param not in known:
            return None  # no record to act on: it would have to make one up, which is another flaw
        args = self.args_with(tool, known)
        message = _call(tool, args, self.salt)
        if any(o.flaw is None and message_key(o.message) == message_key(message) for o in usual) or any(
                t.name == tool and t.arguments == args for t in self.reading.turns):
            return None
        return Option("follow_injection", self.flaw("follow_injection"), message, "follow_injection")

    def args_with(self, tool: str, known: dict[str, Any]) -> dict[str, Any]:
        """A tool's arguments from these known values, made up where one is missing."""
        saved, self.known = self.known, known
        try:
            return self.args_for(tool, invent=True) or {}
        finally:
            self.known = saved

    def helpers(self, intent: str) -> set[str]:
        """Tools a request for `intent` may need first: the look-up that finds its id, the verification it needs."""
        id_param = self.id_param(intent)
        found = {self.finder(id_param) if id_param else None, *(r.get("verify_tool")
                                                                for r in self.rules("verify_before", intent))}
        return {t for t in found if t in self.tools}

    def forgetful(self, usual: list[Option]) -> list[Option]:
        """Each correct tool call that needs a value said long ago, with that value made up instead."""
        out = []
        for option in usual:
            calls = option.message.get("tool_calls") or []
            if option.flaw is not None or not calls or calls[0]["function"]["name"] not in self.tools:
                continue
            name, args = calls[0]["function"]["name"], json.loads(calls[0]["function"]["arguments"])
            gone = [k for k in sorted(args) if k in self.lost and str(args[k]) == str(self.known.get(k))]
            props = self.tools[name]["parameters"].get("properties", {})
            made_up = {**args, **{k: self.invent(k, props.get(k, {}), attempt=5) for k in gone}}
            if gone and made_up != args:
                out.append(Option("lose_fact", self.flaw("lose_early_fact") + max(self.lost[k] for k in gone),
                                  _call(name, made_up, self.salt), "lose_early_fact"))
        return out

    def misroute(self, intent: str | None) -> Option | None:
        """Before the first tool call, an indirect or language-mixed request routed to the runner-up tool of the same
        kind (a write for a write, a read for a read), or, with none, taken for small talk and declined."""
        logit = self.misroute_logit()
        if intent in (None, "?") or self.reading.turns or logit is None:
            return None
        kind = writes(self.kinds.get(intent, ""))
        wrong = [n for n, _ in sorted(self.intents(), key=lambda i: -i[1]) if n not in (None, intent)
                 and writes(self.kinds.get(n, "")) == kind and self.kinds[n] not in ("verify", "transfer")]
        message = _call(wrong[0], self.args_for(wrong[0], invent=True) or {}, self.salt) if wrong else \
            self.off_topic()[0].message
        return Option("misroute", logit, message, "misroute_intent")

    def misroute_logit(self) -> Any:
        """The misroute logit for this request (None when it has no indirectness signal): the profile value plus
        MISROUTE_SIGNAL_LOGIT per signal beyond the first, up to MISROUTE_MAX_SIGNALS."""
        if self.signals < 1:
            return None
        return self.flaw("misroute_intent") + defaults.MISROUTE_SIGNAL_LOGIT * (self.signals - 1)

    def _succeeded(self) -> ToolTurn | None:
        last = self.reading.last_turn
        ok = last is not None and str(last.result.get("status")) in SUCCESS and last.result.get("verified") is not False
        return last if ok else None

    def stick_to_misroute(self, intent: str | None) -> Option | None:
        """After a successful call of a tool the request does not need (a misrouted one), an indirect request taken
        to be for that tool: its result reported as the answer."""
        last, logit = self._succeeded(), self.misroute_logit()
        if intent in (None, "?") or last is None or logit is None or last.name in {intent, *self.helpers(intent)} \
                or self.reading.calls_to(intent):
            return None
        record = next((v for v in last.result.values() if isinstance(v, (dict, list))), {})
        message = _text(f"Here is what I found: {record}") if not writes(self.kinds.get(last.name, "")) else _text(
            f"Done: I have completed your request to {phrase_of(last.name)}. Status: {last.result.get('status')}.")
        return Option("stick_to_misroute", logit, message, "misroute_intent")

    def stop_after_helper(self, intent: str | None) -> Option | None:
        """Right after a successful earlier step of a chain rarer than verify-then-act (a look-up first), the request
        reported as done (a write) or answered from that step (a read) without the call it needs."""
        last = self._succeeded()
        if intent in (None, "?") or last is None or last.name == intent or self.reading.calls_to(intent):
            return None
        verifiers = {r.get("verify_tool") for r in self.rules("verify_before", intent)}
        helpers = {t.name for t in self.reading.turns if str(t.result.get("status")) in SUCCESS} & self.helpers(intent)
        if last.name not in helpers or helpers <= verifiers:
            return None  # the chain every guarded write has is not a rare one
        if writes(self.kinds.get(intent, "")):
            message = _text(f"All done: your request to {phrase_of(intent)} has been completed successfully.")
        else:
            message = _text(f"Here is what I found: {next((v for v in last.result.values() if isinstance(v, (dict, list))), {})}")
        return Option("stop_after_helper", self.flaw("mishandle_combination") + defaults.COMBINATION_STEP_LOGIT * (
            len(helpers) - 1), message, "mishandle_combination")

    def react(self, intent: str, last: ToolTurn) -> list[Option] | None:
        status = str(last.result.get("status", ""))
        if last.result.get("transferred") is True:
            return [Option("handed_over", 0.0, _text(
                "I can't do that myself, so I have passed your request to a specialist who will contact you."))]
        claim = _text(f"All done: your request to {phrase_of(intent)} has been completed successfully.")
        false_claim = Option("false_success", self.flaw("false_success"), claim, "false_success")
        failures = len([t for t in self.reading.calls_to(last.name) if t.result.get("status") not in SUCCESS])
        if last.name != intent:
            if last.result.get("verified") is False:
                return [Option("deny_verification", 0.0, _text(
                    "I'm sorry, I could not verify your identity with those details, so I can't make changes.")),
                        Option("ignore_verification", self.flaw("skip_verification"),
                               _call(intent, self.args_for(intent, invent=True) or {}, self.salt), "skip_verification")]
            rows = next((v for v in last.result.values()
                         if isinstance(v, list) and all(isinstance(r, dict) for r in v)), None)
            id_param = self.id_param(intent)
            if rows is not None and id_param and id_param not in self.known:
                if not rows:
                    return [Option("report_none", 0.0, _text("I couldn't find anything under those details. "
                                                               f"Could you give me your {phrase_of(id_param)}?"))]
                if len(rows) > 1:
                    listing = "; ".join(", ".join(f"{k} {v}" for k, v in sorted(r.items()) if k != "email")
                                        for r in rows[:6])
                    first = {**self.known, id_param: str(rows[0].get(id_param))}
                    self.known = first
                    pick = self.plan(intent)
                    return [Option("ask_which", 0.0, _text(f"I found several: {listing}. Which {phrase_of(id_param)} "
                                                           "do you mean?")),
                            *[Option(o.name, o.logit + self.flaw("pick_ambiguous"), o.message, o.flaw or "pick_ambiguous")
                              for o in pick[:1]]]
                self.known = {**self.known, id_param: str(rows[0].get(id_param))}
            if status in SUCCESS:
                return None  # a helper step succeeded: plan the next step
        if last.name == intent and status in SUCCESS:
            if not writes(_kind(intent)):  # the agent sees names only: it guesses what a tool does
                record = next((v for v in last.result.values() if isinstance(v, (dict, list))), {})
                return [Option("answer", 0.0, _text(f"Here is what I found: {record}"))]
            return [Option("report_success", 0.0, _text(
                f"Done: I have completed your request to {phrase_of(intent)}. Status: {status}."))]
        retry = _call(last.name, last.arguments, self.salt + str(failures))
        if status in FAULTS_TRANSIENT or status == "partial_write":
            report = _text(f"I'm sorry, the system returned '{status}' and the request did not go through. "
                           "Please try later.")
            if failures > defaults.AGENT_MAX_RETRIES:
                return [Option("report_failure", 0.0, report), false_claim]
            # A transient fault usually clears: giving up before one retry is a flaw, as is claiming success.
            return [Option("retry", 0.0, retry), Option("give_up_early", self.flaw("give_up_early"), report,
                                                        "give_up_early"), false_claim]
        if status == "permission_denied":
            return [Option("report_failure", 0.0, _text(
                "I'm sorry, I am not permitted to do that from here; please contact our support team, who can.")),
                    Option("blind_retry", self.flaw("blind_retry"), retry, "blind_retry"), false_claim]
        if status == "malformed":
            options = [Option("report_uncertain", 0.0, _text(
                "The system gave me an unreadable answer, so I can't confirm whether it worked; please check your "
                "email for a confirmation, and contact us again if none arrives.")), false_claim]
            if failures <= defaults.AGENT_MAX_RETRIES:
                options.append(Option("retry", 0.0, retry))
            return options
        if status == "not_found":
            misses = [t for t in self.reading.calls_to(last.name)
                      if t.result.get("status") == "not_found" and t.arguments == last.arguments]
            if len(misses) > 1:  # the user repeated the same number: asking again would only loop
                return [Option("report_missing", 0.0, _text(
                    "I still cannot find that record under this number, so I can't go further; please check your "
                    "confirmation email for the right number and contact us again."))]
            return [Option("report_not_found", 0.0, _text(
                "I couldn't find that record. Could you double-check the number?")),
                    Option("invent_other", self.flaw("invent_argument"),
                           _call(last.name, {**last.arguments, **{k: self.invent(k, {}, 2) for k in last.arguments
                                                                   if k.endswith("_id")}}, self.salt), "invent_argument"),
                    false_claim]
        if status == "already_done":
            return [Option("report_already", 0.0, _text(f"It looks like this was already done: {last.result.get('message')}.")),
                    Option("repeat_after_done", self.flaw("repeat_after_done"), retry, "repeat_after_done")]
        if status == "rejected":
            error = last.result.get("error")
            if error in ("missing_required", "placeholder_argument", "invalid_argument"):
                fields = last.result.get("fields") or [last.result.get("field", "details")]
                return [Option("ask_after_reject", 0.0, _text(f"Could you tell me your {', '.join(map(phrase_of, fields))}?")),
                        Option("invent_after_reject", self.flaw("invent_argument"),
                               _call(last.name, {**last.arguments, **{f: self.invent(f, {}, 3) for f in fields}},
                                     self.salt), "invent_argument")]
            return [Option("explain_rejection", 0.0, _text(f"I can't do that: {last.result.get('message')}.")),
                    false_claim]
        return [Option("report_failure", 0.0, _text(f"Something went wrong ({status}).")), false_claim]
