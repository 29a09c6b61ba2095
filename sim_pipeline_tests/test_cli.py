"""The command line: user errors are one clear line and exit code 2, never a traceback."""

import os
import re
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sim_pipeline.cli import main
from sim_pipeline.definitions import domain_names


def test_unknown_domain_is_one_clear_line(capsys):
    assert main(["run", "--domain", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: domain 'nope': no directory") and f"Fix: use one of {domain_names()}" in err
    assert "Traceback" not in err


def test_a_run_naming_a_model_no_provider_serves_is_refused_before_anything_is_made(tmp_path, monkeypatch, capsys):
    """--writer (or a registry entry) with a model litellm cannot route: one line naming where it came from and the
    fix, exit 2, and no Dagster instance or warehouse written (not a run stopped at its search step)."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    warehouse = tmp_path / "wh"
    assert main(["run", "--domain", "retail", "--writer", "nosuch/writer", "--warehouse", str(warehouse)]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("error: --writer nosuch/writer: model 'nosuch/writer': litellm knows no provider") and \
        "Fix: write it as provider/model" in err
    registry = tmp_path / "policies.yaml"
    registry.write_text("policies:\n  typo-v1: {domain: retail, model: sim/agent-v1, judge_model: nosuch/judge}\n")
    assert main(["run", "--domain", "retail", "--registry", str(registry), "--warehouse", str(warehouse)]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith(f"error: version 'typo-v1' of {registry}, field 'judge_model': model 'nosuch/judge': litellm "
                          "knows no provider")
    assert not warehouse.exists() and not (tmp_path / "dagster_home").exists()


def test_version_of_another_domain_is_refused(capsys):
    assert main(["run", "--domain", "retail", "--versions", "helpdesk-v1"]) == 2
    assert "do not serve domain 'retail'" in capsys.readouterr().err


def test_policies_list(capsys):
    assert main(["policies", "list"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["DOMAIN", "VERSION", "BASELINE", "MODEL", "USER", "JUDGE"]
    assert "retail agent-v2 agent-v1 sim/agent-v2 sim/user sim/judge" in [" ".join(row.split()) for row in rows]


def test_a_small_run_over_two_seeds_is_sized_from_the_command_line(tmp_path, monkeypatch, capsys):
    from sim_pipeline import warehouse

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.chdir(tmp_path)  # the model cache goes to data/cache under the working directory
    base = tmp_path / "warehouse"
    code = main(["run", "--domain", "retail", "--versions", "agent-v1,agent-v2", "--seeds", "3,7", "--situations",
                 "10", "--samples", "2", "--heldout-samples", "2", "--warehouse", str(base), "--allow-failed-checks"])
    out = capsys.readouterr().out
    assert code == 0 and out.count("Materializing domain 'retail'") == 2
    for seed in ("3", "7"):
        for version in ("agent-v1", "agent-v2"):
            rows = warehouse.read_table(warehouse.partition_path(base, "retail", "rollouts", policy_version=version,
                                                                 seed=seed))
            planned = warehouse.read_table(warehouse.partition_path(base, "retail", "situations", seed=seed))
            # The plan's first 10 situations (the search may write its own beside them, within its budget).
            assert len(set(rows["situation_id"]) & set(planned["situation_id"])) <= 10
            assert rows["sample_index"].max() <= 1
    import dagster as dg

    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:  # the runs, as the UI lists them
        jobs = {run.job_name for run in instance.get_runs()}
        policy_runs = [r.run_id for r in instance.get_runs(filters=dg.RunsFilter(job_name="retail_policy_job"))]
        from sim_pipeline.defs.launch import made_by
        from sim_pipeline.registry import load_registry, versions_for

        versions = versions_for(load_registry(), "retail")[:2]
        later = made_by(instance, "retail", "3", versions, these_runs=set())  # as a command that ran nothing would
    assert jobs == {"retail_axes_job", "retail_seed_job", "retail_policy_job", "retail_delta_job"}
    # Each version's line names the run that wrote it; the next command's summary says they are earlier runs.
    assert len(policy_runs) == 4 and all(f"(run {run_id[:8]})" in out for run_id in policy_runs)
    assert later["grades|agent-v1"].endswith("an earlier run: this command's run did not write it")
    # The same held-out situations for both versions: the delta stays paired (the search may draw others per version).
    first, second = (warehouse.read_table(warehouse.partition_path(base, "retail", "rollouts", policy_version=v,
                                                                   seed="3")) for v in ("agent-v1", "agent-v2"))
    heldout = [set(t.loc[t["split"] == "heldout", "situation_id"]) for t in (first, second)]
    assert heldout[0] and heldout[0] == heldout[1]
    # The ship line of seed 3's summary weighs the judges of every seed the delta pooled: seed 7's grades rewritten
    # as judged untrusted (a verdict this seed's summary never shows) make it decide nothing. (Seeds and a size where
    # this small run's judges are all trusted: on ~50 rows one slip of sim/judge leaves its trust undecided, and then
    # no delta is written to pool. A change to what the search draws moves them: run seeds 0-7 at this size and keep
    # two whose summaries say `judge trust: trusted` for both versions.)
    assert main(["report", "--seed", "3", "--warehouse", str(base)]) == 0
    ship = capsys.readouterr().out.splitlines()[1]
    assert ship.startswith("  ship          ") and "judge trust" not in ship
    path = warehouse.partition_path(base, "retail", "grades", policy_version="agent-v2", seed="7")
    content = path.read_bytes()
    warehouse.write_table(path, warehouse.read_table(path).assign(judge_trust="untrusted"),
                          lineage=warehouse.recorded_lineage(content))
    main(["report", "--seed", "3", "--warehouse", str(base)])  # exit 1: the delta is stale now, too
    ship = capsys.readouterr().out.splitlines()[1]
    assert ship.startswith("  ship          INCONCLUSIVE agent-v2 over agent-v1: judge trust untrusted for agent-v2 "
                           "seed 7; "), ship


def test_backfill_queues_one_asset_backfill_in_the_instance_and_says_who_runs_it(tmp_path, monkeypatch, capsys):
    import dagster as dg

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    assert main(["backfill", "--domain", "retail", "--versions", "agent-v2", "--seeds", "0-1"]) == 0
    out = capsys.readouterr().out
    assert "agent-v2's baseline agent-v1 is not in this backfill" in out
    assert "no backfill daemon is running" in out and "make dev" in out
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        [backfill] = instance.get_backfills()
        assert backfill.title == "retail: agent-v2 x seeds 0-1" and backfill.backfill_id in out
        assert backfill.is_asset_backfill and dg.AssetKey(["retail", "delta"]) in backfill.asset_selection
    # --wait with no daemon would wait forever: a clear error instead (the backfill stays queued for `make dev`)
    assert main(["backfill", "--versions", "agent-v1", "--seeds", "0", "--wait"]) == 2
    assert "no daemon would ever finish" in capsys.readouterr().err


def test_backfill_refuses_a_seed_that_is_not_a_partition(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    assert main(["backfill", "--seeds", "0-9"]) == 2
    assert "--seeds '0-9'" in capsys.readouterr().err and not (tmp_path / "dagster_home").exists()


def test_a_run_whose_sim_pipeline_process_died_is_marked_failed_by_the_next_command(tmp_path, monkeypatch, capsys):
    import socket
    import subprocess

    import dagster as dg

    from sim_pipeline.defs.automation import LAUNCHED_BY_CLI, LAUNCHED_BY_TAG
    from sim_pipeline.defs.launch import HOST_TAG, PID_TAG

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no longer runs
    assert main(["backfill", "--versions", "agent-v1", "--seeds", "0"]) == 0  # any command: it writes the instance
    capsys.readouterr()
    tags = {LAUNCHED_BY_TAG: LAUNCHED_BY_CLI, HOST_TAG: socket.gethostname()}
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        job = dg.define_asset_job("killed_job").resolve(asset_graph=dg.Definitions().resolve_asset_graph())
        killed = instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED, tags={**tags, PID_TAG: str(dead.pid)})
        alive = instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED, tags={**tags, PID_TAG: str(os.getpid())})
    assert main(["backfill", "--versions", "agent-v1", "--seeds", "0"]) == 0
    assert f"run {killed.run_id[:8]} (killed_job) was left STARTED" in capsys.readouterr().err
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        assert instance.get_run_by_id(killed.run_id).status == dg.DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(alive.run_id).status == dg.DagsterRunStatus.STARTED  # still running: untouched
        assert instance.run_monitoring_enabled and not instance.telemetry_enabled  # the project's dagster.yaml


# -- a broken pack fails only its own domain; a bad registry registers nothing (issue 17, items 1 and 2) --------
def test_run_for_one_domain_works_beside_a_broken_pack_and_the_broken_one_fails_clearly(tmp_path, monkeypatch, capsys):
    import subprocess
    import sys

    from sim_pipeline_tests.domains.broken_pack import BAD_PACK_ERROR, domains_with_a_broken_pack

    root = domains_with_a_broken_pack(tmp_path / "domains")
    # A fresh process, as a user's command is: nothing imported beforehand hides an import-time failure.
    script = ("import pathlib, sys; import sim_pipeline.domain as d; d.DOMAINS_DIR = pathlib.Path(sys.argv[1]); "
              "from sim_pipeline.cli import main; sys.exit(main(sys.argv[2:]))")
    ran = subprocess.run([sys.executable, "-c", script, str(root), "run", "--domain", "retail", "--versions", "agent-v1",
                          "--situations", "2", "--samples", "1", "--heldout-samples", "1", "--warehouse",
                          str(tmp_path / "warehouse"), "--allow-failed-checks"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600, env={**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster_home")})
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "Materializing domain 'retail' seed 0" in ran.stdout and "badpack" not in ran.stdout + ran.stderr
    monkeypatch.setattr("sim_pipeline.domain.DOMAINS_DIR", root)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "other_home"))
    assert main(["run", "--domain", "badpack"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {root / 'badpack' / 'tools' / 'get_order.json'}: line 2: not valid JSON") and \
        BAD_PACK_ERROR in err and "Fix: fix the JSON syntax" in err and "Traceback" not in err
    assert not (tmp_path / "other_home").exists()  # refused before anything was written


def test_policies_list_marks_the_versions_of_a_broken_pack(tmp_path, monkeypatch, capsys):
    import yaml

    from sim_pipeline_tests.domains.broken_pack import BAD_PACK_ERROR, domains_with_a_broken_pack

    monkeypatch.setattr("sim_pipeline.domain.DOMAINS_DIR", domains_with_a_broken_pack(tmp_path / "domains"))
    registry = tmp_path / "policies.yaml"
    registry.write_text(yaml.safe_dump({"policies": {
        "agent-v1": {"domain": "retail", "model": "sim/agent-v1"},
        "bad-v1": {"domain": "badpack", "model": "sim/agent-v1"},
        "bad-v2": {"domain": "badpack", "model": "sim/agent-v2", "baseline": "bad-v1"}}}))
    monkeypatch.setattr("sim_pipeline.registry.REGISTRY_PATH", registry)
    assert main(["policies", "list"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split()[-1] == "STATUS"
    [domain_line] = [line for line in lines if "BROKEN pack:" in line]
    assert domain_line.startswith("badpack: BROKEN pack: ") and BAD_PACK_ERROR in domain_line
    versions = {line.split()[1]: line for line in lines if "BROKEN pack:" not in line}
    assert set(versions) == {"agent-v1", "bad-v1", "bad-v2"}
    assert versions["bad-v1"].endswith("BROKEN (its pack does not load)") and "BROKEN" in versions["bad-v2"]
    assert "BROKEN" not in versions["agent-v1"]


def test_policies_sync_registers_nothing_when_the_registry_has_an_error(tmp_path, monkeypatch, capsys):
    import dagster as dg
    import yaml

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    registry = tmp_path / "policies.yaml"
    monkeypatch.setattr("sim_pipeline.registry.REGISTRY_PATH", registry)
    good = {"agent-v1": {"domain": "retail", "model": "sim/agent-v1"}}
    registry.write_text(yaml.safe_dump({"policies": good}))
    assert main(["policies", "sync"]) == 0 and "retail: added ['agent-v1']" in capsys.readouterr().out
    for error in ({"agent-v2": {"domain": "../../etc", "model": "sim/agent-v2"}},
                  {"agent-v2": {"domain": "retail", "model": "sim/agent-v2", "baseline": "agent-v2"}},
                  {"agent-v2": {"domain": "retail", "model": "sim/agent-v9"}}):
        registry.write_text(yaml.safe_dump({"policies": {**good, "agent-v3": {"domain": "it_helpdesk",
                                                                                  "model": "sim/agent-v1"}, **error}}))
        assert main(["policies", "sync"]) == 2
        assert f"error: {registry}: line" in capsys.readouterr().err
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        assert instance.get_dynamic_partitions("retail_policy_version") == ["agent-v1"]
        assert instance.get_dynamic_partitions("it_helpdesk_policy_version") == []
        assert not [name for name in ("../../etc_policy_version", "etc_policy_version")
                    if instance.get_dynamic_partitions(name)]


@pytest.fixture(scope="module")
def small_run(shared_run):
    """The session's small real run (retail, agent-v1 and agent-v2, seed 0): its warehouse and the Dagster home that
    recorded it. The tests change copies of it, never the run itself."""
    return shared_run.warehouse, shared_run.home


def _copied(small_run, tmp_path):
    """The run's warehouse copied as `cp -r` would (sidecars included), and its scores file."""
    from sim_pipeline import warehouse

    base = tmp_path / "warehouse"
    shutil.copytree(small_run[0], base)
    return base, warehouse.partition_path(base, "retail", "scores", policy_version="agent-v1", seed="0")


def _rewritten(path, value=0.99):
    """pass@1 rewritten as an editor of the file would, and its sidecar deleted (`cp *.parquet`, `rsync
    --exclude='.*'`)."""
    from sim_pipeline import warehouse

    table = pq.read_table(path).to_pandas()
    table.loc[table["metric"] == "pass@1", "value"] = value
    pq.write_table(pa.Table.from_pandas(table, preserve_index=False), path)
    warehouse.checksum_path(path).unlink(missing_ok=True)


def _pass_at_1(out):
    return re.search(r"agent-v1 .* held-out pass@1 (\d\.\d{3})", out).group(1)


def test_report_refuses_scores_rewritten_without_their_sidecar(small_run, tmp_path, monkeypatch, capsys):
    base, scores = _copied(small_run, tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "another_home"))  # an instance that knows nothing of it
    assert main(["report", "--warehouse", str(base)]) == 0
    clean = _pass_at_1(capsys.readouterr().out)
    _rewritten(scores)
    assert main(["report", "--warehouse", str(base)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no partial summary
    assert captured.err.startswith(f"error: {scores}: cannot be verified: its sidecar .seed=0.parquet.sha256 is "
                                   "missing") and captured.err.count("\n") == 1
    assert "Fix: restore .seed=0.parquet.sha256 beside it" in captured.err and "--allow-unverified" in captured.err
    assert "0.990" not in captured.err and clean != "0.990"


def test_report_checks_a_file_without_its_sidecar_against_the_instance_that_materialized_it(
        small_run, tmp_path, monkeypatch, capsys):
    from sim_pipeline import warehouse

    base, scores = _copied(small_run, tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(small_run[1]))
    assert main(["report", "--warehouse", str(base)]) == 0
    clean = _pass_at_1(capsys.readouterr().out)
    warehouse.checksum_path(scores).unlink()  # the clean file, copied without its sidecar
    assert main(["report", "--warehouse", str(base)]) == 0
    assert _pass_at_1(capsys.readouterr().out) == clean
    _rewritten(scores)
    for extra in ([], ["--allow-unverified"]):  # a file the instance's record contradicts is never read
        assert main(["report", "--warehouse", str(base), *extra]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.startswith(f"error: {scores}: its content (sha256 ")
        assert f"recorded by the Dagster instance at {small_run[1]} for retail/scores partition agent-v1|0 (run " in \
            captured.err
        assert "Fix: rematerialize retail/scores for policy_version=agent-v1, seed=0" in captured.err


def test_allow_unverified_reads_a_file_no_record_vouches_for_and_says_so_loudly(small_run, tmp_path, monkeypatch,
                                                                                 capsys):
    from sim_pipeline import cli, warehouse

    assert cli.UNVERIFIED_FLAG == warehouse.UNVERIFIED_FLAG == "--allow-unverified"  # the flag refusals name
    base, scores = _copied(small_run, tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "another_home"))
    _rewritten(scores)
    assert main(["report", "--warehouse", str(base), "--allow-unverified"]) == 0
    captured = capsys.readouterr()
    assert _pass_at_1(captured.out) == "0.990"  # read as asked, and
    assert captured.err == f"WARNING: UNVERIFIED READ of {scores}: its sidecar .seed=0.parquet.sha256 is missing and " \
        "no content_sha256 was recorded for it; --allow-unverified was given, so it is read as is and anything " \
        "printed from it may have been changed since it was written\n"


# -- issue 29, item 8: user errors are one line and exit 2; one seed syntax; a stopped run says why --------------
ONE_LINE = 300  # the most a user error may print: `--seeds 0-99999` once listed 99,992 seeds


def _one_error_line(capsys):
    """The one `error:` line a refused command printed (nothing on stdout), checked for shape; its text."""
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err and len(captured.err) < ONE_LINE, captured.err
    return captured.err


SEED_VERBS = [["run"], ["report"], ["export", "--format", "trl"], ["backfill"], ["loop", "--from", "agent-v1"]]


@pytest.mark.parametrize("value, says", [
    ("0-99999", "error: --seeds '0-99999': 8, 9, 10 and 99,989 more are not seed partitions. Fix: use seeds within "
                "0-7, e.g. 0-7, 0,3,5 or 0-2,5\n"),
    ("5-2", "error: --seeds '5-2': the range '5-2' runs backwards. Fix: write 2-5\n"),
    ("0-2,x", "error: --seeds '0-2,x': 'x' is neither a seed nor a range. Fix: write e.g. 0-7, 0,3,5 or 0-2,5\n"),
])
def test_every_verb_refuses_a_bad_seed_value_with_the_same_short_line_before_touching_anything(
        value, says, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    for verb in SEED_VERBS:
        assert main([*verb, "--seeds", value]) == 2, verb
        assert _one_error_line(capsys) == says, verb
    for verb in (["run"], ["report"], ["loop", "--from", "agent-v1"]):  # --seed is the same option there
        assert main([*verb, "--seed", value]) == 2
        assert _one_error_line(capsys) == says.replace("--seeds", "--seed", 1)  # the flag as typed
    assert not (tmp_path / "dagster_home").exists()  # refused before the instance was opened


def test_the_seed_syntax_names_the_same_seeds_for_every_verb(tmp_path, monkeypatch, capsys):
    import dagster as dg

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    assert main(["report", "--seeds", "0-2,5", "--warehouse", str(tmp_path / "empty")]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("sim_pipeline: ")] == \
        [f"sim_pipeline: domain 'retail', seed {s}" for s in ("0", "1", "2", "5")]
    assert main(["backfill", "--versions", "agent-v1", "--seeds", "5", "--seeds", "0-2"]) == 0  # the flag again adds
    capsys.readouterr()
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        [backfill] = instance.get_backfills()
    assert backfill.title == "retail: agent-v1 x seeds 0,1,2,5"
    assert main(["export", "--format", "openai", "--seeds", "2,0-1", "--warehouse", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert [f"seed {s}: missing" in err for s in "0125"] == [True, True, True, False]
    assert main(["loop", "--from", "agent-v1", "--seed", "0-2,5"]) == 2
    assert "--seed names 4 (0,1,2,5). Fix: give one, e.g. --seed 0" in _one_error_line(capsys)


@pytest.mark.parametrize("out", ["/proc/x", "a_file/x"])
def test_export_to_a_directory_that_cannot_be_made_is_one_line_and_exit_2(out, small_run, tmp_path, monkeypatch,
                                                                         capsys):
    base, _ = _copied(small_run, tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(small_run[1]))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("not a directory")
    assert main(["export", "--format", "openai", "--warehouse", str(base), "--out", out]) == 2
    err = _one_error_line(capsys)
    assert err.startswith(f"error: --out {out}: cannot write {out}") and "Fix: pass --out a directory" in err


def test_report_of_a_version_never_run_says_so_and_gives_the_run_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    base = tmp_path / "warehouse"
    assert main(["report", "--seed", "3", "--warehouse", str(base)]) == 0
    out = capsys.readouterr().out
    for version in ("agent-v1", "agent-v2"):
        assert f"  {version:<13} not run for seed 3: the warehouse holds none of its steps" in out
        assert f"Run: sim-pipeline run --domain retail --seed 3 --versions {version} --warehouse {base}\n" in out
    assert "0 rollouts" not in out and "publish_gate" not in out
    # The delta line names what is missing on each side, not a guess.
    assert "delta agent-v2 vs agent-v1: not computed: agent-v1 has no grades for seed 3 (it has no rollouts either); " \
        "agent-v2 has no grades for seed 3 (it has no rollouts either)" in out
    assert main(["report", "--domain", "nope"]) == 2  # not an empty summary of a domain that is not there
    assert "error: domain 'nope': no directory" in _one_error_line(capsys)


def test_a_run_its_endpoint_stopped_says_why_in_one_line_and_what_did_not_run(tmp_path):
    import subprocess
    import sys

    import yaml

    from sim_pipeline_tests.scripted_server import ScriptedServer, always

    registry = tmp_path / "policies.yaml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    with ScriptedServer(always(500)) as server:
        registry.write_text(yaml.safe_dump({
            "models": {"down-agent": {"model": "openai/scripted-agent", "api_base": server.base_url, "timeout_s": 10}},
            "defaults": {"judge_model": "sim/judge", "user_model": "sim/user"},
            "policies": {"down-v1": {"domain": "retail", "model": "down-agent"}}}))
        ran = subprocess.run([sys.executable, "-m", "sim_pipeline.cli", "run", "--versions", "down-v1", "--situations",
                              "4", "--samples", "1", "--heldout-samples", "1", "--warehouse", str(tmp_path / "wh")],
                             cwd=tmp_path, capture_output=True, text=True, timeout=600,
                             env={**env, "DAGSTER_HOME": str(tmp_path / "dagster_home"),
                                  "SIM_PIPELINE_REGISTRY": str(registry),
                                  "PYTHONPATH": os.pathsep.join(sys.path)})
        host = server.base_url.split("//")[1].split("/")[0]
    assert ran.returncode == 1, ran.stderr[-2000:]
    summary = ran.stdout[ran.stdout.index("sim_pipeline: domain 'retail'"):]
    [why] = [line for line in summary.splitlines() if line.startswith("  down-v1 ")]
    assert why.startswith("  down-v1       STOPPED (run ") and "model 'down-agent' at http://" + host in why
    assert "requests failed in a row (" in why and "HTTP 500" in why and "circuit breaker" in why
    assert f"  {'':<13} not run: search, rollouts, grades, sft, preference_pairs, grpo_groups, reward_model_set, " \
        "reward_model_pairs, scores\n" in summary
    assert "0 rollouts" not in summary and "publish_gate" not in summary


def test_backfill_list_shows_each_backfill_and_cancel_marks_one_canceling(tmp_path, monkeypatch, capsys):
    import dagster as dg
    from dagster._core.execution.backfill import BulkActionStatus

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    assert main(["backfill", "list"]) == 0
    assert capsys.readouterr().out.startswith("no backfill in the instance at ")
    assert main(["backfill", "--versions", "agent-v1", "--seeds", "0-1"]) == 0  # a bare launch, as before
    assert main(["backfill", "launch", "--versions", "agent-v2", "--seeds", "3"]) == 0
    capsys.readouterr()
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        second, first = instance.get_backfills()
    assert main(["backfill", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{second.backfill_id}  requested ") and \
        lines[0].endswith("retail: agent-v2 x seeds 3 (14 asset partitions); runs: no run yet")
    assert lines[1].startswith(f"{first.backfill_id}  requested ") and \
        "retail: agent-v1 x seeds 0-1 (25 asset partitions)" in lines[1]
    assert main(["backfill", "cancel", first.backfill_id]) == 0
    assert capsys.readouterr().out.startswith(f"backfill {first.backfill_id} marked canceling")
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        assert instance.get_backfill(first.backfill_id).status == BulkActionStatus.CANCELING
        assert instance.get_backfill(second.backfill_id).status == BulkActionStatus.REQUESTED
    assert main(["backfill", "list"]) == 0
    assert f"{first.backfill_id}  canceling " in capsys.readouterr().out
    assert main(["backfill", "cancel", "nosuchid"]) == 2
    err = _one_error_line(capsys)
    assert "backfill 'nosuchid' is not in the Dagster instance at" in err and "Fix: `sim-pipeline backfill list`" in err
    assert main(["backfill", "cancel"]) == 2
    assert "Fix: `sim-pipeline backfill list` shows the ids" in _one_error_line(capsys)


# -- one run per partition at a time (issue 29, item 6) ---------------------------------------------------------
def test_a_second_sim_pipeline_run_of_a_running_partition_is_refused_and_a_killed_one_holds_nothing(tmp_path,
                                                                                                     http_agent):
    """Two `sim-pipeline run` processes on one partition: the second is refused before any model call, naming the
    first; after the first is killed with SIGKILL, the next run of the partition is not blocked."""
    import signal
    import subprocess
    import sys
    import threading
    from pathlib import Path

    import yaml

    registry = tmp_path / "policies.yaml"
    registry.write_text(yaml.safe_dump({"defaults": {"judge_model": "sim/judge", "user_model": "sim/user"},
                                        "policies": {"http-v1": {"domain": "retail", "model": "openai/scripted-agent"}}}))
    held, release = threading.Event(), threading.Event()

    def responder(request):  # the first call waits (one call in flight: --concurrency 1); later ones answer at once
        if not held.is_set():
            held.set()
            release.wait(120)
        return {"content": "Sorry, I'm not able to help with that request."}

    server = http_agent(responder)
    env = {**os.environ, "SIM_PIPELINE_REGISTRY": str(registry), "DAGSTER_HOME": str(tmp_path / "dagster_home"),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-c", "from sim_pipeline.cli import program; program()", "run", "--versions", "http-v1",
               "--seed", "0", "--situations", "2", "--phrasings", "1", "--samples", "1", "--heldout-samples", "1",
               "--concurrency", "1", "--warehouse", str(tmp_path / "warehouse"), "--allow-failed-checks"]
    first = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert held.wait(120), "the first run never called the model"
        second = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2, second.stderr[-2000:]
        assert f"is being run by another sim-pipeline process: pid {first.pid} on " in second.stderr
        assert "retail_policy_job" in second.stderr and "pass --wait" in second.stderr
        assert len(server.requests) == 1  # the second run paid for nothing
        first.send_signal(signal.SIGKILL)
        first.wait(60)
    finally:
        first.kill()
        release.set()
    third = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert third.returncode == 0, third.stderr[-2000:]
    assert f"died (pid {first.pid}); marked failed" in third.stderr  # its run, left STARTED by the kill
    assert "Materializing domain 'retail' seed 0" in third.stdout and len(server.requests) > 1


# -- issue 30, item 5: a cut that cannot exist at this size is not applicable, not a failed run -------------------
def test_a_run_with_one_sample_per_prompt_exits_0_and_says_grpo_is_not_applicable(tmp_path):
    import subprocess
    import sys

    import yaml

    registry = tmp_path / "policies.yaml"
    # Opted out of the judge gate: at this size (a handful of tasks) it is inconclusive, which is not under test here.
    registry.write_text(yaml.safe_dump({"policies": {"one-v1": {"domain": "retail", "model": "sim/agent-v2",
                                                                "judge_trust_opt_out": True}}}))
    ran = subprocess.run([sys.executable, "-m", "sim_pipeline.cli", "run", "--versions", "one-v1", "--situations", "12",
                          "--samples", "1", "--heldout-samples", "1", "--warehouse", str(tmp_path / "wh")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster_home"),
                              "SIM_PIPELINE_REGISTRY": str(registry), "PYTHONPATH": os.pathsep.join(sys.path)})
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    assert "grpo_groups not applicable (one sample per prompt: a group needs 2)" in ran.stdout
    assert "not written" not in ran.stdout


# -- issue 31, item 4: --registry on every verb, one seed syntax, `policies list` as a table, help that shows -----
def _commands(command=None, words=()):
    """Every parser of the command line with the words that reach it: (), ('run',), ('backfill', 'list'), ..."""
    import argparse

    from sim_pipeline.cli import parser

    command = command or parser()
    found = [(words, command)]
    for action in command._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, (*words, name))
    return found


def _is_leaf(command):
    import argparse

    return not any(isinstance(action, argparse._SubParsersAction) for action in command._actions)


COMMANDS = [words for words, _ in _commands()]
VERBS = [words for words, command in _commands() if _is_leaf(command)]  # what runs: a verb, or one of its actions


def _required(words):
    """The words a verb needs besides its options (a required option's first choice, else a version's name)."""
    [command] = [c for w, c in _commands() if w == words]
    needed = []
    for action in command._actions:
        value = str((action.choices or ["agent-v1"])[0]) if action.choices else "agent-v1"
        if action.option_strings and action.required:
            needed += [action.option_strings[0], value]
        elif not action.option_strings and action.nargs is None:
            needed.append(value)
    return needed


@pytest.mark.parametrize("verb", VERBS, ids=" ".join)
def test_every_verb_takes_registry_and_refuses_a_missing_one_before_opening_anything(verb, tmp_path, monkeypatch,
                                                                                      capsys):
    from sim_pipeline.cli import parse

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "elsewhere" / "policies.yaml"
    assert parse([*verb, *_required(verb), "--registry", str(missing)]).registry == str(missing)
    assert main([*verb, *_required(verb), "--registry", str(missing)]) == 2
    assert _one_error_line(capsys).startswith(f"error: {missing}: file not found. Fix:")
    assert not (tmp_path / "dagster_home").exists() and os.listdir(tmp_path) == []


ALT_REGISTRY = {"defaults": {"judge_model": "sim/judge", "user_model": "sim/user"},
                "policies": {"alt-v1": {"domain": "retail", "model": "sim/agent-v1", "judge_trust_opt_out": True},
                             "alt-v2": {"domain": "retail", "model": "sim/agent-v2", "baseline": "alt-v1"}}}


def test_every_verb_reads_the_registry_it_is_given_and_so_do_its_runs(tmp_path, monkeypatch, capsys):
    """A registry none of whose versions is in data/policies.yaml: each verb sees its versions, and a run's Dagster
    steps read the same file (a step reading the default one would not know alt-v1)."""
    import dagster as dg
    import yaml

    from sim_pipeline import warehouse

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.chdir(tmp_path)
    registry = tmp_path / "alt.yaml"
    registry.write_text(yaml.safe_dump(ALT_REGISTRY))
    alt = ["--registry", str(registry)]
    base = tmp_path / "warehouse"
    assert main(["policies", "list", *alt]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [row.split()[1] for row in rows] == ["alt-v1", "alt-v2"]
    assert main(["policies", "sync", *alt]) == 0 and "retail: added ['alt-v1', 'alt-v2']" in capsys.readouterr().out
    assert main(["report", "--seeds", "0", "--warehouse", str(base), *alt]) == 0
    out = capsys.readouterr().out
    assert "  alt-v1        not run for seed 0" in out and "agent-v1" not in out
    assert main(["export", "--format", "openai", "--versions", "alt-v1", "--seeds", "0", "--warehouse", str(base),
                 *alt]) == 2
    assert "--versions alt-v1" in capsys.readouterr().err  # missing partitions of alt-v1, not an unknown version
    assert main(["loop", "--from", "agent-v1", "--warehouse", str(base), *alt]) == 2
    assert f"--from agent-v1: no such version in {registry}. Fix: use one of ['alt-v1', 'alt-v2']" in \
        capsys.readouterr().err
    assert main(["backfill", "--versions", "alt-v2", "--seeds", "3", *alt]) == 0
    assert f"start it with SIM_PIPELINE_REGISTRY={registry} for its runs to read this one" in capsys.readouterr().out
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        assert [b.title for b in instance.get_backfills()] == ["retail: alt-v2 x seeds 3"]
    assert main(["run", "--versions", "alt-v1", "--situations", "2", "--samples", "1", "--heldout-samples", "1",
                 "--warehouse", str(base), *alt]) == 0, capsys.readouterr()
    rollouts = warehouse.read_table(warehouse.partition_path(base, "retail", "rollouts", policy_version="alt-v1",
                                                             seed="0"))
    assert len(rollouts) and set(rollouts["policy_version"]) == {"alt-v1"}


def test_every_help_has_the_environment_it_reads(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for variable in ("$SIM_PIPELINE_REGISTRY", "$SIM_PIPELINE_WAREHOUSE", "$DAGSTER_HOME"):
        assert variable in text


@pytest.mark.parametrize("words", COMMANDS, ids=lambda words: " ".join(words) or "sim-pipeline")
def test_every_verb_help_shows_an_example_that_parses_and_where_its_output_goes(words, capsys):
    import shlex

    from sim_pipeline.cli import parse

    with pytest.raises(SystemExit) as done:
        main([*words, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert "example:" in lines, text
    examples = []
    for line in lines[lines.index("example:") + 1:]:
        if not line.startswith("  sim-pipeline "):
            break
        examples.append(shlex.split(line)[1:])
    assert examples, text
    for example in examples:
        assert example[:len(words)] == list(words)
        assert callable(parse(example).fn)  # it runs as written: a real command, not a sketch
    [output] = [" ".join(text[text.index("\noutput: "):].split())]
    assert any(where in output for where in ("stdout", "under ", "$DAGSTER_HOME", "--out")), output
    if words in VERBS:  # where --registry reads from when it is not given
        assert "$SIM_PIPELINE_REGISTRY" in " ".join(text.split())


def _seed_verbs():
    """The verbs that take seeds, and their seed flags."""
    found = []
    for words, command in _commands():
        flags = [f for a in command._actions for f in a.option_strings if "seed" in f]
        if flags:
            found.append((words, flags))
    return found


SPELLINGS = [(["0"], ["0"]), (["0,1"], ["0", "1"]), (["0-7"], [str(n) for n in range(8)]),
             (["0-3,6"], ["0", "1", "2", "3", "6"]), (["6", "0-3"], ["0", "1", "2", "3", "6"]),
             (["3,1-2,1"], ["1", "2", "3"])]


@pytest.mark.parametrize("verb, flags", _seed_verbs(), ids=[" ".join(words) for words, _ in _seed_verbs()])
def test_every_verb_that_takes_seeds_reads_each_spelling_as_the_same_seeds(verb, flags):
    from sim_pipeline.cli import parse
    from sim_pipeline.seed_spec import parse_seeds

    assert "--seeds" in flags and set(flags) <= {"--seeds", "--seed"}  # one name for one option, everywhere
    for flag in flags:
        for values, seeds in SPELLINGS:
            given = [word for value in values for word in (flag, value)]  # several values: the flag once for each
            args = parse([*verb, *_required(verb), *given])
            assert parse_seeds(args.seeds, args.seeds_flag) == seeds, (flag, values)


@pytest.mark.parametrize("verb", [words for words, _ in _seed_verbs()], ids=" ".join)
def test_a_second_word_after_a_flag_is_refused_naming_the_flag_and_the_fix(verb, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    assert main([*verb, *_required(verb), "--seeds", "0", "1"]) == 2
    assert _one_error_line(capsys) == "error: '1' follows --seeds 0, and --seeds takes one value. Fix: join several " \
                                      "with commas, --seeds 0,1, or give --seeds once for each\n"
    assert main([*verb, *_required(verb), "--seeds", "0-9"]) == 2  # a bad value: the flag and the fix
    assert _one_error_line(capsys).startswith("error: --seeds '0-9': 8, 9 are not seed partitions. Fix: use seeds "
                                              "within 0-7")
    assert not (tmp_path / "dagster_home").exists()


def test_a_bad_seed_value_names_the_flag_as_typed(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    assert main(["run", "--seed", "x"]) == 2
    assert _one_error_line(capsys) == "error: --seed 'x': 'x' is neither a seed nor a range. Fix: write e.g. 0-7, " \
                                      "0,3,5 or 0-2,5\n"
    assert main(["run", "--versions", "agent-v1", "agent-v2"]) == 2
    assert "Fix: join several with commas, --versions agent-v1,agent-v2, or give --versions once for each" in \
        _one_error_line(capsys)


def test_backfill_actions_and_values_cannot_be_taken_for_one_another(tmp_path, monkeypatch, capsys):
    """A registry with a version named `list`: `--versions agent-v1 list` once launched a backfill of both."""
    import dagster as dg
    import yaml

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    registry = tmp_path / "policies.yaml"
    registry.write_text(yaml.safe_dump({"policies": {"agent-v1": {"domain": "retail", "model": "sim/agent-v1"},
                                                     "list": {"domain": "retail", "model": "sim/agent-v2"}}}))
    alt = ["--registry", str(registry)]
    assert main(["backfill", "--versions", "agent-v1", "list", "--seeds", "0", *alt]) == 2
    assert "'list' follows --versions agent-v1, and --versions takes one value. Fix: write the action right after " \
        "backfill: `sim-pipeline backfill list`" in _one_error_line(capsys)
    assert main(["backfill", "--wait", "list", *alt]) == 2
    assert "Fix: write the action right after backfill: `sim-pipeline backfill list`" in _one_error_line(capsys)
    assert main(["backfill", "list", "--seeds", "0"]) == 2
    assert "`sim-pipeline backfill list` has no option --seeds" in _one_error_line(capsys)
    assert main(["backfill", "list", "abc123"]) == 2
    assert "Fix: `sim-pipeline backfill cancel abc123` cancels that backfill" in _one_error_line(capsys)
    assert not (tmp_path / "dagster_home").exists()  # nothing was launched, listed or opened
    assert main(["backfill", "--versions", "list", "--seeds", "0", *alt]) == 0  # a value named like an action
    assert main(["backfill", "list"]) == 0
    [line] = capsys.readouterr().out.splitlines()[-1:]
    assert "retail: list x seeds 0 (" in line and line.endswith("; runs: no run yet")
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        assert [b.title for b in instance.get_backfills()] == ["retail: list x seeds 0"]


LONG_DOMAIN = "a_domain_whose_name_is_longer_than_any_column_was"
LONG_VERSION = "a-version-whose-name-is-longer-than-any-column-was-v1"


def test_policies_list_is_a_table_with_a_header_whose_columns_line_up_however_long_the_names(tmp_path, monkeypatch,
                                                                                            capsys):
    import re
    import shutil as files

    import yaml

    from sim_pipeline.domain import DOMAINS_DIR

    domains = tmp_path / "domains"
    files.copytree(DOMAINS_DIR / "retail", domains / "retail")
    spec = files.copytree(DOMAINS_DIR / "retail", domains / LONG_DOMAIN) / "domain.yaml"
    spec.write_text(spec.read_text().replace("\nname: retail\n", f"\nname: {LONG_DOMAIN}\n"))
    monkeypatch.setattr("sim_pipeline.domain.DOMAINS_DIR", domains)
    registry = tmp_path / "policies.yaml"
    entries = {"agent-v1": {"domain": "retail", "model": "sim/agent-v1"},
               "2024.10": {"domain": "retail", "model": "sim/agent-v2", "baseline": "agent-v1",
                           "user_model": "openai/a-user-simulator", "judge_model": "anthropic/a-judge"},
               LONG_VERSION: {"domain": LONG_DOMAIN, "model": "sim/agent-v1"}}
    registry.write_text(yaml.safe_dump({"defaults": {"judge_model": "sim/judge", "user_model": "sim/user"},
                                        "policies": entries}))
    monkeypatch.setattr("sim_pipeline.registry.REGISTRY_PATH", registry)  # the default registry, as without --registry
    assert main(["policies", "list"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    columns = [m.start() for m in re.finditer(r"\S+", header)]
    assert header.split() == ["DOMAIN", "VERSION", "BASELINE", "MODEL", "USER", "JUDGE"]
    cells = {row.split()[1]: [row[start:end].strip() for start, end in zip(columns, [*columns[1:], None])]
             for row in rows}
    assert cells == {"agent-v1": ["retail", "agent-v1", "-", "sim/agent-v1", "sim/user", "sim/judge"],
                     "2024.10": ["retail", "2024.10", "agent-v1", "sim/agent-v2", "openai/a-user-simulator",
                                 "anthropic/a-judge"],
                     LONG_VERSION: [LONG_DOMAIN, LONG_VERSION, "-", "sim/agent-v1", "sim/user", "sim/judge"]}
    for row in rows:  # every cell starts at its column, after a gap: no value runs into the next column
        assert all(row[start - 1] == " " and row[start] != " " for start in columns[1:]), row


def test_doubling_the_search_budget_doubles_the_search_rollouts(tmp_path, monkeypatch, capsys):
    """Issue 32 item 5: --samples alone spends the same budget on fewer situations; --search-budget scales it."""
    from sim_pipeline import defaults, warehouse

    monkeypatch.chdir(tmp_path)  # the model cache goes to data/cache under the working directory
    train, stops = {}, {}
    for budget in (16, 32):
        monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / f"dagster_home_{budget}"))
        base = tmp_path / f"warehouse_{budget}"
        assert main(["run", "--domain", "retail", "--versions", "agent-v1", "--situations", "12", "--samples", "1",
                     "--heldout-samples", "1", "--search-budget", str(budget), "--warehouse", str(base),
                     "--allow-failed-checks"]) == 0
        part = {"policy_version": "agent-v1", "seed": "0"}
        rows = warehouse.read_table(warehouse.partition_path(base, "retail", "rollouts", **part))
        train[budget] = int((rows["split"] == "train").sum())
        stops[budget] = set(warehouse.read_table(warehouse.partition_path(base, "retail", "search", **part))
                            ["stop_reason"])
    capsys.readouterr()
    batch_rows = defaults.SEARCH_BATCH_SITUATIONS  # one phrasing, one sample: the last batch may pass the budget
    assert stops == {16: {"budget: %d rows >= 16" % train[16]}, 32: {"budget: %d rows >= 32" % train[32]}}
    assert 16 <= train[16] < 16 + batch_rows and abs(train[32] - 2 * train[16]) <= batch_rows


def test_run_help_documents_the_search_budget(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--search-budget ROWS" in text and "--samples alone spends the same budget on fewer situations" in text
