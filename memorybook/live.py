"""Live calls that fail: one sentence a notebook reader can act on, instead of a traceback.

Also the one place secrets are taken out of text: `redact` replaces the API key and any
`Authorization` value in every message the project shows, writes or raises.
"""

from __future__ import annotations

import base64
import json
import os
import re
from urllib.parse import quote, quote_plus

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

from memorybook.config import API_KEY_ENV, ENDPOINT_ENV, TIMEOUT_ENV

REDACTED = "[redacted]"
_SHORTEST_SECRET = 8  # shorter keys are replaced as whole words only
# "Authorization: Bearer x", "authorization": "Bearer x", 'Authorization': 'x', authorization=x
_AUTHORIZATION_VALUE = re.compile(
    r"""(?ix)(authorization \\?["']? \s* [:=] \s* \\?["']? \s*)   # the name and separator
    (?!\[redacted\])[^\s"'\\,;}][^"'\\\r\n,;}]*    # the value, unless already redacted""",
)
_BEARER_TOKEN = re.compile(r"(?i)\b(bearer\s+)(?!\[redacted\])[^\s\"',;}\\]+")
# The password of a URL with credentials (scheme://user:password@host), up to its last @.
_URL_PASSWORD = re.compile(r"""(?i)\b([a-z][a-z0-9+.-]*://[^\s/:@"'<>]*:)(?!\[redacted\]@)[^\s/"'<>]+@""")


class CallTimeoutError(TypeSafeError):
    """A live call, its retries and the waits between them included, ran out of time."""


class PlainHttpRefusedError(TypeSafeError):
    """A live call would have sent the API key over plain http to another machine."""


def redact(text: object, *secrets: str) -> str:
    """`text` as a string with the API key, any `Authorization` value and `secrets` replaced.

    Every message that leaves the process goes through here: notebook outputs, `make record`
    reports, and the errors this project raises. The key is taken from $TYPESAFE_API_KEY.
    """
    text = str(text)
    key = os.environ.get(API_KEY_ENV, "").strip()
    for secret in (key, *secrets):
        if len(secret) >= _SHORTEST_SECRET:
            for form in sorted(_echoed_forms(secret), key=len, reverse=True):
                text = text.replace(form, REDACTED)
        elif secret:  # a short test key such as "k": whole words only, not every letter k
            for form in {secret, json.dumps(secret)[1:-1], repr(secret)[1:-1]}:
                text = re.sub(rf"(?<![\w-]){re.escape(form)}(?![\w-])", REDACTED, text)
    text = _URL_PASSWORD.sub(lambda match: match.group(1) + REDACTED + "@", text)
    text = _AUTHORIZATION_VALUE.sub(lambda match: match.group(1) + REDACTED, text)
    return _BEARER_TOKEN.sub(lambda match: match.group(1) + REDACTED, text)


def _echoed_forms(secret: str) -> set[str]:
    """The ways a secret shows up when something echoes it: quoted, escaped, encoded."""
    escaped = json.dumps(secret)[1:-1]
    forms = {secret, escaped, repr(secret)[1:-1], escaped.replace("/", "\\/"),
             quote(secret, safe=""), quote(secret), quote_plus(secret)}
    return {form for form in forms | _base64_cores(secret) if len(form) >= _SHORTEST_SECRET}


def _base64_cores(secret: str) -> set[str]:
    """The part of a secret's base64 that is the same wherever it sits in the encoded bytes.

    Base64 turns each 3 bytes into 4 characters, so the secret encodes differently at each of
    the 3 offsets it can start at; at each, the groups made of its bytes alone are fixed.
    """
    raw = secret.encode()
    cores = set()
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + raw).decode()
        start = 4 if offset else 0  # the first group mixes in the bytes before the secret
        end = (offset + len(raw)) // 3 * 4  # a last, partial group mixes in the bytes after it
        core = encoded[start:end]
        cores |= {core, core.replace("+", "-").replace("/", "_")}
    return cores


def describe_api_failure(error: TypeSafeError) -> str:
    """What went wrong with a live call, in a sentence a notebook reader can act on."""
    endpoint = os.environ.get(ENDPOINT_ENV) or "the default TypeSafe endpoint"
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
        what = f"the API refused the request (HTTP {status}): {error}"
    else:
        what = str(error)
    return redact(f"Live call failed: {what}. Nothing was recorded for this call.")

