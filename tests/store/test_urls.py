"""Store URLs in error messages: no part of a password shows."""

from __future__ import annotations

import pytest

from memorybook.store import MemoryStoreError, open_store
from tests.helpers import new_key


@pytest.mark.parametrize(
    "url, secret_parts",
    [
        ("postgresql://memorybook:xq7@zv9 kw3@127.0.0.1:1/memorybook", ["xq7", "zv9", "kw3"]),
        ("postgresql://memorybook:tt4/uu5@127.0.0.1:1/memorybook", ["tt4", "uu5"]),
        ("postgresql://memorybook:hunter2zz@127.0.0.1:1/memorybook", ["hunter2zz"]),
        ("postgresql://127.0.0.1:1/memorybook?password=pw9qq&user=x", ["pw9qq"]),
        ("postgresql://127.0.0.1:1/memorybook?sslpassword=ssl9qq&user=x", ["ssl9qq"]),
        ("postgresql://u@127.0.0.1:1/memorybook?user=x&sslpassword=ssl8qq", ["ssl8qq"]),
        ("mysql://root:hunter2zz@db/memories", ["hunter2zz"]),
        # mistyped, and so echoed back in the error: one slash after the scheme, or none
        ("postgresql:/u:pw5SECRET@127.0.0.1:1/db", ["pw5SECRET"]),
        ("postgresql:u:pw6SECRET@127.0.0.1:1/db", ["pw6SECRET"]),
        # libpq's keyword form, which is no URL
        ("host=127.0.0.1 port=1 user=u password=pw7SECRET dbname=db", ["pw7SECRET"]),
        ("host=127.0.0.1 password = 'pw8 SECRET' dbname=db", ["pw8", "SECRET"]),
        ("sqlite:///tmp/x.sqlite3?password=pw9SECRET", ["pw9SECRET"]),
        ("sqlite://u:pwASECRET@/x.sqlite3", ["pwASECRET"]),
        # no URL this store takes, and with a password in a place no parser looks
        (" postgresql://u:pwBSECRET@127.0.0.1:1/db", ["pwBSECRET"]),
        ('"postgresql://u:pwCSECRET@127.0.0.1:1/db"', ["pwCSECRET"]),
        ("u:pwDSECRET@127.0.0.1/db", ["pwDSECRET"]),
        ("MEMORYBOOK_STORE_URL=postgresql://u:pwESECRET@127.0.0.1/db", ["pwESECRET"]),
        ("password=pwFSECRET host=127.0.0.1", ["pwFSECRET"]),
    ],
)
def test_no_part_of_a_database_password_shows_in_an_error(
    url: str, secret_parts: list[str]
) -> None:
    with pytest.raises(MemoryStoreError) as raised:
        open_store(url, key=new_key())
    message, chained = str(raised.value), raised.value
    while chained is not None:  # an error reporter reads the whole chain, hidden links too
        message += f" {chained!r}"
        chained = chained.__cause__ or chained.__context__
    for part in secret_parts:
        assert part not in message, message
    assert "***" in message or message.startswith("Unsupported memory store URL: "), message


@pytest.mark.parametrize("name", ["%70assword", "pass%77ord", "sslpass%77ord",
                                  "%73%73%6C%70%61%73%73%77%6F%72%64", "password", "sslpassword"])
def test_no_spelling_libpq_takes_for_a_password_shows_anywhere(name: str) -> None:
    from psycopg.conninfo import conninfo_to_dict

    from memorybook.redaction import redact
    from memorybook.store.postgres import PostgresMemoryStore
    from memorybook.store.urls import redacted

    url = f"postgresql://u@127.0.0.1:1/memorybook?{name}=qq9Secret%23x#y&user=x"
    parsed = conninfo_to_dict(url)  # libpq's own reading of the URL
    secrets = [parsed[key] for key in ("password", "sslpassword") if key in parsed]
    assert secrets == ["qq9Secret#x#y"], parsed
    with pytest.raises(MemoryStoreError) as raised:
        PostgresMemoryStore(url, key=new_key(), timeout=1)
    store = object.__new__(PostgresMemoryStore)  # location and repr(), as a store sets them
    store.location, store.max_memories = redacted(url), 1
    for where, text in [("the error", str(raised.value)), ("location", store.location),
                        ("repr()", repr(store)), ("redact()", redact(url))]:
        for part in ("qq9Secret", "%23x", "#x#y"):
            assert part not in text, (
                f"{where} shows the password of {name}=: memorybook/store/urls.py (_is_password) "
                f"and memorybook/redaction.py must decode parameter names as libpq does: {text}")
