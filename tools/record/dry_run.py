"""`make record-dry-run`: which calls a live recording would send, and what they would cost.

Nothing is sent: the calls are replayed from the committed recording, with no key, and each
lookup is noted; those the new recording lacks are the ones a live run would send.
"""

from __future__ import annotations

import os
from pathlib import Path

from memorybook.config import (
    RECORDING_ENV,
    RECORDING_PATH,
    USAGE_LOG_ENV,
    USD_PER_BILLION_INPUT_TOKENS,
    input_cost_usd,
    shown_path,
)
from memorybook.memory_system import TYPESAFE_MODEL
from memorybook.recording import read_recording, recorded_calls
from tools.record.calls import run_every_call


def dry_run(output: Path) -> int:
    """Replay the calls from the committed recording and list the ones the new one lacks."""
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"memorybook-dry-run-{os.getpid()}.txt"
    log.unlink(missing_ok=True)
    os.environ.update({USAGE_LOG_ENV: str(log), RECORDING_ENV: str(RECORDING_PATH)})
    os.environ.pop("TYPESAFE_API_KEY", None)  # a dry run never calls the API
    run_every_call()
    keys = list(dict.fromkeys(log.read_text(encoding="utf-8").split()))
    log.unlink()
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
          f"json_cache/provenance.json.)")
    return 0
