"""The router's tests: no key needed. The official page's tickets through the router over HTTP,
answered by the router's own recording; and a unit test on made-up answers."""

from __future__ import annotations

from pathlib import Path

import pytest
from app import create_router
from fastapi.testclient import TestClient

from memorybook import MadeUpJev
from memorybook.example import DATA

RECORDING = Path(__file__).parent / "recording.json"
# What the recording answers for each later message, plainly and with memory (the figures the
# official page publishes): (team, probability).
ANSWERS = {
    ("C-1042", "Slow dashboards"): (("cloud_ops", 0.55), ("selfhosted_windows", 0.98)),
    ("C-1042", "Upgrade failing"): (("none_suitable", 0.64), ("selfhosted_windows", 1.00)),
    ("C-1042", "More seats"): (("enterprise_desk", 0.53), ("enterprise_desk", 1.00)),
    ("C-2210", "Slow dashboards"): (("cloud_ops", 0.68), ("cloud_ops", 0.98)),
    ("C-2210", "Upgrade failing"): (("none_suitable", 0.58), ("cloud_ops", 0.95)),
    ("C-2210", "More seats"): (("billing", 0.58), ("billing", 0.98)),
}


def ticket(customer: str, ticket_id: str, received_on: str, subject: str, text: str) -> dict:
    company = DATA["customers"].get(customer, {}).get("company", "Example Ltd")
    return {"customer_id": customer, "company": company, "ticket_id": ticket_id,
            "received_on": received_on, "subject": subject, "text": text}


def later_tickets() -> list[dict]:
    """Each customer's three later messages, under the page's ticket ids T-201 to T-206."""
    messages = DATA["later_messages"]
    return [ticket(customer, f"T-{201 + len(messages) * number + index}",
                   DATA["later_received_on"], message["subject"], message["text"])
            for number, customer in enumerate(DATA["customers"])
            for index, message in enumerate(messages)]


@pytest.fixture
def router(jev, tmp_path):
    with TestClient(create_router(f"sqlite:///{tmp_path / 'router.sqlite3'}", jev=jev)) as http:
        yield http


def routed(http, body: dict, memory: bool = True) -> tuple[str, float]:
    answer = http.post("/tickets", json=body, params={"memory": memory})
    assert answer.status_code == 200, (
        f"ticket {body['ticket_id']} was answered {answer.status_code}: {answer.json()}")
    return answer.json()["team"], answer.json()["probability"]


def test_the_official_tickets_go_to_3_of_6_teams_plainly_and_6_of_6_with_memory(router):
    for earlier in DATA["earlier_tickets"]:
        routed(router, ticket(earlier["customer_id"], earlier["id"], earlier["received_on"],
                              earlier["subject"], earlier["text"]))
    right = {"plain": 0, "memory": 0}
    for body in later_tickets():
        where = (body["customer_id"], body["subject"])
        expected_team = DATA["expected_team"][where[0]][where[1]]
        for way, memory, recorded in zip(("plain", "memory"), (False, True), ANSWERS[where],
                                         strict=True):
            answer = routed(router, body, memory)
            assert answer == recorded, (
                f"{RECORDING.name}: ticket {body['ticket_id']} ({', '.join(where)}) was routed "
                f"{'with memory' if memory else 'plainly'} to {answer}, not {recorded}: an "
                f"answer in the recording changed, or the request the router sends did.")
            right[way] += answer[0] == expected_team
    assert (right["plain"], right["memory"]) == (3, 6), (
        f"expected routes {right['plain']}/6 plainly and {right['memory']}/6 with memory, "
        f"not 3/6 and 6/6: check {RECORDING.name}")
    remembered = {customer: router.get(f"/customers/{customer}/memories").json()
                  for customer in DATA["customers"]}
    assert remembered == {"C-1042": ["T-101", "T-105"], "C-2210": ["T-102"]}, (
        f"the gate kept {remembered}: a gate answer in {RECORDING.name} changed")


def test_a_ticket_the_recording_lacks_is_a_503_saying_how_to_record_it(router, jev):
    if jev.mode != "replay":
        pytest.skip("recording: a ticket the recording lacks is asked live")
    body = ticket("C-1042", "T-999", "2026-10-01", "Backups", "Our nightly backups stopped.")
    answer = router.post("/tickets", json=body)
    assert answer.status_code == 503, f"a call the recording lacks got {answer.status_code}"
    how = answer.json()["detail"]["how_to_record"]
    assert RECORDING.name in how and "MEMORYBOOK_RECORD_MODE=record" in how, (
        f"the 503 must name the router's recording and how to record into it, not: {how}")


def test_a_stated_platform_is_remembered_and_routes_the_next_ticket(tmp_path):
    def made_up(state: dict, questions: dict) -> dict:  # the test's own answers, not Jev's
        if "remember" in questions:
            return {"remember": 0.9 if "Linux" in str(state["request"]) else 0.1}
        return {"team": "selfhosted_linux" if "Linux" in str(state) else "general"}

    stand_in = MadeUpJev(made_up)
    store = f"sqlite:///{tmp_path / 'unit.sqlite3'}"
    with TestClient(create_router(store, jev=stand_in)) as http:
        routed(http, ticket("C-7", "T-1", "2026-10-01", "Users", "We run Linux. Add a user?"))
        assert routed(http, ticket("C-7", "T-2", "2026-10-02", "Backups", "Backups fail.")) == (
            "selfhosted_linux", 1.0), "the remembered platform did not reach the next ticket"
        assert http.get("/customers/C-7/memories").json() == ["T-1"]
