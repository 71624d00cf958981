"""The memory an app holds: its store, Jev, each customer's turn and the gates after the
replies, as one object started and stopped with the app.

    memory = AsyncMemory("postgresql://...", ask=Jev(), retention=timedelta(days=90))
    app = FastAPI(lifespan=memory.lifespan)          # or: async with memory: ...
    response = await memory.ask(state, ROUTE)        # ask(), plus memory; the gate after
    await memory.memories("C-1042")                  # after the customer's pending gates
    await memory.history("C-1042")                   # events, never content
    await memory.forget("C-1042", "T-101")           # one ticket's memories
    await memory.forget_customer("C-1042")           # all of them, and their history
    await memory.ready()                             # false while its store does not answer
    memory.metrics.exposition()                      # what it did, for Prometheus

    with Memory("sqlite:///memories.sqlite3", ask=jev) as memory:   # the same, for scripts
        memory.ask(state, ROUTE)

Started, it opens the store (or takes the one given), and keeps each customer's calls in order:
across the processes serving a PostgreSQL store (memorybook/store/turns.py), within this one on
SQLite, which it then serves alone (a second process is refused). It runs the gates that a
process killed before their end left in the store, and looks for more every
RECOVERY_INTERVAL_SECONDS; it deletes expired memories every `sweep_every`. Stopped, it waits for
every pending gate, then closes what it opened. Calls to Jev are capped (`max_in_flight`, replies
ahead of gates: memorybook/in_flight.py); a call waits at most `wait_at_most` seconds for its
customer's turn and as long for a slot (WaitedTooLong). Writes and erasures run in the customer's
turn; reads come after their pending gates, and take no turn when none is pending in this process
or recorded in the store by any.

`ready()` answers a readiness probe (memorybook/readiness.py); `metrics` counts its calls to
Jev, replies, gates and store calls, in a Prometheus registry of its own (memorybook/metrics.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from datetime import timedelta
from typing import Any, TypeVar

from typesafe_sdk import SystemOneResponse

from memorybook.config import REMEMBER_AT
from memorybook.gates import PendingGates
from memorybook.in_flight import AskAsync, InFlight
from memorybook.jev import default_jev
from memorybook.memory import checked_remember_at
from memorybook.metrics import Metrics
from memorybook.readiness import READY_WITHIN_SECONDS, Readiness, StoreCheck
from memorybook.redaction import redact
from memorybook.settings import Mode, NeverType, Settings
from memorybook.store import Memories, MemoryStore, open_store
from memorybook.store.pending import GateRecords
from memorybook.store.retention import HistoryEvent
from memorybook.store.turns import turns_for
from memorybook.wrapper import ask_with_memory_async, recover_abandoned_gates, recover_gates

# How often a running memory looks for gates that a stopped process left pending (it looks as it
# starts, too); a customer's own calls run theirs first, whenever they come.
RECOVERY_INTERVAL_SECONDS = 30.0

log = logging.getLogger("memorybook")
T = TypeVar("T")


class AsyncMemory:
    """A memory per customer for an asyncio app, between `start()` and `stop()` (or in
    `async with`, or as a FastAPI app's `lifespan`).

    `store` is a store URL (None: the settings', else the SQLite default), opened with
    `retention` and `store_options` (open_store()'s other arguments) and closed at stop; or a
    store or InMemoryMemories of the app's, which it uses and leaves open. `ask` is what asks
    Jev: a `Jev` (or anything with `ask_async`), or a function of (state, questions), async or
    not; by default `default_jev()`. The other arguments default to `settings`' (by default the
    environment's, read now: memorybook/settings.py); `wait_at_most`, to a live call's time."""

    def __init__(self, store: str | Memories | None = None, *, ask: Any = None,
                 retention: timedelta | NeverType | None = None,
                 remember_at: float = REMEMBER_AT, max_in_flight: int | None = None,
                 wait_at_most: float | None = None, sweep_every: timedelta | None = None,
                 store_options: dict[str, Any] | None = None,
                 settings: Settings | None = None) -> None:
        self.settings = settings = settings or Settings.from_environment()
        self._given = None if store is None or isinstance(store, str) else store
        self.url = store if isinstance(store, str) else settings.store_url
        self.retention = settings.retention if retention is None else retention
        self.remember_at = checked_remember_at(remember_at)
        self.max_in_flight = settings.max_in_flight if max_in_flight is None else max_in_flight
        self.wait_at_most = (settings.timeout_seconds if wait_at_most is None
                             else wait_at_most)
        self.sweep_every = settings.sweep_every if sweep_every is None else sweep_every
        self.store_options = dict(store_options or {})
        self._asker = ask
        self.store: Memories | None = None  # while running
        self.gates: PendingGates | None = None
        self.in_flight = InFlight(self.max_in_flight, wait_at_most=self.wait_at_most)
        self._running: contextlib.AsyncExitStack | None = None
        self.metrics = Metrics()  # a registry of its own: memorybook/metrics.py
        self.metrics.watch(self.in_flight)
        self._stopping, self._check = False, StoreCheck()

    # -- starting and stopping -----------------------------------------------------------

    async def start(self) -> None:
        """Open the store, take its customers' turns, start the recovery and the sweeper."""
        if self._running is not None:
            raise RuntimeError("this AsyncMemory has started already: stop() it first")
        asker = default_jev() if self._asker is None else self._asker
        ask, mode = asking(asker), mode_of(asker)
        self._ask = self.in_flight.routing(self.metrics.asking(ask, "reply", mode))
        self._ask_gate = self.in_flight.gating(self.metrics.asking(ask, "gate", mode))
        async with contextlib.AsyncExitStack() as running:
            store = self._given or await asyncio.to_thread(
                open_store, self.url, retention=self.retention, settings=self.settings,
                **self.store_options)
            if self._given is None:
                running.push_async_callback(asyncio.to_thread, store.close)
            for notice in getattr(store, "notices", ()):  # a new key file, say
                log.info("the memory store: %s", " ".join(str(notice).split()))
            if isinstance(store, GateRecords):
                running.enter_context(store.serving_alone())  # one process per SQLite file
            # A turn is a connection (memorybook/store/turns.py): room for every customer with a
            # request in flight and as many waiting for a slot.
            turns = turns_for(store, at_most=2 * self.max_in_flight)
            if turns is not None:
                running.push_async_callback(asyncio.to_thread, turns.close)
            self.store, self.gates = store, PendingGates(turns)
            self._timed = self.metrics.timed(store)  # what the calls use: memorybook/metrics.py
            running.push_async_callback(self.gates.drain)
            running.push_async_callback(self._stop_tasks, self._start_tasks())
            self._running = running.pop_all()

    async def stop(self) -> None:
        """Stop looking for abandoned gates and sweeping, wait for every pending gate, then
        close what `start()` opened. A gate whose recovery had begun stays recorded: it runs
        at the next start, or on another process."""
        running, self._running = self._running, None
        if running is not None:
            self._stopping = True  # not ready()
            try:
                await running.aclose()
            finally:
                self._stopping = False

    async def __aenter__(self) -> AsyncMemory:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @contextlib.asynccontextmanager
    async def lifespan(self, app: object = None) -> AsyncIterator[None]:
        """For `FastAPI(lifespan=memory.lifespan)`: running while the app serves."""
        async with self:
            yield

    # -- the calls -----------------------------------------------------------------------

    async def ask(self, state: dict, questions: dict) -> SystemOneResponse:
        """ask(), plus the customer's memory: the same arguments and response. It returns once
        the question is answered; the gate runs after, in the customer's turn."""
        return await self.metrics.replying(ask_with_memory_async(
            state, questions, self._store(), gates=self.gates, ask=self._ask,
            ask_gate=self._ask_gate, remember_at=self.remember_at,
            wait_at_most=self.wait_at_most, metrics=self.metrics))

    async def memories(self, customer_id: str, ticket_id: str | None = None) -> list[dict]:
        """The customer's memories (of `ticket_id` alone, if given), oldest first, once their
        pending gates have run."""
        if ticket_id is None:
            return await self._read(self._store().recall, customer_id)
        return await self._read(self._store().recall_ticket, customer_id, ticket_id)

    async def history(self, customer_id: str) -> list[HistoryEvent]:
        """What happened to the customer's memories, oldest first: events, never content."""
        return await self._read(self._store_of_its_own("history").history, customer_id)

    async def forget(self, customer_id: str, ticket_id: str) -> list[dict]:
        """Erase the customer's memories of one ticket; return them (MemoryNotFoundError, a
        KeyError, if there are none)."""
        return await self._in_turn(self._store().forget, customer_id, ticket_id)

    async def forget_customer(self, customer_id: str) -> list[dict]:
        """Erase every memory of the customer (and, in a store, their history)."""
        return await self._in_turn(self._store().forget_customer, customer_id)

    async def sweep(self) -> int:
        """Delete every expired memory now; return how many (it runs on a schedule too)."""
        return await asyncio.to_thread(self._store_of_its_own("sweep").sweep)

    async def ready(self, within: float = READY_WITHIN_SECONDS) -> Readiness:
        """Whether this memory can serve now, for a readiness probe: true once started, until
        it starts to stop, while its store answers a check within `within` seconds (one check
        at a time, however many probes: memorybook/readiness.py). Else false, with the
        `reason` in one line, naming no database or host."""
        if self._stopping:
            return Readiness(False, "the memory is stopping: it waits for its pending gates.")
        if self._running is None:
            return Readiness(False, "the memory is not running (not started, or stopped).")
        return await self._check.readiness(self._store(), within)

    # -- helpers -------------------------------------------------------------------------

    async def _read(self, call: Callable[..., T], customer_id: str, *arguments: str) -> T:
        """`call(customer_id, *arguments)` after every pending gate of the customer's: at once,
        in a worker thread, when none is pending here or, as the store says, in any process;
        else in the customer's turn, as a write."""
        store = self._store()
        if not self.gates.busy(customer_id):
            read = await asyncio.to_thread(read_if_settled, store, call, customer_id, *arguments)
            if read is not PENDING:
                return read
        return await self._in_turn(call, customer_id, *arguments)

    async def _in_turn(self, call: Callable[..., T], customer_id: str, *arguments: str) -> T:
        """`call(customer_id, *arguments)` in a worker thread, in the customer's turn: after
        every pending gate of theirs, here and in other processes, and any a stopped process
        left, so that no gate saves behind it."""
        store = self._store()
        async with self.gates.turn(customer_id, self.wait_at_most):
            await recover_gates(customer_id, store, ask=self._ask_gate,
                                remember_at=self.remember_at, metrics=self.metrics)
            return await asyncio.to_thread(call, customer_id, *arguments)

    def _store(self) -> Memories:
        if self.store is None or self._running is None:
            raise RuntimeError("this AsyncMemory is not running: `async with memory:`, "
                               "`await memory.start()`, or FastAPI(lifespan=memory.lifespan)")
        return self._timed

    def _store_of_its_own(self, call: str) -> MemoryStore:
        store = self._store()
        if not hasattr(store, call):
            raise TypeError(f"{type(store).__name__} keeps no {call}: open a store "
                            "(memorybook.store.open_store) for it")
        return store  # type: ignore[return-value]

    def _start_tasks(self) -> list[asyncio.Task]:
        tasks = []
        if isinstance(self.store, GateRecords):
            tasks.append(asyncio.create_task(recover_abandoned_gates(
                self._timed, self.gates, ask=self._ask_gate, remember_at=self.remember_at,
                every=RECOVERY_INTERVAL_SECONDS, metrics=self.metrics)))
        if hasattr(self.store, "sweep"):
            tasks.append(asyncio.create_task(sweep_on_schedule(self._timed, self.sweep_every)))
        return tasks

    @staticmethod
    async def _stop_tasks(tasks: list[asyncio.Task]) -> None:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class Memory:
    """AsyncMemory for scripts and synchronous code: the same arguments and calls, each
    blocking until done. While it is open (`with Memory(...) as memory:`, or `start()` and
    `stop()`), its event loop runs in a thread of its own; a gate runs there after its reply,
    and `stop()` waits for it."""

    def __init__(self, store: str | Memories | None = None, **options: Any) -> None:
        self.running = AsyncMemory(store, **options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._loop is not None:
            raise RuntimeError("this Memory has started already: stop() it first")
        loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="memorybook-memory",
                                        daemon=True)
        self._thread.start()
        self._loop = loop
        try:
            self._run(self.running.start())
        except BaseException:
            self._end_loop()
            raise

    def stop(self) -> None:
        if self._loop is None:
            return
        try:
            self._run(self.running.stop())
        finally:
            self._end_loop()

    def __enter__(self) -> Memory:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def ask(self, state: dict, questions: dict) -> SystemOneResponse:
        """ask(), plus the customer's memory: the same arguments and response."""
        return self._run(self.running.ask(state, questions))

    def memories(self, customer_id: str, ticket_id: str | None = None) -> list[dict]:
        return self._run(self.running.memories(customer_id, ticket_id))

    def history(self, customer_id: str) -> list[HistoryEvent]:
        return self._run(self.running.history(customer_id))

    def forget(self, customer_id: str, ticket_id: str) -> list[dict]:
        return self._run(self.running.forget(customer_id, ticket_id))

    def forget_customer(self, customer_id: str) -> list[dict]:
        return self._run(self.running.forget_customer(customer_id))

    def sweep(self) -> int:
        return self._run(self.running.sweep())

    def ready(self, within: float = READY_WITHIN_SECONDS) -> Readiness:
        return self._run(self.running.ready(within))

    @property
    def metrics(self) -> Metrics:
        return self.running.metrics

    def _run(self, call: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            call.close()
            raise RuntimeError("this Memory is not open: `with Memory(...) as memory:`")
        return asyncio.run_coroutine_threadsafe(call, self._loop).result()

    def _end_loop(self) -> None:
        """Stop the loop's thread, and the worker threads its store calls ran in."""
        loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        try:
            asyncio.run_coroutine_threadsafe(loop.shutdown_default_executor(), loop).result()
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()


PENDING = object()  # what read_if_settled() gives for a customer with a gate pending


def read_if_settled(store: Memories, call: Callable[..., T], customer_id: str,
                    *arguments: str) -> T | object:
    """`call(customer_id, *arguments)` when no gate of the customer's is recorded in the store,
    else PENDING. A store keeping no gates (InMemoryMemories) has none but this process's.
    `store` may be the timed one AsyncMemory calls (memorybook/metrics.py): its methods are
    looked up, as isinstance() of a protocol does not on Python 3.12 and later."""
    has_pending_gates = getattr(store, "has_pending_gates", None)
    if has_pending_gates is not None and has_pending_gates(customer_id):
        return PENDING
    return call(customer_id, *arguments)


def asking(ask: Any) -> AskAsync:
    """What AsyncMemory asks Jev with, awaited: a Jev's (or a stand-in's) `ask_async`, an async
    function as it is, or a synchronous one in a worker thread; by default `default_jev()`'s."""
    if ask is None:
        return default_jev().ask_async
    if callable(getattr(ask, "ask_async", None)):
        return ask.ask_async
    if not callable(ask):
        raise TypeError(f"ask= takes a Jev or a function of (state, questions), not a "
                        f"{type(ask).__name__}")
    if inspect.iscoroutinefunction(ask) or inspect.iscoroutinefunction(type(ask).__call__):
        return ask

    async def in_a_thread(state: dict, questions: dict) -> SystemOneResponse:
        answer: SystemOneResponse | Awaitable[SystemOneResponse] = await asyncio.to_thread(
            ask, state, questions)
        return await answer if inspect.isawaitable(answer) else answer

    return in_a_thread


def mode_of(asker: Any) -> str:
    """The mode of the Jev `asker` is (or whose method it is), as metrics label its calls:
    replay, record or live; `other` for a stand-in or an app's own function."""
    mode = getattr(getattr(asker, "__self__", asker), "mode", None)
    return mode.value if isinstance(mode, Mode) else "other"


async def sweep_on_schedule(store: MemoryStore, every: timedelta) -> None:
    """Delete expired memories every `every`, until cancelled (at stop). A sweep that fails is
    logged in one line, and the next one is tried all the same."""
    while True:
        await asyncio.sleep(every.total_seconds())
        try:
            swept = await asyncio.to_thread(store.sweep)
        except Exception as error:  # the store may be down for a while: keep serving
            log.error(" ".join(redact(f"sweeping expired memories failed: "
                                      f"{type(error).__name__}: {error}").split()))
        else:
            if swept:
                log.info("swept %d expired memories", swept)
