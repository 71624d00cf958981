"""The tables a store creates are those earlier versions made, so that their stores still open."""

from __future__ import annotations

import contextlib

from tests.helpers import Backend

SQLITE_SCHEMA = [  # sqlite_master: type, name, SQL
    (
        "table",
        "memorybook_memories",
        "CREATE TABLE memorybook_memories ( id INTEGER PRIMARY KEY AUTOINCREMENT,"
        " customer_digest BLOB NOT NULL, ticket_digest BLOB NOT NULL, sealed BLOB NOT NULL)",
    ),
    (
        "index",
        "memorybook_memories_by_customer",
        "CREATE INDEX memorybook_memories_by_customer ON memorybook_memories (customer_digest)",
    ),
    (
        "table",
        "memorybook_meta",
        "CREATE TABLE memorybook_meta (name TEXT PRIMARY KEY, value BLOB NOT NULL)",
    ),
    ("index", "sqlite_autoindex_memorybook_meta_1", None),
    ("table", "sqlite_sequence", "CREATE TABLE sqlite_sequence(name,seq)"),
]

POSTGRES_COLUMNS = [  # table, column, type, nullable, identity
    ("memorybook_memories", "id", "bigint", "NO", "ALWAYS"),
    ("memorybook_memories", "customer_digest", "bytea", "NO", None),
    ("memorybook_memories", "ticket_digest", "bytea", "NO", None),
    ("memorybook_memories", "sealed", "bytea", "NO", None),
    ("memorybook_meta", "name", "text", "NO", None),
    ("memorybook_meta", "value", "bytea", "NO", None),
]
POSTGRES_INDEXES = [
    "CREATE INDEX memorybook_memories_by_customer ON memorybook_memories"
    " USING btree (customer_digest, id)",
    "CREATE UNIQUE INDEX memorybook_memories_pkey ON memorybook_memories USING btree (id)",
    "CREATE UNIQUE INDEX memorybook_meta_pkey ON memorybook_meta USING btree (name)",
]


def test_a_new_store_has_the_tables_indexes_and_meta_rows_of_earlier_versions(
    backend: Backend,
) -> None:
    backend.open().close()
    connection, placeholder = backend.connect_directly()
    with contextlib.closing(connection):
        meta = dict(connection.execute("SELECT name, value FROM memorybook_meta").fetchall())
        if backend.name == "sqlite":
            schema = connection.execute(
                "SELECT type, name, sql FROM sqlite_master ORDER BY name"
            ).fetchall()
            assert schema == SQLITE_SCHEMA
            [(journal_mode,)] = connection.execute("PRAGMA journal_mode").fetchall()
            assert journal_mode == "wal"
        else:
            [(schema_name,)] = connection.execute("SELECT current_schema()").fetchall()
            columns = connection.execute(
                "SELECT table_name, column_name, data_type, is_nullable, identity_generation"
                f" FROM information_schema.columns WHERE table_schema = {placeholder}"
                " ORDER BY table_name, ordinal_position",
                (schema_name,),
            ).fetchall()
            assert columns == POSTGRES_COLUMNS
            indexes = connection.execute(
                f"SELECT indexdef FROM pg_indexes WHERE schemaname = {placeholder}"
                " ORDER BY indexname",
                (schema_name,),
            ).fetchall()
            assert [text.replace(f"{schema_name}.", "") for (text,) in indexes] == POSTGRES_INDEXES
    assert sorted(meta) == ["format", "key_check"]
    assert bytes(meta["format"]) == b"memorybook-store-1"
