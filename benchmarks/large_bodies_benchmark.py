"""Whether the service keeps answering while it reads bodies of a megabyte, as a hostile or
careless client sends them.

    python -m benchmarks.large_bodies_benchmark [--bodies 8] [--tree PATH ...]

For each tree (by default this checkout; another, e.g. a `git worktree` of an older commit, to
compare in the same run), the service is started under uvicorn on 127.0.0.1, replaying the
collection's recording with a new SQLite store in a temporary folder, and always stopped. Then
`--bodies` POSTs of 960 kB go at once, each a state holding 240,000 empty lists (within the 1 MB
body limit, and the costliest shape to read and check), while `GET /health` is polled every
0.1 s. Printed: the statuses, the wall time until every POST was answered, and `/health`'s
median and slowest answer meanwhile. No figure is asserted: read them side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import httpx2

from benchmarks.markdown_table import markdown_table

REPO_ROOT = Path(__file__).resolve().parent.parent
BODY = json.dumps({
    "customer": {"id": "C-9"},
    "ticket": {"id": "T-9", "received_on": "2026-10-02", "subject": "Large",
               "messages": [{"from": "customer", "text": "A large body."}]},
    "padding": [[]] * 240_000,
}).encode()


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as held:
        return held.getsockname()[1]


def started_service(tree: Path, **variables: str) -> tuple[subprocess.Popen, str]:
    """uvicorn serving `tree`'s service on a free port, with `variables` (its store's, say) and no
    other MEMORYBOOK_ or TYPESAFE_ setting of ours, once it answers /health."""
    port = free_port()
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith(("MEMORYBOOK_", "TYPESAFE_"))}
    environment.update(PYTHONPATH=str(tree), **variables)
    server = subprocess.Popen(
        [str(REPO_ROOT / ".venv" / "bin" / "uvicorn"), "--factory",
         "memorybook.service:create_app", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "critical", "--no-access-log"], cwd=tree, env=environment,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx2.get(f"{base_url}/health", timeout=1).status_code == 200:
                return server, base_url
        except httpx2.TransportError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit(f"the service of {tree} did not answer /health within 30 s")


async def measured(base_url: str, bodies: int) -> dict:
    async with httpx2.AsyncClient(base_url=base_url, timeout=300) as http:
        posting = [asyncio.create_task(http.post(
            "/tickets", content=BODY, headers={"Content-Type": "application/json"}))
            for _ in range(bodies)]
        started, health = time.perf_counter(), []
        while not all(task.done() for task in posting):
            asked = time.perf_counter()
            await http.get("/health")
            health.append(time.perf_counter() - asked)
            await asyncio.sleep(0.1)
        answers = await asyncio.gather(*posting)
        return {"statuses": sorted({answer.status_code for answer in answers}),
                "wall": time.perf_counter() - started, "health": health}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bodies", type=int, default=8)
    parser.add_argument("--tree", type=Path, action="append",
                        help="a checkout whose service to measure (repeatable)")
    args = parser.parse_args()
    rows = []
    for tree in args.tree or [REPO_ROOT]:
        with tempfile.TemporaryDirectory() as folder:
            server, base_url = started_service(
                tree.resolve(), MEMORYBOOK_STORE_URL=f"sqlite:///{Path(folder) / 'store.sqlite3'}")
            try:
                result = asyncio.run(measured(base_url, args.bodies))
            finally:
                server.terminate()
                try:
                    server.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()
        health = [seconds * 1000 for seconds in result["health"]]
        rows.append([str(tree), ", ".join(map(str, result["statuses"])),
                     f"{result['wall']:.1f} s", f"{statistics.median(health):.0f} ms",
                     f"{max(health):,.0f} ms", str(len(health))])
    print(f"{args.bodies} POSTs of {len(BODY):,} bytes at once; /health polled meanwhile\n")
    print(markdown_table(["tree", "statuses", "all answered", "/health median",
                          "/health slowest", "polls"], rows))


if __name__ == "__main__":
    main()
