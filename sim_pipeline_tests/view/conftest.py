"""The view tests read the session's shared run (sim_pipeline_tests/conftest.py): two versions of retail, so there
is a delta, and enough situations for the delta to compare them (forest plot and slices).
"""

import pytest

from sim_pipeline.cli import main


@pytest.fixture(scope="package")
def two_version_run(shared_run):
    """retail, agent-v1 and agent-v2, seed 0: (warehouse, Dagster home)."""
    return shared_run.warehouse, shared_run.home


@pytest.fixture(scope="package")
def view_file(two_version_run, tmp_path_factory):
    """`sim-pipeline view` of that run: (html path, the run's warehouse)."""
    base, home = two_version_run
    out = tmp_path_factory.mktemp("view") / "report.html"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        assert main(["view", "--domain", "retail", "--warehouse", str(base), "--out", str(out)]) == 0
    return out, base
