"""memorybook: a memory per customer for TypeSafe's System One model, Jev.

What an app uses, in one place; each name below is importable from `memorybook` (the service
from `memorybook.service`, the test fixture from `memorybook.testing`):

    Jev(recording=None, *, mode=None)     asks Jev: .ask(state, questions), .ask_async(...);
                                          replay, record or live (memorybook/jev.py says when)
    ask_with_memory(state, questions, memories, *, ask=None, remember_at=REMEMBER_AT)
    ask_with_memory_async(state, questions, memories, *, gates, ask=None, remember_at=...)
                                          ask() plus memory: the same arguments and response
    GATE, as_memory, remember_probability, worth_keeping, REMEMBER_AT
                                          the gate: is this request worth remembering?
    customer_id, state_with_memories, MEMORY_KEY
                                          where memories are filed and where they go in a state
    InMemoryMemories()                    memories for as long as the process runs
    open_store(url, *, retention=None, max_memories=50, key=None)
                                          encrypted memories in SQLite or PostgreSQL, expiring
    PendingGates(turns=None)              each customer's turn in one process (the async wrapper)
    InFlight(limit=8)                     at most so many requests to Jev at once, replies first
    CustomerTurns(url)                    ... and across processes sharing a PostgreSQL store
    MadeUpJev(answer)                     a stand-in for Jev in unit tests
    service.create_app(store_url=None, *, retention=None, ask=None, settings=None,
                       store_options=None)
                                          the FastAPI service (pip install "memorybook[service]");
                                          its settings: memorybook/service_settings.py
    testing                               pytest fixtures: replay an app's recording, record it
    MemorybookError                       the root of every error above; each is exported here

Nothing is read, opened or started when this package is imported.
"""

from memorybook.api_errors import (
    AnswerRefusedError,
    CallTimeoutError,
    LiveCallFailed,
    PlainHttpRefusedError,
    ProxySettingError,
)
from memorybook.config import REMEMBER_AT, TYPESAFE_MODEL, ConfigError
from memorybook.errors import MemorybookError
from memorybook.gates import PendingGates
from memorybook.in_flight import InFlight
from memorybook.jev import Jev, Mode, default_jev, request_json
from memorybook.memory import (
    GATE,
    MEMORY_KEY,
    InMemoryMemories,
    MissingCustomerIdError,
    as_memory,
    customer_id,
    remember_probability,
    state_with_memories,
    ticket_id_of,
    worth_keeping,
)
from memorybook.recording import CommitError, RecordingError
from memorybook.replay import RecordingMissError
from memorybook.stand_in import MadeUpJev
from memorybook.store import (
    MemoryNotFoundError,
    MemoryStore,
    MemoryStoreError,
    MemoryStoreKeyError,
    open_store,
)
from memorybook.store.turns import CustomerTurns
from memorybook.wrapper import ask_with_memory, ask_with_memory_async

__all__ = [
    "GATE", "MEMORY_KEY", "REMEMBER_AT", "TYPESAFE_MODEL",
    "AnswerRefusedError", "CallTimeoutError", "CommitError", "ConfigError", "CustomerTurns",
    "InFlight", "InMemoryMemories", "Jev", "LiveCallFailed", "MadeUpJev", "MemorybookError",
    "MemoryNotFoundError", "MemoryStore", "MemoryStoreError", "MemoryStoreKeyError",
    "MissingCustomerIdError", "Mode", "PendingGates", "PlainHttpRefusedError",
    "ProxySettingError", "RecordingError", "RecordingMissError",
    "as_memory", "ask_with_memory", "ask_with_memory_async", "customer_id", "default_jev",
    "open_store", "remember_probability", "request_json", "state_with_memories", "ticket_id_of",
    "worth_keeping",
]
