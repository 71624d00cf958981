"""The writes that run as one call, a save and a customer's erasure: their statements, defined
once for both backends.

Neither needs anything read back before it is done: each memory row carries its ticket id sealed
as history seals it (``sealed_ticket``), so the history rows of memories that expire or are
evicted are copied from their rows in SQL, with nothing to decrypt. SQLite runs the statements
one by one inside its write transaction; PostgreSQL runs them inside a function made from them
(``postgres_function()``), so that each is one statement and waits for the server once.

Every statement of a save finds its rows through an index, reading no other row of the
customer's (the customer's newest rows are read only once the cap is reached): a save costs the
same whatever the customer holds. Its steps run only when needed: expiry when a memory expired,
eviction over the cap.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

from memorybook.store.retention import EVICTED, EXPIRED, SAVED
from memorybook.store.schema import (
    COUNTS_TABLE,
    HISTORY_TABLE,
    MEMORIES_TABLE,
    PENDING_TABLE,
    POSTGRES,
    Dialect,
)

# A save's parameters, by name, and whether each is bytes or an integer.
SAVE_PARAMETERS = {
    "customer": "bytes",  # the customer's digest
    "ticket": "bytes",  # the ticket's digest
    "sealed": "bytes",  # the memory, sealed
    "sealed_ticket": "bytes",  # the ticket id, sealed for history
    "expires_at": "integer",  # when the memory ends (microseconds since 1970 UTC), or NULL
    "now": "integer",  # the store's clock
    "max_memories": "integer",  # the cap
    "all_rows": "integer",  # a LIMIT that limits nothing (SQLite has no OFFSET without LIMIT)
    # History's ticket for a row without its sealed ticket id (NULL): one written by a replica
    # still running an earlier version while this one upgraded, or loaded by hand.
    "unknown_ticket": "bytes",
}

_EXPIRED = "customer_digest = :customer AND expires_at <= :now"
_HISTORY_COLUMNS = f"{HISTORY_TABLE} (customer_digest, event, at, sealed_ticket)"
UNKNOWN_TICKET = b""  # never a sealed value, which is at least its nonce and tag
_TICKET = "COALESCE(sealed_ticket, :unknown_ticket)"  # a row's ticket id, as history holds it
# The customer's rows beyond the newest max_memories (read only once the count says so).
_OVER_THE_CAP = (
    f"id IN (SELECT id FROM {MEMORIES_TABLE} WHERE customer_digest = :customer"
    " ORDER BY id DESC LIMIT :all_rows OFFSET :max_memories)"
)


class Step(NamedTuple):
    """Statements a write runs, in order, when ``when`` (an SQL condition; None: always) holds.
    The rows of the one with RETURNING are the write's result."""

    when: str | None
    statements: tuple[str, ...]


SAVE_STEPS = (
    # The customer's expired memories go to history, each at the time it expired (in the order
    # they expired, as history is read: the expiry index gives it), leave the count, then go.
    # (Their earliest expiry, from the expiry index whatever the plan: an EXISTS over them may be
    # planned, for any parameters, as a scan of the table, which a table of few customers favours.)
    Step(f"(SELECT MIN(expires_at) FROM {MEMORIES_TABLE} WHERE customer_digest = :customer"
         " AND expires_at IS NOT NULL) <= :now", (
        f"INSERT INTO {_HISTORY_COLUMNS} SELECT customer_digest, '{EXPIRED}', expires_at,"
        f" {_TICKET} FROM {MEMORIES_TABLE} WHERE {_EXPIRED} ORDER BY expires_at, id",
        f"UPDATE {COUNTS_TABLE} SET memories = memories - (SELECT COUNT(*) FROM {MEMORIES_TABLE}"
        f" WHERE {_EXPIRED}) WHERE customer_digest = :customer",
        f"DELETE FROM {MEMORIES_TABLE} WHERE {_EXPIRED}",
    )),
    # The memory, its "saved" event, and the count.
    Step(None, (
        f"INSERT INTO {MEMORIES_TABLE}"
        " (customer_digest, ticket_digest, sealed, expires_at, sealed_ticket)"
        " VALUES (:customer, :ticket, :sealed, :expires_at, :sealed_ticket)",
        f"INSERT INTO {_HISTORY_COLUMNS} VALUES (:customer, '{SAVED}', :now, :sealed_ticket)",
        f"INSERT INTO {COUNTS_TABLE} (customer_digest, memories) VALUES (:customer, 1)"
        f" ON CONFLICT (customer_digest) DO UPDATE SET memories = {COUNTS_TABLE}.memories + 1",
    )),
    # Over the cap, the oldest rows go to history, then go (their rows are the save's result:
    # the last statement with RETURNING), and the count is the cap.
    Step(f"(SELECT memories FROM {COUNTS_TABLE} WHERE customer_digest = :customer)"
         " > :max_memories", (
        f"INSERT INTO {_HISTORY_COLUMNS} SELECT customer_digest, '{EVICTED}', :now,"
        f" {_TICKET} FROM {MEMORIES_TABLE} WHERE {_OVER_THE_CAP} ORDER BY id",
        f"DELETE FROM {MEMORIES_TABLE} WHERE {_OVER_THE_CAP} RETURNING id, ticket_digest, sealed",
        f"UPDATE {COUNTS_TABLE} SET memories = :max_memories WHERE customer_digest = :customer",
    )),
)
EXPIRING = SAVE_STEPS[0]  # also what sweep() runs for each customer
EVICTING = SAVE_STEPS[2]  # its rows with RETURNING are the memories evicted
EXPIRED_COUNT = f"SELECT COUNT(*) FROM {MEMORIES_TABLE} WHERE {_EXPIRED}"
_RETURNING = " RETURNING "

# Erasing a customer: its memories (returned), history, count and pending gates (a gate still to
# run would save a memory after the erasure).
ERASE_PARAMETERS = {"customer": "bytes"}
ERASE_STEPS = (Step(None, (
    f"DELETE FROM {MEMORIES_TABLE} WHERE customer_digest = :customer"
    " RETURNING id, ticket_digest, sealed",
    f"DELETE FROM {HISTORY_TABLE} WHERE customer_digest = :customer",
    f"DELETE FROM {COUNTS_TABLE} WHERE customer_digest = :customer",
    f"DELETE FROM {PENDING_TABLE} WHERE customer_digest = :customer",
)),)

SAVE_FUNCTION, ERASE_FUNCTION = "memorybook_save", "memorybook_erase"
_PARAMETER = re.compile(r":([a-z_]+)")


@functools.cache
def _with_placeholders(statement: str) -> tuple[str, tuple[str, ...]]:
    return _PARAMETER.sub("?", statement), tuple(_PARAMETER.findall(statement))


def positional(statement: str, parameters: dict[str, object]) -> tuple[str, tuple]:
    """A statement of a write written with ``?`` placeholders, and its parameters in order."""
    sql, names = _with_placeholders(statement)
    return sql, tuple(parameters[name] for name in names)


def postgres_function(name: str, parameters: dict[str, str], steps: tuple[Step, ...],
                      dialect: Dialect = POSTGRES) -> str:
    """The PL/pgSQL function ``name`` that runs a write's steps in one call, after taking the
    customer's write lock (its last argument, ``lock_id``); it returns the rows of the statement
    with RETURNING (id, ticket digest, sealed). Its other arguments are ``parameters``, in order;
    in PostgreSQL's default isolation each statement sees what was committed before it ran, as
    in a transaction of statements; the server plans them once a connection."""
    types = {"bytes": dialect.bytes_type, "integer": dialect.integer_type}
    arguments = ", ".join(
        [*(f"p_{parameter} {types[kind]}" for parameter, kind in parameters.items()),
         f"p_lock_id {dialect.integer_type}"]
    )
    body = ["  PERFORM pg_advisory_xact_lock(p_lock_id);"]
    for step in steps:
        lines = []
        for statement in step.statements:
            if _RETURNING in statement:  # its rows are the function's
                statement = (f"RETURN QUERY WITH returned AS ({statement})"
                             " SELECT returned.* FROM returned")
            lines.append(f"{statement};")
        if step.when is None:
            body += [f"  {line}" for line in lines]
        else:
            body += [f"  IF {step.when} THEN", *(f"    {line}" for line in lines), "  END IF;"]
    text = _PARAMETER.sub(r"p_\1", "\n".join(body))
    return (
        f"CREATE OR REPLACE FUNCTION {name}({arguments})"
        f" RETURNS TABLE (row_id {dialect.integer_type}, row_ticket {dialect.bytes_type},"
        f" row_sealed {dialect.bytes_type}) LANGUAGE plpgsql AS $write$\nBEGIN\n"
        + text + "\nEND\n$write$"
    )
