"""`sim-pipeline`: run the pipeline, manage the policy registry, print the summary."""

from __future__ import annotations

import argparse
import atexit
import gc
import itertools
import os
import re
import shutil
import sys
import textwrap
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from sim_pipeline import defaults
from sim_pipeline.cli_view import cmd_view
from sim_pipeline.errors import SimPipelineError

if TYPE_CHECKING:
    from sim_pipeline.defs.launch import RunOutcome
    from sim_pipeline.registry import PolicyVersion

INSTANCE_CONFIG = Path(__file__).parent / "defs" / "dagster.yaml"  # the project's local instance settings
UNVERIFIED_FLAG = "--allow-unverified"  # warehouse.UNVERIFIED_FLAG, which its refusals name (not imported: pyarrow)
WAIT_HELP = ("when another sim-pipeline process, or a run the Dagster daemon launched, is running one of this "
             "command's partitions, wait for it to finish and then run (its model calls come from the response "
             "cache) instead of refusing")
UNVERIFIED_HELP = ("read a warehouse file that has neither its .sha256 sidecar nor a content_sha256 recorded in the "
                   "Dagster instance, printing a WARNING line for each (default: refuse it)")
EXPORT_UNVERIFIED_HELP = UNVERIFIED_HELP + ("; also export files that record no lineage (written before it was "
                                            "recorded), whose consistency cannot be checked")
REGISTRY_VARIABLE = "SIM_PIPELINE_REGISTRY"  # registry.REGISTRY_PATH's variable (not imported: it loads the packs)
REGISTRY_HELP = (f"the policy registry file this command reads (default: ${REGISTRY_VARIABLE} when set, else "
                 "data/policies.yaml)")
WAREHOUSE_HELP = "Parquet base path (default: $SIM_PIPELINE_WAREHOUSE when set, else data/warehouse; s3://... works)"
BACKFILL_ACTIONS = ("launch", "list", "cancel")  # `backfill` alone is `backfill launch`
LIST_FLAGS = ("--seeds", "--seed", "--versions")  # the options whose one value may list several, comma-separated
DAGSTER_HOME_NOTE = "the runs are recorded in the Dagster instance at $DAGSTER_HOME (./.dagster_home when unset)"


def _instance():
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(Path(".dagster_home").resolve())))
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(INSTANCE_CONFIG.read_text())
    from sim_pipeline.defs.event_log import local_instance
    from sim_pipeline.defs.launch import fail_orphaned_runs

    instance = local_instance(home)
    atexit.register(instance.dispose)  # closes the event log's kept connections (checkpointing their files)
    for line in fail_orphaned_runs(instance):
        print(f"note: {line}", file=sys.stderr)
    return instance


def _registry(args: argparse.Namespace) -> Path:
    """The registry file the command reads: --registry, else $SIM_PIPELINE_REGISTRY, else data/policies.yaml."""
    from sim_pipeline import registry

    return Path(args.registry) if args.registry else registry.REGISTRY_PATH


def _asked_versions(items: list[str] | None) -> list[str]:
    """The versions --versions names: each value comma-separated, the flag given twice adding up."""
    return [slug for item in items or [] for slug in item.split(",") if slug]


def _chosen_versions(domain: str, asked_items: list[str] | None, registry_path: Path) -> list[PolicyVersion]:
    """The domain's registry versions, or those asked for ('a,b', or the flag repeated); unknown ones are a clear
    error."""
    from sim_pipeline.registry import load_registry, versions_for

    versions = versions_for(load_registry(registry_path), domain)
    asked = _asked_versions(asked_items)
    if asked:
        unknown = sorted(set(asked) - {v.slug for v in versions})
        if unknown:
            raise SimPipelineError(f"versions {unknown} do not serve domain '{domain}'. Fix: use some of "
                                   f"{[v.slug for v in versions]}")
        versions = [v for v in versions if v.slug in asked]
    if not versions:
        raise SimPipelineError(f"no policy version serves domain '{domain}' in {registry_path}. Fix: add one to it, "
                               "or pass --registry a file that has one")
    return versions


def _check_models(registry_path: Path, versions: list[PolicyVersion], writer: str | None) -> None:
    """Every model the runs will call passes the gateway's check (a known embedded model or litellm provider, its
    key set, its endpoint listening) before any step runs: a typo in --writer or the registry costs no run."""
    from sim_pipeline.errors import ModelCallError
    from sim_pipeline.models.gateway import Gateway
    from sim_pipeline.registry import load_models

    gateway = Gateway(fast_path=True, models=load_models(registry_path))
    if writer is not None:
        try:
            gateway.check(writer)
        except ModelCallError as exc:
            raise SimPipelineError(f"--writer {writer}: {exc}") from None
    for version in versions:
        for field, model in version.models_called(writer or defaults.SEARCH_WRITER_MODEL).items():
            try:
                gateway.check_all([model])
            except ModelCallError as exc:
                raise SimPipelineError(f"version '{version.slug}' of {registry_path}, field '{field}': {exc}") from None


def cmd_run(args: argparse.Namespace) -> int:
    """Materialize every step for one seed and the domain's versions, then print the summary."""
    from sim_pipeline.defs.io import verifying_with
    from sim_pipeline.defs.launch import claim_partitions, made_by, materialize_domain, new_claim, sync_partitions
    from sim_pipeline.domain import load_domain
    from sim_pipeline.kind_guesses import guess_lines
    from sim_pipeline.models.confusable import confusable_pairs
    from sim_pipeline.report import render
    from sim_pipeline.seed_spec import parse_seeds

    seeds = parse_seeds(args.seeds, args.seeds_flag)
    domain = load_domain(args.domain)  # a bad pack fails here, with its message, before any run starts
    registry = _registry(args)
    versions = _chosen_versions(args.domain, args.versions, registry)
    for line in guess_lines(domain):
        print(line, file=sys.stderr)
    if any(v.model.startswith("sim/") for v in versions):  # only the embedded agent picks tools by word overlap
        for pair in confusable_pairs(domain):
            print(f"warning: {pair.sentence}", file=sys.stderr)
    sizes = {key: value for key, value in (("max_situations", args.situations), ("n_phrasings", args.phrasings),
                                           ("train_samples", args.samples), ("heldout_samples", args.heldout_samples),
                                           ("search_budget_rows", args.search_budget), ("writer_model", args.writer))
             if value is not None}
    if args.samples is not None:
        sizes["probe_samples"] = 0  # an explicit sample count is what runs: no probe-then-fill
    _check_models(registry, versions, args.writer)
    instance = _instance()
    sync_partitions(instance, [args.domain], registry_path=str(registry))
    outcomes = []
    with new_claim(instance, wait=args.wait) as claim:
        # Every seed's partitions before the first runs: a busy one is refused before anything is paid for.
        claim_partitions(instance, claim, args.domain, seeds, versions)
        for seed in seeds:
            started = time.perf_counter()
            print(f"Materializing domain '{args.domain}' seed {seed} for {[v.slug for v in versions]} "
                  f"(Dagster instance: {os.environ['DAGSTER_HOME']})")
            ran = materialize_domain(instance, args.domain, seed, versions, warehouse=args.warehouse, sizes=sizes,
                                     concurrency=args.concurrency, registry=str(registry), claim=claim)
            outcomes += ran
            with verifying_with(instance):
                summary = render(args.warehouse, args.domain, seed, versions, seconds=time.perf_counter() - started,
                                 made_by=made_by(instance, args.domain, seed, versions, {o.run_id for o in ran}),
                                 stopped=stopped_lines(ran, seed, versions))
            print()
            print(summary)
            if any(o.interrupted for o in ran):
                break  # interrupted: no later seed runs either
    failed = [o.label for o in outcomes if not o.success]
    if failed:
        print(f"\n{len(failed)} run(s) did not fully succeed: {failed}")
    return 0 if not failed or args.allow_failed_checks else 1


def _cause(outcome: RunOutcome) -> str:
    """Why a run stopped, one bounded line: a project error's own message (its module path dropped)."""
    text = re.sub(r"sim_pipeline\.errors\.\w+: ", "", outcome.failure) or "a blocking check failed (see the UI)"
    return text if len(text) <= defaults.STOP_LINE_CHARS else text[:defaults.STOP_LINE_CHARS - 3] + "..."


def stopped_lines(outcomes: list[RunOutcome], seed: str, versions: list[PolicyVersion]) -> dict[str, list[str]]:
    """Per version whose rollouts this command's run for the seed did not write: why it stopped (run, step, cause)
    and which steps did not run, as the summary prints them in place of '0 rollouts'."""
    from sim_pipeline.defs.partitions import partition_key

    by_partition = {o.partition: o for o in outcomes}
    seed_run = by_partition.get(seed)
    stopped = {}
    for v in versions:
        run = by_partition.get(str(partition_key(v.slug, seed)))
        if run is not None and not run.success and "rollouts" in run.not_run:
            stopped[v.slug] = [f"STOPPED (run {run.run_id[:8]}): {_cause(run)}", f"not run: {', '.join(run.not_run)}"]
        elif run is None and seed_run is not None and not seed_run.success:
            stopped[v.slug] = [f"not run: seed {seed}'s cover, world and situations did not succeed (run "
                               f"{seed_run.run_id[:8]}: {_cause(seed_run)})"]
    return stopped


def cmd_backfill(args: argparse.Namespace) -> int:
    """Launch one Dagster asset backfill over versions x seeds (with --wait, follow it to the end)."""
    from sim_pipeline import registry as registry_module
    from sim_pipeline.defs.backfill import daemon_running, launch_backfill, plan_backfill, wait_for_backfill
    from sim_pipeline.defs.launch import sync_partitions
    from sim_pipeline.domain import load_domain
    from sim_pipeline.seed_spec import parse_seeds

    seeds = parse_seeds(args.seeds, args.seeds_flag)
    load_domain(args.domain)  # a bad pack fails here, before anything is queued
    registry = _registry(args)
    versions = _chosen_versions(args.domain, args.versions, registry)
    plan = plan_backfill(args.domain, versions, seeds)
    slugs = {v.slug for v in versions}
    for v in versions:
        if v.baseline and v.baseline not in slugs:
            print(f"note: {v.slug}'s baseline {v.baseline} is not in this backfill; its delta uses the grades "
                  f"{v.baseline} already has")
    if registry.resolve() != registry_module.REGISTRY_PATH.resolve():
        print(f"note: the daemon runs the backfill with the registry its code location read when it started "
              f"(${REGISTRY_VARIABLE} where `make dev` started, else data/policies.yaml), not --registry: start it "
              f"with {REGISTRY_VARIABLE}={registry} for its runs to read this one")
    instance = _instance()
    sync_partitions(instance, [args.domain], registry_path=str(registry))
    backfill_id = launch_backfill(instance, args.domain, plan)
    print(f"backfill {backfill_id} requested: {plan.title} ({len(plan.targets)} asset partitions)")
    print(f"  UI: http://127.0.0.1:3000/runs/b/{backfill_id} (Overview > Backfills in `make dev`)")
    if not daemon_running(instance) and not args.wait:
        print("  no backfill daemon is running on this instance: `make dev` starts one (the UI and its daemon), "
              "and it will pick this backfill up")
    if not args.wait:
        return 0
    if not daemon_running(instance):
        raise SimPipelineError(f"--wait: no daemon would ever finish backfill {backfill_id}. Fix: start `make dev`, "
                               "then wait again, or follow it in the UI; it stays queued until a daemon runs it")
    return 0 if wait_for_backfill(instance, backfill_id).succeeded else 1


def cmd_backfill_list(args: argparse.Namespace) -> int:
    """Print the instance's backfills, newest first: id, status, when, what they target and how their runs stand."""
    from sim_pipeline.defs.backfill import backfill_lines

    lines = backfill_lines(_instance())
    print("\n".join(lines) if lines else f"no backfill in the instance at {os.environ['DAGSTER_HOME']}: "
          "`sim-pipeline backfill --seeds 0-7` launches one")
    return 0


def cmd_backfill_cancel(args: argparse.Namespace) -> int:
    """Mark a backfill canceling, as the UI's Cancel does: its daemon launches no more runs and cancels the rest."""
    from sim_pipeline.defs.backfill import cancel_backfill, daemon_running

    backfill_id = args.backfill_id
    if not backfill_id:
        raise SimPipelineError("backfill cancel needs the backfill's id. Fix: `sim-pipeline backfill list` shows the "
                               "ids; then `sim-pipeline backfill cancel <id>`")
    instance = _instance()
    print(cancel_backfill(instance, backfill_id))
    if not daemon_running(instance):
        print("  no backfill daemon is running on this instance: it launches nothing meanwhile, and `make dev`'s "
              "daemon finishes the cancel (in-flight runs stopped, status canceled)")
    return 0


def cmd_loop(args: argparse.Namespace) -> int:
    """A version's cuts -> trained versions -> their held-out rollouts -> deltas against it, then the summary."""
    from sim_pipeline.defs.io import verifying_with
    from sim_pipeline.defs.launch import made_by
    from sim_pipeline.defs.loop import run_loop
    from sim_pipeline.protocol.train_methods import TRAIN_METHODS
    from sim_pipeline.report import loop_lines, render

    seed = _one_seed(args, "loop trains from one seed's cuts at a time")
    methods = list(TRAIN_METHODS) if args.method == "all" else [args.method]
    started = time.perf_counter()
    instance = _instance()
    print(f"Loop from {args.source} ({', '.join(methods)}) on seed {seed} "
          f"(Dagster instance: {os.environ['DAGSTER_HOME']})")
    with verifying_with(instance):
        result = run_loop(instance, args.source, methods, seed, warehouse=args.warehouse, wait=args.wait,
                          registry_path=_registry(args))
        versions = [result.source, *result.trained.values()]
        summary = render(args.warehouse, result.source.domain, seed, versions,
                         seconds=time.perf_counter() - started,
                         made_by=made_by(instance, result.source.domain, seed, versions,
                                         {o.run_id for o in result.outcomes}))
        lines = loop_lines(args.warehouse, result.source, result.trained, result.methods, result.registry)
    print()
    print(summary)
    print("\n".join(lines))
    return 0 if result.success else 1


def _pack_problems(domains: list[str]) -> dict[str, str]:
    """The domains whose pack does not load, with why (one line each); each pack is loaded on its own."""
    from sim_pipeline.domain import load_domain
    from sim_pipeline.errors import one_line

    problems = {}
    for domain in domains:
        try:
            load_domain(domain)
        except Exception as exc:  # noqa: BLE001 -- one broken pack (even a bug in its loading) must not hide the rest
            problems[domain] = one_line(exc)
    return problems


def policy_table(versions: list[PolicyVersion], broken: dict[str, str]) -> str:
    """The registry as `policies list` prints it: a header, then one row per version in columns as wide as their
    longest value; a STATUS column only when some pack does not load."""
    from tabulate import tabulate

    header = ["DOMAIN", "VERSION", "BASELINE", "MODEL", "USER", "JUDGE"] + (["STATUS"] if broken else [])
    rows = [[v.domain, v.slug, v.baseline or "-", v.model, v.user_model, v.judge_model]
            + (["BROKEN (its pack does not load)" if v.domain in broken else "ok"] if broken else [])
            for v in sorted(versions, key=lambda v: (v.domain, v.order))]
    # disable_numparse: a version or model named like a number ('2024.10') is printed as written, left-aligned.
    table = tabulate(rows, headers=header, tablefmt="plain", disable_numparse=True, stralign="left")
    return "\n".join(line.rstrip() for line in table.splitlines())


def cmd_policies_list(args: argparse.Namespace) -> int:
    """Print the registry as a table (marking versions whose pack is broken, and why after it)."""
    from sim_pipeline.domain import load_domain
    from sim_pipeline.kind_guesses import guess_lines
    from sim_pipeline.registry import load_registry

    registry = load_registry(_registry(args))
    broken = _pack_problems(sorted({v.domain for v in registry.values()}))
    print(policy_table(list(registry.values()), broken))
    for domain, problem in sorted(broken.items()):
        print(f"{domain}: BROKEN pack: {problem}")
    for domain in sorted({v.domain for v in registry.values()} - set(broken)):
        for line in guess_lines(load_domain(domain)):
            print(line, file=sys.stderr)
    return 0


def cmd_policies_sync(args: argparse.Namespace) -> int:
    """Register every version as a dynamic partition of its domain; an invalid registry registers nothing."""
    from sim_pipeline.defs.launch import sync_partitions
    from sim_pipeline.registry import load_registry

    path = _registry(args)
    registry = load_registry(path)
    added = sync_partitions(_instance(), sorted({v.domain for v in registry.values()}), registry_path=str(path))
    for domain, new in added.items():
        print(f"{domain}: added {new}" if new else f"{domain}: up to date")
    return 0


def _warn(line: str) -> None:
    """A warning line on stderr (an unverified read the user asked for)."""
    print(line, file=sys.stderr)


def cmd_report(args: argparse.Namespace) -> int:
    """Print the summary of what the warehouse holds for a domain and seed; every file read is verified (its
    sidecar, else the instance's recorded content_sha256) unless --allow-unverified, and its lineage checked: exit 1
    when some figures are stale (computed from inputs rewritten since)."""
    from sim_pipeline.defs.io import verifying_with
    from sim_pipeline.defs.launch import made_by
    from sim_pipeline.domain import load_domain, pack_names
    from sim_pipeline.report import render, standing
    from sim_pipeline.seed_spec import parse_seeds

    seeds = parse_seeds(args.seeds, args.seeds_flag)
    if args.domain not in pack_names():
        load_domain(args.domain)  # a domain that is not there: its message names the ones that are
    versions = _chosen_versions(args.domain, None, _registry(args))
    instance = _instance()
    with verifying_with(instance, allow_unverified=args.allow_unverified, warn=_warn):
        summaries, stale = [], False
        for seed in seeds:
            found = standing(args.warehouse, args.domain, seed, versions)
            stale = stale or any(f.stale for f in found.values())
            summaries.append(render(args.warehouse, args.domain, seed, versions,
                                    made_by=made_by(instance, args.domain, seed, versions), found=found))
    print("\n\n".join(summaries))  # whole or not at all: a refused file prints no partial summary
    # Stale figures are printed, marked, with their fix; exit 1 so a script publishing the summary stops on a mix.
    return 1 if stale else 0


def cmd_export(args: argparse.Namespace) -> int:
    """Gate the domain's cut partitions again and write them in a trainer's format; exit 1 if a cut was refused."""
    from sim_pipeline.cut.export_partitions import ExportRequest, export_warehouse
    from sim_pipeline.cut.lengths import tokenizer_counter
    from sim_pipeline.defs.io import verifying_with
    from sim_pipeline.seed_spec import parse_seeds

    seeds = tuple(parse_seeds(args.seeds, args.seeds_flag)) if args.seeds else ()
    if args.tokenizer:
        tokenizer_counter(args.tokenizer)  # a bad path fails before anything is written

    try:
        with verifying_with(_instance(), allow_unverified=args.allow_unverified, warn=_warn):
            report = export_warehouse(ExportRequest(domain=args.domain, format=args.format, out=args.out,
                                                    warehouse=args.warehouse,
                                                    versions=tuple(_asked_versions(args.versions)), seeds=seeds,
                                                    registry_path=_registry(args),
                                                    allow_unrecorded=args.allow_unverified))
    except OSError as exc:
        if exc.filename is None or not Path(exc.filename).resolve().is_relative_to(Path(args.out).resolve()):
            raise
        raise SimPipelineError(f"--out {args.out}: cannot write {exc.filename} ({exc.strerror or exc}). Fix: pass "
                               "--out a directory this user can create and write to") from None
    for name in report.unchecked:
        _warn(f"WARNING: LINEAGE NOT RECORDED in {name}: {UNVERIFIED_FLAG} was given, so it is exported without "
              "checking that it and the files beside it come from one run")
    for f in report.files:
        extra = "".join([f", left out {f.left_out}" if f.left_out else "",
                         f", {f.masked_turns} assistant turn(s) weighted 0" if f.masked_turns else ""])
        print(f"{f.format:<7} {f.dataset:<17} {f.rows:>5} rows  {f.path or '(no row to write)'}{extra}")
    for r in report.refused:
        print(f"refused {r.cut} of {r.policy_version} seed {r.seed}: " + " ".join(r.reasons), file=sys.stderr)
    if args.stats:
        print_lengths([f for f in report.files if f.path and f.format in ("trl", "verl")], args.tokenizer)
    return 1 if report.refused else 0


def print_lengths(files: list, tokenizer: str | None = None) -> None:
    """Token lengths (p50/p95/max) of each exported TRL or verl file's parts: what max_length must cover."""
    from sim_pipeline.cut.lengths import count_tokens, exported_lengths, tokenizer_counter

    if not files:
        print("stats: token lengths are measured on TRL and verl exports (--format trl, --format verl)")
        return
    count = tokenizer_counter(tokenizer) if tokenizer else count_tokens
    print(f"tokens ({tokenizer or 'cl100k_base'}, parts as JSON, tools counted with the prompt; verl's tool_chars "
          "in characters): p50 / p95 / max")
    for f in files:
        for r in exported_lengths(f.format, f.path, f.dataset, f.provenance_path, count).itertuples(index=False):
            print(f"  {Path(f.path).parent.parent.name:<28} {r.dataset:<17} {r.part:<11} {r.p50:>6} {r.p95:>6} "
                  f"{r.max:>6}  ({r.rows} rows)")


def cmd_pack_from_mcp(args: argparse.Namespace) -> int:
    """Write a domain pack from an MCP server's tools (sim_pipeline/mcp_import.py) and say what to review."""
    from sim_pipeline.mcp_import import import_pack

    command = args.server_command[1:] if args.server_command[:1] == ["--"] else args.server_command
    report = import_pack(args.name, command=command or None, url=args.url, out=args.out, force=args.force,
                         rename=args.rename)
    for old, new in report.renamed.items():
        print(f"renamed {old} -> {new}")
    for t in report.tools:
        print(f"{t.name:<28} {t.kind:<12} {'REVIEW: ' if t.guess else ''}{t.reason}")
    print(f"wrote {report.path} ({len(report.tools)} tools): review the REVIEW lines of domain.yaml and policy.md, "
          f"add a version with `domain: {args.name}` to data/policies.yaml, then `sim-pipeline run --domain "
          f"{args.name}`")
    return 0


def cmd_serve_world(args: argparse.Namespace) -> int:
    """Serve one situation's world over MCP on stdio (sim_pipeline/rollout/mcp_world.py); stdout is the protocol's."""
    import asyncio

    from sim_pipeline.domain import load_domain
    from sim_pipeline.models.gateway import Gateway
    from sim_pipeline.rollout import mcp_world
    from sim_pipeline.rollout.runner import Policy

    domain = load_domain(args.domain)
    n_phrasings = max(defaults.ROLLOUT_MODES[defaults.DEFAULT_ROLLOUT_MODE][0], args.phrasing + 1)
    seed = int(_one_seed(args, "serve-world serves one seed's world at a time"))
    state, situations = mcp_world.seed_situations(domain, seed, n_phrasings)
    if args.list:  # to stderr like every word here: a client may have started this command for its stdout
        for s in situations:
            print(f"{s.situation_id} {s.split:<8} {s.cell['tool']:<18} {s.cell['stance']:<12} "
                  f"{s.cell['world_state']:<20} {s.cell['tool_condition']}", file=sys.stderr)
        return 0
    if not args.situation:
        raise SimPipelineError("name the situation to serve. Fix: --situation ID (`sim-pipeline serve-world --domain "
                               f"{args.domain} --seed {seed} --list` prints them)")
    situation = mcp_world.find_situation(situations, args.situation, args.phrasing)
    policy = Policy(args.version, f"mcp-agent:{args.version}", user_model=args.user_model)
    gateway = Gateway(fast_path=True)
    gateway.check(args.user_model)  # a missing key stops here, before a client is kept waiting
    print(f"serving situation {situation.situation_id} of {args.domain} seed {seed} over MCP on stdio "
          f"({len(domain.tools)} tools and message_user)", file=sys.stderr)
    row = asyncio.run(mcp_world.serve_situation(situation, domain=domain, state=state, gateway=gateway,
                                                policy=policy, phrasing_index=args.phrasing))
    print(f"session over: {row['status']} ({row['finish_reason']}), oracle {row['oracle_reward']}: "
          f"{row['oracle_reason']}", file=sys.stderr)
    if args.record:
        mcp_world.write_row(row, args.record)
        print(f"wrote the rollout row to {args.record}", file=sys.stderr)
    return 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: a whole number 0..65535 (0: any free port)")
    return value


class _SeedsAction(argparse.Action):
    """--seeds (and its alias --seed): one value per flag, in seed_spec's syntax; the flag given twice adds up.

    It remembers the flag as typed, so a bad value's error names the flag the user wrote."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        given = getattr(namespace, self.dest) if namespace.seeds_flag else []  # the default is replaced, not added to
        setattr(namespace, self.dest, [*given, values])
        namespace.seeds_flag = option_string


def _one_seed(args: argparse.Namespace, why: str) -> str:
    """The one seed a verb that works on a single seed was given (several are a one-line error with the fix)."""
    from sim_pipeline.seed_spec import parse_seeds

    seeds = parse_seeds(args.seeds, args.seeds_flag)
    if len(seeds) != 1:
        raise SimPipelineError(f"{why}, and {args.seeds_flag or '--seed'} names {len(seeds)} ({','.join(seeds)}). "
                               f"Fix: give one, e.g. --seed {seeds[0]}")
    return seeds[0]


def _seeds_option(verb: argparse.ArgumentParser, default: list[str] | None, default_help: str, *,
                  alias: bool = True) -> None:
    """Every verb's seed option, one syntax (sim_pipeline/seed_spec.py); run, report and loop also take --seed."""
    verb.add_argument("--seeds", *(["--seed"] if alias else []), dest="seeds", action=_SeedsAction, default=default,
                      metavar="SEEDS", help=f"seed partitions {defaults.SEEDS[0]}-{defaults.SEEDS[-1]}: a seed 3, a "
                                            f"range 0-7, a list 0,3,5 or both 0-2,5 {default_help}")
    verb.set_defaults(seeds_flag=None)


def _versions_option(verb: argparse.ArgumentParser, what: str) -> None:
    """--versions: one comma-separated value per flag (the flag given twice adds up), so no value is taken for a
    word that follows it (`backfill --versions a list` is refused, not read as versions a and list)."""
    verb.add_argument("--versions", action="append", metavar="V[,V...]",
                      help=f"{what}, comma-separated, e.g. agent-v1,agent-v2 (default: all of the domain's)")


def _wrapped(text: str, indent: str = "  ") -> str:
    """Help text wrapped to the terminal as argparse wraps its own (its width), later lines indented."""
    return textwrap.fill(text, width=shutil.get_terminal_size().columns - 2, subsequent_indent=indent,
                         break_on_hyphens=False)


def _verb(verbs: argparse._SubParsersAction, name: str, summary: str, examples: list[str],
          output: str, **options: object) -> argparse.ArgumentParser:
    """A verb whose --help ends with runnable examples and where its output goes."""
    epilog = "example:\n" + "".join(f"  {line}\n" for line in examples) + "\n" + _wrapped(f"output: {output}")
    return verbs.add_parser(name, help=summary, description=_wrapped(summary, indent=""), epilog=epilog,
                            formatter_class=argparse.RawDescriptionHelpFormatter, **options)


def _leaves(command: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers that run something (a verb, or an action of backfill and policies)."""
    groups = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups:
        return [command]
    return [leaf for group in groups for sub in dict.fromkeys(group.choices.values()) for leaf in _leaves(sub)]


def parser() -> argparse.ArgumentParser:
    """The command line."""
    top = argparse.ArgumentParser(
        prog="sim-pipeline", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  sim-pipeline run --domain retail --seeds 0\n\n" + _wrapped(
            f"output: each verb's --help says where its output goes. Environment: ${REGISTRY_VARIABLE} the registry "
            "file (or --registry), $SIM_PIPELINE_WAREHOUSE the warehouse (or --warehouse), $DAGSTER_HOME the Dagster "
            "instance (./.dagster_home when unset)."))
    verbs = top.add_subparsers(dest="verb", required=True, metavar="VERB")
    run = _verb(verbs, "run", "materialize all eight steps for the seeds and the domain's versions, and print the "
                "summary", ["sim-pipeline run --domain retail --versions agent-v1,agent-v2 --seeds 0,1"],
                "the summary of each seed on stdout (progress too; warnings on stderr); every step's table under "
                "--warehouse, as <warehouse>/<domain>/<step>/...; " + DAGSTER_HOME_NOTE + "; model responses are "
                "cached in data/cache under the working directory")
    report = _verb(verbs, "report", "print the summary of the warehouse (exit 1 when some figures are stale: "
                   "computed from files a run cut short rewrote; they are marked)",
                   ["sim-pipeline report --domain retail --seeds 0-2"],
                   "the summary of each seed on stdout, read from --warehouse; nothing is written; a WARNING line on "
                   "stderr per unverified read")
    for p in (run, report):
        p.add_argument("--domain", default=defaults.DEFAULT_DOMAIN, help=f"domain pack (default {defaults.DEFAULT_DOMAIN})")
        _seeds_option(p, ["0"], "(default 0)")
        p.add_argument("--warehouse", default=os.environ.get("SIM_PIPELINE_WAREHOUSE", "data/warehouse"),
                       help=WAREHOUSE_HELP)
    _versions_option(run, "only these registry versions")
    run.add_argument("--situations", type=_positive, help="roll out only the plan's first N situations per seed")
    run.add_argument("--phrasings", type=_positive, help="openings per train situation (default: the mode's)")
    run.add_argument("--samples", type=_positive, help="samples per train situation and opening (default: the mode's)")
    run.add_argument("--heldout-samples", type=_positive,
                     help=f"samples per held-out situation (default {defaults.HELDOUT_SAMPLES})")
    run.add_argument("--search-budget", type=_positive, metavar="ROWS",
                     help=f"train rollouts per seed and version at which the search stops (default "
                          f"{defaults.SEARCH_BUDGET_ROWS}; it may stop sooner, saturated or with every planned cell "
                          "filled). --samples alone spends the same budget on fewer situations: scale both to scale "
                          "the train rollouts, e.g. --samples 8 --search-budget 800 for twice --samples 4")
    run.add_argument("--writer", metavar="MODEL",
                     help=f"the model that writes the search's llm_guided openings: a litellm string or a registry "
                          f"`models:` name (default {defaults.SEARCH_WRITER_MODEL})")
    run.add_argument("--concurrency", type=_positive,
                     help=f"model calls in flight at once (default {defaults.GATEWAY_CONCURRENCY}); the rows do not "
                          "depend on it")
    run.add_argument("--allow-failed-checks", action="store_true",
                     help="exit 0 even when a blocking check (judge trust, publish gate) stopped a run")
    run.add_argument("--wait", action="store_true", help=WAIT_HELP)
    run.set_defaults(fn=cmd_run)
    report.add_argument(UNVERIFIED_FLAG, action="store_true", help=UNVERIFIED_HELP)
    report.set_defaults(fn=cmd_report)
    exp = _verb(verbs, "export", "write the cuts as TRL, OpenAI fine-tuning or verl files (gated again)",
                ["sim-pipeline export --domain retail --format trl --seeds 0 --out data/exports"],
                "files under --out, as <out>/<domain>/<format>/... (default data/exports), one line per file on "
                "stdout; a refused cut's reasons on stderr (exit 1)")
    exp.add_argument("--domain", default=defaults.DEFAULT_DOMAIN, help=f"domain pack (default {defaults.DEFAULT_DOMAIN})")
    exp.add_argument("--format", required=True, choices=["trl", "openai", "verl"], help="the trainer's file format")
    _versions_option(exp, "only these registry versions")
    _seeds_option(exp, None, "(default: every one materialized)", alias=False)
    exp.add_argument("--out", default=defaults.EXPORT_DIR,
                     help=f"output base; files go to <out>/<domain>/<format>/... (default {defaults.EXPORT_DIR})")
    exp.add_argument("--stats", action="store_true",
                     help="also print token lengths (p50/p95/max) of each TRL or verl file's parts, to size max_length")
    exp.add_argument("--tokenizer", help="with --stats: count with this model's tokenizer.json (or the folder "
                                         "save_pretrained wrote) instead of cl100k_base")
    exp.add_argument("--warehouse", default=os.environ.get("SIM_PIPELINE_WAREHOUSE", "data/warehouse"),
                     help="where the cuts are read from: " + WAREHOUSE_HELP)
    exp.add_argument(UNVERIFIED_FLAG, action="store_true", help=EXPORT_UNVERIFIED_HELP)
    exp.set_defaults(fn=cmd_export)
    backfill_output = ("a backfill queued in the Dagster instance at $DAGSTER_HOME (./.dagster_home when unset), its "
                       "id and UI link on stdout; the daemon `make dev` starts runs it and writes the tables to the "
                       "warehouse of its code location ($SIM_PIPELINE_WAREHOUSE, else data/warehouse)")
    back = _verb(verbs, "backfill", "launch one Dagster asset backfill over versions x seeds (the daemon of `make "
                 "dev` runs it; it shows under Overview > Backfills), list the backfills, or cancel one; `backfill` "
                 "without an action is `backfill launch`",
                 ["sim-pipeline backfill --domain retail --versions agent-v1,agent-v2 --seeds 0-7",
                  "sim-pipeline backfill list", "sim-pipeline backfill cancel ID"],
                 f"launch: {backfill_output}; list and cancel: one line per backfill on stdout")
    actions = back.add_subparsers(dest="action", required=True, metavar="{launch,list,cancel}")
    launch = _verb(actions, "launch", "queue one asset backfill over versions x seeds (with --wait, follow it)",
                   ["sim-pipeline backfill launch --domain retail --versions agent-v2 --seeds 0-3,6 --wait"],
                   backfill_output)
    launch.add_argument("--domain", default=defaults.DEFAULT_DOMAIN,
                        help=f"domain pack (default {defaults.DEFAULT_DOMAIN})")
    _versions_option(launch, "registry versions")
    _seeds_option(launch, [f"{defaults.SEEDS[0]}-{defaults.SEEDS[-1]}"], "(default: all)", alias=False)
    launch.add_argument("--wait", action="store_true",
                        help="follow the backfill until it ends (needs the daemon running); exit 1 unless it succeeded")
    launch.set_defaults(fn=cmd_backfill)
    listing = _verb(actions, "list", "list the instance's backfills, newest first (id, status, partitions, runs)",
                    ["sim-pipeline backfill list"], "one line per backfill on stdout; nothing is written")
    listing.set_defaults(fn=cmd_backfill_list)
    cancel = _verb(actions, "cancel", "cancel a backfill, as the UI's Cancel does (its daemon launches no more runs "
                   "and stops those in flight)", ["sim-pipeline backfill cancel ID"],
                   "the backfill marked canceling in the Dagster instance at $DAGSTER_HOME; one line on stdout")
    cancel.add_argument("backfill_id", nargs="?", metavar="ID", help="the backfill's id, as `backfill list` or the "
                                                                     "launch printed it")
    cancel.set_defaults(fn=cmd_backfill_cancel)
    loop = _verb(verbs, "loop", "train new versions from a version's cuts (SFT, DPO, GRPO) and measure each against "
                 "it on the held-out tasks", ["sim-pipeline loop --from agent-v1 --method sft --seed 0"],
                 "the summary and each trained version's delta on stdout; the trained models and a registry naming "
                 "them (the project's plus one version per method) under data/trained ($SIM_PIPELINE_TRAINED_DIR); "
                 "their tables under --warehouse; " + DAGSTER_HOME_NOTE)
    loop.add_argument("--from", dest="source", required=True, help="the registry version to train from, e.g. agent-v1")
    loop.add_argument("--method", default="all", choices=["sft", "dpo", "grpo", "all"],
                      help="training method (default: all three, each its own version)")
    _seeds_option(loop, ["0"], "(one seed: the cuts the versions train from; default 0)")
    loop.add_argument("--warehouse", default=os.environ.get("SIM_PIPELINE_WAREHOUSE", "data/warehouse"),
                      help=WAREHOUSE_HELP)
    loop.add_argument("--wait", action="store_true", help=WAIT_HELP)
    loop.set_defaults(fn=cmd_loop)
    pol = _verb(verbs, "policies", "the policy registry: list its versions, or register them as partitions",
                ["sim-pipeline policies list", "sim-pipeline policies sync"],
                "list: a table on stdout (pack notes on stderr); sync: the versions registered as partitions in the "
                "Dagster instance at $DAGSTER_HOME, one line per domain on stdout")
    pol_actions = pol.add_subparsers(dest="action", required=True, metavar="{list,sync}")
    _verb(pol_actions, "list", "list the registry's versions: domain, baseline, agent, user and judge models",
          ["sim-pipeline policies list --registry data/policies.yaml"],
          "a table on stdout, a header then one row per version; notes on the packs on stderr; nothing is written"
          ).set_defaults(fn=cmd_policies_list)
    _verb(pol_actions, "sync", "register every version as a partition of its domain (the UI and the daemon then "
          "show it); an invalid registry registers nothing", ["sim-pipeline policies sync"],
          "the versions registered as partitions in the Dagster instance at $DAGSTER_HOME (./.dagster_home when "
          "unset); one line per domain on stdout").set_defaults(fn=cmd_policies_sync)
    pack = _verb(verbs, "pack", "make a domain pack from another source",
                 ["sim-pipeline pack from-mcp --name notes -- python notes_server.py"],
                 "a pack folder under data/domains (see the action)").add_subparsers(dest="pack_verb", required=True,
                                                                                     metavar="{from-mcp}")
    mcp = _verb(pack, "from-mcp", "write data/domains/NAME/ from an MCP server's tools (a stdio command or --url); "
                "tool kinds from their annotations, every guess marked REVIEW",
                ["sim-pipeline pack from-mcp --name notes -- python notes_server.py",
                 "sim-pipeline pack from-mcp --name notes --url http://127.0.0.1:8000/mcp"],
                "data/domains/NAME/ (tools/*.json, domain.yaml, policy.md), written whole or not at all; one line per "
                "tool on stdout")
    mcp.add_argument("--name", required=True, help="the pack's name (lowercase letters, digits and _)")
    mcp.add_argument("--url", help="the server's streamable HTTP endpoint (instead of a command)")
    mcp.add_argument("--out", type=Path, help="the folder packs live in; the pack goes to <out>/NAME (default "
                                              "data/domains)")
    mcp.add_argument("--force", action="store_true", help="replace an existing pack of that name")
    mcp.add_argument("--rename", action="store_true", help="write tool names the pack format refuses under the "
                                                           "documented renames (default: refuse them, naming each)")
    mcp.add_argument("server_command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                     help="the command that starts the server on stdio (after every option)")
    mcp.set_defaults(fn=cmd_pack_from_mcp)
    serve = _verb(verbs, "serve-world", "serve one situation's sandbox world as an MCP server on stdio: the domain's "
                  "tools and message_user, answered by the simulated user; one session, one rollout",
                  ["sim-pipeline serve-world --domain retail --seed 0 --list",
                   "sim-pipeline serve-world --domain retail --seed 0 --situation 5537a40b2705 --record row.json"],
                  "the MCP protocol on stdout (an MCP client starts this command); progress, the --list lines and "
                  "the graded outcome on stderr; with --record, the rollout row as JSON")
    serve.add_argument("--domain", default=defaults.DEFAULT_DOMAIN, help=f"domain pack (default {defaults.DEFAULT_DOMAIN})")
    _seeds_option(serve, ["0"], "(one seed: the world served; default 0)")
    serve.add_argument("--situation", help="the situation's id (see --list)")
    serve.add_argument("--phrasing", type=int, default=0, help="which of its openings the customer says (default 0)")
    serve.add_argument("--user-model", default=defaults.DEFAULT_USER_MODEL,
                       help=f"the simulated user's model (default {defaults.DEFAULT_USER_MODEL})")
    serve.add_argument("--version", default="mcp-served", help="the policy version the row is recorded under "
                                                               "(default mcp-served)")
    serve.add_argument("--record", type=Path, help="write the graded rollout row to this JSON file")
    serve.add_argument("--list", action="store_true", help="print the seed's situations on stderr and exit")
    serve.set_defaults(fn=cmd_serve_world)
    view = _verb(verbs, "view", "write one self-contained HTML file (open it from disk, no network): the ship line, "
                 "the delta with a forest plot, pass@k curves, slices, world fit, judge trust, cut sizes and every "
                 "transcript with filters", ["sim-pipeline view --domain retail --out report.html",
                                             "sim-pipeline view --domain retail --serve --port 8765"],
                 "the HTML file --out names (default report.html); stale figures are marked as `report` marks them; "
                 "with --serve, also served at the http://127.0.0.1:PORT/ URL it prints, until Ctrl-C")
    view.add_argument("--domain", default=defaults.DEFAULT_DOMAIN, help=f"domain pack (default {defaults.DEFAULT_DOMAIN})")
    _seeds_option(view, ["0"], "(default 0)", alias=False)
    view.add_argument("--out", default="report.html", help="the HTML file to write (default report.html)")
    view.add_argument("--warehouse", default=os.environ.get("SIM_PIPELINE_WAREHOUSE", "data/warehouse"),
                      help=WAREHOUSE_HELP)
    view.add_argument(UNVERIFIED_FLAG, action="store_true", help=UNVERIFIED_HELP)
    view.add_argument("--serve", action="store_true", help="after writing the file, serve it on 127.0.0.1 only (this "
                      "machine; never 0.0.0.0) and print its URL; Ctrl-C stops")
    view.add_argument("--port", type=_port, help=f"the port --serve listens on (default {defaults.VIEW_PORT}: a free "
                      "port, which the printed URL names)")
    view.set_defaults(fn=cmd_view)
    for leaf in _leaves(top):  # every verb and action, those registered above included, reads the same registry
        leaf.add_argument("--registry", metavar="FILE", help=REGISTRY_HELP)
    return top


def _with_action(argv: list[str]) -> list[str]:
    """`backfill ...` without an action is `backfill launch ...`, as before the actions existed."""
    if argv[:1] == ["backfill"] and (len(argv) == 1 or argv[1] not in (*BACKFILL_ACTIONS, "-h", "--help")):
        return ["backfill", "launch", *argv[1:]]
    return argv


def _stray(argv: list[str], word: str, command: str) -> SimPipelineError:
    """The error for a word no option or argument took: which flag it follows, and the fix."""
    usage = f"`sim-pipeline {command} --help` lists its options"
    if word.startswith("-"):
        return SimPipelineError(f"`sim-pipeline {command}` has no option {word}. Fix: {usage}")
    at = len(argv) - 1 - argv[::-1].index(word)
    flag_at = next((i for i in range(at - 1, -1, -1) if argv[i].startswith("-")), None)
    action = command.startswith("backfill") and word in BACKFILL_ACTIONS
    fix = f"write the action right after backfill: `sim-pipeline backfill {word}`" if action else usage
    if flag_at is None:
        if command == "backfill list":  # `backfill list ID`: the id belongs to cancel
            fix = f"`sim-pipeline backfill cancel {word}` cancels that backfill; `backfill list` takes no id"
        return SimPipelineError(f"'{word}' is not an argument of `sim-pipeline {command}`. Fix: {fix}")
    flag, equals, first = argv[flag_at].partition("=")
    values = ([first] if equals else []) + list(itertools.takewhile(lambda w: not w.startswith("-"),
                                                                     argv[flag_at + 1:]))
    if len(values) < 2:  # the word right after a switch (--wait): the switch took nothing
        return SimPipelineError(f"'{word}' after {flag}, which takes no value, is not an argument of `sim-pipeline "
                                f"{command}`. Fix: {fix}")
    if not action and flag in LIST_FLAGS:
        fix = f"join several with commas, {flag} {','.join(values)}, or give {flag} once for each"
    return SimPipelineError(f"'{word}' follows {flag} {values[0]}, and {flag} takes one value. Fix: {fix}")


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line read; a word no option took is a SimPipelineError naming the flag it follows and the fix
    (argparse's own errors, a bad choice or a missing required option, exit 2 with the usage)."""
    argv = _with_action(argv)
    args, extra = parser().parse_known_args(argv)
    if extra:
        command = " ".join(w for w in (args.verb, getattr(args, "action", None)) if w)
        raise _stray(argv, extra[0], command)
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point: user errors print one clear line, never a traceback; a bug's traceback prints with keys redacted."""
    from sim_pipeline.redaction import redact

    try:
        args = parse(sys.argv[1:] if argv is None else list(argv))
        if args.registry:  # a wrong --registry fails here, for every verb, before anything is opened or written
            from sim_pipeline.registry import load_registry

            load_registry(args.registry)
        return args.fn(args)
    except SimPipelineError as exc:
        print(redact(f"error: {exc}"), file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.filename is None:  # not a path the user gave: a bug or the machine, its traceback says which
            print(redact(traceback.format_exc()), file=sys.stderr, end="")
            return 1
        print(redact(f"error: {exc.filename}: {exc.strerror or exc}. Fix: check that the path exists and that this "
                     "user may read and write it, or give the command another (--warehouse, --out)"), file=sys.stderr)
        return 2
    except Exception:  # noqa: BLE001 -- a bug: its traceback is printed, but an exception's text may quote a key
        print(redact(traceback.format_exc()), file=sys.stderr, end="")
        return 1


def program() -> None:
    """The `sim-pipeline` command: `main`, then an exit that skips native teardown.

    Arrow's thread pools can abort the process while C++ static destructors run at a normal interpreter exit
    ("terminate called without an active exception", apache/arrow#34314), turning a finished run into exit -6.
    Python's own exit handlers still run and the streams are flushed; only the native teardown is skipped.
    The cyclic garbage collector runs at defaults.GC_THRESHOLDS: with Python's defaults it took ~2 s of a cold
    `make run`'s CPU, at these ~0.8 s."""
    gc.set_threshold(*defaults.GC_THRESHOLDS)
    code = main()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    program()
