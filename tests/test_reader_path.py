"""The reader's path: inputs edited, the threshold tuned, calls that miss.

Readers edit tickets and thresholds. Each test here does what such a reader does, in a real
kernel or with the library and a fresh Jev with no key, and checks what the reader then sees.
Running a cell again and a second Run All are checked in nbval's own kernels
(`--run-cells-again`, conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from typesafe_sdk import Choice

from memorybook import (
    InMemoryMemories,
    Jev,
    PendingGates,
    ask_with_memory,
    ask_with_memory_async,
)
from memorybook.config import PROVENANCE_PATH, RECORDING_PATH, TYPESAFE_MODEL
from memorybook.example import EARLIER, ROUTE, later_state, ticket_state
from memorybook.recording import memory_ids_in
from memorybook.replay import RECORD_COMMAND, RecordingMissError
from memorybook_dev import experiments
from memorybook_dev.experiments import (
    describe_memories,
    probe_experiment,
    reconcile,
    remember_earlier_tickets,
)
from tests.helpers import NOTEBOOKS, REPO_ROOT, copy_of_the_collection, decode, fresh_jev

EDITED_TEXT = "Dashboards have been really slow since yesterday."
PLAYGROUND_LINK = re.compile(r"https://console\.typesafe\.ai/playground#share/[A-Za-z0-9+$-]+")


def collection_with_an_edited_ticket(folder: Path) -> Path:
    """A copy of the collection, with what `make run` and pytest need, and C-1042's first later
    message edited as a reader would edit it."""
    copy = copy_of_the_collection(folder)
    shutil.copytree(REPO_ROOT / "tools", copy / "tools")
    for name in ("conftest.py", "pyproject.toml"):
        shutil.copyfile(REPO_ROOT / name, copy / name)
    path = copy / "notebooks" / "01_memory_system.ipynb"
    notebook = nbformat.read(path, as_version=4)
    [cell] = [cell for cell in notebook.cells if cell.source.startswith("DATA = {")]
    original = '"text": "Dashboards have been really slow since this morning."'
    assert original in cell.source
    cell.source = cell.source.replace(original, f'"text": "{EDITED_TEXT}"')
    nbformat.write(notebook, path)
    return copy


def assert_explains_the_edited_call(shown: str, where: str) -> None:
    """The cause, in plain text, and a playground link that opens exactly the edited call."""
    assert "ticket T-201" in shown and "customer C-1042" in shown, where
    assert f"`ticket.messages[0].text` is \"{EDITED_TEXT}\"" in shown, where
    explained = [line for line in shown.splitlines()
                 if "Ask Jev this exact call in the TypeSafe playground: " in line]
    links = PLAYGROUND_LINK.findall("\n".join(explained))
    assert links, f"{where}: no playground link"
    for link in links:
        state, questions, share = decode(link)
        assert state["ticket"]["id"] == "T-201", where
        assert state["ticket"]["messages"][0]["text"] == EDITED_TEXT, where
        assert list(questions) == ["team"] and share["selectedModels"] == [TYPESAFE_MODEL], where


def test_an_edited_ticket_is_explained_wherever_the_collection_runs(tmp_path):
    copy = collection_with_an_edited_ticket(tmp_path / "copy")
    notebook = "notebooks/01_memory_system.ipynb"
    committed = (copy / notebook).read_bytes()
    recording = (copy / "json_cache" / "json_cache.json").read_bytes()
    runs = {
        "make run": [sys.executable, "-m", "tools.execute", notebook],
        "jupyter nbconvert --execute": [
            str(Path(sys.executable).with_name("jupyter-nbconvert")), "--to", "notebook",
            "--execute", notebook, "--output-dir", str(tmp_path)],
        "pytest --nbval": [sys.executable, "-m", "pytest", "-p", "no:xdist", "--nbval", notebook],
    }
    env = {k: v for k, v in os.environ.items() if k not in ("TYPESAFE_API_KEY", "CI")}
    env["PYTHONPATH"] = str(copy)  # the kernels import the copy's memorybook
    env["MEMORYBOOK_USAGE_DIR"] = str(tmp_path)  # the copy's lookups are not this run's
    for what, command in runs.items():
        result = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True,
                                timeout=180)
        assert result.returncode != 0, f"{what} passed with an edited ticket"
        assert_explains_the_edited_call(result.stdout + result.stderr, what)

    assert (copy / notebook).read_bytes() == committed, "make run kept the notebook as it was"
    recording_now = (copy / "json_cache" / "json_cache.json").read_bytes()
    assert recording_now == recording, "nothing recorded"


THRESHOLDS = (0, 0.02, 0.03, 0.5, 0.96, 0.97, 0.99, 1)
RECORDED_MEMORIES_KEPT_FROM = (0.04, 0.96)  # what notebook 2 says replays the recorded memories


def run_at_each_threshold(path: Path, set_threshold) -> dict[float, str]:
    """Run a notebook whole in one kernel once per threshold; what each run printed, ending
    with the error that stopped it, if one did. `set_threshold(notebook, value)` edits it."""
    outcomes = {}
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, kernel_name="python3", timeout=120,
                            shutdown_kernel="immediate",
                            resources={"metadata": {"path": str(path.parent)}})
    with client.setup_kernel():
        for value in THRESHOLDS:
            set_threshold(notebook, value)
            printed = []
            for index, cell in enumerate(notebook.cells):
                if cell.cell_type != "code":
                    continue
                try:
                    client.execute_cell(cell, index)
                except CellExecutionError:
                    error = next(o for o in cell.outputs if o.output_type == "error")
                    printed.append(f"\nstopped by {error.ename}: {error.evalue}")
                    break
                printed += [o.text for o in cell.outputs if o.get("name") == "stdout"]
            outcomes[value] = "".join(printed)
    return outcomes


def notebook_1_at(value: float) -> nbformat.NotebookNode:
    """Notebook 1, read afresh, with `REMEMBER_AT = value` in its settings cell."""
    notebook = nbformat.read(NOTEBOOKS[0], as_version=4)
    cell = next(c for c in notebook.cells if c.source.startswith("# pattern: the settings"))
    cell.source, edits = re.subn(r"(?m)^REMEMBER_AT = [0-9.]+", f"REMEMBER_AT = {value}",
                                 cell.source)
    assert edits == 1, "notebook 1's settings cell must set REMEMBER_AT once"
    return notebook


def test_notebook_1_run_whole_at_any_threshold_raises_nothing_but_the_explained_miss():
    """Every cell run, errors allowed, as `jupyter nbconvert --execute --allow-errors` runs it
    from notebooks/ (the collection's kernel), in a fresh kernel for each threshold."""
    low, high = RECORDED_MEMORIES_KEPT_FROM
    for value in THRESHOLDS:
        notebook = notebook_1_at(value)
        NotebookClient(notebook, kernel_name="python3", timeout=120, allow_errors=True,
                       shutdown_kernel="immediate",
                       resources={"metadata": {"path": str(NOTEBOOKS[0].parent)}}).execute()
        errors = [(index, output) for index, cell in enumerate(notebook.cells)
                  for output in cell.get("outputs", []) if output.output_type == "error"]
        printed = "".join(output.text for cell in notebook.cells
                          for output in cell.get("outputs", []) if output.get("name") == "stdout")
        where = f"notebook 1 run whole with REMEMBER_AT = {value}"
        for index, error in errors:
            shown = "\n".join(error.traceback)
            assert error.ename == "NotInCacheError", (
                f"{where}: cell {index} raised {error.ename}: {error.evalue[:300]}; every cell "
                "must run at any threshold from 0 to 1, stopped by nothing but a miss")
            assert error.evalue.startswith("The recording json_cache/json_cache.json has no "
                                           "answer to this call") and (
                "Nothing was sent" in error.evalue and RECORD_COMMAND in error.evalue), (
                f"{where}: cell {index}'s miss is not the collection's full explanation, shown as "
                f"the page's NotInCacheError (dev/memorybook_dev/collection_kernel.py): "
                f"{error.evalue[:500]}")
            assert shown.count("playground#share/") == 1, (
                f"{where}: cell {index} shows its miss's playground link "
                f"{shown.count('playground#share/')} times, not once:\n{shown[:2000]}")
        if low <= value <= high:
            assert not errors, f"{where}: {errors[0][1].evalue[:500]}"
            assert "Expected routes: 3/6 without memory, 6/6 with memory." in printed, where
        else:
            assert errors, f"{where} replayed other memories without a miss"
            assert f"REMEMBER_AT is {value} here" in errors[0][1].evalue, (
                f"{where}: its first miss must name the threshold: {errors[0][1].evalue[:500]}")
            assert "notebook 2 says which thresholds replay" in errors[0][1].evalue, where
        if "C-1042 T-101" in printed:  # the verdict follows the threshold set
            t101 = "P(remember) 0.97  saved" if value <= 0.97 else "P(remember) 0.97  not saved"
            assert t101 in printed, where


def test_notebook_2_says_whether_the_threshold_set_where_it_says_replays():
    def set_where_notebook_2_says(notebook, value):
        setting = re.compile(r"(?m)^remember_at = (REMEMBER_AT|[0-9.]+)")
        cell = next(c for c in notebook.cells if setting.search(c.source))
        cell.source = setting.sub(f"remember_at = {value}", cell.source)

    low, high = RECORDED_MEMORIES_KEPT_FROM
    for value, printed in run_at_each_threshold(NOTEBOOKS[1], set_where_notebook_2_says).items():
        assert "stopped by" not in printed, f"REMEMBER_AT = {value}: {printed[-500:]}"
        same = f"REMEMBER_AT = {value}: the recorded memories." in printed
        other = f"REMEMBER_AT = {value}: other memories: the first call" in printed
        assert (same, other) == (low <= value <= high, not low <= value <= high), (
            f"remember_at = {value} in notebook 2: its verdict on which memories replay is "
            f"wrong; check notebook 2's cell that sets remember_at: {printed[-300:]}")


# The kernel no longer refuses `REMEMBER_AT = ...` in notebooks 2-10: the library reads no
# module-level threshold, each call takes remember_at=. What keeps a reader from a threshold
# silently changing the run is the miss that names it: every call that keeps memories, given
# another threshold, stops at the first call the recording lacks and says the threshold is why.
def through_the_async_wrapper(jev: Jev, memories, remember_at: float) -> None:
    async def route_all() -> None:
        gates = PendingGates()
        for state in EARLIER:
            await ask_with_memory_async(state, ROUTE, memories, gates=gates,
                                        ask=jev.ask_async, remember_at=remember_at)
        await gates.drain()

    asyncio.run(route_all())


def reconciled_after_the_recorded_memories(jev: Jev, memories, remember_at: float) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        remember_earlier_tickets(memories, ask=jev.ask)
        reconcile(memories, ask=jev.ask, remember_at=remember_at)


def probed(jev: Jev, memories, remember_at: float) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        probe_experiment(memories, ask=jev.ask, remember_at=remember_at)


THRESHOLD_USERS = {
    "ask_with_memory": lambda jev, memories, remember_at: [
        ask_with_memory(state, ROUTE, memories, ask=jev.ask, remember_at=remember_at)
        for state in EARLIER],
    "ask_with_memory_async": through_the_async_wrapper,
    "remember_earlier_tickets": lambda jev, memories, remember_at: remember_earlier_tickets(
        memories, ask=jev.ask, remember_at=remember_at),
    "probe_experiment": probed,
    "reconcile": reconciled_after_the_recorded_memories,
}
# Each with remember_at 0 and 1; but the recorded run kept none of the later messages, so
# reconcile() from the recorded memories replays at 1, and is tried at 0 only.
THRESHOLD_CASES = [(call, remember_at) for call in THRESHOLD_USERS for remember_at in (0, 1)
                   if (call, remember_at) != ("reconcile", 1)]


@pytest.mark.parametrize("call, remember_at", THRESHOLD_CASES)
def test_a_threshold_passed_to_the_library_is_named_by_the_miss_it_causes(
        monkeypatch, call, remember_at):
    jev = fresh_jev(monkeypatch)
    miss = miss_of(lambda: THRESHOLD_USERS[call](jev, InMemoryMemories(), remember_at))
    assert miss.reasons[0] == (
        f"REMEMBER_AT is {remember_at} here and was 0.5 in the recorded run, so the gate kept "
        "other tickets (notebook 2 says which thresholds replay)."), (
        f"{call}(remember_at={remember_at}) missed without naming the threshold first: "
        f"memorybook/wrapper.py (threshold_named) must name it; it said {miss.reasons}")
    assert miss.reasons[1].startswith("Memories: this call carries "), miss.reasons


def test_setting_the_threshold_where_notebook_2_says_changes_what_the_wrapper_keeps(
        monkeypatch):
    jev = fresh_jev(monkeypatch)
    kept = {}
    for remember_at in (None, 0.975):
        memories = InMemoryMemories()
        chosen = {} if remember_at is None else {"remember_at": remember_at}
        for state in EARLIER[:2]:  # T-101 (0.97) and T-102 (0.98): first tickets
            ask_with_memory(state, ROUTE, memories, ask=jev.ask, **chosen)
        kept[remember_at] = [describe_memories(customer, memories)
                             for customer in ("C-1042", "C-2210")]
    assert kept == {None: ["T-101", "T-102"], 0.975: ["none", "T-102"]}


def miss_of(call: Callable[[], object]) -> RecordingMissError:
    """What a call that must miss raises, as the reader gets it."""
    with pytest.raises(RecordingMissError) as raised:
        call()
    return raised.value


def test_a_kernel_holding_extra_memories_is_told_to_restart(monkeypatch):
    jev = fresh_jev(monkeypatch, in_the_collection=True)
    memories = InMemoryMemories()
    remember_earlier_tickets(memories, ask=jev.ask)
    memories.save("C-1042", memories.recall("C-1042")[0])  # saved twice
    miss = miss_of(lambda: ask_with_memory(later_state("C-1042", 0), ROUTE, memories,
                                           ask=jev.ask))
    assert "about ticket T-201" in miss.summary
    assert "with the memories T-101, T-105, T-101" in miss.summary
    assert miss.reasons == [
        "Memories: this call carries T-101, T-105, T-101; the recorded one carried T-101, T-105."
        " This process holds other memories than the recorded run had at this point (in a"
        " notebook: restart the kernel and run it from the top; with a store kept on disk:"
        " start from an empty one, as the recorded run did)."]
    state, questions, share = decode(miss.link)
    assert memory_ids_in(state) == ["T-101", "T-105", "T-101"]
    assert list(questions) == ["team"] and share["selectedModels"] == [TYPESAFE_MODEL]
    assert RECORD_COMMAND in miss.how_to_record


def test_a_call_that_misses_because_an_earlier_one_did_names_that_one(monkeypatch):
    jev = fresh_jev(monkeypatch)
    edited = copy.deepcopy(EARLIER)
    edited[4]["ticket"]["messages"][0]["text"] += " (edited)"  # T-105, a contract
    monkeypatch.setattr(experiments, "EARLIER", edited)
    memories = InMemoryMemories()
    miss_of(lambda: remember_earlier_tickets(memories, ask=jev.ask))  # stops at T-105
    assert describe_memories("C-1042", memories) == "T-101"
    miss = miss_of(lambda: ask_with_memory(  # the upgrade, with T-101 alone
        later_state("C-1042", 1), ROUTE, memories, ask=jev.ask))
    assert "about ticket T-202" in miss.summary
    memories_reason, earlier = miss.reasons
    assert memories_reason.startswith("Memories: this call carries T-101;")
    assert ("restart the kernel and run" not in memories_reason
            and "will not help" in memories_reason)
    assert earlier.startswith("Earlier in this process another call for customer C-1042 "
                              "missed: the question 'team' about ticket T-105")
    other = miss_of(lambda: ask_with_memory(later_state("C-2210", 1), ROUTE, InMemoryMemories(),
                                            ask=jev.ask))
    assert not any("Earlier in this process" in reason for reason in other.reasons), (
        "a miss of C-1042's must not be named as the likely cause of another customer's: "
        f"explain_miss() in memorybook/replay.py looks only at this customer's: {other.reasons}")
    anew = miss_of(lambda: ask_with_memory(later_state("C-1042", 1), ROUTE, InMemoryMemories(),
                                           ask=Jev().ask))  # made afresh, as an app may
    assert not any("Earlier in this process" in reason for reason in anew.reasons), (
        "a Jev made afresh, with memories of its own, must not be told of another Jev's misses: "
        f"each keeps its own (ReplayOnlyTransport.misses in memorybook/replay.py): {anew.reasons}")


def test_a_raised_threshold_is_named_as_the_likely_cause(monkeypatch):
    jev = fresh_jev(monkeypatch)
    miss = miss_of(lambda: remember_earlier_tickets(InMemoryMemories(), ask=jev.ask,
                                                    remember_at=0.975))
    assert "about ticket T-103" in miss.summary
    assert miss.reasons[0].startswith("REMEMBER_AT is 0.975 here and was 0.5 in the recorded run")
    assert miss.reasons[1].startswith(
        "Memories: this call carries none; the recorded one carried T-101.")


def test_a_changed_question_is_named(monkeypatch):
    jev = fresh_jev(monkeypatch)
    route = ROUTE["team"]
    criteria = {**route.criteria, "billing": "Billing and invoices"}
    miss = miss_of(lambda: jev.ask(
        later_state("C-1042", 0),
        {"team": Choice(instructions=route.instructions, criteria=criteria)}))
    assert miss.reasons == [
        "The question differs from the recorded one at `questions.team.criteria.billing`. The "
        "recording only answers the questions exactly as the collection words them."]


def ask_about_a_new_ticket(jev: Jev):
    state = ticket_state("C-2210", "T-999", "Hello", "A new ticket.", "2026-10-01")
    return jev.ask(state, ROUTE)


def test_a_call_like_no_recorded_one_says_so(monkeypatch):
    jev = fresh_jev(monkeypatch)
    miss = miss_of(lambda: ask_about_a_new_ticket(jev))
    assert miss.reasons == ["No recorded call asks 'team' about ticket T-999: this is a new "
                            "call, which only Jev can answer."]


def test_a_recording_missing_one_of_the_collections_calls_says_how_to_restore_it(
        tmp_path, monkeypatch):
    entries = json.loads(RECORDING_PATH.read_text(encoding="utf-8"))
    plain_t201 = next(key for key, entry in entries.items()
                      if entry["answers"].get("team", {}).get("probabilities", {}).get(
                          "cloud_ops") == 0.55)
    del entries[plain_t201]
    shortened = tmp_path / "json_cache.json"
    shortened.write_text(json.dumps(entries, indent=2), encoding="utf-8")
    shutil.copyfile(PROVENANCE_PATH, tmp_path / "provenance.json")  # as json_cache/ holds it
    jev = fresh_jev(monkeypatch, in_the_collection=True, MEMORYBOOK_RECORDING=str(shortened))
    miss = miss_of(lambda: jev.ask(later_state("C-1042", 0), ROUTE))
    assert miss.reasons[0].startswith("The collection makes this call, but")
    assert "lacks its answer" in miss.reasons[0] and "make record" in miss.reasons[0]
    assert len(json.loads(shortened.read_text(encoding="utf-8"))) == 30, "nothing was written"


def test_in_ci_with_a_key_the_miss_says_ci_never_records(monkeypatch):
    jev = fresh_jev(monkeypatch, CI="true", TYPESAFE_API_KEY="sk-should-not-matter")
    miss = miss_of(lambda: ask_about_a_new_ticket(jev))
    assert miss.how_to_record.startswith("CI never calls the API")
    assert "sk-should-not-matter" not in str(miss) + miss.link
