"""Fitting a new embedded agent profile to a version's training cuts (SFT, DPO, GRPO): the engine of issue 19."""
