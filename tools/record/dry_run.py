"""`make record-dry-run`: which calls a live recording would send, and what they would cost.

Nothing is sent and no file is written: the calls are replayed from the committed recording, with
no key (`tools.record.missing`), and each lookup is noted; those the new recording lacks are the
ones a live run would send. Calls the committed recording lacks too (after an edit of a ticket or
a question) are listed with their likely cause and estimated cost, and the dry run fails.
"""

from __future__ import annotations

import sys
from pathlib import Path

from memorybook.config import (
    PROVENANCE_PATH,
    RECORDING_PATH,
    TYPESAFE_MODEL,
    USD_PER_BILLION_INPUT_TOKENS,
    input_cost_usd,
    shown_path,
)
from memorybook.recording import RecordingError, read_recording, recorded_calls
from tools.record.missing import describe_missing, missing_calls


def dry_run(output: Path) -> int:
    """Replay the calls from the committed recording and list the ones the new one lacks."""
    try:
        replayed = missing_calls(RECORDING_PATH)
    except RecordingError as error:
        print(f"Dry run stopped: {error}", file=sys.stderr)
        return 1
    if replayed.missing:
        print("\n".join(describe_missing(replayed.missing, RECORDING_PATH)), file=sys.stderr)
        return 1
    keys = list(dict.fromkeys(replayed.lookups))
    have = read_recording(output)
    committed = read_recording(RECORDING_PATH)
    calls = recorded_calls()
    live = [key for key in keys if key not in have]
    tokens = sum(committed[key]["usage"]["input_tokens"] for key in live)
    print(f"A recording into {shown_path(output)} would send {len(live)} of the "
          f"collection's {len(keys)} calls to {TYPESAFE_MODEL}:")
    for key in live:
        print(f"  {calls.get(key, key)}  ~{committed[key]['usage']['input_tokens']:,} tokens")
    print(f"Estimated input: {tokens:,} tokens, ${input_cost_usd(tokens):.4f} at "
          f"${USD_PER_BILLION_INPUT_TOKENS} per billion; output tokens are free.\n(Per-call "
          f"counts come from the committed recording, where only the total is published; see "
          f"{shown_path(PROVENANCE_PATH)}.)")
    return 0
