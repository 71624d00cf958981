"""The example app (examples/ticket_router/): its recording holds the collection's answers and
nothing else, recording it again, as an app records its own, gives the same file, and it serves
a SQLite store alone, as the service does."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

from memorybook.config import RECORDING_PATH
from memorybook.recording import describe_call, recorded_requests
from tests.helpers import REPO_ROOT, serving_alone_noted, serving_alone_refused
from tools.loopback_server import LoopbackSystemOne

APP = REPO_ROOT / "examples" / "ticket_router"


def test_the_example_apps_recording_holds_only_answers_the_collections_recording_holds():
    app = json.loads((APP / "recording.json").read_text(encoding="utf-8"))
    collection = json.loads(RECORDING_PATH.read_text(encoding="utf-8"))
    requests = recorded_requests()
    for key, answer in app.items():
        request = requests.get(key)
        call = (describe_call(request["state"], request["questions"]) if request
                else f"the call filed under {key[:16]}...")
        assert collection.get(key) == answer, (
            f"examples/ticket_router/recording.json answers {call} otherwise than "
            f"json_cache/json_cache.json (or the collection never made that call): no Jev answer "
            f"can be had here, so the example app's answers are the collection's; record it again "
            f"as its README says")


def test_recording_the_example_app_again_gives_its_committed_recording(tmp_path):
    copy = tmp_path / "ticket_router"
    shutil.copytree(APP, copy, ignore=shutil.ignore_patterns("recording.json*", "__pycache__"))
    with LoopbackSystemOne(RECORDING_PATH) as server:  # the collection's answers, on loopback
        env = {**os.environ, "TYPESAFE_API_KEY": "loopback", "TYPESAFE_ENDPOINT": server.base_url,
               "MEMORYBOOK_LIVE_IN_CI": "1", "MEMORYBOOK_RECORD_MODE": "record"}
        env.pop("MEMORYBOOK_RECORDING", None)
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "-p", "no:xdist", "-o", "addopts=", "--rootdir", str(copy),
                               str(copy)], cwd=copy, env=env, capture_output=True, text=True,
                              timeout=300)
    assert done.returncode == 0, f"the example app's tests, recording, failed:\n{done.stdout}"
    again = json.loads((copy / "recording.json").read_text(encoding="utf-8"))
    committed = json.loads((APP / "recording.json").read_text(encoding="utf-8"))
    assert again == committed, (
        f"recording the example app again gives {len(again)} answers, not the committed "
        f"{len(committed)} (or other ones): record examples/ticket_router/recording.json again "
        f"as its README says")


def test_the_example_app_serves_its_sqlite_store_alone_and_will_not_start_beside_another(
        tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    from memorybook import MadeUpJev
    from memorybook.store import MemoryStoreError

    spec = importlib.util.spec_from_file_location("ticket_router_app", APP / "app.py")
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)

    def router():
        jev = MadeUpJev(lambda state, questions: {"team": "general"})
        return TestClient(app.create_router(f"sqlite:///{tmp_path / 'router.sqlite3'}", jev=jev))

    held = serving_alone_noted(monkeypatch)
    with router():
        assert held == ["held"]
    assert held == ["held", "given back"], (
        "examples/ticket_router/app.py must hold its SQLite store's serving_alone() while it "
        f"serves, as an app must: customers' turns hold within one process only: {held}")

    serving_alone_refused(monkeypatch)
    with pytest.raises(MemoryStoreError, match="Another process serves"), router():
        pass
