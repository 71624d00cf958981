"""What reading a customer's memories through the service costs beside the store's own recall().

    python -m benchmarks.read_benchmark [--memories 50] [--rounds 200] [--tree PATH ...]

A throwaway PostgreSQL (tools/postgres_server.sh) holds one customer's `--memories` memories of
about 1 KB each, as the store benchmark's. For each tree (by default this checkout; another,
e.g. a `git worktree` of an older commit, to compare in the same run), the service is started
under uvicorn on 127.0.0.1 on that store, and always stopped. Then, round after round, the same
read is made both ways, interleaved: `recall()` on a store object in this process, and
`GET /customers/{id}/memories` over one kept-alive HTTP connection (the standard library's
client, the least a client adds), and `GET /health`, which reads nothing: the HTTP stack alone.
Printed: each side's median and p95, /health's median, and the ratio. No figure is asserted:
read them side by side.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.large_bodies_benchmark import started_service
from benchmarks.markdown_table import markdown_table
from benchmarks.store_benchmark import sample_memory
from memorybook.store import open_store

REPO_ROOT = Path(__file__).resolve().parent.parent
CUSTOMER = "C-1042"


def memory(number: int) -> dict:
    """A memory about the size of the cookbook's (about 1 KB of JSON), as the store benchmark's."""
    return sample_memory(CUSTOMER, number)


def interleaved(store, base_url: str, rounds: int, memories: int) -> tuple[list, list, list]:
    """(recall() seconds, GET seconds, GET /health seconds), one of each per round, after a few
    warm-up reads. The GETs go over one kept-alive connection of the standard library's own
    client, the least a client can add, and their bodies are read whole; /health, which reads
    nothing, is what the HTTP stack alone takes."""
    in_process, served, health = [], [], []
    host, port = base_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)

    def get(path: str) -> tuple[float, int, bytes]:
        started = time.perf_counter()
        connection.request("GET", path)
        answer = connection.getresponse()
        body = answer.read()
        return time.perf_counter() - started, answer.status, body

    try:
        for round_ in range(rounds + 10):
            started = time.perf_counter()
            recalled = store.recall(CUSTOMER)
            recall_seconds = time.perf_counter() - started
            get_seconds, status, body = get(f"/customers/{CUSTOMER}/memories")
            health_seconds, _, _ = get("/health")
            assert len(recalled) == memories and status == 200, body[:200]
            assert len(json.loads(body)["memories"]) == memories
            if round_ >= 10:
                in_process.append(recall_seconds)
                served.append(get_seconds)
                health.append(health_seconds)
    finally:
        connection.close()
    return in_process, served, health


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--tree", type=Path, action="append",
                        help="a checkout to measure (repeatable); default: this one")
    arguments = parser.parse_args()
    trees = arguments.tree or [REPO_ROOT]
    key = base64.urlsafe_b64encode(os.urandom(32)).decode()
    with tempfile.TemporaryDirectory(prefix="read-benchmark-") as folder:
        os.chmod(folder, 0o755)  # the postgres user must reach the cluster when we are root
        server = REPO_ROOT / "tools" / "postgres_server.sh"
        url = subprocess.run([str(server), "start", folder], capture_output=True, text=True,
                             check=True).stdout.strip()
        rows = []
        try:
            with open_store(url, key=key, max_memories=max(50, arguments.memories)) as store:
                for number in range(arguments.memories):
                    store.save(CUSTOMER, memory(number))
                for tree in trees:
                    service, base_url = started_service(
                        tree.resolve(), MEMORYBOOK_STORE_URL=url, MEMORYBOOK_STORE_KEY=key)
                    try:
                        recall, get, health = interleaved(store, base_url, arguments.rounds,
                                                          arguments.memories)
                    finally:
                        service.terminate()
                        service.wait(30)
                    rows.append([str(tree), *(f"{seconds * 1000:.2f}" for seconds in (
                        statistics.median(recall), p95(recall), statistics.median(get),
                        p95(get), statistics.median(health))),
                        f"{statistics.median(get) / statistics.median(recall):.2f}x"])
        finally:
            subprocess.run([str(server), "stop", folder], capture_output=True, check=False)
    print(f"{arguments.memories} memories of one customer on PostgreSQL, {arguments.rounds} "
          "interleaved rounds:")
    print(markdown_table(["tree", "recall() median ms", "p95", "GET median ms", "p95",
                          "GET /health median ms", "GET / recall()"], rows))


if __name__ == "__main__":
    main()
