"""How long a reply with memory takes when the gate runs after it (notebook 9), at Jev's latency.

    python -m benchmarks.service_benchmark [--latency 0.43] [--calls 24] [--customers 50]

A loopback server (tools/loopback_server.py) answers every request after `--latency` seconds
(Jev's reported 0.43 s) with a synthetic answer, made up here and never Jev's: the team and the
gate's probability follow from the ticket's number and how many memories the request carries, so
a memory missed or reordered changes what comes back. Every call is live against it, with a key
and endpoint set in this process's own environment and no recording asked for (live mode, as a
service in production: no recording is read or written). Measured:

- reply latency, median and p95 over `--calls` calls, each for a new customer: plain `ask()`,
  the page's sequential wrapper `ask_with_memory()`, `ask_with_memory_async()` and
  `POST /tickets` on the service (in-process, its SQLite store in a temporary folder);
- `--customers` customers x 3 tickets sent at once, at most 8 requests in flight (the official
  cookbooks' worker count), through the async wrapper and through the service: wall time, reply
  p95, and whether every customer's memories equal those of the same tickets sent one at a time
  through `ask_with_memory()`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.markdown_table import markdown_table
from benchmarks.schedule_floor import schedule
from tools.loopback_replies import made_up_answer
from tools.loopback_server import LoopbackSystemOne

IN_FLIGHT = 8
TICKETS_PER_CUSTOMER = 3


def state(customer: str, number: int) -> dict:
    """A ticket of a made-up customer, shaped as ticket_state() builds them."""
    ticket = {"id": f"T-{number}", "received_on": "2026-10-02", "subject": "Benchmark",
              "messages": [{"from": "customer", "text": f"Ticket {number}."}]}
    return {"customer": {"id": customer, "company": "Benchmark Ltd"}, "ticket": ticket}


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


def figures(seconds: list[float]) -> tuple[float, float]:
    return statistics.median(seconds), p95(seconds)


def ids(memories: list[dict]) -> list[str]:
    return [memory["request"]["ticket"]["id"] for memory in memories]


async def reply_latencies(calls: int, first_number: int) -> dict[str, list[float]]:
    """Each way of asking, `calls` times, each call for a new customer and ticket."""
    from asgi_lifespan import LifespanManager
    from httpx2 import ASGITransport, AsyncClient

    from memorybook import InMemoryMemories, Jev, PendingGates, ask_with_memory
    from memorybook import ask_with_memory_async as wrapped_async
    from memorybook.example import ROUTE
    from memorybook.service import create_app

    jev = Jev()  # live: a key, and no recording asked for
    ask = jev.ask

    def ask_with_memory_async(state, questions, memories, *, gates):
        return wrapped_async(state, questions, memories, gates=gates, ask=jev.ask_async)

    numbers = iter(range(first_number, first_number + 4 * calls))
    results: dict[str, list[float]] = {name: [] for name in (
        "plain ask()", "ask_with_memory(), the page's", "ask_with_memory_async()",
        "POST /tickets")}

    async def timed(name: str, call) -> None:
        started = time.perf_counter()
        await call()
        results[name].append(time.perf_counter() - started)

    memories, gates = InMemoryMemories(), PendingGates()
    with tempfile.TemporaryDirectory(prefix="memorybook-benchmark-") as scratch:
        app = create_app(f"sqlite:///{Path(scratch) / 'latency.sqlite3'}", ask=jev.ask_async)
        async with LifespanManager(app) as running:
            transport = ASGITransport(app=running.app)
            async with AsyncClient(transport=transport, base_url="http://localhost") as http:
                for _ in range(calls):
                    plain, page, wrapped, posted = (
                        state(f"L-{n}", n) for n in (next(numbers) for _ in range(4)))
                    await timed("plain ask()", lambda s=plain: asyncio.to_thread(ask, s, ROUTE))
                    await timed("ask_with_memory(), the page's",
                                lambda s=page: asyncio.to_thread(ask_with_memory, s, ROUTE,
                                                                 memories, ask=ask))
                    await timed("ask_with_memory_async()",
                                lambda s=wrapped: ask_with_memory_async(s, ROUTE, memories,
                                                                        gates=gates))
                    await gates.drain()  # each call alone: its gate ends before the next
                    await timed("POST /tickets", lambda s=posted: posted_ok(http, s))
                    await app.state.memory.gates.drain()
    return results


async def posted_ok(http, request_state: dict) -> None:
    (await http.post("/tickets", json=request_state)).raise_for_status()


def tickets_at_once(customers: int, first_number: int) -> list[dict]:
    """`customers` customers' tickets, each customer's in order, customers interleaved."""
    return [state(f"M-{c}", first_number + TICKETS_PER_CUSTOMER * c + t)
            for t in range(TICKETS_PER_CUSTOMER) for c in range(customers)]


async def all_at_once(states: list[dict], through_service: bool,
                      server: LoopbackSystemOne) -> tuple[float, list[float], dict[str, list], int]:
    """Every state sent at once, at most IN_FLIGHT requests to Jev at a time, routing ahead of
    gates: the service's own cap, or the same InFlight around the async wrapper. Returns the wall
    time, each reply's time, each customer's memories and the most requests Jev had at once."""
    from asgi_lifespan import LifespanManager
    from httpx2 import ASGITransport, AsyncClient

    from memorybook import InMemoryMemories, Jev, PendingGates, ask_with_memory_async
    from memorybook.example import ROUTE
    from memorybook.in_flight import InFlight
    from memorybook.service import create_app
    from memorybook.settings import Settings

    ask_async = Jev().ask_async  # live: a key, and no recording asked for
    replies: list[float] = []
    customers = sorted({s["customer"]["id"] for s in states})
    server.most_in_flight = 0

    async def send(call) -> None:
        started = time.perf_counter()
        await call()
        replies.append(time.perf_counter() - started)

    if through_service:
        with tempfile.TemporaryDirectory(prefix="memorybook-benchmark-") as scratch:
            store = Path(scratch) / "at_once.sqlite3"
            settings = Settings.from_environment(max_in_flight=IN_FLIGHT)
            app = create_app(f"sqlite:///{store}", ask=ask_async, settings=settings)
            async with LifespanManager(app) as running:
                transport = ASGITransport(app=running.app)
                async with AsyncClient(transport=transport, base_url="http://localhost",
                                       timeout=600) as http:
                    started = time.perf_counter()
                    await asyncio.gather(*(send(lambda s=s: posted_ok(http, s)) for s in states))
                    await app.state.memory.gates.drain()
                    wall = time.perf_counter() - started
                    memories = {c: (await http.get(f"/customers/{c}/memories")).json()["memories"]
                                for c in customers}
        return wall, replies, {c: ids(m) for c, m in memories.items()}, server.most_in_flight
    memories, gates, in_flight = InMemoryMemories(), PendingGates(), InFlight(IN_FLIGHT)
    asked = {"ask": in_flight.routing(ask_async), "ask_gate": in_flight.gating(ask_async)}
    started = time.perf_counter()
    await asyncio.gather(*(send(lambda s=s: ask_with_memory_async(s, ROUTE, memories,
                                                                  gates=gates, **asked))
                           for s in states))
    await gates.drain()
    wall = time.perf_counter() - started
    return (wall, replies, {c: ids(memories.recall(c)) for c in customers},
            server.most_in_flight)


def one_at_a_time(states: list[dict]) -> dict[str, list]:
    """The same tickets through the page's wrapper, one after the other."""
    from memorybook import InMemoryMemories, Jev, ask_with_memory
    from memorybook.example import ROUTE

    memories, ask = InMemoryMemories(), Jev().ask
    for request_state in sorted(states, key=lambda s: int(s["ticket"]["id"].split("-")[1])):
        ask_with_memory(request_state, ROUTE, memories, ask=ask)
    return {c: ids(memories.recall(c)) for c in sorted({s["customer"]["id"] for s in states})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.43)
    parser.add_argument("--calls", type=int, default=24)
    parser.add_argument("--customers", type=int, default=50)
    args = parser.parse_args()
    with LoopbackSystemOne({}, latency=args.latency, answer_with=made_up_answer,
                           max_requests=100_000, max_seconds=3600) as server:
        # This process's own environment: live against the loopback server, no recording (as a
        # service in production: its Jev() objects read these when they are made).
        os.environ.update(TYPESAFE_API_KEY="benchmark", TYPESAFE_ENDPOINT=server.base_url,
                          MEMORYBOOK_LIVE_IN_CI="1")
        for name in ("MEMORYBOOK_USAGE_LOG", "MEMORYBOOK_STORE_URL", "MEMORYBOOK_RECORDING"):
            os.environ.pop(name, None)
        latencies = asyncio.run(reply_latencies(args.calls, 10_000))
        states = tickets_at_once(args.customers, 20_000)
        at_once = {"ask_with_memory_async()": asyncio.run(all_at_once(states, False, server))}
        at_once["POST /tickets"] = asyncio.run(all_at_once(
            tickets_at_once(args.customers, 40_000), True, server))
        sequential = {"ask_with_memory_async()": one_at_a_time(states),
                      "POST /tickets": one_at_a_time(tickets_at_once(args.customers, 40_000))}
        requests = len(server.requests)

    plain_median = statistics.median(latencies["plain ask()"])
    print(f"Python {platform.python_version()} on {os.cpu_count()} cores; loopback latency "
          f"{args.latency} s; {requests} requests; answers made up by the benchmark.\n")
    print(f"Reply latency, {args.calls} calls each, one at a time:\n")
    rows = []
    for name, seconds in latencies.items():
        median, high = figures(seconds)
        rows.append([name, f"{median:.3f} s", f"{high:.3f} s", f"{median / plain_median:.2f}x"])
    print(markdown_table(["call", "median", "p95", "median vs plain ask()"], rows))
    floor_wall, floor_replies = schedule(args.customers, TICKETS_PER_CUSTOMER, IN_FLIGHT,
                                         args.latency)
    print(f"\n{args.customers} customers x {TICKETS_PER_CUSTOMER} tickets at once, at most "
          f"{IN_FLIGHT} requests in flight, routing ahead of gates; beside each figure the "
          f"floor, the best schedule at that cap and latency (benchmarks/schedule_floor.py):\n")
    rows = []
    for name, (wall, replies, memories, most) in at_once.items():
        same = memories == sequential[name]
        kept = sum(map(len, memories.values()))
        rows.append([name, f"{most}", f"{wall:.2f} s / {floor_wall:.2f} s = "
                     f"{wall / floor_wall:.2f}x", f"{p95(replies):.2f} s / "
                     f"{p95(floor_replies):.2f} s = {p95(replies) / p95(floor_replies):.2f}x",
                     f"{'yes' if same else 'NO'} ({kept} memories)"])
    print(markdown_table(["through", "most at once", "wall time / floor", "reply p95 / floor",
                          "memories = one at a time"], rows))

if __name__ == "__main__":
    main()
