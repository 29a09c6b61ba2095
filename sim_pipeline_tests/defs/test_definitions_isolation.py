"""One broken domain pack fails only its own domain (issue 17, item 2): the Definitions hold it as one placeholder
asset that says why, every other domain builds with its jobs, and materializing the placeholder raises the error."""

import dagster as dg
import pytest

import sim_pipeline.definitions as definitions
from sim_pipeline.definitions import BROKEN_STEP, build_definitions
from sim_pipeline_tests.domains.broken_pack import BAD_PACK_ERROR, domains_with_a_broken_pack


@pytest.fixture
def broken_beside(tmp_path, monkeypatch):
    """DOMAINS_DIR with the shipped packs and `badpack`; the module's cached `defs` is rebuilt before and after."""
    monkeypatch.setattr("sim_pipeline.domain.DOMAINS_DIR", domains_with_a_broken_pack(tmp_path / "domains"))
    definitions._all_definitions.cache_clear()
    yield
    definitions._all_definitions.cache_clear()


def test_a_broken_pack_is_one_placeholder_and_every_other_domain_builds(broken_beside, tmp_path):
    defs = build_definitions(warehouse=str(tmp_path / "warehouse"))
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert {k for k in keys if k.startswith("badpack/")} == {f"badpack/{BROKEN_STEP}"}
    for domain in ("retail", "it_helpdesk", "food_delivery"):
        assert {f"{domain}/axes", f"{domain}/grades", f"{domain}/delta"} <= keys
    placeholder = graph.get(dg.AssetKey(["badpack", BROKEN_STEP]))
    assert placeholder.group_name == "badpack"
    assert placeholder.description.startswith("Domain pack 'badpack' is broken, so none of its steps can run: ")
    assert BAD_PACK_ERROR in placeholder.description and "\n" not in placeholder.description
    jobs = {job.name for job in defs.jobs}
    assert "retail_policy_job" in jobs and not any(name.startswith("badpack") for name in jobs)


def test_materializing_the_placeholder_raises_the_packs_error(broken_beside, tmp_path):
    defs = build_definitions(["badpack"], warehouse=str(tmp_path / "warehouse"))
    result = dg.materialize(list(defs.assets), instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    error = failure.event_specific_data.error.cause  # Dagster wraps the step's own error
    assert error.cls_name == "DomainPackError" and BAD_PACK_ERROR in error.message


def test_the_code_location_loads_with_a_broken_pack_beside(broken_beside):
    from dagster._core.workspace.autodiscovery import loadable_targets_from_loaded_module

    [target] = loadable_targets_from_loaded_module(definitions)  # what `dagster dev` does with the module
    assert target.attribute == "defs" and isinstance(target.target_definition, dg.Definitions)
    keys = {k.to_user_string() for k in target.target_definition.resolve_asset_graph().get_all_asset_keys()}
    assert f"badpack/{BROKEN_STEP}" in keys and "retail/grades" in keys
