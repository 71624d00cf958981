"""`make serve` with a key, as an app runs in production: live against a loopback endpoint, no
recording asked for. It writes its encrypted store and that store's key file, and nothing else:
no recording (the committed one least of all), and no ticket text or key in clear anywhere."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx2
import psutil

from tests.helpers import REPO_ROOT, copy_of_the_collection, loopback_http
from tools.loopback_replies import made_up_answer
from tools.loopback_server import LoopbackSystemOne

KEY = "serve-canary-key-5d81e"
TEXT = "canary words of customer {n}: our appliance hums"  # a ticket's text, never in clear
TICKETS = 20


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ticket(number: int) -> dict:
    customer = f"C-{number % 4}"
    return {"customer": {"id": customer, "company": "Canary Ltd"},
            "ticket": {"id": f"T-{number}", "received_on": "2026-10-02", "subject": "Hum",
                       "messages": [{"from": "customer", "text": TEXT.format(n=number)}]}}


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes()
            for path in sorted(folder.rglob("*")) if path.is_file()
            and "__pycache__" not in path.parts and ".venv" not in path.parts}


def test_make_serve_with_a_key_writes_its_encrypted_store_and_nothing_else(tmp_path):
    copy = copy_of_the_collection(tmp_path / "collection")
    for name in ("Makefile", "pyproject.toml", "uv.lock"):
        shutil.copy2(REPO_ROOT / name, copy / name)
    (copy / ".venv").symlink_to(REPO_ROOT / ".venv")
    before = snapshot(copy)
    port = free_port()
    with LoopbackSystemOne({}, answer_with=made_up_answer) as server:
        env = {name: value for name, value in os.environ.items()
               if not name.startswith(("MEMORYBOOK_", "MAKE"))}
        env.update(TYPESAFE_API_KEY=KEY, TYPESAFE_ENDPOINT=server.base_url,
                   MEMORYBOOK_LIVE_IN_CI="1", PORT=str(port), PYTHONPATH=str(copy))
        # -o: .venv is this checkout's, already set up; make must not set it up again
        process = subprocess.Popen(["make", "--no-print-directory", "-o", ".venv/.installed",
                                    "serve"], cwd=copy, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx2.TransportError):
                    if loopback_http().get(f"{url}/customers/C-0/memories",
                                           timeout=1).status_code == 200:
                        break
                assert process.poll() is None and time.monotonic() < deadline, (
                    f"make serve did not answer: {process.poll()}")
                time.sleep(0.1)
            for number in range(TICKETS):
                answer = loopback_http().post(f"{url}/tickets", json=ticket(number), timeout=30)
                assert answer.status_code == 200, answer.text
            kept = sum(len(loopback_http().get(f"{url}/customers/C-{c}/memories", timeout=30)
                           .json()["memories"]) for c in range(4))
            os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: pending gates finish first
            log, _ = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                for child in psutil.Process(process.pid).children(recursive=True):
                    child.kill()
                process.kill()
                process.communicate()
        asked = len(server.requests)
    assert asked == 2 * TICKETS and kept > 0, (
        f"{asked} requests for {TICKETS} tickets (a route and a gate each), {kept} memories kept")
    after = snapshot(copy)
    written = sorted(name for name in after if before.get(name) != after[name])
    store = ".memorybook/memories.sqlite3"  # the default store, in the folder it makes
    assert written == [".memorybook/.gitignore", store, store + ".key", store + ".lock"], (
        f"make serve with a key and no recording asked for wrote {written}: only its store, the "
        f"store's key file, its empty lock file (memorybook/store/lock_file.py) and the "
        f".gitignore that keeps the folder it makes out of git may be written: a live Jev writes "
        f"no recording (choose_mode() in memorybook/jev.py)")
    assert after[store + ".lock"] == b"", "the store's lock file holds something"
    assert after["json_cache/json_cache.json"] == before["json_cache/json_cache.json"]
    for name, content in after.items():
        for secret in (KEY, TEXT.format(n=0)[:20]):
            assert secret.encode() not in content, (
                f"{name} holds {secret!r} in clear: tickets at rest only in the encrypted store")
    assert KEY not in log, "the service's log shows the API key"
