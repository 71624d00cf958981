"""Persistent, encrypted, per-customer memory: the store notebook 6 gives the wrapper.

    from memorybook.store import open_store

    with open_store() as store:
        store.save("C-1042", memory)      # append; returns memories evicted by the cap
        store.recall("C-1042")            # that customer's memories, oldest first
        store.recall_ticket("C-1042", "T-101")  # those of one ticket
        store.forget("C-1042", "T-101")   # delete them for good; returns what was deleted
                                          # (and .unreadable: damaged rows deleted too)
        store.forget_customer("C-1042")   # erase every memory of the customer; returns them
        store.history("C-1042")           # what happened to them: event, ticket id, time
        store.sweep()                     # delete expired memories (open_store(retention=...);
                                          # NEVER, the default, keeps them until forgotten)
        gate = store.record_gate("C-1042", memory)  # a gate still to run (GateRecords)
        store.settle_gate(gate, keep=True)          # its verdict: saved as its record goes
        store.rotate_key()                # seal every row with key=, read with old_keys=
                                          # (python -m memorybook.store rotate: rotation.py)

What the store guarantees: README.md, "Guarantees". How it is built: CONTRIBUTING.md, "The
store"; adding a backend: CONTRIBUTING.md, "Add a store backend".
"""

from memorybook.store.base import (
    MAX_MEMORIES_PER_CUSTOMER,
    Memories,
    MemoriesRead,
    MemoryStore,
    SealedRow,
)
from memorybook.store.encryption import STORE_KEY_ENV
from memorybook.store.opening import DEFAULT_STORE_PATH, open_store
from memorybook.store.pending import GateRecords, PendingGate
from memorybook.store.postgres import (
    POSTGRES_CONNECT_TIMEOUT_SECONDS,
    POSTGRES_LOCK_TIMEOUT_SECONDS,
    PostgresMemoryStore,
)
from memorybook.store.retention import EVENTS, NEVER, HistoryEvent, system_clock
from memorybook.store.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS, SQLiteMemoryStore
from memorybook.store.urls import STORE_URL_ENV
from memorybook.store.validation import (
    MAX_MEMORY_BYTES,
    MAX_MEMORY_NESTING,
    DamagedMemoryError,
    MemoryNotFoundError,
    MemoryStoreError,
    MemoryStoreKeyError,
    StoreInputError,
)

__all__ = [
    "DEFAULT_STORE_PATH",
    "EVENTS",
    "GateRecords",
    "HistoryEvent",
    "MAX_MEMORIES_PER_CUSTOMER",
    "MAX_MEMORY_BYTES",
    "MAX_MEMORY_NESTING",
    "NEVER",
    "POSTGRES_CONNECT_TIMEOUT_SECONDS",
    "POSTGRES_LOCK_TIMEOUT_SECONDS",
    "SQLITE_BUSY_TIMEOUT_SECONDS",
    "STORE_KEY_ENV",
    "STORE_URL_ENV",
    "DamagedMemoryError",
    "MemoryNotFoundError",
    "Memories",
    "MemoriesRead",
    "MemoryStore",
    "MemoryStoreError",
    "MemoryStoreKeyError",
    "PendingGate",
    "StoreInputError",
    "PostgresMemoryStore",
    "SQLiteMemoryStore",
    "SealedRow",
    "open_store",
    "system_clock",
]
