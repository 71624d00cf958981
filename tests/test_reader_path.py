"""The reader's path: cells run again, inputs edited, the threshold tuned, calls that miss.

Readers run these notebooks in JupyterLab, one cell at a time, a cell twice, Run All twice, and
they edit tickets and thresholds. Each test here does what such a reader does, in a real kernel
or a fresh interpreter with no key, and checks what the reader then sees.
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path

import nbformat
import pytest
from lzstring import LZString
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from memorybook.config import RECORDING_PATH, TYPESAFE_MODEL
from tests.helpers import NOTEBOOKS, copy_of_the_collection, run_python


def comparable(outputs: list) -> list:
    """What a reader reads in a cell's outputs: text, Markdown and whether an image is there."""
    seen = []
    for output in outputs:
        if output.get("output_type") == "stream":
            if seen and seen[-1][0] == output["name"]:  # one print may arrive in pieces
                seen[-1] = (output["name"], seen[-1][1] + output["text"])
            else:
                seen.append((output["name"], output["text"]))
        elif output.get("output_type") == "error":
            seen.append(("error", output.get("ename"), output.get("evalue")))
        else:
            data = output.get("data", {})
            seen.append(("data", data.get("text/markdown"), "image/png" in data,
                         None if "image/png" in data else data.get("text/plain")))
    return seen


def run_in_one_kernel(path: Path, passes: dict[str, list[int]]) -> dict[str, dict[int, list]]:
    """Execute a notebook's code cells in one kernel, in the orders given, pass after pass.

    Returns, for each pass, what each code cell showed after its last execution in that pass.
    """
    notebook = nbformat.read(path, as_version=4)
    shown = {}
    client = NotebookClient(notebook, kernel_name="python3", timeout=120, record_timing=False,
                            shutdown_kernel="immediate",
                            extra_arguments=["--IPKernelApp.log_level=ERROR"],
                            resources={"metadata": {"path": str(path.parent)}})
    with client.setup_kernel():
        for how, order in passes.items():
            for index in order:
                try:
                    client.execute_cell(notebook.cells[index], index)
                except CellExecutionError as error:
                    pytest.fail(f"{path.name}, {how}: code cell at index {index} failed:\n"
                                f"{str(error)[-1500:]}")
            shown[how] = {index: comparable(notebook.cells[index].outputs)
                          for index in sorted(set(order))}
    return shown


def code_cells(path: Path) -> list[int]:
    notebook = nbformat.read(path, as_version=4)
    return [index for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"]


@pytest.mark.parametrize("committed_path", NOTEBOOKS, ids=lambda path: path.stem)
def test_running_cells_again_gives_the_committed_outputs(committed_path, tmp_path, monkeypatch):
    """In one kernel, as a reader goes: each cell run twice in a row, then Run All once more.

    The second pass starts from the state the whole first pass left, so it is also a Run All
    after a complete run: the collection's check of a reader pressing Run All twice (the browser
    test runs all once, in JupyterLab, and compares the same outputs).
    """
    committed = nbformat.read(committed_path, as_version=4)
    path = copy_of_the_collection(tmp_path) / "notebooks" / committed_path.name
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the kernel imports the copy's memorybook
    cells = code_cells(path)
    passes = {"each cell twice in a row": [index for index in cells for _ in (0, 1)],
              "then run all again": cells}
    for how, outputs in run_in_one_kernel(path, passes).items():
        for index in cells:
            assert outputs[index] == comparable(committed.cells[index].outputs), \
                f"{path.name}, {how}: code cell at index {index}"


def test_an_edited_ticket_misses_with_its_field_named_and_a_link_to_that_call(tmp_path,
                                                                           monkeypatch):
    copy = copy_of_the_collection(tmp_path)
    data_path = copy / "data" / "tickets.json"
    data = json.loads(data_path.read_text(encoding="utf-8"))
    edited_text = "Dashboards have been really slow since yesterday."
    data["later_messages"][0]["text"] = edited_text
    data_path.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    recording = copy / "json_cache" / "json_cache.json"
    before = hashlib.sha256(recording.read_bytes()).hexdigest()

    monkeypatch.setenv("PYTHONPATH", str(copy))  # the kernel imports the copy's memorybook
    path = copy / "notebooks" / "01_plain_routing.ipynb"
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, kernel_name="python3", timeout=120,
                            resources={"metadata": {"path": str(path.parent)}})
    with pytest.raises(CellExecutionError):
        client.execute()

    failed = next(cell for cell in notebook.cells if cell.cell_type == "code"
                  and "slow_dashboards = later_state" in cell.source)
    shown = "".join(output.get("data", {}).get("text/markdown", "")
                    for output in failed.outputs)
    assert "ticket T-201" in shown and "customer C-1042" in shown
    assert "`ticket.messages[0].text`" in shown and edited_text in shown
    assert "Traceback" not in json.dumps(failed.outputs)
    link = shown.split("](", 1)[1].split(")", 1)[0]
    share = json.loads(LZString.decompressFromEncodedURIComponent(link.split("#share/", 1)[1]))
    state = json.loads(share["documentText"])
    assert state["ticket"]["id"] == "T-201"
    assert state["ticket"]["messages"][0]["text"] == edited_text
    assert list(json.loads(share["promptsText"])) == ["team"]
    assert share["selectedModels"] == [TYPESAFE_MODEL]
    assert hashlib.sha256(recording.read_bytes()).hexdigest() == before, "a miss wrote nothing"


def test_setting_the_threshold_where_notebook_2_says_changes_what_the_wrapper_keeps():
    keeps = textwrap.dedent("""
        import memorybook.gate
        {setting}
        from memorybook.memory import ask_with_memory, memory_ids
        from memorybook.routing import EARLIER, ROUTE
        for state in EARLIER[:2]:  # T-101 (0.97) and T-102 (0.98): both first tickets
            ask_with_memory(state, ROUTE)
        print(memory_ids("C-1042"), "|", memory_ids("C-2210"))
    """)
    default = run_python(keeps.format(setting=""))
    raised = run_python(keeps.format(setting="memorybook.gate.REMEMBER_AT = 0.975"))
    assert default.returncode == 0 and raised.returncode == 0, default.stderr + raised.stderr
    assert default.stdout.strip() == "T-101 | T-102"
    assert raised.stdout.strip() == "none | T-102"


def miss_of(code: str, **env: str):
    """Run code that must miss; return the RecordingMissError's parts as the reader gets them."""
    result = run_python(textwrap.dedent("""
        import json
        from memorybook.replay import RecordingMissError
        try:
        {code}
        except RecordingMissError as miss:
            print(json.dumps({{"summary": miss.summary, "reasons": miss.reasons,
                              "link": miss.link, "how_to_record": miss.how_to_record,
                              "text": str(miss)}}))
        else:
            print(json.dumps(None))
    """).format(code=textwrap.indent(textwrap.dedent(code), "    ")), **env)
    assert result.returncode == 0, result.stderr
    miss = json.loads(result.stdout.splitlines()[-1])
    assert miss is not None, "the call was expected to miss"
    return miss


def decoded_call(link: str) -> tuple[dict, dict, list]:
    share = json.loads(LZString.decompressFromEncodedURIComponent(link.split("#share/", 1)[1]))
    return (json.loads(share["documentText"]), json.loads(share["promptsText"]),
            share.get("selectedModels"))


def test_a_kernel_holding_extra_memories_is_told_to_restart():
    miss = miss_of("""
        from memorybook.memory import ask_with_memory, remember_earlier_tickets, MEMORIES
        from memorybook.routing import EARLIER, ROUTE, later_state
        remember_earlier_tickets()
        MEMORIES.save("C-1042", MEMORIES.recall("C-1042")[0])  # as a second run used to do
        ask_with_memory(later_state("C-1042", 0), ROUTE)
    """)
    assert "about ticket T-201" in miss["summary"]
    assert "with the memories T-101, T-105, T-101" in miss["summary"]
    assert miss["reasons"] == [
        "Memories: this call carries T-101, T-105, T-101; the recorded one carried T-101, T-105."
        " This kernel holds other memories than the recorded run had at this point: restart the"
        " kernel and run the notebook from the top."]
    state, questions, models = decoded_call(miss["link"])
    assert [m["request"]["ticket"]["id"] for m in state["earlier_tickets_from_this_customer"]] \
        == ["T-101", "T-105", "T-101"]
    assert list(questions) == ["team"] and models == [TYPESAFE_MODEL]
    assert "TYPESAFE_API_KEY=... make lab" in miss["how_to_record"]


def test_a_raised_threshold_is_named_as_the_likely_cause():
    miss = miss_of("""
        import memorybook.gate
        memorybook.gate.REMEMBER_AT = 0.975
        from memorybook.memory import remember_earlier_tickets
        remember_earlier_tickets()
    """)
    assert "about ticket T-103" in miss["summary"]
    assert miss["reasons"][0].startswith(
        "Memories: this call carries none; the recorded one carried T-101. REMEMBER_AT is "
        "0.975 here and was 0.5 in the recorded run")


def test_a_changed_question_is_named():
    miss = miss_of("""
        from typesafe_sdk import Choice
        from memorybook.routing import ROUTE, ask, later_state
        criteria = {**ROUTE["team"].criteria, "billing": "Billing and invoices"}
        ask(later_state("C-1042", 0), {"team": Choice(instructions=ROUTE["team"].instructions,
                                                      criteria=criteria)})
    """)
    assert miss["reasons"] == [
        "The question differs from the recorded one at `questions.team.criteria.billing`. The "
        "recording only answers the questions exactly as the collection words them."]


def test_a_call_like_no_recorded_one_says_so():
    miss = miss_of("""
        from memorybook.routing import ROUTE, ask, ticket_state
        ask(ticket_state("C-2210", "T-999", "Hello", "A new ticket.", "2026-10-01"), ROUTE)
    """)
    assert miss["reasons"] == ["No recorded call asks 'team' about ticket T-999: this is a new "
                               "call, which only Jev can answer."]


def test_a_recording_missing_one_of_the_collections_calls_says_how_to_restore_it(tmp_path):
    entries = json.loads(RECORDING_PATH.read_text(encoding="utf-8"))
    plain_t201 = next(key for key, entry in entries.items()
                      if entry["answers"].get("team", {}).get("probabilities", {}).get(
                          "cloud_ops") == 0.55)
    del entries[plain_t201]
    shortened = tmp_path / "json_cache.json"
    shortened.write_text(json.dumps(entries, indent=2), encoding="utf-8")
    miss = miss_of("""
        from memorybook.routing import ROUTE, ask, later_state
        ask(later_state("C-1042", 0), ROUTE)
    """, MEMORYBOOK_RECORDING=str(shortened))
    assert miss["reasons"][0].startswith("The collection makes this call, but")
    assert "lacks its answer" in miss["reasons"][0] and "make record" in miss["reasons"][0]
    assert len(json.loads(shortened.read_text(encoding="utf-8"))) == 30, "nothing was written"


def test_in_ci_with_a_key_the_miss_says_ci_never_records():
    miss = miss_of("""
        from memorybook.routing import ROUTE, ask, ticket_state
        ask(ticket_state("C-2210", "T-999", "Hello", "A new ticket.", "2026-10-01"), ROUTE)
    """, CI="true", TYPESAFE_API_KEY="sk-should-not-matter")
    assert miss["how_to_record"].startswith("CI never calls the API")
    assert "sk-should-not-matter" not in json.dumps(miss)

