"""The store's tables, defined once, and what the SQL of its two backends spells differently.

Every statement of the store is written with ``?`` for its parameters; a backend whose driver
takes another placeholder replaces it (``Dialect.placeholder``). These names are the on-disk
format: stores made by earlier versions open as long as they stay the same.
"""

from __future__ import annotations

from dataclasses import dataclass

STORE_FORMAT = b"memorybook-store-1"  # the meta row "format": what this version can read

META_TABLE = "memorybook_meta"
MEMORIES_TABLE = "memorybook_memories"
ROW_COLUMNS = ("customer_digest", "ticket_digest", "sealed")  # besides the ordering id


@dataclass(frozen=True)
class Dialect:
    """What one backend's SQL spells its own way."""

    placeholder: str  # a statement's parameter, for the driver
    bytes_type: str  # digests, sealed memories and meta values
    row_id: str  # the auto-increment primary key that keeps a customer's memories in order
    customer_index: tuple[str, ...]  # the columns of the index that finds a customer's rows
    write_lock: str  # the statement that starts a write by waiting for the writer before it


SQLITE = Dialect(
    placeholder="?",
    bytes_type="BLOB",
    row_id="INTEGER PRIMARY KEY AUTOINCREMENT",
    # A SQLite index holds the rowid (here id) after its own columns, so this index gives a
    # customer's rows in id order, as PostgreSQL's (customer_digest, id) does.
    customer_index=("customer_digest",),
    write_lock="BEGIN IMMEDIATE",  # the database file's write lock, taken up front
)

POSTGRES = Dialect(
    placeholder="%s",
    bytes_type="BYTEA",
    row_id="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    customer_index=("customer_digest", "id"),
    write_lock="SELECT pg_advisory_xact_lock(?)",  # one customer's writers, inside a transaction
)


def create_tables(dialect: Dialect) -> list[str]:
    """The statements that create both tables and the index; each leaves an existing one as is."""
    blob = dialect.bytes_type
    columns = [f"id {dialect.row_id}", *(f"{name} {blob} NOT NULL" for name in ROW_COLUMNS)]
    return [
        f"CREATE TABLE IF NOT EXISTS {META_TABLE} (name TEXT PRIMARY KEY, value {blob} NOT NULL)",
        f"CREATE TABLE IF NOT EXISTS {MEMORIES_TABLE} ("
        + ",".join(f" {column}" for column in columns) + ")",
        f"CREATE INDEX IF NOT EXISTS {MEMORIES_TABLE}_by_customer"
        f" ON {MEMORIES_TABLE} ({', '.join(dialect.customer_index)})",
    ]


# The meta rows: the format, and a value only the store's key gives. Racing first openings
# insert the same rows; the first one's stay.
INSERT_META = (
    f"INSERT INTO {META_TABLE} (name, value) VALUES ('format', ?), ('key_check', ?)"
    " ON CONFLICT (name) DO NOTHING"
)
READ_META = f"SELECT name, value FROM {META_TABLE}"
READ_KEY_CHECK = f"SELECT value FROM {META_TABLE} WHERE name = 'key_check'"
