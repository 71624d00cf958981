"""``python -m memorybook.store rotate [URL]``: a store's key rotated (store/rotation.py).

    MEMORYBOOK_STORE_KEY=<new> MEMORYBOOK_STORE_OLD_KEYS=<old> python -m memorybook.store rotate URL

``rotate()`` opens the store with the new key and the earlier ones, runs its ``rotate_key()``, and
says in one line what it did; ``main()`` is the command, whose errors are one line too. Nothing in
the package imports this module, which imports open_store() and so every backend.
"""

from __future__ import annotations

import argparse
import base64
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

import memorybook.store.lock_file as lock_file
from memorybook.errors import MemorybookError
from memorybook.settings import STORE_KEY_ENV, STORE_OLD_KEYS_ENV, Settings
from memorybook.store.encryption import StoreKey
from memorybook.store.key_file import KeyFile
from memorybook.store.opening import open_store
from memorybook.store.rotation import COMMAND
from memorybook.store.urls import STORE_URL_ENV, sqlite_path
from memorybook.store.validation import MemoryStoreError, MemoryStoreKeyError


def rotate(url: str | None = None, *, settings: Settings | None = None) -> str:
    """Rotate the key of the store at ``url`` (default: the settings' ``$MEMORYBOOK_STORE_URL``):
    seal every row with the new key (``$MEMORYBOOK_STORE_KEY``; the store's current key and any
    other earlier one in ``$MEMORYBOOK_STORE_OLD_KEYS``), and return the line that says what was
    done. A MemoryStoreError (or ConfigError) says in one line what to do instead.

    A SQLite store given no key uses its key file: the new key is made in
    ``<database>.key.new`` (kept, should the run be interrupted, for the next run), and replaces
    the key file once every row is sealed with it. A SQLite store rotates only while no other
    process serves it.
    """
    settings = settings or Settings.from_environment()
    url = url or settings.store_url
    if not url:
        raise MemoryStoreError(
            f"Name the store whose key to rotate: `{COMMAND} URL`, or set ${STORE_URL_ENV}.")
    key_file = None
    options: dict = {}
    with ExitStack() as held:
        if url.partition(":")[0].lower() == "sqlite":
            path = Path(sqlite_path(url)).expanduser().absolute()
            if not path.is_file():
                raise MemoryStoreError(f"There is no memory store at {path}: check the URL.")
            try:
                held.enter_context(lock_file.serving_alone(path))
            except MemoryStoreError as error:
                raise MemoryStoreError(f"Cannot rotate the key now. {error}") from None
            if settings.store_key is None:
                key_file = KeyFile(path)
                options = _key_file_keys(key_file, settings)
        store = held.enter_context(open_store(url, settings=settings, **options))
        resealed = store.rotate_key()
        if key_file is not None:
            key_file.take_next_key()
    kept = (f"; the key file {key_file.path} holds it" if key_file is not None
            else f": ${STORE_OLD_KEYS_ENV} can go")
    damaged = (f"; {_many(resealed.unreadable, 'damaged value')} that no key opens left as "
               "they were" if resealed.unreadable else "")
    return (f"Sealed {_many(resealed.rows, 'row')} of {store.location} anew with its new key "
            f"({_many(resealed.memories, 'memory', 'memories')}, "
            f"{_many(resealed.history, 'history row')}, "
            f"{_many(resealed.pending, 'pending gate')}); it alone opens the store now"
            f"{kept}{damaged}.")


def _many(count: int, one: str, more: str = "") -> str:
    return f"{count:,} {one if count == 1 else more or one + 's'}"


def _key_file_keys(key_file: KeyFile, settings: Settings) -> dict:
    """open_store()'s key options to rotate a SQLite store's key file: the new key (made now,
    or kept from an interrupted run), then the key file's and any other earlier one."""
    if not key_file.path.exists():
        raise MemoryStoreKeyError(
            f"{key_file.database} has no key file {key_file.path} and ${STORE_KEY_ENV} is not "
            f"set: set it to the new key, and ${STORE_OLD_KEYS_ENV} to the store's current one.")
    current = key_file.read()
    new = key_file.next_key()
    return {"key": StoreKey(_text(new), str(key_file.next_path),
                            (_text(current), *(settings.store_old_keys or ())),
                            f"{key_file.path} and ${STORE_OLD_KEYS_ENV}")}


def _text(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode("ascii")


def main(arguments: Sequence[str] | None = None) -> int:
    """``python -m memorybook.store``: its commands, and their exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m memorybook.store", description="Look after a memorybook store.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    rotate_command = commands.add_parser(
        "rotate", help="seal every row with a new key",
        description=f"Seal every row of the store with ${STORE_KEY_ENV}, reading it with the "
        f"keys in ${STORE_OLD_KEYS_ENV}; a SQLite store given no key gets a new key file. "
        "Interrupted, run it again. OPERATING.md says when and how.")
    rotate_command.add_argument("url", nargs="?", metavar="URL",
                                help=f"the store (default: ${STORE_URL_ENV})")
    given = parser.parse_args(arguments)
    try:
        print(rotate(given.url))
    except MemorybookError as error:
        print(f"memorybook rotate: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("memorybook rotate: interrupted; what was sealed anew stays so: run it again to "
              "finish.", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
