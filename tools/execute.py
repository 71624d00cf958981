"""Run the notebooks top to bottom in fresh kernels and store their outputs, reproducibly.

    python -m tools.execute                 # every notebook, in reading order, in place
    python -m tools.execute notebooks/04_reconciliation.ipynb

The kernels never see TYPESAFE_API_KEY: stored outputs come from the recording (`make record` is
the live path). Outputs are stored without timings. The notebook's metadata holds what JupyterLab
writes there as it opens the notebook: KERNELSPEC, and the kernel's own language_info, which in
the collection holds no Python version (dev/memorybook_dev/ipython_kernel_config.py). So opening
a notebook does not mark it changed, and a re-run on another machine or on another Python leaves
`git diff` empty. At the end it prints the headline results the notebooks produced.

A notebook is written only once it has run to its end, all at once (through a temporary file
beside it): a full disk, a read-only folder, Ctrl-C or SIGTERM leave every notebook as it was,
and say so in one line. A notebook saved by someone else while it ran is left as they saved it,
and said so.
"""

# ruff: noqa: E402 - the Ctrl-C handler below is installed before the slow imports

from __future__ import annotations

from tools.ctrl_c import one_line_while_starting

if __name__ == "__main__":
    one_line_while_starting("make run stopped: interrupted (Ctrl-C) while starting; no notebook "
                            "was changed.")

import argparse
import asyncio
import os
import platform
import sys
from concurrent.futures import Future
from pathlib import Path

import IPython.paths  # noqa: F401 - imported here, once: kernels started in threads import it lazily
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from memorybook.config import shown_path
from memorybook.recording import RecordingError, write_text_atomically
from memorybook_dev.kernels import use_unix_socket_kernels
from tools.ctrl_c import (
    how_stopped,
    in_background,
    stop_as_on_ctrl_c,
    stop_kernels,
    stop_status,
    wait_for_all,
)
from tools.record.missing import describe_missing, missing_calls

REPO_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO_ROOT / "notebooks"
HEADLINES = ("plain Jev ->", "Expected routes:")  # stdout lines worth repeating at the end
KERNEL_TIMEOUT = 120  # seconds a single cell may take
# What a kernel can import before the recording it will replay exists (see `execute`): the SDK
# every notebook uses, and matplotlib (half a second more) where the notebook draws a chart.
WARM_UP = "import typesafe_sdk"
WARM_UP_CHARTS = "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot"
# The kernelspec JupyterLab writes into a notebook once its kernel starts: the kernel's name, and
# the display name and language of ipykernel's own spec (the same on every Python 3).
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def warm_up_code(notebook: nbformat.NotebookNode) -> str:
    draws = any("memorybook_dev.charts" in cell.source for cell in notebook.cells
                if cell.cell_type == "code")
    return f"{WARM_UP}; {WARM_UP_CHARTS}" if draws else WARM_UP


def notebook_paths() -> list[Path]:
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def execute(path: Path, cells_wait_for: Future | None = None,
            folder: Path | None = None) -> nbformat.NotebookNode:
    """Execute one notebook in a fresh kernel working in `folder` (by default the notebook's
    own); return it with its outputs.

    With `cells_wait_for`, the kernel starts and imports the heavy libraries at once, but runs the
    notebook's cells only when that future is done (and not at all if it failed): a live
    recording starts its kernels while its API calls are still in flight.
    """
    notebook = nbformat.read(path, as_version=4)
    use_unix_socket_kernels()  # over TCP, kernels started at the same time elsewhere can collide
    client = NotebookClient(
        notebook,
        kernel_name="python3",  # the client owns its kernel, and shuts it down when done
        shutdown_kernel="immediate",  # as nbval does: nothing is left to save, no need to wait
        timeout=KERNEL_TIMEOUT,
        record_timing=False,
        coalesce_streams=True,
        extra_arguments=["--IPKernelApp.log_level=ERROR"],  # no start-up notices on a terminal
        resources={"metadata": {"path": str(path.parent if folder is None else folder)}},
    )
    if cells_wait_for is not None:

        async def warm_up_then_wait(notebook):
            await client.kc.execute_interactive(warm_up_code(notebook), silent=True,
                                                store_history=False)
            await asyncio.get_running_loop().run_in_executor(None, cells_wait_for.result)

        client.on_notebook_start = warm_up_then_wait
    client.execute()  # it stores the kernel's language_info in the notebook's metadata
    notebook.metadata["kernelspec"] = dict(KERNELSPEC)
    return notebook


def stdout_lines(notebook: nbformat.NotebookNode) -> list[str]:
    lines = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stdout":
                lines += output["text"].splitlines()
    return lines


def running_on() -> str:
    """This Python (the kernels' too: jupyter_client starts them with it): its version, and the
    interpreter .venv was made from."""
    return (f"{platform.python_implementation()} {platform.python_version()} "
            f"({Path(sys.executable).resolve()})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: all, in reading order")
    args = parser.parse_args(argv)
    os.environ.pop("TYPESAFE_API_KEY", None)  # the stored outputs always come from the recording
    stop_as_on_ctrl_c()
    headlines, written, edited = [], 0, []
    print(f"Running the notebooks on {running_on()}")
    for path in args.notebooks or notebook_paths():
        path = path.resolve()
        try:
            as_read = path.read_bytes()
            [notebook] = wait_for_all([in_background(execute, path)])
            text = nbformat.writes(notebook)
            if _read_or_none(path) != as_read:  # saved meanwhile, from JupyterLab say: keep that
                print(f"{shown_path(path)} was changed while it ran, so it was left as it is now, "
                      "without the new outputs; run `make run` again once it is saved for good.",
                      file=sys.stderr)
                edited.append(path)
                continue
            write_text_atomically(path, text if text.endswith("\n") else text + "\n")
        except KeyboardInterrupt as stopped:  # Ctrl-C, or SIGTERM or SIGHUP (Terminated)
            stop_kernels()
            print(f"make run stopped: {how_stopped(stopped)} while running {shown_path(path)}, "
                  f"which is unchanged; {written} notebook(s) before it were written.",
                  file=sys.stderr)
            return stop_status(stopped)
        except CellExecutionError as error:
            print(stopped_by(path, error), file=sys.stderr)
            return 1
        except OSError as error:
            print(f"Could not write {shown_path(path)}: {error.strerror or error}. It is "
                  "unchanged, as are the notebooks not yet run; free space or fix the folder's "
                  "permissions, then run `make run` again.", file=sys.stderr)
            return 1
        written += 1
        cells = sum(cell.cell_type == "code" for cell in notebook.cells)
        print(f"ran {shown_path(path)}: {cells} code cells")
        headlines += [line.strip() for line in stdout_lines(notebook)
                      if line.strip().startswith(HEADLINES)]
    if headlines:
        print("\nHeadline results:\n  " + "\n  ".join(dict.fromkeys(headlines)))
    return 1 if edited else 0


MISSES = ("RecordingMissError", "NotInCacheError")  # a call the recording lacks, as cells name it


def stopped_by(path: Path, error: CellExecutionError) -> str:
    """What to print when a cell failed: for a call the recording lacks, every call it lacks
    (the list `make record-dry-run` prints) and the command that records them."""
    try:
        missing = describe_missing(missing_calls().missing) if error.ename in MISSES else []
    except RecordingError:  # the recording itself is damaged: the cell's error says how
        missing = []
    if not missing:
        return f"{shown_path(path)} stopped with an error:\n{error}"
    return "\n".join([f"{shown_path(path)} stopped: it makes a call the recording lacks.",
                      *missing])


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


if __name__ == "__main__":
    code = main()
    if code > 128:  # stopped by a signal
        # After Ctrl-C or SIGTERM, the notebook's thread and nbclient's exit handlers would hold
        # the process on a kernel that is already gone.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
