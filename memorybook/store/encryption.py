"""The store key and what is derived from it: lookup digests, sealed memories, the key check.

Memories are sealed with AES-256-GCM, each bound to the digests of its row, so a row copied to
another customer fails to open. Customer and ticket ids are stored only as keyed HMAC-SHA256
digests. Each working key is derived from the one store key (HKDF) for one purpose.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from memorybook.settings import STORE_KEY_ENV as STORE_KEY_ENV
from memorybook.settings import Settings
from memorybook.store.validation import MAX_MEMORY_NESTING, MemoryStoreKeyError, UnreadableMemory

NEW_KEY_COMMAND = (
    'python -c "import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())"'
)

_KEY_CHECK_MESSAGE = b"memorybook key check"
_SEALED_VERSION = b"\x01"
_NONCE_BYTES = 12
_KEY_TEXT = re.compile(r"[A-Za-z0-9_-]{43}=")  # 32 bytes in URL-safe base64, nothing else
_DAMAGED = "failed its integrity check: it was changed or damaged outside memorybook"
_BYTES = (bytes, bytearray, memoryview)  # what a database gives for a bytes column


class Keys:
    """The working keys derived from one store key, each for one purpose."""

    def __init__(self, store_key: bytes) -> None:
        self._cipher = AESGCM(_derive(store_key, b"memorybook: encrypt memories"))
        # Keyed once: each digest starts from a copy, not from the key.
        self._lookup = hmac.new(_derive(store_key, b"memorybook: lookup digests"), None,
                                hashlib.sha256)
        check_key = _derive(store_key, b"memorybook: key check")
        self.check_value = hmac.new(check_key, _KEY_CHECK_MESSAGE, hashlib.sha256).digest()

    def matches(self, stored_check_value: bytes) -> bool:
        """Whether the store's recorded key check value was made with this key."""
        return hmac.compare_digest(bytes(stored_check_value), self.check_value)

    def customer_digest(self, customer_id: str) -> bytes:
        return self._digest(["customer", customer_id])

    def ticket_digest(self, customer_id: str, ticket_id: str) -> bytes:
        # Scoped to the customer, so the same ticket id under two customers is unlinkable.
        return self._digest(["ticket", customer_id, ticket_id])

    def seal(self, customer: bytes, ticket: bytes, text: str) -> bytes:
        """A memory's JSON text, encrypted and bound to the digests of its row."""
        nonce = os.urandom(_NONCE_BYTES)
        ciphertext = self._cipher.encrypt(nonce, text.encode("utf-8"), customer + ticket)
        return _SEALED_VERSION + nonce + ciphertext

    def unseal(self, customer: bytes, ticket: bytes, sealed: bytes) -> dict:
        """The memory in a row; ``UnreadableMemory`` says why a row cannot be read."""
        return _decoded(self.opened(customer, ticket, sealed))

    def opened(self, customer: bytes, ticket: bytes, sealed: bytes) -> str:
        """The JSON text in a row, decrypted once its integrity is checked (``UnreadableMemory``
        if it fails); ``decode_all()`` decodes many at once. A value that is not bytes (text
        that SQLite was given in place of them, say) fails it too."""
        if not all(isinstance(part, _BYTES) for part in (customer, ticket, sealed)):
            raise UnreadableMemory(_DAMAGED)
        sealed = bytes(sealed)
        version = sealed[:1]
        nonce, ciphertext = sealed[1 : 1 + _NONCE_BYTES], sealed[1 + _NONCE_BYTES :]
        try:
            if version != _SEALED_VERSION:
                raise InvalidTag
            return self._cipher.decrypt(nonce, ciphertext,
                                        bytes(customer) + bytes(ticket)).decode("utf-8")
        except (InvalidTag, ValueError):
            raise UnreadableMemory(_DAMAGED) from None

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
    have none) and where it came from, for messages (``$MEMORYBOOK_STORE_KEY``). Its repr shows
    only where."""

    text: str | bytes | None = field(repr=False)
    source: str


def resolve_key(
    key: str | bytes | StoreKey | None, location: str, otherwise: Callable[[], bytes]
) -> bytes:
    """The store key: the ``key`` argument, else the settings' (a ``StoreKey`` from open_store();
    for a store made directly, the environment's, read now: ``$MEMORYBOOK_STORE_KEY``), else
    ``otherwise()``.

    ``otherwise`` is the backend's own way: the key file of a SQLite store, or an error.
    """
    if key is None:
        settings = Settings.from_environment()
        key = StoreKey(settings.store_key, settings.source("store_key"))
    elif not isinstance(key, StoreKey):
        key = StoreKey(key, "the key argument")
    if key.text is None:
        return otherwise()
    return parse_key(key.text, key.source, location)


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
