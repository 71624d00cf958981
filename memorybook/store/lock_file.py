"""Which store objects on a SQLite file are alive: a byte of ``<database>.lock`` locked per owner.

A store object that runs pending gates (memorybook/store/pending.py) is their owner, under a
random id, while it is open. On PostgreSQL an advisory lock says so; SQLite has none, so each
owner locks one byte of this file (POSIX record locks, at an offset drawn from its id). The
kernel drops a process's locks when it ends, however it ends, so a byte that can be locked
belongs to an owner that is gone. Locks never conflict within one process, so the owners alive
in this process are also kept in a set.

A claimant finds an owner gone on that owner's claim byte, past every owner's byte: it waits for
the claim byte, holds it while it claims, and tests the owner's byte only while holding it. So a
byte found locked is an owner alive, never another claimant's test of it (two replicas looking
at once each took the owner for alive while the other held its byte, and left its gates for
their next look).

A service process holds one more byte while it serves the store (``serving_alone()``): a
customer's calls keep their order within one process only on SQLite, so a second is refused.

POSIX drops all of a process's locks on a file when it closes any descriptor of it: the file is
opened once per process and never closed. Where there are no POSIX locks (Windows), an owner of
another process always looks gone: run one process per SQLite store there.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import threading
import time
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
# The claim bytes this process holds, by (descriptor, owner): how many of its blocks hold each
# (they may overlap: locks never conflict within one process). One thread at a time takes one.
_claims: dict[tuple[int, bytes], int] = {}
_taking_a_claim = threading.Lock()
_CLAIMS_FROM = 1 << 48  # past every owner's byte (_offset() is 48 bits)
# The byte a service process holds while it serves the store (serving_alone()), past every
# claim byte; and how many services in this process hold it, by file.
_SERVING = 1 << 50
_serving: dict[tuple[int, int], int] = {}


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
def owner_gone(database: Path, owner: bytes, seconds: float) -> Iterator[bool]:
    """Whether ``owner`` is gone, as a block during which no other process finds it gone too.

    Waits, at most ``seconds``, while another process claims the same owner's gates (its block:
    one UPDATE, bounded by its store's timeout, unless that process is frozen); past them, the
    owner counts as alive this time and its gates are claimed at the next look."""
    with _lock:
        descriptor, owners = _opened(database)
        alive_here = owner in owners
    if alive_here or fcntl is None:
        yield not alive_here
        return
    if not _take_claim(descriptor, owner, seconds):
        yield False
        return
    try:
        with _lock:
            try:
                fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _offset(owner))
            except OSError:  # its owner holds it: alive
                is_gone = False
            else:
                fcntl.lockf(descriptor, fcntl.LOCK_UN, 1, _offset(owner))
                is_gone = True
        yield is_gone
    finally:
        _let_go_of_claim(descriptor, owner)


def _take_claim(descriptor: int, owner: bytes, seconds: float) -> bool:
    """Hold ``owner``'s claim byte, waiting for another process's block to end, at most
    ``seconds`` (tried every 10 ms: a blocking lock would wait for a frozen process for ever);
    False when it was not had by then."""
    deadline = time.monotonic() + seconds
    if not _taking_a_claim.acquire(timeout=max(0.0, seconds)):
        return False
    try:
        with _lock:
            held = _claims.get((descriptor, owner), 0)
        while not held:
            try:
                fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB, 1,
                            _CLAIMS_FROM + _offset(owner))
                break
            except OSError:  # another process claims this owner's gates
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.01)
        with _lock:
            _claims[descriptor, owner] = held + 1
        return True
    finally:
        _taking_a_claim.release()


def _let_go_of_claim(descriptor: int, owner: bytes) -> None:
    with _lock:
        held = _claims.pop((descriptor, owner)) - 1
        if held:
            _claims[descriptor, owner] = held
        else:
            fcntl.lockf(descriptor, fcntl.LOCK_UN, 1, _CLAIMS_FROM + _offset(owner))


@contextmanager
def serving_alone(database: Path) -> Iterator[None]:
    """Hold, for the block, the byte that says this process serves the store; a
    MemoryStoreError when another process holds it. Services in one process share it."""
    with _lock:
        descriptor, _ = _opened(database)
        file = _files[str(_path(database))][2]
        if fcntl is not None and not _serving.get(file):
            try:
                fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _SERVING)
            except OSError as error:
                if error.errno not in (errno.EACCES, errno.EAGAIN):  # not held: unlockable
                    raise MemoryStoreError(
                        f"Could not lock {_path(database)}, where a service marks the store "
                        f"{database} as served ({error.strerror}). Try again."
                    ) from None
                raise MemoryStoreError(
                    f"Another process serves the SQLite store {database}: its customers' calls "
                    "keep their order within one process only, so a second would route a "
                    "customer's next ticket without the memory the first is saving. Stop the "
                    "other service, or run replicas on a PostgreSQL store."
                ) from None
        _serving[file] = _serving.get(file, 0) + 1
    try:
        yield
    finally:
        with _lock:
            _serving[file] -= 1
            if not _serving[file]:
                del _serving[file]
                if fcntl is not None:
                    fcntl.lockf(descriptor, fcntl.LOCK_UN, 1, _SERVING)


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
        _claims.clear()
        _serving.clear()
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
