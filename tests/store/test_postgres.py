"""The PostgreSQL backend: a store outlives a restart of its server."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from memorybook.store import MemoryStoreError, PostgresMemoryStore
from tests.helpers import (
    REPO_ROOT,
    SUBPROCESS_TIMEOUT_SECONDS,
    make_memory,
    new_key,
    postgres_url_or_skip,
    ticket_ids,
)


@dataclass
class OwnPostgres:
    """A PostgreSQL server of one test's own, to stop and restart (tools/postgres_server.sh)."""

    folder: Path

    def run(self, command: str) -> str:
        done = subprocess.run(
            [str(REPO_ROOT / "tools" / "postgres_server.sh"), command, str(self.folder)],
            capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_SECONDS,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()


@pytest.fixture
def own_postgres() -> Iterator[OwnPostgres]:
    postgres_url_or_skip()  # where the shared server runs, this one can run too
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="memorybook-own-pg-"))
    folder.chmod(0o755)  # the postgres user must reach the cluster inside when we are root
    server = OwnPostgres(folder / "postgres")
    try:
        yield server
    finally:
        server.run("stop")
        shutil.rmtree(folder)


def test_a_postgres_store_works_again_after_its_server_restarts(own_postgres: OwnPostgres) -> None:
    url = own_postgres.run("start")
    with PostgresMemoryStore(url, key=new_key()) as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
        own_postgres.run("stop")
        with pytest.raises(MemoryStoreError) as raised:
            store.save("C-1042", make_memory("C-1042", "T-2"))
        assert "next call" in str(raised.value), "it must say that a later call reconnects"
        assert own_postgres.run("start") == url, "the server came back where it was"
        store.save("C-1042", make_memory("C-1042", "T-3"))
        assert ticket_ids(store.recall("C-1042")) == ["T-1", "T-3"]
        own_postgres.run("restart")
        assert ticket_ids(store.recall("C-1042")) == ["T-1", "T-3"]
        store.save("C-1042", make_memory("C-1042", "T-4"))
        assert ticket_ids(store.forget_customer("C-1042")) == ["T-1", "T-3", "T-4"]
