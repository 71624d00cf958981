"""The official page's two experiments, on the example (memorybook.example), printed as the page
prints them: each memory moving the answers (the probes), and six messages routed with and
without memory (the comparison, 3 of 6 then 6 of 6).

Every function takes the memories it works on and, as `ask`, what asks Jev: by default the
example's Jev on the collection's recording. A customer's calls depend only on their own tickets,
so `customers` can pick some.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from typesafe_sdk import SystemOneResponse

from memorybook.config import REMEMBER_AT
from memorybook.example import CUSTOMERS, DATA, EARLIER, EXPECTED_TEAM, ROUTE, later_state
from memorybook.example import ask as example_ask
from memorybook.example import ask_async as example_ask_async
from memorybook.memory import (
    Ask,
    as_memory,
    customer_id,
    remember_probability,
    state_with_memories,
    ticket_id_of,
    worth_keeping,
)
from memorybook.wrapper import ask_with_memory

PROBES = {"Slow dashboards": 0, "More seats": 2}  # later messages sent after each earlier ticket


def describe_memories(customer: str, memories) -> str:
    """The ticket ids of a customer's memories, oldest first, as text."""
    return ", ".join(map(ticket_id_of, memories.recall(customer))) or "none"


def with_memories(state: dict, memories) -> dict:
    """The state as the wrapper would send it now: with its customer's memories, if any."""
    return state_with_memories(state, memories.recall(customer_id(state)))


def forget_customers(customers, memories) -> None:
    """Erase these customers' memories, so that what follows starts from none."""
    for customer in customers:
        memories.forget_customer(customer)


def remember_earlier_tickets(memories, *, ask: Ask = example_ask,
                             remember_at: float = REMEMBER_AT) -> None:
    """From no memories, the five earlier tickets through the wrapper, oldest first: the
    memories the probe experiment ends with, without its probes."""
    forget_customers(CUSTOMERS, memories)
    for state in EARLIER:
        ask_with_memory(state, ROUTE, memories, ask=ask, remember_at=remember_at)


def send_probes(customer: str, step: str, memories, *, ask: Ask = example_ask,
                remember_at: float = REMEMBER_AT) -> list[dict]:
    """Send one customer's probes through the wrapper; print and return the answers."""
    answers = []
    for subject, message_index in PROBES.items():
        state = later_state(customer, message_index)
        team = ask_with_memory(state, ROUTE, memories, ask=ask,
                               remember_at=remember_at).answers["team"]
        probability = team.probabilities[team.choice]
        print(f"      {subject:<16} -> {team.choice:<19} {probability:.2f}")
        answers.append({"customer": customer, "step": step, "message": subject,
                        "team": team.choice, "probability": probability})
    return answers


def probe_experiment(memories, customers=tuple(CUSTOMERS), *, ask: Ask = example_ask,
                     remember_at: float = REMEMBER_AT) -> list[dict]:
    """Each earlier ticket through the wrapper, in order, with both probes before and after it;
    print the page's probe table and return every probe's answer."""
    forget_customers(customers, memories)
    asked = {"ask": ask, "remember_at": remember_at}
    answers = []
    for customer in customers:
        print(f"{customer}, memories: {describe_memories(customer, memories)}")
        answers += send_probes(customer, "start", memories, **asked)
    for state in EARLIER:
        customer, ticket = customer_id(state), state["ticket"]
        if customer not in customers:
            continue
        response = ask_with_memory(state, ROUTE, memories, **asked)
        p = remember_probability(as_memory(state, ROUTE, response), ask)  # asked already: cached
        verdict = "saved" if worth_keeping(p, remember_at) else "not saved"
        print(f"\n{customer} {ticket['id']}  {response.answers['team'].choice:<19} "
              f"P(remember) {p:.2f}  {verdict}")
        print(f"    {ticket['messages'][0]['text'][:84]}")
        print(f"{customer}, memories: {describe_memories(customer, memories)}")
        answers += send_probes(customer, f"{ticket['id']} {verdict}", memories, **asked)
    return answers


def marked(answer, expected: str) -> str:
    """A tick or a cross, the chosen team and the probability Jev gave it."""
    mark = "✓" if answer.choice == expected else "✗"
    return f"{mark} {answer.choice} {answer.probabilities[answer.choice]:.2f}"


def later_states(customers) -> list[dict]:
    """Each customer's three later messages, in order."""
    return [later_state(customer, index) for customer in customers
            for index in range(len(DATA["later_messages"]))]


def print_comparison(states: list[dict], plain: list[SystemOneResponse],
                     remembered: list[SystemOneResponse]) -> list[dict]:
    """Print the page's comparison of the later messages, plainly routed and with memory, and
    its totals; return its rows."""
    print(f"{'customer':<9}{'message':<17}{'expected':<20}{'plain Jev':<27}{'with memory':<27}")
    rows = []
    for state, without, with_memory in zip(states, plain, remembered, strict=True):
        customer, subject = customer_id(state), state["ticket"]["subject"]
        row = {"customer": customer, "message": subject,
               "expected": EXPECTED_TEAM[customer][subject],
               "plain": without.answers["team"], "memory": with_memory.answers["team"]}
        print(f"{customer:<9}{subject:<17}{row['expected']:<20}"
              f"{marked(row['plain'], row['expected']):<27}"
              f"{marked(row['memory'], row['expected']):<27}")
        rows.append(row)
    plain_right = sum(row["plain"].choice == row["expected"] for row in rows)
    memory_right = sum(row["memory"].choice == row["expected"] for row in rows)
    print(f"\nExpected routes: {plain_right}/{len(rows)} without memory, "
          f"{memory_right}/{len(rows)} with memory.")
    return rows


def reconcile(memories, customers=tuple(CUSTOMERS), *, ask: Ask = example_ask,
              remember_at: float = REMEMBER_AT) -> list[dict]:
    """Route each later message plainly and with memory, in the page's order; print the
    comparison and the totals, and return its rows."""
    states, plain, remembered = later_states(customers), [], []
    for state in states:
        plain.append(ask(state, ROUTE))
        remembered.append(ask_with_memory(state, ROUTE, memories, ask=ask,
                                          remember_at=remember_at))
    return print_comparison(states, plain, remembered)


async def in_order_per_customer(route: Callable[[dict], Awaitable], states) -> list:
    """Await `route(state)` for each state: one customer's in order, customers at once.
    Returns the answers in the order of `states`."""
    queues: dict[str, list] = {}
    for position, state in enumerate(states):
        queues.setdefault(customer_id(state), []).append((position, state))

    async def one_customer(queue):
        return [(position, await route(state)) for position, state in queue]

    answered = await asyncio.gather(*map(one_customer, queues.values()))
    return [answer for _, answer in sorted(pair for done in answered for pair in done)]


async def reconcile_async(route: Callable[[dict], Awaitable[SystemOneResponse]],
                          customers=tuple(CUSTOMERS), *,
                          ask_plain: Callable[[dict, dict], Awaitable[SystemOneResponse]]
                          = example_ask_async) -> list[dict]:
    """reconcile() with memory through `route(state)` (the async wrapper, or a service), after
    the five earlier tickets through it: each customer's in order, customers at once. The plain
    answers come from `ask_plain` (the example's Jev by default). Prints the comparison."""
    await in_order_per_customer(route, [s for s in EARLIER if customer_id(s) in customers])
    states = later_states(customers)
    plain = await asyncio.gather(*(ask_plain(state, ROUTE) for state in states))
    remembered = await in_order_per_customer(route, states)
    return print_comparison(states, plain, remembered)
