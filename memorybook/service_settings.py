"""`make serve`'s check before uvicorn, and the Jev the service asks.

    python -m memorybook.service_settings HOST

The service's settings (who may reach it, how much it reads, how long memories live, how often
the expired ones are swept, how many requests go to Jev at once) are memorybook/settings.py's
`Settings`, as every part's are: read from the environment once, when the check or the service
starts. The check refuses, in one line, to bind beyond this machine without a token, and tries
the recording and the store as the service will; it prints as the service logs (a JSON object a
line with MEMORYBOOK_LOG_FORMAT=json).
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from memorybook.settings import (
    ALLOWED_HOSTS_ENV,
    RECORD_MODE_ENV,
    RECORDING_ENV,
    TOKEN_ENV,
    ConfigError,
    Settings,
    is_loopback,
)

if TYPE_CHECKING:
    from memorybook.jev import Jev


def refusal_to_bind(host: str, settings: Settings | None = None) -> str | None:
    """Why `make serve` must not listen on `host` with these settings (by default the
    environment's), or None: beyond loopback, only with a token (and the names clients use in
    MEMORYBOOK_ALLOWED_HOSTS)."""
    settings = settings or Settings.from_environment()
    if is_loopback(host.strip("[]")) or settings.token is not None:
        return None
    return (f"make serve: HOST={host} lets other machines reach the service, so it needs "
            f"{TOKEN_ENV} (clients send `Authorization: Bearer <token>`) and the name they use "
            f"in {ALLOWED_HOSTS_ENV}; nothing was started. Or leave HOST at 127.0.0.1.")


def jev_to_serve(settings: Settings | None = None) -> Jev:
    """The Jev the service asks by default, from the settings (by default the environment's):
    live with a key, else replaying its recording, which is read now (one that cannot be used
    raises RecordingError). Record mode is refused (ConfigError): it would keep each ticket's
    words in the recording, in clear, where the service keeps tickets only in its encrypted
    store."""
    from memorybook.jev import Jev, Mode

    jev = Jev(settings=settings)
    if jev.mode is Mode.RECORD:
        raise ConfigError(
            f"record mode would write every ticket's words into {jev.recording.name}, in clear, "
            f"and the service keeps tickets only in its encrypted store: serve live (unset "
            f"{RECORDING_ENV} and {RECORD_MODE_ENV}) or replaying ({RECORD_MODE_ENV}=replay, "
            f"or no key), and record in a script of your own (Jev(recording=..., "
            f"mode=\"record\")).")
    jev.read_recording()
    return jev


def reason_it_cannot_start(settings: Settings | None = None) -> str | None:
    """Why the service would stop at startup with these settings (by default the
    environment's), in one line, or None: the recording it reads and the store it opens are
    tried as it will try them (the store is opened, a new one made, and closed again; what it
    noticed, such as a new key file to back up, is printed)."""
    from memorybook.errors import MemorybookError
    from memorybook.store import open_store

    settings = settings or Settings.from_environment()
    try:
        jev_to_serve(settings)
        store = open_store(settings=settings)
    except MemorybookError as error:
        said = " ".join(str(error).split())
        return f"make serve: the service cannot start: {said}"
    store.close()
    for notice in store.notices:  # a new key file to back up: the service would not see it new
        print_as_logged(f"make serve: the memory store: {notice}", logging.INFO, settings)
    return None


def main(argv: list[str]) -> int:
    """`python -m memorybook.service_settings HOST`: exit 0 if the service may listen there and
    can start, else print why in one line and exit 2: `make serve`'s check before uvicorn, whose
    own report of a failed start is a traceback."""
    try:
        settings = Settings.from_environment()
        why = (refusal_to_bind(argv[0] if argv else "127.0.0.1", settings)
               or reason_it_cannot_start(settings))
    except ConfigError as error:
        why, settings = f"make serve: {error}", None
    if why is None:
        return 0
    print_as_logged(why, logging.ERROR, settings)
    return 2


def print_as_logged(line: str, level: int, settings: Settings | None) -> None:
    """Print `line` to stderr as the service logs (one JSON object with
    MEMORYBOOK_LOG_FORMAT=json); `settings` None: they were refused, the format is read alone."""
    if settings is None or settings.log_format == "json":
        from memorybook.service.logs import as_line, format_alone

        line = as_line(line, level, settings or format_alone())
    print(line, file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
