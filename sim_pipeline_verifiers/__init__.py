"""The verifiers environment module of sim_pipeline: taskset id `sim-pipeline-verifiers` (verifiers finds a taskset by
a top-level module name). The classes live in `sim_pipeline.rollout.verifiers_env`; docs/training.md has the recipe."""

from sim_pipeline.rollout.verifiers_env import LocalChatHarness, SandboxTaskset

__all__ = ["LocalChatHarness", "SandboxTaskset"]
