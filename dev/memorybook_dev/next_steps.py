"""The official page's next steps, built and measured in notebook 7: send only the relevant
memories, replace an outdated memory, remember the app's reply, and pick the gate's threshold
from labelled examples.

Their questions (RELEVANT, SUPERSEDES) were never asked in the official run: their answers go to
a recording of their own, json_cache/next_steps.json beside the collection's (never into it),
recorded with a key and replayed without one (`next_steps_jev()`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cooksafe import make_playground_link
from typesafe_sdk import Noul, NoulCriteria, SystemOneResponse

from memorybook.config import (
    REMEMBER_AT,
    TYPESAFE_MODEL,
    recording_path,
    replay_only_reason,
    shown_path,
)
from memorybook.example import ROUTE
from memorybook.jev import Jev, made_once
from memorybook.memory import (
    GATE,
    as_memory,
    customer_id,
    state_with_memories,
    ticket_id_of,
    worth_keeping,
)
from memorybook.settings import Settings


def next_steps_recording(settings: Settings | None = None) -> Path:
    """The next steps' own recording, next_steps.json beside the recording in use (by default
    the environment's), never the official file."""
    return recording_path(settings).with_name("next_steps.json")


@made_once
def next_steps_jev() -> Jev:
    """The Jev the next steps ask: on next_steps.json, recorded into with a key and replayed
    without one; made at its first use, from the settings the environment holds then."""
    settings = Settings.from_environment()
    return Jev(next_steps_recording(settings), settings=settings)


def ask_next_step(state: dict, questions: dict) -> SystemOneResponse:
    """ask(), but recorded into next_steps.json: live with a key, never in the official file."""
    return next_steps_jev().ask(state, questions)


def playground_link(state: dict, questions: dict) -> str:
    """A link that opens exactly this request in the TypeSafe playground, on the
    pinned model."""
    return make_playground_link(state, questions, models=[TYPESAFE_MODEL])


def requests_markdown(requests: list[tuple[dict, dict]], labels: list[str]) -> str:
    """One playground link per request, as a Markdown list."""
    links = [
        f"- [{label}]({playground_link(state, questions)})"
        for label, (state, questions) in zip(labels, requests, strict=True)
    ]
    return "\n".join(links)


def answers_note(settings: Settings | None = None) -> str:
    """Whether the next steps' answers can be shown here (by default with the environment's
    settings), and where they would come from."""
    settings = settings or Settings.from_environment()
    reason = replay_only_reason(settings)
    if reason is None:
        source = settings.endpoint or "the TypeSafe API"
        recorded_into = shown_path(next_steps_recording(settings))
        return f"Live: answers from {source}, recorded into {recorded_into}."
    return (f"Not asked ({reason}), and not in the recording: the links above open these "
            "requests in the playground.")


RELEVANT = {
    "relevant": Noul(
        instructions=(
            "Would knowing `saved_memory.request.ticket` change how `ticket` should be "
            "handled? `saved_memory` is an earlier ticket from the same customer."
        ),
        criteria=NoulCriteria(
            true=(
                "Yes: the earlier ticket states something about the customer, "
                "such as their edition, operating system, plan or contract, "
                "that bears on this ticket."
            ),
            false=(
                "No: nothing in the earlier ticket bears on how this ticket is handled."
            ),
        ),
    ),
}
RELEVANT_AT = 0.5  # send a memory when P(relevant) reaches this
SEND_ALL_UP_TO = 1  # with this many memories or fewer, send them all without asking


def relevance_requests(state: dict, memories: list[dict]) -> list[tuple[dict, dict]]:
    """One request per saved memory: this ticket, that memory, the relevance
    question."""
    if len(memories) <= SEND_ALL_UP_TO:
        return []
    return [
        ({"ticket": state["ticket"], "saved_memory": memory}, RELEVANT)
        for memory in memories
    ]


def relevant_memories(
    state: dict, memories: list[dict], ask: Callable = ask_next_step
) -> list[dict]:
    """The memories Jev judges relevant to this ticket; all of them when there
    are few."""
    requests = relevance_requests(state, memories)
    if not requests:
        return memories
    return [
        memory
        for memory, request in zip(memories, requests, strict=True)
        if ask(*request).answers["relevant"].noul >= RELEVANT_AT
    ]


def ask_with_relevant_memory(
    state: dict, questions: dict, memories, ask: Callable = ask_next_step
) -> SystemOneResponse:
    """ask_with_memory(), sending only the saved memories relevant to this ticket."""
    saved = relevant_memories(state, memories.recall(customer_id(state)), ask)
    response = ask(state_with_memories(state, saved), questions)
    memory = as_memory(state, questions, response)
    if worth_keeping(ask(memory, GATE).answers["remember"].noul):
        memories.save(customer_id(state), memory)
    return response


SUPERSEDES = {
    "supersedes": Noul(
        instructions=(
            "Does `new_memory.request.ticket` replace a fact about the customer that "
            "`old_memory.request.ticket` states, so that the old fact is no longer "
            "true?"
        ),
        criteria=NoulCriteria(
            true=(
                "Yes: the new ticket changes something the old one stated, "
                "such as a new edition, operating system, plan or contract "
                "in place of the old one."
            ),
            false=(
                "No: the old ticket's facts still hold; "
                "the new ticket adds to them or is about something else."
            ),
        ),
    ),
}
SUPERSEDED_AT = 0.5  # forget the old memory when P(superseded) reaches this


def supersede_requests(new: dict, saved: list[dict]) -> list[tuple[dict, dict]]:
    """One request per saved memory: does the new memory replace it?"""
    return [({"new_memory": new, "old_memory": old}, SUPERSEDES) for old in saved]


def save_replacing(
    store, customer: str, memory: dict, ask: Callable = ask_next_step
) -> list[dict]:
    """Save a memory and forget the saved ones it supersedes; return what was forgotten.

    `store` needs `forget(customer_id, ticket_id)`: the in-kernel memories and the
    stores have it. A store's `supersede()` forgets too, and its history says so.
    The new memory is saved first: if the store refuses it, every saved memory stays.
    """
    drop = getattr(store, "supersede", store.forget)
    saved = store.recall(customer)
    requests = supersede_requests(memory, saved)
    replaced = dict.fromkeys(
        ticket_id_of(old)
        for old, request in zip(saved, requests, strict=True)
        if ask(*request).answers["supersedes"].noul >= SUPERSEDED_AT
    )
    store.save(customer, memory)
    forgotten = [old for ticket in replaced for old in drop(customer, ticket)]
    if ticket_id_of(memory) in replaced:  # drop() took the new memory too: same id
        forgotten.remove(memory)
        store.save(customer, memory)
    return forgotten


def routing_reply(response: SystemOneResponse, memories_sent: list[dict]) -> str:
    """What the example app tells the customer once a ticket is routed: the team,
    unless the route may rest on a memory the routing request carried."""
    if memories_sent:
        return ("Thanks for your message. "
                "It is now with the right team, who will reply here.")
    team = ROUTE["team"].criteria[response.answers["team"].choice].split(":")[0]
    return f"Thanks for your message. It is now with our {team}, who will reply here."


def with_reply(state: dict, reply: str) -> dict:
    """The state with the app's reply added to the ticket thread, as a support
    message."""
    ticket = state["ticket"]
    thread = [*ticket["messages"], {"from": "support", "text": reply}]
    return {**state, "ticket": {**ticket, "messages": thread}}


def gate_request_with_reply(
    state: dict,
    questions: dict,
    response: SystemOneResponse,
    memories_sent: list[dict],
    reply: Callable = routing_reply,
) -> tuple[dict, dict]:
    """The gate's request when the thread holds the app's reply: the memory it
    would save."""
    thread = with_reply(state, reply(response, memories_sent))
    return as_memory(thread, questions, response), GATE


def ask_remembering_replies(
    state: dict,
    questions: dict,
    memories,
    reply: Callable = routing_reply,
    ask: Callable = ask_next_step,
) -> SystemOneResponse:
    """ask_with_memory(), where the gate judges the thread with the app's reply
    in it."""
    saved = memories.recall(customer_id(state))
    response = ask(state_with_memories(state, saved), questions)
    memory, gate = gate_request_with_reply(state, questions, response, saved, reply)
    if worth_keeping(ask(memory, gate).answers["remember"].noul):
        memories.save(customer_id(state), memory)
    return response


MISLEADING_COST = 2.0  # assumed: a memory that should not be there misroutes the rest
MISSING_COST = 1.0  # a memory that is missing leaves plain Jev's answer


def errors(threshold: float, pairs: list[tuple[float, bool]]) -> tuple[int, int]:
    """(misleading, missing): kept though not worth keeping, and worth keeping but
    not kept."""
    misleading = sum(p >= threshold and not keep for p, keep in pairs)
    missing = sum(p < threshold and keep for p, keep in pairs)
    return misleading, missing


def pick_threshold(
    pairs: list[tuple[float, bool]],
    misleading_cost: float = MISLEADING_COST,
    missing_cost: float = MISSING_COST,
    in_use: float = REMEMBER_AT,
) -> float:
    """The threshold with the lowest cost on labelled (probability, worth keeping)
    pairs.

    Candidates are 0, 1 and the midpoints between neighbouring probabilities; of equally
    cheap ones, the closest to `in_use` (the threshold in use) wins, so the threshold moves only
    when the data says so.
    """
    ps = sorted({p for p, _ in pairs})
    midpoints = (round((a + b) / 2, 4) for a, b in zip(ps, ps[1:], strict=False))
    candidates = sorted({0.0, 1.0, *midpoints})

    def cost(t: float) -> float:
        misleading, missing = errors(t, pairs)
        return misleading * misleading_cost + missing * missing_cost

    return min(candidates, key=lambda t: (cost(t), abs(t - in_use), t))


def held_out_check(pairs: list[tuple[float, bool]], **costs: float) -> list[dict]:
    """Leave one out: pick a threshold on the other pairs, then judge the one left
    out with it."""
    rows = []
    for i, (p, keep) in enumerate(pairs):
        threshold = pick_threshold(pairs[:i] + pairs[i + 1 :], **costs)
        right = (p >= threshold) == keep
        rows.append({"p": p, "keep": keep, "threshold": threshold, "right": right})
    return rows
