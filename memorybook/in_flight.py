"""At most so many requests to Jev at once, routing ahead of gates (the service's cap).

    in_flight = InFlight(8)
    await ask_with_memory_async(state, questions, memories, gates=gates,
                                ask=in_flight.routing(jev.ask_async),
                                ask_gate=in_flight.gating(jev.ask_async))

A reply waits for its routing request only; a gate runs after the reply has gone. So when every
slot is taken, a waiting routing request is let in before any waiting gate: replies stay as
quick as the cap allows, and the gates fill the slots the replies leave. Gates never take the
last slot (with more than one): while every gate hangs on a slow upstream, replies still go.
Within each kind, first come, first served. The API's rate limits, and the official cookbooks'
8 workers, set the default (Settings.max_in_flight, $MEMORYBOOK_MAX_IN_FLIGHT).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from memorybook.gates import WaitedTooLong
from memorybook.settings import DEFAULT_MAX_IN_FLIGHT as DEFAULT_MAX_IN_FLIGHT
from memorybook.settings import MAX_IN_FLIGHT_ENV as MAX_IN_FLIGHT_ENV
from memorybook.settings import ConfigError, Settings

if TYPE_CHECKING:  # the service's settings import this module, and need no SDK
    from typesafe_sdk import SystemOneResponse

ROUTING, GATING = 0, 1  # the lower goes first

AskAsync = Callable[[dict, dict], Awaitable["SystemOneResponse"]]  # as Jev.ask_async


def max_in_flight(settings: Settings | None = None) -> int:
    """The settings' cap (by default the environment's: $MEMORYBOOK_MAX_IN_FLIGHT, else 8)."""
    return (settings or Settings.from_environment()).max_in_flight


class InFlight:
    """A cap on the requests in flight, shared by everything asked through it, with routing
    requests let in before gates; gates never take the last slot (with more than one), so a
    reply always has one, even while every gate hangs on a slow upstream. `busy` is how many are
    in flight now, `most` the most ever. A routing request waits at most `wait_at_most` seconds
    for its slot (None: no bound), WaitedTooLong past them; a gate, which runs after its reply,
    waits for as long as it takes. Without `limit`, the settings' max_in_flight (by default the
    environment's, read now)."""

    def __init__(self, limit: int | None = None, wait_at_most: float | None = None, *,
                 settings: Settings | None = None) -> None:
        self.wait_at_most = wait_at_most
        self.limit = max_in_flight(settings) if limit is None else limit
        if self.limit < 1:
            raise ConfigError(f"at most {self.limit} requests in flight: give at least 1")
        self.gate_limit = max(1, self.limit - 1)  # one slot kept for replies
        self.busy = self.most = self.gates_busy = 0
        self._waiting: list[tuple[int, int, asyncio.Future]] = []
        self._order = itertools.count()

    @property
    def waiting(self) -> int:
        """How many requests wait for a slot now."""
        return len(self._waiting)

    def routing(self, ask: AskAsync) -> AskAsync:
        """`ask`, let in ahead of every waiting gate."""
        return self._asking(ask, ROUTING)

    def gating(self, ask: AskAsync) -> AskAsync:
        """`ask`, let in once no routing request waits, and never into the last slot."""
        return self._asking(ask, GATING)

    def _asking(self, ask: AskAsync, kind: int) -> AskAsync:
        async def asked(state: dict, questions: dict) -> SystemOneResponse:
            async with self._slot(kind):
                return await ask(state, questions)

        return asked

    def _may_enter(self, kind: int) -> bool:
        return self.busy < self.limit and (kind == ROUTING or self.gates_busy < self.gate_limit)

    @contextlib.asynccontextmanager
    async def _slot(self, kind: int):
        if self._may_enter(kind) and not any(ahead <= kind for ahead, _, _ in self._waiting):
            self._take(kind)
        else:
            turn = asyncio.get_running_loop().create_future()
            entry = (kind, next(self._order), turn)
            heapq.heappush(self._waiting, entry)
            try:
                async with asyncio.timeout(self.wait_at_most if kind == ROUTING else None):
                    await turn  # the slot is handed over, already counted
            except BaseException as stopped:
                if turn.done() and not turn.cancelled():
                    self._leave(kind)  # it was handed to us as we were stopped: pass it on
                elif entry in self._waiting:  # stopped while waiting: give the place up
                    self._waiting.remove(entry)
                    heapq.heapify(self._waiting)
                if isinstance(stopped, TimeoutError):
                    raise WaitedTooLong(
                        f"Waited {self.wait_at_most:g} s for a request to Jev to end (at most "
                        f"{self.limit} go at once), and went no further: nothing was sent or "
                        "saved. Try again in a moment.") from None
                raise
        try:
            yield
        finally:
            self._leave(kind)

    def _take(self, kind: int) -> None:
        self.busy += 1
        self.gates_busy += kind == GATING
        self.most = max(self.most, self.busy)

    def _leave(self, kind: int) -> None:
        """A slot is free: let in the waiters that may enter now (routing before gates)."""
        self.busy -= 1
        self.gates_busy -= kind == GATING
        while self._waiting and self._may_enter(self._waiting[0][0]):
            waiter_kind, _, turn = heapq.heappop(self._waiting)
            if not turn.done():  # not a waiter stopped meanwhile
                self._take(waiter_kind)
                turn.set_result(None)
