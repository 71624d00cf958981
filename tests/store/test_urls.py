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
    ],
)
def test_no_part_of_a_database_password_shows_in_an_error(
    url: str, secret_parts: list[str]
) -> None:
    with pytest.raises(MemoryStoreError) as raised:
        open_store(url, key=new_key())
    message = str(raised.value)
    for part in secret_parts:
        assert part not in message, message
    assert "***" in message
