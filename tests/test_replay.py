"""A miss caused by the gate's threshold names it: the wrappers and the experiments take
`remember_at=` and, when it is not the recorded run's 0.5, put it first among the likely causes
of a miss whose memories differ from the recorded call's. Notebook 1 run alone names its own
REMEMBER_AT through the collection's kernel (tests/test_reader_path.py runs that)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import importlib
import inspect
import io
import json
import os
import subprocess
import sys
import textwrap

import pytest

from memorybook import replay
from memorybook.config import REMEMBER_AT, TYPESAFE_MODEL
from memorybook.example import EARLIER, ROUTE
from memorybook.example import ask as example_ask
from memorybook.example import ask_async as example_ask_async
from memorybook.gates import PendingGates
from memorybook.memory import InMemoryMemories
from memorybook.recording import is_memory_list, recorded_requests
from memorybook.replay import RecordingMissError, likely_reasons, threshold_reason
from memorybook.wrapper import ask_with_memory, ask_with_memory_async
from memorybook_dev.experiments import probe_experiment, remember_earlier_tickets
from tests.helpers import fresh_jev

NAMED = "REMEMBER_AT is {} here and was 0.5 in the recorded run"


def reasons_for_one_memory_fewer() -> list[str]:
    """Why a recorded call carrying memories would miss when sent with one memory fewer."""
    request = next(r for r in recorded_requests().values()
                   if any(is_memory_list(value) for value in r["state"].values()))
    state = {name: value[:-1] if is_memory_list(value) else value
             for name, value in request["state"].items()}
    return likely_reasons(state, request["questions"], request["model"])


def a_miss(reasons: list[str]) -> RecordingMissError:
    return RecordingMissError("The recording has no answer to this call: a call.", reasons,
                              "https://example.invalid/link", "To record it: ...", "a call")


def test_a_miss_whose_memories_differ_tells_the_reader_to_start_again(monkeypatch):
    fresh_jev(monkeypatch)  # as in a new process: no earlier miss
    [reason] = reasons_for_one_memory_fewer()
    assert reason.startswith("Memories: this call carries") and "run it from the top" in reason, (
        f"a miss whose memories differ must say so and how to start again: {reason}; see "
        "_explain() and _why_memories_differ() in memorybook/replay.py")
    assert "REMEMBER_AT" not in reason, (
        "likely_reasons() cannot know the threshold in use: only a wrapper given remember_at= "
        f"may name it (RecordingMissError.name_threshold): {reason}")


def test_a_recording_path_naming_no_file_is_blamed_not_the_call(monkeypatch, tmp_path):
    missing = tmp_path / "json_cache.jsn"  # a typo in $MEMORYBOOK_RECORDING
    jev = fresh_jev(monkeypatch, MEMORYBOOK_RECORDING=str(missing))
    with pytest.raises(RecordingMissError) as raised:
        jev.ask(EARLIER[0], ROUTE)
    assert raised.value.reasons == [
        f"There is no file at {missing}, so no call can be answered: point MEMORYBOOK_RECORDING "
        "at a json_cache.json (the collection's is json_cache/json_cache.json in its "
        "repository)."], (
        "a recording path that names no file must be the reason given, not the call: see "
        f"likely_reasons() in memorybook/replay.py. Got {raised.value.reasons}")
    assert not missing.exists(), "replaying must not create the recording it lacks"


@pytest.mark.parametrize("remember_at", [0.975, 1, 0.0])
def test_name_threshold_puts_a_threshold_other_than_the_recorded_one_first(monkeypatch,
                                                                          remember_at):
    fresh_jev(monkeypatch)
    miss = a_miss(reasons_for_one_memory_fewer())
    miss.name_threshold(remember_at)
    assert miss.reasons[0] == threshold_reason(remember_at), miss.reasons
    assert NAMED.format(remember_at) in miss.reasons[0], miss.reasons
    assert miss.reasons[1].startswith("Memories:"), (
        "name_threshold() must keep the memories' reason after the threshold's")
    assert str(miss).splitlines()[1] == f"- {miss.reasons[0]}", (
        "the message a reader sees must name the threshold first too: name_threshold() in "
        f"memorybook/replay.py must rebuild it; it is:\n{miss}")


def test_name_threshold_leaves_a_miss_alone_at_the_recorded_threshold_or_about_other_things(
        monkeypatch):
    fresh_jev(monkeypatch)
    about_memories = a_miss(reasons_for_one_memory_fewer())
    before = str(about_memories)
    about_memories.name_threshold(REMEMBER_AT)
    assert str(about_memories) == before, (
        f"at the recorded threshold ({REMEMBER_AT}) a miss must not blame it: {about_memories}")
    edited = a_miss(["`ticket.subject` is \"x\"; in the recorded call it is \"y\"."])
    edited.name_threshold(1)
    assert all("REMEMBER_AT" not in reason for reason in edited.reasons), (
        "a miss about an edited input, not about memories, must not blame the threshold: "
        f"{edited.reasons}")


def remembered_by_the_sync_wrapper(remember_at: float) -> None:
    memories = InMemoryMemories()
    for state in EARLIER:
        ask_with_memory(state, ROUTE, memories, ask=example_ask, remember_at=remember_at)


def remembered_by_the_async_wrapper(remember_at: float) -> None:
    async def each_ticket_in_turn():
        memories, gates = InMemoryMemories(), PendingGates()
        for state in EARLIER:
            await ask_with_memory_async(state, ROUTE, memories, gates=gates,
                                        ask=example_ask_async, remember_at=remember_at)
            await gates.drain()

    asyncio.run(each_ticket_in_turn())


def remembered_by_the_experiment(remember_at: float) -> None:
    remember_earlier_tickets(InMemoryMemories(), ask=example_ask, remember_at=remember_at)


def probed(remember_at: float) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        probe_experiment(InMemoryMemories(), ask=example_ask, remember_at=remember_at)


WAYS_TO_RUN = {"ask_with_memory": remembered_by_the_sync_wrapper,
               "ask_with_memory_async": remembered_by_the_async_wrapper,
               "remember_earlier_tickets": remembered_by_the_experiment,
               "probe_experiment": probed}


@pytest.mark.parametrize("remember_at", [1, 0.975, 0.0])  # keeping fewer tickets, or more
@pytest.mark.parametrize("way", WAYS_TO_RUN)
def test_a_threshold_the_recording_cannot_replay_stops_naming_it(monkeypatch, way, remember_at):
    fresh_jev(monkeypatch)  # no key: replay the collection's recording
    with pytest.raises(RecordingMissError) as stopped:
        WAYS_TO_RUN[way](remember_at)
    miss = stopped.value
    assert miss.call.startswith("the question 'team' about ticket"), (
        f"{way}(remember_at={remember_at}) missed on {miss.call}, not on a routing call whose "
        "memories the threshold changed")
    assert NAMED.format(remember_at) in miss.reasons[0], (
        f"{way}(remember_at={remember_at}) stopped without naming the threshold first; "
        "memorybook/wrapper.py must pass remember_at to RecordingMissError.name_threshold() "
        f"(threshold_named): {miss.reasons}")
    assert "notebook 2 says which thresholds replay" in str(miss), str(miss)


@pytest.mark.parametrize("remember_at", [0.3, REMEMBER_AT])
@pytest.mark.parametrize("way", WAYS_TO_RUN)
def test_a_threshold_that_replays_the_recorded_run_stops_nothing(monkeypatch, way, remember_at):
    fresh_jev(monkeypatch)
    WAYS_TO_RUN[way](remember_at)  # raises RecordingMissError if a call misses


def test_at_the_recorded_threshold_other_memories_are_blamed_not_the_threshold(monkeypatch):
    fresh_jev(monkeypatch)
    memories = InMemoryMemories()
    stray = {"request": copy.deepcopy(EARLIER[2]), "jev_answered": {}}  # T-103, never kept
    memories.save("C-1042", stray)
    with pytest.raises(RecordingMissError) as stopped:
        ask_with_memory(EARLIER[4], ROUTE, memories, ask=example_ask)
    reasons = stopped.value.reasons
    assert reasons[0].startswith("Memories: this call carries T-103"), reasons
    assert all("REMEMBER_AT" not in reason for reason in reasons), (
        f"at the recorded threshold a miss must not blame it: {reasons}")


def test_a_long_running_process_keeps_only_its_latest_misses(monkeypatch):
    from memorybook import replay

    monkeypatch.setattr(replay, "MISSES_SO_FAR", [])
    monkeypatch.setattr(replay, "MISSES_KEPT", 3)
    for number in range(5):
        state = {"customer": {"id": "C-9"}, "ticket": {"id": f"T-{number}"}}
        replay.explain_miss({"model": "jev-1.14.0", "state": state, "questions": {}},
                            "replay was asked for")
    kept = [miss.call.split("about ticket ")[1].split()[0] for miss in replay.MISSES_SO_FAR]
    assert kept == ["T-2", "T-3", "T-4"], (
        f"a service replaying for months must keep only the last MISSES_KEPT misses "
        f"(explain_miss() in memorybook/replay.py), not every one: {kept}")


def test_a_miss_keeps_no_words_for_the_next_and_names_at_most_ten_differences(monkeypatch):
    from memorybook import replay
    from memorybook.example import later_state
    from memorybook.jev import request_json

    monkeypatch.setattr(replay, "MISSES_SO_FAR", [])
    first = later_state("C-1042", 0)
    first["ticket"]["subject"] = "Kestrel invoice 7731 " * 10_000  # 210 kB, in no recording
    replay.explain_miss({"model": TYPESAFE_MODEL, "state": first, "questions": {}},
                        "replay was asked for")
    edited = later_state("C-1042", 1)
    edited.update({f"extra_{number}": number for number in range(5_000)})
    questions = json.loads(request_json(edited, ROUTE)[1])  # as the wire has them
    miss = replay.explain_miss({"model": TYPESAFE_MODEL, "state": edited, "questions": questions},
                               "replay was asked for")
    kept = replay.MISSES_SO_FAR[0]
    assert len(kept.call) < 200 and "Kestrel" not in kept.call, (
        "a miss is kept for the next by its ids alone (Missed in memorybook/replay.py), not its "
        f"state: {len(kept.call):,} characters kept")
    assert not any("Kestrel" in reason for reason in miss.reasons), (
        "one call's miss must not show another call's words (in a service, another request's): "
        f"explain_miss() names the earlier miss by its ids: {miss.reasons[-1][:300]}")
    assert len(miss.reasons) == 12 and miss.reasons[-2] == "And 4,990 more differences from " \
        "the recorded call.", (
        "a miss names at most REASONS_SHOWN differences (likely_reasons() in memorybook/"
        f"replay.py), then how many more: {len(miss.reasons)} reasons")


@pytest.mark.parametrize("awaited", [False, True])
def test_a_miss_reaches_the_app_without_the_sdks_frames(monkeypatch, awaited):
    import traceback

    jev = fresh_jev(monkeypatch)
    state = copy.deepcopy(EARLIER[0])
    state["ticket"]["subject"] = "A subject no recorded call has"
    with pytest.raises(RecordingMissError) as missed:
        if awaited:
            asyncio.run(jev.ask_async(state, ROUTE))
        else:
            jev.ask(state, ROUTE)
    files = [frame.filename for frame in traceback.extract_tb(missed.value.__traceback__)]
    assert not [name for name in files if "site-packages" in name], (
        f"a miss must reach the app from Jev.ask() (memorybook/jev.py), its message saying all, "
        f"not through the SDK's, httpx's and tenacity's frames: {files}")


# Where a miss runs decides what it says to do. The collection's notebook kernels and tools mark
# their process (replay.mark_as_the_collection()) and record the collection's recording with
# `make record`; an app's tests and scripts record into a file of their own in record mode, even
# when they replay the collection's json_cache.json; a service runs live.
AN_APPS_TICKET = {"customer": {"id": "C-77", "company": "Reader's Own Ltd"},
                  "ticket": {"id": "R-1", "subject": "Login",
                             "messages": [{"from": "customer", "text": "We cannot log in."}]}}


@pytest.mark.parametrize("recording", ["the collection's", "the app's own"])
def test_outside_the_collection_a_miss_says_how_to_record_into_the_apps_recording(
        monkeypatch, tmp_path, recording):
    own = tmp_path / "app.json"
    own.write_text("{}", encoding="utf-8")
    jev = fresh_jev(monkeypatch, own if recording == "the app's own" else None)
    with pytest.raises(RecordingMissError) as missed:
        jev.ask(AN_APPS_TICKET, ROUTE)
    how = missed.value.how_to_record
    assert "make record" not in str(missed.value) and "make accept-recording" not in how, (
        "`make record` records the collection's notebooks, never an app's calls: a miss outside "
        "the collection's notebooks and tools must not name it (how_to_record() in "
        f"memorybook/replay.py): {how}")
    assert "TYPESAFE_API_KEY set" in how and "MEMORYBOOK_RECORD_MODE=record" in how, (
        f"a miss in an app's process must say how to record into the app's recording: {how}")
    if recording == "the app's own":
        assert f"MEMORYBOOK_RECORDING={own}" in how, how
    else:  # the collection's file is recorded by the collection's tools, not by an app
        assert "MEMORYBOOK_RECORDING naming your app's json_cache.json" in how, how


def test_in_the_collection_a_miss_says_make_record(monkeypatch):
    jev = fresh_jev(monkeypatch, in_the_collection=True)
    with pytest.raises(RecordingMissError) as missed:
        jev.ask(AN_APPS_TICKET, ROUTE)
    assert missed.value.how_to_record.startswith(
        "To record it: `TYPESAFE_API_KEY=... make record`, read its report, then "
        "`make accept-recording`"), (
        "in the collection's notebooks and tools (replay.mark_as_the_collection()) a miss in the "
        f"collection's recording must name `make record`: {missed.value.how_to_record}")


@pytest.mark.parametrize("env", [{}, {"CI": "true", "TYPESAFE_API_KEY": "sk-ci"}],
                         ids=["no key", "CI"])
def test_a_services_miss_says_how_to_run_it_live(monkeypatch, env):
    jev = fresh_jev(monkeypatch, in_the_collection=True, **env)  # as `make serve` is
    with pytest.raises(RecordingMissError) as missed:
        jev.ask(AN_APPS_TICKET, ROUTE)
    advice = missed.value.how_to_serve_live
    assert "make record" not in advice and "record mode" not in advice, advice
    if env:
        assert advice.startswith("CI never calls the API"), advice
    else:
        assert advice == (
            "To answer it, run the service live: start it again with TYPESAFE_API_KEY set, and "
            "MEMORYBOOK_RECORDING and MEMORYBOOK_RECORD_MODE unset (a service never records)."), (
            f"RecordingMissError.how_to_serve_live (memorybook/replay.py): {advice}")


def test_the_collections_kernel_and_tools_mark_their_process(monkeypatch):
    from memorybook import replay

    for marks in ("memorybook_dev.collection_kernel", "tools.record.cli",
                  "tools.record.missing", "tools.build_recording"):
        source = inspect.getsource(importlib.import_module(marks))
        assert "mark_as_the_collection()" in source, (
            f"{marks} runs the collection's calls: it must call "
            "memorybook.replay.mark_as_the_collection(), so that a miss there says `make record`")
    monkeypatch.setattr(replay, "in_the_collection", False)
    replay.mark_as_the_collection()
    assert replay.in_the_collection


@pytest.mark.parametrize("remember_at", [0.0, REMEMBER_AT, 1])
def test_a_ticket_no_recorded_call_is_near_is_called_new_not_blamed_on_the_threshold(
        monkeypatch, remember_at):
    fresh_jev(monkeypatch)
    memories = InMemoryMemories()
    memories.save("C-1042", {"request": copy.deepcopy(EARLIER[0]), "jev_answered": {}})
    state = copy.deepcopy(EARLIER[0])
    state["ticket"]["id"] = "T-999"
    with pytest.raises(RecordingMissError) as missed:
        ask_with_memory(state, ROUTE, memories, ask=example_ask, remember_at=remember_at)
    assert missed.value.reasons == [
        "No recorded call asks 'team' about ticket T-999: this is a new call, which only Jev "
        "can answer."], (
        "a miss for a ticket no recorded call is about must say it is new, and blame neither "
        f"the threshold nor the memories (likely_reasons() in memorybook/replay.py): "
        f"{missed.value.reasons}")


def test_a_gate_judging_another_answer_blames_that_answer_and_the_threshold(monkeypatch):
    fresh_jev(monkeypatch)
    gate = next(r for r in recorded_requests().values() if "jev_answered" in r["state"])
    state = copy.deepcopy(gate["state"])
    [question] = state["jev_answered"]
    state["jev_answered"][question] = "None of these teams fits the ticket"
    miss = replay.explain_miss({**gate, "state": state}, "TYPESAFE_API_KEY is not set")
    miss.name_threshold(0.99)
    assert miss.reasons[0] == threshold_reason(0.99), miss.reasons
    assert miss.reasons[1].startswith("Jev's answer: the gate reads the routing call's answer"), (
        "a gate whose routing answer differs from the recorded one was not edited by the reader: "
        f"_explain() in memorybook/replay.py must say the answer differs: {miss.reasons}")
    assert "The input was edited" not in str(miss), str(miss)


def test_a_miss_shows_its_link_once_in_a_plain_traceback(tmp_path):
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(f"""
        from memorybook import Jev
        from memorybook.example import ROUTE

        Jev().ask({AN_APPS_TICKET!r}, ROUTE)
    """), encoding="utf-8")
    env = {k: v for k, v in os.environ.items()
           if k not in ("TYPESAFE_API_KEY", "MEMORYBOOK_RECORDING", "MEMORYBOOK_RECORD_MODE")}
    ran = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 1 and "RecordingMissError" in ran.stderr, ran.stderr
    assert ran.stderr.count("playground#share/") == 1, (
        "a miss must show its playground link (about 1,100 characters) once in a traceback: "
        f"{ran.stderr.count('playground#share/')} times in\n{ran.stderr[:3000]}")
    assert "make record" not in ran.stderr and "MEMORYBOOK_RECORD_MODE=record" in ran.stderr, (
        "a script of an app's own, in its own folder with the collection's environment, must be "
        f"told to record into its own recording, not `make record`:\n{ran.stderr[-1500:]}")


def test_a_call_that_differs_only_in_its_keys_order_is_told_the_recorded_order(monkeypatch):
    fresh_jev(monkeypatch)
    sorted_keys = json.loads(json.dumps(EARLIER[0], sort_keys=True))
    with pytest.raises(RecordingMissError) as missed:
        example_ask(sorted_keys, ROUTE)
    assert missed.value.reasons and "another order" in missed.value.reasons[0] and (
        "customer [id, company]" in missed.value.reasons[0]), (
        "a state equal to a recorded one but for its keys' order must be told so, and the "
        "recorded order (likely_reasons() in memorybook/replay.py), not given no reason: "
        f"{missed.value.reasons}")
