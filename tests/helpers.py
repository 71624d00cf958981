"""Small helpers the tests share."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from lzstring import LZString

from memorybook.config import RECORDING_PATH

REPO_ROOT = Path(__file__).resolve().parent.parent
# The committed recording as git holds it: what no test may change.
COMMITTED_RECORDING = RECORDING_PATH.read_bytes()
NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
PUBLISHED = REPO_ROOT / "tests" / "published"
# A Markdown link to the TypeSafe playground: its label and its URL.
LINK = re.compile(r"\[([^\]]+)\]\((https://console\.typesafe\.ai/playground#share/[^)]+)\)")


def notebook(name: str) -> dict:
    path = next(p for p in NOTEBOOKS if p.name.startswith(name))
    return json.loads(path.read_text(encoding="utf-8"))


def stdout_text(nb: dict) -> str:
    """Everything a notebook's cells printed, in order, as one text."""
    return "".join(
        "".join(output.get("text", ""))
        for cell in nb["cells"]
        for output in cell.get("outputs", [])
        if output.get("output_type") == "stream" and output.get("name") == "stdout"
    )


def markdown_outputs(nb: dict) -> list[str]:
    return [
        "".join(output["data"]["text/markdown"])
        for cell in nb["cells"]
        for output in cell.get("outputs", [])
        if "text/markdown" in output.get("data", {})
    ]


def decode(link: str) -> tuple[dict, dict, dict]:
    """A playground link's state and questions, and the whole share it encodes."""
    share = json.loads(LZString.decompressFromEncodedURIComponent(link.split("#share/", 1)[1]))
    return json.loads(share["documentText"]), json.loads(share["promptsText"]), share


# One live call of notebook 1's ask(), printing the failure's explanation if it fails.
ONE_LIVE_CALL = textwrap.dedent("""
    from typesafe_sdk import TypeSafeError
    from memorybook.live import describe_api_failure
    from memorybook.memory_system import ROUTE, ask, later_state
    try:
        ask(later_state("C-1042", 0), ROUTE)
    except TypeSafeError as error:
        print(describe_api_failure(error))
""")


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter with no API key, outside the notebooks' usage log."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("TYPESAFE_API_KEY", "MEMORYBOOK_USAGE_LOG", "CI")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO_ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=120,
    )


def copy_of_the_collection(destination: Path) -> Path:
    """The notebooks, package, data and recording in a scratch folder, to run a copy there.

    A kernel imports the copy's `memorybook` when PYTHONPATH names the folder; the copy's
    `.memorybook/` store folder is its own, so runs of notebook 6 elsewhere are not disturbed.
    """
    def left_out(folder: str, names: list[str]) -> set[str]:
        """Caches, checkpoints and anything not a plain file or folder (a kernel's socket)."""
        return {name for name in names if name in ("__pycache__", ".ipynb_checkpoints")
                or not (os.path.isfile(os.path.join(folder, name))
                        or os.path.isdir(os.path.join(folder, name)))}

    for folder in ("notebooks", "memorybook", "dev", "data"):
        shutil.copytree(REPO_ROOT / folder, destination / folder, ignore=left_out)
    return destination


@dataclass(frozen=True)
class SmallTmpfs:
    """A small tmpfs in a user and mount namespace of its own, which any user may make.

    Only processes in that namespace see it at `mount_point`: run commands there with `enter`
    before them (they keep their working directory). This process reaches the same files
    through `here`, the namespace's root as /proc shows it; a path that is resolved (by SQLite,
    by `Path.resolve()`) loses the namespace, so what must write to the tmpfs runs through
    `enter`.
    """

    mount_point: Path
    here: Path
    enter: tuple[str, ...]


# Mounts the tmpfs, copies in what it should hold, makes it read-only if asked (a remount, which
# only this first process of the namespace may do), says so, then holds the namespace until its
# stdin closes.
HOLD_A_TMPFS = """
mount -t tmpfs -o "size=$1" tmpfs "$2" &&
if [ -n "$3" ]; then cp -a "$3"/. "$2"; fi &&
if [ "$4" = ro ]; then mount -t tmpfs -o "remount,ro,size=$1" tmpfs "$2"; fi &&
echo mounted && exec cat
"""


@contextlib.contextmanager
def small_tmpfs(folder: Path, size: str, *, read_only: bool = False,
                holding: Path | None = None):
    """A SmallTmpfs of `size` at folder/small, gone when the block ends (its namespace with it).

    It starts with a copy of `holding`'s files, if given; with `read_only`, nothing can be
    written to it after that. Where no user namespace can be made, the test is skipped, and
    fails under CI; on systems other than Linux it is skipped.
    """
    import pytest

    if sys.platform != "linux":
        pytest.skip("a tmpfs in a user namespace of its own needs Linux (unshare, nsenter, /proc)")
    missing = [tool for tool in ("unshare", "nsenter") if shutil.which(tool) is None]
    if missing:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(
            f"cannot mount a tmpfs in a user namespace: {' and '.join(missing)} not found "
            "(Debian's and Ubuntu's util-linux package has them)")
    mount_point = folder / "small"
    mount_point.mkdir()
    holder = subprocess.Popen(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", HOLD_A_TMPFS, "sh",
         size, str(mount_point), str(holding or ""), "ro" if read_only else "rw"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if holder.stdout.readline().strip() != "mounted":
            why = holder.communicate(timeout=10)[1].strip()
            message = (f"cannot mount a tmpfs in a user namespace: {why} (Ubuntu from 24.04 allows"
                       " one after `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`)")
            (pytest.fail if os.environ.get("CI") else pytest.skip)(message)
        yield SmallTmpfs(
            mount_point=mount_point,
            here=Path(f"/proc/{holder.pid}/root") / mount_point.relative_to("/"),
            enter=("nsenter", f"--target={holder.pid}", "--user", "--mount",
                   "--preserve-credentials", "--wd=.", "--"))
    finally:
        if holder.poll() is None:
            holder.stdin.close()
            try:
                holder.wait(timeout=10)
            except subprocess.TimeoutExpired:
                holder.kill()
                holder.wait()


def kernels_of(pid: int) -> list[int]:
    """Processes started with JPY_PARENT_PID=pid: the notebook kernels that process launched."""
    return [process.info["pid"] for process in psutil.process_iter(["pid", "environ"])
            if (process.info["environ"] or {}).get("JPY_PARENT_PID") == str(pid)]


def wait_until(condition, seconds: float, what: str) -> None:
    """Poll `condition` until it holds; fail the test after `seconds`."""
    import pytest

    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what} after {seconds} s")
        time.sleep(0.02)


RECORD = [sys.executable, "-m", "tools.record"]  # `make record`, run by this interpreter


def record_arguments(output: Path, notebooks_out: Path, *selection: str) -> list[str]:
    """tools.record's arguments for a run into scratch paths.

    `selection`: "--calls-only" (`make record-calls`), notebook paths, or nothing (every notebook).
    """
    return ["--output", str(output), "--notebooks-out", str(notebooks_out), *selection]


def live_env(base_url: str, scratch: Path | None, key: str, recording: Path | None = None,
             **extra: str) -> dict[str, str]:
    """The environment of a live run against a loopback server, allowed even under CI.

    With `scratch`, notebook kernels import a copy of the collection made there, so that
    notebook 6's store files are that copy's own: runs in parallel never share them.
    """
    env = {k: v for k, v in os.environ.items() if k != "MEMORYBOOK_USAGE_LOG"}
    env.update(TYPESAFE_API_KEY=key, TYPESAFE_ENDPOINT=base_url, MEMORYBOOK_LIVE_IN_CI="1")
    if scratch is not None:
        copy = scratch / "collection"
        if not copy.exists():
            copy.mkdir(parents=True)
            copy_of_the_collection(copy)
        env["PYTHONPATH"] = str(copy)
    if recording is not None:
        env["MEMORYBOOK_RECORDING"] = str(recording)
    return {**env, **extra}
