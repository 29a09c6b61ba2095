"""The eight steps as software-defined assets, built per domain by one factory (asset keys `<domain>/<step>`)."""


import asyncio
import time
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import dagster as dg
import pandas as pd

from sim_pipeline import cover, defaults
from sim_pipeline.axes import axes_table, axis_values, stress_rows, validated_constraints
from sim_pipeline.cut.cuts import CUTS
from sim_pipeline.defs import checks
from sim_pipeline.defs.cuts import cut_asset
from sim_pipeline.defs.io import LINEAGE_VERSIONS, READS_AVAILABLE_PARTITIONS
from sim_pipeline.defs.metadata import rounded, split_tables, step_tag, table_metadata, version_links
from sim_pipeline.defs.partitions import SEED, policy_version_partitions, seed_by_version, split_key
from sim_pipeline.defs.training import trained_policy_asset
from sim_pipeline.defs.resources import (
    ModelGatewayResource,
    RegistryResource,
    SimulationResource,
    WarehouseResource,
)
from sim_pipeline.domain import load_domain
from sim_pipeline.grade.grading import grade_rollouts
from sim_pipeline.grade.judge_trust import with_recorded_trust
from sim_pipeline.measure.delta import DELTA_COLUMNS, delta_report
from sim_pipeline.measure.passat import SCORE_COLUMNS, noop_floor_row, score_table
from sim_pipeline.measure.ship import ShipDecision, TrustState, ship_decision
from sim_pipeline.measure.text_charts import delta_chart
from sim_pipeline.registry import PolicyVersion
from sim_pipeline.rollout.row import rollout_table
from sim_pipeline.rollout.runner import Policy
from sim_pipeline.rollout.simulate import simulate
from sim_pipeline.rollout.world_fit import domain_fit
from sim_pipeline.search.situations import build_situations, stressed_counts
from sim_pipeline.situation import Situation
from sim_pipeline.world.state import build_state, state_from_table, state_table

T = TypeVar("T")
# What the UI's tables show first, short enough to fit the page: the verdict beside its numbers. The Parquet file
# (and the delta_reasons field) keep the rest.
# The verdict and what decides it come first: a UI table wider than its pane scrolls its last columns away.
DELTA_UI_COLUMNS = ("metric", "verdict", "before", "after", "delta", "p_value", "n_tasks", "ci_low", "ci_high",
                    "p_adjusted", "detectable", "n_ungraded_tasks")
# The hack scan's verdict first; abs_correlation (the correlation's size) is left to the Parquet file.
HACK_SCAN_UI_COLUMNS = ("feature", "flagged", "correlation", "floor", "within_sd", "n_rollouts")
SLICE_UI_COLUMNS = ("axis", "value", "metric", "verdict", "delta", "ci_low", "ci_high", "q_value", "n_tasks")
BY_SEED = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="seed")
GATED = dg.AutomationCondition.eager() & dg.AutomationCondition.all_deps_blocking_checks_passed()


def world_fit_tables(fit: pd.DataFrame) -> dict[str, dg.TableMetadataValue]:
    """World fit as three narrow UI tables, each led by the tool: the shares its verdict reads, the calls refused for
    their arguments, the rest."""
    return dict(zip(("world_fit", "world_fit_arguments", "world_fit_other"),
                    split_tables(fit, "tool", checks.FIT_UI_GROUPS)))


def policy_of(v: PolicyVersion) -> Policy:
    """The rollout policy for a registered version."""
    return Policy(v.slug, v.model, v.temperature, v.top_p, v.max_tokens, v.user_model, v.system_prompt,
                  v.reply_classifier)


def situations_of(table: pd.DataFrame) -> list[Situation]:
    """The situations table as objects."""
    return [Situation.from_row(r) for r in table.to_dict("records")]


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, also where this thread already runs an event loop (a notebook, or a run launched in-process
    by the backfill daemon): then the coroutine gets its own loop in a worker thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(max_workers=1) as worker:
        return worker.submit(asyncio.run, coroutine).result()


def versions_of(grades: pd.DataFrame, slug: str | None) -> pd.DataFrame:
    """The rows one policy version graded (none for no version)."""
    if slug is None or not len(grades):
        return pd.DataFrame()
    return grades[grades["policy_version"] == slug].reset_index(drop=True)


def judge_verdicts(sides: list[tuple[PolicyVersion, pd.DataFrame]]) -> dict[str, str]:
    """Each side's recorded judge-trust verdict per seed ('<version> seed <s>' -> verdict), opted out or not."""
    return {f"{v.slug} seed {seed}": checks.recorded_verdict(part, v)
            for v, table in sides if len(table) for seed, part in table.groupby("seed", sort=True)}


def ship_metadata(decision: ShipDecision, report: pd.DataFrame) -> dict[str, object]:
    """The ship line and the guarded metrics' rows: the first entries of the delta's metadata (the UI keeps order)."""
    guarded = report[report["metric"].isin(decision.guarded)] if len(report) else report
    return {"ship": decision.line,
            "guarded": (table_metadata(guarded[list(DELTA_UI_COLUMNS)]) if len(guarded)
                        else dg.MetadataValue.json(list(decision.guarded)))}


def delta_for(version: PolicyVersion, grades: pd.DataFrame, baseline: pd.DataFrame,
              seeds: list[str], trust: TrustState | None = None) -> tuple[pd.DataFrame, dict[str, object]]:
    """The candidate's delta against its registry baseline (the baseline's grades and the seeds they cover), its
    metadata led by the ship decision under `trust`."""
    empty = pd.DataFrame(columns=list(DELTA_COLUMNS))
    if version.baseline is None:
        return empty, {"baseline": "none: a first version has nothing to compare with"}
    if not len(baseline) or not len(grades):
        decision = ship_decision(None, candidate=version.slug, baseline=version.baseline, trust=trust)
        return empty, {**ship_metadata(decision, empty), "baseline": version.baseline,
                       "note": "baseline or candidate grades are not materialized"}
    report = delta_report(baseline, grades, baseline_version=version.baseline, candidate_version=version.slug,
                          must_not_regress=version.must_not_regress)
    decision = ship_decision(report, candidate=version.slug, baseline=version.baseline,
                             must_not_regress=version.must_not_regress, trust=trust)
    used = sorted(set(seeds) & {str(s) for s in grades["seed"].unique()})  # the seeds both versions have graded
    # The verdicts' reasons are sentences: in the table they would make every row hundreds of pixels tall.
    reasons = "\n".join(f"- **{r.metric}**: {r.reason}" for r in report.itertuples(index=False) if r.reason)
    return report, {**ship_metadata(decision, report), "baseline": version.baseline, "seeds": dg.MetadataValue.json(used),
                    "delta_chart": dg.MetadataValue.md(delta_chart(report)),
                    "delta": table_metadata(report[list(DELTA_UI_COLUMNS)]), "delta_reasons": dg.MetadataValue.md(reasons),
                    **delta_extras(baseline, grades, version, report),
                    # The report viewer: the same decision with charts and every transcript, in one file.
                    "view": dg.MetadataValue.md(f"Transcripts and charts: `sim-pipeline view --domain {version.domain} "
                                                f"--seeds {','.join(used) or '0'} --out report.html`, then open "
                                                "report.html")}


def search_metadata(search: pd.DataFrame, rollouts: pd.DataFrame, reason: str) -> dict[str, object]:
    """Stop reason, arm weights per batch (table and plot), arm mix, the failure kinds each arm opened, requested vs
    delivered."""
    from sim_pipeline.measure.plots import png_markdown
    from sim_pipeline.search.loop import final_weights, kinds_opened, unique_signatures_per_1000, weights_by_batch
    from sim_pipeline.measure.text_charts import weights_chart
    from sim_pipeline.search.report import delivery_report, plot_weights

    if not len(search):
        return {"stop_reason": reason, "batches": 0}
    by_batch = weights_by_batch(search)
    train = rollouts[rollouts["split"] == "train"]
    return {"stop_reason": reason, "batches": int(search["batch"].nunique()),
            "arms_drawn": dg.MetadataValue.json(search["arm"].value_counts().to_dict()),
            "failure_kinds_opened": dg.MetadataValue.json(kinds_opened(search)),
            "final_weights": dg.MetadataValue.json(rounded(final_weights(search))),
            "weights_by_batch": table_metadata(by_batch),
            "weights_chart": dg.MetadataValue.md(weights_chart(by_batch, defaults.SEARCH_ARMS)),
            "weights_plot": dg.MetadataValue.md(png_markdown(plot_weights(by_batch), alt="arm weights per batch")),
            "unique_signatures_per_1000": round(unique_signatures_per_1000(train), 1),
            "requested_vs_delivered": table_metadata(delivery_report(search, rollouts))}


def score_extras(grades: pd.DataFrame, rollouts: pd.DataFrame, heldout: pd.DataFrame) -> dict[str, object]:
    """pass@k curves and the reward-hack scan as metadata (matplotlib is imported only when this runs)."""
    from sim_pipeline.measure.hack_scan import hack_scan
    from sim_pipeline.measure.passat import pass_curve
    from sim_pipeline.measure.plots import plot_pass_curves, png_markdown
    from sim_pipeline.measure.text_charts import pass_curve_chart

    if not len(heldout):
        return {}
    scan, scan_table = hack_scan(grades.dropna(subset=["reward"]), rollouts)
    curve = pass_curve(heldout)
    return {"pass_curves_chart": dg.MetadataValue.md(pass_curve_chart(curve)),
            "pass_curves": dg.MetadataValue.md(png_markdown(plot_pass_curves(heldout, curve=curve),
                                                            alt="pass@k and pass^k")),
            "hack_scan": table_metadata(scan_table[list(HACK_SCAN_UI_COLUMNS)]), "hack_scan_note": scan.note,
            "hack_flagged": dg.MetadataValue.json(list(scan.flagged))}


def delta_extras(baseline: pd.DataFrame, grades: pd.DataFrame, version: PolicyVersion,
                 report: pd.DataFrame) -> dict[str, object]:
    """Paired differences plot, slices by axis value, and the between-seed spread as metadata."""
    from sim_pipeline.measure.pairing import paired_differences
    from sim_pipeline.measure.plots import plot_paired_differences, png_markdown
    from sim_pipeline.measure.seeds import seed_spread
    from sim_pipeline.measure.slices import delta_slices

    versions = {"baseline_version": version.baseline, "candidate_version": version.slug}
    differences = paired_differences(baseline, grades, **versions)
    slices = delta_slices(baseline, grades, **versions)
    spread = seed_spread(baseline, grades, **versions)
    plot = plot_paired_differences(differences, report=report)
    return {"paired_differences": dg.MetadataValue.md(png_markdown(plot, alt="pass@1 paired differences")),
            "slices": table_metadata(slices.loc[slices["verdict"] != "INSUFFICIENT DATA", list(SLICE_UI_COLUMNS)]),
            "seed_spread": table_metadata(spread.per_seed), "seed_note": spread.note}


def domain_assets(name: str) -> list[dg.AssetsDefinition]:
    """Every asset of one domain pack, keyed `<name>/<step>`."""
    domain = load_domain(name)
    multi = seed_by_version(name)

    def key(step: str) -> dg.AssetKey:
        return dg.AssetKey([name, step])

    group = name

    @dg.asset(key=key("axes"), group_name=group, tags=step_tag("axes"), description=(
        "Step 01. What varies: one row per (axis, value) of the six axes, with tool class and base risk."))
    def axes() -> dg.Output[pd.DataFrame]:
        table = axes_table(domain)
        counts = table.groupby("axis", sort=False).size().to_dict()
        return dg.Output(table, metadata={"values_per_axis": dg.MetadataValue.json(counts),
                                          "grid_size": int(pd.Series(counts).prod())})

    @dg.asset(key=key("covering_array"), group_name=group, tags=step_tag("covering_array"), partitions_def=SEED, deps=[key("axes")],
              description=("Step 02. Planned cells: every allowed pair of axis values appears in at least one row. "
                           "The previous plan's still-valid rows are kept, so situation ids survive a new rule."))
    def covering_array(context: dg.AssetExecutionContext, store: WarehouseResource) -> dg.Output[pd.DataFrame]:
        values, constraints = axis_values(domain), validated_constraints(domain)
        previous = store.read_one(name, "covering_array", seed=context.partition_key)
        started = time.perf_counter()
        cells = cover.covering_array(values, seed=int(context.partition_key), constraints=constraints,
                                     must_include=stress_rows(domain, constraints),
                                     previous=previous)
        stats = cover.plan_stats(values, cells, constraints=constraints)
        kept = cover.rows_kept(previous, cells)
        return dg.Output(cells, metadata={**{k: int(v) for k, v in stats.items()}, "kept_from_previous": kept,
                                          "seconds": round(time.perf_counter() - started, 3)})

    @dg.asset(key=key("world"), group_name=group, tags=step_tag("world"), partitions_def=SEED,
              description="Step 03. The seeded world: entity tables drawn from the domain's schemas (one JSON record each).")
    def world(context: dg.AssetExecutionContext) -> dg.Output[pd.DataFrame]:
        table = state_table(build_state(domain, int(context.partition_key)))
        return dg.Output(table, metadata={"entities": dg.MetadataValue.json(table["entity"].value_counts().to_dict())})

    @dg.asset(key=key("situations"), group_name=group, tags=step_tag("situations"), partitions_def=SEED,
              ins={"covering_array": dg.AssetIn(key("covering_array")), "world": dg.AssetIn(key("world"))},
              check_specs=[dg.AssetCheckSpec(checks.SITUATIONS_SOLVABLE, asset=key("situations"), partitions_def=SEED,
                                             blocking=True, description=checks.SITUATIONS_SOLVABLE_DESCRIPTION)],
              description=("Step 03. Situations: cells made concrete: entity, hidden facts, goal, world setup, phrasings; held-out/train "
                           "split; each replayed with its reference solution (solvable, reference, reference_calls)."))
    def situations(context: dg.AssetExecutionContext, simulation: SimulationResource, covering_array: pd.DataFrame,
                   world: pd.DataFrame):
        table = build_situations(domain, state_from_table(world), covering_array, seed=int(context.partition_key),
                                 n_phrasings=simulation.settings().n_phrasings)
        yield dg.Output(table, metadata={"situations": len(table), "solvable": int(table["solvable"].sum()),
                                         "under_stress": dg.MetadataValue.json(stressed_counts(table)),
                                         "split": dg.MetadataValue.json(table["split"].value_counts().to_dict())})
        solvable = checks.situations_solvable_result(table)
        yield solvable
        checks.stop_if_failed(key("situations"), solvable)

    @dg.multi_asset(
        name=f"{name}_search_and_rollouts", group_name=group, partitions_def=multi,
        outs={"search": dg.AssetOut(key=key("search"), description=(
                  "Step 04. Which train situations the search drew, per batch: arm, weight at the draw, yield."),
              tags=step_tag("search")),
              "rollouts": dg.AssetOut(key=key("rollouts"), description=(
                  "Step 05. Held-out eval rollouts (k samples) and search rollouts, with logprobs and provenance. "
                  "A rollout's status says how it ended: " + checks.status_words()), tags=step_tag("rollouts"))},
        ins={"situations": dg.AssetIn(key("situations"), partition_mapping=BY_SEED),
             "world": dg.AssetIn(key("world"), partition_mapping=BY_SEED)},
        check_specs=[dg.AssetCheckSpec(checks.ROW_SCHEMA, asset=key("rollouts"), partitions_def=multi,
                                       description="Every rollout row is valid against rollout/row.schema.json."),
                     dg.AssetCheckSpec(checks.ROLLOUT_HEALTH, asset=key("rollouts"), partitions_def=multi,
                                       blocking=True, description=checks.ROLLOUT_HEALTH_DESCRIPTION),
                     dg.AssetCheckSpec(checks.WORLD_FIT, asset=key("rollouts"), partitions_def=multi,
                                       description=checks.WORLD_FIT_DESCRIPTION)],
    )
    def search_and_rollouts(context: dg.AssetExecutionContext, gateway: ModelGatewayResource,
                            registry: RegistryResource, simulation: SimulationResource, situations: pd.DataFrame,
                            world: pd.DataFrame):
        version, _ = split_key(context.partition_key)
        models, entry = gateway.gateway(registry.models()), registry.version(version)
        # Fail before spending: every model this run and its grading will call answers, or the run stops here.
        models.check_all(list(entry.models_called(simulation.writer_model).values()))
        search, rows, reason = run_async(simulate(
            situations_of(situations), policy_of(entry), domain=domain, state=state_from_table(world),
            gateway=models, settings=simulation.settings()))
        yield dg.Output(search, output_name="search", metadata=search_metadata(search, rows, reason))
        fit = domain_fit(domain, rows, pd.concat([situations, search], ignore_index=True))
        yield dg.Output(rollout_table(rows), output_name="rollouts",
                        metadata={**checks.rollout_metadata(rows), **world_fit_tables(fit)})
        health = checks.rollout_health_result(rows)
        yield checks.row_schema_result(rows)
        yield health
        yield checks.world_fit_result(fit)
        checks.stop_if_failed(key("rollouts"), health)

    @dg.asset(key=key("grades"), group_name=group, tags=step_tag("grades"), partitions_def=multi,
              ins={"rollouts": dg.AssetIn(key("rollouts")), "search": dg.AssetIn(key("search")),
                   "situations": dg.AssetIn(key("situations"), partition_mapping=BY_SEED)},
              check_specs=[dg.AssetCheckSpec(checks.JUDGE_TRUST, asset=key("grades"), blocking=True,
                                             partitions_def=multi, description=checks.JUDGE_TRUST_DESCRIPTION)],
              description="Step 06. Conduct rules, then the judge; program gold labels from the state oracle.")
    def grades(context: dg.AssetExecutionContext, gateway: ModelGatewayResource, registry: RegistryResource,
               rollouts: pd.DataFrame, search: pd.DataFrame, situations: pd.DataFrame):
        version = registry.version(split_key(context.partition_key)[0])
        # The grid's situations plus those the search wrote itself (variants, probes, mutations).
        by_id = {s.situation_id: s for s in situations_of(situations) + situations_of(search)}
        table = run_async(grade_rollouts(rollouts, by_id, domain=domain, judge_model=version.judge_model,
                                           gateway=gateway.gateway(registry.models()),
                                           reply_classifier=version.reply_classifier))
        report = checks.trust_report(table, version)  # once per partition: recorded in the table for every reader
        table = with_recorded_trust(table, report)
        yield dg.Output(table, metadata=checks.grade_metadata(table))
        trust = checks.judge_trust_result(report, version)
        yield trust
        checks.stop_if_failed(key("grades"), trust)

    cut_assets = [cut_asset(name, step, domain, multi, GATED) for step in CUTS]

    @dg.asset(key=key("scores"), group_name=group, tags=step_tag("scores"), partitions_def=multi,
              ins={"grades": dg.AssetIn(key("grades")), "rollouts": dg.AssetIn(key("rollouts")),
                   "situations": dg.AssetIn(key("situations"), partition_mapping=BY_SEED)},
              description=("Step 08. pass@1, pass^k and pass@k on held-out tasks (graded rows only), with bootstrap intervals "
                           "over tasks, and the no-op floor: the pass@1 of an agent that never calls a tool; pass@k "
                           "curves and a reward-hack scan in the metadata."))
    def scores(grades: pd.DataFrame, rollouts: pd.DataFrame, situations: pd.DataFrame) -> dg.Output[pd.DataFrame]:
        heldout = grades[grades["split"] == "heldout"].dropna(subset=["reward"])
        table = score_table(heldout) if len(heldout) else pd.DataFrame(columns=list(SCORE_COLUMNS))
        tasks = situations[situations["situation_id"].isin(heldout["situation_id"])]
        if len(tasks) and "noop_pass" in tasks:
            table = pd.concat([table, pd.DataFrame([noop_floor_row(tasks["noop_pass"])])], ignore_index=True)
        ungraded = int(grades.loc[grades["split"] == "heldout", "reward"].isna().sum())
        return dg.Output(table, metadata={"scores": table_metadata(table), "ungraded_heldout_rollouts": ungraded,
                                          **score_extras(grades, rollouts, heldout)})

    @dg.asset(key=key("delta"), group_name=group, tags=step_tag("delta"), partitions_def=policy_version_partitions(name),
              output_required=False,  # withheld when a judge is not trusted
              # Every version's grades, declared: a version's delta needs its own and its baseline's, and the
              # graph must say so, or a backfill could run the delta before the baseline's grades exist.
              ins={"grades": dg.AssetIn(key("grades"), partition_mapping=dg.AllPartitionMapping(),
                                        metadata={READS_AVAILABLE_PARTITIONS: True})},
              check_specs=[dg.AssetCheckSpec(checks.MUST_NOT_REGRESS, asset=key("delta"), blocking=True,
                                             partitions_def=policy_version_partitions(name),
                                             description="Blocking. No must_not_regress metric's interval lies "
                                                         "wholly on its bad side, and both sides' judges are trusted "
                                                         "(else no delta is written).")],
              automation_condition=GATED,
              description=("Step 08. Candidate vs its registry baseline on held-out tasks: paired bootstrap and "
                           "sign-flip p; its metadata leads with the ship line (SHIP / DO NOT SHIP / INCONCLUSIVE)."))
    def delta(context: dg.AssetExecutionContext, registry: RegistryResource, store: WarehouseResource,
              grades: pd.DataFrame):
        version = registry.version(context.partition_key)
        own, baseline = versions_of(grades, version.slug), versions_of(grades, version.baseline)
        seeds = sorted({str(s) for s in baseline["seed"].unique()}) if len(baseline) else []
        sides = [(version, own)]
        if version.baseline:
            sides.append((registry.version(version.baseline), baseline))
        withheld = [f"judge trust of {v.slug} seed {seed} is not trusted"
                    for v, table in sides for seed in checks.untrusted_seeds(table, v)]
        trust = TrustState(judge=judge_verdicts(sides))  # an opted-out side's untrusted judge still bars SHIP
        if withheld:  # gate before write: no delta from grades nobody may trust, and no earlier one left standing
            store.remove_one(name, "delta", policy_version=version.slug)
            result = checks.withheld_delta_result(withheld, ship_decision(None, candidate=version.slug,
                                                                          baseline=version.baseline or "", trust=trust))
            yield result
            checks.stop_if_failed(key("delta"), result)
            return
        report, meta = delta_for(version, own, baseline, seeds, trust)
        compared = [slug for slug in (version.slug, version.baseline) if slug]  # its lineage: their grades only
        links = version_links(name, [(role, v.slug, v.baseline is not None) for role, v in
                                     (("candidate", version), ("baseline", sides[-1][0]))[:len(sides)]],
                              sorted(set(seeds) & {str(s) for s in own["seed"].unique()}) if len(own) else [])
        yield dg.Output(report, metadata={**meta, "versions": links, LINEAGE_VERSIONS: dg.MetadataValue.json(compared)})
        regress = checks.must_not_regress_result(report, version)
        yield regress
        checks.stop_if_failed(key("delta"), regress)

    return [axes, covering_array, world, situations, search_and_rollouts, grades, *cut_assets, scores, delta,
            trained_policy_asset(name, domain, multi)]
