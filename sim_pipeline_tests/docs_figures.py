"""The figures docs/training.md shows, computed, never typed: the token lengths of each domain's exported cuts.

    python -m sim_pipeline_tests.docs_figures                       # fresh runs of the three domains (make run's sizes)
    python -m sim_pipeline_tests.docs_figures --warehouse data/warehouse   # the runs already in a warehouse
    python -m sim_pipeline_tests.docs_figures --check               # exit 1 when the docs differ, writing nothing

It exports each domain's v2 agent's cuts of one seed as TRL and verl files (the publish gate applies, as for any
export), measures them as `sim-pipeline export --stats` does (cl100k tokens; verl's tool_chars in characters), and
rewrites the table between the `tokens:start` / `tokens:end` markers of docs/training.md.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAINING = ROOT / "docs" / "training.md"
START, END = "<!-- tokens:start -->", "<!-- tokens:end -->"
DOMAINS = ("retail", "it_helpdesk", "food_delivery")
SEED = "0"
AGENT = "sim/agent-v2"  # the docs size the limits on the v2 agents' cuts (their versions come from the registry)
# The table's columns: (header, export format, length table's dataset, part).
COLUMNS: tuple[tuple[str, str, str, str], ...] = (
    ("SFT `messages`", "trl", "sft", "messages"), ("DPO `prompt`", "trl", "dpo", "prompt"),
    ("DPO `chosen`", "trl", "dpo", "chosen"), ("reward `chosen`", "trl", "reward", "chosen"),
    ("GRPO `prompt`", "trl", "grpo", "prompt"), ("verl `prompt`", "verl", "verl_grpo", "prompt"),
    ("verl `episode`", "verl", "verl_grpo", "episode"), ("verl `tool_chars`", "verl", "verl_grpo", "tool_chars"),
)


def version_of(domain: str, registry: str | os.PathLike[str] | None = None) -> str:
    """The domain's registry version played by the v2 agent (the one the table is measured on)."""
    from sim_pipeline.registry import REGISTRY_PATH, load_registry, versions_for

    found = [v.slug for v in versions_for(load_registry(registry or REGISTRY_PATH), domain) if v.model == AGENT]
    if not found:
        raise SystemExit(f"no version of domain '{domain}' plays {AGENT} in the registry: the table cannot be measured")
    return found[0]


def measure(warehouse: str, domain: str, version: str, seed: str = SEED) -> dict[str, tuple[int, int]]:
    """Per column, (p95, max) of the domain's exported cuts of one version and seed."""
    from sim_pipeline.cut.export_partitions import ExportRequest, export_warehouse
    from sim_pipeline.cut.lengths import exported_lengths

    found: dict[tuple[str, str, str], tuple[int, int]] = {}
    with tempfile.TemporaryDirectory() as out:
        for fmt in sorted({c[1] for c in COLUMNS}):
            report = export_warehouse(ExportRequest(domain=domain, format=fmt, out=out, warehouse=warehouse,
                                                    versions=(version,), seeds=(seed,)))
            if report.refused:
                raise SystemExit(f"{domain} {version} seed {seed}: the publish gate refused "
                                 f"{[r.cut for r in report.refused]}: {report.refused[0].reasons}")
            for f in report.files:
                if f.path:
                    table = exported_lengths(f.format, f.path, f.dataset, f.provenance_path)
                    found |= {(fmt, r.dataset, r.part): (int(r.p95), int(r.max)) for r in table.itertuples()}
    missing = [header for header, *key in COLUMNS if tuple(key) not in found]
    if missing:
        raise SystemExit(f"{domain} {version} seed {seed}: no exported rows for {missing} (an empty cut: run with "
                         "more samples, e.g. make run's sizes)")
    return {header: found[(fmt, dataset, part)] for header, fmt, dataset, part in COLUMNS}


def markdown_table(rows: dict[str, dict[str, tuple[int, int]]]) -> str:
    """The docs' table: one row per domain, p95 / max per column."""
    lines = ["| domain | " + " | ".join(h for h, *_ in COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    lines += [f"| {domain} | " + " | ".join(f"{cells[h][0]} / {cells[h][1]}" for h, *_ in COLUMNS) + " |"
              for domain, cells in rows.items()]
    return "\n".join(lines)


def shown(text: str) -> str:
    """The block between the markers of a docs text (the error names the file and the fix when they are missing)."""
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise SystemExit(f"{TRAINING}: needs one '{START}' line before one '{END}' line around the token table. Fix: "
                         "put them back around it")
    return text[text.index(START) + len(START):text.index(END)].strip("\n")


def rewrite(text: str, table: str) -> str:
    """The docs text with the block between the markers replaced by `table`; the rest unchanged."""
    shown(text)
    return text[:text.index(START) + len(START)] + "\n" + table + "\n" + text[text.index(END):]


@contextlib.contextmanager
def fresh_runs(domains: Sequence[str]) -> Iterator[str]:
    """`sim-pipeline run --domain D --seed 0` (make run's sizes) for each domain, in a temporary warehouse and
    Dagster instance; yields the warehouse. The model cache (data/cache) is shared, so a re-run costs no calls."""
    from sim_pipeline.cli import main as cli

    with tempfile.TemporaryDirectory() as root:
        home, warehouse = Path(root) / "dagster_home", str(Path(root) / "warehouse")
        home.mkdir()
        before = os.environ.get("DAGSTER_HOME")
        os.environ["DAGSTER_HOME"] = str(home)
        try:
            for domain in domains:
                print(f"running {domain} seed {SEED} ...", file=sys.stderr)
                with contextlib.redirect_stdout(io.StringIO()):
                    code = cli(["run", "--domain", domain, "--seed", SEED, "--warehouse", warehouse])
                if code != 0:
                    raise SystemExit(f"sim-pipeline run --domain {domain} exited {code}: no table from a failed run")
            yield warehouse
        finally:
            if before is None:
                os.environ.pop("DAGSTER_HOME", None)
            else:
                os.environ["DAGSTER_HOME"] = before


def main(argv: Sequence[str] | None = None) -> int:
    """Compute the token table and rewrite docs/training.md (or, with --check, say whether it differs)."""
    parser = argparse.ArgumentParser(prog="python -m sim_pipeline_tests.docs_figures", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warehouse", help="measure the runs already in this warehouse (with $DAGSTER_HOME's "
                                            "instance) instead of fresh ones")
    parser.add_argument("--domains", default=",".join(DOMAINS), help=f"comma-separated (default {','.join(DOMAINS)})")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the docs' table differs")
    args = parser.parse_args(argv)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    domains = [d for d in args.domains.split(",") if d]
    text = TRAINING.read_text(encoding="utf-8")
    shown(text)  # markers first: a broken docs file fails before minutes of runs
    runs = contextlib.nullcontext(args.warehouse) if args.warehouse else fresh_runs(domains)
    with runs as warehouse:
        table = markdown_table({d: measure(warehouse, d, version_of(d)) for d in domains})
    text = TRAINING.read_text(encoding="utf-8")  # again: the file may have been edited while the runs ran
    if args.check:
        same = shown(text) == table
        print("docs/training.md: the token table is current" if same else
              f"docs/training.md differs; computed:\n{table}\nshown:\n{shown(text)}")
        return 0 if same else 1
    updated = rewrite(text, table)
    if updated != text:
        tmp = TRAINING.with_name(f".{TRAINING.name}.tmp-{os.getpid()}")
        tmp.write_text(updated, encoding="utf-8")
        os.replace(tmp, TRAINING)  # atomic: a reader sees the old docs or the new
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
