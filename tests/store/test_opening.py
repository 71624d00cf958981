"""open_store(): the backend a URL names, the default file, the cap and time limit it passes on."""

from __future__ import annotations

from inspect import signature
from pathlib import Path

import pytest

from memorybook.store import MemoryStoreError, SQLiteMemoryStore, open_store
from memorybook.store.opening import BACKENDS
from tests.helpers import Backend, make_memory, new_key, ticket_ids


def test_open_store_opens_backend_url(backend: Backend) -> None:
    with open_store(backend.url, key=backend.key) as store:
        assert isinstance(store, backend.store_class)
        store.save("C-1", make_memory("C-1", "T-1"))
    with backend.open() as store:
        assert len(store.recall("C-1")) == 1


def test_default_store_lives_in_repo_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMORYBOOK_STORE_URL", raising=False)
    monkeypatch.delenv("MEMORYBOOK_STORE_KEY", raising=False)
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    with open_store() as store:
        assert isinstance(store, SQLiteMemoryStore)
        assert store.path == tmp_path / ".memorybook" / "memories.sqlite3"
        assert any(".memorybook/memories.sqlite3.key" in notice for notice in store.notices)
    assert (tmp_path / ".memorybook" / ".gitignore").exists()


def test_store_url_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMORYBOOK_STORE_URL", "sqlite:///nested/folder/store.sqlite3")
    with open_store(key=new_key()) as store:
        assert isinstance(store, SQLiteMemoryStore)
        assert store.path == tmp_path / "nested" / "folder" / "store.sqlite3"


def test_unsupported_url_is_a_clear_error() -> None:
    with pytest.raises(MemoryStoreError, match="Unsupported memory store URL") as raised:
        open_store("mysql://root:hunter2@db/memories", key=new_key())
    examples = dict.fromkeys(store_class.url_example for store_class in BACKENDS.values())
    assert f"Use {' or '.join(examples)} " in str(raised.value)
    assert "'mysql'" in str(raised.value), raised.value  # what it read as the scheme
    for example in examples:  # each names a scheme that opens its own backend
        assert BACKENDS[example.partition(":")[0]].url_example == example
    assert "hunter2" not in str(raised.value)


def test_a_url_that_is_no_string_or_names_no_possible_file_is_a_clear_error(
    tmp_path: Path,
) -> None:
    with pytest.raises(MemoryStoreError, match="A memory store URL is a string, such as "
                       "sqlite:///path/to/memories.sqlite3; got 42"):
        open_store(42, key=new_key())  # type: ignore[arg-type]
    for opening in (lambda: open_store("sqlite:///%00x", key=new_key()),
                    lambda: SQLiteMemoryStore(tmp_path / "a\0b.sqlite3", key=new_key())):
        with pytest.raises(MemoryStoreError, match="holds a NUL character, which no file "
                           "system takes"):
            opening()
    assert list(tmp_path.iterdir()) == []


def test_open_store_takes_a_cap(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYBOOK_STORE_KEY", backend.key)
    with open_store(backend.url, max_memories=1) as store:
        assert store.max_memories == 1
        assert store.save("C-1042", make_memory("C-1042", "T-1")) == []
        evicted = store.save("C-1042", make_memory("C-1042", "T-2"))
        assert evicted == [make_memory("C-1042", "T-1")]
        assert ticket_ids(store.recall("C-1042")) == ["T-2"]


def test_open_store_takes_a_time_limit(backend: Backend) -> None:
    with open_store(backend.url, key=backend.key, timeout=1.5) as store:
        assert store.timeout == 1.5
    with open_store(backend.url, key=backend.key) as store:
        assert store.timeout == signature(backend.store_class).parameters["timeout"].default
