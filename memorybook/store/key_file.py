"""The key file beside a local SQLite store: made once without races, read only if private."""

from __future__ import annotations

import base64
import os
import stat
import tempfile
from pathlib import Path

from memorybook.store.encryption import STORE_KEY_ENV, parse_key
from memorybook.store.errors import MemoryStoreKeyError


class KeyFile:
    """``<database>.key``: the store key of a SQLite store given no key otherwise (mode 0600)."""

    def __init__(self, database: Path) -> None:
        self.database = database
        self.path = database.with_name(database.name + ".key")

    def key(self, *, has_data: bool, notices: list[str]) -> bytes:
        """The key in the file; for a store without data yet, a new one (and a notice saying so)."""
        if os.path.lexists(self.path):
            return self.read()
        if has_data:
            raise MemoryStoreKeyError(
                f"{self.database} is encrypted, but no key was given and its key file "
                f"{self.path} is missing. Restore the key file, set ${STORE_KEY_ENV}, or pass "
                "key=; without the original key these memories cannot be read. To start over, "
                "move the database aside."
            )
        return self.create(notices)

    def create(self, notices: list[str]) -> bytes:
        """Write a new random key to the file (mode 0600) without racing other processes.

        The key is written to a draft that only this call can have made (a new name, created
        exclusively, never through a link), then linked into place, which fails if anything is
        there already: a file or link planted in the folder is never written to.
        """
        new_key = base64.urlsafe_b64encode(os.urandom(32))
        descriptor, draft_name = tempfile.mkstemp(
            prefix=f"{self.path.name}.", suffix=".draft", dir=self.path.parent
        )
        draft = Path(draft_name)
        try:
            with os.fdopen(descriptor, "wb") as file:
                file.write(new_key + b"\n")
                file.flush()
                os.fsync(file.fileno())
            os.link(draft, self.path, follow_symlinks=False)
        except FileExistsError:  # another process created it first, or something was planted
            return self.read()
        finally:
            draft.unlink()
        notices.append(
            f"Created a new encryption key for {self.database} at {self.path} (readable only by "
            "you). Keep it safe and out of version control: if it is lost, nobody can read these "
            f"memories. To use your own key instead, set ${STORE_KEY_ENV}."
        )
        return parse_key(new_key, str(self.path), str(self.database))

    def read(self) -> bytes:
        """The key in the file, refused unless only we own it and can read or write it.

        Checked on the opened file, so that what is checked is what is read. Another user's file
        may have been planted to make us encrypt with a key they know.
        """
        try:
            # Without O_NONBLOCK, opening a FIFO would wait for a writer, for ever.
            descriptor = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
            with os.fdopen(descriptor, "rb") as file:
                status = os.fstat(file.fileno())
                text = file.read(1000) if stat.S_ISREG(status.st_mode) else b""
        except OSError as error:
            raise MemoryStoreKeyError(
                f"Cannot read the key file {self.path} for {self.database} ({error.strerror}); "
                f"fix its permissions or set ${STORE_KEY_ENV}."
            ) from None
        if not stat.S_ISREG(status.st_mode):
            raise MemoryStoreKeyError(
                f"The key file {self.path} for {self.database} is not a regular file; replace it "
                f"with the store's key file, or set ${STORE_KEY_ENV}."
            )
        if status.st_uid != os.geteuid():
            raise MemoryStoreKeyError(
                f"The key file {self.path} for {self.database} is owned by another user (uid "
                f"{status.st_uid}), who may have planted it or can read it; memorybook uses only "
                "a key file of your own. If it really is your store's key, copy it to a new file "
                f"of yours with mode 0600 in its place; otherwise remove it, or set "
                f"${STORE_KEY_ENV}."
            )
        mode = stat.S_IMODE(status.st_mode)
        if mode & 0o077:
            raise MemoryStoreKeyError(
                f"The key file {self.path} for {self.database} can be read or written by other "
                f"users (mode {mode:04o}), who could then decrypt these memories or swap the key. "
                f"Make it private with `chmod 600 {self.path}`, and treat the key as seen by "
                "others if they could read it."
            )
        return parse_key(text, str(self.path), str(self.database))
