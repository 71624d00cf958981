"""Plumbing the notebooks share: the recording, the client that replays it, cost and chart style.

Nothing here is part of the memory technique the notebooks teach; it is what lets every notebook
replay the committed recording with no key and no network, and fail loudly when it cannot.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import tempfile
from pathlib import Path

import httpx2
from cooksafe import JsonCache
from cooksafe.cache import MAX_KEY_CHARS
from typesafe_sdk import (
    TypeSafeAPIConnectionError,
    TypeSafeAPIError,
    TypeSafeAPIResponseValidationError,
    TypeSafeAPITimeoutError,
    TypeSafeAuthenticationError,
    TypeSafeClient,
    TypeSafeError,
    TypeSafeInternalServerError,
    TypeSafeRateLimitError,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_PATH = REPO_ROOT / "data" / "tickets.json"
RECORDING_PATH = REPO_ROOT / "json_cache" / "json_cache.json"
PROVENANCE_PATH = REPO_ROOT / "json_cache" / "provenance.json"

TYPESAFE_MODEL = "jev-1.14.0"  # the model every published figure came from
RECORDED_ON = "2026-10-29"  # the day the official run was recorded
USD_PER_BILLION_INPUT_TOKENS = 42  # System One price list; output tokens are free

# Environment variables: the first two are the official cookbooks' own; the rest are this repo's.
API_KEY_ENV = "TYPESAFE_API_KEY"
ENDPOINT_ENV = "TYPESAFE_ENDPOINT"
RECORDING_ENV = "MEMORYBOOK_RECORDING"  # use another file than json_cache/json_cache.json
ALLOW_LIVE_IN_CI_ENV = "MEMORYBOOK_LIVE_IN_CI"  # only the loopback tests set this
USAGE_LOG_ENV = "MEMORYBOOK_USAGE_LOG"  # the tests' record of which entries each notebook read
TIMEOUT_ENV = "MEMORYBOOK_TIMEOUT_SECONDS"  # per HTTP operation in live mode; default 120

RECORD_HINT = "set TYPESAFE_API_KEY and run `make record` (README, 'Recording new answers')"


class RecordingError(RuntimeError):
    """The recording cannot be used as it is; the message says which file and what to do."""


class RecordingMissError(RecordingError):
    """A call that is not in the recording, made while only replaying is allowed."""


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


def describe_call(body: dict) -> str:
    """A reader's description of one System One request: which ticket, which questions."""
    state = body.get("state")
    state = state if isinstance(state, dict) else {}
    ticket = state.get("ticket") or state.get("request", {}).get("ticket") or {}
    customer = state.get("customer") or state.get("request", {}).get("customer") or {}
    questions = ", ".join(body.get("questions") or {}) or "none"
    extra = [key for key in state if key not in ("customer", "ticket")]
    with_keys = f", state also holds {', '.join(extra)}" if extra else ""
    return (
        f"ticket {ticket.get('id', '?')} ({ticket.get('subject', 'no subject')!r}) of customer "
        f"{customer.get('id', '?')}, questions: {questions}{with_keys}, model {body.get('model')}"
    )


class ReplayOnlyTransport(httpx2.BaseTransport):
    """An HTTP transport with no network behind it: every request it is handed is a recording miss.

    The SDK hands it a request only when the cache had no entry, so reaching it means the
    notebook asked Jev something the recording does not hold. The error is not an HTTP error, so
    the SDK's retry policy does not retry it: the cell fails at once.
    """

    def __init__(self, reason: str, recording: Path) -> None:
        self.reason = reason
        self.recording = recording

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            call = describe_call(json.loads(request.read()))
        except (ValueError, UnicodeDecodeError):
            call = f"{request.method} {request.url.path} (body not readable)"
        raise RecordingMissError(
            f"Not in the recording {shown_path(self.recording)}: {call}.\n"
            f"Only replay is allowed here ({self.reason}), so nothing was sent.\n"
            f"To record this call, {RECORD_HINT}."
        )


def make_client() -> TypeSafeClient:
    """The real SDK client: live with a key; otherwise every request it would send is a miss."""
    reason = replay_only_reason()
    if reason is None:
        explain_api_failures_in_notebooks()
        return TypeSafeClient(
            api_key=os.environ[API_KEY_ENV],
            base_url=os.environ.get(ENDPOINT_ENV) or None,
            timeout=float(os.environ.get(TIMEOUT_ENV) or 120),
        )
    return TypeSafeClient(
        api_key="cache-only",
        transport=ReplayOnlyTransport(reason, recording_path()),
        compression=False,
    )


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


def describe_api_failure(error: TypeSafeError) -> str:
    """What went wrong with a live call, in a sentence a notebook reader can act on."""
    endpoint = os.environ.get(ENDPOINT_ENV) or "the default TypeSafe endpoint"
    status = getattr(error, "status", None)
    if isinstance(error, TypeSafeAuthenticationError):
        what = f"the API refused the key (HTTP 401): check {API_KEY_ENV}"
    elif isinstance(error, TypeSafeRateLimitError):
        what = "the API kept answering 'too many requests' (HTTP 429) after the SDK's retries, " \
               "which waited as long as the API asked: try again in a minute"
    elif isinstance(error, TypeSafeInternalServerError):
        what = f"the API failed (HTTP {status}) on every retry the SDK made: try again later"
    elif isinstance(error, TypeSafeAPITimeoutError):
        what = f"no answer from {endpoint} in time, on every retry: try again, or raise " \
               f"{TIMEOUT_ENV}"
    elif isinstance(error, TypeSafeAPIConnectionError):
        what = f"could not connect to {endpoint}: check {ENDPOINT_ENV} and the network"
    elif isinstance(error, TypeSafeAPIResponseValidationError):
        field = getattr(error, "field_path", "") or "the whole body"
        what = f"the API answered with a body the SDK could not read (at {field})"
    elif isinstance(error, TypeSafeAPIError):
        what = f"the API refused the request (HTTP {status}): {error}"
    else:
        what = str(error)
    return f"Live call failed: {what}. Nothing was recorded for this call."


def explain_api_failures_in_notebooks() -> None:
    """In a notebook, show a failed live call as one clear line instead of an SDK traceback."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return

    def show(shell, exc_type, error, traceback, tb_offset=None):
        print(describe_api_failure(error))

    shell.set_custom_exc((TypeSafeError,), show)


def shown_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def cache_key(model: str, state_json: str, questions_json: str) -> str:
    """The key cooksafe's JsonCache files a `_system_one(model, state, questions)` call under."""
    key = "|".join(["_system_one", model, state_json, questions_json])
    return hashlib.sha256(key.encode()).hexdigest() if len(key) > MAX_KEY_CHARS else key


def read_recording(path: Path | None = None) -> dict:
    """The recording's entries ({} before its first call): reading them is not a notebook's use."""
    path = recording_path() if path is None else path
    return _load_entries(path) if path.exists() else {}


def recording_summary(path: Path | None = None) -> str:
    """Where the answers come from, and what the recorded run cost."""
    path = recording_path() if path is None else path
    entries = read_recording(path)
    models = ", ".join(sorted({entry["model"] for entry in entries.values()})) or "no model yet"
    input_tokens = sum(entry["usage"].get("input_tokens") or 0 for entry in entries.values())
    cost = input_tokens * USD_PER_BILLION_INPUT_TOKENS / 1e9
    provenance = json.loads(PROVENANCE_PATH.read_text(encoding="utf-8"))
    text = path.read_bytes() if path.exists() else b""
    if set(provenance["entries"]) != set(entries):
        origin = "not the calls json_cache/provenance.json describes"
    elif provenance["origin"] == "rebuilt" and (
        hashlib.sha256(text).hexdigest() != provenance["recording_sha256"]
    ):
        origin = "the same calls as the rebuilt recording, with other answers"
    elif provenance["origin"] == "rebuilt":
        origin = f"recorded {provenance['recorded_on']}, rebuilt from the published figures"
    else:
        origin = "recorded live, every value measured"
    doing = "Replaying" if replay_only_reason() else "Live: new calls are added to"
    return (
        f"{doing} {shown_path(path)}: {len(entries)} calls to {models} ({origin}).\n"
        f"The recorded run read {input_tokens:,} input tokens: ${cost:.4f} at "
        f"${USD_PER_BILLION_INPUT_TOKENS} per billion (output tokens are free)."
    )


# Charts: one style for every notebook. Figures are rendered to PNG here, with no software
# version or date in the file, so a re-run stores the same bytes.
FIGURE_SIZE = (8.0, 3.6)
FIGURE_DPI = 100
COLOURS = {"right": "#2f6f4f", "wrong": "#b5452f"}  # the expected team, and any other


def new_figure(ncols: int = 1, **subplot_kwargs):
    """A figure in the collection's style: fixed size, no top or right spines, a light x-grid."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=FIGURE_SIZE, dpi=FIGURE_DPI, **subplot_kwargs)
    for ax in axes if ncols > 1 else [axes]:
        ax.spines[["top", "right"]].set_visible(False)
        ax.grid(axis="x", color="#e3e6ea", linewidth=0.8)
        ax.set_axisbelow(True)
        ax.tick_params(labelsize=9)
    return fig, axes


def show_figure(fig) -> None:
    """Display a figure as a PNG with stable bytes, then close it."""
    import matplotlib.pyplot as plt
    from IPython.display import Image, display

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    display(Image(data=buffer.getvalue(), format="png"))
