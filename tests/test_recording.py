"""The recording: rebuilt from the published figures, complete, honest about what it filled in."""

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from memorybook.config import PROVENANCE_PATH, RECORDING_PATH, TYPESAFE_MODEL
from memorybook.example import ROUTE, later_state, ticket_state
from memorybook.recording import (
    RecordingError,
    leaf_values,
    read_recording,
    recorded_noul_answers,
)
from memorybook.replay import RECORD_COMMAND, RecordingMissError
from tests.helpers import REPO_ROOT, copy_of_the_collection, fresh_jev

ENTRIES = read_recording(RECORDING_PATH)
PROVENANCE = json.loads(PROVENANCE_PATH.read_text(encoding="utf-8"))


def test_the_committed_files_are_what_the_table_of_figures_rebuilds():
    rebuild = subprocess.run([sys.executable, "-m", "tools.build_recording", "--check"],
                             cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert rebuild.returncode == 0, rebuild.stderr


OFFICIAL_QUESTIONS = json.loads(
    (REPO_ROOT / "data" / "official_questions.json").read_text(encoding="utf-8"))

# `make recording`, with the gate asking the official question reworded by one word.
REBUILD_REWORDED = """
import runpy, sys
from typesafe_sdk import Noul
import memorybook.memory
memorybook.memory.GATE["remember"] = Noul.model_validate({gate!r})
sys.argv = ["build_recording"]
runpy.run_module("tools.build_recording", run_name="__main__")
"""


def test_a_reworded_question_is_never_given_the_published_answers(tmp_path):
    copy = copy_of_the_collection(tmp_path / "copy")
    shutil.copytree(REPO_ROOT / "tools", copy / "tools")
    gate = dict(OFFICIAL_QUESTIONS["gate"]["remember"])
    assert " lasting fact " in gate["instructions"], (
        "data/official_questions.json: the official gate asks about a 'lasting fact'; restore "
        "the file (`git checkout -- data/official_questions.json`)")
    gate["instructions"] = gate["instructions"].replace(" lasting fact ", " durable fact ")
    recording = copy / "json_cache"
    before = {path.name: path.read_bytes() for path in recording.iterdir()}
    rebuild = subprocess.run([sys.executable, "-c", REBUILD_REWORDED.format(gate=gate)],
                             cwd=copy, env={**os.environ, "PYTHONPATH": str(copy)},
                             capture_output=True, text=True, timeout=300)
    assert rebuild.returncode == 1 and rebuild.stderr.startswith(
        "Not rebuilt: the call gate T-201 routed to cloud_ops asks something other than the "
        "official page does"), (
        "`make recording` must refuse a gate reworded from data/official_questions.json, naming "
        f"the first call it would answer (tools/build_recording.py); it said: {rebuild.stderr}")
    assert {path.name: path.read_bytes() for path in recording.iterdir()} == before, (
        "a refused rebuild changed json_cache/: tools/build_recording.py must write nothing")


def test_the_keys_are_the_ones_the_official_code_requests():
    lines = (REPO_ROOT / "data" / "official_keys.txt").read_text(encoding="utf-8").splitlines()
    official = {line for line in lines if line and not line.startswith("#")}
    assert set(ENTRIES) == official


def test_the_published_totals_hold():
    totals = PROVENANCE["published_totals"]
    questions = [next(iter(entry["answers"])) for entry in ENTRIES.values()]
    assert len(ENTRIES) == totals["calls"] == 31
    assert questions.count("team") == totals["route_calls"] == 19
    assert questions.count("remember") == totals["gate_calls"] == 12
    assert sum(e["usage"]["input_tokens"] for e in ENTRIES.values()) == totals["input_tokens"]
    assert sum(e["usage"]["output_tokens"] for e in ENTRIES.values()) == totals["output_tokens"]


def test_every_entry_was_made_with_the_pinned_model():
    assert {entry["model"] for entry in ENTRIES.values()} == {TYPESAFE_MODEL}


def test_every_value_is_either_published_or_filled_by_a_named_rule():
    assert set(PROVENANCE["entries"]) == set(ENTRIES)
    for key, entry in ENTRIES.items():
        provenance = PROVENANCE["entries"][key]
        fields = {field for field, _ in leaf_values(entry)}
        published = set(provenance["published"]) & fields
        filled = set(provenance["filled"])
        assert published | filled == fields, provenance["call"]
        assert not published & filled, provenance["call"]
        assert set(provenance["filled"].values()) <= set(PROVENANCE["rules"])


def test_choice_answers_are_well_formed():
    for entry in ENTRIES.values():
        answer = entry["answers"].get("team")
        if answer:
            probabilities = answer["probabilities"]
            assert len(probabilities) == 7 and abs(sum(probabilities.values()) - 1) < 1e-9
            assert max(probabilities, key=probabilities.get) == answer["choice"]


@pytest.mark.after_notebooks
def test_the_notebooks_read_every_entry_and_nothing_else(keys_read_by_notebooks):
    assert set(ENTRIES) - keys_read_by_notebooks == set(), "entries no notebook reads"
    assert keys_read_by_notebooks - set(ENTRIES) == set(), "lookups the recording cannot answer"


def no_network(*args, **kwargs):
    raise AssertionError("a socket was opened")


@pytest.mark.parametrize("env", [{}, {"TYPESAFE_API_KEY": "sk-test", "CI": "true"}],
                         ids=["no key", "key but CI"])
def test_a_call_missing_from_the_recording_fails_at_once_and_says_how_to_record(
        env, monkeypatch, capfd):
    jev = fresh_jev(monkeypatch, in_the_collection=True, **env)  # as in a notebook
    for name in ("connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    state = later_state("C-1042", 0)
    state["ticket"]["subject"] = "Slow dashboards, again"
    with pytest.raises(RecordingMissError) as raised:
        jev.ask(state, ROUTE)
    message = str(raised.value)
    assert ("The recording json_cache/json_cache.json has no answer to this call"
            in message)
    assert "about ticket T-201 ('Slow dashboards, again') of customer C-1042" in message
    assert '`ticket.subject` is "Slow dashboards, again"' in message
    assert "https://console.typesafe.ai/playground#share/" in message
    how = "CI never calls the API" if env else RECORD_COMMAND
    assert how in message
    printed = capfd.readouterr()
    assert "sk-test" not in message + printed.out + printed.err


def test_a_corrupt_recording_is_named_and_left_as_it_was(tmp_path, monkeypatch):
    corrupt = tmp_path / "json_cache.json"
    corrupt.write_text('{"half an entry": ', encoding="utf-8")
    jev = fresh_jev(monkeypatch, MEMORYBOOK_RECORDING=str(corrupt))
    # Making the Jev opened no file; the first call reads it.
    with pytest.raises(RecordingError) as raised:
        jev.ask(later_state("C-1042", 0), ROUTE)
    assert str(corrupt) in str(raised.value)
    assert "git checkout" not in str(raised.value)  # git cannot restore a file outside the repo
    assert corrupt.read_text(encoding="utf-8") == '{"half an entry": '


def test_a_new_recording_is_described_by_the_collections_provenance_until_it_is_accepted(
        tmp_path, monkeypatch):
    new = tmp_path / "new.json"  # as `make record` fills it: no provenance.json beside it
    new.write_bytes(RECORDING_PATH.read_bytes())
    jev = fresh_jev(monkeypatch, MEMORYBOOK_RECORDING=str(new))
    try:
        answers = recorded_noul_answers("remember")
    except FileNotFoundError as error:
        raise AssertionError(
            "notebook 2 and `make record`'s report read the provenance beside the recording in "
            "use, and a new recording has none: memorybook/config.py (provenance_path) must "
            f"fall back to the collection's: {error}") from None
    assert sorted(answer.origin for answer in answers).count("published") == 5
    # A miss is still compared only with what is beside the recording that lacked the call.
    state = ticket_state("C-2210", "T-999", "2026-10-01", "Hello", "A new ticket.")
    with pytest.raises(RecordingMissError) as raised:
        jev.ask(state, ROUTE)
    assert raised.value.reasons[0].startswith(f"Nothing beside {new} says which requests"), (
        raised.value.reasons)
