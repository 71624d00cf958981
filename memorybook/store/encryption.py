"""The store keys and what is derived from them: lookup digests, sealed memories, the key check.

Memories are sealed with AES-256-GCM, each bound to the digests of its row, so a row copied to
another customer fails to open. Customer and ticket ids are stored only as keyed HMAC-SHA256
digests. Each working key is derived from a store key (HKDF) for one purpose.

A store object may be given earlier keys besides its key (``$MEMORYBOOK_STORE_OLD_KEYS``), as
MultiFernet is: it seals with its key and opens what any of them sealed, its key tried first. The
digests keep one key of their own whatever the store key is, so that rows written under an
earlier key are still found: the digest key derived from the store's first key, which the store
holds sealed once its key has rotated (memorybook/store/rotation.py).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from memorybook.settings import STORE_KEY_ENV as STORE_KEY_ENV
from memorybook.settings import Settings
from memorybook.store.validation import (
    MAX_MEMORY_NESTING,
    MemoryStoreKeyError,
    StoreInputError,
    UnreadableMemory,
)

NEW_KEY_COMMAND = (
    'python -c "import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())"'
)

_KEY_CHECK_MESSAGE = b"memorybook key check"
_SEALED_VERSION = b"\x01"
_NONCE_BYTES = 12
_KEY_TEXT = re.compile(r"[A-Za-z0-9_-]{43}=")  # 32 bytes in URL-safe base64, nothing else
_DAMAGED = "failed its integrity check: it was changed or damaged outside memorybook"
_BYTES = (bytes, bytearray, memoryview)  # what a database gives for a bytes column
_DIGEST_KEY_AAD = b"memorybook digest key"  # what the store's sealed digest key is bound to
# Besides its customer's digest, a history row's sealed ticket id is bound to this (as is the copy
# beside each memory, which history takes), and a pending gate's sealed memory to that: so that
# no value opens as one of another kind.
HISTORY_AAD = b"memorybook history"
PENDING_AAD = b"memorybook pending gate"


class DerivedKeys:
    """The working keys derived from one store key: its cipher, its check value, and the digest
    key a store first made with it keeps (``lookup_key``)."""

    def __init__(self, store_key: bytes) -> None:
        self.cipher = AESGCM(_derive(store_key, b"memorybook: encrypt memories"))
        self.lookup_key = _derive(store_key, b"memorybook: lookup digests")
        check_key = _derive(store_key, b"memorybook: key check")
        self.check_value = hmac.new(check_key, _KEY_CHECK_MESSAGE, hashlib.sha256).digest()

    def matches(self, check_value: bytes) -> bool:
        """Whether a key check value was made with this key."""
        return hmac.compare_digest(bytes(check_value), self.check_value)

    def seal(self, bound_to: bytes, plain: bytes) -> bytes:
        nonce = os.urandom(_NONCE_BYTES)
        return _SEALED_VERSION + nonce + self.cipher.encrypt(nonce, plain, bound_to)

    def open(self, bound_to: bytes, sealed: bytes) -> bytes:
        """What ``sealed`` holds; InvalidTag unless this key sealed it, bound to ``bound_to``."""
        if sealed[:1] != _SEALED_VERSION:
            raise InvalidTag
        nonce, ciphertext = sealed[1 : 1 + _NONCE_BYTES], sealed[1 + _NONCE_BYTES :]
        return self.cipher.decrypt(nonce, ciphertext, bound_to)

    def sealed_digest_key(self, digest_key: bytes) -> bytes:
        """A store's digest key, sealed with this key as the store's meta holds it."""
        return self.seal(_DIGEST_KEY_AAD, digest_key)

    def opened_digest_key(self, sealed: bytes, location: str) -> bytes:
        try:
            return self.open(_DIGEST_KEY_AAD, bytes(sealed))
        except (InvalidTag, ValueError):
            raise MemoryStoreKeyError(
                f"The digest key held in {location} {_DAMAGED}, so no customer's rows can be "
                "found: restore the store from a backup."
            ) from None


class Keys:
    """The working keys of a store object: it seals with the first key it was given and opens
    what any of them sealed (the first tried first); its digests use ``digest_key`` (by default
    the first key's own, as a store made with it has them)."""

    def __init__(self, store_key: bytes, old_keys: Iterable[bytes] = (), *,
                 digest_key: bytes | None = None) -> None:
        self.given: list[DerivedKeys] = []
        for key in (store_key, *old_keys):
            derived = DerivedKeys(key)
            if not any(other.matches(derived.check_value) for other in self.given):
                self.given.append(derived)
        self._settle(self.given[0], digest_key or self.given[0].lookup_key)

    def _settle(self, sealing: DerivedKeys, digest_key: bytes) -> None:
        self.sealing = sealing  # the key that seals
        self.check_value = sealing.check_value
        self.digest_key = digest_key
        # Keyed once: each digest starts from a copy, not from the key.
        self._lookup = hmac.new(digest_key, None, hashlib.sha256)
        self._opening = [sealing, *(key for key in self.given if key is not sealing)]

    def settled(self, sealing: DerivedKeys, digest_key: bytes) -> Keys:
        """These keys, sealing with ``sealing`` (one of them) and digesting with ``digest_key``."""
        settled = object.__new__(Keys)
        settled.given = self.given
        settled._settle(sealing, digest_key)
        return settled

    def matching(self, check_value: bytes) -> DerivedKeys | None:
        """The key given that made this key check value, if any."""
        return next((key for key in self.given if key.matches(check_value)), None)

    def customer_digest(self, customer_id: str) -> bytes:
        return self._digest(["customer", customer_id])

    def ticket_digest(self, customer_id: str, ticket_id: str) -> bytes:
        # Scoped to the customer, so the same ticket id under two customers is unlinkable.
        return self._digest(["ticket", customer_id, ticket_id])

    def seal(self, customer: bytes, ticket: bytes, text: str) -> bytes:
        """A memory's JSON text, encrypted and bound to the digests of its row."""
        return self.sealing.seal(customer + ticket, text.encode("utf-8"))

    def unseal(self, customer: bytes, ticket: bytes, sealed: bytes) -> dict:
        """The memory in a row; ``UnreadableMemory`` says why a row cannot be read."""
        return _decoded(self.opened(customer, ticket, sealed))

    def opened(self, customer: bytes, ticket: bytes, sealed: bytes) -> str:
        """The JSON text in a row, decrypted once its integrity is checked (``UnreadableMemory``
        if it fails); ``decode_all()`` decodes many at once. A value that is not bytes (text
        that SQLite was given in place of them, say) fails it too."""
        if not all(isinstance(part, _BYTES) for part in (customer, ticket, sealed)):
            raise UnreadableMemory(_DAMAGED)
        sealed, bound_to = bytes(sealed), bytes(customer) + bytes(ticket)
        for key in self._opening:
            try:
                return key.open(bound_to, sealed).decode("utf-8")
            except InvalidTag:
                continue
            except ValueError:
                break
        raise UnreadableMemory(_DAMAGED)

    def resealed(self, customer: bytes, ticket: bytes, sealed: object) -> bytes | None:
        """``sealed`` (a row's, as ``opened()`` takes it) sealed anew with the key that seals;
        None if that key sealed it already. ``UnreadableMemory`` if no key given opens it."""
        if not all(isinstance(part, _BYTES) for part in (customer, ticket, sealed)):
            raise UnreadableMemory(_DAMAGED)
        sealed, bound_to = bytes(sealed), bytes(customer) + bytes(ticket)  # type: ignore[arg-type]
        for key in self._opening:
            try:
                plain = key.open(bound_to, sealed)
            except (InvalidTag, ValueError):
                continue
            return None if key is self.sealing else self.sealing.seal(bound_to, plain)
        raise UnreadableMemory(_DAMAGED)

    def _digest(self, parts: list[str]) -> bytes:
        message = json.dumps(parts).encode("ascii")  # unambiguous, whatever the ids contain
        lookup = self._lookup.copy()
        lookup.update(message)
        return lookup.digest()


def decode_all(texts: list[str]) -> list[dict | UnreadableMemory]:
    """The memories of opened rows' JSON texts, in one pass of the decoder; in place of one
    that cannot be decoded, the ``UnreadableMemory`` that says why.

    Each text is one JSON value, checked so when it was saved (and sealed since), so the array
    of them holds one item each. Should that pass fail, each is decoded alone.
    """
    try:
        memories = json.loads("[" + ",".join(texts) + "]")
    except (ValueError, RecursionError):
        memories = None
    if isinstance(memories, list) and len(memories) == len(texts):
        return memories
    decoded: list[dict | UnreadableMemory] = []
    for text in texts:
        try:
            decoded.append(_decoded(text))
        except UnreadableMemory as unreadable:
            decoded.append(unreadable)
    return decoded


def _decoded(text: str) -> dict:
    try:
        return json.loads(text)
    except ValueError:
        raise UnreadableMemory(_DAMAGED) from None
    except RecursionError:
        raise UnreadableMemory(
            f"is nested too deeply to decode (it was saved before memorybook refused memories "
            f"nested more than {MAX_MEMORY_NESTING} levels)"
        ) from None


def _derive(store_key: bytes, purpose: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(store_key)


@dataclass(frozen=True)
class StoreKey:
    """A store key as open_store() hands it on from its settings: the key (None: the settings
    have none) and where it came from, for messages (``$MEMORYBOOK_STORE_KEY``); and the earlier
    keys, to read with (``$MEMORYBOOK_STORE_OLD_KEYS``). Its repr shows only where."""

    text: str | bytes | None = field(repr=False)
    source: str
    old: tuple[str | bytes, ...] = field(default=(), repr=False)
    old_source: str = "the old_keys argument"


def resolve_keys(
    key: str | bytes | StoreKey | None, old_keys: Sequence[str | bytes] | None, location: str,
    otherwise: Callable[[], bytes],
) -> list[bytes]:
    """The store keys, the one to seal with first: the ``key`` argument, else the settings' (a
    ``StoreKey`` from open_store(); for a store made directly, the environment's, read now:
    ``$MEMORYBOOK_STORE_KEY``), else ``otherwise()``; then the earlier keys, ``old_keys`` if
    given, else those beside the settings' key (``$MEMORYBOOK_STORE_OLD_KEYS``).

    ``otherwise`` is the backend's own way: the key file of a SQLite store, or an error.
    """
    if key is None:
        settings = Settings.from_environment()
        key = StoreKey(settings.store_key, settings.source("store_key"),
                       settings.store_old_keys or (), settings.source("store_old_keys"))
    elif not isinstance(key, StoreKey):
        key = StoreKey(key, "the key argument")
    if old_keys is not None:
        if isinstance(old_keys, (str, bytes)) or not isinstance(old_keys, Sequence):
            raise StoreInputError(
                "old_keys takes a list of earlier store keys (each as key= takes one), not "
                f"{type(old_keys).__name__}")
        key = dataclasses.replace(key, old=tuple(old_keys), old_source="the old_keys argument")
    old = [parse_key(text, f"{key.old_source} (key {number})", location)
           for number, text in enumerate(key.old, start=1)]
    return [otherwise() if key.text is None else parse_key(key.text, key.source, location), *old]


def parse_key(key: str | bytes, source: str, location: str) -> bytes:
    """Decode a store key: 32 random bytes in URL-safe base64 (as Fernet keys are)."""
    text = key.strip() if isinstance(key, (str, bytes)) else None
    if isinstance(text, bytes):
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError:
            text = None
    raw = b""
    if text and _KEY_TEXT.fullmatch(text):
        try:
            raw = base64.urlsafe_b64decode(text)
        except (binascii.Error, ValueError):
            raw = b""
    if len(raw) == 32 and not any(raw):
        raise MemoryStoreKeyError(
            f"The key from {source} for {location} is all zero bytes, which is no secret: make a "
            f"random one with {NEW_KEY_COMMAND}"
        )
    if len(raw) != 32:
        raise MemoryStoreKeyError(
            f"The key from {source} for {location} is malformed: expected 32 random bytes in "
            f"URL-safe base64 (44 characters). Use the key the store was created with; for a new "
            f"store make one with {NEW_KEY_COMMAND}"
        )
    return raw
