"""The one class every error of memorybook derives from, for an app that catches them all.

    try:
        response = ask_with_memory(state, questions, memories)
    except MemorybookError as error:
        ...  # the message says what went wrong and what to do

Each error is defined beside the code that raises it (the recording's in memorybook/recording/,
the store's in memorybook/store/validation.py, a failed live call's in memorybook/api_errors.py)
and `memorybook` exports them all. This module imports nothing of ours, so that every other can
use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typesafe_sdk import SystemOneResponse


class MemorybookError(Exception):
    """memorybook could not do what was asked; the message says what went wrong and what to do."""

    # Jev's answer, when ask_with_memory() had it before the gate or the save failed; an error of
    # the SDK's raised there carries it too (read it with getattr(error, "response", None)).
    response: SystemOneResponse | None = None
