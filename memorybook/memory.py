"""Generated from notebooks/03_memory_wrapper.ipynb by `python -m tools.export`.

Edit the notebook's cells tagged `pattern` or `export`, not this file."""

__all__ = [
    "ticket_id_of", "InMemoryMemories", "MEMORIES", "MissingCustomerIdError", "customer_id",
    "state_with_memories", "with_memories", "ask_with_memory", "describe_memories",
    "forget_customers", "remember_earlier_tickets",
]


from memorybook.gate import MEMORY_KEY, as_memory, remember_probability, worth_keeping
from memorybook.routing import EARLIER, ROUTE, ask


# pattern: each customer's memories, for as long as the process runs
def ticket_id_of(memory: dict) -> str:
    """The id of the ticket a memory was made from."""
    return memory["request"]["ticket"]["id"]


class InMemoryMemories:
    """Each customer's saved memories, oldest first, with the methods of notebook 7's stores."""

    def __init__(self) -> None:
        self._by_customer: dict[str, list[dict]] = {}

    def recall(self, customer_id: str) -> list[dict]:
        return list(self._by_customer.get(customer_id, []))

    def save(self, customer_id: str, memory: dict) -> list[dict]:
        """Keep one more memory; return those evicted to make room (none: there is no cap)."""
        self._by_customer.setdefault(customer_id, []).append(memory)
        return []

    def forget(self, customer_id: str, ticket_id: str) -> list[dict]:
        """Erase the memories made from one ticket and return them; KeyError if there are none."""
        saved = self._by_customer.get(customer_id, [])
        erased = [memory for memory in saved if ticket_id_of(memory) == ticket_id]
        if not erased:
            raise KeyError(f"customer {customer_id} has no memory of ticket {ticket_id}")
        self._by_customer[customer_id] = [m for m in saved if ticket_id_of(m) != ticket_id]
        return erased

    def forget_customer(self, customer_id: str) -> list[dict]:
        """Erase all of one customer's memories; return what was erased, oldest first."""
        return self._by_customer.pop(customer_id, [])


MEMORIES = InMemoryMemories()


# pattern: ask_with_memory()
from typesafe_sdk import SystemOneResponse


class MissingCustomerIdError(ValueError):
    """The state has no `customer.id`, so there is no customer to file memories under."""


def customer_id(state: dict) -> str:
    """The id of the customer a state is about."""
    customer = state.get("customer") if isinstance(state, dict) else None
    known = isinstance(customer, dict) and isinstance(customer.get("id"), str) and customer["id"]
    if not known:
        shape = f"keys {sorted(state)}" if isinstance(state, dict) else f"a {type(state).__name__}"
        raise MissingCustomerIdError(
            f"ask_with_memory() needs the state to name its customer as `customer.id`; got {shape}."
        )
    return customer["id"]


def state_with_memories(state: dict, memories: list[dict]) -> dict:
    """The state with these memories added under MEMORY_KEY; unchanged when there are none."""
    return {**state, MEMORY_KEY: memories} if memories else state


def with_memories(state: dict, memories=MEMORIES) -> dict:
    """The state as Jev receives it: with the customer's memories, if they have any."""
    return state_with_memories(state, memories.recall(customer_id(state)))


def ask_with_memory(state: dict, questions: dict, memories=MEMORIES) -> SystemOneResponse:
    """ask(), plus memory: the same arguments and the same return value. `memories` is where
    they are kept: the in-kernel ones, unless a store is passed."""
    response = ask(with_memories(state, memories), questions)
    memory = as_memory(state, questions, response)
    if worth_keeping(remember_probability(memory)):
        memories.save(customer_id(state), memory)
    return response


def describe_memories(customer: str, memories=MEMORIES) -> str:
    """The ticket ids of a customer's memories, oldest first, as text."""
    return ", ".join(map(ticket_id_of, memories.recall(customer))) or "none"


def forget_customers(customers, memories=MEMORIES) -> None:
    """Erase these customers' memories, so that what follows starts from none of them."""
    for customer in customers:
        memories.forget_customer(customer)


def remember_earlier_tickets(memories=MEMORIES) -> None:
    """From no memories, send the five earlier tickets through the wrapper, oldest first."""
    forget_customers(dict.fromkeys(customer_id(state) for state in EARLIER), memories)
    for state in EARLIER:
        ask_with_memory(state, ROUTE, memories)
