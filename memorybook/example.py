"""The official page's example: two customers, their tickets, the question that routes them.

What the collection's notebooks, tests and tools run, and what an app can try the library on:
the recording answers every call the page makes with these inputs, byte for byte the official
ones (changing one character of a ticket or of ROUTE's wording makes a call the recording lacks).

    from memorybook.example import EARLIER, ROUTE, later_state, ask

`ask`/`ask_async` ask the example's Jev (`example_jev()`): the collection's recording
($MEMORYBOOK_RECORDING, else json_cache/json_cache.json), replayed without a key and recorded
into with one, as the notebooks always have.
"""

from __future__ import annotations

from typing import Any

from typesafe_sdk import Choice, SystemOneResponse

from memorybook.config import recording_path
from memorybook.jev import Jev, made_once

DATA: dict[str, Any] = {  # the page's, as it writes it
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
CUSTOMERS: dict[str, dict[str, str]] = DATA["customers"]


def ticket_state(customer_id: str, ticket_id: str, received_on: str, subject: str,
                 text: str) -> dict:
    """The state Jev reads for one ticket: the customer, then a one-message thread. A state of
    its own: changing it changes neither CUSTOMERS nor any other state."""
    thread = [{"from": "customer", "text": text}]
    ticket = {"id": ticket_id, "received_on": received_on, "subject": subject,
              "messages": thread}
    return {"customer": dict(CUSTOMERS[customer_id]), "ticket": ticket}


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


EXPECTED_TEAM: dict[str, dict[str, str]] = DATA["expected_team"]  # customer -> subject -> team


@made_once
def example_jev() -> Jev:
    """The Jev of the official example: the collection's recording ($MEMORYBOOK_RECORDING, else
    json_cache/json_cache.json) asked for, so replay without a key and record with one. Made at
    its first use, from the environment as it is then."""
    return Jev(recording_path())


def ask(state: dict, questions: dict) -> SystemOneResponse:
    """The example's Jev's `ask()`: the official page's ask(), on the collection's recording."""
    return example_jev().ask(state, questions)


async def ask_async(state: dict, questions: dict) -> SystemOneResponse:
    """`ask()`, awaited."""
    return await example_jev().ask_async(state, questions)
