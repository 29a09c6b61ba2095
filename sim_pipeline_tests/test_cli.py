"""The command line: user errors are one clear line and exit code 2, never a traceback."""

from sim_pipeline.cli import main


def test_unknown_domain_is_one_clear_line(capsys):
    assert main(["run", "--domain", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: domain 'nope': no directory") and "Fix: use one of ['food_delivery', 'it_helpdesk', 'retail']" in err
    assert "Traceback" not in err


def test_version_of_another_domain_is_refused(capsys):
    assert main(["run", "--domain", "retail", "--versions", "helpdesk-v1"]) == 2
    assert "do not serve domain 'retail'" in capsys.readouterr().err


def test_policies_list(capsys):
    assert main(["policies", "list"]) == 0
    out = capsys.readouterr().out
    assert "agent-v2" in out and "baseline=agent-v1" in out


def test_a_small_run_over_two_seeds_is_sized_from_the_command_line(tmp_path, monkeypatch, capsys):
    from sim_pipeline import warehouse

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.chdir(tmp_path)  # the model cache goes to data/cache under the working directory
    base = tmp_path / "warehouse"
    code = main(["run", "--domain", "retail", "--versions", "agent-v1,agent-v2", "--seeds", "0,1", "--situations",
                 "8", "--samples", "2", "--heldout-samples", "2", "--warehouse", str(base), "--allow-failed-checks"])
    out = capsys.readouterr().out
    assert code == 0 and out.count("Materializing domain 'retail'") == 2
    for seed in ("0", "1"):
        for version in ("agent-v1", "agent-v2"):
            rows = warehouse.read_table(warehouse.partition_path(base, "retail", "rollouts", policy_version=version,
                                                                 seed=seed))
            planned = warehouse.read_table(warehouse.partition_path(base, "retail", "situations", seed=seed))
            # The plan's first 8 situations (the search may write its own beside them, within its budget).
            assert len(set(rows["situation_id"]) & set(planned["situation_id"])) <= 8
            assert rows["sample_index"].max() <= 1
    import dagster as dg

    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:  # the runs, as the UI lists them
        jobs = {run.job_name for run in instance.get_runs()}
    assert jobs == {"retail_axes_job", "retail_seed_job", "retail_policy_job", "retail_delta_job"}
    # The same 8 situations for both versions: the delta stays paired.
    first, second = (warehouse.read_table(warehouse.partition_path(base, "retail", "rollouts", policy_version=v,
                                                                   seed="0")) for v in ("agent-v1", "agent-v2"))
    assert set(first["situation_id"]) == set(second["situation_id"])


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
