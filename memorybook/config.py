"""The project's fixed facts: where things are, which model and price.

Every other module takes its paths and constants from here; the settings read from the
environment are memorybook/settings.py's.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

# The settings read from the environment are memorybook/settings.py's; their variables' names
# are importable from here too, as they were before it.
from memorybook.settings import ALLOW_LIVE_IN_CI_ENV as ALLOW_LIVE_IN_CI_ENV
from memorybook.settings import ALLOW_PLAIN_HTTP_ENV as ALLOW_PLAIN_HTTP_ENV
from memorybook.settings import API_KEY_ENV as API_KEY_ENV
from memorybook.settings import DEFAULT_TIMEOUT_SECONDS as DEFAULT_TIMEOUT_SECONDS
from memorybook.settings import ENDPOINT_ENV as ENDPOINT_ENV
from memorybook.settings import MAX_TIMEOUT_SECONDS as MAX_TIMEOUT_SECONDS
from memorybook.settings import RECORD_MODE_ENV as RECORD_MODE_ENV
from memorybook.settings import RECORDING_ENV as RECORDING_ENV
from memorybook.settings import TIMEOUT_ENV as TIMEOUT_ENV
from memorybook.settings import USAGE_LOG_ENV as USAGE_LOG_ENV
from memorybook.settings import ConfigError as ConfigError
from memorybook.settings import Settings

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

def input_cost_usd(input_tokens: float) -> float:
    """What System One charges for this many input tokens, in USD; output tokens are free."""
    return input_tokens * USD_PER_BILLION_INPUT_TOKENS / 1e9


def timeout_seconds(settings: Settings | None = None) -> float:
    """Seconds a live call may take, retries included: the settings' (by default the
    environment's: $MEMORYBOOK_TIMEOUT_SECONDS, else 120)."""
    return (settings or Settings.from_environment()).timeout_seconds


def recording_path(settings: Settings | None = None) -> Path:
    """The recording in use: the settings' (by default $MEMORYBOOK_RECORDING), else the
    collection's json_cache.json."""
    named = (settings or Settings.from_environment()).recording
    return named.resolve() if named else RECORDING_PATH


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


def replay_only_reason(settings: Settings | None = None) -> str | None:
    """Why these settings (by default the environment's) must not call the API, or None when
    live calls are allowed."""
    settings = settings or Settings.from_environment()
    if not settings.api_key:
        return f"{API_KEY_ENV} is not set"
    if settings.in_ci and not settings.live_in_ci:
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
