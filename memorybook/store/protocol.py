"""What the cookbook's wrapper needs from the memories it is given, and what a store adds."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Memories(Protocol):
    """Each customer's memories, oldest first: notebook 3's in-kernel ones, or a store.

    `save()` returns the memories it evicted to make room; `forget()` returns those it erased and
    raises a `KeyError` when the customer has no memory of that ticket.
    """

    def recall(self, customer_id: str) -> list[dict]: ...

    def save(self, customer_id: str, memory: dict) -> list[dict]: ...

    def forget(self, customer_id: str, ticket_id: str) -> list[dict]: ...

    def forget_customer(self, customer_id: str) -> list[dict]: ...


@runtime_checkable
class MemoryStore(Memories, Protocol):
    """Memories kept outside the process: a store also reports what it noticed, and closes."""

    notices: list[str]

    def close(self) -> None: ...

    def __enter__(self) -> MemoryStore: ...

    def __exit__(self, *exc_info: object) -> None: ...
