"""Files replaced together, both or neither whatever stops the writer; and the writers' lock.

`commit_together` is how `make accept-recording` puts a recording and its provenance in place;
every reader of either (`read_recording`, `read_provenance`) first finishes or undoes an accept
that was interrupted (`finish_pending_commit`). `_locked` is the lock across processes that
the writers of a file take.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import sys
from pathlib import Path

from memorybook.config import accepting_folder, shown_path
from memorybook.errors import MemorybookError


class CommitError(MemorybookError, OSError):
    """Files committed together could not all be put in place, or an interrupted commit could
    not be finished; the message names them and what happens next."""


COMMIT_JOURNAL = "commit.json"  # in the accepting folder: its presence is the commit


def commit_together(texts: dict[Path, str]) -> None:
    """Replace the files of `texts` (all in one folder) with their texts: all of them, or none.

    Each new text is written to the folder's accepting folder and synced; then a journal naming
    them and their digests is put there in one rename (the commit); then each takes its place.
    A failure before the commit (a full disk, a read-only folder) removes what was staged and
    changes nothing; a process killed after it leaves the journal, which the next read
    (`finish_pending_commit`) completes. Raises OSError when nothing was changed, and a
    CommitError when the files are committed but not yet all in place.
    """
    [folder] = {path.parent for path in texts}
    staging = accepting_folder(folder)
    with _locked(staging):
        _finish_or_undo(staging)
        try:
            staging.mkdir()
            for path, text in texts.items():
                _write_synced(staging / path.name, text.encode("utf-8"), _mode_for(path))
            journal = {"replaces": {path.name: _sha256(text.encode("utf-8"))
                                    for path, text in texts.items()}}
            _write_synced(staging / f"{COMMIT_JOURNAL}.new", json.dumps(journal).encode(), 0o644)
            _sync_folder(staging)
            os.replace(staging / f"{COMMIT_JOURNAL}.new", staging / COMMIT_JOURNAL)
            _sync_folder(staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        try:
            _finish_or_undo(staging)
        except OSError as error:
            raise CommitError(
                f"{' and '.join(shown_path(path) for path in texts)} are committed but not yet in "
                f"place ({error.strerror or error}); the next read of either puts them there."
            ) from None


def finish_pending_commit(folder: Path) -> None:
    """Complete an interrupted `commit_together` in `folder`, or undo one that did not commit."""
    staging = accepting_folder(folder)
    if not staging.is_dir():
        return
    try:
        with _locked(staging):
            _finish_or_undo(staging)
    except OSError as error:
        raise CommitError(
            f"{shown_path(staging)} holds an accept that was interrupted, and it cannot be "
            f"finished: {error.strerror or error}. Make the folder writable, then read again."
        ) from None


def _finish_or_undo(staging: Path) -> None:
    if not staging.is_dir():
        return
    try:
        plan = json.loads((staging / COMMIT_JOURNAL).read_bytes())["replaces"]
    except FileNotFoundError:  # never committed: the old files stand
        shutil.rmtree(staging)
        return
    folder = staging.parent
    for name, digest in plan.items():
        staged, target = staging / name, folder / name
        if staged.exists():
            if _sha256(staged.read_bytes()) != digest:
                raise CommitError(
                    f"{shown_path(staged)} is not the file its accept staged; "
                    f"{shown_path(folder / name)} was left as it is. Remove {shown_path(staging)} "
                    "and accept again.")
            os.replace(staged, target)
    _sync_folder(folder)
    (staging / COMMIT_JOURNAL).unlink()
    shutil.rmtree(staging)


def _write_synced(path: Path, data: bytes, mode: int) -> None:
    with open(path, "xb") as handle:
        os.chmod(handle.fileno() if os.chmod in os.supports_fd else path, mode)
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _sync_folder(folder: Path) -> None:
    """Make the folder's renames durable (where a folder can be opened: not on Windows)."""
    if sys.platform == "win32":
        return
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _mode_for(path: Path) -> int:
    """The permission bits the recording keeps: its own, or the umask's default for a new file."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


class _locked:
    """An exclusive lock on `<recording>.lock`, held by one writer at a time across processes."""

    def __init__(self, path: Path) -> None:
        self.lock_path = path.with_name(path.name + ".lock")

    def __enter__(self):
        self.handle = self.lock_path.open("a")
        _lock(self.handle)

    def __exit__(self, *exc_info):
        _unlock(self.handle)
        self.handle.close()


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
