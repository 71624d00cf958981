"""What the cookbook's wrapper needs from a memory store."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class MemoryStore(Protocol):
    """What the cookbook's wrapper needs from a memory store."""

    notices: list[str]

    def recall(self, customer_id: str) -> list[dict]: ...

    def save(self, customer_id: str, memory: dict) -> list[dict]: ...

    def forget(self, customer_id: str, ticket_id: str) -> list[dict]: ...

    def forget_customer(self, customer_id: str) -> list[dict]: ...

    def close(self) -> None: ...

    def __enter__(self) -> MemoryStore: ...

    def __exit__(self, *exc_info: object) -> None: ...
