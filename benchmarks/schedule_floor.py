"""The fastest any service could answer a load, at a given cap and latency: the floor the service
benchmark prints beside what it measured.

The model: each customer's tickets arrive at once and are handled in order; a ticket's routing
request can start only once that customer's previous gate has finished (its memory may be in the
next state), and its gate only once its routing has answered; every request takes `latency`
seconds, and at most `slots` are in flight. A reply is ready when its routing answers. The floor
is the best such schedule: whenever a slot is free it takes a waiting routing request before a
waiting gate (a reply waits only for routing), each kind first come, first served. Ties never
lengthen a request, so the schedule is found by stepping from one finish to the next.

    python -m benchmarks.schedule_floor            # 50 customers x 3 tickets, 8 slots, 0.43 s
"""

from __future__ import annotations

import argparse
import heapq
import itertools

ORDERS = {  # which waiting request a free slot takes: the lower key first
    "routing ahead of gates": lambda kind, ready, order: (kind != "route", ready, order),
    "first come, first served": lambda kind, ready, order: (ready, order),
    "gates ahead of routing": lambda kind, ready, order: (kind != "gate", ready, order),
}


def schedule(customers: int, tickets: int, slots: int, latency: float,
             order: str = "routing ahead of gates") -> tuple[float, list[float]]:
    """(the wall time, each reply's time from the start) of the load scheduled as `order` says."""
    key = ORDERS[order]
    counter = itertools.count()
    waiting = [(0.0, next(counter), "route", customer, 0) for customer in range(customers)]
    running: list[tuple[float, int, str, int, int]] = []
    now, replies, wall = 0.0, [], 0.0
    while waiting or running:
        ready = sorted((w for w in waiting if w[0] <= now),
                       key=lambda w: key(w[2], w[0], w[1]))
        for job in ready[:slots - len(running)]:
            waiting.remove(job)
            heapq.heappush(running, (now + latency, next(counter), *job[2:]))
        now = running[0][0]  # requests become ready only as others finish: the next event
        while running and running[0][0] <= now:
            finished, _, kind, customer, ticket = heapq.heappop(running)
            wall = max(wall, finished)
            if kind == "route":
                replies.append(finished)
                waiting.append((finished, next(counter), "gate", customer, ticket))
            elif ticket + 1 < tickets:
                waiting.append((finished, next(counter), "route", customer, ticket + 1))
    return wall, replies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--customers", type=int, default=50)
    parser.add_argument("--tickets", type=int, default=3)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.43)
    args = parser.parse_args()
    from benchmarks.service_benchmark import p95

    for order in ORDERS:
        wall, replies = schedule(args.customers, args.tickets, args.slots, args.latency, order)
        print(f"{order:<26} wall {wall:6.2f} s   reply p95 {p95(replies):6.2f} s")


if __name__ == "__main__":
    main()
