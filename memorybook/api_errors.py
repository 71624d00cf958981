"""Live calls that fail: one sentence a notebook reader can act on, instead of a traceback."""

from __future__ import annotations

import re

from typesafe_sdk import (
    TypeSafeAPIConnectionError,
    TypeSafeAPIError,
    TypeSafeAPIResponseValidationError,
    TypeSafeAPITimeoutError,
    TypeSafeAuthenticationError,
    TypeSafeError,
    TypeSafeInternalServerError,
    TypeSafeRateLimitError,
)

from memorybook.errors import MemorybookError
from memorybook.redaction import redact
from memorybook.settings import API_KEY_ENV, ENDPOINT_ENV, TIMEOUT_ENV, Settings


class CallTimeoutError(MemorybookError, TypeSafeError):
    """A live call, its retries and the waits between them included, ran out of time."""


class PlainHttpRefusedError(MemorybookError, TypeSafeError):
    """A live call would have sent the API key over plain http to another machine."""


class ProxySettingError(MemorybookError, TypeSafeError):
    """A proxy set in the environment is of a kind the live client cannot send through."""


class AnswerRefusedError(MemorybookError, TypeSafeError):
    """A live call's answer was too long to read, or in an encoding that was not asked for."""


def describe_api_failure(error: TypeSafeError, *, quoting_the_api: bool = True,
                         settings: Settings | None = None) -> str:
    """What went wrong with a live call (the SDK's error), in a sentence its reader can act on:
    a notebook's, or an app's log. No key or password is in it. What the API said when it
    refused a request may quote the request, a customer's words included: a log kept at rest
    takes `quoting_the_api=False`, which leaves it out. `settings`: those of the call's client,
    which name its endpoint and key (by default the environment's)."""
    settings = settings or Settings.from_environment()
    # Without its query, which may hold a credential (?password=...); redact() takes the rest.
    endpoint = re.split(r"[?#]", settings.endpoint or "", maxsplit=1)[0] \
        or "the default TypeSafe endpoint"
    status = getattr(error, "status", None)
    if isinstance(error, TypeSafeAuthenticationError):
        what = f"the API refused the key (HTTP 401): check {API_KEY_ENV}"
    elif isinstance(error, TypeSafeRateLimitError):
        what = "the API kept answering 'too many requests' (HTTP 429) after the SDK's retries, " \
               "which waited as long as the API asked: try again in a minute"
    elif isinstance(error, TypeSafeInternalServerError):
        what = f"the API failed (HTTP {status}) on every retry the SDK made: try again later"
    elif isinstance(error, CallTimeoutError):
        what = f"{error}: try again, or raise {TIMEOUT_ENV}"
    elif isinstance(error, TypeSafeAPITimeoutError):
        what = f"no answer from {endpoint} in time, on every retry: try again, or raise " \
               f"{TIMEOUT_ENV}"
    elif isinstance(error, TypeSafeAPIConnectionError):
        what = f"could not connect to {endpoint}: check {ENDPOINT_ENV} and the network"
    elif isinstance(error, TypeSafeAPIResponseValidationError):
        field = getattr(error, "field_path", "") or "the whole body"
        what = f"the API answered with a body the SDK could not read (at {field})"
    elif isinstance(error, TypeSafeAPIError):
        what = f"the API refused the request (HTTP {status})"
        what += f": {error}" if quoting_the_api else " (what it said is left out: it may quote " \
                                                    "the ticket)"
    else:
        what = str(error)
    return redact(f"Live call failed: {what}. Nothing was recorded for this call.",
                  settings.api_key)

