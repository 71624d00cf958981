"""The errors a memory store raises."""


class MemoryStoreError(Exception):
    """The memory store could not do what was asked; the message says what to do."""


class MemoryStoreKeyError(MemoryStoreError):
    """The encryption key is missing, malformed, or not the one the store was made with."""


class MemoryNotFoundError(MemoryStoreError):
    """``forget()`` was asked for a ticket the customer has no memory of."""


class UnreadableMemory(Exception):
    """A stored row whose memory cannot be read; the message says why."""
