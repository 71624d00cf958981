"""Replay-only calls: a client with no network behind it, and misses that explain themselves.

Without a key (and always in CI) the collection's client (`memorybook.transport`) sends through
`ReplayOnlyTransport`. The SDK reaches a transport only when the recording had no answer, so
every request this transport sees is a miss. It sends
nothing; it raises `RecordingMissError`, which says which call missed, the most likely reason
(found by comparing the call with the requests behind the recorded answers, and with the misses
this process met before), a playground link to exactly that call, and how to record it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import httpx2
from cooksafe import make_playground_link

from memorybook.config import (
    API_KEY_ENV,
    RECORDED_REMEMBER_AT,
    recording_path,
    shown_path,
)
from memorybook.recording import (
    RecordingError,
    cache_key,
    describe_call,
    is_memory_list,
    memory_ticket_ids,
    recorded_requests,
    ticket_of,
)

# The one command that records the calls a recording lacks, named by every message about a miss
# (the kernels', `make run`'s, `make record-dry-run`'s, a keyless `make record`'s, the rebuild's).
RECORD_COMMAND = f"{API_KEY_ENV}=... make record"
RECORD_STEPS = f"`{RECORD_COMMAND}`, read its report, then `make accept-recording`"


class RecordingMissError(RecordingError):
    """A call that is not in the recording, made while only replaying is allowed.

    `summary`, `reasons`, `link` and `how_to_record` are the parts of the message; `call` names
    the call in a reader's words; `request` is what it asks (model, state, questions).
    """

    def __init__(self, summary: str, reasons: list[str], link: str, how_to_record: str,
                 call: str = "", request: dict | None = None) -> None:
        self.summary, self.reasons, self.link, self.how_to_record, self.call = (
            summary, reasons, link, how_to_record, call)
        self.request = request or {}
        super().__init__("\n".join([
            summary, *(f"- {reason}" for reason in reasons), how_to_record,
            f"Ask Jev this exact call in the TypeSafe playground: {link}",
        ]))


class ReplayOnlyTransport(httpx2.BaseTransport):
    """An HTTP transport with no network behind it: every request it is handed is a recording miss.

    The error is not an HTTP error, so the SDK's retry policy does not retry it: the cell fails at
    once, and nothing is written to the recording.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            body = json.loads(_decoded(request))
        except (ValueError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            raise RecordingError(f"A request with an unreadable body ({request.method} "
                                 f"{request.url.path}) reached the replay-only transport.")
        raise explain_miss(body, self.reason)


def _decoded(request: httpx2.Request) -> bytes:
    content = request.read()
    if request.headers.get("content-encoding") == "zstd":  # only with typesafe-sdk[zstd]
        from backports import zstd

        return zstd.decompress(content)
    return content


# The misses this process met, oldest first: a later call can fail only because an earlier one
# did (its memories were never saved), and its message then names that first miss.
MISSES_SO_FAR: list[RecordingMissError] = []


def explain_miss(body: dict, reason: str) -> RecordingMissError:
    """The error for one missed request: which call, why it most likely missed, what to do."""
    state, questions, model = body.get("state"), body.get("questions") or {}, body.get("model")
    link = make_playground_link(state, questions, models=[model] if model else None)
    call = describe_call(state, questions)
    earlier = next((miss for miss in MISSES_SO_FAR if miss.call != call), None)
    reasons = likely_reasons(state, questions, model, earlier)
    if earlier is not None:
        reasons.append(f"Earlier in this process another call missed: {earlier.call}. Calls "
                       f"made after it can differ from the recorded run because it failed; "
                       f"fix that one first.")
    miss = RecordingMissError(
        f"The recording {shown_path(recording_path())} has no answer to this call: {call}. "
        f"Nothing was sent, and the recording is unchanged.",
        reasons, link, how_to_record(reason), call,
        {"model": model, "state": state, "questions": questions},
    )
    MISSES_SO_FAR.append(miss)
    return miss


def likely_reasons(state, questions: dict, model: str | None,
                   earlier: RecordingMissError | None = None) -> list[str]:
    """Why a call missed, found by comparing it with the requests behind the recorded answers."""
    try:
        recorded = recorded_requests()
    except FileNotFoundError as missing:  # a recording copied without its provenance.json
        return [f"No {Path(missing.filename).name} beside the recording, so this call cannot "
                "be compared with the recorded ones."]
    key = cache_key(model or "", json.dumps(state), json.dumps(questions))
    if key in recorded:
        return [f"The collection makes this call, but {shown_path(recording_path())} lacks its "
                f"answer: the file was changed or replaced. Restore it (`git checkout -- "
                f"{shown_path(recording_path())}`) or record the collection again "
                f"(`{RECORD_COMMAND}`)."]
    ticket_id = ticket_of(state).get("id")
    alike = [request for request in recorded.values()
             if ticket_of(request["state"]).get("id") == ticket_id
             and sorted(request["questions"]) == sorted(questions)]
    if not alike:
        return [f"No recorded call asks {', '.join(map(repr, questions))} about ticket "
                f"{ticket_id}: this is a new call, which only Jev can answer."]
    ours = {"model": model, "state": state, "questions": questions}
    closest = min(alike, key=lambda request: len(differences(ours, request)))
    return [_explain(path, mine, theirs, earlier)
            for path, mine, theirs in differences(ours, closest)]


def differences(ours, theirs, path: str = "") -> list[tuple[str, object, object]]:
    """Where two JSON values differ: (path, ours, theirs), outermost first; a list of memories
    is compared as a whole, since which memories it holds is what a reader needs to know."""
    if is_memory_list(ours) or is_memory_list(theirs):
        return [] if ours == theirs else [(path, ours, theirs)]
    if isinstance(ours, dict) and isinstance(theirs, dict):
        found = []
        for key in list(ours) + [key for key in theirs if key not in ours]:
            found += differences(ours.get(key, _ABSENT), theirs.get(key, _ABSENT),
                                 f"{path}.{key}" if path else key)
        return found
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        found = []
        for index, (mine, recorded) in enumerate(zip(ours, theirs, strict=True)):
            found += differences(mine, recorded, f"{path}[{index}]")
        return found
    return [] if ours == theirs else [(path, ours, theirs)]


_ABSENT = object()


def _explain(path: str, ours, theirs, earlier: RecordingMissError | None) -> str:
    if is_memory_list(ours) or is_memory_list(theirs):
        mine = ", ".join(memory_ticket_ids(ours)) or "none"
        recorded = ", ".join(memory_ticket_ids(theirs)) or "none"
        return (f"Memories: this call carries {mine}; the recorded one carried {recorded}. "
                f"{_why_memories_differ(earlier)}")
    if path.startswith("questions"):
        return (f"The question differs from the recorded one at `{path}`. The recording only "
                f"answers the questions exactly as the collection words them.")
    if path == "model":
        return f"The model is {ours!r}; the recording holds answers from {theirs!r}."
    if theirs is _ABSENT or ours is _ABSENT:
        which = "has" if theirs is _ABSENT else "lacks"
        return f"The state {which} `{path.removeprefix('state.')}`, unlike the recorded call."
    if isinstance(ours, str) and isinstance(theirs, str) and max(len(ours), len(theirs)) > 80:
        # too long to show whole: from just before they differ
        start = max(0, len(os.path.commonprefix([ours, theirs])) - 20)
        ours, theirs = (text if start == 0 else "..." + text[start:] for text in (ours, theirs))
    return (f"`{path.removeprefix('state.')}` is {_short(ours)}; in the recorded call it is "
            f"{_short(theirs)}. The input was edited (notebook 1's DATA or a cell).")


def _why_memories_differ(earlier: RecordingMissError | None) -> str:
    threshold = threshold_in_use()
    if threshold is not None and threshold != RECORDED_REMEMBER_AT:
        return (f"REMEMBER_AT is {threshold} here and was {RECORDED_REMEMBER_AT} in the recorded "
                f"run, so the gate kept other tickets (notebook 2 says which thresholds replay).")
    if earlier is not None:
        return ("A call that should have saved or read a memory missed earlier, so the memories "
                "differ from the recorded run's; restarting the kernel alone will not help.")
    return ("This kernel holds other memories than the recorded run had at this point: restart "
            "the kernel and run the notebook from the top.")


# Where the gate's threshold in use is read, registered by the collection's notebook kernels
# (dev/memorybook_dev/collection_kernel.py); the latest registration counts.
THRESHOLD_READERS: list[Callable[[], object]] = []


def read_threshold_from(reader: Callable[[], object]) -> None:
    """Explain misses with the threshold `reader()` returns: the REMEMBER_AT the gate reads.

    The reader is called when a miss is explained, so a value changed later (in notebook 1, or
    on `memorybook.memory_system`) is the one named.
    """
    THRESHOLD_READERS.append(reader)


def threshold_in_use() -> float | None:
    """REMEMBER_AT as the gate reads it: from the latest reader registered, else (or when it
    returns None) from notebook 1's module if it is imported; None where it cannot be known."""
    value = THRESHOLD_READERS[-1]() if THRESHOLD_READERS else None
    if value is None:
        value = getattr(sys.modules.get("memorybook.memory_system"), "REMEMBER_AT", None)
    return value if isinstance(value, int | float) else None


def how_to_record(reason: str) -> str:
    if reason.startswith("CI"):
        return "CI never calls the API (CI is set): record on your own machine, outside CI."
    return (f"To record it: {RECORD_STEPS} (`make record-dry-run` lists every call the "
            f"recording lacks, with no key).")


def _short(value) -> str:
    text = json.dumps(value, ensure_ascii=False) if value is not _ABSENT else "absent"
    return text if len(text) <= 80 else text[:77] + "..."
