"""Argument checks whose schema patterns would make a backtracking regex engine run for ever: the world answers at once.

The adversarial call runs in a child process because a hang guard in a thread cannot work: Python's `re` holds the
GIL for the whole match, so neither a thread's join timeout nor a signal would fire before it ends (hours, here).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import sim_pipeline
from sim_pipeline.domain import load_domain
from sim_pipeline.world.sandbox import Sandbox, WorldSetup

HANG_GUARD_SECONDS = 60  # the child's start (imports, pack load) plus one call; backtracking would take hours
ADVERSARIAL = "a" * 40 + "!"  # `^(a|a)*$` backtracks over 2**40 ways to split the a's before failing at the "!"
CHILD = """
import json, sys
from sim_pipeline.domain import load_domain
from sim_pipeline.world.sandbox import Sandbox, WorldSetup

sandbox = Sandbox(load_domain(sys.argv[1]), seed=0, setup=WorldSetup())
voucher = min(sandbox.state["voucher"])
print(json.dumps(sandbox.call("redeem_voucher", {"voucher_id": voucher, "code": sys.argv[2]})))
"""


def _tool(pack: Path, name: str, description: str, properties: dict) -> None:
    (pack / "tools" / f"{name}.json").write_text(json.dumps({"type": "function", "function": {
        "name": name, "description": description, "parameters": {
            "type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}}}))


def _voucher_pack(root: Path) -> Path:
    """A pack whose redeem code has a pattern with exponentially many ways to fail: `^(a|a)*$`."""
    pack = root / "vouchers"
    (pack / "tools").mkdir(parents=True)
    voucher_id = {"type": "string", "pattern": "^V[0-9]{4}$"}
    _tool(pack, "get_voucher", "Look up a gift voucher.", {"voucher_id": voucher_id})
    _tool(pack, "redeem_voucher", "Redeem a gift voucher with its code.",
          {"voucher_id": voucher_id, "code": {"type": "string", "pattern": "^(a|a)*$"}})
    (pack / "policy.md").write_text("# Vouchers\n\n- **own_voucher**: Redeem only a voucher the customer holds.\n")
    (pack / "domain.yaml").write_text("name: vouchers\ntitle: Vouchers\nagent_role: You redeem gift vouchers.\n")
    return pack


def test_a_backtracking_pattern_loads_and_an_adversarial_argument_is_rejected_at_once(tmp_path: Path) -> None:
    pack = _voucher_pack(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(Path(sim_pipeline.__file__).parents[1])}
    done = subprocess.run([sys.executable, "-c", CHILD, str(pack), ADVERSARIAL], capture_output=True, text=True,
                          timeout=HANG_GUARD_SECONDS, env=env, check=True)
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["status"] == "rejected" and result["error"] == "invalid_argument"
    assert result["fields"] == ["code"] and "does not match '^(a|a)*$'" in result["message"]


def test_the_pattern_still_accepts_what_it_matches(tmp_path: Path) -> None:
    sandbox = Sandbox(load_domain(_voucher_pack(tmp_path)), seed=0, setup=WorldSetup())
    voucher = min(sandbox.state["voucher"])
    # "a" * 40 fits the schema and is then refused as a placeholder (a repeated letter), which is checked after it.
    for code, status in (("aa", "ok"), ("a" * 40, "placeholder_argument"), ("", "missing_required"),
                         ("aab", "invalid_argument"), ("aa\n", "invalid_argument")):  # `$` ends the text (ECMA)
        result = sandbox.call("redeem_voucher", {"voucher_id": voucher, "code": code})
        assert result.get("error", result["status"]) == status, (code, result)
