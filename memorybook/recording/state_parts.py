"""What a System One request is about: its ticket, its customer and the memories it carries.

A state names its ticket and customer itself; the gate's state is a memory, whose `request` does.
"""

from __future__ import annotations


def ticket_of(state) -> dict:
    """The ticket a request is about: the state's own, or, for the gate, its request's."""
    return _part_of(state, "ticket")


def customer_of(state) -> dict:
    """The customer a request is about, found the same way as its ticket."""
    return _part_of(state, "customer")


def _part_of(state, name: str) -> dict:
    """The object under `name` in a state, or in the request a gate's state holds; {} if none."""
    state = state if isinstance(state, dict) else {}
    request = state.get("request") if isinstance(state.get("request"), dict) else {}
    found = state.get(name) or request.get(name)
    return found if isinstance(found, dict) else {}


def describe_call(state, questions: dict, *, words: bool = True) -> str:
    """A reader's name for one request: which question, about which ticket (with its subject,
    unless `words` is False: a log's name for it holds ids only), with which memories."""
    ticket, customer = ticket_of(state), customer_of(state)
    memories = memory_ids_in(state)
    with_memories = f", with the memories {', '.join(memories)}" if memories else ""
    subject = f" ({ticket.get('subject', 'no subject')!r})" if words else ""
    return (f"the question{'s' if len(questions) != 1 else ''} {', '.join(map(repr, questions))}"
            f" about ticket {ticket.get('id', '?')}{subject} "
            f"of customer {customer.get('id', '?')}{with_memories}")


def is_memory_list(value) -> bool:
    """Whether a value is a list of saved memories (each a request with Jev's answer)."""
    return (isinstance(value, list) and bool(value)
            and all(isinstance(item, dict) and "request" in item for item in value))


def memory_ticket_ids(memories) -> list[str]:
    """The ticket ids of a list of memories, in order."""
    if not isinstance(memories, list):
        return []
    return [str(ticket_of(memory).get("id", "?")) for memory in memories]


def memory_ids_in(state) -> list[str]:
    """The ticket ids of the memories a state carries, under whatever key."""
    if not isinstance(state, dict):
        return []
    return [ticket_id for value in state.values() if is_memory_list(value)
            for ticket_id in memory_ticket_ids(value)]
