"""The policy registry refuses bad slugs and bad entries with a message naming the field and the fix."""

import re

import pytest
import yaml

from sim_pipeline.definitions import domain_names
from sim_pipeline.errors import RegistryError
from sim_pipeline.registry import load_models, load_registry, validate_slug, versions_for, write_with_versions


def write(tmp_path, policies, defaults=None):
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump({"defaults": defaults or {}, "policies": policies}))
    return path


def test_shipped_registry_loads_with_baselines_in_one_domain():
    registry = load_registry()
    assert registry["agent-v2"].baseline == "agent-v1"
    assert [v.slug for v in versions_for(registry, "retail")] == ["agent-v1", "agent-v2"]


@pytest.mark.parametrize("slug", ["v 1", "v1/../x", "", "v|1", "ü"])
def test_bad_slug_is_refused(tmp_path, slug):
    with pytest.raises(RegistryError, match="not a valid slug. Fix: use only letters, digits"):
        load_registry(write(tmp_path, {slug: {"domain": "retail", "model": "sim/agent-v1"}}))


def test_slug_pattern_accepts_dots_dashes_underscores():
    assert validate_slug("agent-v1.2_rc") == "agent-v1.2_rc"


@pytest.mark.parametrize("entry, message", [
    ({"domain": "retail"}, "field 'model' is missing"),
    ({"domain": "retail", "model": "sim/agent-v1", "colour": "red"}, r"unknown field\(s\) \['colour'\]"),
    ({"domain": "retail", "model": "sim/agent-v1", "sampling": {"temperature": -1}}, "out of range"),
    ({"domain": "retail", "model": "sim/agent-v1", "sampling": {"temp": 1}}, r"unknown field\(s\) \['temp'\]"),
    ({"domain": "retail", "model": "sim/agent-v1", "baseline": "ghost"}, "'ghost' is not registered"),
    ({"domain": "retail", "model": "sim/agent-v1", "must_not_regress": "pass@1"}, "expected a list"),
])
def test_bad_entries_name_the_field(tmp_path, entry, message):
    with pytest.raises(RegistryError, match=message):
        load_registry(write(tmp_path, {"v2": entry}))


def test_baseline_from_another_domain_is_refused(tmp_path):
    path = write(tmp_path, {"h1": {"domain": "it_helpdesk", "model": "sim/agent-v1"},
                            "r2": {"domain": "retail", "model": "sim/agent-v2", "baseline": "h1"}})
    with pytest.raises(RegistryError, match="serves domain 'it_helpdesk', not 'retail'"):
        load_registry(path)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(RegistryError, match="file not found"):
        load_registry(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("policies: [unclosed")
    with pytest.raises(RegistryError, match="not valid YAML"):
        load_registry(bad)


# -- definitions that used to load silently wrong (issue 17, item 1) -----------------------------------
SHIPPED_TEXT = """\
defaults:
  judge_model: sim/judge
policies:
  agent-v1:
    domain: retail
    model: sim/agent-v1
  agent-v2:
    domain: retail
    model: sim/agent-v2
    baseline: agent-v1
"""


def write_text(tmp_path, text):
    path = tmp_path / "policies.yaml"
    path.write_text(text)
    return path


def test_the_shipped_text_loads(tmp_path):
    assert list(load_registry(write_text(tmp_path, SHIPPED_TEXT))) == ["agent-v1", "agent-v2"]


@pytest.mark.parametrize(("pasted", "message"), [
    # a pasted agent-v2 block: YAML would keep the second, swapping model, baseline and judge without a word
    ("  agent-v2:\n    domain: retail\n    model: sim/agent-v1\n    judge_model: sim/judge-lenient\n",
     r"line 11: key 'policies/agent-v2' appears twice \(first at line 7\)"),
    ("    model: sim/agent-v1\n", r"line 11: key 'policies/agent-v2/model' appears twice \(first at line 9\)"),
])
def test_a_key_written_twice_names_file_line_and_fix(tmp_path, pasted, message):
    path = write_text(tmp_path, SHIPPED_TEXT + pasted)
    with pytest.raises(RegistryError, match=rf"{path}: {message}.*silently drop the first\. Fix: keep one"):
        load_registry(path)


def test_a_models_entry_written_twice_is_refused(tmp_path):
    text = "models:\n  local:\n    model: openai/a\n  local:\n    model: openai/b\n" + SHIPPED_TEXT
    with pytest.raises(RegistryError, match=r"line 4: key 'models/local' appears twice \(first at line 2\)"):
        load_models(write_text(tmp_path, text))


def test_a_version_that_is_its_own_baseline_is_refused(tmp_path):
    path = write(tmp_path, {"agent-v1": {"domain": "retail", "model": "sim/agent-v1", "baseline": "agent-v1"}})
    with pytest.raises(RegistryError, match=r"line \d+: policies/agent-v1/baseline: 'agent-v1' is its own baseline.*"
                                            r"can never fail\. Fix: name the version it replaces"):
        load_registry(path)


def test_a_baseline_cycle_is_refused(tmp_path):
    path = write(tmp_path, {"a": {"domain": "retail", "model": "sim/agent-v1", "baseline": "c"},
                            "b": {"domain": "retail", "model": "sim/agent-v1", "baseline": "a"},
                            "c": {"domain": "retail", "model": "sim/agent-v2", "baseline": "b"}})
    with pytest.raises(RegistryError, match=r"policies/a/baseline: the baselines form a cycle \(a -> c -> b -> a\).*"
                                            r"Fix: give the oldest version of the chain no baseline"):
        load_registry(path)


@pytest.mark.parametrize(("domain", "message"), [
    ("../../etc", r"'\.\./\.\./etc' is not a domain name .*never a path\)\. Fix: use one of \["),
    ("Retail", r"'Retail' is not a domain name"),
    ("/tmp", r"'/tmp' is not a domain name"),
    ("ghost", r"no domain pack 'ghost' \(.*ghost/domain\.yaml does not exist\)\. Fix: use one of "
              + re.escape(str(domain_names()))),
])
def test_an_unknown_or_path_like_domain_is_refused(tmp_path, domain, message):
    path = write(tmp_path, {"v1": {"domain": domain, "model": "sim/agent-v1"}})
    with pytest.raises(RegistryError, match=r"policies/v1/domain: " + message):
        load_registry(path)


def test_a_folder_without_domain_yaml_is_no_domain(tmp_path, monkeypatch):
    (tmp_path / "packs" / "half").mkdir(parents=True)  # a folder, but no pack
    monkeypatch.setattr("sim_pipeline.domain.DOMAINS_DIR", tmp_path / "packs")
    with pytest.raises(RegistryError, match="no domain pack 'half'"):
        load_registry(write(tmp_path, {"v1": {"domain": "half", "model": "sim/agent-v1"}}))


@pytest.mark.parametrize(("entry", "field"), [
    ({"model": "sim/agent-v9"}, "model"), ({"judge_model": "sim/judge-typo"}, "judge_model"),
    ({"user_model": "sim/usr"}, "user_model"),
])
def test_an_unknown_embedded_model_is_refused_at_load(tmp_path, entry, field):
    path = write(tmp_path, {"v1": {"domain": "retail", "model": "sim/agent-v1", **entry}})
    with pytest.raises(RegistryError, match=rf"policies/v1/{field}: '{entry[field]}' is no embedded model, so every "
                                            r"call would fail after the seed steps ran\. Fix: use one of "
                                            r"\['sim/agent-offgrid', 'sim/agent-v1'"):
        load_registry(path)


def test_an_unknown_embedded_model_through_models_or_defaults_is_refused(tmp_path):
    entry = {"v1": {"domain": "retail", "model": "local", "judge_model": "strict"}}
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump({"models": {"local": "openai/qwen", "strict": {"model": "sim/judgee"}},
                                    "policies": entry}))
    for load in (load_models, load_registry):
        with pytest.raises(RegistryError, match=r"line 4: models/strict/model: 'sim/judgee' is no embedded model"):
            load(path)
    with pytest.raises(RegistryError, match=r"policies/v1/judge_model: 'sim/jduge' is no embedded model"):
        load_registry(write(tmp_path, {"v1": {"domain": "retail", "model": "sim/agent-v1"}},
                            defaults={"judge_model": "sim/jduge"}))


def test_embedded_models_that_exist_load(tmp_path):
    path = write(tmp_path, {"v1": {"domain": "retail", "model": "sim/latency-50", "judge_model": "sim/judge-noisy",
                                   "user_model": "sim/user"}})
    assert load_registry(path)["v1"].model == "sim/latency-50"


@pytest.mark.parametrize(("entry", "message"), [
    ({"sampling": {"temperature": 10 ** 400}}, r"sampling/temperature: 1000.* is not a finite number"),
    ({"sampling": {"max_tokens": 1.5}}, r"sampling/max_tokens: 1\.5 is not a whole number"),
    ({"sampling": {"top_p": True}}, r"sampling/top_p: True is not a finite number"),
    ({"judge_model": ["sim/judge"]}, r"judge_model: \['sim/judge'\] is not a model name"),
    ({"system_prompt": 3}, r"system_prompt: 3 is not text"),
    ({"judge_trust_opt_out": "no"}, r"judge_trust_opt_out: 'no' is not true or false"),
])
def test_values_of_the_wrong_type_are_refused_not_coerced(tmp_path, entry, message):
    with pytest.raises(RegistryError, match=message):
        load_registry(write(tmp_path, {"v1": {"domain": "retail", "model": "sim/agent-v1", **entry}}))


@pytest.mark.parametrize(("text", "message"), [
    ("polices:\n  v1: {domain: retail, model: sim/agent-v1}\n", r"unknown field\(s\) \['polices'\]"),
    ("defaults: {judge: sim/judge}\n" + SHIPPED_TEXT.split("\n", 2)[2], r"defaults: unknown field\(s\) \['judge'\]"),
    ("policies:\n  v1: {domain: retail, model: sim/agent-v1, system_prompt: &a [*a]}\n",
     "is an alias of 'policies/v1/system_prompt', which contains it"),
    ("policies:\n  on: {domain: retail, model: sim/agent-v1}\n", r"key 'on' under 'policies' is not text.*quote it"),
    ("policies:\n  v1: {domain: retail, model: sim/agent-v1, system_prompt: 2024-05-01}\n", None),
])
def test_yaml_that_would_be_read_wrong_is_refused(tmp_path, text, message):
    path = write_text(tmp_path, text)
    if message is None:  # an unquoted date stays the text it was written as
        assert load_registry(path)["v1"].system_prompt == "2024-05-01"
        return
    with pytest.raises(RegistryError, match=message):
        load_registry(path)


def test_a_registry_that_is_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "policies.yaml"
    path.write_bytes(SHIPPED_TEXT.encode().replace(b"sim/agent-v2", b"sim/agent-\xe9"))
    with pytest.raises(RegistryError, match=r"line 9: byte 0xe9 is not UTF-8 text\. Fix: save the file as UTF-8"):
        load_registry(path)


@pytest.mark.parametrize(("field", "value"), [("timeout_s", "1" + "0" * 400), ("timeout_s", ".inf"),
                                              ("max_concurrency", ".inf"), ("max_concurrency", "2.5")])
def test_a_models_entry_number_out_of_range_names_its_field(tmp_path, field, value):
    path = tmp_path / "policies.yaml"
    path.write_text(f"models:\n  local:\n    model: openai/x\n    {field}: {value}\n"
                    "policies:\n  a:\n    domain: retail\n    model: local\n")
    with pytest.raises(RegistryError, match=f"models/local/{field}: .*Fix: e.g."):
        load_registry(path)


def test_a_trainer_entry_is_read_with_its_methods_and_timeout(tmp_path):
    entry = {"domain": "retail", "model": "openai/my-agent",
             "trainer": {"command": ["python", "train.py", "--lr", "1e-5"], "methods": ["sft", "dpo"], "timeout_s": 60}}
    trainer = load_registry(write(tmp_path, {"v1": entry}))["v1"].trainer
    assert trainer.command == ("python", "train.py", "--lr", "1e-5") and trainer.methods == ("sft", "dpo")
    assert trainer.timeout_s == 60.0
    assert load_registry(write(tmp_path, {"v1": {**entry, "trainer": {"command": "train-it"}}}))["v1"].trainer.methods \
        == ("sft",)  # one word is a command of one word; SFT by default
    assert load_registry()["agent-v1"].trainer is None


@pytest.mark.parametrize("trainer, message", [
    ({"command": []}, r"trainer/command: \[\] is not a command"),
    ({"command": ["python", 3]}, "trainer/command"),
    ({"command": ["t"], "methods": ["ppo"]}, r"trainer/methods: \['ppo'\]. Fix: a list of distinct methods out of"),
    ({"command": ["t"], "methods": ["sft", "sft"]}, "trainer/methods"),
    ({"command": ["t"], "timeout_s": 0}, "trainer/timeout_s: 0 is not a positive number"),
    ({"command": ["t"], "timeout_s": True}, "trainer/timeout_s"),
    ({"command": ["t"], "gpus": 8}, r"trainer: unknown field\(s\) \['gpus'\]"),
    ("python train.py", "trainer: expected a mapping"),
])
def test_a_bad_trainer_entry_names_the_field_and_the_fix(tmp_path, trainer, message):
    with pytest.raises(RegistryError, match=message):
        load_registry(write(tmp_path, {"v1": {"domain": "retail", "model": "openai/my-agent", "trainer": trainer}}))


def test_a_trained_model_whose_profile_file_is_missing_names_the_file_and_the_step(tmp_path, monkeypatch):
    monkeypatch.setenv("SIM_PIPELINE_TRAINED_DIR", str(tmp_path / "trained"))
    with pytest.raises(RegistryError, match=r"trained profile whose file .*trained/0123456789ab.json does not exist"
                                            r".*Fix: run the trained_policy step"):
        load_registry(write(tmp_path, {"v1": {"domain": "retail", "model": "sim/trained-0123456789ab"}}))


def test_a_reply_classifier_is_a_model_a_version_or_the_defaults_name(tmp_path):
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump({
        "models": {"reader": {"model": "openai/gpt-4o-mini"}},
        "defaults": {"reply_classifier": "reader"},
        "policies": {"v1": {"domain": "retail", "model": "sim/agent-v1"},
                     "v2": {"domain": "retail", "model": "sim/agent-v2", "reply_classifier": "openai/gpt-4.1-nano"},
                     "v3": {"domain": "retail", "model": "sim/agent-v2", "reply_classifier": ""}}}))
    registry = load_registry(path)
    assert [registry[v].reply_classifier for v in ("v1", "v2", "v3")] == ["reader", "openai/gpt-4.1-nano", ""]
    assert load_registry()["agent-v1"].reply_classifier == ""  # the shipped versions read replies with the rules
    with pytest.raises(RegistryError, match=r"policies/v1/reply_classifier: 'sim/reader' is no embedded model"):
        load_registry(write(tmp_path, {"v1": {"domain": "retail", "model": "sim/agent-v1",
                                              "reply_classifier": "sim/reader"}}))
    with pytest.raises(RegistryError, match=r"reply_classifier: 3 is not text"):
        load_registry(write(tmp_path, {"v1": {"domain": "retail", "model": "sim/agent-v1", "reply_classifier": 3}}))


# -- slugs that are one name (issue 29, item 5) ----------------------------------------------------------
@pytest.mark.parametrize(("first", "second"), [("Agent-V1", "agent-v1"), ("agent-v1", "agent_v1"),
                                               ("AGENT-V1", "agent_v1")])  # written sorted
def test_two_slugs_that_are_one_once_case_and_separators_are_set_aside_are_refused(tmp_path, first, second):
    path = write(tmp_path, {first: {"domain": "retail", "model": "sim/agent-v1"},
                            second: {"domain": "retail", "model": "sim/agent-v2"}})
    with pytest.raises(RegistryError, match=rf"{re.escape(str(path))}: line \d+: policies/{second}: version "
                                            rf"'{second}' and version '{first}' \(line \d+\) are one slug once case "
                                            r"and '-'/'_' are set aside.*Fix: rename one of the two in "
                                            + re.escape(str(path))):
        load_registry(path)


def test_slugs_that_differ_by_a_dot_are_two_versions(tmp_path):
    path = write(tmp_path, {"agent-v1.1": {"domain": "retail", "model": "sim/agent-v1"},
                            "agent-v11": {"domain": "retail", "model": "sim/agent-v2"}})
    assert set(load_registry(path)) == {"agent-v1.1", "agent-v11"}


def test_a_loop_version_that_folds_onto_a_registered_one_is_refused_and_nothing_is_written(tmp_path):
    source = write(tmp_path, {"agent-v1": {"domain": "retail", "model": "sim/agent-v1"}})
    out = tmp_path / "out" / "policies.yaml"
    with pytest.raises(RegistryError, match=rf"{re.escape(str(source))}: the new version 'Agent_V1' and version "
                                            r"'agent-v1' are one slug .*Fix: rename 'agent-v1' in "):
        write_with_versions(source, out, {"Agent_V1": {"domain": "retail", "model": "sim/agent-v2"}})
    assert not out.parent.exists()  # refused before anything is written


SECRET_SHAPED = "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t"  # a key's look
SECRET_VALUE = "gw-Live-7f3c9a51e2d84b6c0a1f"  # known as a secret only as the value of a variable an entry names


@pytest.mark.parametrize(("version", "message"), [
    ({"system_prompt": f"You are the desk. Use key {SECRET_VALUE} for the CRM."},
     "policies/gw-v1/system_prompt: the prompt holds the value of the secret environment variable MY_GATEWAY_KEY"),
    ({"system_prompt": f"Your key is {SECRET_SHAPED}."}, "system_prompt: the prompt holds what looks like a key"),
    ({"judge_model": f"openai/{SECRET_SHAPED}"}, "policies/gw-v1/judge_model: the model string holds what looks like a key"),
])
def test_a_key_in_a_version_is_refused_with_the_fix(tmp_path, monkeypatch, version, message):
    monkeypatch.setenv("MY_GATEWAY_KEY", SECRET_VALUE)
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump({"models": {"named": {"model": "openai/other", "api_key_env": "MY_GATEWAY_KEY"}},
                                    "policies": {"gw-v1": {"domain": "retail", "model": "named", **version}}}))
    with pytest.raises(RegistryError, match=message) as error:
        load_registry(path)
    assert SECRET_VALUE not in str(error.value) and SECRET_SHAPED not in str(error.value)
    assert "api_key_env" in str(error.value)
