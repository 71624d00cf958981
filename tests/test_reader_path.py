"""The reader's path: inputs edited, the threshold tuned, calls that miss.

Readers edit tickets and thresholds. Each test here does what such a reader does, in a real
kernel or a fresh copy of notebook 1's module with no key, and checks what the reader then sees.
Running a cell again and a second Run All are checked in nbval's own kernels
(`--run-cells-again`, conftest.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from typesafe_sdk import Choice

from memorybook.config import RECORDING_PATH
from memorybook.memory_system import TYPESAFE_MODEL
from memorybook.recording import memory_ids_in
from memorybook.replay import RECORD_COMMAND, RecordingMissError
from tests.helpers import (
    NOTEBOOKS,
    REPO_ROOT,
    copy_of_the_collection,
    decode,
    fresh_memory_system,
)

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


def test_notebook_1_replays_the_thresholds_notebook_2_names_and_explains_the_others():
    def edit_the_setting(notebook, value):
        cell = next(c for c in notebook.cells if c.source.startswith("# pattern: the settings"))
        cell.source = re.sub(r"(?m)^REMEMBER_AT = [0-9.]+", f"REMEMBER_AT = {value}", cell.source)

    low, high = RECORDED_MEMORIES_KEPT_FROM
    for value, printed in run_at_each_threshold(NOTEBOOKS[0], edit_the_setting).items():
        stopped = re.search(r"\nstopped by (\w+): (.*)$", printed, re.S)
        if low <= value <= high:
            assert not stopped, f"REMEMBER_AT = {value}: {stopped and stopped[0]}"
            assert "Expected routes: 3/6 without memory, 6/6 with memory." in printed
        else:
            assert stopped, f"REMEMBER_AT = {value} replayed other memories without a miss"
            assert stopped[1] == "RecordingMissError", f"REMEMBER_AT = {value}: {stopped[0]}"
            assert f"REMEMBER_AT is {value} here" in stopped[2], f"REMEMBER_AT = {value}"
            assert "notebook 2 says which thresholds replay" in stopped[2]
        if "C-1042 T-101" in printed:  # the verdict follows the threshold set
            t101 = "P(remember) 0.97  saved" if value <= 0.97 else "P(remember) 0.97  not saved"
            assert t101 in printed, f"REMEMBER_AT = {value}"


def test_notebook_2_verdicts_follow_the_threshold_set_where_it_says():
    def set_on_notebook_1s_module(notebook, value):
        setting = ("import memorybook.memory_system as notebook_1\n\n"
                   f"notebook_1.REMEMBER_AT = {value}")
        if "REMEMBER_AT" in notebook.cells[0].source:
            notebook.cells[0].source = setting
        else:  # a first cell of the reader's own, as notebook 2 suggests
            notebook.cells.insert(0, nbformat.v4.new_code_cell(setting))

    low, high = RECORDED_MEMORIES_KEPT_FROM
    for value, printed in run_at_each_threshold(NOTEBOOKS[1], set_on_notebook_1s_module).items():
        assert "stopped by" not in printed, f"REMEMBER_AT = {value}: {printed[-500:]}"
        t101 = "P(remember) 0.97  saved" if value <= 0.97 else "P(remember) 0.97  not saved"
        t103 = "P(remember) 0.02  saved" if value <= 0.02 else "P(remember) 0.02  not saved"
        assert t101 in printed and t103 in printed, f"REMEMBER_AT = {value}"
        same = f"REMEMBER_AT = {value}: the recorded memories." in printed
        assert same == (low <= value <= high), f"REMEMBER_AT = {value}"


def test_a_threshold_assigned_where_it_would_change_nothing_is_refused_saying_where():
    notebook = nbformat.read(NOTEBOOKS[1], as_version=4)  # notebook 2 imports notebook 1's code
    first_code = next(i for i, c in enumerate(notebook.cells) if c.cell_type == "code")
    notebook.cells.insert(first_code + 1, nbformat.v4.new_code_cell("REMEMBER_AT = 0.99"))
    client = NotebookClient(notebook, kernel_name="python3", timeout=120,
                            shutdown_kernel="immediate",
                            resources={"metadata": {"path": str(NOTEBOOKS[1].parent)}})
    try:
        client.execute()
    except CellExecutionError:
        pass
    refused = notebook.cells[first_code + 1]
    [error] = [o for o in refused.outputs if o.output_type == "error"]
    assert error.ename == "SettingHasNoEffectError"
    assert "memorybook.memory_system.REMEMBER_AT = ..." in error.evalue
    assert "Nothing in this cell was run" in error.evalue
    assert len(error.traceback) <= 2, "the message alone, not a traceback"


IMPORTS_NOTEBOOK_1 = re.compile(r"^(from|import) memorybook\.memory_system\b", re.M)


def first_error(notebook: nbformat.NotebookNode, folder: Path, cells: int):
    """Run the notebook's first `cells` code cells in a collection kernel working in `folder`;
    (index of the cell that failed, its error output), or None when none failed."""
    client = NotebookClient(notebook, kernel_name="python3", timeout=120,
                            shutdown_kernel="immediate",
                            resources={"metadata": {"path": str(folder)}})
    code = [index for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"]
    with client.setup_kernel():
        for index in code[:cells]:
            try:
                client.execute_cell(notebook.cells[index], index)
            except CellExecutionError:
                return index, next(o for o in notebook.cells[index].outputs
                                   if o.output_type == "error")
    return None


@pytest.mark.parametrize("path", NOTEBOOKS[1:], ids=lambda path: path.name[:2])
def test_a_threshold_assigned_in_the_cell_that_imports_notebook_1s_code_is_refused(path):
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    importing = next(number for number, cell in enumerate(code, start=1)
                     if IMPORTS_NOTEBOOK_1.search(cell.source))
    code[importing - 1].source += "\nREMEMBER_AT = 0.3"
    failed = first_error(notebook, path.parent, cells=importing)
    assert failed is not None, (
        f"REMEMBER_AT = 0.3 in the cell of {path.name} that imports notebook 1's code ran and "
        "changed nothing: the kernel set-up (dev/memorybook_dev/collection_kernel.py) must "
        "refuse it there too")
    _, error = failed
    assert error.ename == "SettingHasNoEffectError", error
    assert "memorybook.memory_system.REMEMBER_AT = ..." in error.evalue
    assert "Nothing in this cell was run" in error.evalue


def test_a_threshold_set_in_a_cell_before_notebook_1s_code_is_imported_is_refused_there():
    notebook = nbformat.read(NOTEBOOKS[1], as_version=4)
    notebook.cells.insert(0, nbformat.v4.new_code_cell("REMEMBER_AT = 0.3"))
    importing = next(number for number, cell in enumerate(
        (cell for cell in notebook.cells if cell.cell_type == "code"), start=1)
        if IMPORTS_NOTEBOOK_1.search(cell.source))
    failed = first_error(notebook, NOTEBOOKS[1].parent, cells=importing)
    assert failed is not None, (
        "REMEMBER_AT = 0.3 in a cell before notebook 2's import changed nothing, silently: "
        "the cell that imports memorybook.memory_system must be refused, saying so")
    index, error = failed
    assert IMPORTS_NOTEBOOK_1.search(notebook.cells[index].source), (
        "the cell refused must be the one that imports notebook 1's code")
    assert error.ename == "SettingHasNoEffectError", error
    assert "REMEMBER_AT in an earlier cell of this kernel would change nothing" in error.evalue
    assert "`del REMEMBER_AT`" in error.evalue


def test_setting_the_threshold_where_notebook_2_says_changes_what_the_wrapper_keeps(
        monkeypatch):
    kept = {}
    for remember_at in (None, 0.975):
        notebook_1 = fresh_memory_system(monkeypatch)
        if remember_at is not None:
            notebook_1.REMEMBER_AT = remember_at  # as notebook 2 says: on the module
        for state in notebook_1.EARLIER[:2]:  # T-101 (0.97) and T-102 (0.98): first tickets
            notebook_1.ask_with_memory(state, notebook_1.ROUTE)
        kept[remember_at] = [notebook_1.describe_memories(customer)
                             for customer in ("C-1042", "C-2210")]
    assert kept == {None: ["T-101", "T-102"], 0.975: ["none", "T-102"]}


def miss_of(call: Callable[[], object]) -> RecordingMissError:
    """What a call that must miss raises, as the reader gets it."""
    with pytest.raises(RecordingMissError) as raised:
        call()
    return raised.value


def test_a_kernel_holding_extra_memories_is_told_to_restart(monkeypatch):
    notebook_1 = fresh_memory_system(monkeypatch)
    notebook_1.remember_earlier_tickets()
    memories = notebook_1.MEMORIES
    memories.save("C-1042", memories.recall("C-1042")[0])  # saved twice
    miss = miss_of(lambda: notebook_1.ask_with_memory(notebook_1.later_state("C-1042", 0),
                                                      notebook_1.ROUTE))
    assert "about ticket T-201" in miss.summary
    assert "with the memories T-101, T-105, T-101" in miss.summary
    assert miss.reasons == [
        "Memories: this call carries T-101, T-105, T-101; the recorded one carried T-101, T-105."
        " This kernel holds other memories than the recorded run had at this point: restart the"
        " kernel and run the notebook from the top."]
    state, questions, share = decode(miss.link)
    assert memory_ids_in(state) == ["T-101", "T-105", "T-101"]
    assert list(questions) == ["team"] and share["selectedModels"] == [TYPESAFE_MODEL]
    assert RECORD_COMMAND in miss.how_to_record


def test_a_call_that_misses_because_an_earlier_one_did_names_that_one(monkeypatch):
    notebook_1 = fresh_memory_system(monkeypatch)
    notebook_1.EARLIER[4]["ticket"]["messages"][0]["text"] += " (edited)"  # T-105, a contract
    miss_of(notebook_1.remember_earlier_tickets)  # stops at T-105: C-1042 keeps T-101 only
    miss = miss_of(lambda: notebook_1.ask_with_memory(  # the upgrade, with T-101 alone
        notebook_1.later_state("C-1042", 1), notebook_1.ROUTE))
    assert "about ticket T-202" in miss.summary
    memories, earlier = miss.reasons
    assert memories.startswith("Memories: this call carries T-101;")
    assert "restart the kernel and run" not in memories and "will not help" in memories
    assert earlier.startswith("Earlier in this process another call missed: the question "
                              "'team' about ticket T-105")


def test_a_raised_threshold_is_named_as_the_likely_cause(monkeypatch):
    notebook_1 = fresh_memory_system(monkeypatch)
    notebook_1.REMEMBER_AT = 0.975
    miss = miss_of(notebook_1.remember_earlier_tickets)
    assert "about ticket T-103" in miss.summary
    assert miss.reasons[0].startswith(
        "Memories: this call carries none; the recorded one carried T-101. REMEMBER_AT is "
        "0.975 here and was 0.5 in the recorded run")


def test_a_changed_question_is_named(monkeypatch):
    notebook_1 = fresh_memory_system(monkeypatch)
    route = notebook_1.ROUTE["team"]
    criteria = {**route.criteria, "billing": "Billing and invoices"}
    miss = miss_of(lambda: notebook_1.ask(
        notebook_1.later_state("C-1042", 0),
        {"team": Choice(instructions=route.instructions, criteria=criteria)}))
    assert miss.reasons == [
        "The question differs from the recorded one at `questions.team.criteria.billing`. The "
        "recording only answers the questions exactly as the collection words them."]


def ask_about_a_new_ticket(notebook_1: ModuleType):
    state = notebook_1.ticket_state("C-2210", "T-999", "Hello", "A new ticket.", "2026-10-01")
    return notebook_1.ask(state, notebook_1.ROUTE)


def test_a_call_like_no_recorded_one_says_so(monkeypatch):
    notebook_1 = fresh_memory_system(monkeypatch)
    miss = miss_of(lambda: ask_about_a_new_ticket(notebook_1))
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
    notebook_1 = fresh_memory_system(monkeypatch, MEMORYBOOK_RECORDING=str(shortened))
    miss = miss_of(lambda: notebook_1.ask(notebook_1.later_state("C-1042", 0),
                                          notebook_1.ROUTE))
    assert miss.reasons[0].startswith("The collection makes this call, but")
    assert "lacks its answer" in miss.reasons[0] and "make record" in miss.reasons[0]
    assert len(json.loads(shortened.read_text(encoding="utf-8"))) == 30, "nothing was written"


def test_in_ci_with_a_key_the_miss_says_ci_never_records(monkeypatch):
    notebook_1 = fresh_memory_system(monkeypatch, CI="true",
                                     TYPESAFE_API_KEY="sk-should-not-matter")
    miss = miss_of(lambda: ask_about_a_new_ticket(notebook_1))
    assert miss.how_to_record.startswith("CI never calls the API")
    assert "sk-should-not-matter" not in str(miss) + miss.link

