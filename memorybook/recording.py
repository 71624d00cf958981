"""The recording: cooksafe's JSON cache of System One answers, read safely and written safely.

Reading checks the file and names it in every error; writing merges with what is on disk, under a
lock, through a temporary file, so that no answer once recorded is lost.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import math
import os
import stat
import tempfile
import threading
from collections.abc import Callable
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
    restore_hint,
    shown_path,
)
from memorybook.live import redact


class RecordingError(RuntimeError):
    """The recording cannot be used as it is; the message says which file and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))


# One writer at a time in this process (the file lock covers other processes); `stop_writing`
# takes it, so that a run being stopped never leaves a write half done.
_WRITE_LOCK = threading.Lock()
_STOPPED: set[Path] = set()


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
        with _WRITE_LOCK:
            if self.resolve() in _STOPPED:
                raise RecordingError(
                    f"Not written to {shown_path(self)}: the recording run was stopped."
                )
            try:
                return self._write_merged(ours)
            except OSError as error:
                raise RecordingError(
                    f"Could not write the recording {shown_path(self)}: "
                    f"{error.strerror or error} ({type(error).__name__}). It holds every answer "
                    "written before this one; free space or fix the folder's permissions, then "
                    "run again to resume."
                ) from None

    def _write_merged(self, ours: dict) -> int:
        self.parent.mkdir(parents=True, exist_ok=True)
        with _locked(self):
            on_disk = read_recording(self)
            merged = {**ours, **on_disk}
            text = json.dumps({key: merged[key] for key in sorted(merged)}, indent=2)
            write_text_atomically(self, text)
        return len(text)


def write_text_atomically(path: Path, text: str) -> None:
    """Replace the file at `path` with `text`, all or nothing, keeping its permission bits.

    The text goes to a temporary file beside it, which then takes its place in one rename: on
    any failure (a full disk, a read-only folder, Ctrl-C) the old file stays as it was and the
    temporary file is removed.
    """
    mode = _mode_for(path)
    temporary = None
    try:
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", delete=False
        ) as temporary:
            os.fchmod(temporary.fileno(), mode)
            temporary.write(text)
            temporary.flush()
            os.fsync(temporary.fileno())
        os.replace(temporary.name, path)
    except BaseException:
        if temporary is not None:
            Path(temporary.name).unlink(missing_ok=True)
        raise


def _mode_for(path: Path) -> int:
    """The permission bits the recording keeps: its own, or the umask's default for a new file."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


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


class _ConflictingDuplicate(ValueError):
    """One object of a JSON text holds a key twice, with different values."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _refusing_conflicting_duplicates(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object's pairs as a dict; a key given twice must have the same value both times."""
    found: dict = {}
    for key, value in pairs:
        if key in found and found[key] != value:
            raise _ConflictingDuplicate(key)
        found[key] = value
    return found


def _load_entries(path: Path) -> dict:
    """A recording's entries, or a RecordingError that names the file and how to recover."""
    try:
        entries = json.loads(path.read_text(encoding="utf-8"),
                             object_pairs_hook=_refusing_conflicting_duplicates)
    except _ConflictingDuplicate as duplicate:
        raise RecordingError(
            f"The recording {shown_path(path)} holds the key {_short(duplicate.key)} twice, with "
            f"different values; JSON readers would silently keep the last. It was left as it is. "
            f"Remove the wrong copy{restore_hint(path)}."
        ) from None
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise RecordingError(
            f"The recording {shown_path(path)} is not valid JSON ({error}). It was left as it is. "
            f"Move it away to record anew{restore_hint(path)}."
        ) from None
    except OSError as error:
        raise RecordingError(
            f"Could not read the recording {shown_path(path)}: {error.strerror or error}."
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
            raise RecordingError(
                f"The recording {shown_path(path)} has a damaged entry {_short(key)}"
                f"{_known_call(key)}: {problem}. It was left as it is. Remove that entry and "
                f"record it again{restore_hint(path)}."
            )
    return entries


def _known_call(key: str) -> str:
    """' (the call "route T-201 ...")' when json_cache/provenance.json describes this key."""
    try:
        call = json.loads(PROVENANCE_PATH.read_text(encoding="utf-8"))["entries"][key]["call"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    return f" (the call {call!r} in json_cache/provenance.json)"


def _short(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def entry_shape_problem(entry: object) -> str | None:
    """What is wrong with an entry's structure, or None: what can be checked without the call."""
    if not isinstance(entry, dict):
        return f"it is a JSON {type(entry).__name__}, not an object"
    if not isinstance(entry.get("model"), str) or not entry["model"]:
        return "field `model` is missing or not a model id"
    usage = entry.get("usage")
    if not isinstance(usage, dict):
        return "field `usage` is missing or not an object"
    for name in ("input_tokens", "output_tokens"):
        count = usage.get(name)
        if count is not None and (not _is_int(count) or count < 0):
            return f"field `usage.{name}` is {count!r}, not a token count"
    answers = entry.get("answers")
    if not isinstance(answers, dict) or not answers:
        return "field `answers` is missing, empty or not an object"
    for question_id, answer in answers.items():
        if not isinstance(answer, dict) or not isinstance(answer.get("type"), str):
            return f"field `answers.{question_id}` is not an answer object with a `type`"
    return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_probability(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= 1
    )


ROUNDING = 0.01  # the API rounds every number it returns to this


def answer_problem(entry: dict, questions: dict) -> str | None:
    """What makes `entry` not an answer the SDK accepts for these questions, or None."""
    problem = entry_shape_problem(entry)
    if problem is not None:
        return problem
    answers = entry["answers"]
    for question_id, question in questions.items():
        if question_id not in answers:
            return f"field `answers.{question_id}` is missing"
        answer, field = answers[question_id], f"answers.{question_id}"
        kind = question.get("type") if isinstance(question, dict) else None
        if answer["type"] != kind:
            return f"field `{field}.type` is {answer['type']!r}, but the question is a {kind}"
        if kind == "noul":
            if not _is_probability(answer.get("noul")):
                value = answer.get("noul")
                return f"field `{field}.noul` is {value!r}, not a probability in [0, 1]"
        elif kind == "choice":
            problem = _choice_problem(answer, field, list(question.get("criteria") or {}))
            if problem is not None:
                return problem
    for question_id in answers:
        if question_id not in questions:
            return f"field `answers.{question_id}` answers a question the call did not ask"
    return _sdk_problem(entry)


def _choice_problem(answer: dict, field: str, options: list[str]) -> str | None:
    choice = answer.get("choice")
    if choice not in options:
        return f"field `{field}.choice` is {choice!r}, not one of the options {options}"
    if not _is_probability(answer.get("confidence")):
        return (
            f"field `{field}.confidence` is {answer.get('confidence')!r}, not a number in [0, 1]"
        )
    probabilities = answer.get("probabilities")
    if not isinstance(probabilities, dict):
        return f"field `{field}.probabilities` is missing or not an object"
    if set(probabilities) != set(options):
        return (
            f"field `{field}.probabilities` has options {sorted(probabilities)}, "
            f"not the question's {sorted(options)}"
        )
    for option, value in probabilities.items():
        if not _is_probability(value):
            where = f"{field}.probabilities.{option}"
            return f"field `{where}` is {value!r}, not a probability in [0, 1]"
    total = sum(probabilities.values())
    if abs(total - 1) > ROUNDING / 2 * len(options) + 1e-9:
        return (
            f"field `{field}.probabilities` sums to {total:.4f}, not 1 (within the API's rounding "
            f"to {ROUNDING})"
        )
    return None


def _sdk_problem(entry: dict) -> str | None:
    """The first field the SDK's own response model refuses, or None."""
    from pydantic import ValidationError
    from typesafe_sdk import SystemOneResponse

    try:
        SystemOneResponse.model_validate_json(json.dumps(entry))
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the entry"
        return f"field `{where}`: {first['msg']}"
    return None


class CheckedJsonCache(JsonCache):
    """cooksafe's JsonCache, checking each `_system_one` answer against the call's questions.

    The checks need the questions, which only the call knows (keys are digests), so they run
    when an entry is returned: a damaged entry stops the call with a RecordingError naming the
    file, the call and the field. Lookups are noted in `usage_log` when it is set.
    """

    def __init__(self, path: Path, *, usage_log: Path | None = None) -> None:
        super().__init__(path)
        self.usage_log = usage_log

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def live_checked(*args, **kwargs):
            entry = fn(*args, **kwargs)  # a live answer: checked before cooksafe records it
            if fn.__name__ == "_system_one" and len(args) == 3 and not kwargs:
                check_answer(entry, *args, path=self.path)
            return entry

        cached = super().__call__(live_checked)

        @functools.wraps(fn)
        def checked(*args, **kwargs):
            is_system_one = fn.__name__ == "_system_one" and len(args) == 3 and not kwargs
            if self.usage_log is not None and is_system_one:
                with self.usage_log.open("a", encoding="utf-8") as log:
                    log.write(f"{cache_key(*args)}\n")
            entry = cached(*args, **kwargs)
            if is_system_one:
                check_answer(entry, *args, path=self.path)
            return entry

        return checked


def check_answer(entry: object, model: str, state_json: str, questions_json: str,
                 *, path: Path) -> None:
    """Raise a RecordingError unless `entry` is an answer the SDK accepts for this call."""
    try:
        questions = json.loads(questions_json)
        state = json.loads(state_json)
    except ValueError:
        return  # not a call the notebooks make; nothing to check the answer against
    if not isinstance(questions, dict):
        return
    problem = answer_problem(entry, questions)
    if problem is None:
        return
    call = describe_call(state, questions)
    raise RecordingError(
        f"The recording {shown_path(path)} holds a damaged answer for {call}: {problem}. "
        f"Remove that entry (key {_short(cache_key(model, state_json, questions_json))}) and "
        f"record the call again{restore_hint(path)}."
    )


def open_recording(path: Path | None = None) -> JsonCache:
    """cooksafe's JsonCache on the recording: clear errors, checked answers, safe writes."""
    path = _RecordingFile(recording_path() if path is None else path)
    read_recording(path)  # a clear error before cooksafe's own, and every entry's shape checked
    log = os.environ.get(USAGE_LOG_ENV, "").strip()
    cache = CheckedJsonCache(path, usage_log=Path(log) if log else None)
    cache.path = path  # cooksafe made a plain Path of it; writes go through the safe one
    return cache



def cache_key(model: str, state_json: str, questions_json: str) -> str:
    """The key cooksafe's JsonCache files a `_system_one(model, state, questions)` call under."""
    key = "|".join(["_system_one", model, state_json, questions_json])
    return hashlib.sha256(key.encode()).hexdigest() if len(key) > MAX_KEY_CHARS else key


def read_recording(path: Path | None = None) -> dict:
    """The recording's entries ({} before its first call): reading them is not a notebook's use."""
    path = recording_path() if path is None else path
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise RecordingError(
            f"Could not read the recording {shown_path(path)}: {error.strerror or error}."
        ) from None
    if not stat.S_ISREG(mode):
        raise RecordingError(
            f"The recording {shown_path(path)} is not a regular file (a folder, a pipe or a "
            "device): point MEMORYBOOK_RECORDING at a JSON file."
        )
    return _load_entries(path)


def recording_summary(path: Path | None = None) -> str:
    """Where the answers come from: the whole recording, its model and origin, and its cost."""
    path = recording_path() if path is None else path
    entries = read_recording(path)
    models = ", ".join(sorted({entry["model"] for entry in entries.values()})) or "no model yet"
    input_tokens = sum(entry["usage"].get("input_tokens") or 0 for entry in entries.values())
    cost = input_tokens * USD_PER_BILLION_INPUT_TOKENS / 1e9
    provenance = _provenance()
    text = path.read_bytes() if path.exists() else b""
    rebuilt_as_committed = provenance["origin"] == "rebuilt" and (
        hashlib.sha256(text).hexdigest() == provenance["recording_sha256"])
    if set(provenance["entries"]) != set(entries):
        origin = "not the calls json_cache/provenance.json describes"
    elif provenance["origin"] == "rebuilt" and not rebuilt_as_committed:
        origin = "the same calls as the rebuilt recording, with other answers"
    elif rebuilt_as_committed:
        origin = (f"the published result of {provenance['recorded_on']}, "
                  f"rebuilt from the official page's figures")
    else:
        kept = sum(len(entry.get("filled", {})) for entry in provenance["entries"].values())
        origin = ("recorded live, every value measured" if not kept else
                  f"recorded live; {kept} values equal ones the rebuilt recording filled by a "
                  "rule, and are still counted as filled")
    doing = "Replaying" if replay_only_reason() else "Live: new calls are added to"
    tokens_source = ""
    if rebuilt_as_committed:
        tokens_source = (f"\nThe count of calls and the token total come from "
                         f"{provenance['published_totals']['source']}; each call's share of the "
                         f"total is filled.")
    return (
        f"{doing} {shown_path(path)}, the whole collection's recording: {len(entries)} calls to "
        f"{models} ({origin}).\n"
        f"Recording all of them read {input_tokens:,} input tokens: ${cost:.4f} at "
        f"${USD_PER_BILLION_INPUT_TOKENS} per billion (output tokens are free).{tokens_source}"
    )


def _provenance() -> dict:
    return json.loads(PROVENANCE_PATH.read_text(encoding="utf-8"))


def recorded_requests() -> dict[str, dict]:
    """The request behind each recorded answer, by cache key: {"model", "state", "questions"}."""
    return {key: entry["request"] for key, entry in _provenance()["entries"].items()
            if "request" in entry}


def annotated_values(model: str, state_json: str, questions_json: str
                     ) -> list[tuple[str, object, str]]:
    """Every value of one recorded answer with its origin (see `origin_of`).

    The call is given as `_system_one` receives it. A call the recording lacks raises the same
    explained miss the call itself would.
    """
    key = cache_key(model, state_json, questions_json)
    entry = read_recording().get(key)
    if entry is None:
        from memorybook.replay import explain_miss  # replay builds on this module

        raise explain_miss({"model": model, "state": json.loads(state_json),
                            "questions": json.loads(questions_json)},
                           replay_only_reason() or "live calls are allowed")
    provenance = _provenance()["entries"][key]
    return [(field, value, origin_of(provenance, field)) for field, value in leaf_values(entry)]


def leaf_values(value: object, prefix: str = "") -> list[tuple[str, object]]:
    """(dotted field, value) for every number and string of an answer, e.g. answers.team.choice."""
    if isinstance(value, dict):
        return [leaf for name, item in value.items()
                for leaf in leaf_values(item, f"{prefix}{name}.")]
    return [(prefix.rstrip("."), value)]


def origin_of(provenance_entry: dict, field: str) -> str:
    """Where one value of a recorded answer came from: "published", "filled: <rule>", "measured"."""
    if field in provenance_entry.get("published", {}):
        return "published"
    if field in provenance_entry.get("filled", {}):
        return f"filled: {provenance_entry['filled'][field]}"
    return "measured"


class RecordedAnswer(NamedTuple):
    ticket: str  # the ticket the call was about
    value: float  # the recorded P(yes)
    origin: str  # "published", "filled: <rule>", or "measured"


def recorded_noul_answers(question_id: str) -> list[RecordedAnswer]:
    """Every recorded answer to one Noul question, with the ticket it judged and its origin."""
    entries, provenance = read_recording(), _provenance()["entries"]
    answers = []
    for key, entry in sorted(entries.items()):
        if question_id not in entry["answers"] or key not in provenance:
            continue
        ticket = ticket_of(provenance[key]["request"]["state"]).get("id", "?")
        origin = origin_of(provenance[key], f"answers.{question_id}.noul")
        answers.append(RecordedAnswer(ticket, entry["answers"][question_id]["noul"], origin))
    return answers


def describe_call(state, questions: dict) -> str:
    """A reader's name for one request: which question, about which ticket, with which memories."""
    ticket, customer = ticket_of(state), customer_of(state)
    memories = memory_ids_in(state)
    with_memories = f", with the memories {', '.join(memories)}" if memories else ""
    return (f"the question{'s' if len(questions) != 1 else ''} {', '.join(map(repr, questions))}"
            f" about ticket {ticket.get('id', '?')} ({ticket.get('subject', 'no subject')!r}) "
            f"of customer {customer.get('id', '?')}{with_memories}")


def ticket_of(state) -> dict:
    """The ticket a request is about: the state's own, or, for the gate, its request's."""
    state = state if isinstance(state, dict) else {}
    request = state.get("request") if isinstance(state.get("request"), dict) else {}
    ticket = state.get("ticket") or request.get("ticket")
    return ticket if isinstance(ticket, dict) else {}


def customer_of(state) -> dict:
    """The customer a request is about, found the same way as its ticket."""
    state = state if isinstance(state, dict) else {}
    request = state.get("request") if isinstance(state.get("request"), dict) else {}
    customer = state.get("customer") or request.get("customer")
    return customer if isinstance(customer, dict) else {}


def is_memory_list(value) -> bool:
    """Whether a value is a list of saved memories (each a request with Jev's answer)."""
    return (isinstance(value, list) and bool(value)
            and all(isinstance(item, dict) and "request" in item for item in value))


def memory_ticket_ids(memories) -> list[str]:
    """The ticket ids of a list of memories, in order."""
    if not isinstance(memories, list):
        return []
    return [str(ticket_of(memory).get("id", "?")) for memory in memories]


def memory_ids_in(state) -> list[str]:
    """The ticket ids of the memories a state carries, under whatever key."""
    if not isinstance(state, dict):
        return []
    return [ticket_id for value in state.values() if is_memory_list(value)
            for ticket_id in memory_ticket_ids(value)]
