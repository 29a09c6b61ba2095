"""WorldOptions are validated at construction; defaults come from defaults.py."""

import pytest

from sim_pipeline import defaults
from sim_pipeline.errors import WorldError
from sim_pipeline.world.options import WorldOptions


def test_defaults_are_the_reasoned_constants() -> None:
    options = WorldOptions()
    assert (options.exists_share, options.search_hits, options.id_range) == (
        defaults.WORLD_EXISTS_SHARE, defaults.WORLD_SEARCH_HITS, defaults.WORLD_ID_RANGE)
    assert options.fault_modes == defaults.WORLD_FAULT_MODES and options.fault_rate == defaults.WORLD_FAULT_RATE


@pytest.mark.parametrize("changes, field", [
    ({"exists_share": 1.5}, "exists_share"), ({"search_hits": (3, 1)}, "search_hits"),
    ({"id_range": (5, 5)}, "id_range"), ({"date_range": ("2026-01-01", "2022-01-01")}, "date_range"),
    ({"date_range": ("soon", "later")}, "date_range"), ({"first_names": ()}, "first_names"),
    ({"fault_modes": ("meteor",)}, "fault_modes"), ({"transient_faults": ("partial_write",),
                                                     "fault_modes": ("timeout",)}, "transient_faults"),
    ({"fault_rate": -0.1}, "fault_rate"), ({"records_per_entity": 0}, "records_per_entity"),
])
def test_bad_dials_name_the_field(changes: dict, field: str) -> None:
    with pytest.raises(WorldError, match=f"WorldOptions.{field}"):
        WorldOptions(**changes)
