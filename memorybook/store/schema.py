"""The store's tables, defined once, and what the SQL of its two backends spells differently.

Every statement of the store is written with ``?`` for its parameters; a backend whose driver
takes another placeholder replaces it (``Dialect.placeholder``). These names are the on-disk
format: stores made by earlier versions open as long as they stay the same.
"""

from __future__ import annotations

from dataclasses import dataclass

STORE_FORMAT = b"memorybook-store-4"  # the meta row "format": what this version writes
FORMAT_1, FORMAT_2, FORMAT_3 = b"memorybook-store-1", b"memorybook-store-2", b"memorybook-store-3"
# Formats this version opens and upgrades in place, under the tables' lock (upgrade_tables()).
# Format 1 had neither expiry dates nor history: versions that only know it refuse format 2,
# rather than recall expired memories and leave no history. Format 2 kept no count of each
# customer's memories and no table of pending gates: versions that only know it refuse format 3,
# rather than leave the counts wrong, or erase a customer and leave their pending gates to save
# a memory after the erasure. Format 3's memory rows lacked their sealed ticket id, which a save
# of format 4 copies into history when a memory expires or is evicted (memorybook/store/writes.py;
# on PostgreSQL, the function that saves): versions that only know format 3 refuse format 4,
# rather than write rows without it.
EARLIER_FORMATS = (FORMAT_1, FORMAT_2, FORMAT_3)
# A store of format 4 whose key has begun to rotate (memorybook/store/rotation.py): the same
# tables, but its rows may be sealed with a key other than the key check's, and its digests keep
# the key of its first key, held in the meta rows (DIGEST_KEY, SEALING_KEYS). Versions that only
# know format 4 refuse it, rather than find none of its rows with digests of the new key. A store
# keeps format 4 until a store object is given a new key to seal with.
ROTATED_FORMAT = b"memorybook-store-5"
CURRENT_FORMATS = (STORE_FORMAT, ROTATED_FORMAT)  # opened as they are, never upgraded
TABLES_LOCK = b"memorybook tables"  # the write lock that creating or upgrading tables holds

META_TABLE = "memorybook_meta"
MEMORIES_TABLE = "memorybook_memories"
HISTORY_TABLE = "memorybook_history"
COUNTS_TABLE = "memorybook_counts"
PENDING_TABLE = "memorybook_pending"  # gates decided after the reply, until they have run
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


SQLITE = Dialect(
    placeholder="?",
    bytes_type="BLOB",
    integer_type="INTEGER",
    row_id="INTEGER PRIMARY KEY AUTOINCREMENT",
    # A SQLite index holds the rowid (here id) after its own columns, so this index gives a
    # customer's rows in id order, as PostgreSQL's (customer_digest, id) does.
    customer_index=("customer_digest",),
    write_lock="BEGIN IMMEDIATE",  # the database file's write lock, taken up front
)

POSTGRES = Dialect(
    placeholder="%s",
    bytes_type="BYTEA",
    integer_type="BIGINT",
    row_id="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    customer_index=("customer_digest", "id"),
    write_lock="SELECT pg_advisory_xact_lock(?)",  # one customer's writers, inside a transaction
)


def create_tables(dialect: Dialect) -> list[str]:
    """The statements that create the tables and indexes; each leaves an existing one as is."""
    blob = dialect.bytes_type
    columns = [f"id {dialect.row_id}", *(f"{name} {blob} NOT NULL" for name in ROW_COLUMNS)]
    return [
        f"CREATE TABLE IF NOT EXISTS {META_TABLE} (name TEXT PRIMARY KEY, value {blob} NOT NULL)",
        f"CREATE TABLE IF NOT EXISTS {MEMORIES_TABLE} ("
        + ",".join(f" {column}" for column in columns)
        + f", expires_at {dialect.integer_type}, sealed_ticket {blob})",
        f"CREATE INDEX IF NOT EXISTS {MEMORIES_TABLE}_by_customer"
        f" ON {MEMORIES_TABLE} ({', '.join(dialect.customer_index)})",
        *_history_tables(dialect),
        *_format_3_tables(dialect),
        *_pending_tables(dialect),
    ]


def upgrade_tables(dialect: Dialect, stored_format: bytes) -> list[str]:
    """The statements that turn an earlier format's tables (EARLIER_FORMATS) into this one's,
    the last one setting the format (its parameter). The rows' sealed ticket ids are filled in
    after them, before the format is set (``SqlDatabase.upgrade()``)."""
    format_2 = [] if stored_format != FORMAT_1 else [
        f"ALTER TABLE {MEMORIES_TABLE} ADD COLUMN expires_at {dialect.integer_type}",
        *_history_tables(dialect),
    ]
    format_3 = [] if stored_format == FORMAT_3 else [
        *_format_3_tables(dialect),
        *_pending_tables(dialect),
        f"INSERT INTO {COUNTS_TABLE} (customer_digest, memories)"
        f" SELECT customer_digest, COUNT(*) FROM {MEMORIES_TABLE} GROUP BY customer_digest",
    ]
    return [
        *format_2,
        *format_3,
        f"ALTER TABLE {MEMORIES_TABLE} ADD COLUMN sealed_ticket {dialect.bytes_type}",
        f"UPDATE {META_TABLE} SET value = ? WHERE name = 'format'",
    ]


# A format-4 upgrade seals each memory's ticket id for history: these find and fill the rows,
# a thousand at a time, so that a large store is never read into memory at once.
ROWS_WITHOUT_SEALED_TICKET = (
    f"SELECT id, customer_digest, ticket_digest, sealed FROM {MEMORIES_TABLE}"
    " WHERE sealed_ticket IS NULL LIMIT 1000"
)
FILL_SEALED_TICKET = f"UPDATE {MEMORIES_TABLE} SET sealed_ticket = ? WHERE id = ?"


def _format_3_tables(dialect: Dialect) -> list[str]:
    """What lets a save cost the same however many memories the customer holds.

    The expiry index finds a customer's expired memories, and only them (memories without an
    expiry date are left out of it). The counts table holds how many rows of the memories table
    each customer has, so the cap is checked without counting them; a save, ``forget()``,
    ``sweep()`` and eviction keep it up to date, ``forget_customer()`` deletes the customer's row.
    """
    return [
        f"CREATE INDEX IF NOT EXISTS {MEMORIES_TABLE}_by_expiry"
        f" ON {MEMORIES_TABLE} (customer_digest, expires_at) WHERE expires_at IS NOT NULL",
        f"CREATE TABLE IF NOT EXISTS {COUNTS_TABLE} ("
        f" customer_digest {dialect.bytes_type} PRIMARY KEY,"
        f" memories {dialect.integer_type} NOT NULL)",
    ]


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


def _pending_tables(dialect: Dialect) -> list[str]:
    """Each gate still to run after its reply: the memory it decides on, sealed as a memory is
    (bound to the customer's digest), and the store object that runs it (``owner``, a random
    id; memorybook/store/pending.py). A row is deleted in the transaction that saves its memory,
    or once its gate decided against it.
    """
    blob = dialect.bytes_type
    return [
        f"CREATE TABLE IF NOT EXISTS {PENDING_TABLE} ( id {dialect.row_id},"
        f" customer_digest {blob} NOT NULL, owner {blob} NOT NULL, sealed {blob} NOT NULL)",
        f"CREATE INDEX IF NOT EXISTS {PENDING_TABLE}_by_customer"
        f" ON {PENDING_TABLE} ({', '.join(dialect.customer_index)})",
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
# Format 5's meta rows: the digest key, sealed with the key check's key; and the check values of
# the other keys that rows may be sealed with, one after the other (CHECK_VALUE_BYTES each).
DIGEST_KEY, SEALING_KEYS = "digest_key", "sealing_keys"
CHECK_VALUE_BYTES = 32
WRITE_META = (
    f"INSERT INTO {META_TABLE} (name, value) VALUES (?, ?)"
    " ON CONFLICT (name) DO UPDATE SET value = excluded.value"
)
