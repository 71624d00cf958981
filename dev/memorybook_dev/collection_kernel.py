"""What the collection's notebook kernels do before their first cell runs.

An IPython extension, loaded by the kernel configuration `make setup` writes into the virtual
environment (dev/memorybook_dev/ipython_kernel_config.py), and only in kernels whose working
folder is this repository's notebooks/: JupyterLab's, nbval's, `make run`'s, nbconvert's. A
copy of a notebook anywhere else runs as it is written. Loaded, it:

- removes TYPESAFE_API_KEY from the kernel's environment in CI, so nothing can be sent;
- marks the kernel as the collection's (memorybook.replay.mark_as_the_collection): a miss says
  to record the collection's recording with `make record`;
- shows a call the recording lacks, a damaged recording or a failed live call as its explanation
  (the call, its likely cause, a playground link to exactly that call, how to record it) instead
  of a traceback; the cell still fails. Notebook 1's miss keeps its class, the page's own
  NotInCacheError, so that the error a reader sees is the one the code they copy raises;
- checks every answer notebook 1's own cache (cooksafe's plain `JsonCache`, which checks
  nothing) hands back, as the library's cache does for notebooks 2-10: once a cell has made
  `json_cache`, it is wrapped in `AnswersChecked`, so a damaged entry (an answer outside the
  question's options, a probability outside 0-1, a missing `usage`) stops the cell that reads
  it, naming the file and the call; notebook 1's cells are unchanged.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from types import TracebackType

from memorybook.api_errors import describe_api_failure
from memorybook.config import API_KEY_ENV, replay_only_reason
from memorybook.errors import MemorybookError
from memorybook.jev import request_json
from memorybook.recording import RecordingError, check_answer, read_recording
from memorybook.recording.cache import cache_key, cooksafe_key, system_one_request
from memorybook.replay import explain_miss, mark_as_the_collection

# The collection's recording, as notebook 1 finds it from notebooks/: json_cache/ one folder up
NOTEBOOK_1_CACHE = Path("../json_cache/json_cache.json")


def load_ipython_extension(shell) -> None:
    reason = replay_only_reason()
    if reason is not None and reason.startswith("CI"):
        os.environ.pop(API_KEY_ENV, None)  # notebook 1 then builds no client at all
    mark_as_the_collection()

    def show_explained(shell, exc_type, error, traceback, tb_offset=None):
        explained = explanation(shell, error, traceback, reason or f"{API_KEY_ENV} is not set")
        if explained is None:
            shell.showtraceback((exc_type, error, traceback), tb_offset=tb_offset)
        else:
            shell.showtraceback((type(explained), explained, None), exception_only=True)

    shell.set_custom_exc((Exception,), show_explained)
    shell.events.register("post_run_cell", lambda result: check_notebook_1s_answers(shell))


def check_notebook_1s_answers(shell) -> None:
    """Wrap notebook 1's own cache, once a cell has made it, so that its answers are checked."""
    from cooksafe import JsonCache

    cache = shell.user_ns.get("json_cache")
    if type(cache) is JsonCache:  # not the collection's CheckedJsonCache, nor wrapped already
        shell.user_ns["json_cache"] = AnswersChecked(cache)


class AnswersChecked:
    """A cooksafe JsonCache whose System One answers are checked as the collection's are
    (memorybook.recording.check_answer): a recorded one when it is read, a live one before the
    cache keeps it. Everything else is the cache's own (`path` included)."""

    def __init__(self, cache) -> None:
        self._cache = cache

    def __getattr__(self, name: str):
        return getattr(self._cache, name)

    def __repr__(self) -> str:
        return repr(self._cache)

    def __call__(self, fn):
        def live(*args, **kwargs):  # what the cache calls for an answer it lacks
            return self._checked(fn.__name__, args, kwargs, fn(*args, **kwargs))

        cached = self._cache(functools.wraps(fn)(live))  # filed under fn's name, as before

        @functools.wraps(fn)
        def checked(*args, **kwargs):
            return self._checked(fn.__name__, args, kwargs, cached(*args, **kwargs))

        return checked

    def _checked(self, name: str, args: tuple, kwargs: dict, answer: object) -> object:
        request = system_one_request(args, kwargs)
        if request is not None:
            check_answer(answer, request, key=cooksafe_key(name, args, kwargs),
                         path=Path(self._cache.path).resolve())
        return answer


class LiveCallFailed(MemorybookError, RuntimeError):
    """A live call in a notebook failed; the message says what to do, every secret taken out."""


def explanation(shell, error: BaseException, traceback: TracebackType | None,
                reason: str) -> Exception | None:
    """What to show for an error a cell raised, or None for its usual traceback."""
    from typesafe_sdk import TypeSafeError

    if isinstance(error, RecordingError):
        return error
    if isinstance(error, TypeSafeError):
        return LiveCallFailed(describe_api_failure(error))
    frames = frames_of(traceback)
    cached_call = next((f.f_locals for f in reversed(frames)
                        if f.f_code.co_name == "_system_one"), None)
    if isinstance(error, LookupError) and cached_call is not None:
        request = {name: cached_call.get(name) for name in ("model", "state", "questions")}
        if all(isinstance(value, str) for value in request.values()):
            miss = explain_miss({"model": request["model"],
                                 "state": json.loads(request["state"]),
                                 "questions": json.loads(request["questions"])}, reason,
                                recording_in_use(shell))
            threshold = shell.user_ns.get("REMEMBER_AT")  # notebook 1's own setting
            if isinstance(threshold, int | float):
                miss.name_threshold(threshold)
            return as_the_pages(shell, error, miss)
    if isinstance(error, ValueError):  # JSONDecodeError, or pydantic's ValidationError
        return damaged_recording(shell, frames)
    return None


def as_the_pages(shell, error: BaseException, miss: Exception) -> Exception:
    """The full explanation as an instance of notebook 1's own NotInCacheError when that is what
    its code raised, so that a reader sees the class of the code they copy; else the library's
    RecordingMissError."""
    pages = shell.user_ns.get("NotInCacheError")
    if isinstance(pages, type) and isinstance(error, pages):
        try:
            return pages(str(miss))
        except Exception:  # a class of the reader's that is not made from a message
            return miss
    return miss


def frames_of(traceback: TracebackType | None) -> list:
    frames = []
    while traceback is not None:
        frames.append(traceback.tb_frame)
        traceback = traceback.tb_next
    return frames


def recording_in_use(shell) -> Path:
    """The file notebook 1's cache reads (cooksafe's JsonCache keeps it as `path`), or the
    collection's before that cache is made."""
    cache_path = getattr(shell.user_ns.get("json_cache"), "path", NOTEBOOK_1_CACHE)
    return Path(cache_path).resolve()


def damaged_recording(shell, frames: list) -> RecordingError | None:
    """The recording's own error when reading it, or an answer in it, failed."""
    path = recording_in_use(shell)
    try:
        entries = read_recording(path)
    except RecordingError as error:
        return error
    asked = next((f.f_locals for f in reversed(frames) if f.f_code.co_name == "ask"), None)
    model = shell.user_ns.get("TYPESAFE_MODEL")
    if asked is None or not isinstance(model, str):
        return None
    try:
        state_json, questions_json = request_json(asked["state"], asked["questions"])
    except Exception:  # not the request this error came from
        return None
    key = cache_key(model, state_json, questions_json)
    if key not in entries:
        return None
    try:
        check_answer(entries[key], (model, state_json, questions_json), key=key, path=path)
    except RecordingError as error:
        return error
    return None
