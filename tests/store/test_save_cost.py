"""A save costs the same whatever the customer holds: no statement of it reads the customer's
other memories, expired or not, unless the cap is reached.

Each backend counts the work of a call in a unit of its own (``Backend.work_of``): SQLite the
steps of its virtual machine, PostgreSQL the rows its statements read. Nothing here is timed.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta

import pytest

from tests.helpers import Backend, make_memory, ticket_ids

START = datetime(2026, 8, 4, 9, 0, tzinfo=UTC)
RETENTION = timedelta(days=30)
MANY = 2_000
WARM_UP = 7  # saves before the one measured


def test_a_save_reads_no_more_for_a_customer_of_2000_memories_than_for_one_of_10(
    backend: Backend,
) -> None:
    ends = START + RETENTION
    hold(backend, {"C-few": 10, "C-many": MANY}, expires_at=ends)
    with backend.open(max_memories=10 * MANY, retention=RETENTION, clock=lambda: START) as store:
        work = {}
        # The first saves warm up: past five, a server plans the statements once for any
        # parameters (PostgreSQL's generic plans), which then must still read no other row.
        for number in range(WARM_UP + 1):
            for customer in ("C-few", "C-many"):
                memory = make_memory(customer, f"T-new-{number}")
                work[customer] = backend.work_of(
                    store, lambda c=customer, m=memory: store.save(c, m))
        assert len(store.recall("C-many")) == MANY + WARM_UP + 1
    assert work["C-many"] <= work["C-few"] + 10, (
        f"A save for a customer of {MANY:,} memories took {work['C-many']:,} units of work "
        f"against {work['C-few']:,} for one of 10 ({backend.name}): a statement of the save "
        "(memorybook/store/writes.py) reads the customer's other rows. Find them through an "
        "index range that holds only the rows the statement needs (schema.py's expiry index, "
        "the counts table)."
    )
    assert work["C-few"] < MANY, (
        f"A save for a customer of 10 memories took {work['C-few']:,} units of work "
        f"({backend.name}), as much as reading the whole table: a statement of the save "
        "(memorybook/store/writes.py) scans the table, as a plan made for any parameters may "
        "(PostgreSQL's generic plans). Write it so that the index is the only plan (MIN over "
        "the expiry index rather than EXISTS)."
    )


def test_a_customer_held_at_the_cap_is_still_held_to_it_and_expired_memories_go_first(
    backend: Backend,
) -> None:
    """The cheap path must not skip what the counted path did: the count decides when the
    customer's rows are read, and every kind of deletion keeps it right."""
    clock_now = [START]
    with backend.open(max_memories=3, retention=RETENTION, clock=lambda: clock_now[0]) as store:
        for n in (1, 2, 3):
            store.save("C-1042", make_memory("C-1042", f"T-{n}"))
        assert ticket_ids(store.save("C-1042", make_memory("C-1042", "T-4"))) == ["T-1"]
        store.forget("C-1042", "T-2")
        assert store.save("C-1042", make_memory("C-1042", "T-5")) == [], (
            "forget() must take the memory off the customer's count (base.py _count_deleted())"
        )
        clock_now[0] = START + RETENTION  # T-3, T-4 and T-5 expire
        assert store.save("C-1042", make_memory("C-1042", "T-6")) == []
        store.save("C-1042", make_memory("C-1042", "T-7"))
        assert store.save("C-1042", make_memory("C-1042", "T-8")) == []
        assert ticket_ids(store.save("C-1042", make_memory("C-1042", "T-9"))) == ["T-6"]
        assert ticket_ids(store.recall("C-1042")) == ["T-7", "T-8", "T-9"]
        store.forget_customer("C-1042")
        for n in (1, 2, 3):
            assert store.save("C-1042", make_memory("C-1042", f"T-again-{n}")) == [], (
                "forget_customer() must delete the customer's count with the memories"
            )


def hold(backend: Backend, customers: dict[str, int], expires_at: datetime) -> None:
    """Give each customer this many memories, written straight into the tables as that many
    saves would have left them (each with its expiry date, the count of each customer)."""
    with backend.open() as store:  # the tables, and each memory's row (sealed_row())
        rows = {customer_id: [store.sealed_row(customer_id, make_memory(customer_id, f"T-{n}"))
                              for n in range(count)] for customer_id, count in customers.items()}
    ends = (expires_at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    connection, mark = backend.connect_directly()
    with contextlib.closing(connection):
        for customer_rows in rows.values():
            columns = customer_rows[0]._fields
            connection.cursor().executemany(
                f"INSERT INTO memorybook_memories ({', '.join(columns)}, expires_at)"
                f" VALUES ({', '.join([mark] * (len(columns) + 1))})",
                [(*row, ends) for row in customer_rows],
            )
            connection.execute(
                "INSERT INTO memorybook_counts (customer_digest, memories)"
                f" VALUES ({mark}, {mark})",
                (customer_rows[0].customer_digest, len(customer_rows)),
            )
        connection.commit()
        connection.execute("ANALYZE")  # the planner knows what the tables hold, as in use
        connection.commit()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_save_below_the_cap_runs_one_statement_more_than_a_bare_write(
    backend: Backend,
) -> None:
    """A bare write of the memory and its history row is four statements (BEGIN IMMEDIATE, two
    INSERTs, COMMIT); a save adds the count, which also says whether the cap is reached, and
    nothing else below it, though the customer holds memories that expired."""
    hold(backend, {"C-1042": 10}, expires_at=START + RETENTION)
    with backend.open(max_memories=20, clock=lambda: START + 2 * RETENTION) as store:
        connection = store._database.connection  # type: ignore[attr-defined]
        statements: list[str] = []
        connection.set_trace_callback(statements.append)
        store.save("C-1042", make_memory("C-1042", "T-new"))
        connection.set_trace_callback(None)
        assert store.recall("C-1042") == [make_memory("C-1042", "T-new")]
    assert len(statements) == 5, (
        f"A save below the cap ran {len(statements)} statements, not 5: "
        + "; ".join(statement.split(" (")[0] for statement in statements)
        + ". Below the cap, a save looks for no expired memory and checks the cap by the "
        "count's own RETURNING (memorybook/store/writes.py SAVE)."
    )
