"""Generated from notebooks/01_memory_system.ipynb by `python -m tools.export`.

Edit the notebook's cells tagged `pattern` or `export`, not this file."""
# ruff: noqa: E402, I001, F401

__all__ = [
    "TYPESAFE_MODEL", "REMEMBER_AT", "MEMORY_KEY", "client", "json_cache", "DATA", "CUSTOMERS",
    "ticket_state", "EARLIER", "later_state", "ROUTE", "NotInCacheError", "request_json", "ask",
    "answer_text", "as_memory", "GATE", "remember_probability", "worth_keeping", "ticket_id_of",
    "InMemoryMemories", "MEMORIES", "MissingCustomerIdError", "customer_id", "state_with_memories",
    "with_memories", "ask_with_memory", "PROBES", "describe_memories", "forget_customers",
    "remember_earlier_tickets", "send_probes", "probe_experiment", "EXPECTED_TEAM", "marked",
    "reconcile",
]


# notebooks/01_memory_system.ipynb, cell 2
# pattern: the settings
import json
import os
from pathlib import Path

from cooksafe import JsonCache, make_playground_link
from typesafe_sdk import Choice, Noul, NoulCriteria, SystemOneResponse, TypeSafeClient

TYPESAFE_MODEL = "jev-1.14.0"  # pinned: the threshold below was tuned on this version
REMEMBER_AT = 0.5  # save a ticket once P(lasting fact about the customer) reaches this
MEMORY_KEY = "earlier_tickets_from_this_customer"  # where memories go in the state


# notebooks/01_memory_system.ipynb, cell 4
# The collection's client and cache, in place of the app's (tools/export.py says why). Both are
# made at their first use: importing this module opens no file and starts no client.
from memorybook.recording import open_recording
from memorybook.transport import ClientOnFirstUse

client = ClientOnFirstUse()
json_cache = open_recording()  # $MEMORYBOOK_RECORDING, else the committed file


# notebooks/01_memory_system.ipynb, cell 6
DATA = {
    "customers": {
        "C-1042": {"id": "C-1042", "company": "Acme Corp"},
        "C-2210": {"id": "C-2210", "company": "Example Studio"},
    },
    "earlier_tickets": [
        {"id": "T-101", "customer_id": "C-1042", "received_on": "2026-08-04",
         "subject": "Adding an admin",
         "text": "Hi, we run your self-hosted edition on Windows Server 2022 in our "
                 "own data centre. How do I add a new admin user?"},
        {"id": "T-102", "customer_id": "C-2210", "received_on": "2026-08-11",
         "subject": "Exporting to PDF",
         "text": "We're a small design studio on your cloud edition, paying monthly on "
                 "the self-serve Team plan. How do I export a dashboard as a PDF?"},
        {"id": "T-103", "customer_id": "C-1042", "received_on": "2026-08-19",
         "subject": "Invoice download",
         "text": "Sorry for the typos, typing this on my phone at the airport. Where "
                 "can I download last month's invoice?"},
        {"id": "T-104", "customer_id": "C-2210", "received_on": "2026-09-02",
         "subject": "Dark mode?",
         "text": "Our whole team is out on Friday for a public holiday, so no rush on "
                 "this one. Is there a dark mode?"},
        {"id": "T-105", "customer_id": "C-1042", "received_on": "2026-09-10",
         "subject": "Sandbox environment",
         "text": "For context, we signed an Enterprise contract with you in March. Can "
                 "we get a sandbox environment for testing?"},
    ],
    "later_messages": [
        {"subject": "Slow dashboards",
         "text": "Dashboards have been really slow since this morning."},
        {"subject": "Upgrade failing",
         "text": "The upgrade to version 5.2 keeps failing halfway through."},
        {"subject": "More seats",
         "text": "We'd like to add 20 more seats before next quarter."},
    ],
    "later_received_on": "2026-09-28",
    # The team a person would pick, labelled by hand from the customer's earlier tickets
    "expected_team": {
        "C-1042": {"Slow dashboards": "selfhosted_windows",
                   "Upgrade failing": "selfhosted_windows",
                   "More seats": "enterprise_desk"},
        "C-2210": {"Slow dashboards": "cloud_ops", "Upgrade failing": "cloud_ops",
                   "More seats": "billing"},
    },
}
CUSTOMERS = DATA["customers"]


def ticket_state(customer_id: str, ticket_id: str, received_on: str, subject: str,
                 text: str) -> dict:
    """The state Jev reads for one ticket: the customer, then a one-message thread."""
    thread = [{"from": "customer", "text": text}]
    ticket = {"id": ticket_id, "received_on": received_on, "subject": subject,
              "messages": thread}
    return {"customer": CUSTOMERS[customer_id], "ticket": ticket}


EARLIER = [
    ticket_state(t["customer_id"], t["id"], t["received_on"], t["subject"], t["text"])
    for t in DATA["earlier_tickets"]
]


def later_state(customer_id: str, message_index: int) -> dict:
    """A later message from this customer, under a fixed ticket id: T-201 to T-203 for
    the first customer, T-204 to T-206 for the second."""
    messages = DATA["later_messages"]
    number = 201 + len(messages) * list(CUSTOMERS).index(customer_id) + message_index
    message = messages[message_index]
    return ticket_state(customer_id, f"T-{number}", DATA["later_received_on"],
                        message["subject"], message["text"])


# notebooks/01_memory_system.ipynb, cell 10
# pattern: the question that routes a ticket
ROUTE = {
    "team": Choice(
        instructions="Which support team should handle `ticket`?",
        criteria={
            "cloud_ops": "Cloud team: problems with the hosted cloud edition, "
            "run by us",
            "selfhosted_linux": "Self-hosted team, Linux: installs, upgrades and "
            "performance of the self-hosted edition on Linux servers",
            "selfhosted_windows": "Self-hosted team, Windows: installs, upgrades and "
            "performance of the self-hosted edition on Windows Server",
            "billing": "Billing: invoices, payments, seats and plan changes for "
            "self-serve plans",
            "enterprise_desk": "Enterprise desk: seats, contracts and account changes "
            "for customers on an Enterprise contract (their technical problems go to "
            "the technical teams)",
            "general": "General product questions: features, how-to, settings",
            "none_suitable": "None of these teams fits the ticket",
        },
    ),
}


# notebooks/01_memory_system.ipynb, cell 12
# pattern: ask(), cached
class NotInCacheError(LookupError):
    """The cache has no answer to a call, and there is no key to ask Jev with."""


@json_cache
def _system_one(model: str, state: str, questions: str) -> dict:
    """One System One request; the cache calls it only for answers it does not hold."""
    if client is None:  # say why it most likely missed, and link to the call
        link = make_playground_link(
            json.loads(state), json.loads(questions), models=[model]
        )
        raise NotInCacheError(
            f"{json_cache.path} has no answer to this call and TYPESAFE_API_KEY is not "
            "set, so nothing was sent. Likely cause: its ticket, question or memories "
            "differ from every cached call's (an edit, or a new ticket). Set the key "
            "to ask Jev and save the answer there, or open the call in the "
            f"playground: {link}"
        )
    response = client.system_one(
        state=json.loads(state), questions=json.loads(questions), model=model
    )
    json_cache.path.parent.mkdir(parents=True, exist_ok=True)  # the cache saves it next
    return response.model_dump(mode="json")


def request_json(state: dict, questions: dict) -> tuple[str, str]:
    """The exact JSON text of a request's state and questions: what the cache files."""
    questions_json = {
        question_id: question.model_dump(mode="json", exclude_none=True)
        for question_id, question in questions.items()
    }
    return json.dumps(state), json.dumps(questions_json)


def ask(state: dict, questions: dict) -> SystemOneResponse:
    """client.system_one with the model pinned and every call cached."""
    answer = _system_one(TYPESAFE_MODEL, *request_json(state, questions))
    return SystemOneResponse.model_validate(answer)


# notebooks/01_memory_system.ipynb, cell 16
# pattern: a memory, and the gate that decides whether to keep it
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


def remember_probability(memory: dict) -> float:
    """P(the request states a lasting fact about the customer), given Jev's answer."""
    return ask(memory, GATE).answers["remember"].noul


def worth_keeping(probability: float) -> bool:
    """The gate's verdict, read against REMEMBER_AT as it is at the time of the call."""
    return probability >= REMEMBER_AT


# notebooks/01_memory_system.ipynb, cell 18
# pattern: each customer's memories, for as long as the process runs
def ticket_id_of(memory: dict) -> str:
    """The id of the ticket a memory was made from."""
    return memory["request"]["ticket"]["id"]


class InMemoryMemories:
    """Each customer's saved memories, oldest first."""

    def __init__(self) -> None:
        self.by_customer: dict[str, list[dict]] = {}

    def recall(self, customer_id: str) -> list[dict]:
        return list(self.by_customer.get(customer_id, []))

    def save(self, customer_id: str, memory: dict) -> list[dict]:
        """Keep one more memory; return those evicted to make room (none: no cap)."""
        self.by_customer.setdefault(customer_id, []).append(memory)
        return []

    def forget(self, customer_id: str, ticket_id: str) -> list[dict]:
        """Erase the memories of one ticket and return them; KeyError if none."""
        saved = self.by_customer.get(customer_id, [])
        erased = [memory for memory in saved if ticket_id_of(memory) == ticket_id]
        if not erased:
            raise KeyError(f"customer {customer_id} has no memory of ticket "
                           f"{ticket_id}")
        self.by_customer[customer_id] = [m for m in saved if m not in erased]
        return erased

    def forget_customer(self, customer_id: str) -> list[dict]:
        """Erase all of one customer's memories; return them, oldest first."""
        return self.by_customer.pop(customer_id, [])


MEMORIES = InMemoryMemories()


# notebooks/01_memory_system.ipynb, cell 20
# pattern: ask_with_memory()
class MissingCustomerIdError(ValueError):
    """The state has no `customer.id`: there is no customer to file memories under."""


def customer_id(state: dict) -> str:
    """The id of the customer a state is about."""
    customer = state.get("customer") if isinstance(state, dict) else None
    if not (isinstance(customer, dict) and isinstance(customer.get("id"), str)
            and customer["id"]):
        shape = (f"keys {sorted(state)}" if isinstance(state, dict)
                 else f"a {type(state).__name__}")
        raise MissingCustomerIdError(
            "ask_with_memory() needs the state to name its customer as `customer.id`; "
            f"got {shape}."
        )
    return customer["id"]


def state_with_memories(state: dict, memories: list[dict]) -> dict:
    """The state with these memories under MEMORY_KEY; unchanged when there are none."""
    return {**state, MEMORY_KEY: memories} if memories else state


def with_memories(state: dict, memories=MEMORIES) -> dict:
    """The state as Jev receives it: with the customer's memories, if they have any."""
    return state_with_memories(state, memories.recall(customer_id(state)))


def ask_with_memory(state: dict, questions: dict,
                    memories=MEMORIES) -> SystemOneResponse:
    """ask(), plus memory: the same arguments and the same return value. `memories` is
    where they are kept: MEMORIES, unless a store is passed."""
    response = ask(with_memories(state, memories), questions)
    memory = as_memory(state, questions, response)
    if worth_keeping(remember_probability(memory)):
        memories.save(customer_id(state), memory)
    return response


# notebooks/01_memory_system.ipynb, cell 22
PROBES = {"Slow dashboards": 0, "More seats": 2}  # sent after each earlier ticket


def describe_memories(customer: str, memories=MEMORIES) -> str:
    """The ticket ids of a customer's memories, oldest first, as text."""
    return ", ".join(map(ticket_id_of, memories.recall(customer))) or "none"


def forget_customers(customers, memories=MEMORIES) -> None:
    """Erase these customers' memories, so that what follows starts from none."""
    for customer in customers:
        memories.forget_customer(customer)


def remember_earlier_tickets(memories=MEMORIES) -> None:
    """From no memories, the five earlier tickets through the wrapper, oldest first: the
    memories the probe experiment ends with, without its probes."""
    forget_customers(CUSTOMERS, memories)
    for state in EARLIER:
        ask_with_memory(state, ROUTE, memories)


def send_probes(customer: str, step: str, memories=MEMORIES) -> list[dict]:
    """Send one customer's probes through the wrapper; print and return the answers."""
    answers = []
    for subject, message_index in PROBES.items():
        state = later_state(customer, message_index)
        team = ask_with_memory(state, ROUTE, memories).answers["team"]
        probability = team.probabilities[team.choice]
        print(f"      {subject:<16} -> {team.choice:<19} {probability:.2f}")
        answers.append({"customer": customer, "step": step, "message": subject,
                        "team": team.choice, "probability": probability})
    return answers


def probe_experiment(customers=tuple(CUSTOMERS), memories=MEMORIES) -> list[dict]:
    """Each earlier ticket through the wrapper, in order, with both probes before and
    after it; return every probe's answer. Each customer's calls depend only on their
    own tickets, so `customers` can pick some."""
    forget_customers(customers, memories)
    answers = []
    for customer in customers:
        print(f"{customer}, memories: {describe_memories(customer, memories)}")
        answers += send_probes(customer, "start", memories)
    for state in EARLIER:
        customer, ticket = customer_id(state), state["ticket"]
        if customer not in customers:
            continue
        response = ask_with_memory(state, ROUTE, memories)
        p = remember_probability(as_memory(state, ROUTE, response))  # cached already
        verdict = "saved" if worth_keeping(p) else "not saved"
        print(f"\n{customer} {ticket['id']}  {response.answers['team'].choice:<19} "
              f"P(remember) {p:.2f}  {verdict}")
        print(f"    {ticket['messages'][0]['text'][:84]}")
        print(f"{customer}, memories: {describe_memories(customer, memories)}")
        answers += send_probes(customer, f"{ticket['id']} {verdict}", memories)
    return answers


# notebooks/01_memory_system.ipynb, cell 26
EXPECTED_TEAM = DATA["expected_team"]  # customer id -> message subject -> team


def marked(answer, expected: str) -> str:
    """A tick or a cross, the chosen team and the probability Jev gave it."""
    mark = "✓" if answer.choice == expected else "✗"
    return f"{mark} {answer.choice} {answer.probabilities[answer.choice]:.2f}"


def reconcile(customers=tuple(CUSTOMERS), memories=MEMORIES) -> list[dict]:
    """Route each later message plainly and with memory; print the comparison and the
    totals, and return its rows."""
    rows = []
    print(f"{'customer':<9}{'message':<17}{'expected':<20}{'plain Jev':<27}"
          f"{'with memory':<27}")
    for customer in customers:
        for index, message in enumerate(DATA["later_messages"]):
            state = later_state(customer, index)
            expected = EXPECTED_TEAM[customer][message["subject"]]
            plain = ask(state, ROUTE).answers["team"]
            remembered = ask_with_memory(state, ROUTE, memories).answers["team"]
            print(f"{customer:<9}{message['subject']:<17}{expected:<20}"
                  f"{marked(plain, expected):<27}{marked(remembered, expected):<27}")
            rows.append({"customer": customer, "message": message["subject"],
                         "expected": expected, "plain": plain, "memory": remembered})
    plain_right = sum(row["plain"].choice == row["expected"] for row in rows)
    memory_right = sum(row["memory"].choice == row["expected"] for row in rows)
    print(f"\nExpected routes: {plain_right}/{len(rows)} without memory, "
          f"{memory_right}/{len(rows)} with memory.")
    return rows
