"""Time in the store: the clock it reads, how long memories live, and the history of events.

A store reads the time only from its ``clock`` (default: the system's, in UTC), so tests and
notebooks set it. Times are stored as whole microseconds since 1970 UTC.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from memorybook.settings import MAX_RETENTION as MAX_RETENTION
from memorybook.settings import NEVER, NeverType
from memorybook.store.validation import StoreInputError, shown

Clock = Callable[[], datetime]

# What can happen to a memory, as history() names it.
SAVED, EVICTED, FORGOTTEN, EXPIRED, SUPERSEDED = (
    "saved", "evicted", "forgotten", "expired", "superseded"
)
EVENTS = (SAVED, EVICTED, FORGOTTEN, EXPIRED, SUPERSEDED)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class HistoryEvent(NamedTuple):
    """One thing that happened to one of a customer's memories: never the memory itself.

    ``ticket_id`` is None for a memory that could not be read when it was evicted or expired, or
    whose row lacked its ticket id sealed for history (written by an earlier version while this
    one upgraded the store).
    """

    event: str
    ticket_id: str | None
    at: datetime


def system_clock() -> datetime:
    return datetime.now(UTC)


Retention = timedelta | NeverType  # how long a memory lives: a time, or NEVER


def checked_retention(retention: object) -> timedelta | None:
    """A store's default time to live, as it keeps it: a positive timedelta of at most
    MAX_RETENTION, or None for NEVER (memories last until forgotten). A store given None, as
    its class's default is, keeps memories until forgotten too; open_store() and the service
    give it the settings' instead (memorybook/settings.py, DEFAULT_RETENTION)."""
    if retention is None or retention is NEVER:
        return None
    if not isinstance(retention, timedelta) or retention <= timedelta(0):
        raise StoreInputError(
            f"retention must be a positive datetime.timedelta (or NEVER), got {shown(retention)}"
        )
    if retention > MAX_RETENTION:
        raise StoreInputError(
            f"retention must be at most {MAX_RETENTION.days:,} days (a hundred years), got "
            f"{retention.days:,} days; for memories that last until forgotten, pass NEVER"
        )
    return retention


def checked_clock(clock: object) -> Clock:
    if clock is None:
        return system_clock
    if not callable(clock):
        raise StoreInputError(
            f"clock must be a function returning the time as an aware datetime, got "
            f"{shown(clock)}"
        )
    return clock


def micros(moment: object, what: str) -> int:
    """An aware datetime as microseconds since 1970 UTC; a naive one is refused."""
    if not isinstance(moment, datetime) or moment.utcoffset() is None:
        raise StoreInputError(
            f"{what} must be a timezone-aware datetime (e.g. datetime(2026, 8, 4, tzinfo=UTC)), "
            f"got {shown(moment)}"
        )
    return (moment - _EPOCH) // timedelta(microseconds=1)


def moment(value: int) -> datetime:
    """The UTC datetime stored as ``value`` microseconds since 1970."""
    return _EPOCH + timedelta(microseconds=int(value))
