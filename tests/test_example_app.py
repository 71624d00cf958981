"""The example app (examples/ticket_router/): its recording holds the collection's answers and
nothing else, recording it again, as an app records its own, gives the same file; it serves a
SQLite store alone, as the service does; and run as processes, on SQLite and as two replicas on
PostgreSQL, live against loopback APIs, a process killed with gates pending loses none of them
once it is up again."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from memorybook.config import RECORDING_PATH
from memorybook.recording import describe_call, recorded_requests
from tests.helpers import (
    REPO_ROOT,
    MadeUpAnswers,
    loopback_http,
    pending_records,
    services,
    serving_alone_noted,
    serving_alone_refused,
    twenty_customers_tickets,
    wait_until,
)
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


def as_the_routers(ticket: dict) -> dict:
    """A ticket's state as the router's POST /tickets takes it (its Ticket model)."""
    [message] = ticket["ticket"]["messages"]
    return {"customer_id": ticket["customer"]["id"], "company": ticket["customer"]["company"],
            "ticket_id": ticket["ticket"]["id"], "received_on": ticket["ticket"]["received_on"],
            "subject": ticket["ticket"]["subject"], "text": message["text"]}


@pytest.mark.parametrize("backend_name", ["sqlite", "postgresql"])
def test_a_router_killed_with_gates_pending_saves_each_memory_once_when_it_is_up_again(
        tmp_path, monkeypatch, backend_name):
    from memorybook.store import open_store
    from tests.store.conftest import fresh_location

    tickets = twenty_customers_tickets()
    hanging, answering = MadeUpAnswers(hang=True), MadeUpAnswers(hang=False)
    router = {"app": "app:create_router", "folder": APP, "probe": "/customers/C-0/memories"}
    # Two replicas on PostgreSQL, a customer's calls in order across them; SQLite takes one.
    replicas = 2 if backend_name == "postgresql" else 1
    with (fresh_location(backend_name, tmp_path, monkeypatch) as backend,
          LoopbackSystemOne({}, answer_with=hanging) as hangs,
          LoopbackSystemOne({}, answer_with=answering) as answers):
        # Room for all 20 gates in flight at once (the cap keeps one slot for replies).
        env = {"MEMORYBOOK_STORE_KEY": backend.key, "MEMORYBOOK_MAX_IN_FLIGHT": "32", **router}
        try:
            with services(replicas, backend.url, hangs.base_url, tmp_path, **env) as running:
                for number, ticket in enumerate(tickets):
                    _, url = running[number % replicas]
                    routed = loopback_http().post(f"{url}/tickets", json=as_the_routers(ticket),
                                                  timeout=30)
                    assert routed.status_code == 200, routed.text
                wait_until(lambda: hanging.gates == 20, 30, "20 gates pending")
                killed, _ = running[0]
                killed.send_signal(signal.SIGKILL)
                killed.wait(30)
                hanging.release.set()  # the other replica's gates end; the killed one's are left
                with services(1, backend.url, answers.base_url, tmp_path, **env):
                    with open_store(backend.url, key=backend.key) as store:
                        wait_until(lambda: all(store.recall(t["customer"]["id"]) for t in tickets),
                                   60, "every customer's memory after the restart (the router's "
                                   "AsyncMemory, memorybook/serving.py, runs the gates a killed "
                                   "process left as it starts)")
        finally:
            hanging.release.set()
        left = 20 // replicas  # the killed router's gates, asked again once it was up
        assert answering.gates + hanging.gates - 20 == left, (
            f"{left} gates were pending in the killed router, and were asked "
            f"{answering.gates + hanging.gates - 20} times after: AsyncMemory (memorybook/"
            "serving.py) must run a killed process's gates once it is up again, each once")
        with open_store(backend.url, key=backend.key) as store:
            for ticket in tickets:
                customer, ticket_id = ticket["customer"]["id"], ticket["ticket"]["id"]
                saved = [memory["request"]["ticket"]["id"] for memory in store.recall(customer)]
                events = [event.event for event in store.history(customer)]
                assert saved == [ticket_id] and events == ["saved"], (
                    f"customer {customer} ends with memories {saved} and history {events}, not "
                    f"one memory of {ticket_id} saved once: the router's AsyncMemory must run "
                    "each pending gate once, the killed process's after its restart")
        assert pending_records(backend) == [], "a gate that has run must leave no record"
