"""A ticket router that remembers each customer: an app built on memorybook, as an app builds it.

    pip install "memorybook[service]"
    TYPESAFE_API_KEY=... MEMORYBOOK_STORE_URL=sqlite:///router.sqlite3 \\
        uvicorn --factory app:create_router

`POST /tickets` takes a helpdesk ticket and answers with the team it goes to, before the gate
decides whether the ticket is worth remembering (`?memory=false` routes it as plain Jev would,
reading and saving no memory). `GET /customers/{id}/memories` lists the tickets remembered for a
customer once their pending gates have finished.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import FastAPI, HTTPException, Query
from pydantic import BaseModel, Field
from typesafe_sdk import TypeSafeError

from memorybook import (
    AsyncMemory,
    Jev,
    MemorybookError,
    RecordingMissError,
    ticket_id_of,
)
from memorybook.api_errors import describe_api_failure
from memorybook.example import ROUTE  # the official routing question, so its answers replay


class Ticket(BaseModel):
    """A ticket as the helpdesk sends it: who wrote, and their one message."""

    customer_id: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9._-]+$")
    company: str = Field(max_length=200)
    ticket_id: str = Field(min_length=1, max_length=100)
    received_on: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    subject: str = Field(max_length=500)
    text: str = Field(max_length=20_000)

    def state(self) -> dict:
        """The state Jev reads: the customer, then a one-message thread."""
        thread = [{"from": "customer", "text": self.text}]
        ticket = {"id": self.ticket_id, "received_on": self.received_on,
                  "subject": self.subject, "messages": thread}
        return {"customer": {"id": self.customer_id, "company": self.company},
                "ticket": ticket}


class Routed(BaseModel):
    ticket_id: str
    team: str
    probability: float


def create_router(store_url: str | None = None, *, jev: Jev | None = None) -> FastAPI:
    """The router. `jev` answers it: by default `Jev()` from the environment (live with a key;
    the tests pass one replaying the app's recording). Its memory starts and stops with it:
    on SQLite it serves the file alone; replicas share a PostgreSQL store, each customer's
    calls in order across them, and a replica killed with gates pending leaves them to the
    next one up."""
    jev = jev or Jev()
    memory = AsyncMemory(store_url, ask=jev)
    app = FastAPI(title="Ticket router", lifespan=memory.lifespan)

    @app.post("/tickets")
    async def route(ticket: Ticket,
                    remember: Annotated[bool, Query(alias="memory")] = True) -> Routed:
        try:
            if remember:
                response = await memory.ask(ticket.state(), ROUTE)
            else:
                response = await jev.ask_async(ticket.state(), ROUTE)
        except RecordingMissError as miss:
            raise HTTPException(503, {"detail": miss.summary,
                                      "how_to_record": miss.how_to_record}) from None
        except TypeSafeError as error:  # Jev could not be asked: the upstream failed
            raise HTTPException(503, {"detail": describe_api_failure(error)}) from None
        except MemorybookError as error:  # the store, the recording, or a wait too long
            raise HTTPException(503, {"detail": str(error).splitlines()[0]}) from None
        team = response.answers["team"]
        return Routed(ticket_id=ticket.ticket_id, team=team.choice,
                      probability=team.probabilities[team.choice])

    @app.get("/customers/{customer_id}/memories")
    async def remembered(customer_id: str) -> list[str]:
        return [ticket_id_of(saved) for saved in await memory.memories(customer_id)]

    return app
