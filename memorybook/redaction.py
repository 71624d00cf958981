"""The one place secrets are taken out of text.

`redact` replaces the API key, any `Authorization` value, a URL's password and any secrets given,
in the forms an endpoint may echo them in, in every message the project shows, writes or raises.
"""

from __future__ import annotations

import base64
import json
import re
from urllib.parse import quote, quote_plus, unquote

from memorybook.settings import api_key_in_environment

REDACTED = "[redacted]"
_SHORTEST_SECRET = 8  # shorter keys are replaced as whole words only
# "Authorization: Bearer x", "authorization": "Bearer x", 'Authorization': 'x', authorization=x
_AUTHORIZATION_VALUE = re.compile(
    r"""(?ix)(authorization \\?["']? \s* [:=] \s* \\?["']? \s*)   # the name and separator
    (?!\[redacted\])[^\s"'\\,;}][^"'\\\r\n,;}]*    # the value, unless already redacted""",
)
_BEARER_TOKEN = re.compile(r"(?i)\b(bearer\s+)(?!\[redacted\])[^\s\"',;}\\]+")
# A URL query parameter that holds a credential: ?password=, &sslpassword=, ?api_key=, &token=...
# Its name may be %-encoded (?pass%77ord=), as libpq and most URL parsers decode names too.
_URL_QUERY_PARAMETER = re.compile(r"([?&;][\w.%-]+=)(?!\[redacted\])[^&;\s\"'<>]+")
_SECRET_NAME = re.compile(
    r"(?i)[\w.-]*(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key)[\w.-]*")
_PERCENT_ESCAPE = re.compile(r"%[0-9A-F]{2}")
# The password of a URL with credentials (scheme://user:password@host), up to its last @. The
# match starts where no scheme character precedes it, and reads those before the scheme's first
# letter (`:-postgres://` in a shell default): so a long run of them is read once, not once from
# each of its letters (which took 39 s for a subject of 100,000 characters).
_URL_PASSWORD = re.compile(
    r"""(?i)(?<![a-z0-9+.-])([0-9+.-]*[a-z][a-z0-9+.-]*://[^\s/:@"'<>]*:)(?!\[redacted\]@)"""
    r"""[^\s/"'<>]+@""")


def redact(text: object, *secrets: str) -> str:
    """`text` as a string with the API key, any `Authorization` value and `secrets` replaced.

    Every message that leaves the process goes through here: notebook outputs, `make record`
    reports, and the errors this project raises. The key is $TYPESAFE_API_KEY as the environment
    holds it now; a key given otherwise (`Settings(api_key=...)`) is one of `secrets`, as the
    parts holding it pass it.
    """
    text = redact_key(str(text), *secrets)
    text = _URL_PASSWORD.sub(lambda match: match.group(1) + REDACTED + "@", text)
    text = _URL_QUERY_PARAMETER.sub(_redacted_if_secret, text)
    text = _AUTHORIZATION_VALUE.sub(lambda match: match.group(1) + REDACTED, text)
    return _BEARER_TOKEN.sub(lambda match: match.group(1) + REDACTED, text)


def _redacted_if_secret(parameter: re.Match) -> str:
    name = unquote(parameter.group(1)[1:-1]).strip()
    return parameter.group(1) + REDACTED if _SECRET_NAME.fullmatch(name) else parameter.group()


def redact_key(text: str, *secrets: str) -> str:
    """`text` with the API key and `secrets` replaced, in every form they may be echoed in, and
    nothing else changed."""
    for secret in (api_key_in_environment(), *secrets):
        if secret is None:
            continue
        if len(secret) >= _SHORTEST_SECRET:
            for form in sorted(_echoed_forms(secret), key=len, reverse=True):
                text = text.replace(form, REDACTED)
        elif secret:  # a short test key such as "k": whole words only, not every letter k
            for form in {secret, json.dumps(secret)[1:-1], repr(secret)[1:-1]}:
                text = re.sub(rf"(?<![\w-]){re.escape(form)}(?![\w-])", REDACTED, text)
    return text


def _echoed_forms(secret: str) -> set[str]:
    """The ways a secret shows up when something echoes it: quoted, escaped, encoded."""
    escaped = json.dumps(secret)[1:-1]
    forms = {secret, escaped, repr(secret)[1:-1], escaped.replace("/", "\\/")}
    for encoded in (quote(secret, safe=""), quote(secret), quote_plus(secret)):
        forms |= {encoded, _PERCENT_ESCAPE.sub(lambda match: match.group().lower(), encoded)}
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
