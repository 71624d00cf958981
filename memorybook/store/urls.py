"""Store URLs: the variable that names one, the SQLite form, and passwords kept out of messages."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

from memorybook.settings import STORE_URL_ENV as STORE_URL_ENV
from memorybook.store.validation import MemoryStoreError, shown

# The query parameters holding a password: libpq's password= and sslpassword= (of the client
# key). libpq decodes a parameter's name as it does its value, so ?pass%77ord= is one too; its
# value runs to the next & (a # included).
_PASSWORD_PARAMETERS = {"password", "sslpassword"}
# A scheme and the slashes after it, as many as were typed (sqlite:///path keeps its third).
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:/{0,2}")
# A password in libpq's keyword form: password=value or password = 'quoted value'.
_KEYWORD_PASSWORD = re.compile(r"(?i)(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s']+)")


def sqlite_path(url: str) -> Path:
    """``sqlite:///relative/path`` or ``sqlite:////absolute/path`` -> a path."""
    prefix = "sqlite:///"
    path = unquote(url[len(prefix) :]) if url.lower().startswith(prefix) else ""
    if not path or "?" in path:
        raise MemoryStoreError(
            f"Cannot read a file path from {shown(redacted(url))}: write "
            "sqlite:///relative/path.sqlite3 or "
            "sqlite:////absolute/path.sqlite3."
        )
    return Path(path)


def _userinfo(url: str) -> tuple[str, str, str]:
    """(``scheme://``, user info, the rest) of a URL, split at the last @ before any ? or #.

    Found without a URL parser, so that a password holding unencoded @, /, or spaces, which
    parsers split in other places, is still found whole; and in a URL mistyped with one slash
    or none after its scheme (``postgresql:/user:password@host``), which is echoed back too.
    """
    scheme = _SCHEME.match(url)
    if not scheme:
        return "", "", url
    rest = url[scheme.end():]
    before_query = re.split(r"[?#]", rest, maxsplit=1)[0]
    user_info, at, _ = before_query.rpartition("@")
    if not at:
        return scheme.group(), "", rest
    return scheme.group(), user_info, rest[len(user_info) + 1 :]


def passwords_in(url: str) -> list[str]:
    """The URL's passwords as they may appear in messages: as written and decoded, longest first.
    Given libpq's other form (``host=... password=...``), its password too."""
    scheme, user_info, rest = _userinfo(url)
    found = [user_info.partition(":")[2]] if ":" in user_info else []
    found += [value for name, value in _query_parameters(rest) if _is_password(name)]
    if not scheme:
        found += [match.group(2) for match in _KEYWORD_PASSWORD.finditer(url)]
        found += [match.group(2)[1:-1] for match in _KEYWORD_PASSWORD.finditer(url)
                  if match.group(2).startswith("'")]
    forms = {form for secret in found for form in (secret, unquote(secret)) if form}
    return sorted(forms, key=len, reverse=True)


def password_needs_encoding(url: str) -> bool:
    _, user_info, _ = _userinfo(url)
    password = user_info.partition(":")[2]
    return any(character in password for character in "@/?#") or any(
        character.isspace() for character in password
    )


def redacted(url: str) -> str:
    """The URL without its password, fit for error messages."""
    scheme, user_info, rest = _userinfo(url)
    if not scheme:  # not a URL: libpq's `key=value` form, or anything else
        return _KEYWORD_PASSWORD.sub(lambda match: f"{match.group(1)}***", url)
    if ":" in user_info:
        user_info = f"{user_info.partition(':')[0]}:***"
    path, question_mark, _ = rest.partition("?")
    if question_mark:
        rest = path + "?" + "&".join(f"{name}=***" if _is_password(name) else f"{name}{sep}{value}"
                                     for name, sep, value in _query_parameters(rest, True))
    return f"{scheme}{user_info}@{rest}" if user_info else f"{scheme}{rest}"


def _query_parameters(rest: str, separators: bool = False) -> list[tuple[str, ...]]:
    """The (name, value) pairs of a URL's query, as libpq splits them: at each & and first =."""
    query = rest.partition("?")[2]
    pairs = [pair.partition("=") for pair in query.split("&")] if query else []
    return pairs if separators else [(name, value) for name, _, value in pairs]


def _is_password(name: str) -> bool:
    """Whether libpq would take the parameter named so (as written in the URL) as a password."""
    return unquote(name).strip().lower() in _PASSWORD_PARAMETERS
