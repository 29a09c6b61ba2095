"""sim_pipeline: turn a tool-using LLM agent into evals and training data."""

import os

__version__ = "0.1.0"

# Arrow's default allocator (mimalloc) keeps per-thread segments committed: in a `sim-pipeline run`, whose tables are
# small and whose Parquet reads and pandas string columns (pandas 3 stores them in Arrow) allocate from many threads,
# it held ~50 MB of a ~390 MB peak RSS. The system allocator returns what is freed. Read by pyarrow when it is first
# imported (nothing here imports it); a value the user set is kept. The data, and so every file's bytes, is the same.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
