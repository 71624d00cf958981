"""What the service answers when the library fails: each error in one line for the client, and
for whoever runs the service a log line by ids, never a ticket's words, the key or the
database's address.

    503  the store failed, or a wait ran out (both with Retry-After); a call not in the recording
    409  a memory of the customer's cannot be read: which DELETE frees them
    404  no memory of that ticket, to forget
    422  a state no memory may hold
    502  a live call to Jev failed
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TypeVar
from urllib.parse import quote

from fastapi import HTTPException
from fastapi.responses import JSONResponse
from typesafe_sdk import (
    TypeSafeAPIConnectionError,
    TypeSafeAPIError,
    TypeSafeAPIResponseValidationError,
    TypeSafeAPITimeoutError,
    TypeSafeError,
)

from memorybook.api_errors import CallTimeoutError, describe_api_failure
from memorybook.gates import WaitedTooLong
from memorybook.memory import StateError
from memorybook.recording import RecordingError
from memorybook.redaction import redact
from memorybook.replay import RecordingMissError
from memorybook.service_models import flat, one_line
from memorybook.settings import Settings
from memorybook.store import (
    DamagedMemoryError,
    MemoryNotFoundError,
    MemoryStoreError,
    StoreInputError,
)
from memorybook.store.validation import shown

# A 503 for a wait that ran out or a store that failed: worth trying again in a second.
RETRY_SOON = {"Retry-After": "1"}

log = logging.getLogger("memorybook")
T = TypeVar("T")


async def answered(call: Awaitable[T], *, not_found: str = "") -> T:
    """What a call on a customer's memories returns; a failure as the HTTPException that says
    it: `not_found` is the 404's line for a ticket with no memory to forget."""
    try:
        return await call
    except MemoryNotFoundError:
        raise HTTPException(404, not_found) from None
    except DamagedMemoryError as error:
        raise HTTPException(409, damaged(error)) from None
    except MemoryStoreError as error:
        raise HTTPException(503, store_failed(error), headers=RETRY_SOON) from None
    except WaitedTooLong as error:
        raise HTTPException(503, str(error), headers=RETRY_SOON) from None


def routing_failed(error: Exception, state: dict, settings: Settings) -> JSONResponse:
    """POST /tickets's answer when routing `state` failed with `error` (re-raised when it is
    none the service answers: a bug, which the server's 500 and log show); `settings` name the
    endpoint a failed live call went to."""
    ticket, customer = shown(state["ticket"]["id"]), state["customer"]["id"]
    if isinstance(error, WaitedTooLong):
        return JSONResponse({"detail": str(error)}, status_code=503, headers=RETRY_SOON)
    if isinstance(error, StateError | StoreInputError):  # before asking: over 1 MB, say
        return JSONResponse({"detail": f"the state cannot be kept as a memory: "
                                       f"{one_line(error)}"}, status_code=422)
    if isinstance(error, RecordingMissError):  # logged by ids: a ticket's words stay out of logs
        log.warning("routing ticket %s of customer %s: the recording has no answer to it, and "
                    "nothing was sent", ticket, customer)
        return JSONResponse({"detail": flat(error.summary),
                             "likely_causes": [flat(reason) for reason in error.reasons],
                             "how_to_answer": flat(error.how_to_serve_live)}, status_code=503)
    if isinstance(error, RecordingError):  # its answer damaged, say
        log.error("routing ticket %s of customer %s failed: %s", ticket, customer,
                  one_line(error.logged))  # by ids, no words
        return JSONResponse({"detail": f"the recording failed: {one_line(error)}"},
                            status_code=503)
    if isinstance(error, DamagedMemoryError):
        return JSONResponse({"detail": damaged(error)}, status_code=409)
    if isinstance(error, MemoryStoreError):
        return JSONResponse({"detail": store_failed(error)}, status_code=503,
                            headers=RETRY_SOON)
    if isinstance(error, TypeSafeError):
        # What failed, redacted, for whoever runs the service, without what the API said, which
        # may quote the ticket; the client gets no endpoint, header or text of the upstream's.
        log.error("routing ticket %s of customer %s failed: %s", ticket, customer,
                  " ".join(describe_api_failure(error, quoting_the_api=False,
                                                settings=settings).splitlines()))
        return JSONResponse({"detail": jev_failed(error)}, status_code=502)
    raise error


def store_failed(error: MemoryStoreError) -> str:
    """A store failure's 503 in one line. What failed goes to the service's log, not to the
    client: it names the database, its host or its file."""
    log.error("the memory store failed: %s", one_line(redact(error)))
    return "the memory store failed: try again later; the service's log has the details."


def damaged(error: DamagedMemoryError) -> str:
    """A damaged memory's 409 in one line: which DELETE serves the customer again (a retry
    alone never will). The store's message, which names the database or file, is logged."""
    log.error("a memory cannot be read: %s", one_line(redact(error)))
    customer, ticket = error.customer_id, error.ticket_id
    if ticket is None:
        return (f"a memory of customer {customer} cannot be read (damaged), and neither can its "
                f"ticket id: erasing the customer's memories (DELETE /customers/{customer}/"
                "memories) or restoring the store from a backup serves them again; the "
                "service's log has the details.")
    segment = quote(ticket, safe="")  # a path segment of "." or ".." a client would collapse
    segment = segment.replace(".", "%2E") if segment in (".", "..") else segment
    path = f"/customers/{customer}/memories/{segment}"
    return (f"customer {customer}'s memory of ticket {shown(ticket)} cannot be read "
            f"(damaged): erasing it (DELETE {path}) serves the customer again; the service's log "
            "has the details.")


def jev_failed(error: TypeSafeError) -> str:
    """A 502's one line: what failed and, if the API answered, its HTTP status."""
    if isinstance(error, CallTimeoutError | TypeSafeAPITimeoutError):
        how = " (no answer in time)"
    elif isinstance(error, TypeSafeAPIConnectionError):
        how = " (could not connect to its API)"
    elif isinstance(error, TypeSafeAPIResponseValidationError):
        how = " (its API's answer could not be read)"
    elif isinstance(error, TypeSafeAPIError):
        how = f" (its API answered HTTP {error.status})"
    else:
        how = ""
    # A refused key or endpoint is the operator's to fix (the log says how); a request refused
    # as it is fails again unchanged; anything else may pass on a retry.
    status = error.status if isinstance(error, TypeSafeAPIError) else None
    then = ("whoever runs the service must fix it" if status in (401, 403, 404) else
            "retrying it unchanged will not help" if status in (400, 422) else "try again later")
    return f"asking Jev to route the ticket failed{how}: {then}; the service's log has the details."
