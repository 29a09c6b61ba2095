"""The seeded world: deterministic per seed, lookup groups, a version on every record, Parquet-ready tables."""

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from sim_pipeline.domain import Domain
from sim_pipeline.world.infer import infer_domain
from sim_pipeline.world.options import WorldOptions
from sim_pipeline.world.state import build_state, state_from_table, state_table


def test_state_is_deterministic_and_round_trips_through_parquet(retail: Domain, helpdesk: Domain, tmp_path: Path) -> None:
    for domain in (retail, helpdesk):
        state = build_state(domain, 4)
        assert state == build_state(domain, 4) and state != build_state(domain, 5)
        table = state_table(state)
        path = tmp_path / f"{domain.name}.parquet"
        table.to_parquet(path)
        assert state_from_table(pd.read_parquet(path)) == state
        assert pa.Table.from_pandas(table).num_rows == sum(len(t) for t in state.values())


def test_records_share_lookup_values_in_search_hit_groups(retail: Domain) -> None:
    state = build_state(retail, 0, WorldOptions(records_per_entity=60))
    orders = state["order"].values()
    counts = {}
    for order in orders:
        counts[order["email"]] = counts.get(order["email"], 0) + 1
        assert order["version"] == 1
    assert len(orders) == 60 and max(counts.values()) <= 6 and max(counts.values()) > 1


def test_inferred_ids_take_their_arguments_shape(tool: Any) -> None:
    domain = infer_domain([tool("get_case", "Get a case.", {"case_id": {"type": "string", "pattern": "^C-[0-9]{4}$"}},
                                ["case_id"]),
                           tool("get_seat", "Get a seat.", {"seat_id": {"type": "integer", "minimum": 1,
                                                                        "maximum": 30}}, ["seat_id"])])
    state = build_state(domain, 0)
    assert all(key.startswith("C-") and len(key) == 6 for key in state["case"])
    assert len(state["seat"]) == 30 and all(isinstance(r["seat_id"], int) for r in state["seat"].values())
