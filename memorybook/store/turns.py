"""Each customer's turn across the processes that share one store (notebook 9's service).

A call takes its customer's turn before it recalls and gives it back once its gate has saved, so a
call for the same customer in another process recalls only after that save:

    turns = CustomerTurns("postgresql://...")
    turn = turns.take("C-1042")   # starts waiting at once, in a thread of its own
    turn.wait()                   # blocks until the turn is this process's
    ...                           # recall, ask, gate, save
    turn.give_back()

A turn is `customer_lock()` held on a store object of its own, under a name of its own (never the
customer's, so the saves the turn protects never wait for it): on PostgreSQL an advisory lock on a
keyed digest, so no customer id reaches the server in plain text. A wait for a turn that another
process holds longer than the store's `timeout` fails with MemoryStoreError, and the call with it.
For PostgreSQL only: on SQLite, `customer_lock()` takes the whole file's write lock, which the
saves would then wait for.
"""

from __future__ import annotations

import threading

from memorybook.store.base import MemoryStore
from memorybook.store.opening import open_store

TURN_PREFIX = "turn of "  # the lock's name: "turn of C-1042", never the customer's own


class CustomerTurns:
    """Turns for the customers of the store at `url`, one store object (a connection) per turn
    held, kept for reuse."""

    def __init__(self, url: str, **options) -> None:
        self.url, self.options = url, options
        self._idle: list[MemoryStore] = []
        self._lock = threading.Lock()

    def take(self, customer_id: str) -> Turn:
        """Start waiting for this customer's turn; `wait()` on what it returns."""
        return Turn(self, customer_id)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for store in idle:
            store.close()

    def _store(self) -> MemoryStore:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return open_store(self.url, **self.options)

    def _reuse(self, store: MemoryStore) -> None:
        with self._lock:
            self._idle.append(store)


class Turn:
    """One call's turn: a thread holds the lock from when it gets it until `give_back()` (the
    lock is released by the thread that took it, as a store's locks must be)."""

    def __init__(self, turns: CustomerTurns, customer_id: str) -> None:
        self._turns, self._customer_id = turns, customer_id
        self._held, self._given_back = threading.Event(), threading.Event()
        self._error: BaseException | None = None
        threading.Thread(target=self._hold, name="memorybook-turn", daemon=True).start()

    def wait(self) -> None:
        """Block until the turn is held; raise what stopped it from being taken."""
        self._held.wait()
        if self._error is not None:
            raise self._error

    def give_back(self) -> None:
        """Release the turn, or, while it is still awaited, release it as soon as it is held."""
        self._given_back.set()

    def _hold(self) -> None:
        store = None
        try:
            store = self._turns._store()
            with store.customer_lock(TURN_PREFIX + self._customer_id):
                self._held.set()
                self._given_back.wait()
        except BaseException as error:  # noqa: BLE001 - handed to the waiting call
            self._error = error
            if store is not None:
                store.close()
                store = None
        finally:
            self._held.set()
            if store is not None:
                self._turns._reuse(store)
