"""The policy registry refuses bad slugs and bad entries with a message naming the field and the fix."""

import pytest
import yaml

from sim_pipeline.errors import RegistryError
from sim_pipeline.registry import load_registry, validate_slug, versions_for


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
