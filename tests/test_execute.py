"""`make run` (tools/execute.py) never damages a notebook: writes are all or nothing. It says
which Python it runs on.

The writing tests replace the kernel run with an edit of the notebook, so that they exercise the
write itself on a really full or read-only disk; the Ctrl-C test runs a real kernel.
"""

from __future__ import annotations

import os
import platform
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tests.helpers import (
    NOTEBOOKS,
    REPO_ROOT,
    assert_no_kernel_files,
    edited_copy,
    files_in,
    kernels_of,
    small_tmpfs,
    temporary_folder_for,
    wait_until,
)


def notebooks_in(folder: Path) -> list[Path]:
    folder.mkdir(exist_ok=True)
    for source in NOTEBOOKS[:2]:
        shutil.copy2(source, folder / source.name)
    return [folder / source.name for source in NOTEBOOKS[:2]]


def fill(folder: Path) -> None:
    """Write to a file in `folder` until the disk is full."""
    with open(folder / "filler", "wb", buffering=0) as filler:
        try:
            while True:
                filler.write(b"\0" * 4096)
        except OSError:
            pass


# `make run`'s own code, with the kernel run replaced by edited_copy, in the tmpfs's namespace.
MAKE_RUN_WITHOUT_KERNELS = """
import sys
from tests.helpers import edited_copy
from tools import execute
execute.execute = edited_copy
sys.exit(execute.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("disk", ["full", "read-only"])
def test_make_run_on_a_full_or_read_only_disk_leaves_every_notebook_as_it_was(tmp_path, disk):
    originals = notebooks_in(tmp_path / "notebooks")
    with small_tmpfs(tmp_path, "256k", read_only=disk == "read-only",
                     holding=originals[0].parent) as tmpfs:
        copies = [tmpfs.here / path.name for path in originals]
        before = {path.name: path.read_bytes() for path in copies}
        if disk == "full":
            fill(tmpfs.here)
        run = subprocess.run(
            [*tmpfs.enter, sys.executable, "-c", MAKE_RUN_WITHOUT_KERNELS,
             *(str(tmpfs.mount_point / name) for name in before)],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        after = {path.name: path.read_bytes() for path in copies}
        left_over = sorted(path.name for path in tmpfs.here.iterdir()
                           if path.name not in before and path.name != "filler")
    assert run.returncode == 1, run.stderr
    assert after == before, "a notebook was changed"
    assert left_over == [], "temporary files were left behind"
    [line] = run.stderr.strip().splitlines()
    reason = "No space left on device" if disk == "full" else "Read-only file system"
    assert f"Could not write {tmpfs.mount_point / copies[0].name}" in line and reason in line
    assert "unchanged" in line


WHICH_PYTHON = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
    "import platform, sys\nprint(platform.python_version(), sys.executable)")])


def test_make_run_says_which_python_it_and_its_kernels_run_on(tmp_path):
    path = tmp_path / "which.ipynb"
    nbformat.write(WHICH_PYTHON, path)
    env = {k: v for k, v in os.environ.items() if k != "MEMORYBOOK_USAGE_LOG"}
    run = subprocess.run([sys.executable, "-m", "tools.execute", str(path)], cwd=REPO_ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0] == (
        f"Running the notebooks on {platform.python_implementation()} "
        f"{platform.python_version()} ({Path(sys.executable).resolve()})")
    [printed] = nbformat.read(path, as_version=4).cells[0].outputs
    assert printed.text.split() == [platform.python_version(), sys.executable]


SLEEPY = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import time\ntime.sleep(60)")])


@pytest.mark.parametrize("stop, status, said", [
    ("Ctrl-C", 130, "interrupted (Ctrl-C)"),  # a terminal's reaches the whole process group
    ("SIGTERM", 143, "terminated (SIGTERM)"),  # `kill`, a cancelled job: the process alone
    ("SIGHUP", 129, "terminated (SIGHUP)"),  # its terminal closed
])
def test_ctrl_c_or_sigterm_during_make_run_prints_one_line_and_changes_nothing(
        tmp_path, stop, status, said):
    path = tmp_path / "sleepy.ipynb"
    nbformat.write(SLEEPY, path)
    before = path.read_bytes()
    env = {k: v for k, v in os.environ.items() if k != "MEMORYBOOK_USAGE_LOG"}
    with temporary_folder_for(env) as temporary:
        run = subprocess.Popen([sys.executable, "-m", "tools.execute", str(path)],
                               cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               start_new_session=True)  # a terminal's Ctrl-C reaches the group
        try:
            wait_until(lambda: kernels_of(run.pid), 60, "the notebook's kernel")
            if stop == "Ctrl-C":
                os.killpg(run.pid, signal.SIGINT)
            else:
                run.send_signal(getattr(signal, stop))
            _, stderr = run.communicate(timeout=30)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.communicate()
        assert run.returncode == status, stderr
        [line] = stderr.strip().splitlines()
        assert said in line and "sleepy.ipynb" in line
        assert path.read_bytes() == before
        wait_until(lambda: not kernels_of(run.pid), 10, "the kernel to exit")
        assert_no_kernel_files(files_in(temporary), f"make run, stopped by {stop},")


def test_make_run_leaves_a_notebook_edited_while_it_ran_as_it_was_saved(
        tmp_path, monkeypatch, capsys):
    from tools import execute

    first, second = notebooks_in(tmp_path / "notebooks")
    saved_meanwhile = nbformat.writes(edited_copy(first)).replace("x" * 200_000, "a reader's edit")

    def run_while_someone_saves(path: Path) -> nbformat.NotebookNode:
        ran = edited_copy(path)
        if path == first:
            path.write_text(saved_meanwhile, encoding="utf-8")  # as JupyterLab saves it
        return ran

    monkeypatch.setattr(execute, "execute", run_while_someone_saves)
    second_before = second.read_bytes()
    assert execute.main([str(first), str(second)]) == 1
    assert first.read_text(encoding="utf-8") == saved_meanwhile
    assert second.read_bytes() != second_before, "the other notebook was still run and written"
    [line] = capsys.readouterr().err.strip().splitlines()
    assert first.name in line and "was changed while it ran" in line
