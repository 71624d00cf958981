"""New answers added to a recording in place, at a cost that does not grow with the file.

The recording stays the one JSON object cooksafe's JsonCache reads. An add overwrites the
object's closing brace with the new members and a closing brace again, indented as the file's
members are: `..."},\\n  "key": {...}\\n}` in a file indented by 2, `..., "key": {...}}` in a
file on one line. Nothing before the brace is written, so the add costs the same in a file of
ten answers or ten thousand. Keys then follow the order the answers came in; cooksafe reads any
order, and `make accept-recording` commits the sorted form.

A process killed in the middle of an add must leave the file as it was before the add or as it
is after it. So before the file is touched, a rollback record beside it, `.<name>.adding`, holds
the file's length and the bytes the add overwrites, written and synced. Then the file is written
in place and synced, and the record removed. Whoever takes the writers' lock next (a writer, or
a reader that finds the record) plays a record it finds back with `undo_interrupted_add`: the
file is as it was before the interrupted add. A record that cannot be read whole was being
written when its writer died, before the file was touched: it is removed; so is a record whose
file was since replaced or rewritten by a tool that does not take the lock (as cooksafe's own
JsonCache does): the bytes it keeps are not that file's.

What a writer learnt of the file (`KnownFile`: its keys, where its last member ends) is kept
between adds, in this process. The next add checks that the bytes before that end are still
those it knew, and reads only what other processes added after them; the whole file is read
again only when it was replaced or changed otherwise. Callers hold the writers' lock
(disk.writers_lock) around everything here that touches the file.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from memorybook.recording.disk import sync_folder

ANCHOR_BYTES = 1024  # bytes before a member's end kept to notice a file changed in place
RECORD_ANCHOR_BYTES = 64  # of those, what a rollback record keeps to check the file is its add's
DEFAULT_INDENT = 2  # a file that holds no member yet shows no indent: cooksafe's default
BINARY = getattr(os, "O_BINARY", 0)  # on Windows, bytes as they are, newlines untranslated
NONBLOCKING = getattr(os, "O_NONBLOCK", 0)  # a pipe put where the file was must not hang us


@dataclass(frozen=True)
class KnownFile:
    """What a writer knows of a recording file, enough to add to it without reading it all.

    Its `keys` are one set, added to in place as the file grows: copying them at each add would
    make an add's cost grow with the file.
    """

    identity: tuple[int, int]  # (st_dev, st_ino): a file put in its place is another file
    body_end: int  # the offset just after the last member: where the next add writes
    anchor: bytes  # the bytes just before body_end, as last seen
    indent: str | None  # how members are indented (None: on one line)
    empty: bool  # no member yet, so the next one needs no comma
    keys: set[str] = field(repr=False)


_KNOWN: dict[str, KnownFile] = {}
_KNOWN_LOCK = threading.Lock()


def rollback_record_of(path: Path) -> Path:
    """Where an add to `path` keeps what it overwrites until it is done."""
    return path.with_name(f".{path.name}.adding")


def has_interrupted_add(path: Path) -> bool:
    """Whether an add to `path` is under way or was interrupted (its rollback record exists)."""
    return rollback_record_of(path).exists()


def known_from(data: bytes, identity: tuple[int, int], keys) -> KnownFile:
    """What `data`, the whole text of a recording holding `keys`, tells a writer."""
    end = len(data.rstrip())
    body_end = len(data[:end - 1].rstrip())  # before the closing brace and the space before it
    opening = data.index(b"{")
    empty = body_end == opening + 1
    indent: str | None = " " * DEFAULT_INDENT
    if not empty:
        spacing = re.match(rb"[ \t\r\n]*", data[opening + 1:opening + 1 + 64]).group()
        indent = (spacing.rsplit(b"\n", 1)[1].decode("ascii") if b"\n" in spacing else None)
    return KnownFile(identity=identity, body_end=body_end,
                     anchor=data[max(0, body_end - ANCHOR_BYTES):body_end], indent=indent,
                     empty=empty, keys=set(keys))


def remember(path: Path, known: KnownFile) -> None:
    """Keep what is known of `path` for its next add in this process."""
    with _KNOWN_LOCK:
        _KNOWN[os.path.realpath(path)] = known


def still_known(path: Path) -> KnownFile | None:
    """What is known of `path`, brought up to date with what other processes added since; None
    when nothing is known of it, or it must be read whole again (it is not there, was replaced,
    or changed other than by adds). Reads only the bytes after the known members."""
    with _KNOWN_LOCK:
        known = _KNOWN.get(os.path.realpath(path))
    if known is None:
        return None
    try:
        handle = os.open(path, os.O_RDONLY | BINARY | NONBLOCKING)
    except FileNotFoundError:
        return None
    try:
        status = os.fstat(handle)
        start = known.body_end - len(known.anchor)
        if (status.st_dev, status.st_ino) != known.identity or status.st_size < known.body_end:
            return None
        seen = _read_at(handle, status.st_size - start, start)
    finally:
        os.close(handle)
    if not seen.startswith(known.anchor):
        return None
    now = _with_added(known, seen[len(known.anchor):])
    if now is not None and now is not known:
        remember(path, now)
    return now


def _with_added(known: KnownFile, tail: bytes) -> KnownFile | None:
    """`known`, with the members others added: `tail` is everything after its body_end."""
    ending = tail.strip()
    if ending == b"}":
        return known  # nothing added
    if not ending.endswith(b"}"):
        return None
    members = ending[:-1].rstrip()
    if not known.empty:
        if not members.startswith(b","):
            return None
        members = members[1:]
    try:
        added = json.loads(b"{" + members + b"}")
    except (ValueError, RecursionError):
        return None
    if not isinstance(added, dict) or not added or known.keys.intersection(added):
        return None  # a key it knew, added again: read whole, where the reader judges it
    written = tail[:tail.rindex(b"}")].rstrip()
    known.keys.update(added)
    return KnownFile(identity=known.identity, body_end=known.body_end + len(written),
                     anchor=(known.anchor + written)[-ANCHOR_BYTES:], indent=known.indent,
                     empty=False, keys=known.keys)


def add_in_place(path: Path, known: KnownFile, entries: dict) -> KnownFile:
    """Add `entries` (keys the file does not hold) to the file `known` describes, up to date.

    Raises OSError with the file as it was (a full disk, a read-only file, a failed sync); if
    even putting it back failed, the rollback record is left for the next reader or writer.
    """
    members = json.dumps({key: entries[key] for key in sorted(entries)},
                         indent=known.indent)[1:-1].encode("utf-8")
    separator = b"" if known.empty else (b"," if known.indent is not None else b", ")
    handle = os.open(path, os.O_RDWR | BINARY)
    try:
        length = os.fstat(handle).st_size
        old = _read_at(handle, length - known.body_end, known.body_end)
        new = separator + members + old[old.rindex(b"}"):]  # the brace, and what followed it
        record = rollback_record_of(path)
        _write_record(record, {"identity": list(known.identity), "length": length,
                               "at": known.body_end, "old": old.decode("latin-1"),
                               "before": known.anchor[-RECORD_ANCHOR_BYTES:].decode("latin-1"),
                               "longest": known.body_end + max(len(new), len(old))})
        try:
            _write_at(handle, new, known.body_end)
            os.ftruncate(handle, known.body_end + len(new))
            os.fsync(handle)
        except BaseException:
            _put_back(handle, old, known.body_end, length)
            os.unlink(record)
            raise
        os.unlink(record)  # were this removal lost, the add would be undone: still whole
    finally:
        os.close(handle)
    added = (separator + members).rstrip()
    known.keys.update(entries)
    return KnownFile(identity=known.identity, body_end=known.body_end + len(added),
                     anchor=(known.anchor + added)[-ANCHOR_BYTES:], indent=known.indent,
                     empty=False, keys=known.keys)


def undo_interrupted_add(path: Path) -> bool:
    """Put `path` back as it was before an add that was interrupted; whether there was one.

    The caller holds the writers' lock. Raises OSError when the file cannot be written.
    """
    record = rollback_record_of(path)
    try:
        raw = record.read_bytes()
    except FileNotFoundError:
        return False
    try:
        plan = json.loads(raw)
        identity, at, length = tuple(plan["identity"]), int(plan["at"]), int(plan["length"])
        old, before = plan["old"].encode("latin-1"), plan["before"].encode("latin-1")
        longest = int(plan["longest"])
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeError):
        os.unlink(record)  # not whole: its writer died writing it, before touching the file
        return True
    try:
        handle = os.open(path, os.O_RDWR | BINARY)
    except FileNotFoundError:
        os.unlink(record)
        return True
    try:
        status = os.fstat(handle)
        # The file as the add left it: else it was replaced or rewritten since (by a tool that
        # does not take the lock), and putting the old bytes back would damage it.
        if ((status.st_dev, status.st_ino) == identity and status.st_size <= longest
                and _read_at(handle, len(before), at - len(before)) == before):
            _put_back(handle, old, at, length)
    finally:
        os.close(handle)
    os.unlink(record)
    return True


def _put_back(handle: int, old: bytes, at: int, length: int) -> None:
    """Write `old` back at `at` (only if it differs: a failed write may have changed nothing)
    and cut the file to `length`."""
    if _read_at(handle, len(old), at) != old:
        _write_at(handle, old, at)
    os.ftruncate(handle, length)
    os.fsync(handle)


def _write_record(record: Path, plan: dict) -> None:
    """The rollback record, whole and synced (and its name in the folder) before the file is
    touched; removed again if it could not be."""
    handle = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_EXCL | BINARY, 0o644)
    try:
        left = memoryview(json.dumps(plan).encode("ascii"))
        while left:
            left = left[os.write(handle, left):]
        os.fsync(handle)
        os.close(handle)
        handle = None
        sync_folder(record.parent)
    except BaseException:
        if handle is not None:
            os.close(handle)
        record.unlink(missing_ok=True)
        raise


def _read_at(handle: int, size: int, offset: int) -> bytes:
    chunks = []
    while size > 0:
        if hasattr(os, "pread"):
            chunk = os.pread(handle, size, offset)
        else:  # Windows
            os.lseek(handle, offset, os.SEEK_SET)
            chunk = os.read(handle, size)
        if not chunk:
            break
        chunks.append(chunk)
        size, offset = size - len(chunk), offset + len(chunk)
    return b"".join(chunks)


def _write_at(handle: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        if hasattr(os, "pwrite"):
            written = os.pwrite(handle, view, offset)
        else:  # Windows
            os.lseek(handle, offset, os.SEEK_SET)
            written = os.write(handle, view)
        view, offset = view[written:], offset + written
