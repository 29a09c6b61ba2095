"""sim_pipeline: turn a tool-using LLM agent into evals and training data."""

__version__ = "0.1.0"
