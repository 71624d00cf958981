"""The writes that run as one call, a save, a customer's erasure and a batch of a sweep: their
statements, defined once for both backends.

None needs anything read back before it is done: each memory row carries its ticket id sealed
as history seals it (``sealed_ticket``), so the history rows of memories that expire or are
evicted are copied from their rows in SQL, with nothing to decrypt. SQLite runs the statements
one by one inside its write transaction; PostgreSQL runs them inside a function made from them
(``postgres_function()``), so that each is one statement and waits for the server once.

Every statement of a save finds its rows through an index, reading no other row of the
customer's (the customer's newest rows are read only once the cap is reached): a save costs the
same whatever the customer holds. Its steps run only when needed: expiry and eviction only over
the cap, which the count's statement says (its RETURNING). A save below the cap runs three
statements (the memory, the count, its history row), where a bare write of the memory and its
history would run two.

A sweep expires many customers' memories in one transaction (``SWEEP``), in batches small
enough that none holds its locks for long.
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


class Statement(NamedTuple):
    """One statement of a write. With ``sets``, its RETURNING gives one row of one value, the
    flag of that name that a later step needs; otherwise, the rows of its RETURNING, if it has
    one, are the write's result."""

    sql: str
    sets: str | None = None


class Step(NamedTuple):
    """Statements a write runs, in order, when the flag ``when`` (set by an earlier statement)
    is true; None: always."""

    when: str | None
    statements: tuple[Statement, ...]


class Write(NamedTuple):
    """A write run as one call: its steps, its parameters by name (``bytes``, ``integer`` or
    ``bytes list``), the columns of its result, and the PostgreSQL function made from it.

    ``locks`` names the customers' write locks the function takes first: ``customer``, that of
    its customer, waited for; ``customers if free``, that of each of its ``customers`` whose
    lock no other transaction holds, the others being left out of the write (as if they had no
    rows) rather than waited for, so that two such writes never wait for each other."""

    function: str
    parameters: dict[str, str]
    steps: tuple[Step, ...]
    returns: dict[str, str]
    locks: str = "customer"


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
DELETED_ROWS = {"row_id": "integer", "row_ticket": "bytes", "row_sealed": "bytes"}

_EXPIRED = "customer_digest = :customer AND expires_at <= :now"
_HISTORY_COLUMNS = f"{HISTORY_TABLE} (customer_digest, event, at, sealed_ticket)"
UNKNOWN_TICKET = b""  # never a sealed value, which is at least its nonce and tag
_TICKET = "COALESCE(sealed_ticket, :unknown_ticket)"  # a row's ticket id, as history holds it
# The customer's rows beyond the newest max_memories (read only once the count says so).
_OVER_THE_CAP = (
    f"id IN (SELECT id FROM {MEMORIES_TABLE} WHERE customer_digest = :customer"
    " ORDER BY id DESC LIMIT :all_rows OFFSET :max_memories)"
)

SAVE = Write("memorybook_save", SAVE_PARAMETERS, (
    # The memory, and the count, which says whether the customer is now over the cap.
    Step(None, (
        Statement(f"INSERT INTO {MEMORIES_TABLE}"
                  " (customer_digest, ticket_digest, sealed, expires_at, sealed_ticket)"
                  " VALUES (:customer, :ticket, :sealed, :expires_at, :sealed_ticket)"),
        Statement(f"INSERT INTO {COUNTS_TABLE} (customer_digest, memories) VALUES (:customer, 1)"
                  f" ON CONFLICT (customer_digest) DO UPDATE SET memories ="
                  f" {COUNTS_TABLE}.memories + 1 RETURNING memories > :max_memories",
                  sets="over"),
    )),
    # Over the cap, expired memories go first: they take no room under it (below the cap, they
    # wait for sweep(); none is ever recalled). Whether the customer has any: their earliest
    # expiry, from the expiry index whatever the plan (an EXISTS over them may be planned, for
    # any parameters, as a scan of the table, which a table of few customers favours). The new
    # memory itself has not expired: its expires_at is after the clock's time, or NULL.
    Step("over", (Statement(
        f"SELECT (SELECT MIN(expires_at) FROM {MEMORIES_TABLE} WHERE customer_digest ="
        " :customer AND expires_at IS NOT NULL) <= :now", sets="expired"),)),
    # They go to history, each at the time it expired (in the order they expired, as history
    # is read: the expiry index gives it), leave the count, which says again whether the
    # customer is over the cap, then go.
    Step("expired", (
        Statement(f"INSERT INTO {_HISTORY_COLUMNS} SELECT customer_digest, '{EXPIRED}',"
                  f" expires_at, {_TICKET} FROM {MEMORIES_TABLE} WHERE {_EXPIRED}"
                  " ORDER BY expires_at, id"),
        Statement(f"UPDATE {COUNTS_TABLE} SET memories = memories - (SELECT COUNT(*) FROM"
                  f" {MEMORIES_TABLE} WHERE {_EXPIRED}) WHERE customer_digest = :customer"
                  " RETURNING memories > :max_memories", sets="over"),
        Statement(f"DELETE FROM {MEMORIES_TABLE} WHERE {_EXPIRED}"),
    )),
    # The memory's "saved" event, after those (one expiring as it is saved is listed first).
    Step(None, (Statement(f"INSERT INTO {_HISTORY_COLUMNS}"
                          f" VALUES (:customer, '{SAVED}', :now, :sealed_ticket)"),)),
    # Still over the cap, the oldest rows go to history, then go (their rows are the save's
    # result), and the count is the cap.
    Step("over", (
        Statement(f"INSERT INTO {_HISTORY_COLUMNS} SELECT customer_digest, '{EVICTED}', :now,"
                  f" {_TICKET} FROM {MEMORIES_TABLE} WHERE {_OVER_THE_CAP} ORDER BY id"),
        Statement(f"DELETE FROM {MEMORIES_TABLE} WHERE {_OVER_THE_CAP}"
                  " RETURNING id, ticket_digest, sealed"),
        Statement(f"UPDATE {COUNTS_TABLE} SET memories = :max_memories"
                  " WHERE customer_digest = :customer"),
    )),
), DELETED_ROWS)

# Erasing a customer: its memories (returned), history, count and pending gates (a gate still to
# run would save a memory after the erasure).
ERASE = Write("memorybook_erase", {"customer": "bytes"}, (Step(None, (
    Statement(f"DELETE FROM {MEMORIES_TABLE} WHERE customer_digest = :customer"
              " RETURNING id, ticket_digest, sealed"),
    Statement(f"DELETE FROM {HISTORY_TABLE} WHERE customer_digest = :customer"),
    Statement(f"DELETE FROM {COUNTS_TABLE} WHERE customer_digest = :customer"),
    Statement(f"DELETE FROM {PENDING_TABLE} WHERE customer_digest = :customer"),
)),), DELETED_ROWS)

# A batch of a sweep: these customers' expired memories go to history, each at the time it
# expired (in the order of the expiry index: customer, then expiry), leave their customer's
# count and go. Its result: the customer of each memory gone. A batch holds at most
# SWEEP_BATCH_CUSTOMERS customers (PostgreSQL: a lock each), and their memories expired at most
# SWEEP_BATCH_ROWS, but for a customer who alone has more, whose batch is theirs alone (as a
# save expires all of a customer's expired memories at once).
SWEEP_BATCH_CUSTOMERS = 250
SWEEP_BATCH_ROWS = 1_000
_SWEPT = "customer_digest IN (:customers) AND expires_at <= :now"
SWEEP = Write("memorybook_sweep", {
    "customers": "bytes list", "now": "integer", "unknown_ticket": "bytes",
}, (Step(None, (
    Statement(f"INSERT INTO {_HISTORY_COLUMNS} SELECT customer_digest, '{EXPIRED}', expires_at,"
              f" {_TICKET} FROM {MEMORIES_TABLE} WHERE {_SWEPT}"
              " ORDER BY customer_digest, expires_at, id"),
    Statement(f"UPDATE {COUNTS_TABLE} SET memories = {COUNTS_TABLE}.memories - swept.memories"
              f" FROM (SELECT customer_digest, COUNT(*) AS memories FROM {MEMORIES_TABLE}"
              f" WHERE {_SWEPT} GROUP BY customer_digest) AS swept"
              f" WHERE {COUNTS_TABLE}.customer_digest = swept.customer_digest"),
    Statement(f"DELETE FROM {MEMORIES_TABLE} WHERE {_SWEPT} RETURNING customer_digest"),
)),), {"row_customer": "bytes"}, locks="customers if free")
# The customers of these that still have memories expired (after a batch left them out).
STILL_EXPIRED = (
    f"SELECT DISTINCT customer_digest FROM {MEMORIES_TABLE}"
    " WHERE customer_digest IN (:customers) AND expires_at <= :now"
)
# Every customer with memories expired, and how many, in the order of the expiry index.
EXPIRED_BY_CUSTOMER = (
    f"SELECT customer_digest, COUNT(*) FROM {MEMORIES_TABLE} WHERE expires_at <= :now"
    " GROUP BY customer_digest ORDER BY customer_digest"
)

_PARAMETER = re.compile(r":([a-z_]+)")
_LIST = re.compile(r"IN \(:([a-z_]+)\)")  # a list parameter's place: `IN (:name)`


@functools.cache
def _with_placeholders(statement: str) -> tuple[str, tuple[str, ...], bool]:
    return (_PARAMETER.sub("?", statement), tuple(_PARAMETER.findall(statement)),
            _LIST.search(statement) is not None)


def positional(statement: str, parameters: dict[str, object]) -> tuple[str, tuple]:
    """A statement of a write written with ``?`` placeholders, and its parameters in order; a
    list parameter (``IN (:name)``) is spelt with as many placeholders as it has values."""
    sql, names, has_a_list = _with_placeholders(statement)
    if not has_a_list:
        return sql, tuple([parameters[name] for name in names])
    values: list = []
    for name in names:
        value = parameters[name]
        values += value if isinstance(value, list) else [value]
    return _PARAMETER.sub(lambda match: _placeholders(parameters[match[1]]), statement), \
        tuple(values)


def _placeholders(value: object) -> str:
    return ", ".join("?" * len(value)) if isinstance(value, list) else "?"


def postgres_function(write: Write, dialect: Dialect = POSTGRES) -> str:
    """The PL/pgSQL function that runs a write's steps in one call, after taking the write
    locks ``write.locks`` names: its last argument is the lock's id (``lock_id``), or each
    customer's (``lock_ids``). It returns the rows of the write's result (``write.returns``).
    Its other arguments are the write's parameters, in order; a list parameter is an array. In
    PostgreSQL's default isolation each statement sees what was committed before it ran, as in
    a transaction of statements; the server plans them once a connection."""
    types = _types(dialect)
    locks = "p_lock_id" if write.locks == "customer" else "p_lock_ids"
    lock_type = dialect.integer_type + ("" if write.locks == "customer" else "[]")
    arguments = ", ".join(
        [*(f"p_{parameter} {types[kind]}" for parameter, kind in write.parameters.items()),
         f"{locks} {lock_type}"]
    )
    returns = ", ".join(f"{name} {types[kind]}" for name, kind in write.returns.items())
    return (
        f"CREATE OR REPLACE FUNCTION {write.function}({arguments}) RETURNS TABLE ({returns})"
        f" LANGUAGE plpgsql AS $write${postgres_function_body(write, dialect)}$write$"
    )


def postgres_function_body(write: Write, dialect: Dialect = POSTGRES) -> str:
    """The source of ``postgres_function(write)``, as the server keeps it (pg_proc.prosrc)."""
    if write.locks == "customer":
        body = ["  PERFORM pg_advisory_xact_lock(p_lock_id);"]
    else:  # the customers whose lock is free, locked; the others left out of the write
        body = ["  SELECT COALESCE(array_agg(customer), '{}') INTO p_customers"
                " FROM unnest(p_customers, p_lock_ids) AS batch(customer, lock_id)"
                " WHERE pg_try_advisory_xact_lock(lock_id);"]
    flags: dict[str, None] = {}  # in the order they are first set
    for step in write.steps:
        lines = []
        for statement in step.statements:
            sql = statement.sql
            if statement.sets is not None:
                flags[f"  v_{statement.sets} BOOLEAN;"] = None
                sql = f"{sql} INTO v_{statement.sets}"
            elif " RETURNING " in sql:  # its rows are the function's
                sql = f"RETURN QUERY WITH returned AS ({sql}) SELECT returned.* FROM returned"
            lines.append(f"{sql};")
        if step.when is None:
            body += [f"  {line}" for line in lines]
        else:
            body += [f"  IF v_{step.when} THEN", *(f"    {line}" for line in lines), "  END IF;"]
    declare = ["DECLARE", *flags] if flags else []
    text = "\n".join([*declare, "BEGIN", *body, "END"])
    return "\n" + _PARAMETER.sub(r"p_\1", _LIST.sub(r"= ANY(:\1)", text)) + "\n"


def _types(dialect: Dialect) -> dict[str, str]:
    return {"bytes": dialect.bytes_type, "integer": dialect.integer_type,
            "bytes list": f"{dialect.bytes_type}[]"}
