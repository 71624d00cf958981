"""The key file beside a local SQLite store: made once without races, read only if private; and
the new key of a rotation (memorybook/store/rotation.py), which replaces it at once."""

from __future__ import annotations

import base64
import os
import stat
import tempfile
from pathlib import Path

from memorybook.store.encryption import STORE_KEY_ENV, parse_key
from memorybook.store.validation import MemoryStoreKeyError

# Windows has no owner ids or group and other mode bits to check (a file there is as private as
# its folder's access list), and neither these open flags nor link() without following links.
OWNERS_AND_MODES = hasattr(os, "geteuid")
READ_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
              | getattr(os, "O_BINARY", 0))
LINK_OPTIONS = {"follow_symlinks": False} if os.link in os.supports_follow_symlinks else {}


class KeyFile:
    """``<database>.key``: the store key of a SQLite store given no key otherwise (mode 0600).
    While the key rotates, ``<database>.key.new`` holds the new one (``next_path``)."""

    def __init__(self, database: Path, suffix: str = ".key") -> None:
        self.database = database
        self.path = database.with_name(database.name + suffix)
        self.next_path = database.with_name(database.name + ".key.new")

    def next_key(self) -> bytes:
        """The new key of a rotation: the one an interrupted rotation left in ``next_path``,
        else a new one written there (as the key file is made: private, never through a link),
        on disk before it seals anything."""
        next_file = KeyFile(self.database, ".key.new")
        if os.path.lexists(next_file.path):
            return next_file.read()
        return next_file.create([])

    def take_next_key(self) -> None:
        """Replace the key file by the rotation's new key, in one step (a rename), on disk when
        this returns: the last step of a rotation."""
        os.replace(self.next_path, self.path)
        _sync_folder(self.path.parent)

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
            try:
                os.link(draft, self.path, **LINK_OPTIONS)
            except FileExistsError:
                raise
            except OSError:  # a file system without hard links (FAT, some network shares)
                self._write_exclusively(new_key)
        except FileExistsError:  # another process created it first, or something was planted
            return self.read()
        finally:
            draft.unlink()
        _sync_folder(self.path.parent)  # the key on disk before anything is sealed with it
        notices.append(
            f"Created a new encryption key for {self.database} at {self.path} (readable only by "
            "you). Keep it safe and out of version control: if it is lost, nobody can read these "
            f"memories. To use your own key instead, set ${STORE_KEY_ENV}."
        )
        return parse_key(new_key, str(self.path), str(self.database))

    def _write_exclusively(self, new_key: bytes) -> None:
        """Create the key file itself, failing if anything is there (a link included)."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
        with os.fdopen(os.open(self.path, flags, 0o600), "wb") as file:
            file.write(new_key + b"\n")
            file.flush()
            os.fsync(file.fileno())

    def read(self) -> bytes:
        """The key in the file, refused unless only we own it and can read or write it.

        Checked on the opened file, so that what is checked is what is read. Another user's file
        may have been planted to make us encrypt with a key they know.
        """
        try:
            # Without O_NONBLOCK, opening a FIFO would wait for a writer, for ever.
            descriptor = os.open(self.path, READ_FLAGS)
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
        if OWNERS_AND_MODES:
            self._refuse_unless_private(status)
        return parse_key(text, str(self.path), str(self.database))

    def _refuse_unless_private(self, status: os.stat_result) -> None:
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


def _sync_folder(folder: Path) -> None:
    """Make a file's creation or renaming in ``folder`` durable (POSIX: the folder's fsync)."""
    if not OWNERS_AND_MODES:  # Windows: no folder can be opened to sync; NTFS logs renames
        return
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
