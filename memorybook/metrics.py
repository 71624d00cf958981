"""What an AsyncMemory has done, counted for Prometheus: its calls to Jev, its replies, gates and
store calls, and the requests to Jev in flight now (the service serves them at GET /metrics).

    memory = AsyncMemory(...)
    body, content_type = memory.metrics.exposition()   # Prometheus's text format
    memory.metrics.registry                            # to serve them another way

Each AsyncMemory has a registry of its own, never prometheus-client's global one, so that two
memories (two apps, or two tests) in one process count apart. Every label takes a few values
fixed here, or the name of a store method: no customer id, ticket id or ticket text is a label
or a value. prometheus-client comes with the `service` extra; without it, nothing is counted and
`exposition()` says what to install.

    memorybook_jev_calls_total{kind, mode, outcome}  kind: reply or gate; mode: the Jev's
        (replay, record, live) or other (a stand-in, an app's function); outcome: answered,
        not_in_recording, failed, cancelled
    memorybook_jev_call_seconds{kind}                a histogram of those calls' time
    memorybook_reply_seconds                         a histogram of ask()'s time to its reply
    memorybook_gates_pending                         gates started here and not yet ended
    memorybook_gates_run_total{outcome}              ended: kept, not_kept or failed
    memorybook_gates_recovered_total                 gates a stopped process left, run here
    memorybook_store_call_seconds{operation, outcome}  a histogram of store calls by method
        (recall, save, sweep, check, ...); outcome: ok or failed
    memorybook_memories_swept_total                  expired memories sweep() deleted
    memorybook_jev_in_flight                         requests to Jev now, from this process
    memorybook_jev_in_flight_limit                   their cap (MEMORYBOOK_MAX_IN_FLIGHT)
    memorybook_jev_waiting                           requests waiting for one of its slots
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from memorybook.replay import RecordingMissError

if TYPE_CHECKING:
    from memorybook.in_flight import AskAsync, InFlight

# Seconds, for a call to Jev (a live one takes a second or more; a replayed one, milliseconds)
# and for a store call (milliseconds, up to its timeout).
JEV_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
STORE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# Prometheus's text format as every version of Prometheus reads it (the names here need no
# escaping, which later versions of the format add).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _NotCounted:
    """A metric that counts nothing, where prometheus-client is not installed."""

    def labels(self, *values: str) -> _NotCounted:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def dec(self, amount: float = 1) -> None:
        pass

    def observe(self, amount: float) -> None:
        pass

    def set_function(self, function: Callable[[], float]) -> None:
        pass


class Metrics:
    """The metrics of one AsyncMemory (the module's docstring lists them), in `registry`: a
    prometheus_client.CollectorRegistry of their own, or None without prometheus-client."""

    def __init__(self) -> None:
        try:
            import prometheus_client as prometheus
        except ModuleNotFoundError:
            prometheus = None
        self.registry = None if prometheus is None else prometheus.CollectorRegistry()

        def metric(kind: str, name: str, about: str, labels: tuple[str, ...] = (), **options):
            if prometheus is None:
                return _NotCounted()
            return getattr(prometheus, kind)(name, about, labels, registry=self.registry,
                                             **options)

        self.jev_calls = metric("Counter", "memorybook_jev_calls", "Calls to Jev, by kind "
                                "(reply or gate), the Jev's mode and outcome.",
                                ("kind", "mode", "outcome"))
        self.jev_seconds = metric("Histogram", "memorybook_jev_call_seconds", "Seconds a call "
                                  "to Jev took, by kind (reply or gate).", ("kind",),
                                  buckets=JEV_BUCKETS)
        self.reply_seconds = metric("Histogram", "memorybook_reply_seconds", "Seconds from "
                                    "ask() to its reply (the gate runs after).",
                                    buckets=JEV_BUCKETS)
        self.gates_pending = metric("Gauge", "memorybook_gates_pending", "Gates started in "
                                    "this process and not yet ended.")
        self.gates_run = metric("Counter", "memorybook_gates_run", "Gates ended, by outcome: "
                                "kept, not_kept or failed.", ("outcome",))
        self.gates_recovered = metric("Counter", "memorybook_gates_recovered", "Gates a stopped "
                                      "process left pending, run here.")
        self.store_seconds = metric("Histogram", "memorybook_store_call_seconds", "Seconds a "
                                    "store call took, by operation and outcome (ok or failed).",
                                    ("operation", "outcome"), buckets=STORE_BUCKETS)
        self.swept = metric("Counter", "memorybook_memories_swept", "Expired memories that "
                            "sweep() deleted.")
        self.in_flight = metric("Gauge", "memorybook_jev_in_flight", "Requests to Jev in "
                                "flight now from this process, replies and gates.")
        self.in_flight_limit = metric("Gauge", "memorybook_jev_in_flight_limit", "The cap on "
                                      "requests to Jev at once in this process "
                                      "(MEMORYBOOK_MAX_IN_FLIGHT).")
        self.waiting = metric("Gauge", "memorybook_jev_waiting", "Requests to Jev waiting for "
                              "a slot under the cap.")

    def watch(self, in_flight: InFlight) -> None:
        """Read the requests to Jev in flight, their cap and those waiting from `in_flight`,
        whenever the metrics are collected."""
        self.in_flight.set_function(lambda: in_flight.busy)
        self.in_flight_limit.set_function(lambda: in_flight.limit)
        self.waiting.set_function(lambda: in_flight.waiting)

    def exposition(self) -> tuple[bytes, str]:
        """(the metrics in Prometheus's text format, its Content-Type)."""
        if self.registry is None:
            raise ModuleNotFoundError(
                "memorybook's metrics need prometheus-client, which memorybook's `service` "
                "extra brings: pip install 'memorybook[service]'", name="prometheus_client")
        from prometheus_client import generate_latest

        return generate_latest(self.registry), CONTENT_TYPE

    # -- what AsyncMemory and the wrapper count -------------------------------------------

    def asking(self, ask: AskAsync, kind: str, mode: str) -> AskAsync:
        """`ask`, each call counted and timed as `kind` ("reply" or "gate") in `mode`."""
        async def asked(state: dict, questions: dict) -> Any:
            started, outcome = time.perf_counter(), "cancelled"
            try:
                response = await ask(state, questions)
                outcome = "answered"
                return response
            except Exception as error:
                outcome = ("not_in_recording" if isinstance(error, RecordingMissError)
                           else "failed")
                raise
            finally:
                self.jev_calls.labels(kind, mode, outcome).inc()
                self.jev_seconds.labels(kind).observe(time.perf_counter() - started)

        return asked

    async def replying(self, reply: Awaitable[Any]) -> Any:
        """`await reply`, timed as a reply when it comes."""
        started = time.perf_counter()
        response = await reply
        self.reply_seconds.observe(time.perf_counter() - started)
        return response

    def gate_started(self) -> None:
        """A gate is pending until its gate_ended()."""
        self.gates_pending.inc()

    def gate_ended(self, outcome: str) -> None:
        """A gate ended: kept, not_kept or failed."""
        self.gates_pending.dec()
        self.gates_run.labels(outcome).inc()

    def timed(self, store: Any) -> Any:
        """`store`, each of its public methods timed as a store call; sweep()'s deletions
        counted. Anything else is the store's own."""
        return TimedStore(store, self)


class TimedStore:
    """A store whose public methods are timed (Metrics.timed())."""

    def __init__(self, store: Any, metrics: Metrics) -> None:
        self.store, self._metrics = store, metrics

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.store, name)
        if name.startswith("_") or not callable(attribute):
            return attribute
        metrics = self._metrics

        def timed(*arguments: Any, **options: Any) -> Any:
            started, outcome = time.perf_counter(), "failed"
            try:
                result = attribute(*arguments, **options)
                outcome = "ok"
            finally:
                metrics.store_seconds.labels(name, outcome).observe(
                    time.perf_counter() - started)
            if name == "sweep":
                metrics.swept.inc(result)
            return result

        return timed

    def __repr__(self) -> str:
        return f"TimedStore({self.store!r})"
