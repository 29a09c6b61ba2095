"""The `view` verb: write a domain's warehouse as one self-contained HTML file (sim_pipeline/view/)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_view(verbs: argparse._SubParsersAction, seeds_option, warehouse_default: str, unverified_flag: str,
             unverified_help: str, default_domain: str) -> None:
    """Register `view` on the command line."""
    view = verbs.add_parser(
        "view", help="write one self-contained HTML file (open it from disk, no network) with the decision, pass@k "
                     "curves, slices, world fit, judge trust, cut sizes and every transcript with filters",
        description="Example: sim-pipeline view --domain retail --out report.html (then open report.html in a "
                    "browser). Stale figures are marked as `report` marks them.")
    view.add_argument("--domain", default=default_domain, help=f"domain pack (default {default_domain})")
    seeds_option(view, ["0"], "(default 0)")
    view.add_argument("--out", default="report.html", help="the HTML file to write (default report.html)")
    view.add_argument("--warehouse", default=warehouse_default, help="Parquet base path (default data/warehouse)")
    view.add_argument(unverified_flag, action="store_true", help=unverified_help)
    view.set_defaults(fn=cmd_view)


def cmd_view(args: argparse.Namespace) -> int:
    """Write the view; every file read is verified (sidecar, else the instance's record) unless --allow-unverified."""
    from sim_pipeline.cli import _chosen_versions, _instance, _warn
    from sim_pipeline.defs.io import verifying_with
    from sim_pipeline.domain import load_domain, pack_names
    from sim_pipeline.seed_spec import parse_seeds
    from sim_pipeline.view.assemble import assemble
    from sim_pipeline.view.page import write

    seeds = parse_seeds(args.seeds)
    if args.domain not in pack_names():
        load_domain(args.domain)  # its message names the domains that are there
    versions = _chosen_versions(args.domain, None)
    with verifying_with(_instance(), allow_unverified=args.allow_unverified, warn=_warn):
        data = assemble(args.warehouse, args.domain, seeds, versions)
    out = write(data, Path(args.out))
    stale = " (some figures are marked stale: see the warning at its top)" if data.lineage else ""
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): {len(data.transcripts)} transcripts, "
          f"{len(data.deltas)} delta(s){stale}")
    return 0
