"""Sandbox calls per second on one core with the retail tools, against baselines measured in the same run.

The mix is what rollouts send: each episode builds a sandbox for a situation (its records, masks and fault, as the
runner does) and makes ten calls: reads by id and by email, a verification, the intended write and its retry
(faults land here), an unknown id, and three bad calls (a malformed id, a placeholder, a missing argument).

Baselines: the same mix with a jsonschema validator built per call (the world before validators were cached), and
a bare `jsonschema.validate` of each call's arguments with no world at all.
"""

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import jsonschema
import numpy as np

from sim_pipeline.axes import axis_values
from sim_pipeline.domain import load_domain
from sim_pipeline.search.situations import build_situation
from sim_pipeline.world import arguments
from sim_pipeline.world import sandbox as sandbox_module
from sim_pipeline.world.sandbox import Sandbox
from sim_pipeline.world.state import build_state

N_SITUATIONS = 60
SECONDS = 1.0  # per measurement; the median of REPEATS is reported
REPEATS = 5
WRITE_ARGS = {"cancel_order": ("reason",), "refund_order": ("amount",), "return_item": ("reason",),
              "update_address": ("address",)}


def _one_core() -> None:
    """Pin to one CPU where the OS allows it, so the figure is per core."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def _episodes() -> tuple[Any, Any, list[tuple[Any, list[tuple[str, dict[str, Any]]]]]]:
    domain = load_domain("retail")
    state = build_state(domain, 0)
    values = axis_values(domain)
    gen = np.random.default_rng(0)
    writes = list(WRITE_ARGS)
    episodes = []
    for i in range(N_SITUATIONS):
        cell = {k: v[int(gen.integers(len(v)))] for k, v in values.items()}
        cell["tool"] = writes[i % len(writes)]
        situation = build_situation(domain, state, cell, seed=0, variant=i)
        facts = situation.facts
        order_id, email = facts["order_id"], facts["email"]
        write = {"order_id": order_id, **{k: (float(facts[k]) if k == "amount" else facts[k])
                                          for k in WRITE_ARGS[cell["tool"]]}}
        calls = [
            ("get_order", {"order_id": order_id}), ("list_orders", {"email": email}),
            ("verify_customer", {"order_id": order_id, "email": email}),
            (cell["tool"], write), (cell["tool"], write), ("get_order", {"order_id": "99999"}),
            ("cancel_order", {"order_id": "48-213", "reason": "late"}),
            ("cancel_order", {"order_id": order_id, "reason": "<reason>"}),
            ("refund_order", {"order_id": order_id}), ("track_shipment", {"order_id": order_id}),
        ]
        episodes.append((situation, calls))
    return domain, state, episodes


def _rates(runs: dict[str, Callable[[], int]]) -> dict[str, float]:
    """Median calls per second of each variant, the variants interleaved so machine load hits them alike."""
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(REPEATS):
        for name, run_once in runs.items():
            calls, start = 0, time.perf_counter()
            while time.perf_counter() - start < SECONDS:
                calls += run_once()
            rates[name].append(calls / (time.perf_counter() - start))
    return {name: statistics.median(values) for name, values in rates.items()}


def figures() -> list[dict]:
    _one_core()
    domain, state, episodes = _episodes()

    def world() -> int:
        for situation, calls in episodes:
            sandbox = Sandbox(domain, seed=situation.seed, setup=situation.setup, state=state)
            for name, args in calls:
                sandbox.call(name, args)
        return sum(len(c) for _, c in episodes)

    original = arguments.rejection

    def rebuilt(compiled: arguments.CompiledTool, args: dict[str, Any]) -> dict[str, Any] | None:
        fresh = arguments.validator_for(compiled.tool.parameters)  # what every call paid before the cache
        return original(arguments.CompiledTool(compiled.tool, fresh, compiled.binding, compiled.action,
                                               compiled.properties, compiled.makes_record), args)

    def world_rebuilding() -> int:
        sandbox_module.rejection = rebuilt
        try:
            return world()
        finally:
            sandbox_module.rejection = original

    schemas = {t.name: t.parameters for t in domain.tools}
    checker = jsonschema.FormatChecker()

    def bare() -> int:
        for _, calls in episodes:
            for name, args in calls:
                try:
                    jsonschema.validate(args, schemas[name], format_checker=checker)
                except jsonschema.ValidationError:
                    pass
        return sum(len(c) for _, c in episodes)

    rates = _rates({"cached": world, "rebuilt": world_rebuilding, "bare": bare})
    cached, uncached, plain = rates["cached"], rates["rebuilt"], rates["bare"]
    return [
        {"name": "world_calls_per_second_retail", "value": cached, "unit": "calls/s",
         "baseline_name": "world_with_validator_built_per_call", "baseline_value": uncached,
         "ratio": cached / uncached},
        {"name": "world_calls_per_second_retail_vs_bare_validate", "value": cached, "unit": "calls/s",
         "baseline_name": "jsonschema_validate_per_call_no_world", "baseline_value": plain, "ratio": cached / plain},
    ]
