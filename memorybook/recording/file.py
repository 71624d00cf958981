"""The recording file: read with errors that name it; new answers added under a lock.

Reading checks every entry's shape, and never hands back a file caught in the middle of an add:
an add that was interrupted is undone first, and a text that does not parse is read again under
the writers' lock, once the add in progress is over. Writing adds the answers the file does not
hold yet, in place (appending.py), under a lock held across processes: entries another process
recorded meanwhile are kept, and an entry already on disk is never replaced nor written twice. A
new file is written whole, through a temporary file that atomically takes its place. A process
killed at any moment leaves the file as it was before its last add or after it; a file that
became unreadable is left alone and the write fails, naming it.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import threading
from pathlib import Path

from memorybook.config import missing_recording_problem, recording_path, restore_hint, shown_path
from memorybook.errors import MemorybookError
from memorybook.recording.appending import (
    KnownFile,
    add_in_place,
    has_interrupted_add,
    known_from,
    remember,
    still_known,
    undo_interrupted_add,
)
from memorybook.recording.checks import entry_shape_problem
from memorybook.recording.commit import CommitError, finish_pending_commit
from memorybook.recording.disk import file_mode, writers_lock
from memorybook.recording.provenance import call_named_for
from memorybook.redaction import redact


class RecordingError(MemorybookError, RuntimeError):
    """The recording cannot be used as it is; the message says which file and what to do.
    `logged` is what a log may say of it: the same, but a call named by its ids alone, never a
    ticket's words (which a reader's message shows)."""

    def __init__(self, message: str, *, logged: str | None = None) -> None:
        super().__init__(redact(message))
        self.logged = str(self) if logged is None else redact(logged)


# One writer at a time in this process (the file lock covers other processes); `stop_writing`
# takes it, so that a run being stopped never leaves a write half done.
_WRITE_LOCK = threading.Lock()
_STOPPED: set[Path] = set()


def append_entries(path: Path, entries: dict) -> list[str]:
    """Add to the recording at `path` the entries whose keys it does not hold yet; their keys.

    The file is not rewritten: the new entries are added after its last one (appending.py), or
    it is created with them when it does not exist. An entry on disk wins over one of `entries`
    under the same key. Raises a RecordingError, leaving the file as it was, when the write
    fails, the file cannot be read, or `stop_writing` was called for `path`.
    """
    with _WRITE_LOCK:
        if path.resolve() in _STOPPED:
            raise RecordingError(
                f"Not written to {shown_path(path)}: the recording run was stopped.")
        try:
            return _append(path, entries)
        except OSError as error:
            raise RecordingError(
                f"Could not write the recording {shown_path(path)}: "
                f"{error.strerror or error} ({type(error).__name__}). It holds every answer "
                "written before this one; free space or fix the folder's permissions, then "
                "run again to resume."
            ) from None


def _append(path: Path, entries: dict) -> list[str]:
    _finish_pending_commit(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with writers_lock(path):
        undo_interrupted_add(path)
        known = still_known(path)
        if known is None and not _present(path):
            problem = missing_recording_problem(path)
            if problem is not None:
                raise RecordingError(problem)
            text = canonical_text(entries)
            write_text_atomically(path, text)
            _remember_written(path, text, entries)
            return list(entries)
        if known is None:
            try:
                _, known = _read_whole(path)
            except _NotJson as damaged:
                raise RecordingError(str(damaged)) from None
        new = {key: entry for key, entry in entries.items() if key not in known.keys}
        if new:
            remember(path, add_in_place(path, known, new))
        return list(new)


def _remember_written(path: Path, text: str, entries: dict) -> None:
    status = path.stat()
    remember(path, known_from(text.encode("utf-8"), (status.st_dev, status.st_ino), entries))


def canonical_text(entries: dict) -> str:
    """The recording's text in the form the collection commits it, and cooksafe writes it: keys
    sorted (each entry as it is), indented by 2."""
    return json.dumps({key: entries[key] for key in sorted(entries)}, indent=2)


def write_text_atomically(path: Path, text: str) -> None:
    """Replace the file at `path` with `text`, all or nothing, keeping its permission bits.

    The file is UTF-8 with lines ending in "\\n" on every system (Windows too), so that a
    notebook or recording written there is byte for byte the one written elsewhere.

    The text goes to a temporary file beside it, which then takes its place in one rename: on
    any failure (a full disk, a read-only folder, Ctrl-C) the old file stays as it was and the
    temporary file is removed.
    """
    mode = file_mode(path)
    temporary = None
    try:
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", newline="\n", dir=path.parent, prefix=f".{path.name}.",
            delete=False,
        ) as temporary:
            # On the open file where the system can (not Windows before Python 3.13)
            os.chmod(temporary.fileno() if os.chmod in os.supports_fd else temporary.name, mode)
            temporary.write(text)
            temporary.flush()
            os.fsync(temporary.fileno())
        os.replace(temporary.name, path)
    except BaseException:
        if temporary is not None:
            Path(temporary.name).unlink(missing_ok=True)
        raise


def stop_writing(path: Path, timeout: float = 10.0) -> bool:
    """Refuse every later write to this recording in this process; False if a write is stuck.

    Waits (up to `timeout` seconds) for a write in progress to finish, so that what is on disk
    afterwards is a complete file holding every answer written so far.
    """
    acquired = _WRITE_LOCK.acquire(timeout=timeout)
    try:
        _STOPPED.add(Path(path).resolve())
    finally:
        if acquired:
            _WRITE_LOCK.release()
    return acquired


def read_recording(path: Path | None = None) -> dict:
    """The recording's entries ({} before its first call): reading them is not a notebook's use."""
    path = recording_path() if path is None else path
    _finish_pending_commit(path)
    if not _present(path):
        problem = missing_recording_problem(path)
        if problem is not None:
            raise RecordingError(problem) from None
        return {}
    if has_interrupted_add(path):
        _undo_for_a_reader(path)
    try:
        return _read_whole(path)[0]
    except _NotJson as first:
        verdict = str(first)
    # Perhaps read while another process was adding to it: read again under the writers' lock,
    # once that add is over (or undone). Where no lock can be taken, the first verdict stands.
    try:
        with writers_lock(path):
            undo_interrupted_add(path)
            try:
                return _read_whole(path)[0]
            except _NotJson as again:
                verdict = str(again)
    except OSError:
        pass
    raise RecordingError(verdict)


def _finish_pending_commit(path: Path) -> None:
    """Finish (or undo) an accept of the recording's folder that was interrupted."""
    try:
        finish_pending_commit(path.parent)
    except CommitError as error:
        raise RecordingError(str(error)) from None


def _present(path: Path) -> bool:
    """Whether there is a recording at `path`: a regular file (else a RecordingError saying
    what is there), or nothing."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return False
    except OSError as error:
        raise RecordingError(
            f"Could not read the recording {shown_path(path)}: {error.strerror or error}."
        ) from None
    if not stat.S_ISREG(mode):
        raise RecordingError(
            f"The recording {shown_path(path)} is not a regular file (a folder, a pipe or a "
            "device): point MEMORYBOOK_RECORDING at a JSON file."
        )
    return True


def _undo_for_a_reader(path: Path) -> None:
    """Undo an add that was interrupted, before reading (or wait for the one under way)."""
    try:
        with writers_lock(path):
            undo_interrupted_add(path)
    except OSError as error:
        raise RecordingError(
            f"The recording {shown_path(path)} holds an answer whose writing was interrupted, "
            f"and it cannot be undone: {error.strerror or error}. Make the folder writable, then "
            "read again."
        ) from None


class _NotJson(Exception):
    """The recording's text is not JSON (or not UTF-8): damaged, or caught in the middle of an
    add. Its message is the RecordingError's, should it be damaged."""


class _ConflictingDuplicate(ValueError):
    """One object of a JSON text holds a key twice, with different values."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _refusing_conflicting_duplicates(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object's pairs as a dict; a key given twice must have the same value both times."""
    found: dict = {}
    for key, value in pairs:
        if key in found and not _same_json(found[key], value):
            raise _ConflictingDuplicate(key)
        found[key] = value
    return found


def _same_json(first: object, second: object) -> bool:
    """Whether two parsed JSON values are the same text's: NaN is NaN here, though NaN != NaN."""
    return first == second or json.dumps(first, sort_keys=True) == json.dumps(second,
                                                                               sort_keys=True)


def _read_whole(path: Path) -> tuple[dict, KnownFile]:
    """A recording's entries, and what an add needs to know of it (kept for the next add), or a
    RecordingError that names the file and how to recover (_NotJson when it does not parse)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
            status = os.fstat(handle.fileno())
    except OSError as error:
        raise RecordingError(
            f"Could not read the recording {shown_path(path)}: {error.strerror or error}."
        ) from None
    try:
        entries = json.loads(data.decode("utf-8"),
                             object_pairs_hook=_refusing_conflicting_duplicates)
    except _ConflictingDuplicate as duplicate:
        raise RecordingError(
            f"The recording {shown_path(path)} holds the key {shown_key(duplicate.key)} twice, "
            f"with different values; JSON readers would silently keep the last. It was left as "
            f"it is. Remove the wrong copy{restore_hint(path)}."
        ) from None
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise _NotJson(
            f"The recording {shown_path(path)} is not valid JSON ({error}). It was left as it is. "
            f"Move it away to record anew{restore_hint(path)}."
        ) from None
    if not isinstance(entries, dict):
        raise RecordingError(
            f"The recording {shown_path(path)} holds a JSON {type(entries).__name__}, not an "
            f"object of entries. It was left as it is. Move it away to record anew"
            f"{restore_hint(path)}."
        )
    for key, entry in entries.items():
        problem = entry_shape_problem(entry)
        if problem is not None:
            call = call_named_for(key)
            named = ("" if call is None
                     else f" (the call {call!r} in json_cache/provenance.json)")
            raise RecordingError(
                f"The recording {shown_path(path)} has a damaged entry {shown_key(key)}{named}: "
                f"{problem}. It was left as it is. Remove that entry and record it again"
                f"{restore_hint(path)}."
            )
    known = known_from(data, (status.st_dev, status.st_ino), entries)
    remember(path, known)
    return entries, known


def shown_key(key: str, limit: int = 80) -> str:
    """A cache key as messages show it: quoted, and cut after `limit` characters."""
    return repr(key if len(key) <= limit else key[:limit] + "...")
