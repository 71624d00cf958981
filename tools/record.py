"""Record the collection live into a new recording, then compare it with the published figures.

    make record-dry-run   # which calls would go live, and what they would cost; needs no key
    make record           # with TYPESAFE_API_KEY (and TYPESAFE_ENDPOINT) set
    make record-calls     # the same calls and report, without running the notebooks
    python -m tools.record notebooks/04_probe_experiment.ipynb   # every call; this notebook only
    make accept-recording # after review: the new recording replaces the committed one

Recording never touches json_cache/json_cache.json: answers go to json_cache/json_cache.new.json
(resumed if a run was interrupted) and the notebooks run into build/recorded/. The two customers'
calls are independent of each other, so they are recorded side by side first; the notebooks then
replay the new recording (not with --calls-only, which stops at the report). The API's own retry
policy handles rate limits and server errors; a call that still fails is explained, and nothing
wrong is recorded.

Any failure, or Ctrl-C, stops the whole run within seconds: calls still in flight are abandoned,
the notebook kernels are stopped, and one line says what failed, how many answers the new
recording keeps (every one received before the stop) and how to resume.
"""

# ruff: noqa: E402 - the Ctrl-C handler below is installed before the slow imports

from __future__ import annotations

from tools.stopping import one_line_while_starting

if __name__ == "__main__":
    one_line_while_starting(
        "Recording stopped: interrupted (Ctrl-C) while starting; nothing was sent.")

import argparse
import contextlib
import csv
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future
from pathlib import Path

from memorybook.config import (
    PROVENANCE_PATH,
    RECORDING_ENV,
    RECORDING_PATH,
    REPO_ROOT,
    TYPESAFE_MODEL,
    USAGE_LOG_ENV,
    USD_PER_BILLION_INPUT_TOKENS,
    replay_only_reason,
    shown_path,
)
from memorybook.live import describe_api_failure, redact
from memorybook.recording import (
    RecordingError,
    cache_key,
    describe_call,
    leaf_values,
    read_recording,
    stop_writing,
    write_text_atomically,
)
from tools.build_recording import FIGURES_PATH
from tools.stopping import in_background, stop_kernels, wait_for_all

# tools.execute (nbformat, nbclient, jupyter_client) is imported only when notebooks are run: those
# imports take over a second, which a dry run, a calls-only run and a stop need not pay.

NEW_RECORDING = RECORDING_PATH.with_name("json_cache.new.json")
# Notebooks whose live calls go to a recording of their own (8: json_cache/next_steps.json).
# A recording of the official calls does not run them: with a key they would ask new questions.
OWN_RECORDING = {"08_next_steps.ipynb"}
RECORDED_NOTEBOOKS = REPO_ROOT / "build" / "recorded"
_stopped = False  # set once a run was stopped: the process then exits without further clean-up


class RecordingStopped(Exception):
    """The run was stopped (a failure elsewhere, or Ctrl-C): no notebook runs on it."""


def start_every_call(customers: list[str] | None = None) -> list[Future]:
    """Start every call the notebooks make, one thread per customer (their calls are independent).

    Imports the notebooks' modules, so RECORDING_ENV must name the target recording before.
    """
    from memorybook.probes import probe_experiment
    from memorybook.reconciliation import reconcile
    from memorybook.routing import CUSTOMERS

    def one_customer(customer: str) -> None:
        probe_experiment([customer])
        reconcile([customer])

    return [in_background(one_customer, c) for c in customers or CUSTOMERS]


def run_every_call(customers: list[str] | None = None) -> None:
    """Make every call the notebooks make; the first failure is raised at once."""
    with contextlib.redirect_stdout(io.StringIO()):
        wait_for_all(start_every_call(customers))


def record(output: Path, notebooks_out: Path, notebooks: list[Path] | None = None) -> int:
    """Record every call into `output`, run `notebooks` on it (None: all; []: none), report."""
    reason = replay_only_reason()
    if reason is not None:
        print(f"Recording needs a live client, but {reason}. Nothing was sent.", file=sys.stderr)
        return 2
    os.environ[RECORDING_ENV] = str(output)
    try:
        already = len(read_recording(output))
    except RecordingError as error:
        print(f"Recording not started: {error}", file=sys.stderr)
        return 1
    print(f"Recording into {shown_path(output)} ({already} calls already in it).", flush=True)
    calls: Future = Future()
    try:
        paths = notebooks_of_the_official_calls() if notebooks is None else notebooks
        runs = start_notebooks(paths, calls)  # their kernels start during the calls
        run_every_call()
        calls.set_result(None)
        write_notebooks(paths, wait_for_all(runs), notebooks_out)
    except BaseException as error:  # noqa: BLE001 - every way out stops the run the same way
        with _ignoring_ctrl_c():
            return stop(error, calls, output, notebooks_out)
    if not paths:
        print("Notebooks not run (--calls-only): `make record` runs them on the new recording.\n")
    else:
        print(f"Notebooks run on it ({len(paths)}): {shown_path(notebooks_out)}/\n")
    print("\n".join(compare(read_recording(output))))
    return 0


def notebooks_of_the_official_calls() -> list[Path]:
    from tools.execute import notebook_paths

    return [path for path in notebook_paths() if path.name not in OWN_RECORDING]


def start_notebooks(paths: list[Path], calls: Future) -> list[Future]:
    """Start a kernel for each notebook; its cells wait for `calls`."""
    if not paths:
        return []
    from tools.execute import execute

    return [in_background(execute, path, calls) for path in paths]


def write_notebooks(paths: list[Path], notebooks: list, notebooks_out: Path) -> None:
    if not paths:
        return
    import nbformat

    notebooks_out.mkdir(parents=True, exist_ok=True)
    for path, notebook in zip(paths, notebooks, strict=True):
        nbformat.write(notebook, notebooks_out / path.name)


@contextlib.contextmanager
def _ignoring_ctrl_c():
    """A second Ctrl-C must not interrupt the (short) clean-up of the first."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def stop(error: BaseException, calls: Future, output: Path, notebooks_out: Path) -> int:
    """Stop everything still running, and say in one line what failed, what was kept, what next."""
    if not calls.done():
        calls.set_exception(RecordingStopped("the recording run was stopped"))
    global _stopped
    _stopped = True
    complete = stop_writing(output)  # waits for a write in progress; refuses every later one
    stop_kernels()
    if (kernels := sys.modules.get("memorybook.kernels")) is not None:  # kernels were started
        kernels.remove_socket_folders()  # their sockets' folders: this process ends with os._exit
    try:
        kept = f"{len(read_recording(output))} answers are kept in {shown_path(output)}"
    except RecordingError as unreadable:
        kept = f"the new recording cannot be read now ({unreadable})"
    if not complete:
        kept += " (a write was still in progress: check the file)"
    print(redact(f"Recording stopped: {what_failed(error, notebooks_out)}. {kept}; fix the cause "
                 "and run `make record` again to resume from there."), file=sys.stderr)
    return 130 if isinstance(error, KeyboardInterrupt) else 1


def what_failed(error: BaseException, notebooks_out: Path) -> str:
    from typesafe_sdk import TypeSafeError

    notebook_errors = sys.modules.get("nbclient.exceptions")  # loaded only if notebooks ran

    if isinstance(error, KeyboardInterrupt):
        return "interrupted (Ctrl-C)"
    if isinstance(error, TypeSafeError):
        return describe_api_failure(error).removesuffix(".")
    if isinstance(error, RecordingError):
        return str(error).removesuffix(".")
    if notebook_errors and isinstance(error, notebook_errors.CellExecutionError):
        name = getattr(error, "ename", type(error).__name__)
        return f"a notebook failed on the new recording ({name}: {getattr(error, 'evalue', '')})"
    if isinstance(error, OSError):
        where = f" {error.filename}" if error.filename else f" under {shown_path(notebooks_out)}"
        return f"could not write{where}: {error.strerror or error}"
    return f"{type(error).__name__}: {error}"


def dry_run(output: Path) -> int:
    """Replay the calls from the committed recording and list the ones the new one lacks."""
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"memorybook-dry-run-{os.getpid()}.txt"
    log.unlink(missing_ok=True)
    os.environ.update({USAGE_LOG_ENV: str(log), RECORDING_ENV: str(RECORDING_PATH)})
    os.environ.pop("TYPESAFE_API_KEY", None)  # a dry run never calls the API
    run_every_call()
    keys = list(dict.fromkeys(log.read_text(encoding="utf-8").split()))
    log.unlink()
    have = read_recording(output)
    committed = read_recording(RECORDING_PATH)
    calls = provenance_calls()
    live = [key for key in keys if key not in have]
    tokens = sum(committed[key]["usage"]["input_tokens"] for key in live)
    print(f"A recording into {shown_path(output)} would send {len(live)} of the "
          f"collection's {len(keys)} calls to {TYPESAFE_MODEL}:")
    for key in live:
        print(f"  {calls.get(key, key)}  ~{committed[key]['usage']['input_tokens']:,} tokens")
    cost = tokens * USD_PER_BILLION_INPUT_TOKENS / 1e9
    print(f"Estimated input: {tokens:,} tokens, ${cost:.4f} at ${USD_PER_BILLION_INPUT_TOKENS} "
          f"per billion; output tokens are free.\n(Per-call counts come from the committed "
          f"recording, where only the total is published; see json_cache/provenance.json.)")
    return 0


def provenance_calls() -> dict[str, str]:
    provenance = json.loads(PROVENANCE_PATH.read_text(encoding="utf-8"))
    return {key: entry["call"] for key, entry in provenance["entries"].items()}


def answer_summary(entry: dict) -> str:
    answer = next(iter(entry["answers"].values()))
    if answer["type"] == "choice":
        return f"{answer['choice']} {answer['probabilities'][answer['choice']]:.2f}"
    verdict = "saved" if answer["noul"] >= 0.5 else "not saved"
    return f"{verdict} {answer['noul']:.2f}"


def published_figure(row: dict) -> tuple[str, str]:
    """How a table row reads, and a label for the call it describes."""
    if row["question"] == "team":
        situation = f"memories {row['memories']}" if row["memories"] else "plain"
        return f"{row['customer']} {row['subject']}, {situation}", \
            f"{row['answer']} {row['probability']}".strip()
    label = f"{row['customer']} {row['ticket']} gate, routed to {row['routed_to']}"
    return label, f"{row['answer']} {row['probability']}".strip()


def reproduces(published: str, now: str) -> bool:
    """Same choice or verdict, and the same probability where the page prints one."""
    *answer, probability = now.rsplit(" ", 1)
    return published in (now, " ".join(answer))


def compare(new: dict) -> list[str]:
    """Figure by figure against the published page, then call by call against the committed file."""
    committed = read_recording(RECORDING_PATH)
    provenance = json.loads(PROVENANCE_PATH.read_text(encoding="utf-8"))["entries"]
    key_of_row = {tuple(entry["table_row"].values()): key for key, entry in provenance.items()
                  if "table_row" in entry}
    lines, reproduced, figures = ["Published figures:"], 0, 0
    with FIGURES_PATH.open(encoding="utf-8", newline="") as table:
        for row in csv.DictReader(table):
            context = row["memories"] if row["question"] == "team" else row["routed_to"]
            entry = new.get(key_of_row.get((row["question"], row["ticket"], context)))
            label, published = published_figure(row)
            now = answer_summary(entry) if entry else "not asked (an earlier answer changed)"
            same = entry is not None and reproduces(published, now)
            figures += 1
            reproduced += same
            lines.append(f"  {label}: published {published}, now {now}"
                         + ("" if same else "   <- differs"))
    lines.append(f"{reproduced} of {figures} published figures reproduce.\n")
    calls = provenance_calls()
    changed = [key for key in new
               if key in committed and committed[key]["answers"] != new[key]["answers"]]
    lines.append(f"Calls whose answers changed: {len(changed)}")
    lines += [f"  {calls.get(key, key)}: was {answer_summary(committed[key])}, "
              f"now {answer_summary(new[key])}" for key in changed]
    only_new = [key for key in new if key not in committed]
    lines.append(f"Calls not in the committed recording (their state changed): {len(only_new)}")
    other_models = sorted({entry["model"] for entry in new.values()} - {TYPESAFE_MODEL})
    if other_models:
        lines.append(f"Answered by {', '.join(other_models)}, not the pinned {TYPESAFE_MODEL}: "
                     "the published figures may not apply.")
    return lines


def accept(new_path: Path, recording: Path = RECORDING_PATH,
           provenance_path: Path = PROVENANCE_PATH) -> int:
    """Make the new recording the committed one, if it answers every call the notebooks make.

    The provenance stays true value by value: a value equal to the one it replaces keeps that
    one's origin (published, or filled by a rule), since a copy cannot be told from a
    re-measurement; every other value was measured.
    """
    if not new_path.is_file():
        print(f"Nothing to accept: there is no new recording at {shown_path(new_path)}. Make one "
              "with `make record`.", file=sys.stderr)
        return 1
    try:
        new = read_recording(new_path)
    except RecordingError as error:
        print(f"Not accepted: {error}", file=sys.stderr)
        return 1
    replayed = replay_in_a_new_process(new_path)
    if replayed["unanswered"]:
        print(f"Not accepted: {shown_path(new_path)} lacks calls the notebooks make: "
              + "; ".join(replayed["unanswered"])
              + ". Record them with `make record` (it resumes), then accept again.",
              file=sys.stderr)
        return 1
    committed = read_recording(recording) if recording.exists() else {}
    provenance = accepted_provenance(new, committed, json.loads(
        provenance_path.read_text(encoding="utf-8")), replayed["requests"])
    text = new_path.read_text(encoding="utf-8")
    provenance["recording_sha256"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    write_text_atomically(recording, text)
    write_text_atomically(provenance_path, json.dumps(provenance, indent=2) + "\n")
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
    from memorybook import routing
    from memorybook.replay import RecordingMissError

    answered, requests = routing._system_one, {}

    def noting_the_request(model: str, state: str, questions: str) -> dict:
        requests[cache_key(model, state, questions)] = {
            "model": model, "state": json.loads(state), "questions": json.loads(questions)}
        return answered(model, state, questions)

    routing._system_one = noting_the_request
    unanswered = []
    for customer in routing.CUSTOMERS:  # one customer's calls do not depend on another's
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
    return {
        **provenance,
        "origin": "recorded",
        "about": "Accepted by `make accept-recording` from a live recording: a value equal to "
                 "the one it replaced keeps that one's origin (published, or filled by a rule), "
                 "since a copy cannot be told from a re-measurement; every other value was "
                 "measured.",
        "model": sorted({entry["model"] for entry in new.values()}),
        "entries": entries,
    }


def main(argv: list[str] | None = None) -> int:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)  # from here on, `stop` explains
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="list what would go live")
    parser.add_argument("--accept", action="store_true", help="replace the committed recording")
    parser.add_argument("--replay-check", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, default=NEW_RECORDING, help="the new recording")
    parser.add_argument("--notebooks-out", type=Path, default=RECORDED_NOTEBOOKS)
    parser.add_argument("--calls-only", action="store_true",
                        help="record the calls and report on them, without running the notebooks")
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="run only these notebooks on the new recording (default: all)")
    args = parser.parse_args(argv)
    if args.replay_check:
        return replay_check()
    output = args.output.resolve()
    if output == RECORDING_PATH:
        parser.error("recording over the committed file is what --accept is for")
    if args.accept:
        return accept(output)
    if args.dry_run:
        return dry_run(output)
    if args.calls_only and args.notebooks:
        parser.error("--calls-only runs no notebook: name notebooks or --calls-only, not both")
    notebooks = [] if args.calls_only else [path.resolve() for path in args.notebooks] or None
    for path in notebooks or []:
        if not path.is_file() or path.suffix != ".ipynb":
            parser.error(f"no notebook at {shown_path(path)}")
        if path.name in OWN_RECORDING:
            parser.error(f"{path.name} records into a file of its own; `make record` skips it")
    return record(output, args.notebooks_out.resolve(), notebooks)


if __name__ == "__main__":
    code = main()
    if _stopped:
        # Abandoned calls and nbclient's exit handlers would otherwise hold the process for
        # seconds; everything worth keeping is already on disk (stop_writing saw to that).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
