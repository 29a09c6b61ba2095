"""One small real run of two versions (a baseline and its candidate, so there is a delta) shared by the view tests.

The CLI tests' `small_run` has one version (no delta, no forest plot, no slices), and its 30 situations leave 8
held-out tasks, under the 10 a delta compares; 48 situations leave enough.
"""

import pytest

from sim_pipeline.cli import main


@pytest.fixture(scope="package")
def two_version_run(tmp_path_factory):
    """retail, agent-v1 and agent-v2, seed 0: (warehouse, Dagster home)."""
    root = tmp_path_factory.mktemp("view_run")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(root / "dagster_home"))
        patch.chdir(root)  # the model cache goes to data/cache under the working directory
        assert main(["run", "--domain", "retail", "--versions", "agent-v1,agent-v2", "--seed", "0", "--situations",
                     "48", "--samples", "1", "--heldout-samples", "2", "--warehouse", str(root / "warehouse"),
                     "--allow-failed-checks"]) == 0
    return root / "warehouse", root / "dagster_home"


@pytest.fixture(scope="package")
def view_file(two_version_run, tmp_path_factory):
    """`sim-pipeline view` of that run: (html path, the run's warehouse)."""
    base, home = two_version_run
    out = tmp_path_factory.mktemp("view") / "report.html"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        assert main(["view", "--domain", "retail", "--warehouse", str(base), "--out", str(out)]) == 0
    return out, base
