"""``open_store()``: the store a URL names, or the default SQLite file in the repository root."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memorybook.settings import Settings
from memorybook.store.base import MAX_MEMORIES_PER_CUSTOMER, EncryptedStore, MemoryStore
from memorybook.store.encryption import StoreKey
from memorybook.store.postgres import PostgresMemoryStore
from memorybook.store.retention import Clock, Retention
from memorybook.store.sqlite import SQLiteMemoryStore
from memorybook.store.urls import STORE_URL_ENV, redacted
from memorybook.store.validation import MemoryStoreError, shown

DEFAULT_STORE_PATH = Path(".memorybook") / "memories.sqlite3"

# The store class each URL scheme names (the scheme in lower case): a new backend adds its line.
BACKENDS: dict[str, type[EncryptedStore]] = {
    "sqlite": SQLiteMemoryStore,
    "postgresql": PostgresMemoryStore,
    "postgres": PostgresMemoryStore,
}


def open_store(
    url: str | None = None,
    *,
    key: str | bytes | None = None,
    old_keys: Sequence[str | bytes] | None = None,
    max_memories: int = MAX_MEMORIES_PER_CUSTOMER,
    timeout: float | None = None,
    retention: Retention | None = None,
    clock: Clock | None = None,
    settings: Settings | None = None,
) -> MemoryStore:
    """Open the memory store at ``url``.

    ``url``'s scheme names the backend (``BACKENDS``): ``sqlite:///relative/path.sqlite3``
    (relative to the working directory), ``sqlite:////absolute/path.sqlite3`` or
    ``postgresql://user@host:port/database``. It defaults to the settings' (``settings``, by
    default the environment's when the store is opened: ``$MEMORYBOOK_STORE_URL``), then to
    ``.memorybook/memories.sqlite3`` in the repository root (the nearest folder at or above the
    working directory holding ``pyproject.toml``). ``key``
    defaults to the settings' (``$MEMORYBOOK_STORE_KEY``), and ``old_keys`` (earlier keys it reads
    with while its key rotates: memorybook/store/rotation.py) to theirs
    (``$MEMORYBOOK_STORE_OLD_KEYS``) when ``key`` is not given. Without a key, a SQLite store keeps
    its key in a file beside the database (``<database>.key``), made at the first open and named
    in the store's ``notices``: back it up with the database, which nobody can read without it.
    ``max_memories`` is the per-customer cap of this store
    object. ``timeout`` is how many seconds a call waits for a lock held elsewhere before it fails
    (default: 30 on SQLite, 20 on PostgreSQL). ``retention`` is how long a memory saved without
    its own ``expires_at`` lasts, or ``NEVER`` (until forgotten); None (the default) takes the
    settings' (``$MEMORYBOOK_RETENTION_DAYS``, else ``NEVER``). ``clock`` gives the store the
    time as an aware datetime (default: the system's, in UTC).
    """
    settings = settings or Settings.from_environment()
    options: dict[str, Any] = {
        "key": StoreKey(settings.store_key, settings.source("store_key"),
                        settings.store_old_keys or (), settings.source("store_old_keys"))
        if key is None else key,
        "old_keys": old_keys,
        "max_memories": max_memories,
        "retention": settings.retention if retention is None else retention,
        "clock": clock,
    }
    if timeout is not None:
        options["timeout"] = timeout
    if url is None:
        url = settings.store_url
    if url is None:
        path = _repo_root(Path.cwd()) / DEFAULT_STORE_PATH
        _create_private_folder(path.parent)
        return SQLiteMemoryStore(path, **options)
    if not isinstance(url, str):
        raise MemoryStoreError(
            f"A memory store URL is a string, such as {SQLiteMemoryStore.url_example}; got "
            f"{shown(url)}."
        )
    backend = BACKENDS.get(url.partition(":")[0].lower())
    if backend is None:
        examples = dict.fromkeys(store_class.url_example for store_class in BACKENDS.values())
        # Only its start: the rest of a string that is no URL we know may hold a password in any
        # form (quoted, after a space, with no scheme), which redacted() would not find.
        scheme, colon, _ = url.partition(":")
        start = (f"its scheme, before the first ':', is {shown(redacted(scheme)[:40])}" if colon
                 else f"it has no scheme (it starts {shown(redacted(url.split(' ')[0])[:40])})")
        raise MemoryStoreError(
            f"Unsupported memory store URL: {start}. Use {' or '.join(examples)} "
            f"(pass url= or set {STORE_URL_ENV})."
        )
    return backend.from_url(url, **options)


def _repo_root(start: Path) -> Path:
    """The nearest folder at or above ``start`` holding pyproject.toml, else ``start``."""
    for folder in (start, *start.parents):
        if (folder / "pyproject.toml").is_file():
            return folder
    return start


def _create_private_folder(folder: Path) -> None:
    """Create the default store folder, readable only by us and ignored by git."""
    if folder.is_dir():
        return
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    (folder / ".gitignore").write_text(
        "# Created by memorybook: customer memories and their key stay out of git.\n*\n"
    )
