"""Live mode, tested for real: the SDK's client against a loopback System One server.

The server (tools/loopback_server.py) answers from the committed recording, or fails on purpose.
Every run records into a scratch file, never into json_cache/json_cache.json.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from memorybook.config import PROVENANCE_PATH, RECORDING_PATH
from memorybook.recording import RecordingError, canonical_text, open_recording
from tests import helpers
from tests.helpers import (
    COMMITTED_RECORDING,
    RECORD,
    REPO_ROOT,
    forked,
    kill_before_the_nth_call,
    one_live_call,
    record_arguments,
    run_python,
)
from tools.loopback_server import LoopbackSystemOne, closed_port
from tools.record.run import has_a_recording_of_its_own

CANARY_KEY = "canary-sk-7f3e9b1c0d2a4e6f"
COMMITTED_TEXT = COMMITTED_RECORDING.decode("utf-8")


def live_env(base_url: str, recording: Path, **extra: str) -> dict[str, str]:
    """The environment of a live run against the loopback server, recording into `recording`."""
    return helpers.live_env(base_url, recording.parent, CANARY_KEY, recording, **extra)


def live_jev(monkeypatch, base_url: str, recording: Path, **extra: str):
    """A Jev recording into `recording`, live against the loopback server, with the canary key."""
    return helpers.live_jev(monkeypatch, base_url, CANARY_KEY, recording, **extra)


def record_command(tmp_path: Path, calls_only: bool) -> list[str]:
    """`make record` into tmp_path; with calls_only, `make record-calls` (no notebook is run)."""
    return [*RECORD, *record_arguments(tmp_path / "new.json", tmp_path / "notebooks",
                                       *(["--calls-only"] * calls_only))]


def record(base_url: str, tmp_path: Path, calls_only: bool = False,
           **extra: str) -> subprocess.CompletedProcess:
    command = record_command(tmp_path, calls_only)
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env=live_env(base_url, tmp_path / "new.json", **extra))


def assert_holds_the_committed_answers(path: Path) -> None:
    """The new recording holds the committed answers, each once, in the order they came in (an
    answer is added after the others, not sorted in); accepted, it is the committed file."""
    text = path.read_text(encoding="utf-8")
    keys = [key for key, _ in json.loads(text, object_pairs_hook=list)]
    assert len(keys) == len(set(keys)), (
        f"{path} holds a key twice: memorybook/recording/file.py's append_entries must never "
        "add a key the file holds")
    assert json.loads(text) == json.loads(COMMITTED_TEXT), (
        f"{path} does not hold the committed answers: an answer was lost or changed")
    assert canonical_text(json.loads(text)) == COMMITTED_TEXT, (
        "the sorted form of a recording is not the committed file's: `make accept-recording` "
        "(file.canonical_text) must commit it as build_recording wrote it")


def stdout_of(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "".join("".join(o.get("text", "")) for c in cells for o in c.get("outputs", [])
                   if o.get("name") == "stdout")


def test_recording_live_reproduces_the_committed_recording_and_outputs(tmp_path):
    with LoopbackSystemOne(RECORDING_PATH) as server:
        result = record(server.base_url, tmp_path)
        hits, misses = server.hits(), server.misses()
    assert result.returncode == 0, result.stderr
    assert (hits, misses) == (31, 0), "each of the 31 calls went live exactly once"
    assert_holds_the_committed_answers(tmp_path / "new.json")
    assert "31 of 31 published figures reproduce." in result.stdout
    assert "Calls whose answers changed: 0" in result.stdout
    for committed in sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        if has_a_recording_of_its_own(committed):
            continue
        fresh = stdout_of(tmp_path / "notebooks" / committed.name)
        assert fresh.replace("Live: new calls are added to", "Replaying").replace(
            str(tmp_path / "new.json"), "json_cache/json_cache.json").replace(
            "not the calls json_cache/provenance.json describes",
            "the published result of 2026-10-29, rebuilt from the official page's figures"
        ) == stdout_of(committed)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and all(CANARY_KEY not in p.read_text(errors="replace") for p in written)
    assert CANARY_KEY not in result.stdout + result.stderr


def test_the_dry_run_lists_every_call_and_its_cost_without_a_key(tmp_path):
    # Its own process, as `make record-dry-run` runs it: a dry run sets its environment itself.
    result = run_python("from tools.record.cli import main; main(['--dry-run', '--output', "
                        f"'{tmp_path / 'new.json'}'])")
    assert result.returncode == 0, result.stderr
    assert "would send 31 of the collection's 31 calls to jev-1.14.0" in result.stdout
    assert "route T-201 with memories: T-101, T-105" not in result.stdout  # ids are space-joined
    assert "route T-201 with memories: T-101 T-105" in result.stdout
    assert "Estimated input: 21,456 tokens, $0.0009 at $42 per billion" in result.stdout
    assert not (tmp_path / "new.json").exists()


FAILURES = {
    "bad_request": "the API refused the request (HTTP 400)",
    "unprocessable": "the API refused the request (HTTP 422)",
    "unauthorized": "the API refused the key (HTTP 401): check TYPESAFE_API_KEY",
    "rate_limit": "kept answering 'too many requests' (HTTP 429)",
    "server_error": "the API failed (HTTP 500) on every retry",
    "hang": "no answer from http://127.0.0.1:",
    "malformed": "a body the SDK could not read (at answers.broken.probabilities)",
    "garbage": "a body the SDK could not read (at the whole body)",
    "refused": "could not connect to http://127.0.0.1:",
}


@pytest.mark.parametrize("failure", FAILURES)
def test_each_api_failure_is_explained_and_records_nothing(failure, tmp_path, monkeypatch,
                                                           capfd):
    """Each failure gets its sentence, retried as the SDK's policy says; an error answer that
    repeats the request's headers, key included, never shows the key."""
    recording = tmp_path / "new.json"
    with (LoopbackSystemOne(RECORDING_PATH, failure=None if failure == "refused" else failure,
                            retry_after_ms=50, echo_headers=True) as server,
          closed_port() as refusing_url):
        base_url = refusing_url if failure == "refused" else server.base_url
        # A hang ends with the whole call's time; the others are over well within theirs.
        seconds = "0.5" if failure == "hang" else "5"
        jev = live_jev(monkeypatch, base_url, recording, MEMORYBOOK_TIMEOUT_SECONDS=seconds)
        explained = one_live_call(jev)
        attempts = len(server.requests)
        sent_keys = [request["headers"].get("authorization") for request in server.requests]
    assert all(CANARY_KEY in sent for sent in sent_keys), "the key was sent with every attempt"
    assert FAILURES[failure] in explained
    assert "Nothing was recorded for this call." in explained
    assert not recording.exists()
    not_retried = {"bad_request": 1, "unprocessable": 1, "unauthorized": 1, "malformed": 1,
                   "garbage": 1, "refused": 0, "hang": 1}
    expected_attempts = not_retried.get(failure, 3)
    assert attempts == expected_attempts, "the SDK's retry policy and the call's time decide"
    printed = capfd.readouterr()
    assert CANARY_KEY not in explained + printed.out + printed.err
    if failure in ("bad_request", "unprocessable"):  # their message carries the echoed body
        assert "'authorization': '[redacted]'" in explained


def test_a_rate_limit_the_sdk_rides_out_is_recorded_normally(tmp_path, monkeypatch):
    recording = tmp_path / "new.json"
    with LoopbackSystemOne(RECORDING_PATH, failure="rate_limit", failure_count=1,
                           retry_after_ms=50) as server:
        explained = one_live_call(live_jev(monkeypatch, server.base_url, recording))
    assert explained == ""
    assert set(json.loads(recording.read_text())) <= set(json.loads(COMMITTED_TEXT))


def test_a_failed_call_stops_the_recording_with_one_clear_line(tmp_path):
    with LoopbackSystemOne(RECORDING_PATH, failure="unauthorized") as server:
        result = record(server.base_url, tmp_path, calls_only=True)
    assert result.returncode == 1
    assert "Live call failed: the API refused the key (HTTP 401)" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "new.json").exists()


def test_an_interrupted_recording_keeps_every_answer_so_far_and_resumes(tmp_path):
    new = tmp_path / "new.json"
    with LoopbackSystemOne(RECORDING_PATH, latency=0.1) as server:
        run = subprocess.Popen(record_command(tmp_path, calls_only=True), cwd=REPO_ROOT,
                               env=live_env(server.base_url, new),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while server.hits() < 10 and time.monotonic() < deadline:
            time.sleep(0.02)
        run.send_signal(signal.SIGKILL)
        run.wait()
        answered = server.hits()
        kept = json.loads(new.read_text(encoding="utf-8"))
        assert answered - 2 <= len(kept) <= answered  # at most the calls in flight are lost
        assert all(COMMITTED_TEXT.count(key) == 1 for key in kept)
        resumed = record(server.base_url, tmp_path, calls_only=True)
    assert resumed.returncode == 0, resumed.stderr
    assert_holds_the_committed_answers(new)
    assert "31 of 31 published figures reproduce." in resumed.stdout


WRITE_ONE_CUSTOMER = textwrap.dedent("""
    import sys
    from tools.record.every_call import run_every_call
    run_every_call([sys.argv[1]])
""")


def test_two_writers_at_once_lose_nothing(tmp_path):
    new = tmp_path / "new.json"
    with LoopbackSystemOne(RECORDING_PATH, latency=0.05) as server:
        env = live_env(server.base_url, new)
        writers = [subprocess.Popen([sys.executable, "-c", WRITE_ONE_CUSTOMER,
                                     customer], cwd=REPO_ROOT, env=env, stderr=subprocess.PIPE)
                   for customer in ("C-1042", "C-2210")]
        errors = [writer.communicate(timeout=120)[1] for writer in writers]
    assert all(writer.returncode == 0 for writer in writers), errors
    assert_holds_the_committed_answers(new)


def test_a_corrupt_new_recording_stops_the_run_and_is_left_as_it_was(tmp_path):
    new = tmp_path / "new.json"
    new.write_text('{"truncated', encoding="utf-8")
    with LoopbackSystemOne(RECORDING_PATH) as server:
        result = record(server.base_url, tmp_path)
        assert server.hits() == 0
    assert result.returncode != 0
    assert f"The recording {new} is not valid JSON" in result.stderr
    assert new.read_text(encoding="utf-8") == '{"truncated'


def test_a_recording_corrupted_during_a_run_is_never_overwritten(tmp_path):
    path = tmp_path / "json_cache.json"
    entry = {"model": "m", "usage": {}, "answers": {"q": {"type": "noul", "noul": 0.5}}}
    path.write_text(json.dumps({"a": entry}), encoding="utf-8")
    cache = open_recording(path)

    @cache
    def _system_one(model, state, questions):
        return entry

    path.write_text("{broken", encoding="utf-8")
    with pytest.raises(RecordingError, match="not valid JSON"):
        _system_one("m", "s", "q")
    assert path.read_text(encoding="utf-8") == "{broken"


def test_answers_from_another_model_version_are_reported(tmp_path):
    with LoopbackSystemOne(RECORDING_PATH, model_override="jev-1.15.0") as server:
        result = record(server.base_url, tmp_path, calls_only=True)
    assert result.returncode == 0, result.stderr
    assert "Answered by jev-1.15.0, not the pinned jev-1.14.0" in result.stdout
    assert "Notebooks not run (--calls-only)" in result.stdout
    assert not (tmp_path / "notebooks").exists(), "a calls-only recording ran notebooks"
    models = {entry["model"] for entry in json.loads((tmp_path / "new.json").read_text()).values()}
    assert models == {"jev-1.15.0"}


def test_recording_refuses_to_write_over_the_committed_file(capsys):
    from tools.record.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["--output", str(RECORDING_PATH)])
    assert stopped.value.code != 0 and "--accept" in capsys.readouterr().err
    assert RECORDING_PATH.read_text(encoding="utf-8") == COMMITTED_TEXT


def test_recording_needs_a_key_and_refuses_in_ci_unless_asked(tmp_path, monkeypatch, capsys):
    from tools.record.cli import main

    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("TYPESAFE_API_KEY", "sk-x")
    monkeypatch.delenv("MEMORYBOOK_LIVE_IN_CI", raising=False)
    assert main(["--output", str(tmp_path / "new.json")]) == 2
    assert "CI is set. Nothing was sent." in capsys.readouterr().err


def accepting(tmp_path: Path, new: dict, indent: int = 2,
              target_text: str = COMMITTED_TEXT) -> tuple[int, Path, Path]:
    """Accept `new` over scratch copies of the committed recording (or `target_text`) and
    provenance."""
    from tools.record.accept import accept

    path, target, provenance = tmp_path / "new.json", tmp_path / "rec.json", tmp_path / "prov.json"
    path.write_text(json.dumps(new, indent=indent), encoding="utf-8")
    target.write_text(target_text, encoding="utf-8")
    shutil.copyfile(PROVENANCE_PATH, provenance)
    return accept(path, target, provenance), target, provenance


def test_accepting_a_complete_recording_replaces_the_target_and_keeps_each_values_origin(
        tmp_path):
    # The answers in the order a live run adds them (not sorted), over a target laid out
    # otherwise (indented by 1), so that there is something to accept.
    committed = json.loads(COMMITTED_TEXT)
    status, target, provenance = accepting(tmp_path, dict(reversed(committed.items())),
                                           target_text=json.dumps(committed, indent=1))
    assert status == 0
    assert target.read_text(encoding="utf-8") == COMMITTED_TEXT, (
        "an accept must commit the sorted form, indented by 2: tools/record/accept.py "
        "(file.canonical_text)")
    written = json.loads(provenance.read_text(encoding="utf-8"))
    assert written["origin"] == "recorded" and written["model"] == "jev-1.14.0"
    assert set(written["entries"]) == set(json.loads(COMMITTED_TEXT))
    before = json.loads(PROVENANCE_PATH.read_text(encoding="utf-8"))["entries"]
    for key, entry in written["entries"].items():  # nothing re-measured: every origin kept
        assert entry == before[key]


def test_accepting_a_byte_identical_recording_changes_nothing(tmp_path, capsys):
    status, target, provenance = accepting(tmp_path, json.loads(COMMITTED_TEXT))
    assert status == 0
    assert target.read_text(encoding="utf-8") == COMMITTED_TEXT
    assert provenance.read_bytes() == PROVENANCE_PATH.read_bytes()
    assert "nothing was changed" in capsys.readouterr().out


def test_accepting_commits_exactly_the_recording_it_checked(tmp_path, monkeypatch):
    from tools.record import accept as accept_module

    checked = json.loads(COMMITTED_TEXT)
    key = next(iter(checked))
    checked[key]["usage"]["input_tokens"] += 1  # a change, so that there is something to accept
    lacking = {k: v for k, v in checked.items() if k not in list(checked)[:5]}
    check = accept_module.replay_in_a_new_process

    def replaced_once_checked(path: Path) -> dict:
        replayed = check(path)
        (tmp_path / "new.json").write_text(json.dumps(lacking, indent=2), encoding="utf-8")
        return replayed

    monkeypatch.setattr(accept_module, "replay_in_a_new_process", replaced_once_checked)
    status, target, provenance = accepting(tmp_path, checked)
    assert status == 0
    assert target.read_text(encoding="utf-8") == json.dumps(checked, indent=2)
    written = json.loads(provenance.read_text(encoding="utf-8"))
    assert written["recording_sha256"] == hashlib.sha256(target.read_bytes()).hexdigest()
    assert set(written["entries"]) == set(checked)


def test_accepting_marks_measured_exactly_the_values_that_changed(tmp_path):
    new = json.loads(COMMITTED_TEXT)
    provenance_before = json.loads(PROVENANCE_PATH.read_text(encoding="utf-8"))["entries"]
    key = next(key for key, entry in provenance_before.items()
               if "answers.remember.noul" in entry["filled"] and new[key]["answers"]["remember"]
               ["noul"] < 0.4)
    new[key]["answers"]["remember"]["noul"] += 0.01  # still not saved: no other call changes
    status, _, provenance = accepting(tmp_path, new)
    assert status == 0
    written = json.loads(provenance.read_text(encoding="utf-8"))["entries"][key]
    assert written["measured"] == ["answers.remember.noul"]
    assert "answers.remember.noul" not in written["filled"]
    assert written["filled"]["usage.input_tokens"] == "tokens-by-size"  # unchanged: still filled


def test_a_recording_lacking_calls_the_notebooks_make_is_not_accepted(tmp_path, capsys):
    new = json.loads(COMMITTED_TEXT)
    calls = json.loads(PROVENANCE_PATH.read_text(encoding="utf-8"))["entries"]
    dropped = [key for key in new if calls[key]["call"].startswith("route T-201")]
    for key in dropped:
        del new[key]
    status, target, provenance = accepting(tmp_path, new)
    assert status == 1
    assert target.read_text(encoding="utf-8") == COMMITTED_TEXT
    assert provenance.read_bytes() == PROVENANCE_PATH.read_bytes()
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("Not accepted:") and "lacks calls the notebooks make" in line
    assert "about ticket T-201" in line


def a_changed_recording() -> dict:
    changed = json.loads(COMMITTED_TEXT)
    changed[next(iter(changed))]["usage"]["input_tokens"] += 1
    return changed


def paired(recording: Path, provenance: Path) -> str:
    """"old" or "new": which accept the pair shows, read as a reader does (finishing any)."""
    from memorybook.recording import read_provenance, read_recording

    read_recording(recording)
    digest = hashlib.sha256(recording.read_bytes()).hexdigest()
    written = read_provenance(provenance)
    assert written["recording_sha256"] == digest, (
        "the recording and its provenance describe different accepts: "
        "tools/record/accept.py must commit both together (file.commit_together)")
    return "old" if recording.read_bytes() == COMMITTED_RECORDING else "new"


def accept_killed_before(new: Path, target: Path, provenance: Path, killed_before_call: int):
    """In a forked child: accept, killed (SIGKILL) just before the n-th file system call."""
    import os

    from tools.record.accept import accept

    kill_before_the_nth_call(killed_before_call, ("replace", "fsync", "mkdir", "unlink", "rmdir"))
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    accept(new, target, provenance)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_an_accept_killed_at_any_moment_leaves_both_files_old_or_both_new(tmp_path, monkeypatch):
    import os

    from tools.record import accept as accept_module

    monkeypatch.setattr(accept_module, "replay_in_a_new_process",
                        lambda path: {"unanswered": [], "requests": {}})
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # a killed accept's snapshot folder
    seen = []
    for moment in range(1, 80):  # killed just before the n-th replace, sync, mkdir or removal
        folder = tmp_path / f"kill-{moment}"
        folder.mkdir()
        new, target, provenance = folder / "new.json", folder / "rec.json", folder / "prov.json"
        new.write_text(json.dumps(a_changed_recording(), indent=2), encoding="utf-8")
        target.write_bytes(COMMITTED_RECORDING)
        shutil.copyfile(PROVENANCE_PATH, provenance)
        status = forked(accept_killed_before, new, target, provenance, killed_before_call=moment)
        seen.append(paired(target, provenance))
        if not os.WIFSIGNALED(status):
            break
    assert seen[-1] == "new" and "old" in seen, seen


# `make accept-recording` over copies of the committed files in argv[1]; its check of the new
# recording (a replay in a new process) replaced by a wait that Ctrl-C or SIGTERM stops.
ACCEPT_THAT_WAITS = """
import functools, sys, time
from pathlib import Path
from tools.record import accept, cli
folder = Path(sys.argv[1])
accept.replay_in_a_new_process = lambda path: time.sleep(120)
cli.accept = functools.partial(accept.accept, recording=folder / "rec.json",
                               provenance_path=folder / "prov.json")
sys.exit(cli.main(["--accept", "--output", str(folder / "new.json")]))
"""


@pytest.mark.parametrize("stop, status, said", [
    (signal.SIGINT, 130, "interrupted (Ctrl-C)"), (signal.SIGTERM, 143, "terminated (SIGTERM)")])
def test_an_accept_stopped_by_ctrl_c_or_sigterm_says_so_in_one_line_and_leaves_nothing(
        tmp_path, stop, status, said):
    import os

    folder = tmp_path
    (folder / "new.json").write_text(json.dumps(a_changed_recording()), encoding="utf-8")
    (folder / "rec.json").write_bytes(COMMITTED_RECORDING)
    shutil.copyfile(PROVENANCE_PATH, folder / "prov.json")
    env = dict(os.environ)
    with helpers.temporary_folder_for(env) as temporary:
        run = subprocess.Popen([sys.executable, "-c", ACCEPT_THAT_WAITS, str(folder)],
                               cwd=REPO_ROOT, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            # The snapshot itself: the first entry in TMPDIR may be the file Python's tempfile
            # writes and deletes at once to see that the folder is writable, and a signal
            # landing between the two leaves it there, whatever the accept does.
            helpers.wait_until(lambda: any(temporary.glob("memorybook-accept-*/new.json")), 60,
                               "the accept's snapshot")
            run.send_signal(stop)
            _, stderr = run.communicate(timeout=30)
        finally:
            if run.poll() is None:
                run.kill()
                run.communicate()
        left = helpers.files_in(temporary)
    assert run.returncode == status, stderr
    [line] = stderr.strip().splitlines()
    assert line.startswith(f"Accept stopped: {said}."), (
        f"{line!r}: tools/record/cli.py must say in one line how an accept was stopped")
    assert paired(folder / "rec.json", folder / "prov.json") == "old"
    assert left == [], f"the stopped accept left {left}: its snapshot folder must go"


def accept_in_a_small_tmpfs(tmp_path, read_only: bool) -> tuple[Path, str]:
    """Accept a changed recording over copies of the committed files in a 160 kB tmpfs (room
    for a new recording, not for a new provenance beside it), or a read-only one."""
    holding = tmp_path / "holding"
    holding.mkdir()
    (holding / "rec.json").write_bytes(COMMITTED_RECORDING)
    shutil.copyfile(PROVENANCE_PATH, holding / "prov.json")
    new = tmp_path / "new.json"
    new.write_text(json.dumps(a_changed_recording(), indent=2), encoding="utf-8")
    script = textwrap.dedent("""
        import sys
        from pathlib import Path
        from tools.record import accept
        accept.replay_in_a_new_process = lambda path: {"unanswered": [], "requests": {}}
        folder = Path(sys.argv[2])
        sys.exit(accept.accept(Path(sys.argv[1]), folder / "rec.json", folder / "prov.json"))
    """)
    with helpers.small_tmpfs(tmp_path, "160k", read_only=read_only, holding=holding) as tmpfs:
        done = subprocess.run([*tmpfs.enter, sys.executable, "-c", script, str(new),
                               str(tmpfs.mount_point)], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 1, done.stdout + done.stderr
        assert (tmpfs.here / "rec.json").read_bytes() == COMMITTED_RECORDING, (
            "a failed accept changed the recording: tools/record/accept.py must commit it "
            "with its provenance, or neither")
        assert (tmpfs.here / "prov.json").read_bytes() == PROVENANCE_PATH.read_bytes()
        left = sorted(path.name for path in tmpfs.here.iterdir())
        assert left in (["prov.json", "rec.json"], [".accepting.lock", "prov.json", "rec.json"]), (
            f"a failed accept left {left}: what it staged must go")
    return tmpfs.here, done.stderr


def test_accepting_onto_a_full_disk_changes_neither_file_and_says_so_in_one_line(tmp_path):
    _, stderr = accept_in_a_small_tmpfs(tmp_path, read_only=False)
    [line] = stderr.strip().splitlines()
    assert line.startswith("Not accepted:") and "No space left on device" in line, line


def test_accepting_into_a_read_only_folder_changes_neither_file_and_says_so(tmp_path):
    _, stderr = accept_in_a_small_tmpfs(tmp_path, read_only=True)
    [line] = stderr.strip().splitlines()
    assert line.startswith("Not accepted:") and "Read-only file system" in line, line


def test_accepting_without_a_new_recording_says_so_in_one_line(tmp_path, capsys):
    from tools.record.accept import accept

    target, provenance = tmp_path / "rec.json", tmp_path / "prov.json"
    assert accept(tmp_path / "missing.json", target, provenance) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "no new recording at" in line and "make record" in line
    assert not target.exists() and not provenance.exists()


@pytest.mark.parametrize("arguments, complaint", [
    (["--calls-only", "notebooks/01_memory_system.ipynb"], "name notebooks or --calls-only"),
    (["notebooks/07_next_steps.ipynb"], "records into a file of its own"),
    (["notebooks/99_missing.ipynb"], "no notebook at notebooks/99_missing.ipynb"),
    (["{tmp_path}/broken.ipynb"], "broken.ipynb is not a notebook that can be read"),
])
def test_naming_notebooks_to_run_is_checked_before_anything_is_sent(arguments, complaint,
                                                                     tmp_path, capsys):
    from tools.record.cli import main

    (tmp_path / "broken.ipynb").write_text("not JSON", encoding="utf-8")
    arguments = [argument.format(tmp_path=tmp_path) for argument in arguments]
    with pytest.raises(SystemExit) as stopped:
        main(["--output", str(tmp_path / "new.json"), *arguments])
    assert stopped.value.code == 2 and complaint in capsys.readouterr().err
    assert not (tmp_path / "new.json").exists()


def timed_call(monkeypatch, base_url: str, recording: Path,
               **extra: str) -> tuple[str, float, int]:
    """One live call through a Jev in record mode: what it said, its seconds, its connections.

    No connection may leave this machine: one to another address is refused before it is made.
    """
    attempts = []
    real_connect = socket.socket.connect

    def nothing_leaves_this_machine(sock, address):
        attempts.append(address)
        if not str(address[0]).startswith("127."):
            raise ConnectionRefusedError("the test lets no connection leave this machine")
        return real_connect(sock, address)

    jev = live_jev(monkeypatch, base_url, recording, **extra)
    monkeypatch.setattr(socket.socket, "connect", nothing_leaves_this_machine)
    started = time.monotonic()
    explained = one_live_call(jev)
    took = time.monotonic() - started
    monkeypatch.setattr(socket.socket, "connect", real_connect)
    assert CANARY_KEY not in explained
    return explained, took, len(attempts)


@pytest.mark.parametrize("failure, server_options, explained", [
    pytest.param("trickle", {"trickle_seconds": 0.5}, "no answer from {} within 1 s",
                 id="headers, then a byte every 0.5 s"),
    # The SDK's retry budget is the call's time: it retries only if its wait ends within it.
    # On a loaded machine the first slow failure can itself outlast the second left, so either
    # ending is the right one.
    pytest.param("server_error", {"latency": 0.9},
                 ("the API failed (HTTP 500)", "no answer from {} within 1 s"),
                 id="slow failures, each retried"),
    pytest.param("rate_limit", {"retry_after_ms": 20_000}, "no answer from {} within 1 s",
                 id="asked to wait 20 s"),
])
def test_a_live_call_ends_within_its_time_retries_and_waits_included(
        tmp_path, monkeypatch, failure, server_options, explained):
    seconds = 1
    with LoopbackSystemOne(RECORDING_PATH, failure=failure, max_seconds=30,
                           **server_options) as server:
        printed, took, _ = timed_call(monkeypatch, server.base_url, tmp_path / "new.json",
                                      MEMORYBOOK_TIMEOUT_SECONDS=str(seconds))
    assert took <= seconds + 1, printed  # a margin of 1 s for a loaded machine
    endings = explained if isinstance(explained, tuple) else (explained,)
    assert any(ending.format(server.base_url) in printed for ending in endings), printed
    assert not (tmp_path / "new.json").exists()


def test_make_record_calls_stops_within_its_time_on_a_trickling_endpoint(tmp_path):
    with LoopbackSystemOne(RECORDING_PATH, failure="trickle", trickle_seconds=0.5,
                           max_seconds=60) as server:
        started = time.monotonic()
        result = record(server.base_url, tmp_path, calls_only=True,
                        MEMORYBOOK_TIMEOUT_SECONDS="1")
        took = time.monotonic() - started
    assert result.returncode == 1
    assert took < 20, "the run outlived its calls' time"
    [line] = result.stderr.strip().splitlines()
    assert f"no answer from {server.base_url} within 1 s" in line


@pytest.mark.parametrize("endpoint", ["http://user:pw-9f2c@192.0.2.10:8080", "http://[2001:db8::10]"])
def test_the_key_never_goes_over_plain_http_to_another_machine(tmp_path, monkeypatch, endpoint):
    printed, _, connections = timed_call(monkeypatch, endpoint, tmp_path / "new.json")
    assert connections == 0, "a connection was attempted"
    assert "refused to send the API key over plain http to http://" in printed
    assert "MEMORYBOOK_ALLOW_PLAIN_HTTP=1" in printed
    assert "pw-9f2c" not in printed


def test_plain_http_to_another_machine_is_sent_only_when_allowed(tmp_path, monkeypatch):
    printed, _, connections = timed_call(monkeypatch, "http://192.0.2.10:8080",
                                         tmp_path / "new.json",
                                         MEMORYBOOK_ALLOW_PLAIN_HTTP="1")
    assert connections >= 1
    assert "could not connect to http://192.0.2.10:8080" in printed
