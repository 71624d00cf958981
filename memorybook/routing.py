"""Generated from notebooks/01_plain_routing.ipynb by `python -m tools.export`.

Edit the notebook's cells tagged `export`, not this file."""


import json
import os

from typesafe_sdk import Choice, SystemOneResponse, TypeSafeClient

from memorybook.config import TYPESAFE_MODEL, load_data, timeout_seconds
from memorybook.recording import open_recording
from memorybook.replay import explain_failures_in_notebooks
from memorybook.transport import collection_transport

client = TypeSafeClient(
    api_key=os.environ.get("TYPESAFE_API_KEY") or "cache-only",  # any non-empty key builds a client
    base_url=os.environ.get("TYPESAFE_ENDPOINT") or None,  # None: the SDK's default endpoint
    timeout=timeout_seconds(),  # 120 s per HTTP operation, unless MEMORYBOOK_TIMEOUT_SECONDS is set
    transport=collection_transport(),  # no key or CI: replays only; live: on time, never plain http
)
json_cache = open_recording()  # cooksafe's JsonCache on json_cache/json_cache.json
explain_failures_in_notebooks()  # a miss or a failed live call: a short message, no traceback


DATA = load_data()
CUSTOMERS = DATA["customers"]


def ticket_state(
    customer_id: str, ticket_id: str, subject: str, text: str, received_on: str
) -> dict:
    """The state Jev reads for one ticket: the customer, then a one-message helpdesk thread."""
    thread = [{"from": "customer", "text": text}]
    ticket = {"id": ticket_id, "received_on": received_on, "subject": subject, "messages": thread}
    return {"customer": CUSTOMERS[customer_id], "ticket": ticket}


EARLIER = [
    ticket_state(t["customer_id"], t["id"], t["subject"], t["text"], t["received_on"])
    for t in DATA["earlier_tickets"]
]


def later_state(customer_id: str, message_index: int) -> dict:
    """Later message number `message_index` from this customer, under its fixed ticket id."""
    messages = DATA["later_messages"]
    customer_number = list(CUSTOMERS).index(customer_id)
    ticket_id = f"T-{201 + len(messages) * customer_number + message_index}"
    message = messages[message_index]
    return ticket_state(
        customer_id, ticket_id, message["subject"], message["text"], DATA["later_received_on"]
    )


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


@json_cache
def _system_one(model: str, state: str, questions: str) -> dict:
    """One System One request, filed under the model id and the exact JSON of its inputs."""
    response = client.system_one(
        state=json.loads(state), questions=json.loads(questions), model=model
    )
    return response.model_dump(mode="json")


def request_json(state: dict, questions: dict) -> tuple[str, str]:
    """The exact JSON text of a request's state and questions: what the recording files."""
    questions_json = {
        question_id: question.model_dump(mode="json", exclude_none=True)
        for question_id, question in questions.items()
    }
    return json.dumps(state), json.dumps(questions_json)


def ask(state: dict, questions: dict) -> SystemOneResponse:
    """client.system_one with the model pinned and every call cached."""
    answer = _system_one(TYPESAFE_MODEL, *request_json(state, questions))
    return SystemOneResponse.model_validate(answer)
