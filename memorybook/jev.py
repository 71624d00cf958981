"""Asking Jev: System One with the model pinned, each answer cached under the official key scheme.

    jev = Jev()                                       # its mode and recording: see below
    response = jev.ask(state, questions)              # the official page's ask()
    response = await jev.ask_async(state, questions)  # the same, awaited

A `Jev` works in one of three modes, named as VCR-style test libraries name theirs:

    replay  no key, and always in CI: every answer comes from the recording; a call it lacks
            raises RecordingMissError, which explains it, and nothing is sent
    record  a key and a recording asked for: a call the recording lacks goes to Jev, and its
            answer is added to that recording (appended: the file is never rewritten)
    live    a key and no recording asked for: every call goes to Jev; no answer is written

The mode is `mode=`, else the settings' (`settings=`, by default the environment's when the Jev
is made: $MEMORYBOOK_RECORD_MODE), else it follows from the key and the recording. A recording
is asked for with `recording=` or the settings' ($MEMORYBOOK_RECORDING); replay with none
asked for reads the collection's committed json_cache/json_cache.json (an installed memorybook
has none, and says so). Answers are filed as the official page files them, under cooksafe's key
for `_system_one(model, state JSON, questions JSON)`, so the page's plain JsonCache and this
module read the same file.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import os
import threading
from pathlib import Path

from typesafe_sdk import SystemOneResponse

from memorybook.api_errors import CallTimeoutError
from memorybook.config import RECORDING_PATH, TYPESAFE_MODEL, replay_only_reason, shown_path
from memorybook.questions import question_objects
from memorybook.recording import CheckedJsonCache, RecordingError, open_recording
from memorybook.replay import RecordingMissError, ReplayOnlyTransport
from memorybook.settings import (
    API_KEY_ENV,
    RECORD_MODE_ENV,
    RECORDING_ENV,
    TIMEOUT_ENV,
    ConfigError,
    Mode,
    Settings,
)
from memorybook.transport import (
    ClientOnFirstUse,
    SecretsOutOfLogs,
    async_client,
    sync_client,
)


def request_json(state: dict, questions: dict) -> tuple[str, str]:
    """The exact JSON text of a request's state and questions: what the cache key is made of."""
    questions_json = {question_id: question.model_dump(mode="json", exclude_none=True)
                      for question_id, question in question_objects(questions).items()}
    return json.dumps(state), json.dumps(questions_json)


def settings_given(settings: Settings | None, recording: str | os.PathLike | None = None,
                   mode: str | None = None) -> Settings:
    """`settings` (None: the environment's, read now) with `recording` and `mode` in place of
    theirs where given: what a Jev is made with."""
    given = {name: value for name, value in (("recording", recording), ("record_mode", mode))
             if value is not None}
    if settings is None:
        return Settings.from_environment(**given)
    return dataclasses.replace(settings, **given) if given else settings


def choose_mode(recording: str | os.PathLike | None, mode: str | None,
                own_client: bool = False, settings: Settings | None = None,
                ) -> tuple[Mode, Path | None, str | None]:
    """(the mode, the recording it reads or None, why nothing may be sent or None), from the
    arguments and the settings (by default the environment's), as the module's docstring says;
    a ConfigError for a mode that cannot be had here. With a client of the caller's
    (`own_client`), no key is needed: the client sends where it was made to."""
    settings = settings_given(settings, recording, mode)
    asked = settings.recording.resolve() if settings.recording else None
    reason = None if own_client else replay_only_reason(settings)
    chosen = settings.record_mode or (
        Mode.REPLAY if reason else Mode.RECORD if asked else Mode.LIVE)
    if chosen is not Mode.REPLAY and reason is not None:
        raise ConfigError(f"{chosen} mode asks Jev, but {reason}: set {API_KEY_ENV} (never in "
                          f"CI), or replay.")
    if chosen is Mode.RECORD and asked is None:
        raise ConfigError(f"record mode adds answers to a recording: name its file with "
                          f"recording= or {RECORDING_ENV}.")
    if chosen is Mode.LIVE and asked is not None:
        raise ConfigError(f"live mode reads and writes no recording, but {shown_path(asked)} "
                          f"was asked for: unset {RECORDING_ENV} (or recording=), or record.")
    if chosen is Mode.REPLAY and asked is None:
        asked = RECORDING_PATH
    return chosen, asked, reason


class Jev:
    """System One on one pinned model, answering in replay, record or live mode (the module's
    docstring says which, and when). Nothing is read or started until the first question.

    `client` is an SDK TypeSafeClient to ask with in record or live mode instead of one made
    from the settings (e.g. one on a test transport); `ask_async` always makes its own.
    `settings` (memorybook/settings.py) give the key, endpoint, time limit, recording and mode;
    by default the environment's, read when the Jev is made. `recording` and `mode` win over
    theirs.
    """

    def __init__(self, recording: str | os.PathLike | None = None, *, mode: str | None = None,
                 model: str = TYPESAFE_MODEL, client=None,
                 settings: Settings | None = None) -> None:
        self.settings = settings = settings_given(settings, recording, mode)
        self.mode, self.recording, reason = choose_mode(None, None, client is not None, settings)
        # whatever the client, its libraries log no key and no words
        SecretsOutOfLogs.install(settings.api_key)
        self.model = model
        replay = None
        if self.mode is Mode.REPLAY:  # nothing is sent, whatever client was given
            replay, client = ReplayOnlyTransport(reason or "replay was asked for",
                                                 self.recording), None
        client = client or ClientOnFirstUse(lambda: sync_client(replay, settings))
        awaited = ClientOnFirstUse(lambda: async_client(replay, settings))
        self.cache: CheckedJsonCache | None = (
            None if self.mode is Mode.LIVE else open_recording(self.recording, settings=settings))
        sync_call = _sync_call(client)
        async_call = _async_call(awaited, settings.timeout_seconds)
        if self.cache is not None:
            sync_call, async_call = self.cache(sync_call), self.cache(async_call)
        self._system_one, self._system_one_async = sync_call, async_call

    def read_recording(self) -> int:
        """Read the recording now rather than at the first question, so that one that cannot
        be used (RecordingError) stops a service's start, not a request; return how many
        answers it holds (0 in live mode, which reads none). In replay mode, a recording that
        is not there answers nothing: that is one that cannot be used."""
        held = 0 if self.cache is None else self.cache.read()
        if self.mode is Mode.REPLAY and not Path(self.recording).exists():
            raise RecordingError(
                f"No recording at {shown_path(self.recording)}: replaying, with no file to "
                f"answer from, every call would fail. Point {RECORDING_ENV} (or recording=) at "
                f"a json_cache.json, or make one: run with {API_KEY_ENV} set and "
                f"{RECORD_MODE_ENV}=record (or Jev(recording=..., mode=\"record\")).")
        return held

    def ask(self, state: dict, questions: dict) -> SystemOneResponse:
        """client.system_one with the model pinned, answered as the mode says."""
        try:
            answer = self._system_one(self.model, *request_json(state, questions))
        except RecordingMissError as miss:  # its message says it all: not the SDK's 20 frames
            raise miss.with_traceback(None) from None
        return SystemOneResponse.model_validate(answer)

    async def ask_async(self, state: dict, questions: dict) -> SystemOneResponse:
        """`ask()`, awaited: the same request, the same cached answer; the recording is read and
        written in a worker thread, and a live call ends within $MEMORYBOOK_TIMEOUT_SECONDS."""
        try:
            answer = await self._system_one_async(self.model, *request_json(state, questions))
        except RecordingMissError as miss:
            raise miss.with_traceback(None) from None
        return SystemOneResponse.model_validate(answer)

    def __repr__(self) -> str:
        where = "" if self.recording is None else f", recording={shown_path(self.recording)!r}"
        return f"Jev(mode={self.mode.value!r}{where}, model={self.model!r})"


def _sync_call(client):
    def _system_one(model: str, state: str, questions: str) -> dict:
        """One System One request; a cache calls it only for answers it does not hold."""
        response = client.system_one(state=json.loads(state), questions=json.loads(questions),
                                     model=model)
        return response.model_dump(mode="json")

    return _system_one


def _async_call(client, seconds: float):
    async def _system_one(model: str, state: str, questions: str) -> dict:
        """One System One request, awaited, within the whole call's time limit."""
        try:
            async with asyncio.timeout(seconds):  # the whole call, retries included
                response = await client.system_one(
                    state=json.loads(state), questions=json.loads(questions), model=model)
        except TimeoutError:
            raise CallTimeoutError(f"no answer within {seconds:g} s, the whole call's time "
                                   f"({TIMEOUT_ENV}), retries included") from None
        return response.model_dump(mode="json")

    return _system_one


def made_once(make):
    """`make()` at the first call only, whichever threads call at once; the same object after.
    (functools.cache may make it twice when two threads ask first together: two Jevs, two
    caches, and a call one of them recorded asked live again by the other.)"""
    lock, made = threading.Lock(), []

    @functools.wraps(make)
    def once():
        with lock:
            if not made:
                made.append(make())
            return made[0]

    return once


@made_once
def default_jev() -> Jev:
    """The Jev the wrappers ask when given no `ask=`: `Jev()`, made at its first use from the
    settings the environment holds then, and kept for the process."""
    return Jev()
