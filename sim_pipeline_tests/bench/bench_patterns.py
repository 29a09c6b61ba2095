"""Schema patterns on RE2: how long an adversarial argument takes to answer, against baselines measured in this run.

The pattern is `^(a|a)*$` and the argument 40 a's and a "!": a backtracking engine tries 2**40 ways to split the a's
before it fails. Figures (the median of REPEATS):
- the world's validator (RE2) on the 40-character argument, against jsonschema's own validator (Python `re`) on a
  22-character one (each two characters more multiply its time by about five; 40 would take days);
- a whole sandbox call with the 40-character argument (the issue's goal: under 10 ms), against the same call with an
  argument that fits;
- an ordinary pattern (`^[0-9]{4,6}$`) checked by the world's validator, against jsonschema's: what RE2 costs on the
  patterns packs actually write.
"""

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema

from sim_pipeline.domain import load_domain
from sim_pipeline.world.arguments import validator_for
from sim_pipeline.world.sandbox import Sandbox, WorldSetup

EVIL = "^(a|a)*$"
LONG, SHORT = "a" * 40 + "!", "a" * 22 + "!"  # the argument; the longest `re` answers in about a second
REPEATS = 5  # the backtracking baseline runs this often too: about five seconds in all
FAST_LOOPS = 2000  # calls per repeat for the figures in micro- or milliseconds


def _median_seconds(run: Callable[[], Any], loops: int) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(loops):
            run()
        times.append((time.perf_counter() - start) / loops)
    return statistics.median(times)


def _schema(pattern: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"code": {"type": "string", "pattern": pattern}}, "required": ["code"]}


def _voucher_pack(root: Path) -> Path:
    pack = root / "vouchers"
    (pack / "tools").mkdir(parents=True)
    voucher_id = {"type": "string", "pattern": "^V[0-9]{4}$"}
    for name, description, properties in (
            ("get_voucher", "Look up a gift voucher.", {"voucher_id": voucher_id}),
            ("redeem_voucher", "Redeem a gift voucher with its code.",
             {"voucher_id": voucher_id, "code": {"type": "string", "pattern": EVIL}})):
        (pack / "tools" / f"{name}.json").write_text(json.dumps({"type": "function", "function": {
            "name": name, "description": description, "parameters": {
                "type": "object", "properties": properties, "required": list(properties),
                "additionalProperties": False}}}))
    (pack / "policy.md").write_text("# Vouchers\n\n- **own_voucher**: Redeem only a voucher the customer holds.\n")
    (pack / "domain.yaml").write_text("name: vouchers\ntitle: Vouchers\nagent_role: You redeem gift vouchers.\n")
    return pack


def figures() -> list[dict]:
    ours, theirs = validator_for(_schema(EVIL)), jsonschema.Draft202012Validator(_schema(EVIL))
    assert not ours.is_valid({"code": LONG}) and not theirs.is_valid({"code": SHORT})
    re2_long = _median_seconds(lambda: ours.is_valid({"code": LONG}), FAST_LOOPS)
    re_short = _median_seconds(lambda: theirs.is_valid({"code": SHORT}), 1)

    with tempfile.TemporaryDirectory() as root:
        domain = load_domain(_voucher_pack(Path(root)))
    sandbox = Sandbox(domain, seed=0, setup=WorldSetup())
    voucher = min(sandbox.state["voucher"])
    assert sandbox.call("redeem_voucher", {"voucher_id": voucher, "code": LONG})["error"] == "invalid_argument"
    assert sandbox.call("get_voucher", {"voucher_id": voucher})["status"] == "ok"
    call_long = _median_seconds(lambda: sandbox.call("redeem_voucher", {"voucher_id": voucher, "code": LONG}),
                                FAST_LOOPS)
    call_fits = _median_seconds(lambda: sandbox.call("get_voucher", {"voucher_id": voucher}), FAST_LOOPS)

    plain = _schema("^[0-9]{4,6}$")
    ours_plain, theirs_plain = validator_for(plain), jsonschema.Draft202012Validator(
        plain, format_checker=jsonschema.FormatChecker())
    plain_re2 = _median_seconds(lambda: ours_plain.is_valid({"code": "48213"}), FAST_LOOPS)
    plain_re = _median_seconds(lambda: theirs_plain.is_valid({"code": "48213"}), FAST_LOOPS)
    return [
        {"name": "adversarial_pattern_validate_ms", "value": re2_long * 1e3, "unit": "ms",
         "baseline_name": "python_re_validate_22_chars_ms", "baseline_value": re_short * 1e3,
         "ratio": re2_long / re_short},
        {"name": "adversarial_pattern_world_call_ms", "value": call_long * 1e3, "unit": "ms",
         "baseline_name": "world_call_that_fits_ms", "baseline_value": call_fits * 1e3,
         "ratio": call_long / call_fits},
        {"name": "plain_pattern_validate_us", "value": plain_re2 * 1e6, "unit": "us",
         "baseline_name": "python_re_plain_pattern_validate_us", "baseline_value": plain_re * 1e6,
         "ratio": plain_re2 / plain_re},
    ]
