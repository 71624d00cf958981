"""The calls a recording lacks: the one list every command shows, and the one command to record.

`make record-dry-run`, a keyless `make record`, `make run`'s miss and `make recording`'s refusal
all call `missing_calls()` and print `describe_missing()`. The calls are replayed in a child
process, with no key, so nothing is sent and nothing of the caller's (its client, its cache, its
memories) is touched; no file is written.

    python -m tools.record.missing [RECORDING]   # the child: the list as JSON on stdout
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from memorybook.config import (
    API_KEY_ENV,
    RECORDING_ENV,
    REPO_ROOT,
    USD_PER_BILLION_INPUT_TOKENS,
    input_cost_usd,
    recording_path,
    shown_path,
)
from memorybook.recording import RecordingError
from memorybook.replay import RECORD_STEPS, mark_as_the_collection


@dataclass
class MissingCall:
    """A call the recording has no answer to: who it is for, what it asks, why it most likely
    missed, a playground link to exactly it, and its estimated input tokens."""

    customer: str
    call: str
    reasons: list[str]
    link: str
    input_tokens: int


@dataclass
class Replayed:
    """What replaying every call found: the keys looked up, in order, and the misses."""

    lookups: list[str] = field(default_factory=list)
    missing: list[MissingCall] = field(default_factory=list)


def missing_calls(recording: Path | None = None) -> Replayed:
    """Replay every call the collection makes on `recording` (default: the one in use) in a
    child process with no key; return the keys looked up and the calls the recording lacks.

    Each customer's calls stop at that customer's first miss: the calls after it depend on its
    answer, which only Jev can give. A recording that cannot be replayed at all (unreadable, a
    damaged entry) raises RecordingError with its own message.
    """
    env = {name: value for name, value in os.environ.items() if name != API_KEY_ENV}
    env[RECORDING_ENV] = str((recording or recording_path()).resolve())
    child = subprocess.run([sys.executable, "-m", "tools.record.missing"], cwd=REPO_ROOT,
                           env=env, capture_output=True, text=True, timeout=600)
    lines = child.stdout.strip().splitlines()
    found = json.loads(lines[-1]) if child.returncode == 0 and lines else {}
    if "error" in found or "missing" not in found:
        last = (child.stderr.strip().splitlines() or ["it exited with no message"])[-1]
        raise RecordingError(found.get("error") or f"Replaying the collection's calls failed: "
                                                   f"{last}")
    return Replayed(found["lookups"], [MissingCall(**miss) for miss in found["missing"]])


def describe_missing(missing: list[MissingCall], recording: Path | None = None) -> list[str]:
    """The lines every command prints for the calls a recording lacks; [] when it lacks none."""
    if not missing:
        return []
    tokens = sum(miss.input_tokens for miss in missing)
    lines = [f"The recording {shown_path(recording or recording_path())} lacks "
             f"{len(missing)} call(s) the collection makes; nothing was sent:"]
    for number, miss in enumerate(missing, 1):
        lines += [f"{number}. {miss.call}  ~{miss.input_tokens:,} input tokens "
                  f"(${input_cost_usd(miss.input_tokens):.6f})",
                  *(f"   - {reason}" for reason in miss.reasons),
                  f"   - The calls after it for {miss.customer} depend on its answer.",
                  f"   Playground: {miss.link}"]
    lines += [f"Estimated input for these: {tokens:,} tokens, ${input_cost_usd(tokens):.6f} at "
              f"${USD_PER_BILLION_INPUT_TOKENS} per billion, plus the calls after them "
              f"(estimated from the recorded requests' sizes).",
              f"To record them: {RECORD_STEPS}."]
    return lines


def _replay_every_call() -> Replayed:
    """In the child: every call, customer by customer, each stopping at its first miss."""
    from memorybook import replay
    from memorybook.example import CUSTOMERS, example_jev
    from tools.record.every_call import run_every_call

    replayed = Replayed()
    example_jev().cache.note_lookups(lambda key, *_: replayed.lookups.append(key))
    tokens_per_byte = _tokens_per_byte()
    for customer in CUSTOMERS:
        try:
            run_every_call([customer])
        except replay.RecordingMissError as miss:
            size = len(json.dumps(miss.request))
            replayed.missing.append(MissingCall(customer, miss.call, miss.reasons, miss.link,
                                                round(size * tokens_per_byte)))
    return replayed


def _tokens_per_byte() -> float:
    """Input tokens per byte of request in the recording in use: how a missing call is priced."""
    from memorybook.recording import read_recording, recorded_requests

    entries = read_recording(recording_path())
    requests = recorded_requests()
    sizes = {key: len(json.dumps(request)) for key, request in requests.items() if key in entries}
    tokens = sum(entries[key]["usage"]["input_tokens"] for key in sizes)
    return tokens / sum(sizes.values()) if sizes else 0.0


if __name__ == "__main__":
    os.environ.pop(API_KEY_ENV, None)  # never sends: a miss is noted, not asked
    mark_as_the_collection()  # a miss here is the collection's: `make record` records it
    try:
        replayed = _replay_every_call()
    except RecordingError as error:  # the file itself: its message says what is wrong
        print(json.dumps({"error": str(error)}))
    else:
        print(json.dumps({"lookups": replayed.lookups,
                          "missing": [vars(miss) for miss in replayed.missing]}))
