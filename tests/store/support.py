"""What the store tests share besides their fixtures: memories, keys, backends, processes."""

from __future__ import annotations

import base64
import os
import sqlite3
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from memorybook.store import MAX_MEMORIES_PER_CUSTOMER, MemoryStore
from tests.helpers import REPO_ROOT

PG_URL_ENV = "MEMORYBOOK_TEST_PG_URL"
SUBPROCESS_TIMEOUT_SECONDS = 120


def new_key() -> str:
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


def make_memory(customer_id: str, ticket_id: str, text: str = "How do I add an admin?") -> dict:
    """A memory shaped like the cookbook's, with deliberately unsorted keys."""
    return {
        "request": {
            "customer": {"id": customer_id, "company": "Acme Corp"},
            "ticket": {
                "id": ticket_id,
                "received_on": "2026-08-04",
                "subject": "Adding an admin",
                "messages": [{"from": "customer", "text": text}],
            },
        },
        "jev_answered": {
            "Which edition?": "Self-hosted, Windows Server 2022",
            "Accents and symbols?": 'Café — naïve ☕ 100% "quoted" \\ back',
            "A number": 3.14159,
        },
    }


@dataclass
class Backend:
    """One fresh, empty store location, and how to open and inspect it."""

    name: str
    url: str  # what open_store() takes
    location: str  # what the store class takes
    store_class: type
    key: str

    def open(
        self,
        *,
        key: str | bytes | None = None,
        max_memories: int = MAX_MEMORIES_PER_CUSTOMER,
        **options: float,
    ) -> MemoryStore:
        return self.store_class(
            self.location, key=key or self.key, max_memories=max_memories, **options
        )

    def connect_directly(self) -> tuple[Any, str]:
        """A connection of the test's own to the store's database, and its driver's placeholder."""
        if self.name == "sqlite":
            return sqlite3.connect(self.location), "?"
        import psycopg

        return psycopg.connect(self.url), "%s"

    def raw_bytes(self) -> bytes:
        """Everything the database holds, as raw bytes (files, or every table row)."""
        if self.name == "sqlite":
            return b"".join(
                Path(self.location + suffix).read_bytes()
                for suffix in ("", "-wal", "-journal")
                if Path(self.location + suffix).exists()
            )
        import psycopg

        chunks = []
        with psycopg.connect(self.url) as connection:
            for table in ("memorybook_meta", "memorybook_memories"):
                for row in connection.execute(f"SELECT t.*, t::text FROM {table} t"):
                    for value in row:
                        chunks.append(value if isinstance(value, bytes) else str(value).encode())
        return b"\n".join(chunks)


def postgres_url_or_skip() -> str:
    url = os.environ.get(PG_URL_ENV)
    if not url:
        reason = (
            f"PostgreSQL tests need ${PG_URL_ENV}; start a server with "
            "`tools/postgres_server.sh start /tmp/memorybook-pg` and export its URL"
        )
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)")
        pytest.skip(reason)
    return url


def run_python(code: str, *args: str, env: dict[str, str] | None = None,
               within: tuple[str, ...] = ()) -> subprocess.Popen:
    """Start a separate Python process that can import memorybook; `within` goes before it
    (a SmallTmpfs's `enter`)."""
    child_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    return subprocess.Popen(
        [*within, sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=REPO_ROOT,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen) -> str:
    stdout, stderr = process.communicate(timeout=SUBPROCESS_TIMEOUT_SECONDS)
    assert process.returncode == 0, stderr
    assert stderr == ""
    return stdout


def ticket_ids(memories: list[dict]) -> list[str]:
    return [m["request"]["ticket"]["id"] for m in memories]


def nested(depth: int) -> dict:
    value: object = "deep"
    for _ in range(depth):
        value = [value]
    return value
