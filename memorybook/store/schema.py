"""The store's tables, defined once, and what the SQL of its two backends spells differently.

Every statement of the store is written with ``?`` for its parameters; a backend whose driver
takes another placeholder replaces it (``Dialect.placeholder``). These names are the on-disk
format: stores made by earlier versions open as long as they stay the same.
"""

from __future__ import annotations

from dataclasses import dataclass

STORE_FORMAT = b"memorybook-store-2"  # the meta row "format": what this version writes
# Formats this version opens and upgrades in place, under the tables' lock (upgrade_tables()).
# Format 1 had neither expiry dates nor history: versions that only know it refuse format 2,
# rather than recall expired memories and leave no history.
EARLIER_FORMATS = (b"memorybook-store-1",)
TABLES_LOCK = b"memorybook tables"  # the write lock that creating or upgrading tables holds

META_TABLE = "memorybook_meta"
MEMORIES_TABLE = "memorybook_memories"
HISTORY_TABLE = "memorybook_history"
ROW_COLUMNS = ("customer_digest", "ticket_digest", "sealed")  # besides the ordering id


@dataclass(frozen=True)
class Dialect:
    """What one backend's SQL spells its own way."""

    placeholder: str  # a statement's parameter, for the driver
    bytes_type: str  # digests, sealed memories and meta values
    integer_type: str  # times, in microseconds since 1970 UTC
    row_id: str  # the auto-increment primary key that keeps a customer's memories in order
    customer_index: tuple[str, ...]  # the columns of the index that finds a customer's rows
    write_lock: str  # the statement that starts a write by waiting for the writer before it
    all_rows: str  # a LIMIT that limits nothing, for an OFFSET alone
    index_exists: str  # a query giving 1 when the index named by its parameter exists, else 0


SQLITE = Dialect(
    placeholder="?",
    bytes_type="BLOB",
    integer_type="INTEGER",
    row_id="INTEGER PRIMARY KEY AUTOINCREMENT",
    # A SQLite index holds the rowid (here id) after its own columns, so this index gives a
    # customer's rows in id order, as PostgreSQL's (customer_digest, id) does.
    customer_index=("customer_digest",),
    write_lock="BEGIN IMMEDIATE",  # the database file's write lock, taken up front
    all_rows="LIMIT -1",
    index_exists="SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = ?",
)

POSTGRES = Dialect(
    placeholder="%s",
    bytes_type="BYTEA",
    integer_type="BIGINT",
    row_id="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    customer_index=("customer_digest", "id"),
    write_lock="SELECT pg_advisory_xact_lock(?)",  # one customer's writers, inside a transaction
    all_rows="LIMIT ALL",
    index_exists=(
        "SELECT COUNT(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname = ?"
    ),
)


def create_tables(dialect: Dialect) -> list[str]:
    """The statements that create the tables and indexes; each leaves an existing one as is."""
    blob = dialect.bytes_type
    columns = [f"id {dialect.row_id}", *(f"{name} {blob} NOT NULL" for name in ROW_COLUMNS)]
    return [
        f"CREATE TABLE IF NOT EXISTS {META_TABLE} (name TEXT PRIMARY KEY, value {blob} NOT NULL)",
        f"CREATE TABLE IF NOT EXISTS {MEMORIES_TABLE} ("
        + ",".join(f" {column}" for column in columns)
        + f", expires_at {dialect.integer_type})",
        f"CREATE INDEX IF NOT EXISTS {MEMORIES_TABLE}_by_customer"
        f" ON {MEMORIES_TABLE} ({', '.join(dialect.customer_index)})",
        *_history_tables(dialect),
        *ADDED_INDEXES.values(),
    ]


def upgrade_tables(dialect: Dialect) -> list[str]:
    """The statements that turn an earlier format's tables (EARLIER_FORMATS) into this one's."""
    return [
        f"ALTER TABLE {MEMORIES_TABLE} ADD COLUMN expires_at {dialect.integer_type}",
        *_history_tables(dialect),
        f"UPDATE {META_TABLE} SET value = ? WHERE name = 'format'",
    ]


# Indexes added after the tables' format was set: a store that lacks one gets it when it is
# opened (SqlDatabase.upgrade()). They change nothing that an earlier version reads or writes, so
# the format stays the same and those versions still open the store. By name, as created.
ADDED_INDEXES = {
    # A save deletes the customer's expired memories first: this finds them, and only them,
    # however many memories the customer holds. Memories without an expiry date are left out.
    f"{MEMORIES_TABLE}_by_expiry": (
        f"CREATE INDEX IF NOT EXISTS {MEMORIES_TABLE}_by_expiry"
        f" ON {MEMORIES_TABLE} (customer_digest, expires_at) WHERE expires_at IS NOT NULL"
    ),
}


def _history_tables(dialect: Dialect) -> list[str]:
    """What happened to each customer's memories: an event, its time, the ticket id sealed.

    The ticket id is encrypted (``Keys.seal``), bound to the customer's digest; no memory
    content is ever written here.
    """
    blob, integer = dialect.bytes_type, dialect.integer_type
    return [
        f"CREATE TABLE IF NOT EXISTS {HISTORY_TABLE} ( id {dialect.row_id},"
        f" customer_digest {blob} NOT NULL, event TEXT NOT NULL, at {integer} NOT NULL,"
        f" sealed_ticket {blob} NOT NULL)",
        f"CREATE INDEX IF NOT EXISTS {HISTORY_TABLE}_by_customer"
        f" ON {HISTORY_TABLE} ({', '.join(dialect.customer_index)})",
    ]


# The meta rows: the format, and a value only the store's key gives. Racing first openings
# insert the same rows; the first one's stay.
INSERT_META = (
    f"INSERT INTO {META_TABLE} (name, value) VALUES ('format', ?), ('key_check', ?)"
    " ON CONFLICT (name) DO NOTHING"
)
READ_META = f"SELECT name, value FROM {META_TABLE}"
READ_KEY_CHECK = f"SELECT value FROM {META_TABLE} WHERE name = 'key_check'"
READ_FORMAT = f"SELECT value FROM {META_TABLE} WHERE name = 'format'"
