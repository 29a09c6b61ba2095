"""The training methods and the cut each learns from: the registry's `trainer:`, step 09 and the CLI say the same."""

# SFT from the best passing rollouts, DPO from preference pairs, GRPO from whole groups of samples.
CUT_OF_METHOD = {"sft": "sft", "dpo": "preference_pairs", "grpo": "grpo_groups"}
TRAIN_METHODS = tuple(CUT_OF_METHOD)
