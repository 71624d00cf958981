"""The project's fixed facts: where things are, which model and price, which settings it reads.

Every other module takes its paths, constants and environment variable names from here.
"""

from __future__ import annotations

import math
import os
import subprocess
from pathlib import Path

from memorybook.errors import MemorybookError

REPO_ROOT = Path(__file__).resolve().parent.parent  # the checkout; site-packages when installed
RECORDING_FOLDER = REPO_ROOT / "json_cache"  # at the top of the collection, beside notebooks/
RECORDING_PATH = RECORDING_FOLDER / "json_cache.json"
PROVENANCE_PATH = RECORDING_FOLDER / "provenance.json"
# `make accept-recording` stages the new recording and provenance in this folder beside them,
# then puts both in place at once; the next read finishes (or undoes) an interrupted one.
ACCEPTING_FOLDER_NAME = ".accepting"

TYPESAFE_MODEL = "jev-1.14.0"  # pinned: the published numbers came from it
RECORDED_ON = "2026-10-29"  # the day the official run was recorded
USD_PER_BILLION_INPUT_TOKENS = 42  # System One price list; output tokens are free
REMEMBER_AT = 0.5  # the gate's threshold: the official page's, and the recorded run's
DEFAULT_TIMEOUT_SECONDS = 120.0  # for the whole of a live call, retries included
MAX_TIMEOUT_SECONDS = 86_400.0  # a day: longer ones overflow the clocks of sockets and threads

# Environment variables: the first two are the official cookbooks' own; the rest are this repo's.
API_KEY_ENV = "TYPESAFE_API_KEY"
ENDPOINT_ENV = "TYPESAFE_ENDPOINT"
RECORDING_ENV = "MEMORYBOOK_RECORDING"  # a recording asked for (an app's own, or another file)
RECORD_MODE_ENV = "MEMORYBOOK_RECORD_MODE"  # replay, record or live (memorybook/jev.py)
ALLOW_LIVE_IN_CI_ENV = "MEMORYBOOK_LIVE_IN_CI"  # only the loopback tests set this
USAGE_LOG_ENV = "MEMORYBOOK_USAGE_LOG"  # the tests' record of which entries each notebook read
TIMEOUT_ENV = "MEMORYBOOK_TIMEOUT_SECONDS"  # overrides DEFAULT_TIMEOUT_SECONDS
ALLOW_PLAIN_HTTP_ENV = "MEMORYBOOK_ALLOW_PLAIN_HTTP"  # "1": send the key over http to any host




class ConfigError(MemorybookError, ValueError):
    """A setting or data file this project reads is unusable; the message names it and why."""


def input_cost_usd(input_tokens: float) -> float:
    """What System One charges for this many input tokens, in USD; output tokens are free."""
    return input_tokens * USD_PER_BILLION_INPUT_TOKENS / 1e9


def timeout_seconds() -> float:
    """Seconds a live call may take, retries included: $MEMORYBOOK_TIMEOUT_SECONDS, else 120."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_SECONDS
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value <= 0 or value > MAX_TIMEOUT_SECONDS:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise ConfigError(
            f"{TIMEOUT_ENV}={shown!r} is not a positive number of seconds up to "
            f"{MAX_TIMEOUT_SECONDS:,.0f} (a day); set it to e.g. 120, or unset it for the default "
            "of 120."
        )
    return value


def recording_path() -> Path:
    """The recording in use: $MEMORYBOOK_RECORDING, else the collection's json_cache.json."""
    override = os.environ.get(RECORDING_ENV, "").strip()
    return Path(override).resolve() if override else RECORDING_PATH


def provenance_path(recording: Path | None = None) -> Path:
    """provenance.json beside `recording`; beside the collection's own recording, the
    collection's. Without `recording`, the one beside the recording in use, else the
    collection's: what the collection's notebooks and tools read while `make record` fills a
    new recording, which has none of its own until it is accepted."""
    if recording is None:
        beside = provenance_path(recording_path())
        return beside if beside.is_file() else PROVENANCE_PATH
    if recording.resolve() == RECORDING_PATH.resolve():
        return PROVENANCE_PATH
    return recording.with_name("provenance.json")


def missing_recording_problem(path: Path) -> str | None:
    """Why the recording cannot be found, when memorybook runs without the collection around it
    (installed with pip and no $MEMORYBOOK_RECORDING); None when its absence is only a recording
    not made yet."""
    if path != RECORDING_PATH or RECORDING_FOLDER.is_dir():
        return None
    return (f"No recording at {path}: memorybook, installed without the collection's "
            f"json_cache/ folder, has none of its own. Set {RECORDING_ENV} to the path of a "
            "json_cache.json (the collection's is json_cache/json_cache.json in its repository).")


def accepting_folder(folder: Path) -> Path:
    """Where an accept stages the files it replaces in `folder` (see ACCEPTING_FOLDER_NAME)."""
    return folder / ACCEPTING_FOLDER_NAME


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


def tracked_by_git(path: Path) -> bool:
    """Whether git could restore this path: a file of this repository that git tracks."""
    if not path.resolve().is_relative_to(REPO_ROOT):
        return False
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--error-unmatch", "--", shown_path(path)],
            cwd=REPO_ROOT, capture_output=True, timeout=10,
        )
    except (OSError, subprocess.SubprocessError):  # no git here
        return False
    return listed.returncode == 0


def restore_hint(path: Path) -> str:
    """', or restore it with `git checkout -- PATH`' for a file git tracks, else ''."""
    if not tracked_by_git(path):
        return ""
    return f", or restore it with `git checkout -- {shown_path(path)}`"
