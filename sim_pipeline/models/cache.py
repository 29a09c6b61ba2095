"""The response cache: sqlite keyed by a canonical hash of the request, so a re-run costs nothing."""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
from functools import cache
from pathlib import Path
from typing import Any

from sim_pipeline.errors import ModelCallError
from sim_pipeline.seeding import digest

LOG = logging.getLogger(__name__)
# Entries carry the sha256 of their JSON: a flipped bit or a hand edit is a logged miss, never a wrong answer.
# (The table's name changed with the checksum column: older cache files are simply not read.)
TABLE = "responses_v2"


@cache
def embedded_revision() -> str:
    """A hash of the embedded models' source: a new release of them must not be answered from an old cache."""
    folder = Path(__file__).parent
    # Their code, what they read replies with (protocol/), and the numbers they are built from (defaults.py).
    sources = sorted([*folder.glob("sim_*.py"), folder / "conversation.py", folder / "cards.py", folder / "phrasing.py",
                      *(folder.parent / "protocol").glob("*.py"), folder.parent / "defaults.py"])
    return digest([p.read_text() for p in sources])[:16]


def request_key(model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                sampling: dict[str, Any], sample_index: int, config: dict[str, Any] | None = None) -> str:
    """The cache key: model, messages, tools, sampling settings, the sample index (k samples stay distinct) and the
    model config's identity (endpoint, pass-through parameters, logprobs mode): a model behind another endpoint
    or with other parameters is another model.

    For the embedded `sim/` models it also holds their code revision; a hosted model's name is its version.
    """
    revision = embedded_revision() if model.startswith("sim/") else None
    return digest(model, revision, messages, tools or [], sampling, sample_index, config or {})


class ResponseCache:
    """A process-safe sqlite key-value store of model responses (JSON)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")  # several partitions' processes may share one cache
            # No fsync per response: with WAL a crash may lose the last few entries (re-asked next run), never
            # corrupt the file; a commit per put with fsync cost 2.3 of make run's 31 s.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (key TEXT PRIMARY KEY, value TEXT NOT NULL, "
                             "sha256 TEXT NOT NULL)")
            self._db.commit()
        except sqlite3.DatabaseError as exc:
            raise ModelCallError(f"model cache {self.path} is unreadable ({exc}). Fix: delete it (it only saves "
                                 "repeated calls) or point the gateway's cache_dir elsewhere") from None

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached response for a key, or None: an entry that fails its checksum or does not decode is a logged
        miss (and is dropped, so the fresh answer takes its place), never a crash or a wrong answer."""
        with self._lock:
            row = self._db.execute(f"SELECT value, sha256 FROM {TABLE} WHERE key = ?", (key,)).fetchone()
        if not row:
            return None
        text, checksum = row
        value = None
        if _sha256(text) == checksum:
            try:
                value = json.loads(text)
            except ValueError:
                value = None
        if isinstance(value, dict) and "message" in value:
            return value
        LOG.warning("model cache %s: entry %s failed its checksum or does not decode; asking the model again",
                    self.path, key[:16])
        with self._lock:
            self._db.execute(f"DELETE FROM {TABLE} WHERE key = ?", (key,))
            self._db.commit()
        return None

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Store a response (the first write wins: responses for one key are interchangeable)."""
        text = json.dumps(value)
        with self._lock:
            self._db.execute(f"INSERT OR IGNORE INTO {TABLE} (key, value, sha256) VALUES (?, ?, ?)",
                             (key, text, _sha256(text)))
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchone()[0])

    def close(self) -> None:
        """Close the database."""
        self._db.close()


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
