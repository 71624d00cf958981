"""`make accept-recording`: the new recording replaces the committed one, with its provenance.

It is accepted only if it answers every call the notebooks make, which a new process checks by
replaying the collection from it (`python -m tools.record --replay-check`).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from memorybook.config import (
    PROVENANCE_PATH,
    RECORDING_ENV,
    RECORDING_PATH,
    REPO_ROOT,
    USAGE_LOG_ENV,
    shown_path,
)
from memorybook.recording import (
    CommitError,
    RecordingError,
    canonical_text,
    commit_together,
    describe_call,
    leaf_values,
    read_provenance,
    read_recording,
)
from tools.record.every_call import run_every_call


def accept(new_path: Path, recording: Path = RECORDING_PATH,
           provenance_path: Path = PROVENANCE_PATH) -> int:
    """Make the new recording the committed one, if it answers every call the notebooks make.

    It is committed sorted (file.canonical_text), whatever order its answers came in.

    The provenance stays true value by value: a value equal to the one it replaces keeps that
    one's origin (published, or filled by a rule), since a copy cannot be told from a
    re-measurement; every other value was measured.
    """
    if not new_path.is_file():
        print(f"Nothing to accept: there is no new recording at {shown_path(new_path)}. Make one "
              "with `make record`.", file=sys.stderr)
        return 1
    raw = new_path.read_bytes()
    # What is checked and what is written are this one snapshot: the file may change meanwhile.
    with tempfile.TemporaryDirectory(prefix="memorybook-accept-") as folder:
        snapshot = Path(folder) / new_path.name
        snapshot.write_bytes(raw)
        try:
            new = read_recording(snapshot)
        except RecordingError as error:
            print(f"Not accepted: {str(error).replace(str(snapshot), shown_path(new_path))}",
                  file=sys.stderr)
            return 1
        # A live recording holds its answers in the order they came in: committed sorted.
        text = canonical_text(new)
        if recording.exists() and recording.read_bytes() == text.encode("utf-8"):
            print(f"{shown_path(new_path)} holds what {shown_path(recording)} holds, byte for "
                  "byte once sorted: nothing to accept, and nothing was changed.")
            return 0
        replayed = replay_in_a_new_process(snapshot)
    if replayed["unanswered"]:
        print(f"Not accepted: {shown_path(new_path)} lacks calls the notebooks make: "
              + "; ".join(replayed["unanswered"])
              + ". Record them with `make record` (it resumes), then accept again.",
              file=sys.stderr)
        return 1
    committed = read_recording(recording) if recording.exists() else {}
    provenance = accepted_provenance(new, committed, read_provenance(provenance_path),
                                     replayed["requests"])
    provenance["recording_sha256"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    try:
        commit_together({recording: text,
                         provenance_path: json.dumps(provenance, indent=2) + "\n"})
    except CommitError as error:  # committed: the next read puts them in place
        print(f"Accepted, but not finished: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"Not accepted: could not write {shown_path(recording)} and "
              f"{shown_path(provenance_path)}: {error.strerror or error}. Both were left as they "
              "were; free space or make the folder writable, then accept again.", file=sys.stderr)
        return 1
    print(f"{shown_path(recording)} now holds the {len(new)} recorded calls. Run "
          "`make run` to refresh the notebooks' outputs, then review `git diff` before committing.")
    return 0


def replay_in_a_new_process(path: Path) -> dict:
    """Replay every call of the collection from `path` in a new process that sends nothing.

    Returns {"unanswered": [one line per call the recording cannot answer], "requests": {cache
    key: request} of the calls made}. A new process, because the notebooks' modules open the
    recording they use when they are imported.
    """
    env = {name: value for name, value in os.environ.items()
           if name not in ("TYPESAFE_API_KEY", USAGE_LOG_ENV)}
    env[RECORDING_ENV] = str(path)
    done = subprocess.run([sys.executable, "-m", "tools.record", "--replay-check"], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RecordingError(f"Replaying {shown_path(path)} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def replay_check() -> int:
    """Print, as JSON, which calls the recording in $MEMORYBOOK_RECORDING cannot answer."""
    from memorybook.example import CUSTOMERS, example_jev
    from memorybook.replay import RecordingMissError

    requests = {}

    def note(key: str, model: str, state: str, questions: str) -> None:
        requests[key] = {"model": model, "state": json.loads(state),
                         "questions": json.loads(questions)}

    example_jev().cache.note_lookups(note)
    unanswered = []
    for customer in CUSTOMERS:  # one customer's calls do not depend on another's
        try:
            run_every_call([customer])
        except RecordingMissError:  # the first call it lacks (the last one asked); later ones
            missed = list(requests.values())[-1]  # depend on its answer
            unanswered.append(describe_call(missed["state"], missed["questions"]))
        except RecordingError as error:
            unanswered.append(str(error).splitlines()[0])
    print(json.dumps({"unanswered": unanswered, "requests": requests}))
    return 0


def accepted_provenance(new: dict, committed: dict, provenance: dict, requests: dict) -> dict:
    """The provenance of the new recording: per value, measured or the origin it kept."""
    entries = {}
    for key in sorted(new):
        before = provenance["entries"].get(key, {})
        old_values = dict(leaf_values(committed.get(key, {})))
        if key in provenance["entries"] and dict(leaf_values(new[key])) == old_values:
            entries[key] = before  # unchanged: every origin it had, for values and verdicts alike
            continue
        published, filled, measured = {}, {}, []
        for field, value in leaf_values(new[key]):
            if field in old_values and old_values[field] == value and field in before.get(
                    "filled", {}):
                filled[field] = before["filled"][field]
            elif field in old_values and old_values[field] == value and field in before.get(
                    "published", {}):
                published[field] = before["published"][field]
            else:
                measured.append(field)
        request = before.get("request") or requests.get(key)
        call = before.get("call") or (describe_call(request["state"], request["questions"])
                                      if request else key)
        entries[key] = {"call": call, **({"table_row": before["table_row"]}
                                         if "table_row" in before else {}),
                        "measured": measured, "published": published, "filled": filled,
                        **({"request": request} if request else {})}
    models = sorted({entry["model"] for entry in new.values()})
    return {
        **provenance,
        "origin": "recorded",
        "about": "Accepted by `make accept-recording` from a live recording: a value equal to "
                 "the one it replaced keeps that one's origin (published, or filled by a rule), "
                 "since a copy cannot be told from a re-measurement; every other value was "
                 "measured.",
        "model": models[0] if len(models) == 1 else models,
        "entries": entries,
    }
