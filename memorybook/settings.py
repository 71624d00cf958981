"""Every setting memorybook takes from the environment, read in one place and handed to each part.

    settings = Settings.from_environment()                  # os.environ, read now
    settings = Settings.from_environment(max_in_flight=2)   # the same, with a field given
    jev, store = Jev(settings=settings), open_store(settings=settings)

`Settings(...)` holds what it is given and the defaults below; only `from_environment()` reads
the environment, and no module reads it at import. A part given no settings (`settings=None`,
every part's default) calls `Settings.from_environment()` when it is made: Jev, its clients and
transport, open_store(), InFlight, the service, memorybook.testing's fixtures. An argument a part
takes itself (`Jev(recording, mode=...)`, `open_store(url, retention=...)`) wins over both.

A value that cannot be used is a ConfigError in one line naming its variable (or its field, when
given). The API key, the store keys and the service token show in no repr and no message; the
endpoint and the store's URL, which may hold a password, in no repr. The README's table lists
every variable; tests/test_settings.py holds the two to each other. This module imports nothing
but the standard library and memorybook.errors, so that the store, which reads its URL and key
here, loads neither the SDK nor the client.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
import math
import os
from collections.abc import Callable, Iterable
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

from memorybook.errors import MemorybookError

# The first two are the official cookbooks' own; CI is every CI system's; the rest are this
# library's. README.md's table says what each sets.
API_KEY_ENV = "TYPESAFE_API_KEY"
ENDPOINT_ENV = "TYPESAFE_ENDPOINT"
CI_ENV = "CI"
RECORDING_ENV = "MEMORYBOOK_RECORDING"
RECORD_MODE_ENV = "MEMORYBOOK_RECORD_MODE"
TIMEOUT_ENV = "MEMORYBOOK_TIMEOUT_SECONDS"
ALLOW_PLAIN_HTTP_ENV = "MEMORYBOOK_ALLOW_PLAIN_HTTP"
ALLOW_LIVE_IN_CI_ENV = "MEMORYBOOK_LIVE_IN_CI"  # the collection's loopback tests and live CI run
USAGE_LOG_ENV = "MEMORYBOOK_USAGE_LOG"  # the tests' record of which entries each notebook read
STORE_URL_ENV = "MEMORYBOOK_STORE_URL"
STORE_KEY_ENV = "MEMORYBOOK_STORE_KEY"
STORE_OLD_KEYS_ENV = "MEMORYBOOK_STORE_OLD_KEYS"  # earlier store keys, while the key rotates
RETENTION_DAYS_ENV = "MEMORYBOOK_RETENTION_DAYS"
SWEEP_MINUTES_ENV = "MEMORYBOOK_SWEEP_MINUTES"
MAX_IN_FLIGHT_ENV = "MEMORYBOOK_MAX_IN_FLIGHT"
MAX_BODY_BYTES_ENV = "MEMORYBOOK_MAX_BODY_BYTES"
ALLOWED_HOSTS_ENV = "MEMORYBOOK_ALLOWED_HOSTS"
TOKEN_ENV = "MEMORYBOOK_SERVICE_TOKEN"
LOG_FORMAT_ENV = "MEMORYBOOK_LOG_FORMAT"
# What httpx2 reads itself (trust_env), in either case: memorybook only names one it cannot use.
PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")

DEFAULT_TIMEOUT_SECONDS = 120.0  # for the whole of a live call, retries included
MAX_TIMEOUT_SECONDS = 86_400.0  # a day: longer ones overflow the clocks of sockets and threads
DEFAULT_MAX_IN_FLIGHT = 8  # the API's rate limits, and the official cookbooks' 8 workers
DEFAULT_MAX_BODY_BYTES = 1_000_000  # a ticket's state, as a memory may hold (MAX_MEMORY_BYTES)
DEFAULT_SWEEP_EVERY = timedelta(minutes=60)
SHORTEST_TOKEN = 16  # characters: a token anyone could guess protects nothing
LOOPBACK_NAMES = ("localhost",)
LOG_FORMATS = ("text", "json")  # the service's log lines: uvicorn's own, or a JSON object each


class ConfigError(MemorybookError, ValueError):
    """A setting or data file this project reads is unusable; the message names it and why."""


class Mode(StrEnum):
    """How a Jev answers: from its recording only, recording what it lacks, or live only
    (memorybook/jev.py says when each is chosen)."""

    REPLAY = "replay"
    RECORD = "record"
    LIVE = "live"


class NeverType(enum.Enum):
    """The type of NEVER, a retention under which memories last until they are erased."""

    NEVER = "never"

    def __repr__(self) -> str:
        return "NEVER"

    __str__ = __repr__


NEVER = NeverType.NEVER
# How long a memory lives when neither the caller nor $MEMORYBOOK_RETENTION_DAYS says: the one
# place this is decided (open_store() and the service take it from Settings.retention).
DEFAULT_RETENTION: timedelta | NeverType = NEVER
# The longest retention: its expiry dates must stay within what datetime and a 64-bit column
# hold (timedelta.max would overflow both); for memories that never expire, NEVER.
MAX_RETENTION = timedelta(days=36_525)  # a hundred years


def is_loopback(host: str) -> bool:
    """Whether a host name or address (brackets and a port already taken off) is this
    machine's loopback: `localhost`, 127.0.0.0/8 or ::1."""
    host = host.strip().lower().rstrip(".")
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def checked_token(token: object, name: str) -> str:
    """A bearer token as `Authorization` can carry it: printable ASCII, no spaces, at least
    SHORTEST_TOKEN characters. The message never repeats it."""
    if not (isinstance(token, str) and len(token) >= SHORTEST_TOKEN
            and all("!" <= character <= "~" for character in token)):
        raise ConfigError(f"{name} must be at least {SHORTEST_TOKEN} printable ASCII characters "
                          "without spaces (e.g. from `python3 -c 'import secrets; "
                          "print(secrets.token_urlsafe())'`).")
    return token


def checked_mode(mode: object) -> Mode | None:
    """A record mode as `mode=` or $MEMORYBOOK_RECORD_MODE gives it; None (blank) to choose one
    from the key and the recording."""
    text = str(mode).strip().lower() if mode is not None else ""
    if not text:
        return None
    try:
        return Mode(text)
    except ValueError:
        raise ConfigError(f"{RECORD_MODE_ENV} (or mode=) is {str(mode)[:40]!r}; it takes "
                          f"{', '.join(Mode)}.") from None


# -- reading a variable's text: each says, in one line, what it takes ------------------------

def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "...")


def _positive(name: str, text: str, example: float, *, whole: bool = False) -> float:
    """$name as a positive (whole) number."""
    try:
        value = float(int(text)) if whole else float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0 or value > 1e12:
        kind = "whole number" if whole else "number"
        raise ConfigError(f"{name}={_shown(text)} is not a positive {kind}: set it to "
                          f"e.g. {example:g}, or unset it for the default.")
    return value


def _seconds(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0 or value > MAX_TIMEOUT_SECONDS:
        raise ConfigError(
            f"{name}={_shown(text)} is not a positive number of seconds up to "
            f"{MAX_TIMEOUT_SECONDS:,.0f} (a day); set it to e.g. 120, or unset it for the default "
            f"of {DEFAULT_TIMEOUT_SECONDS:g}.")
    return value


def _days(name: str, text: str) -> timedelta | NeverType:
    if text.lower() == NEVER.value:
        return NEVER
    days = _positive(name, text, 30)
    if days > MAX_RETENTION.days:
        raise ConfigError(
            f"{name}={days:g} is longer than a store keeps a memory ({MAX_RETENTION.days:,} days, "
            "a hundred years): set fewer days, or `never` (or unset it) for memories that last "
            "until erased.")
    return timedelta(days=days)


def _in_flight(name: str, text: str) -> int:
    if not (text.isdigit() and 1 <= int(text) <= 1000):
        raise ConfigError(f"{name}={text[:20]!r} is not a whole number from 1 to 1,000: the "
                          f"requests to Jev at once (default {DEFAULT_MAX_IN_FLIGHT}).")
    return int(text)


def _log_format(name: str, text: str) -> str:
    if text.lower() not in LOG_FORMATS:
        raise ConfigError(f"{name}={_shown(text)} is not a log format: set it to json (a JSON "
                          "object a line), or text (the default).")
    return text.lower()


def _hosts(name: str, text: str) -> frozenset[str]:
    return frozenset(host.strip().lower().rstrip(".") for host in text.split(",") if host.strip())


def _setting(variable: str, default: Any, read: Callable[[str, str], Any] = lambda _, text: text,
             *, hidden: bool = False, unset_means: str | None = None) -> Any:
    """A field of Settings: `read(variable, text)` turns the variable's text, stripped, into its
    value, unless it is unset or blank (then `default`). A hidden field shows in no repr. A field
    whose default weakens what protects the customers' data (`unset_means` says how) refuses a
    variable set but blank: an empty `${VALUE}` in a deployment's file is a value gone missing,
    not a choice."""
    return dataclasses.field(default=default, metadata={
        "variable": variable, "read": read, "hidden": hidden, "unset_means": unset_means})


@dataclasses.dataclass(frozen=True, repr=False)
class Settings:
    """Every setting of memorybook, each with the variable it is read from (README's table)."""

    # Jev, its clients and their transport (memorybook/jev.py, memorybook/transport.py)
    api_key: str | None = _setting(API_KEY_ENV, None, hidden=True)
    endpoint: str | None = _setting(ENDPOINT_ENV, None, hidden=True)
    recording: Path | None = _setting(RECORDING_ENV, None)
    record_mode: Mode | None = _setting(RECORD_MODE_ENV, None)
    timeout_seconds: float = _setting(TIMEOUT_ENV, DEFAULT_TIMEOUT_SECONDS, _seconds)
    allow_plain_http: bool = _setting(ALLOW_PLAIN_HTTP_ENV, False,
                                      lambda name, text: text == "1")
    in_ci: bool = _setting(CI_ENV, False, lambda name, text: True)
    live_in_ci: bool = _setting(ALLOW_LIVE_IN_CI_ENV, False, lambda name, text: True)
    usage_log: Path | None = _setting(USAGE_LOG_ENV, None)
    # The store (memorybook/store/opening.py)
    store_url: str | None = _setting(STORE_URL_ENV, None, hidden=True)
    store_key: str | None = _setting(
        STORE_KEY_ENV, None, hidden=True,
        unset_means="a key file beside a SQLite store")
    store_old_keys: tuple[str, ...] | None = _setting(STORE_OLD_KEYS_ENV, None, lambda name, text:
                                                      _old_keys(text.split(",")), hidden=True)
    retention: timedelta | NeverType = _setting(
        RETENTION_DAYS_ENV, DEFAULT_RETENTION, _days,
        unset_means="memories that last until erased (or set it to never)")
    # The service, and InFlight (memorybook/service.py, memorybook/in_flight.py)
    sweep_every: timedelta = _setting(
        SWEEP_MINUTES_ENV, DEFAULT_SWEEP_EVERY, lambda name, text: timedelta(
            minutes=_positive(name, text, DEFAULT_SWEEP_EVERY / timedelta(minutes=1))))
    max_in_flight: int = _setting(MAX_IN_FLIGHT_ENV, DEFAULT_MAX_IN_FLIGHT, _in_flight)
    max_body_bytes: int = _setting(
        MAX_BODY_BYTES_ENV, DEFAULT_MAX_BODY_BYTES,
        lambda name, text: int(_positive(name, text, DEFAULT_MAX_BODY_BYTES, whole=True)))
    allowed_hosts: frozenset[str] = _setting(ALLOWED_HOSTS_ENV, frozenset(), _hosts)
    token: str | None = _setting(TOKEN_ENV, None, lambda name, text: checked_token(text, name),
                                 hidden=True, unset_means="no token (answering loopback alone)")
    log_format: str = _setting(LOG_FORMAT_ENV, "text", _log_format)
    # The fields read from the environment (the rest were given, or defaults): `source()`.
    read_from_environment: frozenset[str] = dataclasses.field(
        default=frozenset(), init=False, compare=False)

    FIELDS_NOT_READ: ClassVar[tuple[str, ...]] = ("read_from_environment",)

    def __post_init__(self) -> None:
        """Each value given as its field takes it, or a ConfigError naming the field."""
        normal = {
            "api_key": _blank_is_none(self.api_key, "api_key"),
            "endpoint": self.endpoint or None,
            "recording": Path(self.recording) if _blank_is_none(self.recording, "recording")
            else None,
            "record_mode": checked_mode(self.record_mode),
            "usage_log": Path(self.usage_log) if self.usage_log else None,
            "store_url": self.store_url or None,
            "store_key": _not_blank(self.store_key, "store_key"),
            "store_old_keys": _old_keys(self.store_old_keys),
            "allowed_hosts": _hosts("allowed_hosts", ",".join(_strings(self.allowed_hosts))),
        }
        for name, value in normal.items():
            object.__setattr__(self, name, value)
        if isinstance(self.timeout_seconds, int) and not isinstance(self.timeout_seconds, bool):
            object.__setattr__(self, "timeout_seconds", float(self.timeout_seconds))
        for name in ("allow_plain_http", "in_ci", "live_in_ci"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, not {getattr(self, name)!r}")
        timeout = self.timeout_seconds
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not (
                0 < timeout <= MAX_TIMEOUT_SECONDS):
            raise ConfigError(f"timeout_seconds must be a positive number of seconds up to "
                              f"{MAX_TIMEOUT_SECONDS:,.0f} (a day), not {timeout!r}")
        if self.retention is not NEVER and (
                not isinstance(self.retention, timedelta)
                or not timedelta(0) < self.retention <= MAX_RETENTION):
            raise ConfigError(f"retention must be NEVER or a datetime.timedelta from a "
                              f"microsecond to {MAX_RETENTION.days:,} days, not "
                              f"{self.retention!r}")
        if self.token is not None:
            checked_token(self.token, "token")
        if self.log_format not in LOG_FORMATS:
            raise ConfigError(f"log_format must be one of {', '.join(LOG_FORMATS)}, not "
                              f"{self.log_format!r}")
        for name in ("max_body_bytes", "max_in_flight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, not {value!r}")
        if not isinstance(self.sweep_every, timedelta) or self.sweep_every <= timedelta(0):
            raise ConfigError(f"sweep_every must be a positive timedelta, not "
                              f"{self.sweep_every!r}")

    @classmethod
    def from_environment(cls, **given: Any) -> Settings:
        """The settings the environment holds now, with `given` (fields by name) in place of
        theirs: a variable whose field is given is not read at all."""
        unknown = sorted(set(given) - set(VARIABLES.values()))
        if unknown:
            raise TypeError(f"Settings has no field {', '.join(unknown)}; its fields are "
                            f"{', '.join(VARIABLES.values())}")
        read = {}
        for field in dataclasses.fields(cls):
            if field.name in given or field.name in cls.FIELDS_NOT_READ:
                continue
            variable, text = field.metadata["variable"], os.environ.get(field.metadata["variable"])
            if text is not None and text.strip():
                read[field.name] = field.metadata["read"](variable, text.strip())
            elif text is not None and field.metadata["unset_means"]:
                raise ConfigError(f"{variable} is set but blank: give it a value, or unset it "
                                  f"for {field.metadata['unset_means']}; blank is refused, as a "
                                  "value gone missing would be.")
        settings = cls(**read, **given)
        object.__setattr__(settings, "read_from_environment", frozenset(read))
        return settings

    def source(self, name: str) -> str:
        """Where field `name` came from, as a message names it: `$VARIABLE` if it was read from
        the environment, else `Settings.name`."""
        if name in self.read_from_environment:
            return f"${VARIABLE_OF[name]}"
        return f"Settings.{name}"

    def allows_host(self, host: str) -> bool:
        """Whether the service answers to the `Host` name `host`: a loopback one, or one of
        `allowed_hosts`."""
        return is_loopback(host) or host.strip().lower().rstrip(".") in self.allowed_hosts

    def __repr__(self) -> str:
        shown = []
        for field in dataclasses.fields(self):
            if field.name in self.FIELDS_NOT_READ:
                continue
            value = getattr(self, field.name)
            hidden = field.metadata["hidden"] and value is not None
            shown.append(f"{field.name}={'<set>' if hidden else repr(value)}")
        return f"Settings({', '.join(shown)})"


def _blank_is_none(value: object, name: str) -> object:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str | os.PathLike):
        raise ConfigError(f"{name} must be a string, not {type(value).__name__}")
    return value


def _not_blank(value: object, name: str) -> object:
    """A secret given as a field: None for none, and never blank (see _setting())."""
    if isinstance(value, str) and not value.strip():
        raise ConfigError(f"{name} is blank: give it a value, or None for none.")
    return value


def _old_keys(keys: object) -> tuple[str, ...] | None:
    """Earlier store keys, blank ones left out (None: none). The message never shows one."""
    if keys is None:
        return None
    keys = list(keys) if isinstance(keys, Iterable) and not isinstance(keys, str) else None
    if keys is None or not all(isinstance(key, str) for key in keys):
        raise ConfigError("store_old_keys must be a list of store keys, each a string as "
                          "store_key takes one")
    return tuple(key.strip() for key in keys if key.strip()) or None


def _strings(values: object) -> Iterable[str]:
    if isinstance(values, str) or not isinstance(values, Iterable) or not all(
            isinstance(value, str) for value in values):
        raise ConfigError(f"allowed_hosts must be a set of host names, not {values!r}")
    return values


# Each field and the variable it is read from, both ways (a variable names one field).
VARIABLE_OF = {field.name: field.metadata["variable"] for field in dataclasses.fields(Settings)
               if field.name not in Settings.FIELDS_NOT_READ}
VARIABLES = {variable: name for name, variable in VARIABLE_OF.items()}


def api_key_in_environment() -> str:
    """$TYPESAFE_API_KEY as the environment holds it now ('' for none): what redact() hides in
    every message, whether or not a Settings was made from it."""
    return os.environ.get(API_KEY_ENV, "").strip()


def proxy_variables() -> dict[str, str]:
    """The proxy variables the environment holds now (PROXY_VARIABLES, in either case), which
    httpx2 reads itself: for naming one the live client cannot use."""
    return {name: value for name, value in os.environ.items() if name.upper() in PROXY_VARIABLES}
