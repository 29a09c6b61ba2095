"""One flipped bit in a stored partition: how often a read notices, as we write now (page checksums and a sha256
beside the file) against plain Parquet (the old writer) in the same run, on a real grades partition, and what the
checks cost per read.
"""

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from upath import UPath

from sim_pipeline import warehouse
from sim_pipeline.errors import WarehouseError

DATA = Path(__file__).parent.parent / "cut" / "data"
SOURCE = DATA / "retail_agent-v1_seed0_grades.parquet"
LARGER = DATA / "retail_agent-v1_seed0_rollouts.parquet"  # for the read cost: nested messages, 130 KB
TRIALS = 300
SEED = 0
READS = 20


def _flipped(content: bytes, rng: np.random.Generator) -> bytes:
    flipped = bytearray(content)
    flipped[int(rng.integers(len(flipped)))] ^= 1 << int(rng.integers(8))
    return bytes(flipped)


def _old_reader_noticed(content: bytes, original: pa.Table) -> tuple[bool, bool]:
    """(noticed, silently changed) for a plain Parquet read, the way the warehouse read before."""
    try:
        table = pq.read_table(pa.BufferReader(content))
        return False, not table.equals(original)
    except (pa.ArrowException, OSError, ValueError):  # ValueError: also a field name that no longer decodes
        return True, False


def figures() -> list[dict]:
    """Detection of 300 single-bit flips (checksummed vs plain), silent changes, and read cost per file."""
    table = pq.read_table(SOURCE).replace_schema_metadata(None)
    with tempfile.TemporaryDirectory() as tmp:
        path = warehouse.partition_path(tmp, "retail", "grades", policy_version="agent-v1", seed=0)
        warehouse.write_table(path, table)
        checksummed = path.read_bytes()
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        plain = sink.getvalue().to_pybytes()
        rng = np.random.default_rng(SEED)
        ours = old = silent = page_only = 0
        for _ in range(TRIALS):
            path.write_bytes(_flipped(checksummed, rng))
            try:
                warehouse.read_table(path)
            except WarehouseError:
                ours += 1
            try:  # the same flip with no sha256 beside the file: Parquet's page checksums alone
                pq.read_table(pa.BufferReader(path.read_bytes()), page_checksum_verification=True)
            except (pa.ArrowException, OSError, ValueError):
                page_only += 1
            noticed, changed = _old_reader_noticed(_flipped(plain, rng), table)
            old += noticed
            silent += changed
        warehouse.write_table(path, pq.read_table(LARGER).replace_schema_metadata(None))
        verified_times, unverified_times = [], []
        for _ in range(READS):  # interleaved, medians: the machine is shared and noisy
            start = time.perf_counter()
            warehouse.read_table(path)
            verified_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            with UPath(path).open("rb") as handle:  # the read as it was: no page checksums, no sha256
                warehouse.table_frame(pq.read_table(handle))
            unverified_times.append(time.perf_counter() - start)
        verified, unverified = statistics.median(verified_times), statistics.median(unverified_times)
    return [
        {"name": f"bitflips_detected_of_{TRIALS} (page checksums + sha256)", "value": ours, "unit": "flips",
         "baseline_name": "plain Parquet read (before)", "baseline_value": old, "ratio": ours / max(old, 1)},
        {"name": f"bitflips_detected_of_{TRIALS} (page checksums alone, no sha256 file)", "value": page_only,
         "unit": "flips"},
        {"name": f"bitflips_silently_changing_data_of_{TRIALS} (plain Parquet, before)", "value": silent,
         "unit": "flips"},
        {"name": "verified_read_ms (rollouts partition, 130 KB)", "value": 1000 * verified, "unit": "ms",
         "baseline_name": "unverified read", "baseline_value": 1000 * unverified, "ratio": verified / unverified},
    ]
