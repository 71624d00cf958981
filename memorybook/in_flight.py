"""At most so many requests to Jev at once, routing ahead of gates (the service's cap).

    in_flight = InFlight(8)
    await ask_with_memory_async(state, questions, memories, gates=gates,
                                ask=in_flight.routing(jev.ask_async),
                                ask_gate=in_flight.gating(jev.ask_async))

A reply waits for its routing request only; a gate runs after the reply has gone. So when every
slot is taken, a waiting routing request is let in before any waiting gate: replies stay as
quick as the cap allows, and the gates fill the slots the replies leave. Within each kind,
first come, first served. The API's rate limits, and the official cookbooks' 8 workers, set the
default (MEMORYBOOK_MAX_IN_FLIGHT).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import os
from collections.abc import Awaitable, Callable

from typesafe_sdk import SystemOneResponse

from memorybook.config import ConfigError

MAX_IN_FLIGHT_ENV = "MEMORYBOOK_MAX_IN_FLIGHT"
DEFAULT_MAX_IN_FLIGHT = 8
ROUTING, GATING = 0, 1  # the lower goes first

AskAsync = Callable[[dict, dict], Awaitable[SystemOneResponse]]


def max_in_flight() -> int:
    """$MEMORYBOOK_MAX_IN_FLIGHT, else 8: a whole number from 1 to 1,000."""
    text = os.environ.get(MAX_IN_FLIGHT_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_IN_FLIGHT
    if not (text.isdigit() and 1 <= int(text) <= 1000):
        raise ConfigError(f"{MAX_IN_FLIGHT_ENV}={text[:20]!r} is not a whole number from 1 to "
                          f"1,000: the requests to Jev at once (default {DEFAULT_MAX_IN_FLIGHT}).")
    return int(text)


class InFlight:
    """A cap on the requests in flight, shared by everything asked through it, with routing
    requests let in before gates. `busy` is how many are in flight now, `most` the most ever."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = max_in_flight() if limit is None else limit
        if self.limit < 1:
            raise ConfigError(f"at most {self.limit} requests in flight: give at least 1")
        self.busy = self.most = 0
        self._waiting: list[tuple[int, int, asyncio.Future]] = []
        self._order = itertools.count()

    def routing(self, ask: AskAsync) -> AskAsync:
        """`ask`, let in ahead of every waiting gate."""
        return self._asking(ask, ROUTING)

    def gating(self, ask: AskAsync) -> AskAsync:
        """`ask`, let in once no routing request waits."""
        return self._asking(ask, GATING)

    def _asking(self, ask: AskAsync, kind: int) -> AskAsync:
        async def asked(state: dict, questions: dict) -> SystemOneResponse:
            async with self._slot(kind):
                return await ask(state, questions)

        return asked

    @contextlib.asynccontextmanager
    async def _slot(self, kind: int):
        if self.busy >= self.limit or self._waiting:
            turn = asyncio.get_running_loop().create_future()
            entry = (kind, next(self._order), turn)
            heapq.heappush(self._waiting, entry)
            try:
                await turn  # the slot is handed over, already counted
            except BaseException:
                if turn.done() and not turn.cancelled():
                    self._hand_on()  # it was handed to us as we were stopped: pass it on
                else:
                    self._waiting.remove(entry)
                    heapq.heapify(self._waiting)
                raise
        else:
            self._take()
        try:
            yield
        finally:
            self._hand_on()

    def _take(self) -> None:
        self.busy += 1
        self.most = max(self.most, self.busy)

    def _hand_on(self) -> None:
        """A slot is free: give it to the first waiter (routing before gates), else free it."""
        self.busy -= 1
        if self._waiting:
            _, _, turn = heapq.heappop(self._waiting)
            self._take()
            turn.set_result(None)
