"""The loaders end in the project's own errors whatever they are given (issue 17, item 4): ~100 hypothesis examples
per loader, from the strategies `make bench` runs for a minute (sim_pipeline_tests/bench/bench_fuzz_loaders.py).

A mutated file may load or be refused with a SimPipelineError; any other exception fails the test (hypothesis
then shrinks the input to the smallest that still leaks).
"""

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from sim_pipeline.errors import SimPipelineError
from sim_pipeline_tests.bench.bench_fuzz_loaders import LOADERS

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_a_mutated_file_loads_or_is_refused_with_a_project_error(loader: str) -> None:
    strategy, load = LOADERS[loader]

    @SETTINGS
    @given(strategy)
    def check(example: Any) -> None:
        try:
            load(example)
        except SimPipelineError:
            pass  # refused with a message naming the file: what a bad file should get

    check()
