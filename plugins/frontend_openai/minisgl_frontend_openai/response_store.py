"""Stored Responses API answers: an SQLite file under the cache directory, bounded in count and
age, so ``previous_response_id`` chains survive a restart of the service."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minisgl_core.api import cache_dir

DEFAULT_MAX_RESPONSES = 10_000
DEFAULT_MAX_AGE_S = 30 * 24 * 3600.0  # OpenAI keeps stored responses 30 days

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    response TEXT NOT NULL,     -- the response object, as GET /v1/responses/{id} answers it
    input_items TEXT NOT NULL,  -- this turn's input items (GET .../input_items)
    conversation TEXT NOT NULL  -- every item of the chain so far: the next turn's prompt
);
CREATE INDEX IF NOT EXISTS responses_by_age ON responses (created_at);
"""


@dataclass(frozen=True)
class StoredResponse:
    """One stored answer: its object, the input it answered, and the whole chain's items."""

    response: dict[str, Any]
    input_items: list[dict[str, Any]]
    conversation: list[dict[str, Any]]


def default_store_dir() -> Path:
    """Where responses are stored unless the ``responses_store_dir`` option says otherwise."""
    return cache_dir() / "responses"


class ResponseStore:
    """The store; the database is opened on first use, so a server that never serves the
    Responses API never creates it. Safe to share between threads (one lock around sqlite)."""

    def __init__(self, directory: Path | None = None, *,
                 max_responses: int = DEFAULT_MAX_RESPONSES,
                 max_age_s: float = DEFAULT_MAX_AGE_S) -> None:
        if max_responses < 1 or not max_age_s > 0:
            raise ValueError("[frontends.openai] responses_store_max must be at least 1 and "
                             f"responses_store_max_age_s above 0, got {max_responses} and "
                             f"{max_age_s}")
        self.directory = directory
        self.max_responses = max_responses
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    @property
    def path(self) -> Path:
        """The database file."""
        return (self.directory or default_store_dir()) / "responses.sqlite3"

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # another service may share the cache directory: wait for its lock, never fail
            db = sqlite3.connect(self.path, timeout=10, check_same_thread=False,
                                 isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
            self._db = db
        return self._db

    def put(self, response: dict[str, Any], input_items: list[dict[str, Any]],
            conversation: list[dict[str, Any]]) -> None:
        """Store ``response`` (replacing one of the same id), then drop the oldest beyond the
        count and everything past the age limit."""
        row = (response["id"], float(response["created_at"]), _dump(response),
               _dump(input_items), _dump(conversation))
        with self._lock:
            db = self._conn()
            db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?)", row)
            db.execute("DELETE FROM responses WHERE created_at < ?",
                       (time.time() - self.max_age_s,))
            db.execute("DELETE FROM responses WHERE id NOT IN (SELECT id FROM responses "
                       "ORDER BY created_at DESC LIMIT ?)", (self.max_responses,))

    def get(self, response_id: str) -> StoredResponse | None:
        """The stored response of that id, unless unknown, deleted or expired."""
        with self._lock:
            row = self._conn().execute(
                "SELECT response, input_items, conversation FROM responses "
                "WHERE id = ? AND created_at >= ?",
                (response_id, time.time() - self.max_age_s)).fetchone()
        if row is None:
            return None
        return StoredResponse(json.loads(row[0]), json.loads(row[1]), json.loads(row[2]))

    def delete(self, response_id: str) -> bool:
        """Forget a response; False when there was none of that id."""
        with self._lock:
            cur = self._conn().execute("DELETE FROM responses WHERE id = ?", (response_id,))
        return cur.rowcount > 0

    def close(self) -> None:
        """Close the database (it reopens on next use)."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
