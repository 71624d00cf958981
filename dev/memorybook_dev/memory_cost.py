"""What memory costs: the input bytes of a wrapped call as a customer's memories grow, and the
input cost, estimated from the recording's requests and the official run's reported tokens
(notebook 8)."""
import json

from memorybook.config import input_cost_usd
from memorybook.example import CUSTOMERS, ROUTE
from memorybook.jev import request_json
from memorybook.memory import state_with_memories
from memorybook.recording import recorded_requests
from memorybook_dev.next_steps import relevance_requests

REPORTED_INPUT_TOKENS = (
    21_456  # the official run's 31 calls, as a published tutorial reports
)
KEPT_WHEN_SELECTING = 2  # assumed: like C-1042, two memories bear on a ticket


def request_bytes(state: dict, questions: dict) -> int:
    """The size of a request: its state and questions JSON, exactly as ask() writes
    them."""
    return sum(len(text.encode()) for text in request_json(state, questions))


def collection_requests() -> list[tuple[str, str]]:
    """The state and questions JSON of each recorded call, as the request behind it was
    sent."""
    return [
        (json.dumps(request["state"]), json.dumps(request["questions"]))
        for request in recorded_requests().values()
    ]


def fit_tokens_per_byte(requests: list[tuple[str, str]]) -> float:
    """The estimate's one rule: the reported input tokens over the bytes those requests
    hold."""
    return REPORTED_INPUT_TOKENS / sum(
        len(s.encode()) + len(q.encode()) for s, q in requests
    )


def shaped_like(examples: list[dict], n: int, customer: str) -> list[dict]:
    """n memories of one customer: the example memories in turn, each under its own
    ticket id."""
    memories = []
    for i in range(n):
        example = examples[i % len(examples)]
        ticket = {**example["request"]["ticket"], "id": f"T-{301 + i}"}
        request = {
            **example["request"],
            "customer": CUSTOMERS[customer],
            "ticket": ticket,
        }
        memories.append({"request": request, "jev_answered": example["jev_answered"]})
    return memories


def wrapped_call_bytes(
    state: dict, memories: list[dict], gate: tuple[dict, dict]
) -> int:
    """One wrapped call: routing with these memories, then the gate's request."""
    routed = state_with_memories(state, memories)
    return request_bytes(routed, ROUTE) + request_bytes(*gate)


def selecting_call_bytes(
    state: dict,
    memories: list[dict],
    gate: tuple[dict, dict],
    selected: int = KEPT_WHEN_SELECTING,
) -> tuple[int, int]:
    """(relevance requests, the wrapped call with the memories selected): the selecting
    variant."""
    requests = relevance_requests(state, memories)
    sent = memories[:selected] if requests else memories
    return sum(request_bytes(*r) for r in requests), wrapped_call_bytes(
        state, sent, gate
    )


def calls_to_pay(
    state: dict, memories: list[dict], gate: tuple[dict, dict]
) -> int | None:
    """How many calls about one ticket must share one selection before selecting costs
    less."""
    relevance, selected = selecting_call_bytes(state, memories, gate)
    saving = wrapped_call_bytes(state, memories, gate) - selected
    return relevance // saving + 1 if saving > 0 else None


def usd_per_1000_calls(n_bytes: float, tokens_per_byte: float) -> float:
    """Estimated input cost of 1,000 calls of this size (output tokens are free)."""
    return input_cost_usd(1000 * n_bytes * tokens_per_byte)
