"""The tables a store creates are those earlier versions made, so that their stores still open."""

from __future__ import annotations

import contextlib

from tests.helpers import Backend


def test_a_new_store_has_the_tables_indexes_and_meta_rows_of_earlier_versions(
    backend: Backend,
) -> None:
    backend.open().close()
    assert backend.schema() == backend.pinned_schema
    connection, _ = backend.connect_directly()
    with contextlib.closing(connection):
        meta = dict(connection.execute("SELECT name, value FROM memorybook_meta").fetchall())
    assert sorted(meta) == ["format", "key_check"]
    assert bytes(meta["format"]) == b"memorybook-store-1"
