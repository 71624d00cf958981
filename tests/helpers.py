"""What the tests share besides their fixtures: notebooks, processes, fresh Jevs, scratch
disks, and the memory store's memories, keys and backends.

Subprocess snippets import this module too, so what it imports stays light (pytest and nbformat
only where used).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import psutil
from lzstring import LZString

from memorybook.config import RECORDING_PATH
from memorybook.store import MAX_MEMORIES_PER_CUSTOMER, MemoryStore

if TYPE_CHECKING:
    import httpx2
    import nbformat

    from memorybook.jev import Jev

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


def fresh_jev(monkeypatch, recording: Path | str | None = None, *, mode: str | None = None,
              in_the_collection: bool = False, **env: str) -> Jev:
    """A `Jev` made as a fresh process would make it with `env` set, for the test's length.

    The environment settings a test run could carry in are removed first, the misses replay.py
    has met start empty, and the example's Jev (memorybook.example.example_jev, what the
    experiments ask by default) is made anew from `env` at its first use; every other test's are
    left untouched. The process is an app's, unless `in_the_collection` (then it is one of the
    collection's notebook kernels or tools: replay.mark_as_the_collection()).
    """
    from memorybook import example, replay
    from memorybook.jev import Jev, made_once
    from memorybook_dev import next_steps

    for name in ("TYPESAFE_API_KEY", "TYPESAFE_ENDPOINT", "MEMORYBOOK_USAGE_LOG", "CI",
                 "MEMORYBOOK_RECORDING", "MEMORYBOOK_RECORD_MODE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(replay, "MISSES_SO_FAR", [])
    monkeypatch.setattr(replay, "in_the_collection", in_the_collection)
    for module, name in ((example, "example_jev"), (next_steps, "next_steps_jev")):
        made = getattr(module, name).__wrapped__
        monkeypatch.setattr(module, name, made_once(made))
    return Jev(recording, mode=mode)


def live_jev(monkeypatch, base_url: str, key: str, recording: Path, **extra: str) -> Jev:
    """fresh_jev() recording into `recording`, live against a loopback server: what live_env()
    is to a process, allowed even under CI. The example's Jev records into it too."""
    return fresh_jev(monkeypatch, recording, TYPESAFE_API_KEY=key, TYPESAFE_ENDPOINT=base_url,
                     MEMORYBOOK_LIVE_IN_CI="1", MEMORYBOOK_RECORDING=str(recording), **extra)


def forked(work: Callable[..., object], *args: Any, **kwargs: Any) -> int:
    """Run ``work(*args, **kwargs)`` in a forked child, which then ends with os._exit(0); return
    its wait status (killed by a signal: os.WIFSIGNALED). A fork starts the child at once, in the
    state the test left (its monkeypatches too), where a new interpreter would take a second.

    Python 3.12 and later warn when a process with other threads forks: the child deadlocks if
    it takes a lock that another thread held at the fork. The other thread here is xdist's I/O
    thread (the tests' own threads have ended), which takes none of the locks these children
    take (the recording's, and its file lock, opened anew); and a child ends with os._exit,
    flushing no buffer. So that warning alone is silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"This process .* is multi-threaded, use of fork\(\)",
                                DeprecationWarning)
        child = os.fork()
    if child == 0:  # pragma: no cover - the child
        try:
            work(*args, **kwargs)
        finally:
            os._exit(0)
    _, status = os.waitpid(child, 0)
    return status


def kill_before_the_nth_call(n: int, names: tuple[str, ...]) -> None:
    """In a forked child about to do some work: SIGKILL this process just before its n-th call
    of these `os` functions, whichever comes, as a power cut or `kill -9` would; stderr muted."""
    calls = [0]

    def killed_at_the_moment(original):
        def call(*args, **kwargs):
            calls[0] += 1
            if calls[0] == n:
                os.kill(os.getpid(), signal.SIGKILL)
            return original(*args, **kwargs)
        return call

    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    for name in names:
        setattr(os, name, killed_at_the_moment(getattr(os, name)))


def readme_app_example() -> tuple[str, str]:
    """The Python example that opens the README's section for apps, and what the README says
    it prints."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Use it in an app", 1)[-1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    said = re.search(r"[Ii]t prints `([^`]+)`", section)
    assert section.strip().startswith("```python") and said, (
        "README.md's section 'Use it in an app' must start with a Python example and say what "
        "it prints (it prints `...`)")
    return blocks[0], said.group(1)


def one_live_call(jev: Jev) -> str:
    """Route ticket T-201 through `jev`; what a failure of the API says, else ""."""
    from typesafe_sdk import TypeSafeError

    from memorybook.api_errors import describe_api_failure
    from memorybook.example import ROUTE, later_state

    try:
        jev.ask(later_state("C-1042", 0), ROUTE)
    except TypeSafeError as error:
        return describe_api_failure(error)
    return ""


SUBPROCESS_TIMEOUT_SECONDS = 120


def start_python(code: str, *args: str, within: tuple[str, ...] = (),
                 **env: str) -> subprocess.Popen:
    """Start code (with `args` as sys.argv[1:]) in a fresh interpreter that imports this
    checkout's memorybook and tests, with no API key and outside the notebooks' usage log.

    `env` is added to the environment; `within` goes before the interpreter (a SmallTmpfs's
    `enter`). Its output is text, in pipes.
    """
    clean = {k: v for k, v in os.environ.items()
             if k not in ("TYPESAFE_API_KEY", "MEMORYBOOK_USAGE_LOG", "CI")}
    return subprocess.Popen(
        [*within, sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=REPO_ROOT, env={**clean, "PYTHONPATH": str(REPO_ROOT), **env},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def run_python(code: str, *args: str, within: tuple[str, ...] = (),
               **env: str) -> subprocess.CompletedProcess:
    """start_python() to its end: what it printed and its exit status, whatever they are."""
    process = start_python(code, *args, within=within, **env)
    try:
        stdout, stderr = process.communicate(timeout=SUBPROCESS_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def finish(process: subprocess.Popen) -> str:
    """What a started process printed, once it has ended; it must have succeeded, silently."""
    stdout, stderr = process.communicate(timeout=SUBPROCESS_TIMEOUT_SECONDS)
    assert process.returncode == 0, stderr
    assert stderr == ""
    return stdout


def edited_copy(path: Path) -> nbformat.NotebookNode:
    """What `make run` would store: the notebook with a new output, much longer than the file."""
    import nbformat  # here only: it is slow to import

    notebook = nbformat.read(path, as_version=4)
    cell = next(cell for cell in notebook.cells if cell.cell_type == "code")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * 200_000)]
    return notebook


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

    for folder in ("notebooks", "json_cache", "memorybook", "dev", "data"):
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


@contextlib.contextmanager
def temporary_folder_for(env: dict[str, str]) -> Iterator[Path]:
    """A new folder, set as TMPDIR in `env`, for a process's temporary files; removed afterwards.

    A test sees there what a stopped run left behind: kernels' folders (memorybook_dev/kernels.py),
    an accept's snapshot. Its path is short, as a kernel's sockets are paths of at most 107 bytes.
    """
    folder = Path(tempfile.mkdtemp(prefix="mb-"))
    env["TMPDIR"] = str(folder)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def files_in(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def assert_no_kernel_files(left: list[str], run: str) -> None:
    """`left`: what a stopped run left in its temporary_folder_for()."""
    assert left == [], (
        f"{run} left {left} in its temporary folder: a run that stops its kernels must also "
        "remove their folders (sockets, and connection files with their keys) before it exits; "
        "see stop_kernels() in tools/ctrl_c.py")


def kernels_of(pid: int) -> list[int]:
    """Processes started with JPY_PARENT_PID=pid: the notebook kernels that process launched."""
    return [process.info["pid"] for process in psutil.process_iter(["pid", "environ"])
            if (process.info["environ"] or {}).get("JPY_PARENT_PID") == str(pid)]


@functools.cache
def loopback_http() -> httpx2.Client:
    """This process's one client for requests to the services and servers tests start on
    loopback. Each request still opens a connection of its own (no keep-alive), as httpx2.get()
    does, without making a client, and its TLS context (20 ms of CPU), for every request or
    poll."""
    import httpx2

    return httpx2.Client(limits=httpx2.Limits(max_keepalive_connections=0))


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


# -- services as processes, and made-up answers for their loopback API -----------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def seconds_until_it_answers(port: int, process: subprocess.Popen, limit: float,
                             probe: str = "/customers/C-0/memories") -> float:
    """Poll GET `probe` until it answers 200; fail after `limit` s."""
    import httpx2
    import pytest

    started = time.monotonic()
    while time.monotonic() - started < limit:
        if process.poll() is not None:
            pytest.fail(f"the service exited ({process.returncode}): {process.communicate()}")
        with contextlib.suppress(httpx2.TransportError):
            if loopback_http().get(f"http://127.0.0.1:{port}{probe}",
                                   timeout=1).status_code == 200:
                return time.monotonic() - started
        time.sleep(0.05)
    pytest.fail(f"the service did not answer within {limit} s of starting")


def stop_for_good(process: subprocess.Popen) -> None:
    """Kill what is left of a process this test started, and its children."""
    if process.poll() is None:
        for child in psutil.Process(process.pid).children(recursive=True):
            child.kill()
        process.kill()
    process.communicate()


SERVICE = "memorybook.service:create_app"
SERVICE_KEY = "canary-key-3f9a1c7e55d2"  # what service processes send their loopback API


def start_service(port: int, store_url: str, endpoint: str, logs, *, app: str = SERVICE,
                  folder: Path = REPO_ROOT, **env: str) -> subprocess.Popen:
    """`uvicorn --factory APP` (the service, or an app in `folder`) on 127.0.0.1:`port`, live
    against the loopback at `endpoint`, on the store at `store_url`; its output goes to the file
    `logs`."""
    return subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", app, "--host", "127.0.0.1",
         "--port", str(port)],
        cwd=folder, env=live_env(endpoint, None, SERVICE_KEY, MEMORYBOOK_STORE_URL=store_url,
                                 **env),
        stdout=logs, stderr=subprocess.STDOUT, text=True)


@contextlib.contextmanager
def services(count: int, store_url: str, endpoint: str, tmp_path, *, app: str = SERVICE,
             folder: Path = REPO_ROOT, probe: str = "/customers/C-0/memories", **env: str):
    """`count` processes of the service (or of `app`, in `folder`) on one store, each answering
    `probe`, as [(process, base URL)]; they get SIGTERM at the block's end (their pending gates
    drain), then whatever is left is killed."""
    running = []
    try:
        for _ in range(count):
            port = free_port()
            logs = open(tmp_path / f"service-{port}.log", "w")  # noqa: SIM115 - closed below
            running.append((start_service(port, store_url, endpoint, logs, app=app,
                                          folder=folder, **env), port, logs))
        for process, port, _ in running:
            seconds_until_it_answers(port, process, 60, probe)
        yield [(process, f"http://127.0.0.1:{port}") for process, port, _ in running]
    finally:
        for process, _, _ in running:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process, _, logs in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=60)
            stop_for_good(process)
            logs.close()


class MadeUpAnswers:
    """Made-up answers for a loopback's `answer_with` (never Jev's): every ticket to the first
    team at once; every gate keeps its memory, once `release` is set (at once with
    `hang=False`)."""

    def __init__(self, hang: bool) -> None:
        self.release = threading.Event()
        if not hang:
            self.release.set()
        self.gates = 0  # gate requests received
        self._lock = threading.Lock()

    def __call__(self, body: dict) -> dict:
        [(question_id, question)] = body["questions"].items()
        if question_id == "remember":
            with self._lock:
                self.gates += 1
            self.release.wait(120)
            answer = {"type": "noul", "noul": 0.9}
        else:
            options = list(question["criteria"])
            answer = {"type": "choice", "choice": options[0], "confidence": 1.0,
                      "probabilities": {o: float(o == options[0]) for o in options}}
        return {"model": body["model"], "usage": {"input_tokens": 1, "output_tokens": 1},
                "answers": {question_id: answer}}


def twenty_customers_tickets() -> list[dict]:
    """One ticket for each of 20 customers, each stating a licence number of its own."""
    return [{"customer": {"id": f"C-{3000 + n}", "company": "Acme Corp"},
             "ticket": {"id": f"T-{n}", "received_on": "2026-10-02", "subject": "Licence",
                        "messages": [{"from": "customer",
                                      "text": f"Our licence is LIC-{n:04d}-{n * 7919:06d}."}]}}
            for n in range(1, 21)]


def pending_records(backend) -> list[bytes]:
    """The sealed pending gates the store holds; [] where it has no such table."""
    connection, _ = backend.connect_directly()
    with contextlib.closing(connection):
        try:
            rows = connection.execute("SELECT sealed FROM memorybook_pending").fetchall()
        except Exception:  # noqa: BLE001 - a store of a version that records no gates
            return []
    return [bytes(sealed) for (sealed,) in rows]


# -- the memory store's tests ----------------------------------------------------------------


def new_key() -> str:
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


def make_memory(customer_id: str, ticket_id: str, text: str = "How do I add an admin?") -> dict:
    """A memory shaped like the cookbook's, with deliberately unsorted keys."""
    return {
        "request": {
            "customer": {"id": customer_id, "company": "Acme Corp"},
            "ticket": {
                "id": ticket_id,
                "received_on": "2026-08-04",
                "subject": "Adding an admin",
                "messages": [{"from": "customer", "text": text}],
            },
        },
        "jev_answered": {
            "Which edition?": "Self-hosted, Windows Server 2022",
            "Accents and symbols?": 'Café — naïve ☕ 100% "quoted" \\ back',
            "A number": 3.14159,
        },
    }


def ticket_ids(memories: list[dict]) -> list[str]:
    return [m["request"]["ticket"]["id"] for m in memories]


def nested(depth: int) -> dict:
    value: object = "deep"
    for _ in range(depth):
        value = [value]
    return value


def sweep_nesting_depths(store: MemoryStore, deepest: int) -> list[int]:
    """Save memories nested 1..deepest levels; each accepted one must recall, evict and forget.

    The store caps the customer at one memory, so each save evicts the memory accepted before,
    unless that one was forgotten (every tenth). Returns the depths that were accepted.
    """
    accepted: list[int] = []
    previous = None
    deep: object = "deep"  # nested(depth), each depth wrapping the one before, not built anew
    for depth in range(1, deepest + 1):
        deep = [deep]
        memory = make_memory("C-1042", f"T-{depth}")
        memory["jev_answered"]["deep"] = deep
        try:
            evicted = store.save("C-1042", memory)
        except ValueError as error:
            assert "nested" in str(error), error
            continue
        accepted.append(depth)
        assert evicted == ([] if previous is None else [previous])
        assert store.recall("C-1042") == [memory]
        if depth % 10 == 0:
            assert store.forget("C-1042", f"T-{depth}") == [memory]
            previous = None
        else:
            previous = memory
    assert store.forget_customer("C-1042") == ([] if previous is None else [previous])
    return accepted


class Backend:
    """One fresh, empty store location on one backend, and how a test opens and inspects it.

    The store tests use only what this class declares. Each backend's subclass, listed in
    FRESH_STORES (tests/store/conftest.py), is all that they know of its database and driver.
    """

    name: ClassVar[str]  # as a test picks the backend with `indirect`
    store_class: ClassVar[type]
    # What schema() gives on a new store: the tables and indexes of earlier versions, pinned.
    pinned_schema: ClassVar[object]
    # The statements an earlier format's version created a store with (schema.EARLIER_FORMATS).
    format_1_tables: ClassVar[tuple[str, ...]]
    format_2_tables: ClassVar[tuple[str, ...]]
    format_3_tables: ClassVar[tuple[str, ...]]
    # Whether forget(), supersede() and forget_customer() leave no bytes in the files at once,
    # rather than only once sweep() has run (which erases what the store deletes on its own:
    # eviction, expiry, settled gates, on every backend).
    erases_without_sweep: ClassVar[bool] = True
    # The ways another session can hold a lock this store's writers need, as hold_a_lock() takes
    # them: "customer" (another writer for the customer, stuck inside its transaction) and
    # "tables" (every memorybook table locked) on each backend; a backend may add its own.
    ways_to_hold_a_lock: ClassVar[tuple[str, ...]] = ("tables", "customer")

    def __init__(self, url: str, location: str) -> None:
        self.url = url  # what open_store() takes
        self.location = location  # what the store class takes
        self.key = new_key()

    @classmethod
    def fresh(cls, tmp_path: Path) -> contextlib.AbstractContextManager[Backend]:
        """A new, empty store location, removed afterwards if it lives outside `tmp_path`."""
        raise NotImplementedError

    def open(
        self,
        *,
        key: str | bytes | None = None,
        max_memories: int = MAX_MEMORIES_PER_CUSTOMER,
        **options: float,
    ) -> MemoryStore:
        return self.store_class(
            self.location, key=key or self.key, max_memories=max_memories, **options
        )

    def connect_directly(self) -> tuple[Any, str]:
        """A connection of the test's own to the store's database, and its driver's placeholder."""
        raise NotImplementedError

    def flip_a_byte(self, table: str, column: str, *, row: int | None = None,
                    offset: int = 0) -> int:
        """Damage one value in place, as a disk or a hand outside memorybook would: the last
        byte of `column` in the row with id `row` (else the `offset`-th row by id) of `table`.
        Returns the row's id."""
        connection, mark = self.connect_directly()
        with contextlib.closing(connection):
            where = f"id = {mark}" if row is not None else "TRUE"
            [(row, value)] = connection.execute(
                f"SELECT id, {column} FROM {table} WHERE {where} ORDER BY id LIMIT 1"
                f" OFFSET {offset}", () if row is None else (row,)).fetchall()
            value = bytes(value)
            connection.execute(f"UPDATE {table} SET {column} = {mark} WHERE id = {mark}",
                               (value[:-1] + bytes([value[-1] ^ 1]), row))
            connection.commit()
        return row

    def raw_bytes(self) -> bytes:
        """Everything the database holds, as raw bytes (files, or every table row)."""
        raise NotImplementedError

    def schema(self) -> object:
        """The store's tables and indexes as the database's catalog describes them."""
        raise NotImplementedError

    @contextlib.contextmanager
    def hold_a_lock(self, how: str, customer_id: str) -> Iterator[None]:
        """Another session holds a lock the store needs to write for `customer_id` (one of
        ways_to_hold_a_lock), until the block ends."""
        if how == "customer":
            with self.open() as other, other.customer_lock(customer_id):
                yield
        else:
            with self.hold_the_tables(how):
                yield

    def hold_the_tables(self, how: str) -> contextlib.AbstractContextManager[None]:
        """Another session holds every memorybook table locked ("tables", or a backend's own)."""
        raise NotImplementedError

    def wait_for_older_transactions(self) -> None:
        """Wait until no other session's transaction began before now: a vacuum must keep the
        rows such a transaction may still read. Nothing to wait for where none does that."""


# What a call (to the API or a store) may take beyond its time limit on a loaded 2-core machine.
MARGIN_SECONDS = 1.0


def in_thread(call) -> tuple[threading.Thread, list]:
    """Start `call()` in a thread; the list gets its result or its error, and how long it took."""
    outcome: list = []

    def run() -> None:
        started = time.monotonic()
        try:
            result: object = call()
        except Exception as error:  # noqa: BLE001 - handed to the test
            result = error
        outcome.append((result, time.monotonic() - started))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


@contextlib.asynccontextmanager
async def in_process(app, base_url: str = "http://localhost"):
    """An httpx client on an ASGI app, between the app's startup and its shutdown."""
    import httpx2
    from asgi_lifespan import LifespanManager

    async with LifespanManager(app) as running:
        transport = httpx2.ASGITransport(app=running.app)
        async with httpx2.AsyncClient(transport=transport, base_url=base_url) as http:
            yield http


def talk(app, requests, base_url: str = "http://localhost"):
    """Run `await requests(http)` with a client `in_process()` on the app; return what it
    returns."""
    async def scenario():
        async with in_process(app, base_url) as http:
            return await requests(http)

    return asyncio.run(scenario())


def serving_alone_noted(monkeypatch) -> list[str]:
    """SQLiteMemoryStore.serving_alone() replaced, for the test, by one noting "held" and "given
    back" in the list returned (tests/store/test_sqlite.py holds the real one across
    processes)."""
    from memorybook.store import SQLiteMemoryStore

    noted: list[str] = []

    @contextlib.contextmanager
    def serving_alone(store):
        noted.append("held")
        yield
        noted.append("given back")

    monkeypatch.setattr(SQLiteMemoryStore, "serving_alone", serving_alone)
    return noted


def serving_alone_refused(monkeypatch) -> None:
    """SQLiteMemoryStore.serving_alone() replaced by one refusing, as when another process
    serves the file."""
    from memorybook.store import MemoryStoreError, SQLiteMemoryStore

    def refused(store):
        raise MemoryStoreError("Another process serves the SQLite store (a test's)")

    monkeypatch.setattr(SQLiteMemoryStore, "serving_alone", refused)
