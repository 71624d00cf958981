"""Whether an AsyncMemory can serve now: what a readiness probe asks (`await memory.ready()`,
the service's GET /ready).

A memory is ready while it runs, is not stopping, and its store answers one cheap question
(`check()`) within a few seconds of the probe's own (READY_WITHIN_SECONDS), however long the
store's own timeout. One question is in flight at a time, whatever the number of probes: a probe
that finds one asked joins it, and while one has gone unanswered past its time (a frozen server,
a network that drops everything), every probe is told "not ready" at once, with no new thread
or connection. An answer is reused for REUSED_FOR_SECONDS, so that probes from several
orchestrators cost the store one question a second at most. A change between ready and not is
logged once, the store's error redacted; the reason a probe is given names no database or host.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from memorybook.redaction import redact

READY_WITHIN_SECONDS = 2.0
REUSED_FOR_SECONDS = 1.0

log = logging.getLogger("memorybook")


@dataclass(frozen=True)
class Readiness:
    """`ready`, and why not in one line (`reason`); true as a bool when ready."""

    ready: bool
    reason: str = "ready"

    def __bool__(self) -> bool:
        return self.ready


READY = Readiness(True)


class StoreCheck:
    """The store's answers to readiness probes: one question in flight at a time."""

    def __init__(self) -> None:
        self._asked: asyncio.Future | None = None
        self._asked_at = self._answered_at = 0.0
        self._last: Readiness | None = None
        self._why = ""  # the last store error logged

    async def readiness(self, store: object, within: float = READY_WITHIN_SECONDS) -> Readiness:
        """Whether `store` answers its `check()` within `within` seconds (a store without one,
        InMemoryMemories, is always ready)."""
        check = getattr(store, "check", None)
        if check is None:
            return READY
        now = time.monotonic()
        asked = self._asked
        if asked is not None and not asked.done() and now - self._asked_at >= within:
            return self._noted(Readiness(False, (
                f"the memory store has not answered a check asked {now - self._asked_at:.0f} s "
                "ago.")))
        if asked is None or (asked.done() and now - self._answered_at >= REUSED_FOR_SECONDS):
            asked = self._asked = asyncio.ensure_future(asyncio.to_thread(check))
            self._asked_at = now
            asked.add_done_callback(self._answered)
        done, _ = await asyncio.wait({asked}, timeout=max(0.0, self._asked_at + within - now))
        if not done:
            return self._noted(Readiness(False, (
                f"the memory store did not answer within {within:g} s.")))
        error = asked.exception() if not asked.cancelled() else asyncio.CancelledError()
        if error is None:
            return self._noted(READY)
        return self._noted(Readiness(False, "the memory store failed; the service's log has "
                                            "the details."), error)

    def _answered(self, asked: asyncio.Future) -> None:
        self._answered_at = time.monotonic()
        if not asked.cancelled():
            asked.exception()  # retrieved: a failure is reported by the probes, not as unseen

    def _noted(self, readiness: Readiness, error: BaseException | None = None) -> Readiness:
        """`readiness`, logged when it differs from the last one's, or the store's error
        from the last one logged."""
        last, self._last = self._last, readiness
        why = "" if error is None else " ".join(redact(
            f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}").split())
        if readiness.ready and last is not None and not last.ready:
            log.info("ready again: the memory store answers")
        elif not readiness.ready and (last is None or last.ready or why not in ("", self._why)):
            log.warning("not ready: %s%s", readiness.reason, f" ({why})" if why else "")
        if why:
            self._why = why
        return readiness
