"""memorybook: a memory per customer for TypeSafe's System One model, Jev.

What an app uses, in one place; each name below is importable from `memorybook` (the service
from `memorybook.service`, the test fixture from `memorybook.testing`):

    AsyncMemory(store=None, *, ask=None, retention=None, remember_at=REMEMBER_AT,
                max_in_flight=None, wait_at_most=None, sweep_every=None, store_options=None,
                settings=None)
                                          the memory an app holds: `async with`, or
                                          FastAPI(lifespan=memory.lifespan); .ask(state,
                                          questions), .memories(), .history(), .forget(),
                                          .forget_customer(), .ready(), .metrics
                                          (memorybook/serving.py)
    Memory(store=None, **options)         the same, for scripts: `with`, each call blocking
    Settings.from_environment(**given)    every setting, read now from its variable (the
                                          README's table), as each part given no `settings=`
                                          reads them when made; Settings(...) holds only what
                                          it is given. NEVER: a retention that never expires
    Jev(recording=None, *, mode=None, model=TYPESAFE_MODEL, client=None, settings=None)
                                          asks Jev: .ask(state, questions), .ask_async(...);
                                          replay, record or live (memorybook/jev.py says when)
    ask_with_memory(state, questions, memories, *, ask=None, remember_at=REMEMBER_AT)
    ask_with_memory_async(state, questions, memories, *, gates, ask=None, ask_gate=None,
                          remember_at=REMEMBER_AT, wait_at_most=None, metrics=None)
                                          ask() plus memory: the same arguments and response
    GATE, as_memory, remember_probability, worth_keeping, REMEMBER_AT
                                          the gate: is this request worth remembering?
    customer_id, state_with_memories, MEMORY_KEY
                                          where memories are filed and where they go in a state
    InMemoryMemories()                    memories for as long as the process runs
    Memories, MemoryStore                 what `memories` may be, as protocols for type hints
    open_store(url=None, *, key=None, old_keys=None, max_memories=50, timeout=None,
               retention=None, clock=None, settings=None)
                                          encrypted memories in SQLite or PostgreSQL, expiring
                                          after `retention`, or NEVER (the default); read with
                                          `old_keys` too while the key rotates
    The pieces an AsyncMemory is built from, for an app that wires them itself:
    PendingGates(turns=None)              each customer's turn in one process (the async wrapper)
    InFlight(limit=None, wait_at_most=None, *, settings=None)
                                          at most `limit` requests to Jev at once (by default
                                          the settings': 8), replies first
    CustomerTurns(url=None, *, at_most=TURNS_AT_ONCE, store=None, **options)
                                          ... and across processes sharing a PostgreSQL
                                          store, on at most `at_most` connections
    MadeUpJev(answers=None)               a stand-in for Jev in tests: .answer(question_id,
                                          answer) programs each question; .ask, .ask_async
    service.create_app(store_url=None, *, retention=None, ask=None, settings=None,
                       store_options=None, questions=ROUTE)
                                          the FastAPI service (the `service` extra)
    testing                               pytest fixtures: replay an app's recording, record it;
                                          made_up_jev, a MadeUpJev for each test
    MemorybookError                       the root of every error above; each is exported here
                                          (StateError: a state ask_with_memory() cannot
                                          take; StoreInputError where no store would keep
                                          it; both are ValueErrors;
                                          DamagedMemoryError: a memory recall() cannot read)
    describe_api_failure(error, *, quoting_the_api=True, settings=None)
                                          a failed live call, which raises the SDK's own
                                          TypeSafeError, in one line without secrets

Importing this package opens no data file and starts nothing, and it loads no module
before one of its names is used: `__init__.pyi` lists the names and where each comes from.
So an app that uses only the store (`from memorybook.store import open_store`) never loads
the SDK or the client.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
