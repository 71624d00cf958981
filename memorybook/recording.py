"""The recording: cooksafe's JSON cache of System One answers, read safely and written safely.

Reading checks the file and names it in every error; writing merges with what is on disk, under a
lock, through a temporary file, so that no answer once recorded is lost.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import NamedTuple

from cooksafe import JsonCache
from cooksafe.cache import MAX_KEY_CHARS

from memorybook.config import (
    PROVENANCE_PATH,
    USAGE_LOG_ENV,
    USD_PER_BILLION_INPUT_TOKENS,
    recording_path,
    replay_only_reason,
    shown_path,
)


class RecordingError(RuntimeError):
    """The recording cannot be used as it is; the message says which file and what to do."""



class _UsageLoggingEntries(dict):
    """The cache's entries, noting each key looked up so the tests can find unused entries."""

    def __init__(self, entries: dict, log_path: Path | None) -> None:
        super().__init__(entries)
        self.log_path = log_path

    def __contains__(self, key: object) -> bool:
        if self.log_path is not None:
            with self.log_path.open("a", encoding="utf-8") as log:
                log.write(f"{key}\n")
        return super().__contains__(key)


class _RecordingFile(type(Path())):
    """The recording's path; cooksafe saves through its write_text, made safe here.

    cooksafe rewrites the whole file after each new entry. This write merges with whatever is on
    disk now (entries another process recorded meanwhile are kept; an entry already on disk is
    never replaced), under a lock, through a temporary file that atomically replaces the old one.
    An interrupted run leaves the last complete file; a file that became unreadable is left alone
    and the write fails, naming it, rather than replacing it with less than it held.
    """

    def write_text(self, data, encoding=None, errors=None, newline=None):
        ours = json.loads(data)
        self.parent.mkdir(parents=True, exist_ok=True)
        with _locked(self):
            on_disk = read_recording(self)
            merged = {**ours, **on_disk}
            text = json.dumps({key: merged[key] for key in sorted(merged)}, indent=2)
            with tempfile.NamedTemporaryFile(
                "w", encoding="utf-8", dir=self.parent, prefix=f".{self.name}.", delete=False
            ) as temporary:
                temporary.write(text)
                temporary.flush()
                os.fsync(temporary.fileno())
            os.replace(temporary.name, self)
        return len(text)


class _locked:
    """An exclusive lock on `<recording>.lock`, held by one writer at a time across processes."""

    def __init__(self, path: Path) -> None:
        self.lock_path = path.with_name(path.name + ".lock")

    def __enter__(self):
        self.handle = self.lock_path.open("a")
        fcntl.flock(self.handle, fcntl.LOCK_EX)

    def __exit__(self, *exc_info):
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def _load_entries(path: Path) -> dict:
    """A recording's entries, or a RecordingError that names the file and how to recover."""
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise RecordingError(
            f"The recording {shown_path(path)} is not valid JSON ({error}). It was left as it is. "
            f"Restore it with `git checkout -- {shown_path(path)}`, or move it away to record anew."
        ) from None
    if not isinstance(entries, dict):
        raise RecordingError(
            f"The recording {shown_path(path)} holds a JSON {type(entries).__name__}, not an "
            f"object of entries. It was left as it is. Restore it with "
            f"`git checkout -- {shown_path(path)}`."
        )
    return entries


def open_recording(path: Path | None = None) -> JsonCache:
    """cooksafe's JsonCache on the recording: clear errors, and writes that lose nothing."""
    path = _RecordingFile(recording_path() if path is None else path)
    entries = read_recording(path)  # a clear error before cooksafe's own
    cache = JsonCache(path)
    cache.path = path
    log = os.environ.get(USAGE_LOG_ENV, "").strip()
    cache._data = _UsageLoggingEntries(entries, Path(log) if log else None)  # noqa: SLF001
    return cache



def cache_key(model: str, state_json: str, questions_json: str) -> str:
    """The key cooksafe's JsonCache files a `_system_one(model, state, questions)` call under."""
    key = "|".join(["_system_one", model, state_json, questions_json])
    return hashlib.sha256(key.encode()).hexdigest() if len(key) > MAX_KEY_CHARS else key


def read_recording(path: Path | None = None) -> dict:
    """The recording's entries ({} before its first call): reading them is not a notebook's use."""
    path = recording_path() if path is None else path
    return _load_entries(path) if path.exists() else {}


def recording_summary(path: Path | None = None) -> str:
    """Where the answers come from: the whole recording, its model and origin, and its cost."""
    path = recording_path() if path is None else path
    entries = read_recording(path)
    models = ", ".join(sorted({entry["model"] for entry in entries.values()})) or "no model yet"
    input_tokens = sum(entry["usage"].get("input_tokens") or 0 for entry in entries.values())
    cost = input_tokens * USD_PER_BILLION_INPUT_TOKENS / 1e9
    provenance = _provenance()
    text = path.read_bytes() if path.exists() else b""
    if set(provenance["entries"]) != set(entries):
        origin = "not the calls json_cache/provenance.json describes"
    elif provenance["origin"] == "rebuilt" and (
        hashlib.sha256(text).hexdigest() != provenance["recording_sha256"]
    ):
        origin = "the same calls as the rebuilt recording, with other answers"
    elif provenance["origin"] == "rebuilt":
        origin = (f"the published result of {provenance['recorded_on']}, "
                  f"rebuilt from the official page's figures")
    else:
        origin = "recorded live, every value measured"
    doing = "Replaying" if replay_only_reason() else "Live: new calls are added to"
    return (
        f"{doing} {shown_path(path)}, the whole collection's recording: {len(entries)} calls to "
        f"{models} ({origin}).\n"
        f"Recording all of them read {input_tokens:,} input tokens: ${cost:.4f} at "
        f"${USD_PER_BILLION_INPUT_TOKENS} per billion (output tokens are free)."
    )


def _provenance() -> dict:
    return json.loads(PROVENANCE_PATH.read_text(encoding="utf-8"))


def recorded_requests() -> dict[str, dict]:
    """The request behind each recorded answer, by cache key: {"model", "state", "questions"}."""
    return {key: entry["request"] for key, entry in _provenance()["entries"].items()
            if "request" in entry}


def annotated_values(key: str) -> list[tuple[str, object, str]]:
    """Every value of one recorded answer with its origin: "published", or "filled: <rule>"."""
    entry = read_recording()[key]
    provenance = _provenance()["entries"][key]

    def leaves(value, prefix=""):
        if isinstance(value, dict):
            for name, item in value.items():
                yield from leaves(item, f"{prefix}{name}.")
        else:
            yield prefix.rstrip("."), value

    return [(field, value, "published" if field in provenance["published"]
             else f"filled: {provenance['filled'][field]}") for field, value in leaves(entry)]


class RecordedAnswer(NamedTuple):
    ticket: str  # the ticket the call was about
    value: float  # the recorded P(yes)
    origin: str  # "published", or "filled: <rule>"


def recorded_noul_answers(question_id: str) -> list[RecordedAnswer]:
    """Every recorded answer to one Noul question, with the ticket it judged and its origin."""
    entries, provenance = read_recording(), _provenance()["entries"]
    answers = []
    for key, entry in sorted(entries.items()):
        if question_id not in entry["answers"] or key not in provenance:
            continue
        state = provenance[key]["request"]["state"]
        ticket = (state.get("request") or state)["ticket"]["id"]
        field = f"answers.{question_id}.noul"
        origin = ("published" if field in provenance[key]["published"]
                  else f"filled: {provenance[key]['filled'][field]}")
        answers.append(RecordedAnswer(ticket, entry["answers"][question_id]["noul"], origin))
    return answers
