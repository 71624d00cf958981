"""Replay-only calls: a client with no network behind it, and misses that explain themselves.

In replay mode (memorybook/jev.py: no key, and always in CI) the SDK client sends through
`ReplayOnlyTransport`. The SDK reaches a transport only when the recording had no answer, so
every request this transport sees is a miss. It sends nothing; it raises `RecordingMissError`,
which says which call missed, the most likely reason (found by comparing the call with the
requests behind the recorded answers, and with the misses this process met before), a
playground link to exactly that call, and how to record it: with `make record` in the
collection's own notebooks and tools (they say so: `mark_as_the_collection()`), in record mode
in an app's tests and scripts; a service is told how to run live (`how_to_serve_live`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NamedTuple

import httpx2
from cooksafe import make_playground_link

from memorybook.config import (
    API_KEY_ENV,
    RECORD_MODE_ENV,
    RECORDING_ENV,
    RECORDING_PATH,
    REMEMBER_AT,
    provenance_path,
    recording_path,
    shown_path,
)
from memorybook.recording import (
    RecordingError,
    cache_key,
    customer_of,
    describe_call,
    is_memory_list,
    memory_ticket_ids,
    recorded_requests,
    ticket_of,
)

# The one command that records the calls the collection's recording lacks, named by every
# message about such a miss (the kernels', `make run`'s, `make record-dry-run`'s, a keyless
# `make record`'s, the rebuild's).
RECORD_COMMAND = f"{API_KEY_ENV}=... make record"
RECORD_STEPS = f"`{RECORD_COMMAND}`, read its report, then `make accept-recording`"

# Whether this process is one of the collection's own notebooks or tools, whose recording
# `make record` records. Said explicitly (mark_as_the_collection(): its kernel set-up and
# tools/ call it), never guessed from paths: an app run from its own folder with the
# collection's environment reads the same json_cache.json, and records into a file of its own.
in_the_collection = False


def mark_as_the_collection() -> None:
    """Mark this process as one of the collection's notebook kernels or tools: a miss in the
    collection's recording then says to record it with `make record`."""
    global in_the_collection
    in_the_collection = True


class RecordingMissError(RecordingError):
    """A call that is not in the recording, made while only replaying is allowed.

    `summary`, `reasons`, `link` and `how_to_record` are the parts of the message; `call` names
    the call in a reader's words; `request` is what it asks (model, state, questions);
    `reason`, why nothing could be sent. A service shows `how_to_serve_live` instead of
    `how_to_record`: it records nothing.
    """

    def __init__(self, summary: str, reasons: list[str], link: str, how_to_record: str,
                 call: str = "", request: dict | None = None, *,
                 logged: str | None = None, reason: str = "replay was asked for") -> None:
        self.summary, self.reasons, self.link, self.how_to_record, self.call = (
            summary, list(reasons), link, how_to_record, call)
        self.request, self.reason = request or {}, reason
        super().__init__(self._message(), logged=logged)

    @property
    def how_to_serve_live(self) -> str:
        """What a service says of this miss in place of `how_to_record`."""
        return how_to_serve_live(self.reason)

    def _message(self) -> str:
        return "\n".join([
            self.summary, *(f"- {reason}" for reason in self.reasons), self.how_to_record,
            f"Ask Jev this exact call in the TypeSafe playground: {self.link}",
        ])

    def name_threshold(self, remember_at: float) -> None:
        """Put first among the likely causes the gate's threshold, when the call carried other
        memories than the recorded one (or, a gate, another answer to judge) and `remember_at`
        is not the recorded run's."""
        if remember_at == REMEMBER_AT or not any(
                reason.startswith(("Memories:", "Jev's answer:")) for reason in self.reasons):
            return
        self.reasons.insert(0, threshold_reason(remember_at))
        RecordingError.__init__(self, self._message(), logged=self.logged)


def threshold_reason(remember_at: float) -> str:
    """The likely cause of a miss whose memories differ, when the threshold is not the recorded
    run's."""
    return (f"REMEMBER_AT is {remember_at} here and was {REMEMBER_AT} in the recorded "
            f"run, so the gate kept other tickets (notebook 2 says which thresholds replay).")


class ReplayOnlyTransport(httpx2.BaseTransport):
    """An HTTP transport with no network behind it: every request it is handed is a recording miss.

    The error is not an HTTP error, so the SDK's retry policy does not retry it: the cell fails at
    once, and nothing is written to the recording.
    """

    def __init__(self, reason: str, recording: Path | None = None) -> None:
        self.reason = reason
        self.recording = recording_path() if recording is None else recording
        self.misses: list[Missed] = []  # its Jev's, for explain_miss()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            body = json.loads(_decoded(request))
        except (ValueError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            raise RecordingError(f"A request with an unreadable body ({request.method} "
                                 f"{request.url.path}) reached the replay-only transport.")
        raise explain_miss(body, self.reason, self.recording, self.misses)


def _decoded(request: httpx2.Request) -> bytes:
    content = request.read()
    if request.headers.get("content-encoding") == "zstd":  # only with typesafe-sdk[zstd]
        from backports import zstd

        return zstd.decompress(content)
    return content


class Missed(NamedTuple):
    """What a later miss is told of an earlier one: whose call it was, and which, by its ids
    alone (a service's next request may be another client's; a long-running one keeps a
    thousand of these, not their states)."""

    customer: object
    call: str


# The misses met so far, oldest first, the last MISSES_KEPT of them (a service may run for
# months): a customer's later call can fail only because an earlier call of theirs did (its
# memory was never saved), and its message then names that first miss. Customers are
# independent: no miss explains another's. Each Jev keeps its own (ReplayOnlyTransport.misses),
# so that one made afresh, with memories of its own, is not told of another's; this list is
# for the callers that have none (a notebook kernel's).
MISSES_SO_FAR: list[Missed] = []
MISSES_KEPT = 1000
REASONS_SHOWN = 10  # of a miss's differences from the closest recorded call


def explain_miss(body: dict, reason: str, recording: Path | None = None,
                 misses: list[Missed] | None = None) -> RecordingMissError:
    """The error for one missed request: which call, why it most likely missed, what to do.

    `recording` is the file that lacked it (by default the one $MEMORYBOOK_RECORDING names, else
    the collection's); `misses`, those met before it (by default MISSES_SO_FAR), which it
    joins."""
    recording = recording_path() if recording is None else recording
    misses = MISSES_SO_FAR if misses is None else misses
    state, questions, model = body.get("state"), body.get("questions") or {}, body.get("model")
    link = make_playground_link(state, questions, models=[model] if model else None)
    call, by_ids = describe_call(state, questions), describe_call(state, questions, words=False)
    customer = customer_of(state).get("id")
    earlier = next((miss for miss in misses if miss.call != by_ids and miss.customer == customer),
                   None)
    reasons = likely_reasons(state, questions, model, earlier, recording)
    if earlier is not None:
        reasons.append(f"Earlier in this process another call for customer {customer} "
                       f"missed: {earlier.call}. Calls "
                       f"made after it can differ from the recorded run because it failed; "
                       f"fix that one first.")

    def summary(call: str) -> str:
        return (f"The recording {shown_path(recording)} has no answer to this call: {call}. "
                f"Nothing was sent, and the recording is unchanged.")

    miss = RecordingMissError(
        summary(call), reasons, link, how_to_record(reason, recording), call,
        {"model": model, "state": state, "questions": questions},
        logged=summary(by_ids), reason=reason,
    )
    misses.append(Missed(customer, by_ids))
    del misses[:-MISSES_KEPT]
    return miss


def likely_reasons(state, questions: dict, model: str | None,
                   earlier: Missed | None = None,
                   recording: Path | None = None) -> list[str]:
    """Why a call missed, found by comparing it with the requests behind the recorded answers
    (provenance.json beside the recording; an app's own recording has none)."""
    recording = recording_path() if recording is None else recording
    if not recording.exists():
        return [f"There is no file at {shown_path(recording)}, so no call can be answered: "
                f"point {RECORDING_ENV} at a json_cache.json (the collection's is "
                "json_cache/json_cache.json in its repository)."]
    try:
        recorded = recorded_requests(provenance_path(recording))
    except FileNotFoundError:  # an app's own recording, or one copied without its provenance
        return [f"Nothing beside {shown_path(recording)} says which requests it answers (no "
                "provenance.json), so this call cannot be compared with the recorded ones: "
                "most likely a new ticket, or a state or question that differs from when the "
                "recording was made."]
    key = cache_key(model or "", json.dumps(state), json.dumps(questions))
    if key in recorded:
        again = f" or record the collection again (`{RECORD_COMMAND}`)" if in_the_collection else ""
        return [f"The collection makes this call, but {shown_path(recording)} lacks its "
                f"answer: the file was changed or replaced. Restore it (`git checkout -- "
                f"{shown_path(recording)}`){again}."]
    ticket_id = ticket_of(state).get("id")
    alike = [request for request in recorded.values()
             if ticket_of(request["state"]).get("id") == ticket_id
             and sorted(request["questions"]) == sorted(questions)]
    if not alike:
        return [f"No recorded call asks {', '.join(map(repr, questions))} about ticket "
                f"{ticket_id}: this is a new call, which only Jev can answer."]
    ours = {"model": model, "state": state, "questions": questions}
    closest = min(alike, key=lambda request: len(differences(ours, request)))
    found = differences(ours, closest)
    if not found:  # equal values, other JSON text: the keys come in another order
        return ["This call holds what a recorded one does, its keys in another order: an "
                "answer is filed under the exact JSON of its request, so send the keys in the "
                f"recorded order ({_order_of(closest['state'])})."]
    reasons = [_explain(path, mine, theirs, earlier)
               for path, mine, theirs in found[:REASONS_SHOWN]]
    if len(found) > REASONS_SHOWN:
        reasons.append(f"And {len(found) - REASONS_SHOWN:,} more differences from the recorded "
                       "call.")
    return reasons


def _order_of(value, depth: int = 2) -> str:
    """A JSON object's keys in order, those of its objects in brackets, `depth` levels down."""
    if not isinstance(value, dict) or depth == 0:
        return ""
    return ", ".join(f"{key} [{inner}]" if (inner := _order_of(item, depth - 1)) else key
                     for key, item in value.items())


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


def _explain(path: str, ours, theirs, earlier: Missed | None) -> str:
    if is_memory_list(ours) or is_memory_list(theirs):
        mine = ", ".join(memory_ticket_ids(ours)) or "none"
        recorded = ", ".join(memory_ticket_ids(theirs)) or "none"
        return (f"Memories: this call carries {mine}; the recorded one carried {recorded}. "
                f"{_why_memories_differ(earlier)}")
    if path.startswith("state.jev_answered"):  # Jev's words, never the reader's input
        return (f"Jev's answer: the gate reads the routing call's answer, here "
                f"{_short(ours)}, and in the recorded call {_short(theirs)}: that call was "
                f"asked with other memories or input. {_why_memories_differ(earlier)}")
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
            f"{_short(theirs)}. The input was edited (in the collection: notebook 1's DATA or "
            "a cell); put it back to replay the recorded answer.")


def _why_memories_differ(earlier: Missed | None) -> str:
    if earlier is not None:
        return ("A call that should have saved or read a memory missed earlier, so the memories "
                "differ from the recorded run's; restarting the kernel alone will not help.")
    return ("This process holds other memories than the recorded run had at this point (in a "
            "notebook: restart the kernel and run it from the top; with a store kept on disk: "
            "start from an empty one, as the recorded run did).")


def how_to_record(reason: str, recording: Path | None = None) -> str:
    """How to add a missed call to `recording`: in the collection's own notebooks and tools,
    its committed one with `make record`; anywhere else, an app's own, in record mode."""
    if reason.startswith("CI"):
        return "CI never calls the API (CI is set): record on your own machine, outside CI."
    recording = recording_path() if recording is None else recording
    the_collections = recording.resolve() == RECORDING_PATH.resolve()
    if the_collections and in_the_collection:
        return (f"To record it: {RECORD_STEPS} (`make record-dry-run` lists every call the "
                f"recording lacks, with no key).")
    into = (f"a recording of your app's own: run again with {API_KEY_ENV} set, {RECORDING_ENV} "
            "naming your app's json_cache.json" if the_collections else
            f"{shown_path(recording)}: run again with {API_KEY_ENV} set, "
            f"{RECORDING_ENV}={shown_path(recording)}")
    return (f"To record it into {into} and {RECORD_MODE_ENV}=record (or "
            f"Jev(recording=..., mode=\"record\")): each call it lacks is asked live and its "
            f"answer added to it; commit the file.")


def how_to_serve_live(reason: str) -> str:
    """What a service's miss says to do: a service records nothing (memorybook/service_settings.py
    refuses record mode), so a call its recording lacks is answered only by running it live."""
    if reason.startswith("CI"):
        return "CI never calls the API (CI is set): run the service live outside CI."
    return (f"To answer it, run the service live: start it again with {API_KEY_ENV} set, and "
            f"{RECORDING_ENV} and {RECORD_MODE_ENV} unset (a service never records).")


def _short(value) -> str:
    text = json.dumps(value, ensure_ascii=False) if value is not _ABSENT else "absent"
    return text if len(text) <= 80 else text[:77] + "..."
