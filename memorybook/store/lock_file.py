"""Which store objects on a SQLite file are alive: a byte of ``<database>.lock`` locked per owner.

A store object that runs pending gates (memorybook/store/pending.py) is their owner, under a
random id, while it is open. On PostgreSQL an advisory lock says so; SQLite has none, so each
owner locks one byte of this file (POSIX record locks, at an offset drawn from its id). The
kernel drops a process's locks when it ends, however it ends, so a byte that can be locked
belongs to an owner that is gone. Locks never conflict within one process, so the owners alive
in this process are also kept in a set.

POSIX drops all of a process's locks on a file when it closes any descriptor of it: the file is
opened once per process and never closed. Where there are no POSIX locks (Windows), an owner of
another process always looks gone: run one process per SQLite store there.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memorybook.store.key_file import OWNERS_AND_MODES
from memorybook.store.validation import MemoryStoreError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

_lock = threading.Lock()
# In this process (its pid, so that a forked child starts afresh): a descriptor for each path a
# lock file was opened by, and the owners alive on each lock file, by its device and inode (one
# file may be reached by several paths).
_files: dict[str, tuple[int, int, tuple[int, int]]] = {}  # path -> (pid, descriptor, file)
_alive: dict[tuple[int, int], set[bytes]] = {}  # file -> owners alive in this process


def mark_alive(database: Path, owner: bytes) -> None:
    """Mark ``owner`` as alive, in this process, until ``mark_gone()`` or the process
    ends."""
    with _lock:
        descriptor, owners = _opened(database)
        if fcntl is not None:
            try:
                fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _offset(owner))
            except OSError as error:
                raise MemoryStoreError(
                    f"Could not lock {_path(database)}, where the store objects on {database} "
                    f"mark themselves as alive ({error.strerror}). Try again."
                ) from None
        owners.add(owner)


def mark_gone(database: Path, owner: bytes) -> None:
    with _lock:
        descriptor, owners = _opened(database)
        if owner in owners:
            owners.discard(owner)
            if fcntl is not None:
                fcntl.lockf(descriptor, fcntl.LOCK_UN, 1, _offset(owner))


@contextmanager
def owner_gone(database: Path, owner: bytes) -> Iterator[bool]:
    """Whether ``owner`` is gone; if so, its byte stays locked by this process for the block."""
    with _lock:
        descriptor, owners = _opened(database)
        if owner in owners:
            is_gone = False
        elif fcntl is None:
            is_gone = True
        else:
            try:
                fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _offset(owner))
                is_gone = True
            except OSError:  # another process holds it
                is_gone = False
    try:
        yield is_gone
    finally:
        if is_gone and fcntl is not None:
            with _lock:
                fcntl.lockf(descriptor, fcntl.LOCK_UN, 1, _offset(owner))


def _path(database: Path) -> Path:
    return database.with_name(database.name + ".lock")


def _offset(owner: bytes) -> int:
    return int.from_bytes(hashlib.sha256(owner).digest()[:6], "big")


def _opened(database: Path) -> tuple[int, set[bytes]]:
    """This process's descriptor of the database's lock file, and the owners alive here.

    After a fork, the child holds none of its parent's locks: it starts afresh."""
    path = str(_path(database))
    known = _files.get(path)
    if known is not None and known[0] == os.getpid():
        return known[1], _alive[known[2]]
    if any(pid != os.getpid() for pid, _, _ in _files.values()):  # a parent's, before a fork
        _files.clear()  # its descriptors stay open: closing one could drop locks taken here
        _alive.clear()
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags, 0o600)
    except OSError as error:
        raise MemoryStoreError(
            f"Cannot open {path}, where the store objects on {database} mark themselves as "
            f"alive ({error.strerror}); fix the folder's permissions."
        ) from None
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode) or (
        OWNERS_AND_MODES and status.st_uid != os.geteuid()
    ):
        os.close(descriptor)
        raise MemoryStoreError(
            f"{path} is not a file of your own, so it cannot tell which store objects on "
            f"{database} are alive. It was left untouched: move it aside."
        )
    file = (status.st_dev, status.st_ino)
    _files[path] = (os.getpid(), descriptor, file)
    return descriptor, _alive.setdefault(file, set())
