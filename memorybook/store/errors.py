"""The errors a memory store raises."""


class MemoryStoreError(Exception):
    """The memory store could not do what was asked; the message says what to do."""


class MemoryStoreKeyError(MemoryStoreError):
    """The encryption key is missing, malformed, or not the one the store was made with."""


class MemoryNotFoundError(MemoryStoreError, KeyError):
    """``forget()`` was asked for a ticket the customer has no memory of.

    A `KeyError`, as the in-kernel memories raise, so code that forgets works with either.
    """

    def __str__(self) -> str:  # the message as given, not quoted as KeyError's would be
        return str(self.args[0]) if self.args else ""


class UnreadableMemory(Exception):
    """A stored row whose memory cannot be read; the message says why."""
