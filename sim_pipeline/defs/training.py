"""Step 09 as an asset: `<domain>/trained_policy`, a new policy per method from one (version, seed)'s cuts.

Its own job (`<domain>_train_job`), not part of the policy job: training is a decision (and, with a `trainer:`,
a GPU bill), so no sensor or schedule starts it; `sim-pipeline loop`, the UI or a backfill does. It reads the cuts
from the warehouse rather than as inputs, so a cut its publish gate refused (no file) is a skipped method with the
reason, not a failed load.
"""

import json

import dagster as dg

from sim_pipeline.defs.metadata import step_tag, table_metadata
from sim_pipeline.defs.partitions import split_key
from sim_pipeline.defs.resources import RegistryResource, WarehouseResource
from sim_pipeline.domain import Domain
from sim_pipeline.measure.text_charts import loss_chart
from sim_pipeline.situation import Situation
from sim_pipeline.protocol.train_methods import CUT_OF_METHOD
from sim_pipeline.train.trained_policy import TRAINED, train_policy

TRAINED_UI_COLUMNS = ("method", "status", "model", "examples", "steps", "loss_first", "loss_last", "reason")


def trained_policy_asset(name: str, domain: Domain, partitions: dg.MultiPartitionsDefinition) -> dg.AssetsDefinition:
    """The `<name>/trained_policy` asset of one domain."""
    cuts = sorted(set(CUT_OF_METHOD.values()))

    @dg.asset(key=dg.AssetKey([name, "trained_policy"]), group_name=name, partitions_def=partitions,
              tags=step_tag("trained_policy"),
              deps=[dg.AssetDep(dg.AssetKey([name, cut])) for cut in cuts],
              description=("Step 09. A new policy per method (SFT, DPO, GRPO) from this version's cuts: an embedded "
                           "agent's profile fitted and served as sim/trained-<hash>, or the version's trainer: "
                           "command's model. Name it in a new registry version whose baseline is this one."))
    def trained_policy(context: dg.AssetExecutionContext, registry: RegistryResource, store: WarehouseResource):
        slug, seed = split_key(context.partition_key)
        tables = {cut: store.read_one(name, cut, policy_version=slug, seed=seed) for cut in cuts}
        hashes = {cut: store.sha256_one(name, cut, policy_version=slug, seed=seed) for cut in cuts}
        situations = [Situation.from_row(r) for asset in ("situations", "search")
                      for table in [store.read_one(name, asset, **({"seed": seed} if asset == "situations" else
                                                                   {"policy_version": slug, "seed": seed}))]
                      if table is not None for r in table.to_dict("records")]
        table = train_policy(registry.version(slug), seed, tables, tools=domain.tool_schemas, situations=situations,
                             cut_sha256=hashes)
        trained = table[table["status"] == TRAINED]
        curves = {m: json.loads(losses) for m, losses in zip(trained["method"], trained["losses"]) if losses != "[]"}
        from sim_pipeline.measure.plots import plot_loss_curves, png_markdown  # matplotlib: only when drawing

        return dg.Output(table, metadata={
            "trained": dg.MetadataValue.json(dict(zip(trained["method"], trained["model"]))),
            "methods": table_metadata(table[list(TRAINED_UI_COLUMNS)]),
            "loss_curves": dg.MetadataValue.md(loss_chart(curves)),
            "loss_plot": dg.MetadataValue.md(png_markdown(plot_loss_curves(curves), alt="training loss by step")),
        })

    return trained_policy
