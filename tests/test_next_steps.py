"""Notebook 7's next steps (dev/memorybook_dev/next_steps.py): their logic, live against a loopback
server, and their links.

The loopback server here gives SYNTHETIC answers by one fixed rule, so that a test decides what
"Jev" says; they are never Jev's, never recorded anywhere but a scratch folder, and never reach a
notebook:

- a Noul question answers P(yes) = 0.99 when the request's state JSON holds the text
  `SYNTHETIC-YES:<question id>`, and 0.01 otherwise;
- a Choice question picks its first option, with probability 1.0;
- the model is `loopback-synthetic`.
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from memorybook.config import RECORDING_PATH, TYPESAFE_MODEL
from memorybook.example import EARLIER, ROUTE, later_state
from memorybook.memory import InMemoryMemories, ticket_id_of
from memorybook.recording import memory_ids_in
from memorybook.store import MAX_MEMORY_BYTES, open_store
from memorybook_dev import next_steps
from tests import helpers
from tests.helpers import (
    COMMITTED_RECORDING,
    LINK,
    REPO_ROOT,
    decode,
    markdown_outputs,
    notebook,
    stdout_text,
)
from tools.loopback_server import LoopbackSystemOne

SYNTHETIC_MODEL = "loopback-synthetic"
T = TypeVar("T")


def synthetic_answer(body: dict) -> dict:
    """The rule in the module docstring: obviously synthetic, decided by markers in the state."""
    state = json.dumps(body["state"])
    answers = {}
    for question_id, question in body["questions"].items():
        if question["type"] == "choice":
            options = list(question["criteria"])
            probabilities = {option: 1.0 if i == 0 else 0.0 for i, option in enumerate(options)}
            answers[question_id] = {"type": "choice", "choice": options[0], "confidence": 1.0,
                                    "probabilities": probabilities}
        else:
            yes = f"SYNTHETIC-YES:{question_id}" in state
            answers[question_id] = {"type": "noul", "noul": 0.99 if yes else 0.01}
    return {"model": SYNTHETIC_MODEL, "usage": {}, "answers": answers}


@pytest.fixture
def server():
    with LoopbackSystemOne({}, answer_with=synthetic_answer) as running:
        yield running


def live_env(base_url: str, recording: Path) -> dict[str, str]:
    return helpers.live_env(base_url, None, "dummy", recording)  # notebook 7 has no store


def memory_like(index: int, ticket: str, text: str) -> dict:
    """A memory of earlier ticket `index`, renamed `ticket`, its first message now `text`."""
    request = copy.deepcopy(EARLIER[index])
    request["ticket"]["id"] = ticket
    request["ticket"]["messages"][0]["text"] = text
    return {"request": request, "jev_answered": {"Which support team?": "a team"}}


def run_live(server: LoopbackSystemOne, tmp_path: Path, monkeypatch,
             steps_used: Callable[..., T]) -> T:
    """Call `steps_used` with notebook 7's steps, live against the server; the official recording
    is a scratch copy, and only the next steps' own file is written."""
    recordings = tmp_path / "recordings"
    recordings.mkdir()
    official = recordings / "json_cache.json"
    shutil.copyfile(RECORDING_PATH, official)
    helpers.live_jev(monkeypatch, server.base_url, "dummy", official)  # next_steps_jev() anew
    assert next_steps.next_steps_recording() == recordings / "next_steps.json", (
        "the next steps' recording must be next_steps.json beside the recording the settings "
        "name when it is first used, not when the module was imported "
        "(dev/memorybook_dev/next_steps.py)")
    result = steps_used(next_steps)
    assert official.read_bytes() == COMMITTED_RECORDING, "the official recording was written"
    assert RECORDING_PATH.read_bytes() == COMMITTED_RECORDING
    written = sorted(p.name for p in recordings.iterdir() if not p.name.endswith(".lock"))
    assert written == ["json_cache.json", "next_steps.json"], written
    return result


def posted(server: LoopbackSystemOne) -> list[dict]:
    return [r["body"] for r in server.requests if r["path"] == "/v1/systemone"]


def test_selecting_sends_only_the_memories_judged_relevant(server, tmp_path, monkeypatch):
    def select(steps):
        memories = InMemoryMemories()
        for ticket, text in [("T-1", "SYNTHETIC-YES:relevant"), ("T-2", "nothing"),
                             ("T-3", "again SYNTHETIC-YES:relevant")]:
            memories.save("C-1042", memory_like(0, ticket, text))
        steps.ask_with_relevant_memory(later_state("C-1042", 0), ROUTE, memories=memories)
        return len(json.loads(steps.next_steps_recording().read_text(encoding="utf-8")))

    recorded = run_live(server, tmp_path, monkeypatch, select)
    bodies = posted(server)
    relevance = [b for b in bodies if list(b["questions"]) == ["relevant"]]
    routing, = [b for b in bodies if list(b["questions"]) == ["team"]]
    assert [b["state"]["saved_memory"]["request"]["ticket"]["id"] for b in relevance] == \
        ["T-1", "T-2", "T-3"]
    assert memory_ids_in(routing["state"]) == ["T-1", "T-3"]
    assert recorded == len(bodies) == 5  # 3 relevance, routing, gate


def test_with_few_memories_all_are_sent_without_asking(server, tmp_path, monkeypatch):
    def select(steps):
        memories = InMemoryMemories()
        memories.save("C-1042", memory_like(0, "T-1", "not marked"))
        steps.ask_with_relevant_memory(later_state("C-1042", 0), ROUTE, memories=memories)

    run_live(server, tmp_path, monkeypatch, select)
    bodies = posted(server)
    assert [list(b["questions"]) for b in bodies] == [["team"], ["remember"]]
    assert memory_ids_in(bodies[0]["state"]) == ["T-1"]


def test_a_superseded_memory_is_forgotten_through_the_store(server, tmp_path, monkeypatch):
    def supersede(steps):
        with open_store(f"sqlite:///{tmp_path / 'store' / 'm.db'}") as store:
            store.save("C-1042", memory_like(0, "T-1", "old fact SYNTHETIC-YES:supersedes"))
            store.save("C-1042", memory_like(0, "T-2", "a fact that still holds"))
            forgotten = steps.save_replacing(store, "C-1042",
                                             memory_like(4, "T-3", "the new fact"))
            return ([ticket_id_of(m) for m in forgotten],
                    [ticket_id_of(m) for m in store.recall("C-1042")],
                    [(e.event, e.ticket_id) for e in store.history("C-1042")])

    forgotten, kept, history = run_live(server, tmp_path, monkeypatch, supersede)
    assert (forgotten, kept) == (["T-1"], ["T-2", "T-3"])
    assert history == [("saved", "T-1"), ("saved", "T-2"), ("saved", "T-3"),
                       ("superseded", "T-1")], (
        "save_replacing() must drop a superseded memory with the store's supersede() "
        "(notebook 7), so that history() says why it went")
    assert [b["state"]["old_memory"]["request"]["ticket"]["id"] for b in posted(server)] == \
        ["T-1", "T-2"]


def test_a_memory_the_store_refuses_costs_no_saved_memory(server, tmp_path, monkeypatch):
    def texts(memories: list[dict]) -> list[str]:
        return [m["request"]["ticket"]["messages"][0]["text"] for m in memories]

    def refuse_then_replace(steps):
        with open_store(f"sqlite:///{tmp_path / 'store' / 'm.db'}") as store:
            store.save("C-1042", memory_like(0, "T-1", "old fact SYNTHETIC-YES:supersedes"))
            too_large = memory_like(4, "T-3", "x" * MAX_MEMORY_BYTES)
            with pytest.raises(ValueError) as refused:
                steps.save_replacing(store, "C-1042", too_large)
            kept_after_refusal = [ticket_id_of(m) for m in store.recall("C-1042")]
            same_ticket = steps.save_replacing(store, "C-1042",
                                               memory_like(4, "T-1", "the new fact"))
            return (str(refused.value), kept_after_refusal, texts(same_ticket),
                    texts(store.recall("C-1042")))

    refused, kept_after_refusal, same_ticket_forgotten, same_ticket_kept = run_live(
        server, tmp_path, monkeypatch, refuse_then_replace)
    assert "a memory may hold at most" in refused
    assert kept_after_refusal == ["T-1"]
    assert same_ticket_forgotten == ["old fact SYNTHETIC-YES:supersedes"]
    assert same_ticket_kept == ["the new fact"]


def test_the_gate_reads_the_apps_reply_in_the_thread(server, tmp_path, monkeypatch):
    def reply(response, memories_sent):
        return f"Routed to {response.answers['team'].choice} SYNTHETIC-YES:remember"

    def remember_replies(steps):
        memories = InMemoryMemories()
        steps.ask_remembering_replies(later_state("C-1042", 0), ROUTE, reply=reply,
                                      memories=memories)
        return [m["request"]["ticket"]["messages"] for m in memories.recall("C-1042")]

    saved = run_live(server, tmp_path, monkeypatch, remember_replies)
    routing, gate = posted(server)
    assert list(routing["questions"]) == ["team"] and list(gate["questions"]) == ["remember"]
    reply_message = {"from": "support", "text": "Routed to cloud_ops SYNTHETIC-YES:remember"}
    assert gate["state"]["request"]["ticket"]["messages"][-1] == reply_message
    assert routing["state"]["ticket"]["messages"][-1]["from"] == "customer"  # reply after routing
    assert saved == [gate["state"]["request"]["ticket"]["messages"]]


def test_the_apps_reply_names_the_team_only_when_no_memory_could_have_chosen_it():
    from typesafe_sdk import SystemOneResponse

    from memorybook_dev.next_steps import routing_reply

    routed = SystemOneResponse.model_validate({
        "model": TYPESAFE_MODEL, "usage": {},
        "answers": {"team": {"type": "choice", "choice": "selfhosted_windows", "confidence": 0.9,
                             "probabilities": {"selfhosted_windows": 0.92, "general": 0.08}}}})
    assert "Self-hosted team, Windows" in routing_reply(routed, [])
    a_memory = {"request": EARLIER[0], "jev_answered": {}}
    assert "Windows" not in routing_reply(routed, [a_memory])
    assert "team" in routing_reply(routed, [a_memory])


def test_the_threshold_follows_the_stated_costs_and_is_checked_on_held_out_pairs():
    from memorybook_dev.next_steps import errors, held_out_check, pick_threshold

    pairs = [(0.2, False), (0.4, True), (0.6, False), (0.8, True)]
    # Candidates 0, 0.3, 0.5, 0.7, 1. At 0.3 one misleading memory (0.6); at 0.7 one missing (0.4).
    assert pick_threshold(pairs, misleading_cost=3.0, missing_cost=1.0) == 0.7
    assert pick_threshold(pairs, misleading_cost=1.0, missing_cost=3.0) == 0.3
    assert errors(0.7, pairs) == (0, 1) and errors(0.3, pairs) == (1, 0)
    overlapping = [(0.1, False), (0.3, False), (0.8, True), (0.9, True), (0.85, False)]
    rows = held_out_check(overlapping)  # misleading costs 2, missing 1
    # 0.85 (not worth keeping) sits among those worth keeping, so each of the three is misjudged
    # when left out: without 0.8 the pick is 0.875 (above 0.85), which misses 0.8; without 0.9 it
    # is 1.0, which misses 0.9; without 0.85 it is 0.55, which keeps 0.85.
    assert [row["right"] for row in rows] == [True, True, False, False, False]
    assert [row["threshold"] for row in rows[2:]] == [0.875, 1.0, 0.55]


def test_the_notebooks_links_open_exactly_the_requests_the_steps_build():
    from memorybook.example import DATA, ask
    from memorybook.jev import request_json
    from memorybook.wrapper import ask_with_memory
    from memorybook_dev.experiments import remember_earlier_tickets
    from memorybook_dev.next_steps import (
        gate_request_with_reply,
        relevance_requests,
        supersede_requests,
    )

    memories = InMemoryMemories()
    remember_earlier_tickets(memories)
    c1042 = memories.recall("C-1042")
    expected = [r for i in range(len(DATA["later_messages"]))
                for r in relevance_requests(later_state("C-1042", i), c1042)]
    expected += supersede_requests(c1042[1], c1042[:1])
    memories = InMemoryMemories()
    for state in EARLIER:
        sent = memories.recall(state["customer"]["id"])
        response = ask_with_memory(state, ROUTE, memories, ask=ask)
        expected.append(gate_request_with_reply(state, ROUTE, response, sent))
    links = [url for text in markdown_outputs(notebook("07")) for _, url in LINK.findall(text)]
    assert len(links) == len(expected) == 12
    for url, request in zip(links, expected, strict=True):
        state, questions, share = decode(url)
        state_json, questions_json = request_json(*request)
        assert (state, questions) == (json.loads(state_json), json.loads(questions_json))
        assert json.dumps(state) == state_json and json.dumps(questions) == questions_json
        assert share["selectedModels"] == [TYPESAFE_MODEL] and share["apiVersion"] == "v1"


def test_notebook_7_names_in_its_metadata_the_recording_it_records_into():
    from memorybook.settings import Settings
    from memorybook_dev.next_steps import next_steps_recording

    said = notebook("07")["metadata"]["memorybook"]["records_into"]
    assert said == next_steps_recording(Settings()).relative_to(REPO_ROOT).as_posix()


def test_the_notebook_shows_no_next_step_answer_and_says_so():
    text = stdout_text(notebook("07"))
    assert text.count("Not asked (TYPESAFE_API_KEY is not set), and not in the recording") == 3
    assert "Live:" not in text and "SYNTHETIC" not in text and SYNTHETIC_MODEL not in text


def test_a_live_run_of_the_notebook_writes_only_the_next_steps_file(server, tmp_path,
                                                                    monkeypatch):
    from tools.execute import execute

    official = tmp_path / "json_cache.json"
    shutil.copyfile(RECORDING_PATH, official)
    for name, value in live_env(server.base_url, official).items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "07_next_steps.ipynb"
    shutil.copyfile(REPO_ROOT / "notebooks" / "07_next_steps.ipynb", path)
    run = execute(path)
    text = "".join("".join(o.get("text", "")) for c in run.cells for o in c.get("outputs", []))
    assert official.read_bytes() == RECORDING_PATH.read_bytes() == COMMITTED_RECORDING
    assert not (RECORDING_PATH.parent / "next_steps.json").exists()
    recorded = json.loads((tmp_path / "next_steps.json").read_text(encoding="utf-8"))
    assert {entry["model"] for entry in recorded.values()} == {SYNTHETIC_MODEL}
    assert len(recorded) == len(posted(server)) > 0
    assert text.count("Live: answers from http://127.0.0.1:") == 3
    assert "forgotten: none; kept: T-101, T-105" in text
