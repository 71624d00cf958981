"""Notebook 8's estimate: real request sizes, one token rule fitted to the published total."""

from __future__ import annotations

import json

import pytest

from memorybook.config import PROVENANCE_PATH, RECORDING_PATH, TYPESAFE_MODEL
from memorybook.recording import cache_key, read_recording


@pytest.fixture(scope="module")
def cost():
    from memorybook.example import ROUTE, ask, later_state
    from memorybook.memory import GATE, InMemoryMemories, as_memory
    from memorybook_dev import memory_cost
    from memorybook_dev.experiments import remember_earlier_tickets, with_memories

    memories = InMemoryMemories()
    remember_earlier_tickets(memories)
    examples = [*memories.recall("C-1042"), *memories.recall("C-2210")]
    slow = later_state("C-1042", 0)
    gate = (as_memory(slow, ROUTE, ask(with_memories(slow, memories), ROUTE)), GATE)
    requests = memory_cost.collection_requests()
    return memory_cost, examples, slow, gate, requests


def test_the_rule_is_fitted_on_exactly_the_recorded_requests_and_the_published_total(cost):
    memory_cost, _, _, _, requests = cost
    published = json.loads(PROVENANCE_PATH.read_text(encoding="utf-8"))["published_totals"]
    assert memory_cost.REPORTED_INPUT_TOKENS == published["input_tokens"] == 21_456, (
        "REPORTED_INPUT_TOKENS in dev/memorybook_dev/memory_cost.py must be provenance.json's "
        "published input tokens, 21,456")
    keys = [cache_key(TYPESAFE_MODEL, state, questions) for state, questions in requests]
    assert len(keys) == 31 and set(keys) == set(read_recording(RECORDING_PATH)), (
        "collection_requests() in dev/memorybook_dev/memory_cost.py must give the 31 requests the "
        f"recording answers, no more, no fewer; it gave {len(keys)}")
    total = sum(len(s.encode()) + len(q.encode()) for s, q in requests)
    assert memory_cost.fit_tokens_per_byte(requests) * total == pytest.approx(21_456), (
        "fit_tokens_per_byte() in dev/memorybook_dev/memory_cost.py must spread the published "
        "total over the requests' bytes")


def test_each_memory_adds_its_own_json_to_the_routing_request_only(cost):
    memory_cost, examples, slow, gate, _ = cost
    memories = memory_cost.shaped_like(examples, 4, "C-1042")
    shaped = [m["request"]["ticket"]["id"] for m in memories]
    assert shaped == ["T-301", "T-302", "T-303", "T-304"], (
        "shaped_like() in dev/memorybook_dev/memory_cost.py must number its tickets T-301 on: "
        f"{shaped}")
    assert {m["request"]["customer"]["id"] for m in memories} == {"C-1042"}, (
        "shaped_like() must file every memory under the customer it is given")
    grown = memory_cost.wrapped_call_bytes(slow, memories, gate)
    smaller = memory_cost.wrapped_call_bytes(slow, memories[:3], gate)
    assert grown - smaller == len(json.dumps(memories[3]).encode()) + len(", "), (
        "wrapped_call_bytes() in dev/memorybook_dev/memory_cost.py must grow by one memory's "
        "JSON (and its separator) in the routing request, and not at all in the gate's")


def test_selecting_counts_one_relevance_request_per_memory_and_pays_where_it_says(cost):
    memory_cost, examples, slow, gate, _ = cost
    from memorybook_dev.next_steps import relevance_requests

    one = memory_cost.shaped_like(examples, 1, "C-1042")
    assert memory_cost.selecting_call_bytes(slow, one, gate) == \
        (0, memory_cost.wrapped_call_bytes(slow, one, gate)), (
        "with one memory, selecting_call_bytes() in dev/memorybook_dev/memory_cost.py must ask no "
        "relevance request and send the whole call")
    ten = memory_cost.shaped_like(examples, 10, "C-1042")
    relevance, selected = memory_cost.selecting_call_bytes(slow, ten, gate)
    asked = relevance_requests(slow, ten)
    assert len(asked) == 10, f"one relevance request per memory, not {len(asked)}"
    assert relevance == sum(memory_cost.request_bytes(*request) for request in asked), (
        "selecting_call_bytes() must count exactly the relevance requests next_steps builds")
    assert selected == memory_cost.wrapped_call_bytes(slow, ten[:2], gate), (
        "selecting_call_bytes() must send KEPT_WHEN_SELECTING (2) memories once selected")
    everything = memory_cost.wrapped_call_bytes(slow, ten, gate)
    calls = memory_cost.calls_to_pay(slow, ten, gate)
    assert relevance + calls * selected < calls * everything, (
        f"calls_to_pay() = {calls} calls do not repay the relevance requests ({relevance} bytes): "
        "fix calls_to_pay in dev/memorybook_dev/memory_cost.py")
    assert relevance + (calls - 1) * selected >= (calls - 1) * everything, (
        f"{calls - 1} calls would already repay them: calls_to_pay() in "
        "dev/memorybook_dev/memory_cost.py must give the fewest")
