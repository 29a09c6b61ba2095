"""The `view` verb's command: write a domain's warehouse as one self-contained HTML file (sim_pipeline/view/)."""

from __future__ import annotations

import argparse
from pathlib import Path


def cmd_view(args: argparse.Namespace) -> int:
    """Write the view; every file read is verified (sidecar, else the instance's record) unless --allow-unverified."""
    from sim_pipeline.cli import _chosen_versions, _instance, _registry, _warn
    from sim_pipeline.defs.io import verifying_with
    from sim_pipeline.domain import load_domain, pack_names
    from sim_pipeline.seed_spec import parse_seeds
    from sim_pipeline.view.assemble import assemble
    from sim_pipeline.view.page import write

    seeds = parse_seeds(args.seeds, args.seeds_flag)
    if args.domain not in pack_names():
        load_domain(args.domain)  # its message names the domains that are there
    versions = _chosen_versions(args.domain, None, _registry(args))
    with verifying_with(_instance(), allow_unverified=args.allow_unverified, warn=_warn):
        data = assemble(args.warehouse, args.domain, seeds, versions)
    out = write(data, Path(args.out))
    stale = " (some figures are marked stale: see the warning at its top)" if data.lineage else ""
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): {len(data.transcripts)} transcripts, "
          f"{len(data.deltas)} delta(s){stale}")
    return 0
