"""Each customer's turn across the processes that share one store (notebook 9's service).

A call takes its customer's turn before it recalls and gives it back once its gate has saved, so a
call for the same customer in another process recalls only after that save:

    turns = CustomerTurns("postgresql://...")   # or turns_for(store): None but on PostgreSQL
    turn = turns.take("C-1042")   # starts waiting at once, in a thread of its own
    turn.wait()                   # blocks until the turn is this process's
    await turn.wait_async()       # or so, in async code: no thread waits
    ...                           # recall, ask, gate, save
    turn.give_back()

A turn is `customer_lock()` held on a store object of its own, under a name of its own (never the
customer's, so the saves the turn protects never wait for it): on PostgreSQL an advisory lock on a
keyed digest, so no customer id reaches the server in plain text. A wait for a turn that another
process holds longer than the store's `timeout` fails with MemoryStoreError, and the call with it.
For PostgreSQL only: on SQLite, `customer_lock()` takes the whole file's write lock, which the
saves would then wait for.

Each turn held is a connection to the server, so a process holds at most `at_most` turns at once
(TURNS_AT_ONCE by default); a call beyond them waits for one to be given back, as long as the
store's `timeout` at most. Once given back, at most KEPT_IDLE connections are kept for the next
turns and the others closed: a process's connections stay bounded, and shrink once it is quiet.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Any

from memorybook.store.base import MemoryStore
from memorybook.store.opening import open_store
from memorybook.store.postgres import POSTGRES_LOCK_TIMEOUT_SECONDS, PostgresMemoryStore
from memorybook.store.validation import MemoryStoreError, StoreInputError

TURN_PREFIX = "turn of "  # the lock's name: "turn of C-1042", never the customer's own
# Customers whose turns one process holds at once, each on a connection of its own: twice the
# requests to Jev a service has in flight by default (memorybook/in_flight.py), so that as many
# customers waiting for a slot hold theirs too (the service passes twice its own limit). Two
# replicas then use at most 34 of PostgreSQL's default 100 connections (each store object has
# one more).
TURNS_AT_ONCE = 16
KEPT_IDLE = 4  # connections kept open for the next turns once theirs have been given back


def turns_for(store: object, at_most: int = TURNS_AT_ONCE) -> CustomerTurns | None:
    """The turns that keep the customers' calls in order across the processes serving `store`:
    on PostgreSQL, on connections like its own; None for a store one process serves alone
    (SQLite's `serving_alone()`), where PendingGates keeps the order by itself."""
    if isinstance(store, PostgresMemoryStore):
        return CustomerTurns(store=store, at_most=at_most)
    return None


class CustomerTurns:
    """Turns for the customers of the store at `url` (or of `store`, on connections like its
    own), one store object (a connection) per turn held: at most `at_most` at once, KEPT_IDLE of
    them kept for reuse. `options`: open_store()'s (`timeout` bounds the wait for a turn, as it
    bounds the lock)."""

    def __init__(self, url: str | None = None, *, at_most: int = TURNS_AT_ONCE,
                 store: PostgresMemoryStore | None = None, **options: Any) -> None:
        if not isinstance(at_most, int) or isinstance(at_most, bool) or at_most < 1:
            raise StoreInputError(f"at_most must be a positive integer, got {at_most!r}")
        if (url is None) == (store is None):
            raise StoreInputError("CustomerTurns takes the store's URL or the store (store=), "
                                  "one of them")
        self.at_most = at_most
        self._open: Callable[[], MemoryStore] = (
            store.reopened if store is not None else functools.partial(open_store, url, **options))
        self._idle: list[MemoryStore] = []
        self._lock = threading.Lock()
        self._connections = threading.BoundedSemaphore(at_most)
        self._wait_seconds = (store.timeout if store is not None else
                              options.get("timeout") or POSTGRES_LOCK_TIMEOUT_SECONDS)

    def take(self, customer_id: str) -> Turn:
        """Start waiting for this customer's turn; `wait()` on what it returns."""
        return Turn(self, customer_id)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for store in idle:
            store.close()

    def _connection(self) -> None:
        """Wait for one of the `at_most` connections; MemoryStoreError after the store's
        timeout."""
        if not self._connections.acquire(timeout=self._wait_seconds):
            raise MemoryStoreError(
                f"Waited {self._wait_seconds:g} s for one of this process's {self.at_most} "
                "connections for customers' turns, which other customers' calls held: nothing "
                "was sent or saved. Try again in a moment, or raise CustomerTurns(at_most=...) "
                "within what the server allows (PostgreSQL's max_connections).")

    def _store(self) -> MemoryStore:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self._open()

    def _give_back(self, store: MemoryStore | None) -> None:
        """A turn's connection back: kept for the next turn, or closed past KEPT_IDLE."""
        try:
            if store is not None:
                with self._lock:
                    keep = len(self._idle) < KEPT_IDLE
                    if keep:
                        self._idle.append(store)
                if not keep:
                    store.close()
        finally:
            self._connections.release()


class Turn:
    """One call's turn: a thread holds the lock from when it gets it until `give_back()` (the
    lock is released by the thread that took it, as a store's locks must be)."""

    def __init__(self, turns: CustomerTurns, customer_id: str) -> None:
        self._turns, self._customer_id = turns, customer_id
        self._held, self._given_back = threading.Event(), threading.Event()
        self._error: BaseException | None = None
        self._when_held: list[Callable[[], None]] = []
        self._when_held_lock = threading.Lock()
        threading.Thread(target=self._hold, name="memorybook-turn", daemon=True).start()

    def wait(self) -> None:
        """Block until the turn is held; raise what stopped it from being taken."""
        self._held.wait()
        if self._error is not None:
            raise self._error

    async def wait_async(self) -> None:
        """`wait()`, awaited without a worker thread: calls waiting for turns, as many as there
        are customers at once, must not take the threads that the turns' holders need for
        their own store calls."""
        loop = asyncio.get_running_loop()
        held = loop.create_future()

        def wake() -> None:  # in the turn's thread
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(lambda: held.done() or held.set_result(None))

        with self._when_held_lock:
            if not self._held.is_set():
                self._when_held.append(wake)
        if self._held.is_set():
            held.set_result(None)
        await held
        if self._error is not None:
            raise self._error

    def _mark_held(self) -> None:
        """The turn is held, or will never be: wake whoever awaits it."""
        with self._when_held_lock:
            self._held.set()
            waiting, self._when_held = self._when_held, []
        for wake in waiting:
            wake()

    def give_back(self) -> None:
        """Release the turn, or, while it is still awaited, release it as soon as it is held."""
        self._given_back.set()

    def _hold(self) -> None:
        store = None
        try:
            self._turns._connection()
        except BaseException as error:  # noqa: BLE001 - handed to the waiting call
            self._error = error
            self._mark_held()
            return
        try:
            if self._given_back.is_set():  # the call stopped waiting meanwhile
                return
            store = self._turns._store()
            with store.customer_lock(TURN_PREFIX + self._customer_id):
                self._mark_held()
                self._given_back.wait()
        except BaseException as error:  # noqa: BLE001 - handed to the waiting call
            self._error = error
            if store is not None:
                store.close()
                store = None
        finally:
            self._mark_held()
            self._turns._give_back(store)
