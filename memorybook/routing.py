"""Generated from notebooks/01_plain_routing.ipynb by `python -m tools.export`.

Edit the notebook's cells tagged `pattern` or `export`, not this file."""

__all__ = [
    "TYPESAFE_MODEL", "client", "json_cache", "DATA", "CUSTOMERS", "ticket_state", "EARLIER",
    "later_state", "ROUTE", "request_json", "ask",
]


# pattern: the client, and a cache of every answer
import json
import os
from pathlib import Path

from cooksafe import JsonCache
from typesafe_sdk import Choice, SystemOneResponse, TypeSafeClient

TYPESAFE_MODEL = "jev-1.14.0"  # pin the version your thresholds were tuned on

client = TypeSafeClient(
    api_key=os.environ.get("TYPESAFE_API_KEY", "").strip() or "cache-only",  # no key: cache only
    base_url=os.environ.get("TYPESAFE_ENDPOINT") or None,  # None: the SDK's default endpoint
    timeout=120.0,
)
json_cache = JsonCache(Path("json_cache/json_cache.json"))


from memorybook.recording import open_recording
from memorybook.replay import explain_failures_in_notebooks
from memorybook.transport import collection_client

client = collection_client()  # replay-only without TYPESAFE_API_KEY, and always in CI
json_cache = open_recording()  # json_cache/json_cache.json: damaged entries are named
explain_failures_in_notebooks()  # a miss shows its cause and a link, not a traceback


from memorybook.config import load_data

DATA = load_data()
CUSTOMERS = DATA["customers"]


def ticket_state(customer_id: str, ticket_id: str, received_on: str, subject: str,
                 text: str) -> dict:
    """The state Jev reads for one ticket: the customer, then a one-message helpdesk thread."""
    thread = [{"from": "customer", "text": text}]
    ticket = {"id": ticket_id, "received_on": received_on, "subject": subject, "messages": thread}
    return {"customer": CUSTOMERS[customer_id], "ticket": ticket}


EARLIER = [
    ticket_state(t["customer_id"], t["id"], t["received_on"], t["subject"], t["text"])
    for t in DATA["earlier_tickets"]
]


def later_state(customer_id: str, message_index: int) -> dict:
    """A later message from this customer, under a fixed ticket id: T-201 to T-203 for the
    first customer, T-204 to T-206 for the second."""
    messages = DATA["later_messages"]
    ticket_number = 201 + len(messages) * list(CUSTOMERS).index(customer_id) + message_index
    message = messages[message_index]
    return ticket_state(customer_id, f"T-{ticket_number}", DATA["later_received_on"],
                        message["subject"], message["text"])


# pattern: the question that routes a ticket
ROUTE = {
    "team": Choice(
        instructions="Which support team should handle `ticket`?",
        criteria={
            "cloud_ops": "Cloud team: problems with the hosted cloud edition, run by us",
            "selfhosted_linux": "Self-hosted team, Linux: installs, upgrades and "
            "performance of the self-hosted edition on Linux servers",
            "selfhosted_windows": "Self-hosted team, Windows: installs, upgrades and "
            "performance of the self-hosted edition on Windows Server",
            "billing": "Billing: invoices, payments, seats and plan changes for "
            "self-serve plans",
            "enterprise_desk": "Enterprise desk: seats, contracts and account changes for "
            "customers on an Enterprise contract (their technical problems go to the "
            "technical teams)",
            "general": "General product questions: features, how-to, settings",
            "none_suitable": "None of these teams fits the ticket",
        },
    ),
}


# pattern: ask(), cached
@json_cache
def _system_one(model: str, state: str, questions: str) -> dict:
    """One System One request, filed under the model id and the exact JSON of its inputs."""
    response = client.system_one(
        state=json.loads(state), questions=json.loads(questions), model=model
    )
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
