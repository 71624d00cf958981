"""The collection's cache of System One answers: cooksafe's JsonCache, checked and written safely.

`CheckedJsonCache` overrides the decorator, `JsonCache.__call__`, and keeps the file as cooksafe
documents it: one JSON object whose keys are the function's name and its `|`-joined arguments
(a sha256 digest beyond MAX_KEY_CHARS), indented by 2. So the pattern's plain `JsonCache` replays
what this one records, and the other way round. What differs is the saving: a new answer is
added to the file in place, after its last entry (`file.append_entries`: under a lock, never over
an entry already there, undone if the process dies in the middle), where cooksafe rewrites the
whole file sorted. So a live recording's keys follow the order its answers came in (cooksafe
reads any order), and `make accept-recording` commits the sorted form.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import json
import threading
from collections.abc import Callable
from pathlib import Path

from cooksafe import JsonCache
from cooksafe.cache import MAX_KEY_CHARS

from memorybook.config import recording_path, restore_hint, shown_path
from memorybook.recording.checks import answer_problem
from memorybook.recording.file import RecordingError, append_entries, read_recording, shown_key
from memorybook.recording.state_parts import describe_call
from memorybook.settings import Settings


def cooksafe_key(name: str, args: tuple, kwargs: dict) -> str:
    """The key cooksafe's JsonCache files a call of the function `name` under."""
    key = "|".join([name, *(str(arg) for arg in args),
                    *(f"{k}={v}" for k, v in sorted(kwargs.items()))])
    return hashlib.sha256(key.encode()).hexdigest() if len(key) > MAX_KEY_CHARS else key


def cache_key(model: str, state_json: str, questions_json: str) -> str:
    """The key cooksafe's JsonCache files a `_system_one(model, state, questions)` call under."""
    return cooksafe_key("_system_one", (model, state_json, questions_json), {})


def system_one_request(args: tuple, kwargs: dict) -> tuple[str, str, str] | None:
    """The (model, state JSON, questions JSON) a cached call asks, or None if it is not one.

    What marks a System One request is how it is called, whatever the function's name: with
    exactly three positional strings and no keyword, as `_system_one(model, state, questions)`.
    Its answer is then checked against the questions, when they are a JSON object.
    """
    if kwargs or len(args) != 3 or not all(isinstance(arg, str) for arg in args):
        return None
    return args


FROM_THE_ENVIRONMENT = object()  # a setting read from the environment when it is first needed
_NOT_HELD = object()  # what a lookup returns for a key the recording does not hold


class CheckedJsonCache(JsonCache):
    """cooksafe's JsonCache, checking each System One answer against the call's questions.

    The checks need the questions, which only the call knows (keys are digests), so they run
    when an entry is returned: a damaged entry stops the call with a RecordingError naming the
    file, the call and the field. A live answer is checked before it is kept, and an answer that
    fails the checks is never written. Lookups are noted in `usage_log` when it is set, and
    handed to every function given to `note_lookups`.

    cooksafe reads the whole file when its cache is made; this one reads it, with errors that
    name the file, at its first lookup, so that decorating a function with it (as a module does
    when it is imported) opens nothing. cooksafe's own reading and writing are never used.
    """

    def __init__(self, path: Path | None = None, *,
                 usage_log: Path | None | object = FROM_THE_ENVIRONMENT) -> None:
        self._path = None if path is None else Path(path)
        self.indent = 2
        self._read: dict | None = None
        self._usage_log = usage_log
        self._lookup_listeners: list[Callable[[str, str, str, str], None]] = []
        self._entries_lock = threading.Lock()
        self._unwritten: dict = {}  # kept answers whose write failed: tried again with the next

    @property
    def path(self) -> Path:
        """The file; with none given, $MEMORYBOOK_RECORDING or the committed recording, as
        either is at the first use."""
        if self._path is None:
            self._path = recording_path()
        return self._path

    @property
    def usage_log(self) -> Path | None:
        """Where lookups are noted: as given, else the environment's settings' at the first
        lookup ($MEMORYBOOK_USAGE_LOG)."""
        if self._usage_log is FROM_THE_ENVIRONMENT:
            self._usage_log = Settings.from_environment().usage_log
        return self._usage_log

    @property
    def _entries(self) -> dict:
        """The file's entries, read at the first lookup."""
        with self._entries_lock:
            if self._read is None:
                self._read = read_recording(self.path)
            return self._read

    def read(self) -> int:
        """Read the file now, as the first lookup would (once); return how many answers it
        holds. A file that cannot be used raises RecordingError here."""
        return len(self._entries)

    def note_lookups(self, listener: Callable[[str, str, str, str], None]) -> None:
        """Call `listener(key, model, state JSON, questions JSON)` before each System One lookup."""
        self._lookup_listeners.append(listener)

    def __call__(self, fn: Callable) -> Callable:
        """Cache `fn`. A coroutine function is cached under the same keys, with the file read
        and written in a worker thread, so that the event loop never waits on the disk."""
        if inspect.iscoroutinefunction(fn):
            return self._cached_async(fn)

        @functools.wraps(fn)
        def checked(*args, **kwargs):
            key = cooksafe_key(fn.__name__, args, kwargs)
            request = system_one_request(args, kwargs)
            found = self._look_up(key, request)
            if found is _NOT_HELD:
                found = self._checked_and_kept(key, request, fn(*args, **kwargs))
            return found

        return checked

    def _cached_async(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        async def checked(*args, **kwargs):
            key = cooksafe_key(fn.__name__, args, kwargs)
            request = system_one_request(args, kwargs)
            found = await asyncio.to_thread(self._look_up, key, request)
            if found is _NOT_HELD:
                entry = await fn(*args, **kwargs)
                found = await asyncio.to_thread(self._checked_and_kept, key, request, entry)
            return found

        return checked

    def _look_up(self, key: str, request: tuple[str, str, str] | None) -> object:
        """The caller's copy of the checked entry under `key`, else _NOT_HELD."""
        if request is not None:
            self._note_lookup(key, request)
        if key not in self._entries:
            return _NOT_HELD
        entry = self._entries[key]
        if request is not None:
            check_answer(entry, request, key=key, path=self.path)
        return json.loads(json.dumps(entry))  # the caller's copy, as cooksafe hands out

    def _checked_and_kept(self, key: str, request: tuple[str, str, str] | None,
                          entry: object) -> object:
        """A live answer, checked before it is kept; the caller's copy of it."""
        if request is not None:
            check_answer(entry, request, key=key, path=self.path)
        self._keep(key, entry)
        return json.loads(json.dumps(entry))

    def _note_lookup(self, key: str, request: tuple[str, str, str]) -> None:
        if self.usage_log is not None:
            with self.usage_log.open("a", encoding="utf-8") as log:
                log.write(f"{key}\n")
        for listener in self._lookup_listeners:
            listener(key, *request)

    def _keep(self, key: str, entry: object) -> None:
        """Hold a new answer for later calls, and add it to the file (with any whose write
        failed before)."""
        entries = self._entries
        with self._entries_lock:
            entries[key] = entry
            self._unwritten[key] = entry
            unwritten = dict(self._unwritten)
        append_entries(self.path, unwritten)
        with self._entries_lock:
            for written in unwritten:
                self._unwritten.pop(written, None)


def check_answer(entry: object, request: tuple[str, str, str], *, key: str, path: Path) -> None:
    """Raise a RecordingError unless `entry` is an answer the SDK accepts for this request."""
    _, state_json, questions_json = request
    try:
        questions = json.loads(questions_json)
        state = json.loads(state_json)
    except ValueError:
        return  # not a call the notebooks make; nothing to check the answer against
    if not isinstance(questions, dict):
        return
    problem = answer_problem(entry, questions)
    if problem is None:
        return

    def said(call: str) -> str:
        return (f"The recording {shown_path(path)} holds a damaged answer for {call}: {problem}. "
                f"Remove that entry (key {shown_key(key)}) and record the call again"
                f"{restore_hint(path)}.")

    raise RecordingError(said(describe_call(state, questions)),
                         logged=said(describe_call(state, questions, words=False)))


def open_recording(path: Path | None = None, *,
                   settings: Settings | None = None) -> CheckedJsonCache:
    """The cache on the recording (by default the settings': $MEMORYBOOK_RECORDING, else the
    committed json_cache/json_cache.json): read at its first lookup with clear errors, checked
    answers, safe writes. With `settings`, lookups are noted in their usage_log; without, in
    the environment's at the first lookup."""
    if settings is None:
        return CheckedJsonCache(path)
    return CheckedJsonCache(recording_path(settings) if path is None else path,
                            usage_log=settings.usage_log)
