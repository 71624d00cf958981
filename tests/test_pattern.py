"""The script `make pattern` prints: notebook 1's pattern, silent when imported, the headline when
run.

A reader copies it into a folder of their own. Imported, it defines the wrapper and sends
nothing; run beside the recording (json_cache/json_cache.json), with no key, it prints the probe
table and the six-message comparison, 3/6 then 6/6. Where the recording is not there, or the
threshold is one the recording does not replay, the first call that misses names itself, guessing
no cause; a threshold that is no probability is refused; and one line, which the header shows,
puts a stand-in in place of Jev.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memorybook.config import RECORDING_PATH
from tests.helpers import COMMITTED_RECORDING, PUBLISHED, REPO_ROOT, decode
from tools.loopback_server import LoopbackSystemOne, closed_port
from tools.pattern import HEADER, STAND_IN_LINE

HEADLINE = "Expected routes: 3/6 without memory, 6/6 with memory."


@pytest.fixture(scope="module")
def printed_script() -> str:
    """What `make pattern` prints (its command, `python -m tools.pattern`)."""
    printed = subprocess.run([sys.executable, "-m", "tools.pattern"], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0, printed.stderr
    return printed.stdout


def readers_folder(tmp_path: Path, script: str, recording: bool = True) -> Path:
    """A folder of the reader's own: the script as memory_pattern.py, and the recording."""
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "memory_pattern.py").write_text(script, encoding="utf-8")
    if recording:
        (folder / "json_cache").mkdir()
        shutil.copyfile(RECORDING_PATH, folder / "json_cache" / "json_cache.json")
    return folder


def python_in(folder: Path, *arguments: str, **env: str) -> subprocess.CompletedProcess:
    """Python in `folder` as a reader runs it: no key unless given, nothing of this repository
    on the path (the folder is; -s leaves out the user's site-packages)."""
    return subprocess.run([sys.executable, "-s", *arguments], cwd=folder, capture_output=True,
                          text=True, timeout=120, env={"PATH": "/usr/bin:/bin", **env})


def test_importing_the_script_prints_nothing_and_sends_nothing(tmp_path, printed_script):
    # No recording and a key: any call the import made would reach the server.
    folder = readers_folder(tmp_path, printed_script, recording=False)
    with LoopbackSystemOne({}) as server:
        imported = python_in(folder, "-B", "-c", "import memory_pattern",
                             TYPESAFE_API_KEY="sk-reader", TYPESAFE_ENDPOINT=server.base_url)
        sent = len(server.requests)
    assert imported.returncode == 0, imported.stderr
    assert (imported.stdout, imported.stderr, sent) == ("", "", 0), (
        "importing the script `make pattern` prints must print nothing and send nothing: "
        "notebook 1's cells tagged `example` go under `if __name__ == \"__main__\":` "
        f"(tools/pattern.py), its `pattern` cells only define; printed {imported.stdout!r}, "
        f"{imported.stderr!r}, sent {sent} requests")
    assert sorted(path.name for path in folder.iterdir()) == ["memory_pattern.py"]


def test_run_beside_the_recording_the_script_prints_the_headline(tmp_path, printed_script):
    folder = readers_folder(tmp_path, printed_script)
    with closed_port() as refusing_url:  # a call the recording lacked would fail
        ran = python_in(folder, "-B", "memory_pattern.py", TYPESAFE_ENDPOINT=refusing_url)
    assert ran.returncode == 0, ran.stderr[-2000:]
    for published in ("first_ticket.txt", "baseline.txt", "probe_table.txt",
                      "reconciliation_table.txt"):
        expected = (PUBLISHED / published).read_text(encoding="utf-8")
        assert expected in ran.stdout, (
            f"the script `make pattern` prints, run beside the recording, must print "
            f"tests/published/{published}: tag the notebook 1 cell that prints it `example`")
    assert ran.stdout.rstrip().endswith(HEADLINE), ran.stdout[-500:]
    recording = folder / "json_cache" / "json_cache.json"
    assert recording.read_bytes() == COMMITTED_RECORDING, "a replay changed the recording"
    assert sorted(path.name for path in folder.rglob("*")) == [
        "json_cache", "json_cache.json", "memory_pattern.py"], "the replay wrote files"


def last_line(ran: subprocess.CompletedProcess) -> str:
    assert ran.returncode == 1, f"the script did not stop: {ran.stdout[-500:]}{ran.stderr}"
    return ran.stderr.strip().splitlines()[-1]


def assert_names_the_call_and_guesses_no_cause(stopped: str, looked: Path, ticket: str) -> None:
    """The pattern's keyless miss: the file, the call, nothing sent, a link to exactly that call
    once, and no guess at a cause (notebook 1's `ask(), cached` cell)."""
    assert stopped.startswith(f"NotInCacheError: {looked} has no answer to ['team'] about "
                              f"ticket {ticket}; without TYPESAFE_API_KEY nothing was sent."), (
        "a keyless miss in the pattern must name the cache file (its absolute path), the call "
        f"(its questions and ticket) and say nothing was sent (notebook 1's `_system_one`): "
        f"{stopped[:400]}")
    said = stopped.removeprefix(f"NotInCacheError: {looked}").split("https://")[0]
    assert not re.search(r"(?i)cause|REMEMBER_AT|threshold|memories", said), (
        "the pattern knows only that a call is not in its cache: its miss must guess no cause "
        f"(notebook 1's `_system_one`): {stopped[:400]}")
    [link] = re.findall(r"https://console\.typesafe\.ai/playground#share/\S+", stopped)
    state, questions, share = decode(link)
    assert state["ticket"]["id"] == ticket and list(questions) == ["team"], (
        "the link must open exactly the call that missed")
    assert share["selectedModels"] == ["jev-1.14.0"]


def test_without_its_recording_the_script_names_the_file_it_looked_for(tmp_path, printed_script):
    folder = readers_folder(tmp_path, printed_script, recording=False)
    ran = python_in(folder, "-B", "memory_pattern.py")
    looked = (folder / "json_cache" / "json_cache.json").resolve()
    assert_names_the_call_and_guesses_no_cause(last_line(ran), looked, "T-201")
    assert ran.stderr.count("playground#share/") == 1, ran.stderr
    assert sorted(path.name for path in folder.iterdir()) == ["memory_pattern.py"]


@pytest.mark.parametrize("threshold", ["1", "0.02"])
def test_a_threshold_the_recording_does_not_replay_stops_the_script_at_its_first_miss(
        tmp_path, printed_script, threshold):
    script, edits = re.subn(r"(?m)^REMEMBER_AT = 0\.5\b", f"REMEMBER_AT = {threshold}",
                            printed_script)
    assert edits == 1, "the script must set REMEMBER_AT = 0.5 once (notebook 1's settings)"
    folder = readers_folder(tmp_path, script)
    ran = python_in(folder, "-B", "memory_pattern.py")
    ticket = "T-103" if threshold == "1" else "T-203"  # the first call with other memories
    looked = (folder / "json_cache" / "json_cache.json").resolve()
    assert_names_the_call_and_guesses_no_cause(last_line(ran), looked, ticket)
    assert ran.stderr.count("playground#share/") == 1, ran.stderr


@pytest.mark.parametrize("threshold", ["1.5", "-0.1", "float('nan')"])
def test_the_script_refuses_a_threshold_that_is_no_probability(tmp_path, printed_script,
                                                                threshold):
    script, edits = re.subn(r"(?m)^REMEMBER_AT = 0\.5\b", f"REMEMBER_AT = {threshold}",
                            printed_script)
    assert edits == 1
    folder = readers_folder(tmp_path, script)
    with closed_port() as refusing_url:
        ran = python_in(folder, "-B", "-c", "import memory_pattern as p; "
                        "p.ask_with_memory({'customer': {'id': 'C-1'}}, p.ROUTE)",
                        TYPESAFE_ENDPOINT=refusing_url)
    shown = "nan" if "nan" in threshold else threshold
    assert last_line(ran) == f"ValueError: REMEMBER_AT is a probability, 0 to 1, not {shown}", (
        "the pattern's ask_with_memory() must refuse a threshold outside 0..1 before asking "
        f"anything, as memorybook's checked_remember_at() does: {ran.stderr[-500:]}")


def test_a_stand_in_ask_goes_in_with_the_one_line_the_header_shows(tmp_path, printed_script):
    assert f"#     {STAND_IN_LINE}\n" in HEADER and "(state, questions)" in HEADER and (
        "SystemOneResponse" in HEADER), (
        "the header of `make pattern` (tools/pattern.py) must show the one line that puts a "
        "stand-in in place of ask(), and what the stand-in takes and returns")
    folder = readers_folder(tmp_path, printed_script, recording=False)
    (folder / "my_test.py").write_text(STAND_IN_APP.format(line=STAND_IN_LINE), encoding="utf-8")
    with closed_port() as refusing_url:  # no key, no cache, and nowhere to send
        ran = python_in(folder, "-B", "my_test.py", TYPESAFE_ENDPOINT=refusing_url)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.splitlines() == [
        "R-1 general, memories sent: 0", "R-2 general, memories sent: 1",
        "asked: team, remember, team, remember"], (
        f"with the header's one line, the wrapper and the gate must ask the stand-in: {ran.stdout}")
    assert sorted(path.name for path in folder.iterdir()) == ["memory_pattern.py", "my_test.py"]


# An app's test: its own tickets, answered by a stand-in of its own, without key or cache.
STAND_IN_APP = """\
import memory_pattern
from typesafe_sdk import SystemOneResponse

asked = []


def my_stand_in(state, questions):
    [question_id] = questions
    asked.append(question_id)
    answer = ({{"type": "noul", "noul": 0.9}} if question_id == "remember" else
              {{"type": "choice", "choice": "general", "confidence": 0.9,
               "probabilities": {{"general": 0.9, "billing": 0.1}}}})
    return SystemOneResponse.model_validate(
        {{"model": "made-up", "usage": {{}}, "answers": {{question_id: answer}}}})


{line}
for ticket in ("R-1", "R-2"):
    state = {{"customer": {{"id": "C-77"}}, "ticket": {{"id": ticket, "subject": "Login"}}}}
    sent = len(memory_pattern.MEMORIES.get("C-77", []))
    team = memory_pattern.ask_with_memory(state, memory_pattern.ROUTE).answers["team"]
    print(f"{{ticket}} {{team.choice}}, memories sent: {{sent}}")
print("asked:", ", ".join(asked))
"""
