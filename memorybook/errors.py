"""The one class every error of memorybook derives from, for an app that catches them all.

    try:
        response = ask_with_memory(state, questions, memories)
    except MemorybookError as error:
        ...  # the message says what went wrong and what to do

Each error is defined beside the code that raises it (the recording's in memorybook/recording/,
the store's in memorybook/store/validation.py, a failed live call's in memorybook/api_errors.py)
and `memorybook` exports them all. This module imports nothing, so that every other can use it.
"""


class MemorybookError(Exception):
    """memorybook could not do what was asked; the message says what went wrong and what to do."""
