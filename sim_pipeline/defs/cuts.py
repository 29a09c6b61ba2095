"""The cut assets (step 07): each gated by a blocking publish-gate check and by judge trust upstream.

The gate runs before the write: a refused cut writes no Parquet, and the partition's file from an earlier run is
removed, so nothing downstream (the export, the summary) can take old rows for this run's.
"""


import dagster as dg
import pandas as pd

from sim_pipeline.cut.cuts import build_cut
from sim_pipeline.defs import checks
from sim_pipeline.defs.metadata import step_tag
from sim_pipeline.defs.partitions import split_key
from sim_pipeline.defs.resources import RegistryResource, WarehouseResource
from sim_pipeline.domain import Domain
from sim_pipeline.warehouse import jsonable, read_digest

DESCRIPTIONS = {
    "sft": "SFT rows: the best reward-1 train rollout per prompt, loss mask on assistant turns.",
    "preference_pairs": "DPO pairs within a prompt: chosen/rejected with margin >= 1 and the closest length.",
    "grpo_groups": "GRPO groups: whole k-sample groups whose pass rate lies in [0.2, 0.8].",
    "reward_model_set": "Reward-model pointwise rows: every graded train rollout with its reward.",
    "reward_model_pairs": "Reward-model pairwise rows: pairs within a prompt whose rewards differ, margin = the difference.",
}


def cut_asset(domain_name: str, step: str, domain: Domain, partitions: dg.MultiPartitionsDefinition,
              automation: dg.AutomationCondition) -> dg.AssetsDefinition:
    """One cut asset `<domain>/<step>` with its publish-gate check."""
    key = dg.AssetKey([domain_name, step])

    @dg.asset(key=key, group_name=domain_name, partitions_def=partitions, automation_condition=automation,
              tags=step_tag(step),
              output_required=False,  # a cut the gate refuses writes nothing
              ins={"rollouts": dg.AssetIn(dg.AssetKey([domain_name, "rollouts"])),
                   "grades": dg.AssetIn(dg.AssetKey([domain_name, "grades"]))},
              check_specs=[dg.AssetCheckSpec(checks.PUBLISH_GATE, asset=key, blocking=True, partitions_def=partitions,
                                             description="Blocking. No ungraded, untrusted, leaked or judge-only rows.")],
              description=f"Step 07. {DESCRIPTIONS[step]}")
    def _cut(context: dg.AssetExecutionContext, registry: RegistryResource, store: WarehouseResource,
             rollouts: pd.DataFrame, grades: pd.DataFrame):
        slug, seed = split_key(context.partition_key)
        version = registry.version(slug)
        trusted = checks.recorded_verdict(grades, version) == "trusted"  # the verdict the judge_trust check gave
        # The inputs as the IO manager read them (verified files, not edited here): the five cuts share one pool.
        read = (read_digest(rollouts), read_digest(grades))
        cut = build_cut(step, rollouts, grades, tools=domain.tool_schemas, judge_trusted=trusted,
                        opt_out=version.judge_trust_opt_out, pool_key=read if None not in read else None)
        if cut.gate.passed:
            yield dg.Output(cut.table, metadata={"rows": len(cut.table), "judge_trusted": trusted,
                                                 "report": dg.MetadataValue.json(jsonable(cut.metadata))})
        elif store.remove_one(domain_name, step, policy_version=slug, seed=seed):
            # Gate before write: nothing of this run is written, and an earlier run's rows must not pass for it.
            context.log.warning(f"{step}: the publish gate refused this run's rows; removed the earlier file")
        gate = checks.publish_gate_result(cut.gate)
        yield gate
        checks.stop_if_failed(key, gate)

    return _cut
