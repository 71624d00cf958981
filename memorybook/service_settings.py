"""The service's settings, read once from the environment: who may reach it, how much it reads,
how long memories live and how often the expired ones are swept.

    MEMORYBOOK_ALLOWED_HOSTS     names the service answers to besides loopback ones (a, b)
    MEMORYBOOK_SERVICE_TOKEN     when set, every request needs `Authorization: Bearer <it>`
    MEMORYBOOK_MAX_BODY_BYTES    the largest request body read (1,000,000)
    MEMORYBOOK_RETENTION_DAYS    how long a memory lives (unset: until erased)
    MEMORYBOOK_SWEEP_MINUTES     how often expired memories are deleted (60)
    MEMORYBOOK_MAX_IN_FLIGHT     the most requests to Jev at once, routing ahead of gates (8)

`make serve` runs `python -m memorybook.service_settings HOST` first: it refuses, in one line, to
bind beyond this machine without a token.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
import sys
from datetime import timedelta
from typing import TYPE_CHECKING

from memorybook.config import ConfigError
from memorybook.in_flight import DEFAULT_MAX_IN_FLIGHT, max_in_flight

if TYPE_CHECKING:
    from memorybook.jev import Jev

ALLOWED_HOSTS_ENV = "MEMORYBOOK_ALLOWED_HOSTS"
TOKEN_ENV = "MEMORYBOOK_SERVICE_TOKEN"
MAX_BODY_BYTES_ENV = "MEMORYBOOK_MAX_BODY_BYTES"
RETENTION_DAYS_ENV = "MEMORYBOOK_RETENTION_DAYS"
SWEEP_MINUTES_ENV = "MEMORYBOOK_SWEEP_MINUTES"

DEFAULT_MAX_BODY_BYTES = 1_000_000  # a ticket's state, as a memory may hold (MAX_MEMORY_BYTES)
DEFAULT_SWEEP_EVERY = timedelta(minutes=60)
SHORTEST_TOKEN = 16  # characters: a token anyone could guess protects nothing
LOOPBACK_NAMES = ("localhost",)


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


@dataclasses.dataclass(frozen=True)
class ServiceSettings:
    """What the service checks and schedules. `token` never shows in a repr or a message."""

    allowed_hosts: frozenset[str] = frozenset()  # besides loopback names, lower case
    token: str | None = dataclasses.field(default=None, repr=False)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    retention: timedelta | None = None
    sweep_every: timedelta = DEFAULT_SWEEP_EVERY
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT  # requests to Jev at once (memorybook/in_flight.py)

    def __post_init__(self) -> None:
        if self.token is not None:
            checked_token(self.token, "token")
        if not isinstance(self.max_body_bytes, int) or self.max_body_bytes < 1:
            raise ConfigError(f"max_body_bytes must be a positive integer, not "
                              f"{self.max_body_bytes!r}")
        if not isinstance(self.max_in_flight, int) or self.max_in_flight < 1:
            raise ConfigError(f"max_in_flight must be a positive integer, not "
                              f"{self.max_in_flight!r}")
        if not isinstance(self.sweep_every, timedelta) or self.sweep_every <= timedelta(0):
            raise ConfigError(f"sweep_every must be a positive timedelta, not "
                              f"{self.sweep_every!r}")

    @classmethod
    def from_environment(cls, **given) -> ServiceSettings:
        """The settings the environment gives, with `given` (any field) taking precedence."""
        hosts = os.environ.get(ALLOWED_HOSTS_ENV, "")
        read = {
            "allowed_hosts": frozenset(
                name.strip().lower().rstrip(".") for name in hosts.split(",") if name.strip()),
            "token": os.environ.get(TOKEN_ENV, "").strip() or None,
            "max_body_bytes": int(positive_number(MAX_BODY_BYTES_ENV, DEFAULT_MAX_BODY_BYTES,
                                                  whole=True)),
            "retention": _days(positive_number(RETENTION_DAYS_ENV, None)),
            "max_in_flight": max_in_flight(),
            "sweep_every": timedelta(minutes=positive_number(
                SWEEP_MINUTES_ENV, DEFAULT_SWEEP_EVERY / timedelta(minutes=1))),
        }
        if read["token"] is not None:
            checked_token(read["token"], TOKEN_ENV)
        return cls(**{**read, **given})

    def allows_host(self, host: str) -> bool:
        return is_loopback(host) or host.strip().lower().rstrip(".") in self.allowed_hosts


def _days(value: float | None) -> timedelta | None:
    """$MEMORYBOOK_RETENTION_DAYS as the store's retention, within what a store keeps."""
    if value is None:
        return None
    from memorybook.store.retention import MAX_RETENTION  # here: this module loads no store

    if value > MAX_RETENTION.days:
        raise ConfigError(
            f"{RETENTION_DAYS_ENV}={value:g} is longer than a store keeps a memory "
            f"({MAX_RETENTION.days:,} days, a hundred years): set fewer days, or unset it for "
            "memories that last until erased."
        )
    return timedelta(days=value)


def positive_number(name: str, default: float | None, *, whole: bool = False) -> float | None:
    """$name as a positive (whole) number, `default` when it is unset or blank."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(int(text)) if whole else float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0 or value > 1e12:
        shown = text if len(text) <= 40 else text[:40] + "..."
        kind = "whole number" if whole else "number"
        raise ConfigError(f"{name}={shown!r} is not a positive {kind}: set it to e.g. "
                          f"{default or 30:g}, or unset it for the default.")
    return value


def checked_token(token: object, name: str) -> str:
    """A bearer token as `Authorization` can carry it: printable ASCII, no spaces, at least
    SHORTEST_TOKEN characters. The message never repeats it."""
    if not (isinstance(token, str) and len(token) >= SHORTEST_TOKEN
            and all("!" <= character <= "~" for character in token)):
        raise ConfigError(f"{name} must be at least {SHORTEST_TOKEN} printable ASCII characters "
                          "without spaces (e.g. from `python3 -c 'import secrets; "
                          "print(secrets.token_urlsafe())'`).")
    return token


def refusal_to_bind(host: str) -> str | None:
    """Why `make serve` must not listen on `host`, or None: beyond loopback, only with a
    token (and the names clients use in MEMORYBOOK_ALLOWED_HOSTS)."""
    settings = ServiceSettings.from_environment()
    if is_loopback(host.strip("[]")) or settings.token is not None:
        return None
    return (f"make serve: HOST={host} lets other machines reach the service, so it needs "
            f"{TOKEN_ENV} (clients send `Authorization: Bearer <token>`) and the name they use "
            f"in {ALLOWED_HOSTS_ENV}; nothing was started. Or leave HOST at 127.0.0.1.")


def jev_to_serve() -> Jev:
    """The Jev the service asks by default, from the environment: live with a key, else replaying
    its recording, which is read now (one that cannot be used raises RecordingError). Record mode
    is refused (ConfigError): it would keep each ticket's words in the recording, in clear, where
    the service keeps tickets only in its encrypted store."""
    from memorybook.config import RECORD_MODE_ENV, RECORDING_ENV
    from memorybook.jev import Jev, Mode

    jev = Jev()
    if jev.mode is Mode.RECORD:
        raise ConfigError(
            f"record mode would write every ticket's words into {jev.recording.name}, in clear, "
            f"and the service keeps tickets only in its encrypted store: serve live (unset "
            f"{RECORDING_ENV} and {RECORD_MODE_ENV}) or replaying ({RECORD_MODE_ENV}=replay, "
            f"or no key), and record in a script of your own (Jev(recording=..., "
            f"mode=\"record\")).")
    jev.read_recording()
    return jev


def reason_it_cannot_start() -> str | None:
    """Why the service would stop at startup, in one line, or None: the recording it reads and
    the store it opens are tried as it will try them (the store is opened, a new one made, and
    closed again; what it noticed, such as a new key file to back up, is printed)."""
    from memorybook.errors import MemorybookError
    from memorybook.store import open_store

    try:
        jev_to_serve()
        store = open_store(retention=ServiceSettings.from_environment().retention)
    except MemorybookError as error:
        said = " ".join(str(error).split())
        return f"make serve: the service cannot start: {said}"
    store.close()
    for notice in store.notices:  # a new key file to back up: the service would not see it new
        print(f"make serve: the memory store: {notice}", file=sys.stderr)
    return None


def main(argv: list[str]) -> int:
    """`python -m memorybook.service_settings HOST`: exit 0 if the service may listen there and
    can start, else print why in one line and exit 2: `make serve`'s check before uvicorn, whose
    own report of a failed start is a traceback."""
    try:
        why = refusal_to_bind(argv[0] if argv else "127.0.0.1") or reason_it_cannot_start()
    except ConfigError as error:
        why = f"make serve: {error}"
    if why is None:
        return 0
    print(why, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
