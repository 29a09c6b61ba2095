"""The `view` verb's command: write a domain's warehouse as one self-contained HTML file (sim_pipeline/view/), and
with --serve, serve it on 127.0.0.1 until Ctrl-C."""

from __future__ import annotations

import argparse
from pathlib import Path

from sim_pipeline import defaults


def cmd_view(args: argparse.Namespace) -> int:
    """Write the view (every file read is verified: sidecar, else the instance's record, unless --allow-unverified);
    with --serve, serve it on 127.0.0.1 until Ctrl-C."""
    from sim_pipeline.cli import _chosen_versions, _instance, _registry, _warn
    from sim_pipeline.errors import SimPipelineError
    from sim_pipeline.defs.io import verifying_with
    from sim_pipeline.domain import load_domain, pack_names
    from sim_pipeline.seed_spec import parse_seeds
    from sim_pipeline.view.assemble import assemble
    from sim_pipeline.view.page import write

    if args.port is not None and not args.serve:
        raise SimPipelineError(f"--port {args.port} without --serve: nothing would listen. Fix: add --serve, or drop "
                               "--port to only write the file")
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
    if args.serve:
        serve(out, defaults.VIEW_PORT if args.port is None else args.port)
    return 0


def serve(page: Path, port: int) -> None:
    """Serve `page` on 127.0.0.1 (sim_pipeline/view/serve.py), print its URL, and stop cleanly on Ctrl-C."""
    from sim_pipeline.view.serve import server, url

    with server(page, port) as httpd:
        print(f"serving {page} at {url(httpd)} (this machine only; Ctrl-C stops)", flush=True)
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            print("stopped", flush=True)
