"""Reference solutions: every shipped situation is solvable, and a pack the world cannot model is caught.

The reference plays a careful agent from what the user knows; the state oracle labels its replay. A situation whose
reference fails is one no agent can pass (or one the world lets an agent fail), so the blocking situations_solvable
check stops the run before any rollout is paid for.
"""

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest

from sim_pipeline import cover
from sim_pipeline.axes import axis_values, validated_constraints
from sim_pipeline.definitions import build_definitions
from sim_pipeline.domain import DOMAINS_DIR, load_domain
from sim_pipeline.errors import DomainPackError
from sim_pipeline.search.situations import build_situations
from sim_pipeline.world.state import build_state


def situations(domain, seed):
    cells = cover.covering_array(axis_values(domain), seed=seed, constraints=validated_constraints(domain))
    return build_situations(domain, build_state(domain, seed), cells, seed=seed, n_phrasings=1)


@pytest.mark.parametrize("name", ["retail", "it_helpdesk"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_shipped_situation_is_solvable(name, seed):
    table = situations(load_domain(name), seed)
    bad = table.loc[~table["solvable"], ["tool", "world_state", "tool_condition", "reference"]]
    assert bad.empty, bad.to_string()
    # The reference really acts: writes where a write is expected, and declines without a call only off-topic
    # or over a policy limit.
    writes = table[table["expect_write"]]
    assert len(writes) >= 15 and writes["reference"].str.contains("applied").all()
    silent = table[table["reference_calls"].map(len) == 0]
    assert set(silent["noop_pass"]) <= {True}


def _copy(tmp_path: Path, name: str) -> Path:
    pack = tmp_path / name
    shutil.copytree(DOMAINS_DIR / "retail", pack)
    spec = pack / "domain.yaml"
    spec.write_text(spec.read_text().replace("name: retail", f"name: {name}"))
    return pack


def _set_argument(pack: Path, tool: str, argument: str, schema: dict) -> None:
    path = pack / "tools" / f"{tool}.json"
    data = json.loads(path.read_text())
    data["function"]["parameters"]["properties"][argument] = schema
    path.write_text(json.dumps(data))


NESTED_ADDRESS = {
    "type": "object", "required": ["street", "city", "zip"], "additionalProperties": False,
    "properties": {"street": {"type": "string", "minLength": 3}, "city": {"type": "string", "enum": ["Portland", "Austin"]},
                   "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}


@pytest.fixture
def nested_pack(tmp_path):
    """update_address takes the address as an object (no pool: the world draws it from the schema)."""
    pack = _copy(tmp_path, "nested")
    _set_argument(pack, "update_address", "address", NESTED_ADDRESS)
    spec = pack / "domain.yaml"
    spec.write_text("\n".join(line for line in spec.read_text().splitlines() if not line.startswith("  address: [")))
    return pack


@pytest.fixture
def misshapen_ids_pack(tmp_path):
    """update_address wants order ids shaped ORD-123456, but orders (like every other tool) use digits."""
    pack = _copy(tmp_path, "misshapen")
    _set_argument(pack, "update_address", "order_id", {"type": "string", "pattern": "^ORD-[0-9]{6}$"})
    return pack


def test_nested_values_are_drawn_schema_true_and_solvable(nested_pack):
    table = situations(load_domain(nested_pack), 0)
    assert table["solvable"].all(), table.loc[~table["solvable"], "reference"].tolist()
    wanted = table[table["intent_tool"] == "update_address"]
    addresses = [f["address"] for f in wanted["facts"].map(json.loads)]
    assert addresses and all(set(a) == {"street", "city", "zip"} and a["city"] in ("Portland", "Austin")
                             and len(a["zip"]) == 5 and a["zip"].isdigit() for a in addresses)


def test_a_pool_value_the_schema_refuses_is_a_load_error(tmp_path):
    pack = _copy(tmp_path, "pooled")
    _set_argument(pack, "update_address", "address", NESTED_ADDRESS)  # the string pool no longer fits
    with pytest.raises(DomainPackError, match=r"field 'facts/address': value '.*' does not fit argument 'address' "
                                              r"of update_address .*Fix: write pool values the tool's schema accepts"):
        load_domain(pack)


@pytest.mark.parametrize(("fixture", "tool"), [("misshapen_ids_pack", "update_address")])
def test_a_write_that_can_never_succeed_is_unsolvable(request, fixture, tool):
    table = situations(load_domain(request.getfixturevalue(fixture)), 0)
    bad = table[~table["solvable"]]
    assert len(bad) and set(bad["tool"]) <= {tool, "multi_tool"}
    expected = table[table["expect_write"] & (table["intent_tool"] == tool)]
    assert len(expected) and not expected["solvable"].any()
    # Each failure is the call the world refused (the write expected, or the look-up that should show why not).
    assert bad["reference_calls"].map(lambda calls: any(c.startswith(f"{tool}(") for c in calls)).all()
    assert bad["reference"].str.contains(f"never applied {tool}|never found out").all()


def test_the_situations_check_blocks_the_run(misshapen_ids_pack, tmp_path, monkeypatch):
    monkeypatch.setattr("sim_pipeline.domain.DOMAINS_DIR", misshapen_ids_pack.parent)
    defs = build_definitions(["misshapen"], warehouse=str(tmp_path / "warehouse"))
    instance = dg.DagsterInstance.ephemeral()
    keys = [dg.AssetKey(["misshapen", s]) for s in ("covering_array", "world", "situations")]
    dg.materialize(list(defs.assets), selection=[dg.AssetKey(["misshapen", "axes"])], instance=instance,
                   resources=defs.resources)
    result = dg.materialize(list(defs.assets), selection=keys, partition_key="0", instance=instance,
                            resources=defs.resources, raise_on_error=False)
    assert not result.success
    evaluations = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert [(c.check_name, c.passed) for c in evaluations] == [("situations_solvable", False)]
    assert evaluations[0].metadata["unsolvable"].value > 0
