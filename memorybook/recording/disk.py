"""The file-system steps every writer of the recording shares, in one place.

    writers_lock   the lock across processes a writer of a file holds while it writes
    file_mode      the permission bits a file being replaced or created should get
    write_synced   a new file, written and flushed to the disk before anything depends on it
    sync_folder    a folder's renames and removals made durable

`commit.py` (an accept's two files), `file.py` (a whole recording) and `appending.py` (one answer
added in place) use them, so that all three take the same lock and keep the same modes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def writers_lock(path: Path) -> Iterator[None]:
    """Hold the exclusive lock on `<path>.lock`, which one writer of `path` holds at a time,
    whatever process it is in. A lock is not re-entrant: never take it twice in one thread."""
    with path.with_name(path.name + ".lock").open("a") as handle:
        _lock(handle)
        try:
            yield
        finally:
            _unlock(handle)


def file_mode(path: Path) -> int:
    """The permission bits a file written at `path` keeps: those of the file there now, or the
    umask's default for a new file."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_synced(path: Path, data: bytes, mode: int) -> None:
    """Create the file `path` (it must not exist) holding `data`, synced to the disk."""
    with open(path, "xb") as handle:
        os.chmod(handle.fileno() if os.chmod in os.supports_fd else path, mode)
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def sync_folder(folder: Path) -> None:
    """Make the folder's renames and removals durable (where a folder can be opened: not on
    Windows)."""
    if sys.platform == "win32":
        return
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


if sys.platform == "win32":
    import msvcrt

    # Windows locks byte ranges: the lock is the file's first byte, which need not exist yet.
    def _lock(handle) -> None:
        handle.seek(0)
        while True:
            try:
                msvcrt.locking(handle.fileno(), msvcrt.LK_LOCK, 1)  # raises after 10 s of trying
                return
            except OSError as error:
                if error.errno != errno.EDEADLK:
                    raise

    def _unlock(handle) -> None:
        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _lock(handle) -> None:
        fcntl.flock(handle, fcntl.LOCK_EX)

    def _unlock(handle) -> None:
        fcntl.flock(handle, fcntl.LOCK_UN)
