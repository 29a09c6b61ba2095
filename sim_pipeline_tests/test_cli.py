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
