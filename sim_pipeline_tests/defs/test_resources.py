import dagster as dg

from sim_pipeline.defs.resources import ModelGatewayResource
from sim_pipeline.defs.resources import replaced


def test_a_replaced_field_reaches_the_asset_at_run_time_where_model_copy_does_not(tmp_path):
    seen = []

    @dg.asset
    def probe(gateway: ModelGatewayResource) -> None:
        seen.append((gateway.cache_dir, gateway.concurrency))

    base = ModelGatewayResource(cache_dir="data/cache")
    assert dg.materialize([probe], resources={"gateway": replaced(base, cache_dir=str(tmp_path), concurrency=3)}).success
    assert dg.materialize([probe], resources={"gateway": base.model_copy(update={"cache_dir": str(tmp_path)})}).success
    assert seen == [(str(tmp_path), 3), ("data/cache", 16)]  # why the tests use replaced()
