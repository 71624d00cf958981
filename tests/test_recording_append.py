"""A new answer is added to a recording in place: the file is not rewritten, yet every reader
(ours, and cooksafe's plain JsonCache) reads one whole JSON object, whatever stops a writer.

Built on memorybook.recording's API alone (CheckedJsonCache, read_recording, append_entries).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cooksafe import JsonCache

from memorybook.recording import (
    CheckedJsonCache,
    RecordingError,
    append_entries,
    cache_key,
    read_recording,
)
from memorybook.recording.appending import rollback_record_of
from tests.helpers import (
    REPO_ROOT,
    forked,
    kill_before_the_nth_call,
    run_python,
    small_tmpfs,
    start_python,
    wait_until,
)

MODEL = "jev-1.14.0"
GATE = json.dumps({"remember": {"type": "noul", "instructions": "Lasting fact?"}})


def request(number: int) -> tuple[str, str, str]:
    """The gate call about ticket T-<number>: each number is another cache key."""
    state = {"customer": {"id": "C-1042", "company": "Acme Corp"},
             "ticket": {"id": f"T-{number}", "subject": "Slow dashboards"}}
    return MODEL, json.dumps(state), GATE


def answer(number: int, model: str = MODEL) -> dict:
    return {"model": model, "usage": {"input_tokens": 600 + number, "output_tokens": 11},
            "answers": {"remember": {"type": "noul", "noul": round(number % 100 / 100, 2)}}}


def answers(numbers) -> dict:
    return {cache_key(*request(number)): answer(number) for number in numbers}


def sorted_text(entries: dict, indent: int | None = 2) -> str:
    """A recording as the collection commits it (and cooksafe writes it): keys sorted."""
    return json.dumps({key: entries[key] for key in sorted(entries)}, indent=indent)


def live_cache(path: Path, live=answer):
    """The cache on `path` decorating a stand-in for Jev that answers `live(number)`."""
    @CheckedJsonCache(path, usage_log=None)
    def _system_one(model: str, state: str, questions: str) -> dict:
        return live(int(json.loads(state)["ticket"]["id"].removeprefix("T-")))

    return _system_one


def leftovers(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


# -- the add, in place -------------------------------------------------------------------------


def test_an_answer_is_added_after_the_others_without_rewriting_the_file(tmp_path, monkeypatch):
    path = tmp_path / "json_cache.json"
    held = answers(range(50))
    path.write_text(sorted_text(held), encoding="utf-8")
    before, inode = path.read_bytes(), path.stat().st_ino
    ask = live_cache(path)
    ask(*request(0))  # recorded: the cache reads the file
    replaced = []
    monkeypatch.setattr(os, "replace", lambda *args: replaced.append(args))
    ask(*request(50))
    monkeypatch.undo()
    assert not replaced and path.stat().st_ino == inode, (
        "keeping an answer replaced the recording with a rewritten copy: CheckedJsonCache._keep "
        "must add it in place (memorybook/recording/file.py, append_entries)")
    after = path.read_bytes()
    assert after.startswith(before[:before.rindex(b"}")].rstrip()), (
        "an add changed bytes before the recording's last answer: appending.add_in_place must "
        "write only from the end of the last member on")
    new_key = cache_key(*request(50))
    assert after.decode() == json.dumps({**dict(sorted(held.items())), new_key: answer(50)},
                                        indent=2), (
        "the added answer is not laid out as json.dumps(indent=2) would lay it out after the "
        "others: appending.add_in_place")


@pytest.mark.parametrize("indent, ending", [(2, ""), (2, "\n"), (4, "\n"), (None, ""),
                                            (None, "\n")])
def test_an_added_answer_is_indented_as_the_file_is(tmp_path, indent, ending):
    path = tmp_path / "json_cache.json"
    held = answers(range(3))
    path.write_text(sorted_text(held, indent) + ending, encoding="utf-8")
    added = answers([7, 8])
    assert sorted(append_entries(path, added)) == sorted(added)
    expected = {**dict(sorted(held.items())), **dict(sorted(added.items()))}
    assert path.read_text(encoding="utf-8") == json.dumps(expected, indent=indent) + ending, (
        "an add must follow the file's own indentation and keep what follows its closing "
        "brace: appending.known_from and add_in_place")


@pytest.mark.parametrize("text", ["{}", "{}\n", "{\n}"])
def test_the_first_answer_in_an_empty_object_gets_no_comma(tmp_path, text):
    path = tmp_path / "json_cache.json"
    path.write_text(text, encoding="utf-8")
    append_entries(path, answers([1]))
    append_entries(path, answers([2]))
    assert read_recording(path) == answers([1, 2])
    assert path.read_text(encoding="utf-8").rstrip() == json.dumps(answers([1, 2]), indent=2)


def test_a_new_recording_is_created_whole_as_cooksafe_writes_it(tmp_path):
    path = tmp_path / "new" / "json_cache.json"
    live_cache(path)(*request(3))
    assert path.read_text(encoding="utf-8") == sorted_text(answers([3]))
    assert leftovers(path.parent) == ["json_cache.json", "json_cache.json.lock"]


def test_cooksafes_plain_cache_replays_every_added_answer(tmp_path):
    path = tmp_path / "json_cache.json"
    ask = live_cache(path)
    for number in range(6):
        ask(*request(number))

    @JsonCache(path)
    def _system_one(model: str, state: str, questions: str) -> dict:
        raise AssertionError("cooksafe's JsonCache did not find an added answer in the file")

    assert [_system_one(*request(number)) for number in range(6)] == [answer(n) for n in range(6)]


def test_an_add_reads_only_the_end_of_a_large_recording(tmp_path, monkeypatch):
    """What makes an add's cost not grow with the file: no read of what the cache knows."""
    path = tmp_path / "json_cache.json"
    path.write_text(sorted_text(answers(range(2_000))), encoding="utf-8")
    ask = live_cache(path)
    ask(*request(0))  # the cache reads the file whole, once
    opened, read = [], []
    real_open, real_pread = open, os.pread

    def noting_open(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    def noting_pread(handle, size, offset):
        data = real_pread(handle, size, offset)
        read.append(len(data))
        return data

    monkeypatch.setattr("builtins.open", noting_open)
    monkeypatch.setattr("io.open", noting_open)
    monkeypatch.setattr(os, "pread", noting_pread)
    for number in range(2_000, 2_005):
        ask(*request(number))
    monkeypatch.undo()
    assert str(path) not in opened and sum(read) < 5 * 3 * 1_024, (
        f"adding 5 answers to a 600 kB recording read {sum(read):,} bytes of it "
        f"(and opened it {opened.count(str(path))} times whole): an add must read only what "
        "follows the last member it knows (appending.still_known)")
    assert len(read_recording(path)) == 2_005


# -- several writers -------------------------------------------------------------------------

ADD_NUMBERED = """
import json, sys
from pathlib import Path
from memorybook.recording import append_entries
from tests.test_recording_append import answers
path, first, last = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
for number in range(first, last):
    append_entries(path, answers([number]))
print("done")
"""


def test_two_processes_adding_different_keys_keep_both(tmp_path):
    path = tmp_path / "json_cache.json"
    path.write_text(sorted_text(answers(range(5))), encoding="utf-8")
    writers = [start_python(ADD_NUMBERED, str(path), str(first), str(first + 40))
               for first in (100, 200)]
    results = [writer.communicate(timeout=120) for writer in writers]
    assert all(writer.returncode == 0 for writer in writers), results
    text = path.read_text(encoding="utf-8")
    keys = [key for key, _ in json.loads(text, object_pairs_hook=list)]
    expected = answers([*range(5), *range(100, 140), *range(200, 240)])
    assert len(keys) == len(set(keys)) == len(expected), (
        "two writers at once lost or doubled answers: append_entries must hold the writers' "
        "lock and read what the other added (appending.still_known)")
    assert read_recording(path) == expected


ADD_ONE = """
import json, sys
from pathlib import Path
from memorybook.recording import append_entries
print(append_entries(Path(sys.argv[1]), json.loads(sys.argv[2])))
"""


def test_a_key_another_process_wrote_first_is_never_replaced_nor_written_twice(tmp_path):
    path = tmp_path / "json_cache.json"
    path.write_text(sorted_text(answers(range(3))), encoding="utf-8")
    ask = live_cache(path, live=lambda number: answer(number, model="jev-mine"))
    ask(*request(0))  # this process knows the file as it is now
    theirs = {cache_key(*request(9)): answer(9, model="jev-theirs")}
    done = run_python(ADD_ONE, str(path), json.dumps(theirs))
    assert done.returncode == 0, done.stderr
    ask(*request(9))
    ask(*request(10))
    keys = [key for key, _ in json.loads(path.read_text(encoding="utf-8"),
                                         object_pairs_hook=list)]
    assert keys.count(cache_key(*request(9))) == 1, (
        "a key already on disk was written again: append_entries must skip the keys the file "
        "holds, including those another process added (appending.still_known)")
    entries = read_recording(path)
    assert entries[cache_key(*request(9))]["model"] == "jev-theirs", "the first answer on disk wins"
    assert entries[cache_key(*request(10))]["model"] == "jev-mine"


def test_a_file_replaced_since_is_read_whole_before_the_next_add(tmp_path):
    path = tmp_path / "json_cache.json"
    path.write_text(sorted_text(answers(range(3))), encoding="utf-8")
    append_entries(path, answers([3]))
    replacement = tmp_path / "other.json"
    replacement.write_text(sorted_text(answers([3, 4, 5])), encoding="utf-8")
    os.replace(replacement, path)  # as an accept or an editor puts a file in place
    append_entries(path, answers([3, 6]))
    assert read_recording(path) == answers([3, 4, 5, 6])
    path.write_text(sorted_text(answers([7])) + "\n", encoding="utf-8")  # rewritten in place
    append_entries(path, answers([8]))
    assert read_recording(path) == answers([7, 8])


# Takes the writers' lock, leaves the file as an add in the middle of its write leaves it (the
# closing brace overwritten, the new member cut short), and finishes it once its stdin closes.
TORN_UNDER_THE_LOCK = """
import sys
from pathlib import Path
from memorybook.recording.disk import writers_lock
path, whole = Path(sys.argv[1]), sys.argv[2]
with writers_lock(path):
    path.write_text(whole[:len(whole) - 40], encoding="utf-8")
    print("torn", flush=True)
    sys.stdin.read()
    path.write_text(whole, encoding="utf-8")
"""


def test_a_reader_waits_for_an_add_in_progress_rather_than_fail_on_a_torn_file(tmp_path):
    path = tmp_path / "json_cache.json"
    whole = sorted_text(answers(range(4)))
    holder = subprocess.Popen([sys.executable, "-c", TORN_UNDER_THE_LOCK, str(path), whole],
                              cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    found = []
    try:
        assert holder.stdout.readline().strip() == "torn"
        reading = threading.Thread(target=lambda: found.append(_read_or_error(path)))
        reading.start()
        reading.join(timeout=1.0)
        assert reading.is_alive() and not found, (
            f"a reader did not wait for the writers' lock on a text that does not parse: "
            f"{found}; read_recording must read again under the lock (memorybook/recording/"
            "file.py)")
        holder.stdin.close()
        reading.join(timeout=30)
    finally:
        holder.kill()
        holder.wait()
    assert found == [answers(range(4))]


def _read_or_error(path: Path) -> object:
    try:
        return read_recording(path)
    except RecordingError as error:
        return str(error)


def test_readers_never_see_a_torn_file_while_another_process_adds(tmp_path):
    path = tmp_path / "json_cache.json"
    path.write_text(sorted_text(answers(range(2))), encoding="utf-8")
    writer = start_python(ADD_NUMBERED, str(path), "100", "400")
    counts = []
    try:
        while writer.poll() is None:
            counts.append(len(read_recording(path)))  # raises if it ever reads a torn file
    finally:
        stdout, stderr = writer.communicate(timeout=120)
    assert writer.returncode == 0 and stdout.strip() == "done", stderr
    assert counts == sorted(counts), "a reader saw answers disappear"
    assert len(read_recording(path)) == 302


# -- killed at any moment --------------------------------------------------------------------

FILE_SYSTEM_CALLS = ("open", "write", "pwrite", "fsync", "ftruncate", "unlink", "replace",
                     "close")


def add_killed_before(path: Path, entries: dict, killed_before_call: int) -> None:
    """In a forked child: append_entries, killed (SIGKILL) just before the n-th file system
    call of FILE_SYSTEM_CALLS."""
    kill_before_the_nth_call(killed_before_call, FILE_SYSTEM_CALLS)
    append_entries(path, entries)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("next_to_come", ["a reader", "a writer"])
@pytest.mark.parametrize("start", ["a recording", "no file"])
def test_an_add_killed_at_any_moment_leaves_the_file_before_or_after_it(tmp_path, start,
                                                                         next_to_come):
    base = answers(range(3)) if start == "a recording" else {}
    new, other = answers([10]), answers([11])
    seen = []
    for moment in range(1, 60):  # killed just before the n-th open, write, sync, removal...
        folder = tmp_path / f"kill-{moment}"
        folder.mkdir()
        path = folder / "json_cache.json"
        if base:
            path.write_text(sorted_text(base), encoding="utf-8")
        status = forked(add_killed_before, path, new, killed_before_call=moment)
        if next_to_come == "a writer":
            append_entries(path, other)
            before, after = {**base, **other}, {**base, **new, **other}
        else:
            before, after = base, {**base, **new}
        try:
            entries = read_recording(path)
        except RecordingError as error:
            raise AssertionError(
                f"an add killed before file system call {moment} left a recording that "
                f"{next_to_come} cannot read: {error}. appending.undo_interrupted_add must put "
                "it back") from None
        assert entries in (before, after), (
            f"killed before call {moment}, the add left {sorted(entries)}: neither the file "
            "before nor after it")
        if base or entries:
            text = path.read_text(encoding="utf-8")
            layouts = [sorted_text(before) if not base and before else None,
                       json.dumps({**dict(sorted(base.items())), **before}, indent=2),
                       json.dumps({**dict(sorted(base.items())), **new, **other}, indent=2)
                       if next_to_come == "a writer" else
                       json.dumps({**dict(sorted(base.items())), **new}, indent=2)]
            assert text in layouts, f"killed before call {moment}: the text is not whole"
        assert not rollback_record_of(path).exists(), (
            f"killed before call {moment}: the rollback record was left after the next "
            f"{next_to_come.removeprefix('a ')} took the lock")
        seen.append("after" if entries == after else "before")
        if not os.WIFSIGNALED(status):
            break
    assert seen[-1] == "after" and "before" in seen, seen
    if base:  # an add in place: its rollback record, the write, the syncs, the removal
        assert len(seen) > 8, f"the add made only {len(seen)} file system calls: {seen}"


def add_killed_before_removing_its_record(path: Path, entries: dict) -> None:
    """In a forked child: append_entries, killed once the file is written, before the rollback
    record is removed (its first removal)."""
    os.unlink = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
    append_entries(path, entries)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_an_interrupted_add_is_not_undone_over_a_file_rewritten_since(tmp_path):
    path = tmp_path / "json_cache.json"
    base, new = answers(range(3)), answers([10])
    path.write_text(sorted_text(base), encoding="utf-8")
    forked(add_killed_before_removing_its_record, path, new)
    assert rollback_record_of(path).exists(), "the child was not killed where it should be"

    @JsonCache(path)  # cooksafe's own cache rewrites the file in place, without the lock
    def _system_one(model: str, state: str, questions: str) -> dict:
        return answer(12)

    _system_one(*request(12))
    try:
        entries = read_recording(path)
    except RecordingError as error:
        entries = str(error)
    assert entries == {**base, **new, **answers([12])}, (
        "an interrupted add was undone over a file cooksafe rewrote since, damaging it: "
        "appending.undo_interrupted_add must check the file is still the one its add left")
    assert not rollback_record_of(path).exists()


# -- a full or read-only disk ------------------------------------------------------------------

ADD_ONE_OR_SAY_WHY = """
import json, sys
from pathlib import Path
from memorybook.recording import RecordingError, append_entries
try:
    append_entries(Path(sys.argv[1]), json.loads(sys.argv[2]))
except RecordingError as error:
    sys.exit(str(error))
"""


def a_recording_filling(folder: Path, size: int) -> bytes:
    """A recording of about `size` bytes in `folder`, as the collection writes one."""
    folder.mkdir()
    count = 1
    while len(sorted_text(answers(range(count)))) < size:
        count += 1
    text = sorted_text(answers(range(count))).encode("utf-8")
    (folder / "json_cache.json").write_bytes(text)
    return text


@pytest.mark.parametrize("read_only", [False, True])
def test_a_full_or_read_only_disk_is_one_line_and_leaves_the_file_as_it_was(tmp_path,
                                                                           read_only):
    holding = tmp_path / "holding"
    text = a_recording_filling(holding, 9_000)  # 3 of the tmpfs's 4 pages; the rollback record
    big = {"big": {**answer(1), "model": "m" * 6_000}}  # takes the 4th, the add needs a 5th
    with small_tmpfs(tmp_path, "16k", read_only=read_only, holding=holding) as tmpfs:
        done = run_python(ADD_ONE_OR_SAY_WHY, str(tmpfs.mount_point / "json_cache.json"),
                          json.dumps(big), within=tmpfs.enter)
        left = leftovers(tmpfs.here)
        after = (tmpfs.here / "json_cache.json").read_bytes()
    cause = os.strerror(errno.EROFS if read_only else errno.ENOSPC)
    [line] = done.stderr.strip().splitlines()
    assert done.returncode == 1 and line.startswith("Could not write the recording ") and (
        cause in line), done.stderr
    assert after == text, (
        f"a failed add ({cause}) changed the recording: appending.add_in_place must put back "
        "what it overwrote")
    assert left in (["json_cache.json"], ["json_cache.json", "json_cache.json.lock"]), (
        f"a failed add left {left}: its rollback record must go")


def test_rollback_records_are_ignored_by_git():
    for recording in ("json_cache.json", "json_cache.new.json"):
        record = rollback_record_of(REPO_ROOT / "json_cache" / recording)
        ignored = subprocess.run(["git", "check-ignore", "-q",
                                  str(record.relative_to(REPO_ROOT))], cwd=REPO_ROOT)
        assert ignored.returncode == 0, f"git would show {record.name}: name it as .gitignore says"


def test_a_stopped_run_waits_for_nothing_after_an_add(tmp_path):
    """stop_writing still refuses the adds that come after it (tools/record/run.py relies on it)."""
    from memorybook.recording import stop_writing

    path = tmp_path / "json_cache.json"
    append_entries(path, answers([1]))
    assert stop_writing(path)
    with pytest.raises(RecordingError, match="the recording run was stopped"):
        append_entries(path, answers([2]))
    wait_until(lambda: read_recording(path) == answers([1]), 5, "the file as it was")
