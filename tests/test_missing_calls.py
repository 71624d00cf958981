"""Every command that meets a call the recording lacks says the same thing: which calls, why each
most likely missed, what each would cost, and the one command that records them.

Each test runs a command as `make` does, in a copy of the tree where a ticket of the example's
DATA was edited, in notebook 1 and in memorybook/example.py, as a maintainer would: `make
record-dry-run`, a keyless `make record`, `make run` and `make recording`. Those are processes,
so each is the subject.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from memorybook.config import RECORDING_PATH
from memorybook.replay import RECORD_COMMAND
from tests.helpers import REPO_ROOT, copy_of_the_collection

OLD_TEXT = "How do I add a new admin user?"
NEW_TEXT = "How do I add a new admin?"
THE_CALL = "the question 'team' about ticket T-101 ('Adding an admin') of customer C-1042"
THE_CAUSE = ('`ticket.messages[0].text` is "...do I add a new admin?"; in the recorded call it '
             'is "...do I add a new admin user?". The input was edited (in the collection: '
             "notebook 1's DATA or a cell); put it back to replay the recorded answer.")
RECORDING = RECORDING_PATH.relative_to(REPO_ROOT)  # where a copy of the tree holds its recording
RECORD_LINE = f"To record them: `{RECORD_COMMAND}`, read its report, then `make accept-recording`."


@pytest.fixture(scope="module")
def edited_tree(tmp_path_factory) -> Path:
    """A copy of the tree with one ticket's text edited in notebook 1's DATA and in the
    library's (memorybook/example.py), which the tools and notebooks 2-10 ask with."""
    copy = copy_of_the_collection(tmp_path_factory.mktemp("edited") / "copy")
    shutil.copytree(REPO_ROOT / "tools", copy / "tools")
    path = copy / "notebooks" / "01_memory_system.ipynb"
    notebook = nbformat.read(path, as_version=4)
    [data] = [cell for cell in notebook.cells if "DATA = {" in cell.source]
    assert OLD_TEXT in data.source, "test_missing_calls.py: update OLD_TEXT to a ticket's text"
    data.source = data.source.replace(OLD_TEXT, NEW_TEXT)
    nbformat.write(notebook, path)
    example = copy / "memorybook" / "example.py"
    text = example.read_text(encoding="utf-8")
    assert text.count(OLD_TEXT) == 1, "test_missing_calls.py: OLD_TEXT is not once in DATA"
    example.write_text(text.replace(OLD_TEXT, NEW_TEXT), encoding="utf-8")
    return copy


def run(tree: Path, *arguments: str, check: bool = False, tmpdir: Path | None = None,
        ) -> subprocess.CompletedProcess:
    env = {name: value for name, value in os.environ.items()
           if name not in ("TYPESAFE_API_KEY", "MEMORYBOOK_RECORDING", "MEMORYBOOK_USAGE_LOG")}
    env["PYTHONPATH"] = str(tree)
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    done = subprocess.run([sys.executable, *arguments], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=300)
    assert not check or done.returncode == 0, done.stderr
    return done


def assert_lists_the_missing_call(output: str, command: str) -> None:
    assert "Traceback" not in output, f"{command} printed a traceback:\n{output}"
    assert f"1. {THE_CALL}  ~" in output and " input tokens ($0.0000" in output, (
        f"{command} must list each call the recording lacks with its estimated cost "
        f"(tools/record/missing.py, describe_missing); it printed:\n{output}")
    assert THE_CAUSE in output, f"{command} must say why the call missed:\n{output}"
    assert "Playground: https://console.typesafe.ai/playground#share/" in output, output
    assert output.rstrip().endswith(RECORD_LINE), (
        f"{command} must end with the one command to record, {RECORD_LINE!r}:\n{output}")


def test_the_dry_run_after_an_edit_lists_the_missing_calls_and_leaves_no_file(
        edited_tree, tmp_path):
    done = run(edited_tree, "-m", "tools.record", "--dry-run", tmpdir=tmp_path)
    assert done.returncode != 0, "a dry run that meets a missing call must fail"
    assert_lists_the_missing_call(done.stderr, "make record-dry-run")
    assert list(tmp_path.iterdir()) == [], "the dry run left files in $TMPDIR"


def test_a_keyless_record_lists_the_calls_the_recording_lacks(edited_tree):
    done = run(edited_tree, "-m", "tools.record", "--calls-only")
    assert done.returncode != 0
    assert done.stderr.startswith("Recording needs a live client, but TYPESAFE_API_KEY is not "
                                  "set. Nothing was sent.\n"), done.stderr
    assert_lists_the_missing_call(done.stderr, "a keyless make record")


def test_make_run_on_a_missing_call_lists_it_and_changes_no_notebook(edited_tree):
    notebook = edited_tree / "notebooks" / "02_memory_gate.ipynb"
    before = notebook.read_bytes()
    done = run(edited_tree, "-m", "tools.execute", str(notebook))
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("notebooks/02_memory_gate.ipynb stopped: it makes a call the "
                                  "recording lacks.\n"), done.stderr
    assert_lists_the_missing_call(done.stderr, "make run")
    assert notebook.read_bytes() == before


def test_the_rebuild_refuses_an_edited_call_naming_the_same_command(edited_tree):
    recording = (edited_tree / RECORDING).parent
    before = {path.name: path.read_bytes() for path in recording.iterdir()}
    done = run(edited_tree, "-m", "tools.build_recording")
    assert done.returncode == 1
    assert done.stderr.startswith("Not rebuilt: "), done.stderr
    assert f"(`{RECORD_COMMAND}`)" in done.stderr.splitlines()[0]
    assert_lists_the_missing_call(done.stderr, "make recording")
    assert {path.name: path.read_bytes() for path in recording.iterdir()} == before


def test_the_dry_run_on_a_recording_that_cannot_be_read_says_why_in_one_line(tmp_path):
    copy = copy_of_the_collection(tmp_path / "copy")
    shutil.copytree(REPO_ROOT / "tools", copy / "tools")
    (copy / RECORDING).write_text('{"broken', encoding="utf-8")
    done = run(copy, "-m", "tools.record", "--dry-run")
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"Dry run stopped: The recording {RECORDING} is not valid JSON"), (
        done.stderr)
