"""The project's fixed facts: where things are, which model and price, which settings it reads.

Every other module takes its paths, constants and environment variable names from here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_PATH = REPO_ROOT / "data" / "tickets.json"
RECORDING_PATH = REPO_ROOT / "json_cache" / "json_cache.json"
PROVENANCE_PATH = REPO_ROOT / "json_cache" / "provenance.json"

TYPESAFE_MODEL = "jev-1.14.0"  # the model every published figure came from
RECORDED_ON = "2026-10-29"  # the day the official run was recorded
USD_PER_BILLION_INPUT_TOKENS = 42  # System One price list; output tokens are free
RECORDED_REMEMBER_AT = 0.5  # the gate threshold of the recorded run
DEFAULT_TIMEOUT_SECONDS = 120.0  # per HTTP operation of a live call

# Environment variables: the first two are the official cookbooks' own; the rest are this repo's.
API_KEY_ENV = "TYPESAFE_API_KEY"
ENDPOINT_ENV = "TYPESAFE_ENDPOINT"
RECORDING_ENV = "MEMORYBOOK_RECORDING"  # use another file than json_cache/json_cache.json
ALLOW_LIVE_IN_CI_ENV = "MEMORYBOOK_LIVE_IN_CI"  # only the loopback tests set this
USAGE_LOG_ENV = "MEMORYBOOK_USAGE_LOG"  # the tests' record of which entries each notebook read
TIMEOUT_ENV = "MEMORYBOOK_TIMEOUT_SECONDS"  # overrides DEFAULT_TIMEOUT_SECONDS


def load_data() -> dict:
    """The customers, tickets and hand labels, exactly as the official cookbook defines them."""
    return json.loads(DATA_PATH.read_text(encoding="utf-8"))


def recording_path() -> Path:
    override = os.environ.get(RECORDING_ENV, "").strip()
    return Path(override).resolve() if override else RECORDING_PATH


def replay_only_reason() -> str | None:
    """Why this process must not call the API, or None when live calls are allowed."""
    if not os.environ.get(API_KEY_ENV, "").strip():
        return f"{API_KEY_ENV} is not set"
    if os.environ.get("CI") and not os.environ.get(ALLOW_LIVE_IN_CI_ENV):
        return "CI is set"
    return None


def shown_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)



def timeout_seconds() -> float:
    """The live client's time-out per HTTP operation: DEFAULT_TIMEOUT_SECONDS or TIMEOUT_ENV."""
    return float(os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_SECONDS)
