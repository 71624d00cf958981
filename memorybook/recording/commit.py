"""Files replaced together, both or neither whatever stops the writer.

`commit_together` is how `make accept-recording` puts a recording and its provenance in place;
every reader of either (`read_recording`, `read_provenance`) first finishes or undoes an accept
that was interrupted (`finish_pending_commit`). The lock it takes, and its synced writes, are
disk.py's.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from memorybook.config import accepting_folder, shown_path
from memorybook.errors import MemorybookError
from memorybook.recording.disk import file_mode, sync_folder, write_synced, writers_lock


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
    with writers_lock(staging):
        _finish_or_undo(staging)
        try:
            staging.mkdir()
            for path, text in texts.items():
                write_synced(staging / path.name, text.encode("utf-8"), file_mode(path))
            journal = {"replaces": {path.name: _sha256(text.encode("utf-8"))
                                    for path, text in texts.items()}}
            write_synced(staging / f"{COMMIT_JOURNAL}.new", json.dumps(journal).encode(), 0o644)
            sync_folder(staging)
            os.replace(staging / f"{COMMIT_JOURNAL}.new", staging / COMMIT_JOURNAL)
            sync_folder(staging)
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
        with writers_lock(staging):
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
    sync_folder(folder)
    (staging / COMMIT_JOURNAL).unlink()
    shutil.rmtree(staging)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
