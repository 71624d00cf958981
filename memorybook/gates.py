"""Each customer's turn in one process: the gate after the reply, kept in order.

`ask_with_memory_async()` (memorybook/wrapper.py) replies once the routing answers and runs the
gate after; `PendingGates` makes that safe. A customer's call takes their turn before it recalls
and gives it back when its gate has finished, so no call misses a memory an earlier call was about
to save, and other customers never wait. With `turns` (memorybook.store.turns.CustomerTurns), the
turn is held across processes sharing a PostgreSQL store too; a SQLite store keeps the order
within one process only, so an app serving one holds `store.serving_alone()` while it serves, as
AsyncMemory does (memorybook/serving.py), and a second process is refused. A read or an erasure
takes the turn as a call does (`turn()`). `drain()` waits for every pending gate, for a graceful
stop. A wait for a turn may be bounded (`at_most`): past it, WaitedTooLong, and the call goes no
further.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from memorybook.errors import MemorybookError


class WaitedTooLong(MemorybookError):
    """A call waited longer than it may for its turn, or for a request to Jev to end, and went
    no further: nothing was sent or saved for it. Try again in a moment."""


class PendingGates:
    """Each customer's calls, in order: a call starts once the customer's earlier calls
    have finished their gates. Other customers' calls never wait for them."""

    def __init__(self, turns=None) -> None:
        self.turns = turns  # CustomerTurns, where processes share a PostgreSQL store
        self._last: dict[str, asyncio.Future] = {}  # customer -> last call's end
        self._running: set[asyncio.Task] = set()
        self._held: dict[asyncio.Future, object] = {}  # a call's end -> its Turn

    def take_turn(self, customer: str) -> tuple[asyncio.Future | None, asyncio.Future]:
        """(the end of this customer's previous call or None, the end of this call)."""
        done = asyncio.get_running_loop().create_future()
        previous, self._last[customer] = self._last.get(customer), done
        return previous, done

    async def wait_for_turn(self, customer: str, previous: asyncio.Future | None,
                            done: asyncio.Future, at_most: float | None = None) -> None:
        """Wait until the customer's earlier calls have finished their gates (`previous`, from
        `take_turn()`), then take their turn across processes too: at most `at_most` seconds
        (None: no bound), WaitedTooLong past it. Either way, end the turn with `end_turn()`."""
        try:
            async with asyncio.timeout(at_most):
                if previous is not None:
                    await asyncio.shield(previous)
                await self.hold(customer, done)
        except TimeoutError:
            raise WaitedTooLong(
                f"Waited {at_most:g} s for customer {customer}'s earlier calls to finish their "
                "gates" + (", and for a connection for the customer's turn" if self.turns
                           else "") + ", and went no further: nothing was sent or saved. Try "
                "again in a moment."
            ) from None

    async def hold(self, customer: str, done: asyncio.Future) -> None:
        """Take the customer's turn across processes too, where `turns` is set."""
        if self.turns is not None:
            turn = self._held[done] = self.turns.take(customer)
            await turn.wait_async()

    def end_turn(self, customer: str, done: asyncio.Future, after=None) -> None:
        """End a call's turn, or, with `after`, once that earlier turn has ended."""
        if after is not None and not after.done():
            after.add_done_callback(lambda _: self.end_turn(customer, done))
            return
        if (turn := self._held.pop(done, None)) is not None:
            turn.give_back()
        if not done.done():
            done.set_result(None)
        if self._last.get(customer) is done:
            del self._last[customer]

    def run_gate(self, gate, customer: str, done: asyncio.Future) -> None:
        """Run a gate in the background; the turn ends when it has."""
        task = asyncio.create_task(gate)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        task.add_done_callback(lambda _: self.end_turn(customer, done))

    @contextlib.asynccontextmanager
    async def turn(self, customer: str, at_most: float | None = None) -> AsyncIterator[None]:
        """Hold the customer's turn for the block, once every earlier call for them (here and,
        with `turns`, in the other processes) has finished its gate: what a read or an erasure
        of their memories takes, so that no pending gate saves behind it. Waits at most
        `at_most` seconds (WaitedTooLong past it)."""
        previous, done = self.take_turn(customer)
        try:
            await self.wait_for_turn(customer, previous, done, at_most)
            yield
        finally:
            self.end_turn(customer, done, after=previous)

    def busy(self, customer: str) -> bool:
        """Whether a call for this customer in this process has not finished its gate yet (or
        waits for its turn)."""
        return customer in self._last

    async def settled(self, customer: str) -> None:
        """Wait until every call so far for this customer has finished its gate, here and, with
        `turns`, in the other processes. A call after it may start a gate again: to read or
        erase with none pending, do it inside `turn()`."""
        async with self.turn(customer):
            pass

    async def drain(self) -> None:
        """Wait for every pending gate, for a graceful stop."""
        while self._last:
            await asyncio.gather(*map(asyncio.shield, list(self._last.values())))
