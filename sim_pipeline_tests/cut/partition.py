"""The stored real retail partition (agent-v1, seed 0) under cut/data, and its cuts: what the trainer tests export."""

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from sim_pipeline.cut.cuts import build_cut
from sim_pipeline.domain import load_domain
from sim_pipeline.situation import Situation
from sim_pipeline.warehouse import table_frame

DATA = Path(__file__).parent / "data"
TOOLS = load_domain("retail").tool_schemas


def table(step: str) -> pd.DataFrame:
    """One stored table of the partition: rollouts, grades or situations (test data kept in the repository, not a
    warehouse file: no sidecar or instance vouches for it, git does)."""
    return table_frame(pq.read_table(DATA / f"retail_agent-v1_seed0_{step}.parquet", page_checksum_verification=True))


def situations() -> list[Situation]:
    """The partition's situations, as the GRPO exports bind them."""
    return [Situation.from_row(r) for r in table("situations").to_dict("records")]


def cuts(*names: str) -> dict[str, pd.DataFrame]:
    """The named cuts of the partition, built as the cut step builds them (judge trusted)."""
    rollouts, grades = table("rollouts"), table("grades")
    return {name: build_cut(name, rollouts, grades, tools=TOOLS, judge_trusted=True, opt_out=False).table
            for name in names}
