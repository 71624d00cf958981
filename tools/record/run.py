"""A live recording run: every call into the new recording, the notebooks on it, then the report.

Any failure, or Ctrl-C, stops the whole run: calls still in flight are abandoned, the notebook
kernels are stopped, and one line says what failed, what the new recording keeps and what next.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
from concurrent.futures import Future
from pathlib import Path

from memorybook.api_errors import describe_api_failure
from memorybook.config import RECORDING_ENV, RECORDING_PATH, replay_only_reason, shown_path
from memorybook.recording import RecordingError, read_recording, stop_writing
from memorybook.redaction import redact
from memorybook.replay import RECORD_STEPS
from tools.ctrl_c import (
    TERMINATING,
    how_stopped,
    in_background,
    stop_kernels,
    stop_status,
    wait_for_all,
)
from tools.record.every_call import run_every_call
from tools.record.missing import describe_missing, missing_calls
from tools.record.report import compare

# tools.execute (nbformat, nbclient, jupyter_client) is imported only when notebooks are run: those
# imports take over a second, which a dry run, a calls-only run and a stop need not pay.
_STOPPED = threading.Event()  # set once a run was stopped


def has_a_recording_of_its_own(notebook: Path) -> bool:
    """Whether the notebook's live calls go to a recording of its own, as its metadata says
    (`"memorybook": {"records_into": ...}`; notebook 7's is json_cache/next_steps.json). A
    recording of the official calls does not run it: with a key it would ask new questions."""
    metadata = json.loads(notebook.read_text(encoding="utf-8")).get("metadata", {})
    return "records_into" in metadata.get("memorybook", {})


class RecordingStopped(Exception):
    """The run was stopped (a failure elsewhere, or Ctrl-C): no notebook runs on it."""


def was_stopped() -> bool:
    """Whether a run of this process was stopped: it then exits without further clean-up."""
    return _STOPPED.is_set()


def record(output: Path, notebooks_out: Path, notebooks: list[Path] | None = None) -> int:
    """Record every call into `output`, run `notebooks` on it (None: all; []: none), report."""
    reason = replay_only_reason()
    if reason is not None:
        print(f"Recording needs a live client, but {reason}. Nothing was sent.", file=sys.stderr)
        try:
            missing = missing_calls(RECORDING_PATH).missing
        except RecordingError as error:
            print(error, file=sys.stderr)
            return 2
        print("\n".join(describe_missing(missing, RECORDING_PATH) or [
            f"{shown_path(RECORDING_PATH)} holds every call the collection makes, so `make run` "
            f"replays them all. To record them again: {RECORD_STEPS}."]), file=sys.stderr)
        return 2
    os.environ[RECORDING_ENV] = str(output)
    try:
        already = len(read_recording(output))
    except RecordingError as error:
        print(f"Recording not started: {error}", file=sys.stderr)
        return 1
    print(f"Recording into {shown_path(output)} ({already} calls already in it).", flush=True)
    calls: Future = Future()
    # Notebook 1 reads json_cache/json_cache.json beside itself: the notebooks run in a folder
    # whose json_cache/ holds the new recording once every call is in it.
    replay_folder = notebooks_out / "replay"
    try:
        paths = notebooks_of_the_official_calls() if notebooks is None else notebooks
        if paths:
            (replay_folder / "json_cache").mkdir(parents=True, exist_ok=True)
        runs = start_notebooks(paths, calls, replay_folder)  # kernels start during the calls
        run_every_call()
        if paths:
            shutil.copyfile(output, replay_folder / "json_cache" / "json_cache.json")
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

    return [path for path in notebook_paths() if not has_a_recording_of_its_own(path)]


def start_notebooks(paths: list[Path], calls: Future, folder: Path) -> list[Future]:
    """Start a kernel for each notebook, working in `folder`; its cells wait for `calls`."""
    if not paths:
        return []
    from tools.execute import execute

    return [in_background(execute, path, calls, folder) for path in paths]


def write_notebooks(paths: list[Path], notebooks: list, notebooks_out: Path) -> None:
    if not paths:
        return
    import nbformat

    notebooks_out.mkdir(parents=True, exist_ok=True)
    for path, notebook in zip(paths, notebooks, strict=True):
        nbformat.write(notebook, notebooks_out / path.name)


@contextlib.contextmanager
def _ignoring_ctrl_c():
    """A second Ctrl-C, SIGTERM or SIGHUP must not interrupt the (short) clean-up of the first."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, signal.SIG_IGN)
                for number in (signal.SIGINT, *TERMINATING)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def stop(error: BaseException, calls: Future, output: Path, notebooks_out: Path) -> int:
    """Stop everything still running, and say in one line what failed, what was kept, what next."""
    if not calls.done():
        calls.set_exception(RecordingStopped("the recording run was stopped"))
    _STOPPED.set()
    complete = stop_writing(output)  # waits for a write in progress; refuses every later one
    stop_kernels()
    try:
        kept = f"{len(read_recording(output))} answers are kept in {shown_path(output)}"
    except RecordingError as unreadable:
        kept = f"the new recording cannot be read now ({unreadable})"
    if not complete:
        kept += " (a write was still in progress: check the file)"
    print(redact(f"Recording stopped: {what_failed(error, notebooks_out)}. {kept}; fix the cause "
                 "and run `make record` again to resume from there."), file=sys.stderr)
    return stop_status(error) if isinstance(error, KeyboardInterrupt) else 1


def what_failed(error: BaseException, notebooks_out: Path) -> str:
    from typesafe_sdk import TypeSafeError

    notebook_errors = sys.modules.get("nbclient.exceptions")  # loaded only if notebooks ran

    if isinstance(error, KeyboardInterrupt):
        return how_stopped(error)
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
