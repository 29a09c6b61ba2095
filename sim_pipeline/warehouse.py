"""The Parquet warehouse: hive-style paths, atomic writes, nested columns as Arrow types.

`<base>/<domain>/<asset>/policy_version=<v>/seed=<s>.parquet` (one dimension: `<domain>/<asset>/seed=<s>.parquet`,
none: `<domain>/<asset>.parquet`): readable by pyarrow.dataset, DuckDB and Spark. Base paths may be any fsspec URL
(`s3://bucket/warehouse`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator
from collections import OrderedDict
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from upath import UPath

from sim_pipeline import defaults
from sim_pipeline.errors import WarehouseError


def partition_path(base: str | os.PathLike[str], domain: str, asset: str, *, policy_version: str | None = None,
                   seed: str | int | None = None) -> UPath:
    """Where one partition of an asset lives."""
    root = UPath(base) / domain / asset
    if policy_version is not None and seed is not None:
        return root / f"policy_version={policy_version}" / f"seed={seed}.parquet"
    if policy_version is not None:
        return root / f"policy_version={policy_version}.parquet"
    if seed is not None:
        return root / f"seed={seed}.parquet"
    return UPath(base) / domain / f"{asset}.parquet"


def to_arrow(data: pd.DataFrame | pa.Table, schema: pa.Schema | None = None) -> pa.Table:
    """An Arrow table from a DataFrame (index dropped) or a table, cast to the schema when one is given."""
    table = data if isinstance(data, pa.Table) else pa.Table.from_pandas(data, preserve_index=False, schema=schema)
    return table.replace_schema_metadata(None)  # no pandas metadata: same data, same bytes across pandas versions


def checksum_path(path: UPath) -> UPath:
    """The sidecar holding a file's sha256: hidden (a leading '.'), so pyarrow.dataset, DuckDB and Spark skip it."""
    return path.with_name(f".{path.name}.sha256")


def _put(path: UPath, data: bytes) -> None:
    """Write bytes atomically: readers see the old content or the new, never a partial file."""
    if path.protocol in ("", "file", "local"):
        target = Path(path.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex}")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, target)  # atomic on one file system
        finally:
            tmp.unlink(missing_ok=True)
    else:
        path.write_bytes(data)  # one PUT: object stores never show a partial object


# The Parquet footer key holding a file's lineage: the content sha256 of each input it was computed from, by the
# input's path under the warehouse base (`relative_path`); null for an input partition that was absent. In the file
# itself, so it is written (and copied) with the rows, never apart from them.
LINEAGE_KEY = b"sim_pipeline.lineage"

Lineage = dict[str, str | None]


def write_table(path: UPath, data: pd.DataFrame | pa.Table, schema: pa.Schema | None = None, *,
                checksum_file: bool = True, lineage: Lineage | None = None) -> int:
    """Write atomically, with Parquet page checksums, the inputs' hashes in the footer when `lineage` is given, and
    (for the warehouse's own files) the file's sha256 beside it. Returns the row count."""
    table = to_arrow(data, schema)
    if lineage is not None:  # sorted, compact: the same inputs give the same bytes
        table = table.replace_schema_metadata({LINEAGE_KEY: json.dumps(dict(sorted(lineage.items())),
                                                                       separators=(",", ":")).encode()})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, write_page_checksum=True)
    content = sink.getvalue().to_pybytes()
    # The digest is written after the file: a crash between the two leaves a mismatch, which reads refuse (and
    # rematerializing fixes), never a silently wrong table.
    _put(path, content)
    if checksum_file:
        _put(checksum_path(path), hashlib.sha256(content).hexdigest().encode())
    return table.num_rows


def recorded_sha256(path: UPath) -> str | None:
    """The sha256 written beside a file, or None for a file written without one (by an older release or a tool)."""
    sidecar = checksum_path(path)
    return sidecar.read_text().strip() if sidecar.exists() else None


def recorded_lineage(content: bytes) -> Lineage | None:
    """The lineage a warehouse file's bytes record in their footer, or None for a file written without one (by an
    older release, or by hand)."""
    metadata = pq.read_schema(pa.BufferReader(content)).metadata or {}
    return json.loads(metadata[LINEAGE_KEY]) if LINEAGE_KEY in metadata else None


def path_parts(path: UPath) -> tuple[str, str, dict[str, str]]:
    """(domain, asset, {dimension: value}) of a warehouse path (`<domain>/<asset>/[k=v/]...parquet`)."""
    parts = dict(p.removesuffix(".parquet").split("=", 1) for p in path.parts if "=" in p)
    folders = [p for p in path.parts[:-1] if "=" not in p]
    domain, asset = (folders[-2], folders[-1]) if parts else (folders[-1], path.stem)
    return domain, asset, parts


def relative_path(path: UPath | str) -> str:
    """A warehouse file's path under its base (`<domain>/<asset>/[k=v/]...parquet`): how a lineage names an input,
    the same in a copy of the warehouse."""
    domain, asset, parts = path_parts(UPath(path))
    if not parts:
        return f"{domain}/{asset}.parquet"
    *folders, name = [f"{k}={v}" for k, v in parts.items()]
    return "/".join([domain, asset, *folders, f"{name}.parquet"])


def rematerialize_hint(path: UPath) -> str:
    """How to rebuild the partition a warehouse path holds (`<domain>/<asset>/[k=v/]...parquet`)."""
    domain, asset, parts = path_parts(path)
    version, seed = parts.get("policy_version"), parts.get("seed")
    command = f"sim-pipeline run --domain {domain}" + (f" --versions {version}" if version else "") + \
        (f" --seeds {seed}" if seed else "")
    which = ", ".join(f"{k}={v}" for k, v in parts.items())
    return f"Fix: rematerialize {domain}/{asset}" + (f" for {which}" if which else "") + \
        f" (`{command}`, or Materialize in the UI)"


class RecordedHash(NamedTuple):
    """A file's sha256 as a record outside the warehouse holds it (the Dagster instance's materialization)."""

    sha256: str
    source: str  # who recorded it, for messages: "the Dagster instance at ... (run 1a2b3c4d, field content_sha256)"


HashLookup = Callable[[UPath], RecordedHash | None]


@dataclass(frozen=True)
class Verification:
    """How a read checks a file whose sidecar is missing: against a recorded hash (`lookup`), or, only where the
    user asked (`allow_unverified`), not at all, saying so through `warn`."""

    lookup: HashLookup | None = None
    allow_unverified: bool = False
    warn: Callable[[str], None] | None = None
    consulted: str = ""  # the record `lookup` reads, for messages: "the Dagster instance at /srv/dagster_home"


# The reads' verification for this thread of work. The default has no record to consult: a file without its sidecar
# is refused. The defs layer and the CLI, which hold a Dagster instance, set a lookup (`verifying`); the engine never
# imports dagster.
_VERIFICATION: ContextVar[Verification | None] = ContextVar("sim_pipeline_warehouse_verification", default=None)


@contextmanager
def verifying(lookup: HashLookup | None = None, *, allow_unverified: bool = False,
              warn: Callable[[str], None] | None = None, consulted: str = "") -> Iterator[Verification]:
    """Within the block, reads check a file without its sidecar against `lookup` (or, when allowed, read it
    unverified with a warning)."""
    verification = Verification(lookup, allow_unverified, warn, consulted)
    token = _VERIFICATION.set(verification)
    try:
        yield verification
    finally:
        _VERIFICATION.reset(token)


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


UNVERIFIED_FLAG = "--allow-unverified"  # the command-line flag that reads a file no record vouches for


def unverified_warning(path: UPath) -> str:
    """The loud line a read without any check prints."""
    return (f"WARNING: UNVERIFIED READ of {path}: its sidecar {checksum_path(path).name} is missing and no "
            f"content_sha256 was recorded for it; {UNVERIFIED_FLAG} was given, so it is read as is and anything "
            "printed from it may have been changed since it was written")


def verify_content(path: UPath, content: bytes, *, expected: RecordedHash | None = None,
                   verification: Verification | None = None) -> None:
    """Check a file's bytes: against its sidecar when it has one; else against `expected` or the lookup's recorded
    content_sha256; with neither, refuse it (or, where the user allowed it, warn). A mismatch is an error naming the
    file, the record it failed and the fix."""
    _verify(path, hashlib.sha256(content).hexdigest(), expected=expected, verification=verification)


def _verify(path: UPath, digest: str, *, expected: RecordedHash | None = None,
            verification: Verification | None = None) -> None:
    """`verify_content` for bytes whose sha256 is `digest`."""
    sidecar = recorded_sha256(path)
    if sidecar is not None:
        if digest != sidecar:
            raise WarehouseError(f"{path}: its content does not match the sha256 recorded when it was written "
                                 f"({checksum_path(path).name}): the file is corrupt or was changed since. "
                                 f"{rematerialize_hint(path)}")
        return
    verification = verification or _VERIFICATION.get() or Verification()
    recorded = expected or (verification.lookup(path) if verification.lookup else None)
    if recorded is not None:
        if digest != recorded.sha256:
            raise WarehouseError(
                f"{path}: its content (sha256 {digest[:12]}...) does not match content_sha256 {recorded.sha256[:12]}"
                f"... recorded by {recorded.source} (its sidecar {checksum_path(path).name} is missing): the file "
                f"is corrupt or was changed since. {rematerialize_hint(path)}")
        return
    if verification.allow_unverified:
        (verification.warn or _to_stderr)(unverified_warning(path))
        return
    record = (f"{verification.consulted or 'the record consulted'} holds no content_sha256 for it"
              if verification.lookup else "this reader has no record of its content_sha256 to check it against")
    raise WarehouseError(
        f"{path}: cannot be verified: its sidecar {checksum_path(path).name} is missing (copies made with "
        f"`cp *.parquet` or `rsync --exclude='.*'` leave it behind) and {record}. Fix: restore "
        f"{checksum_path(path).name} beside it (copy hidden files too: `cp -a`, `rsync -a`), or "
        f"{rematerialize_hint(path).removeprefix('Fix: ')}, or read it unverified with {UNVERIFIED_FLAG} "
        "(report, export)")


def read_bytes_verified(path: UPath, *, expected: RecordedHash | None = None) -> bytes:
    """A warehouse file's bytes, checked against its sidecar or, without one, the recorded content_sha256
    (`verify_content`)."""
    return _read_checked(path, expected)[0]


def _read_checked(path: UPath, expected: RecordedHash | None) -> tuple[bytes, str]:
    """A warehouse file's bytes, verified as `read_bytes_verified` does, and their sha256 (hashed once)."""
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise WarehouseError(f"{path}: cannot be read ({exc}). {rematerialize_hint(path)}") from None
    digest = hashlib.sha256(content).hexdigest()
    _verify(path, digest, expected=expected)
    return content, digest


def _nested(field_type: pa.DataType) -> bool:
    return pa.types.is_list(field_type) or pa.types.is_struct(field_type) or pa.types.is_map(field_type) or \
        pa.types.is_large_list(field_type)


def read_table(path: UPath, *, expected: RecordedHash | None = None) -> pd.DataFrame:
    """Read one partition, verified (its sha256, then every page's checksum); nested columns come back as Python
    lists and dicts, not numpy arrays. A corrupt or truncated file is an error naming it and the fix."""
    return read_verified(path, expected=expected)[0]


def read_verified(path: UPath, *, expected: RecordedHash | None = None) -> tuple[pd.DataFrame, str]:
    """One partition as `read_table` reads it, and the sha256 of the bytes it was read from (what a lineage
    records)."""
    content, digest = _read_checked(path, expected)
    try:  # a damaged file may fail in the footer, a page, or only when a name or value is decoded
        table = _PARSED.get(digest)
        if table is None:
            table = pq.read_table(pa.BufferReader(content), page_checksum_verification=True)
            frame = table_frame(table)  # decoded in full before it is kept: only a readable file's table is
            _PARSED.put(digest, table)
            return frame, digest
        return table_frame(table), digest
    except (pa.ArrowException, OSError, ValueError) as exc:
        detail = str(exc).replace("'<Buffer>'", "it").replace("<Buffer>", "it")  # we read it from memory
        raise WarehouseError(f"{path}: not a readable Parquet file ({detail}). {rematerialize_hint(path)}") from None


class _ParsedTables:
    """Parsed (and page-checksum verified) Arrow tables by the sha256 of the file bytes they came from, least recently
    used dropped past a size. Bytes with the same sha256 parse to the same table, so a read of a file whose content
    was parsed before skips the parse; every read still hashes and verifies the bytes it read, and builds a fresh
    DataFrame (its lists and dicts are new objects, which a caller may change)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.size = limit, 0
        self.tables: OrderedDict[str, pa.Table] = OrderedDict()
        self.lock = threading.Lock()  # a process may run steps in threads (the backfill daemon, a notebook)

    def get(self, digest: str) -> pa.Table | None:
        """The table parsed from bytes of this sha256, if still kept."""
        with self.lock:
            table = self.tables.get(digest)
            if table is not None:
                self.tables.move_to_end(digest)
            return table

    def put(self, digest: str, table: pa.Table) -> None:
        """Keep a table parsed from bytes of this sha256, dropping the least recently used past the limit."""
        if table.nbytes > self.limit:
            return
        with self.lock:
            if digest in self.tables:
                return
            self.tables[digest] = table
            self.size += table.nbytes
            while self.size > self.limit:
                self.size -= self.tables.popitem(last=False)[1].nbytes


_PARSED = _ParsedTables(defaults.WAREHOUSE_PARSED_CACHE_BYTES)


def table_frame(table: pa.Table) -> pd.DataFrame:
    """A DataFrame whose nested columns are Python lists and dicts, not numpy arrays."""
    nested = [i for i, field in enumerate(table.schema) if _nested(field.type)]
    if not nested:
        return table.to_pandas()
    # Only the flat columns go through to_pandas: it would turn each nested one into numpy arrays, thrown away here.
    flat = table.drop_columns([table.column_names[i] for i in nested])
    frame = flat.to_pandas() if flat.num_columns else pd.DataFrame(index=pd.RangeIndex(table.num_rows))
    for i in nested:  # in increasing position, so each lands where it is in the table
        frame.insert(i, table.column_names[i], pd.Series(table.column(i).to_pylist(), index=frame.index, dtype=object))
    return frame


# id(frame) -> (a weak reference to the frame, the sha256 of the bytes it was read from): `read_digest`'s record.
_READ_FROM: dict[int, tuple[weakref.ref, tuple[str | None, ...]]] = {}


def _remember(frame: pd.DataFrame, digests: tuple[str | None, ...]) -> pd.DataFrame:
    """Record which verified file contents `frame` was read from (forgotten when the frame is collected)."""
    key = id(frame)

    def forget(ref: weakref.ref) -> None:
        if key in _READ_FROM and _READ_FROM[key][0] is ref:
            del _READ_FROM[key]

    _READ_FROM[key] = (weakref.ref(frame, forget), digests)
    return frame


def read_digest(frame: pd.DataFrame) -> tuple[str | None, ...] | None:
    """The sha256 of each file `read_partitions` made this very frame from (None for an absent one), or None for any
    other frame (one built by hand, or derived from a read one: a filtered copy is not the file).

    A content key for work on the frame as read, such as the cuts' shared train pool: it holds while nobody edits the
    frame in place, which a caller keying on it must not do."""
    found = _READ_FROM.get(id(frame))
    if found is None or found[0]() is not frame:
        return None
    return found[1]


def read_partitions(paths: list[UPath], expected: dict[str, RecordedHash] | None = None, *,
                    sha256: dict[str, str] | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Concatenate the partitions that exist (each checked, with `expected[str(path)]` when its sidecar is
    missing); also return the ones that do not. `sha256`, when given, receives each read file's hash by path."""
    frames: list[pd.DataFrame] = []
    missing: list[str] = []
    digests: list[str | None] = []
    for path in paths:
        if path.exists():
            frame, digest = read_verified(path, expected=(expected or {}).get(str(path)))
            frames.append(frame)
            digests.append(digest)
            if sha256 is not None:
                sha256[str(path)] = digest
        else:
            missing.append(str(path))
            digests.append(None)
    frames = [f for f in frames if len(f)]
    combined = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return _remember(combined, tuple(digests)), missing


def jsonable(value: Any) -> Any:
    """Plain Python values (numpy scalars and arrays converted) for JSON and metadata."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value
