"""A memory and the gate that decides whether to keep it: the official page's technique.

A memory is a request as it arrived (before any memories were added to it, so they never nest)
with the readable part of each of Jev's answers. The gate, one Noul question, reads that pair and
gives P(the request states a lasting fact about the customer); at REMEMBER_AT or above, the
memory is kept under the state's `customer.id`, and every later call for that customer carries
it under MEMORY_KEY. `InMemoryMemories` keeps them for as long as the process runs; a store
(memorybook.store) keeps them encrypted on disk with the same methods.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

from typesafe_sdk import Noul, NoulCriteria, SystemOneResponse

from memorybook.config import REMEMBER_AT
from memorybook.errors import MemorybookError

MEMORY_KEY = "earlier_tickets_from_this_customer"  # where memories go in the state

GATE = {
    "remember": Noul(
        instructions=(
            "In `request.ticket`, does the thread state a lasting fact about the "
            "customer that should change how their future, unrelated tickets are "
            "handled? Count what the customer or our support staff wrote in "
            "`request.ticket`. `jev_answered` shows how the ticket was routed, which "
            "may rely on things learned earlier: do not count anything it says or "
            "implies."
        ),
        criteria=NoulCriteria(
            true=(
                "Yes: in `request.ticket` the customer or our support staff state "
                "something about the customer that stays true after this ticket, such "
                "as the product edition or operating system they run, their plan or "
                "contract, or a standing preference."
            ),
            false=(
                "No: `request.ticket` only contains things specific to this one ticket "
                "or moment, such as a one-off request, today's schedule, or the device "
                "they happen to be typing on; or the lasting fact appears only in "
                "`jev_answered`."
            ),
        ),
    ),
}

Ask = Callable[[dict, dict], SystemOneResponse]  # (state, questions) -> response, as Jev.ask


class StateError(MemorybookError, ValueError):
    """A state ask_with_memory() cannot take: the message says what it lacks or holds."""


class MissingCustomerIdError(StateError):
    """The state has no `customer.id`: there is no customer to file memories under."""


def customer_id(state: dict) -> str:
    """The id of the customer a state is about: its `customer.id`, a non-blank string."""
    customer = state.get("customer") if isinstance(state, dict) else None
    if not (isinstance(customer, dict) and isinstance(customer.get("id"), str)
            and customer["id"].strip()):
        shape = (f"keys {sorted(map(str, state))}" if isinstance(state, dict)
                 else f"a {type(state).__name__}")
        raise MissingCustomerIdError(
            "ask_with_memory() needs the state to name its customer as `customer.id`; "
            f"got {shape}.")
    return customer["id"]


def checked_state(state: object, questions: dict | None = None) -> str:
    """The customer a state is about, once it is one ask_with_memory() can take: a
    `customer.id` and a `ticket.id` (each memory is filed by both), no MEMORY_KEY (the
    customer's memories go there on each call), and what a store keeps as a memory, whatever
    Jev answers to `questions` (as `question_objects()` gives them); StoreInputError
    otherwise. Checked before anything is asked."""
    customer = customer_id(state)
    ticket = state.get("ticket")  # customer_id() has checked that the state is a dict
    ticket_id = ticket.get("id") if isinstance(ticket, dict) else None
    if not (isinstance(ticket_id, str) and ticket_id.strip()):
        found = (f"{ticket_id[:40]!r}, which is blank" if isinstance(ticket_id, str) else
                 "a ticket without one" if isinstance(ticket, dict) else "no ticket")
        raise StateError(
            "ask_with_memory() files each memory under its ticket: the state needs `ticket.id`, "
            f"a non-blank string; got {found}.")
    if MEMORY_KEY in state:
        raise StateError(
            f"`{MEMORY_KEY}` is where ask_with_memory() puts the customer's memories on each "
            "call; leave it out of the state.")
    # A state no store would keep as a memory (not JSON, over 1 MB, nested too deeply) is
    # refused now, as save() would refuse it once both calls had been paid for: its memory is
    # checked with the longest answer each question may get.
    from memorybook.store.validation import checked_memory_json  # loads the store: here

    longest = {question.instructions: _longest_answer(question)
               for question in (questions or {}).values()}
    checked_memory_json(customer, {"request": state, "jev_answered": longest})
    return customer


# A number as long as JSON writes any float: what a Noul's or a Score's answer may take.
_LONGEST_NUMBER = -2.2250738585072014e-308


def _longest_answer(question) -> object:
    """The answer_text() a question may give that is longest as the store writes it (JSON with
    ASCII escapes). An option whose description JSON cannot hold (an asset) is left out: a
    memory that chose it could never be kept, whatever its state."""
    criteria = getattr(question, "criteria", None)
    if question.type != "choice" or not isinstance(criteria, dict):
        return _LONGEST_NUMBER
    longest, size = None, -1
    for description in criteria.values():
        try:
            written = len(json.dumps(description, allow_nan=False))
        except (TypeError, ValueError):
            continue
        if written > size:
            longest, size = description, written
    return longest


def checked_remember_at(remember_at: float) -> float:
    """The gate's threshold, once it is a probability: a number from 0 to 1."""
    if isinstance(remember_at, bool) or not isinstance(remember_at, (int, float)) or not (
            0 <= remember_at <= 1):
        raise StateError(
            "remember_at is the gate's probability from which a memory is kept: a number from 0 "
            f"to 1, got {str(remember_at)[:40]!r}.")
    return remember_at


def answer_text(question, answer):
    """What an answer says in words: the chosen option's description, or the value."""
    if answer.type == "choice":
        return question.criteria[answer.choice]
    return answer.noul if answer.type == "noul" else answer.score


def as_memory(state: dict, questions: dict, response: SystemOneResponse) -> dict:
    """The request as it arrived, with Jev's answer to each of its questions."""
    answered = {
        question.instructions: answer_text(question, response.answers[question_id])
        for question_id, question in questions.items()
    }
    return {"request": state, "jev_answered": answered}


def remember_probability(memory: dict, ask: Ask) -> float:
    """P(the request states a lasting fact about the customer), given Jev's answer: the gate."""
    return ask(memory, GATE).answers["remember"].noul


def worth_keeping(probability: float, remember_at: float = REMEMBER_AT) -> bool:
    """The gate's verdict: keep a memory whose probability reaches `remember_at`."""
    return probability >= remember_at


def state_with_memories(state: dict, memories: list[dict]) -> dict:
    """The state as Jev receives it: these memories under MEMORY_KEY; unchanged with none."""
    return {**state, MEMORY_KEY: memories} if memories else state


def as_first_asked(memories: list[dict], state: dict, questions: dict) -> list[dict]:
    """The memories (oldest first, as recalled) that this call was first asked with, when one
    of them records it, the same state asked the same questions (it is a retry of a call whose
    gate kept it): those saved before that one. Otherwise all of them. `questions` as
    `question_objects()` gives them."""
    asked = {question.instructions for question in questions.values()}
    for index, memory in enumerate(memories):
        if memory.get("request") == state and set(memory.get("jev_answered", ())) == asked:
            return memories[:index]
    return memories


def ticket_id_of(memory: dict) -> str:
    """The id of the ticket a memory was made from."""
    return memory["request"]["ticket"]["id"]


class InMemoryMemories:
    """Each customer's memories, oldest first, for as long as the process runs: the page's dict
    of lists behind the methods a store has (memorybook.store), so either can be passed. Ids and
    memories a store refuses, it refuses with the same errors (StoreInputError,
    MemoryNotFoundError), so that a test on it fails where the store would."""

    WHERE = "these in-process memories (InMemoryMemories)"  # where forget() says it looked

    def __init__(self) -> None:
        self.by_customer: dict[str, list[dict]] = {}

    def recall(self, customer_id: str) -> list[dict]:
        """The customer's memories, oldest first: copies, as a store's are, so that changing
        one changes nothing kept."""
        return copy.deepcopy(self.by_customer.get(_checked(customer_id), []))

    def recall_ticket(self, customer_id: str, ticket_id: str) -> list[dict]:
        """The customer's memories of one ticket, oldest first ([] for none)."""
        from memorybook.store.validation import checked_ticket_id

        ticket_id = checked_ticket_id(ticket_id)
        return [memory for memory in self.recall(customer_id)
                if ticket_id_of(memory) == ticket_id]

    def save(self, customer_id: str, memory: dict) -> list[dict]:
        """Keep a copy of one more memory, checked as a store checks it; return those evicted to
        make room (none: there is no cap)."""
        from memorybook.store.validation import checked_memory_json

        _, text = checked_memory_json(_checked(customer_id), memory)
        self.by_customer.setdefault(customer_id, []).append(json.loads(text))
        return []

    def forget(self, customer_id: str, ticket_id: str) -> list[dict]:
        """Erase the memories of one ticket and return them; MemoryNotFoundError (a KeyError) if
        there are none."""
        from memorybook.store.validation import checked_ticket_id, memory_not_found

        saved = self.by_customer.get(_checked(customer_id), [])
        ticket_id = checked_ticket_id(ticket_id)
        erased = [memory for memory in saved if ticket_id_of(memory) == ticket_id]
        if not erased:
            raise memory_not_found(customer_id, ticket_id, self.WHERE)
        self.by_customer[customer_id] = [m for m in saved if m not in erased]
        return erased

    def forget_customer(self, customer_id: str) -> list[dict]:
        """Erase all of one customer's memories; return them, oldest first."""
        return self.by_customer.pop(_checked(customer_id), [])


def _checked(customer_id: object) -> str:
    """The customer id, checked as a store checks it (StoreInputError)."""
    # here, not above: importing this module loads no store (cryptography, sqlite3)
    from memorybook.store.validation import checked_customer_id

    return checked_customer_id(customer_id)
