"""What a store accepts: customer and ticket ids, memories (shape, size, nesting), its limits.

Here too, below every other module of the store: the errors it raises, and `shown()`, a value as
their messages show it.
"""

from __future__ import annotations

import json
import math

from memorybook.errors import MemorybookError

MAX_MEMORY_BYTES = 1_000_000  # of JSON text per memory: a ticket and its answers, not attachments
# Levels of dicts and lists in one memory: far below what Python decodes at any stack depth.
MAX_MEMORY_NESTING = 100
# A ticket id that is not blank, as a pattern (the service's schema): it holds a character that
# str.strip(), which checked_ticket_id() uses, keeps. Each character str.isspace() counts is
# named, never `\s`, which means other characters to each engine reading the schema (Python's
# `re`, Python's with re.ASCII as Schemathesis reads it, pydantic's Rust, ECMA-262's).
NOT_BLANK_PATTERN = r"[^\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
# What json.dumps(memory, allow_nan=False) makes anew at each call, made once.
_MEMORY_JSON = json.JSONEncoder(allow_nan=False)


class MemoryStoreError(MemorybookError):
    """The memory store could not do what was asked; the message says what to do."""


class StoreInputError(MemorybookError, ValueError):
    """An id, a memory or a setting the store does not take; the message says why. Nothing was
    written. A ValueError too, as Python's own checks of arguments raise."""


class MemoryStoreKeyError(MemoryStoreError):
    """The encryption key is missing, malformed, or not the one the store was made with."""


class DamagedMemoryError(MemoryStoreError):
    """``recall()`` met a memory of the customer's that cannot be read: changed or damaged
    outside memorybook, or saved by an early version nested too deeply to decode. The customer's
    memories cannot be recalled until it is erased: ``forget()`` of ``ticket_id`` (its ticket,
    or None when that cannot be read either), ``forget_customer()``, or a backup restored."""

    def __init__(self, message: str, customer_id: str, ticket_id: str | None) -> None:
        super().__init__(message)
        self.customer_id, self.ticket_id = customer_id, ticket_id


class MemoryNotFoundError(MemoryStoreError, KeyError):
    """``forget()`` was asked for a ticket the customer has no memory of, in a store or in
    InMemoryMemories. A `KeyError` too, as a dict's lookup raises."""

    def __str__(self) -> str:  # the message as given, not quoted as KeyError's would be
        return str(self.args[0]) if self.args else ""


def memory_not_found(customer_id: str, ticket_id: str, where: str) -> MemoryNotFoundError:
    """The error ``forget()`` raises for a ticket the customer has no memory of `where`."""
    return MemoryNotFoundError(
        f"Customer {shown(customer_id)} has no memory of ticket {shown(ticket_id)} in {where}; "
        "check both ids (they are matched exactly, case and spaces included) against recall()."
    )


class UnreadableMemory(Exception):
    """A stored row whose memory cannot be read; the message says why."""


def shown(value: object, limit: int = 60) -> str:
    """A value for an error message: its repr, cut short so a huge id cannot flood the message,
    then with its length: a string's own (not its repr's, quotes and escapes included)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(value if isinstance(value, str) else text):,} characters)"


def check_limits(max_memories: object, timeout: object) -> None:
    """Refuse a per-customer cap or a time limit (in seconds) that is not a positive number."""
    if not isinstance(max_memories, int) or isinstance(max_memories, bool) or max_memories < 1:
        raise StoreInputError(f"max_memories must be a positive integer, got {shown(max_memories)}")
    if (not isinstance(timeout, (int, float)) or isinstance(timeout, bool)
            or not math.isfinite(timeout) or timeout <= 0):
        raise StoreInputError(f"timeout must be a positive number of seconds, got {shown(timeout)}")


def checked_customer_id(customer_id: object) -> str:
    if not isinstance(customer_id, str) or not customer_id.strip():
        raise StoreInputError(
            f"customer_id must be a non-empty string, got {shown(customer_id)}: every memory "
            "belongs to exactly one customer."
        )
    return customer_id


def checked_ticket_id(ticket_id: object) -> str:
    if not isinstance(ticket_id, str) or not ticket_id.strip():
        raise StoreInputError(f"ticket_id must be a non-empty string, got {shown(ticket_id)}")
    return ticket_id


def checked_memory_json(customer_id: str, memory: object) -> tuple[str, str]:
    """Return (ticket id, JSON text) of a memory that may be saved for this customer."""
    not_a_memory = StoreInputError(
        "A memory must be a dict shaped like "
        "{'request': {'customer': {'id': ...}, 'ticket': {'id': ...}}, ...}"
    )
    if not isinstance(memory, dict):
        raise not_a_memory
    try:
        memory_customer_id = memory["request"]["customer"]["id"]
        ticket_id = memory["request"]["ticket"]["id"]
    except (KeyError, TypeError, IndexError):
        raise not_a_memory from None
    if memory_customer_id != customer_id:
        raise StoreInputError(
            f"This memory is for customer {shown(memory_customer_id)} (request.customer.id) but "
            f"was saved for {shown(customer_id)}; refusing to file it under the wrong customer."
        )
    if not isinstance(ticket_id, str) or not ticket_id.strip():
        raise StoreInputError(
            f"request.ticket.id must be a non-empty string, got {shown(ticket_id)}")
    shape = _shape_beyond_limits(memory)
    if shape == "too large":
        raise StoreInputError(
            f"The memory of ticket {shown(ticket_id)} holds more than {MAX_MEMORY_BYTES:,} values "
            "(a list or dict it holds more than once counts each time, as JSON would write it), "
            f"so it is more than the {MAX_MEMORY_BYTES:,} bytes of JSON a memory may hold."
        )
    if shape == "too deep":
        raise StoreInputError(
            f"The memory of ticket {shown(ticket_id)} is nested more than {MAX_MEMORY_NESTING} "
            "levels deep (dicts and lists within each other), or contains itself; a memory may "
            f"nest at most {MAX_MEMORY_NESTING} levels."
        )
    try:
        text = _MEMORY_JSON.encode(memory)
    except (TypeError, ValueError) as error:
        raise StoreInputError(
            f"The memory of ticket {shown(ticket_id)} is not JSON-serialisable: {error}"
        ) from None
    if len(text.encode("utf-8")) > MAX_MEMORY_BYTES:
        raise StoreInputError(
            f"The memory of ticket {shown(ticket_id)} is {len(text.encode('utf-8')):,} bytes of "
            f"JSON; a memory may hold at most {MAX_MEMORY_BYTES:,}. Keep what the next request "
            "needs, not whole attachments."
        )
    change = _first_change(memory, json.loads(text))  # depth is bounded by the check above
    if change is not None:
        raise StoreInputError(
            f"The memory of ticket {shown(ticket_id)} would not come back unchanged: {change}. "
            "A memory may hold only dicts with string keys, lists, strings, numbers, booleans "
            "and None."
        )
    return ticket_id, text


def _shape_beyond_limits(value: object) -> str | None:
    """"too deep" when dicts and lists nest more than MAX_MEMORY_NESTING levels in ``value``,
    "too large" when they hold more values than its JSON could within MAX_MEMORY_BYTES, or None.

    Each value held writes at least one byte of JSON, and a list or dict held twice is written
    twice. Found iteratively, measuring each list and dict once (by id) however often it is
    held, so that lists sharing references (x = [x, x], again and again) cost one step a level.
    A value that contains itself nests without end, so it is deeper than any limit.
    """
    if _children(value) is None or _plainly_within_limits(value):
        return None
    measured: dict[int, tuple[int, int]] = {}  # id -> (levels of nesting, values held)
    on_path = {id(value)}
    path = [(value, iter(_children(value)), [1, len(_children(value))])]
    while path:
        item, children, totals = path[-1]
        for child in children:
            held = _children(child)
            if held is None:
                continue
            known = measured.get(id(child))
            if known is None:
                if id(child) in on_path or len(path) >= MAX_MEMORY_NESTING:
                    return "too deep"
                on_path.add(id(child))
                path.append((child, iter(held), [1, len(held)]))
                break
            if len(path) + known[0] > MAX_MEMORY_NESTING:
                return "too deep"
            totals[0], totals[1] = max(totals[0], known[0] + 1), totals[1] + known[1]
            if totals[1] > MAX_MEMORY_BYTES:
                return "too large"
        else:
            path.pop()
            on_path.discard(id(item))
            measured[id(item)] = (totals[0], totals[1])
            if totals[1] > MAX_MEMORY_BYTES:
                return "too large"
            if path:
                parent = path[-1][2]
                parent[0], parent[1] = max(parent[0], totals[0] + 1), parent[1] + totals[1]
    return None


_CONTAINERS = (dict, list, tuple)
_AT_A_GLANCE = 10_000  # values a memory may hold for _plainly_within_limits() to say so


def _plainly_within_limits(value: dict | list | tuple) -> bool:
    """True when ``value``, walked as its JSON is written (a list held twice, twice), holds at
    most _AT_A_GLANCE values and nests at most MAX_MEMORY_NESTING levels: as a memory usually
    does, found in under half the time _shape_beyond_limits() takes. False leaves it to that
    count: the walk stops once either is over, so no value, however built, costs it more than
    _AT_A_GLANCE steps (one that contains itself nests ever deeper)."""
    pending, values = [(value, 1)], 0
    while pending:
        item, level = pending.pop()
        held = _children(item)
        values += len(held)
        if values > _AT_A_GLANCE:
            return False
        for child in held:
            if isinstance(child, _CONTAINERS):
                if level >= MAX_MEMORY_NESTING:
                    return False
                pending.append((child, level + 1))
    return True


def _children(item: object) -> list | tuple | None:
    """The values a dict or list holds, or None for any other value."""
    if isinstance(item, dict):
        return list(item.values())
    return item if isinstance(item, (list, tuple)) else None


def _first_change(original: object, decoded: object) -> str | None:
    """Where ``decoded`` (the memory read back from its JSON) differs from ``original``, if it does.

    JSON turns tuples into lists and dict keys such as 1, None or 2.5 into strings, silently.
    Either makes the two unequal; JSON writes booleans and numbers as they compare, so equal
    ones are the same memory, and only unequal ones are searched.
    """
    if decoded == original:
        return None
    pending = [(original, decoded, "memory")]
    while pending:
        before, after, where = pending.pop()
        if isinstance(after, dict):
            # Only a dict becomes a JSON object, and it comes back with as many keys unless two
            # of them turn into the same string: then a key is not a string.
            odd_keys = [key for key in before if not isinstance(key, str)]
            if odd_keys:
                return f"the key {shown(odd_keys[0])} at {where} would come back as a string"
            pending.extend((before[key], after[key], f"{where}[{key!r}]") for key in after)
        elif isinstance(after, list):
            if not isinstance(before, list):
                return f"the {type(before).__name__} at {where} would come back as a list"
            pending.extend((item, back, f"{where}[{index}]")
                           for index, (item, back) in enumerate(zip(before, after, strict=True)))
        elif isinstance(before, bool) != isinstance(after, bool) or before != after:
            return f"{shown(before)} at {where} would come back as {shown(after)}"
    return None
