"""The names `memorybook` exports and the module each comes from. Type checkers read them
here; at run time `__init__.py` imports a name's module when the name is first used."""

from .api_errors import (
    AnswerRefusedError as AnswerRefusedError,
    CallTimeoutError as CallTimeoutError,
    PlainHttpRefusedError as PlainHttpRefusedError,
    ProxySettingError as ProxySettingError,
    describe_api_failure as describe_api_failure,
)
from .config import (
    REMEMBER_AT as REMEMBER_AT,
    TYPESAFE_MODEL as TYPESAFE_MODEL,
)
from .errors import MemorybookError as MemorybookError
from .gates import PendingGates as PendingGates
from .gates import WaitedTooLong as WaitedTooLong
from .in_flight import InFlight as InFlight
from .jev import (
    Jev as Jev,
    default_jev as default_jev,
    request_json as request_json,
)
from .memory import (
    GATE as GATE,
    MEMORY_KEY as MEMORY_KEY,
    InMemoryMemories as InMemoryMemories,
    MissingCustomerIdError as MissingCustomerIdError,
    StateError as StateError,
    as_memory as as_memory,
    customer_id as customer_id,
    remember_probability as remember_probability,
    state_with_memories as state_with_memories,
    ticket_id_of as ticket_id_of,
    worth_keeping as worth_keeping,
)
from .questions import QuestionsError as QuestionsError
from .recording import (
    CommitError as CommitError,
    RecordingError as RecordingError,
)
from .replay import RecordingMissError as RecordingMissError
from .serving import (
    AsyncMemory as AsyncMemory,
    Memory as Memory,
)
from .settings import (
    NEVER as NEVER,
    ConfigError as ConfigError,
    Mode as Mode,
    Settings as Settings,
)
from .stand_in import (
    MadeUpAnswerError as MadeUpAnswerError,
    MadeUpJev as MadeUpJev,
)
from .store import (
    DamagedMemoryError as DamagedMemoryError,
    Memories as Memories,
    MemoryNotFoundError as MemoryNotFoundError,
    MemoryStore as MemoryStore,
    MemoryStoreError as MemoryStoreError,
    MemoryStoreKeyError as MemoryStoreKeyError,
    StoreInputError as StoreInputError,
    open_store as open_store,
)
from .store.turns import CustomerTurns as CustomerTurns
from .wrapper import (
    ask_with_memory as ask_with_memory,
    ask_with_memory_async as ask_with_memory_async,
)
