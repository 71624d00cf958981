"""A damaged recording, a failing disk, bad settings: each stops with an error that names it.

Every answer is checked when it is looked up, against the questions of the call that asked for
it; what needs no questions is checked when the file is read. Writes that fail name the file and
the cause, keep its mode, and leave no temporary file.
"""

from __future__ import annotations

import copy
import errno
import json
import math
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import nbformat
import pytest
from cooksafe import JsonCache
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from memorybook import recording
from memorybook.config import (
    PROVENANCE_PATH,
    RECORDING_PATH,
    REPO_ROOT,
    TYPESAFE_MODEL,
    ConfigError,
    restore_hint,
    timeout_seconds,
)
from memorybook.example import ROUTE as EXAMPLE_ROUTE
from memorybook.example import later_state
from memorybook.jev import request_json
from memorybook.recording import (
    RecordingError,
    cache_key,
    cooksafe_key,
    open_recording,
    read_recording,
)
from tests.helpers import COMMITTED_RECORDING, copy_of_the_collection, fresh_jev

COMMITTED_ENTRIES = json.loads(COMMITTED_RECORDING)
STATE = {"customer": {"id": "C-1042", "company": "Acme Corp"},
         "ticket": {"id": "T-201", "subject": "Slow dashboards"}}
ROUTE = {"team": {"type": "choice", "instructions": "Which team?",
                  "criteria": {"cloud_ops": "Cloud", "billing": "Billing", "general": "Other"}}}
GATE = {"remember": {"type": "noul", "instructions": "Lasting fact?"}}
GOOD = {
    "route": {"model": "jev-1.14.0", "usage": {"input_tokens": 600, "output_tokens": 9},
              "answers": {"team": {"type": "choice", "choice": "cloud_ops", "confidence": 0.7,
                                   "probabilities": {"cloud_ops": 0.8, "billing": 0.1,
                                                     "general": 0.1}}}},
    "gate": {"model": "jev-1.14.0", "usage": {"input_tokens": 650, "output_tokens": 11},
             "answers": {"remember": {"type": "noul", "noul": 0.02}}},
}
QUESTIONS = {"route": ROUTE, "gate": GATE}


def set_field(entry: dict, dotted: str, value: object) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        entry = entry[part]
    if value is DELETE:
        del entry[last]
    else:
        entry[last] = value


DELETE = object()
# (call, field changed, new value, the field the error must name)
ANSWER_DAMAGE = {
    "team not an option": ("route", "answers.team.choice", "pizza_team", "answers.team.choice"),
    "probability 7.5": ("route", "answers.team.probabilities.cloud_ops", 7.5,
                        "answers.team.probabilities.cloud_ops"),
    "probability 'abc'": ("route", "answers.team.probabilities.billing", "abc",
                          "answers.team.probabilities.billing"),
    "negative probability": ("route", "answers.team.probabilities.general", -0.1,
                             "answers.team.probabilities.general"),
    "probabilities sum to 1.3": ("route", "answers.team.probabilities.general", 0.4,
                                 "answers.team.probabilities"),
    "an option missing": ("route", "answers.team.probabilities.general", DELETE,
                          "answers.team.probabilities"),
    "no confidence": ("route", "answers.team.confidence", DELETE, "answers.team.confidence"),
    "confidence 'high'": ("route", "answers.team.confidence", "high", "answers.team.confidence"),
    "choice answer to a noul": ("gate", "answers.remember", GOOD["route"]["answers"]["team"],
                                "answers.remember.type"),
    "noul 1.5": ("gate", "answers.remember.noul", 1.5, "answers.remember.noul"),
    "noul 'abc'": ("gate", "answers.remember.noul", "abc", "answers.remember.noul"),
    "noul missing": ("gate", "answers.remember.noul", DELETE, "answers.remember.noul"),
    "another question answered": ("gate", "answers.other", {"type": "noul", "noul": 0.5},
                                  "answers.other"),
}
SHAPE_DAMAGE = {
    "entry is a string": (None, None, "not an object"),
    "no usage": ("usage", DELETE, "usage"),
    "usage not an object": ("usage", 12, "usage"),
    "token count 'many'": ("usage.input_tokens", "many", "usage.input_tokens"),
    "no model": ("model", DELETE, "model"),
    "no answers": ("answers", DELETE, "answers"),
    "answer not an object": ("answers.team", "cloud_ops", "answers.team"),
}


def recording_with(tmp_path: Path, call: str, entry: object) -> tuple[Path, tuple[str, str, str]]:
    args = ("jev-1.14.0", json.dumps(STATE), json.dumps(QUESTIONS[call]))
    path = tmp_path / "json_cache.json"
    path.write_text(json.dumps({cache_key(*args): entry}, indent=2), encoding="utf-8")
    return path, args


def replay(path: Path, args: tuple[str, str, str]) -> dict:
    cache = open_recording(path)

    @cache
    def _system_one(model: str, state: str, questions: str) -> dict:
        raise AssertionError("a recorded call went live")

    return _system_one(*args)


@pytest.mark.parametrize("call", GOOD)
def test_a_sound_answer_replays(tmp_path, call):
    path, args = recording_with(tmp_path, call, GOOD[call])
    assert replay(path, args) == GOOD[call]


@pytest.mark.parametrize("damage", ANSWER_DAMAGE)
def test_a_damaged_answer_stops_the_call_naming_file_call_and_field(tmp_path, damage):
    call, field, value, named = ANSWER_DAMAGE[damage]
    entry = copy.deepcopy(GOOD[call])
    set_field(entry, field, value)
    path, args = recording_with(tmp_path, call, entry)
    with pytest.raises(RecordingError) as raised:
        replay(path, args)
    message = str(raised.value)
    assert str(path) in message
    assert "ticket T-201" in message and "customer C-1042" in message
    assert f"`{named}" in message


@pytest.mark.parametrize("damage", SHAPE_DAMAGE)
def test_a_damaged_entry_is_refused_when_the_file_is_read(tmp_path, damage):
    field, value, named = SHAPE_DAMAGE[damage]
    entry = "cloud_ops 0.99"
    if field is not None:
        entry = copy.deepcopy(GOOD["route"])
        set_field(entry, field, value)
    path, args = recording_with(tmp_path, "route", entry)
    open_recording(path)  # made, the cache has read nothing yet: the first lookup reads it
    with pytest.raises(RecordingError) as raised:
        replay(path, args)
    message = str(raised.value)
    assert str(path) in message and cache_key(*args)[:20] in message
    assert named in message


def test_the_committed_recording_passes_every_check():
    for key, entry in COMMITTED_ENTRIES.items():
        assert recording.entry_shape_problem(entry) is None, key


def test_a_damaged_committed_entry_stops_the_call_that_reads_it(tmp_path, monkeypatch):
    state = later_state("C-1042", 0)
    key = cache_key(TYPESAFE_MODEL, *request_json(state, EXAMPLE_ROUTE))
    damaged = copy.deepcopy(COMMITTED_ENTRIES)
    damaged[key]["answers"]["team"]["choice"] = "pizza_team"
    damaged[key]["answers"]["team"]["probabilities"]["cloud_ops"] = 0.99
    path = tmp_path / "json_cache.json"
    path.write_text(json.dumps(damaged, indent=2), encoding="utf-8")
    jev = fresh_jev(monkeypatch, MEMORYBOOK_RECORDING=str(path))
    with pytest.raises(RecordingError) as raised:
        jev.ask(state, EXAMPLE_ROUTE)
    message = str(raised.value)
    assert str(path) in message
    assert "ticket T-201" in message and "customer C-1042" in message
    assert "`answers.team.choice` is 'pizza_team'" in message


def test_answers_are_checked_whatever_the_function_is_called(tmp_path):
    args = ("jev-1.14.0", json.dumps(STATE), json.dumps(GATE))
    damaged = {**GOOD["gate"], "answers": {"remember": {"type": "noul", "noul": 1.5}}}
    path = tmp_path / "json_cache.json"
    path.write_text(json.dumps({cooksafe_key("ask_jev", args, {}): damaged}), encoding="utf-8")

    @open_recording(path)
    def ask_jev(model: str, state: str, questions: str) -> dict:
        raise AssertionError("a recorded call went live")

    with pytest.raises(RecordingError, match="`answers.remember.noul` is 1.5"):
        ask_jev(*args)


def test_a_call_not_shaped_like_a_system_one_request_is_cached_unchecked(tmp_path):
    path = tmp_path / "json_cache.json"

    @open_recording(path)
    def lookup(model: str, state: str) -> dict:
        return {"anything": "goes"}

    assert lookup("jev-1.14.0", "{}") == {"anything": "goes"}
    assert json.loads(path.read_text()) == {"lookup|jev-1.14.0|{}": {"anything": "goes"}}


def test_plain_cooksafe_and_the_checked_cache_read_each_others_files(tmp_path):
    args = ("jev-1.14.0", json.dumps(STATE), json.dumps(ROUTE))
    checked_file, plain_file = tmp_path / "checked.json", tmp_path / "plain.json"
    for cache in (open_recording(checked_file), JsonCache(plain_file)):
        @cache
        def _system_one(model: str, state: str, questions: str) -> dict:
            return GOOD["route"]

        _system_one(*args)
    assert checked_file.read_bytes() == plain_file.read_bytes()
    assert replay(plain_file, args) == GOOD["route"]

    @JsonCache(checked_file)
    def _system_one(model: str, state: str, questions: str) -> dict:
        raise AssertionError("a recorded call went live")

    assert _system_one(*args) == GOOD["route"]


# -- writes ----------------------------------------------------------------------------------


def write_one(path: Path) -> None:
    cache = open_recording(path)

    @cache
    def _system_one(model: str, state: str, questions: str) -> dict:
        return GOOD["gate"]

    _system_one("jev-1.14.0", json.dumps(STATE), json.dumps(GATE))


# Another writer: takes the recording's lock, then writes one entry of its own into the file (as
# a write in progress does) and holds the lock until its stdin closes.
HOLD_THE_LOCK = """
import json, sys
from pathlib import Path
from memorybook.recording.disk import writers_lock
path = Path(sys.argv[1])
with writers_lock(path):
    path.write_text(json.dumps({"theirs": json.loads(sys.argv[2])}), encoding="utf-8")
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_write_waits_for_another_processs_lock_and_keeps_what_it_wrote(tmp_path):
    path = tmp_path / "json_cache.json"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_LOCK, str(path), json.dumps(GOOD["gate"])],
        cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        writing = threading.Thread(target=recording.append_entries,
                                   args=(path, {"ours": GOOD["route"]}))
        writing.start()
        writing.join(timeout=1.0)
        assert writing.is_alive(), "the write did not wait for the other process's lock"
        holder.stdin.close()
        writing.join(timeout=30)
        assert not writing.is_alive()
    finally:
        holder.kill()
        holder.wait()
    assert read_recording(path) == {"ours": GOOD["route"], "theirs": GOOD["gate"]}


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o664])
def test_a_write_keeps_the_files_mode(tmp_path, mode):
    path = tmp_path / "json_cache.json"
    path.write_text("{}", encoding="utf-8")
    path.chmod(mode)
    write_one(path)
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert len(read_recording(path)) == 1


def test_a_new_file_gets_the_usual_mode(tmp_path):
    umask = os.umask(0o022)
    try:
        write_one(tmp_path / "json_cache.json")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "json_cache.json").stat().st_mode) == 0o644


# A new recording is written whole (its last step os.replace); an answer is added to one that
# exists in place (os.pwrite), after a rollback record (written, then synced).
@pytest.mark.parametrize("before, failing, errno_name", [
    (None, "replace", "ENOSPC"), (None, "replace", "EROFS"), (None, "fsync", "EIO"),
    ("{}", "pwrite", "ENOSPC"), ("{}", "pwrite", "EROFS"), ("{}", "fsync", "ENOSPC"),
    ("{}", "fsync", "EIO"),
])
def test_a_failed_write_is_a_recording_error_and_leaves_nothing_behind(
        tmp_path, monkeypatch, before, failing, errno_name):
    path = tmp_path / "json_cache.json"
    if before is not None:
        path.write_text(before, encoding="utf-8")
        path.chmod(0o644)
    code = getattr(errno, errno_name)

    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, failing, fail)
    with pytest.raises(RecordingError) as raised:
        write_one(path)
    assert f"Could not write the recording {path}: {os.strerror(code)}" in str(raised.value)
    monkeypatch.undo()
    left = sorted(p.name for p in tmp_path.iterdir())
    if before is None:
        assert left == ["json_cache.json.lock"], left
        return
    assert left == ["json_cache.json", "json_cache.json.lock"], left
    assert path.read_text(encoding="utf-8") == before
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_temporary_recording_files_are_ignored_by_git():
    for name in (".json_cache.json.k2v9x1", ".json_cache.new.json.abc_12",
                 ".accepting/commit.json", ".accepting.lock"):
        ignored = subprocess.run(["git", "check-ignore", "-q", f"json_cache/{name}"],
                                 cwd=REPO_ROOT)
        assert ignored.returncode == 0, name


# -- hints, data and settings --------------------------------------------------------------


def test_git_checkout_is_only_suggested_for_files_of_the_repository(tmp_path):
    assert "git checkout -- json_cache/json_cache.json" in restore_hint(RECORDING_PATH)
    assert restore_hint(tmp_path / "json_cache.json") == ""
    outside = tmp_path / "json_cache.json"
    outside.write_text("{broken", encoding="utf-8")
    with pytest.raises(RecordingError) as raised:
        read_recording(outside)
    assert "git checkout" not in str(raised.value) and str(outside) in str(raised.value)


def notebook_1_stopped_in(copy: Path):
    """Notebook 1 of a copy of the collection, run in its folder until a cell fails."""
    path = copy / "notebooks" / "01_memory_system.ipynb"
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, kernel_name="python3", timeout=120,
                            shutdown_kernel="immediate",
                            resources={"metadata": {"path": str(path.parent)}})
    with pytest.raises(CellExecutionError):
        client.execute()
    return notebook


@pytest.mark.parametrize("damage", ["not JSON", "an answer of the wrong shape"])
def test_a_damaged_recording_stops_notebook_1_with_its_name_not_a_traceback(tmp_path, damage):
    copy = copy_of_the_collection(tmp_path / "copy")
    recording = copy / RECORDING_PATH.relative_to(REPO_ROOT)
    if damage == "not JSON":
        recording.write_text('{"_system_one|jev-1.14.0|": ', encoding="utf-8")
    else:
        entries = json.loads(recording.read_text(encoding="utf-8"))
        for entry in entries.values():
            entry["answers"].get("team", {}).pop("choice", None)
        recording.write_text(json.dumps(entries, indent=2), encoding="utf-8")
    notebook = notebook_1_stopped_in(copy)
    [error] = [output for cell in notebook.cells for output in cell.get("outputs", [])
               if output.output_type == "error"]
    assert error.ename == "RecordingError", error.evalue
    assert "json_cache" in error.evalue and len(error.traceback) <= 2, error.traceback


def damage_one_answer(entry: dict, damage: str) -> None:
    team = entry["answers"]["team"]
    if damage == "a probability of 7.5":
        team["probabilities"][team["choice"]] = 7.5
    elif damage == "a probability that is NaN":
        team["probabilities"][team["choice"]] = float("nan")
    elif damage == "a team that is not an option":
        team["choice"] = "no_such_team"
    else:
        del entry["usage"]


@pytest.mark.parametrize("damage", ["a probability of 7.5", "a probability that is NaN",
                                    "a team that is not an option", "no usage"])
def test_a_damaged_answer_stops_notebook_1_in_the_cell_that_reads_it(tmp_path, damage):
    copy = copy_of_the_collection(tmp_path / "copy")
    recording = copy / RECORDING_PATH.relative_to(REPO_ROOT)
    entries = json.loads(recording.read_text(encoding="utf-8"))
    calls = json.loads(PROVENANCE_PATH.read_text(encoding="utf-8"))["entries"]
    [key] = [key for key in entries if calls[key]["call"] == "route T-201 with memories: none"]
    damage_one_answer(entries[key], damage)
    recording.write_text(json.dumps(entries, indent=2), encoding="utf-8")
    notebook = notebook_1_stopped_in(copy)
    [(cell, error)] = [(cell, output) for cell in notebook.cells
                       for output in cell.get("outputs", []) if output.output_type == "error"]
    assert "plain Jev ->" in cell.source, (
        f"{damage} stopped another cell than the first to read it: {cell.source[:80]!r}")
    assert error.ename == "RecordingError", (
        f"{damage}: dev/memorybook_dev/collection_kernel.py must check what notebook 1's cache "
        f"hands back: {error.ename}: {error.evalue}")
    assert "json_cache.json" in error.evalue and "T-201" in error.evalue, error.evalue
    assert len(error.traceback) <= 2, error.traceback


@pytest.mark.parametrize("value", ["abc", "0", "-3", "nan", "inf", "1e999", "1e308", "86401", "  "])
def test_a_bad_timeout_setting_is_named_with_its_value(monkeypatch, value):
    monkeypatch.setenv("MEMORYBOOK_TIMEOUT_SECONDS", value)
    if not value.strip():
        assert timeout_seconds() == 120
        return
    with pytest.raises(ConfigError, match=f"MEMORYBOOK_TIMEOUT_SECONDS='{value}'"):
        timeout_seconds()


def test_a_good_timeout_setting_is_used(monkeypatch):
    monkeypatch.setenv("MEMORYBOOK_TIMEOUT_SECONDS", "2.5")
    assert timeout_seconds() == 2.5
    monkeypatch.delenv("MEMORYBOOK_TIMEOUT_SECONDS")
    assert timeout_seconds() == 120


def test_a_bad_timeout_stops_the_jev_being_made_with_a_clear_error(tmp_path, monkeypatch):
    # Settings are read once, when the Jev is made (memorybook/settings.py): a bad one stops it
    # there, before any call could be sent.
    empty = tmp_path / "json_cache.json"
    empty.write_text("{}", encoding="utf-8")
    with pytest.raises(ConfigError, match="MEMORYBOOK_TIMEOUT_SECONDS='abc' is not a positive "
                                          "number"):
        fresh_jev(monkeypatch, TYPESAFE_API_KEY="sk-test", MEMORYBOOK_LIVE_IN_CI="1",
                  MEMORYBOOK_TIMEOUT_SECONDS="abc", MEMORYBOOK_RECORDING=str(empty))
    assert empty.read_text(encoding="utf-8") == "{}"


def test_a_live_answer_that_fails_the_checks_is_not_recorded(tmp_path):
    path = tmp_path / "json_cache.json"
    cache = open_recording(path)
    wrong = copy.deepcopy(GOOD["gate"])
    wrong["answers"]["remember"]["noul"] = 1.5

    @cache
    def _system_one(model: str, state: str, questions: str) -> dict:
        return wrong

    with pytest.raises(RecordingError, match="answers.remember.noul"):
        _system_one("jev-1.14.0", json.dumps(STATE), json.dumps(GATE))
    assert not path.exists()


# -- smaller faults, second round (issue 18) -----------------------------------------------


def test_a_recording_holding_one_key_twice_with_different_answers_is_refused(tmp_path):
    key = "_system_one|jev-1.14.0|a|b"
    first = json.dumps(GOOD["gate"])
    second = json.dumps({**GOOD["gate"], "answers": {"remember": {"type": "noul", "noul": 0.9}}})
    path = tmp_path / "json_cache.json"
    path.write_text(f'{{"{key}": {first}, "{key}": {second}}}', encoding="utf-8")
    with pytest.raises(RecordingError, match="twice") as raised:
        read_recording(path)
    assert repr(key) in str(raised.value)
    path.write_text(f'{{"{key}": {first}, "{key}": {first}}}', encoding="utf-8")
    assert read_recording(path) == {key: GOOD["gate"]}  # the same answer twice is no conflict


def test_a_value_given_twice_as_nan_is_no_conflict(tmp_path):
    key = "_system_one|jev-1.14.0|a|b"
    entry = json.dumps(GOOD["gate"]).replace('"noul": 0.02', '"noul": NaN, "noul": NaN')
    assert entry.count("NaN") == 2, "GOOD['gate'] changed: put the NaNs elsewhere"
    path = tmp_path / "json_cache.json"
    path.write_text(f'{{"{key}": {entry}}}', encoding="utf-8")
    try:
        entries = read_recording(path)  # its answer is refused when a call reads it (not here)
    except RecordingError as error:
        raise AssertionError(
            "NaN twice is the same value twice: memorybook/recording/file.py "
            f"(_refusing_conflicting_duplicates) must not call it a conflict: {error}") from None
    assert math.isnan(entries[key]["answers"]["remember"]["noul"])


@pytest.mark.parametrize("name", ["next_steps.json", "json_cache.new.json"])
def test_git_checkout_is_never_suggested_for_a_file_git_does_not_track(name):
    assert restore_hint(RECORDING_PATH.with_name(name)) == ""
    assert "git checkout -- json_cache/provenance.json" in restore_hint(
        RECORDING_PATH.with_name("provenance.json"))


def test_a_blank_api_key_is_no_key(monkeypatch, capfd):
    jev = fresh_jev(monkeypatch, TYPESAFE_API_KEY="  ")
    assert jev.mode == "replay", "a blank key must replay: see replay_only_reason() in config.py"
    answer = jev.ask(later_state("C-1042", 0), EXAMPLE_ROUTE)
    assert answer.answers["team"].choice == "cloud_ops"
    assert capfd.readouterr().err == ""


def test_a_recording_path_that_is_not_a_regular_file_is_refused_at_once(tmp_path):
    fifo = tmp_path / "json_cache.json"
    os.mkfifo(fifo)
    code = ("from memorybook.example import ROUTE, ask, later_state\n"
            "ask(later_state('C-1042', 0), ROUTE)")  # its first lookup reads the file
    try:
        result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, timeout=20,
                                capture_output=True, text=True,
                                env={**os.environ, "MEMORYBOOK_RECORDING": str(fifo)})
    except subprocess.TimeoutExpired:
        pytest.fail("opening a FIFO as the recording hung")
    assert result.returncode != 0
    assert f"The recording {fifo} is not a regular file" in result.stderr
