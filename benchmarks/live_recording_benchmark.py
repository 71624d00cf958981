"""How long a live recording takes when every call costs what Jev's does (~0.43 s), and what
adding one answer to a recording costs as the recording grows.

    python -m benchmarks.live_recording_benchmark [--latency 0.43] [--repeats 3]
    python -m benchmarks.live_recording_benchmark --adding [--sizes 100 1000 10000] [--adds 30]

The loopback server (tools/loopback_server.py) answers from the committed recording after
`--latency` seconds, so the SDK, the cache writes and the notebooks all run for real. Measured:
the calls alone, one customer after the other and both side by side; and the whole `make record`
(calls, then the notebooks on the new recording). Prints medians against the sum of the calls'
latencies.

With `--adding`, no server and no notebook: for each size, a scratch recording of that many
answers (sorted, indented by 2, as the committed one is) is opened with CheckedJsonCache, read
by one lookup (as a service reads it at its first call), then `--adds` new answers are kept one
after the other, each timed from the call to its return. Prints the median and the slowest add
for each size, each median against the smallest size's, and the median CPU time of an add (what
is not CPU is waiting on the disk's syncs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.markdown_table import markdown_table, timings_table
from memorybook.config import RECORDING_PATH
from memorybook.recording import CheckedJsonCache, cache_key, read_recording
from tools.loopback_server import LoopbackSystemOne

REPO_ROOT = Path(__file__).resolve().parent.parent
CALLS_ONLY = """
import sys
from tools.record.every_call import run_every_call
for group in sys.argv[1:]:
    run_every_call(group.split(","))
"""


def timed_run(command: list[str], base_url: str, recording: Path) -> float:
    env = {**os.environ, "TYPESAFE_API_KEY": "benchmark", "TYPESAFE_ENDPOINT": base_url,
           "MEMORYBOOK_LIVE_IN_CI": "1", "MEMORYBOOK_RECORDING": str(recording)}
    env.pop("MEMORYBOOK_USAGE_LOG", None)
    start = time.perf_counter()
    subprocess.run(command, cwd=REPO_ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


MODEL = "jev-1.14.0"
GATE_QUESTIONS = json.dumps({"remember": {"type": "noul", "instructions": "Lasting fact?"}})


def gate_request(number: int) -> tuple[str, str, str]:
    """A gate call about ticket number `number`: every number gives another cache key."""
    state = {"customer": {"id": "C-1042", "company": "Acme Corp"},
             "ticket": {"id": f"T-{number}", "subject": "Slow dashboards"}}
    return MODEL, json.dumps(state), GATE_QUESTIONS


def gate_answer(number: int) -> dict:
    return {"model": MODEL, "usage": {"input_tokens": 600 + number % 100, "output_tokens": 11},
            "answers": {"remember": {"type": "noul", "noul": round(number % 97 / 100, 2)}}}


def seconds_to_add(size: int, adds: int, folder: Path) -> tuple[list[float], list[float]]:
    """Each of `adds` new answers' time to be kept in a recording that held `size` answers:
    wall-clock seconds, and this process's CPU seconds (the rest is waiting on the disk)."""
    path = folder / f"recording-{size}.json"
    held = {cache_key(*gate_request(number)): gate_answer(number) for number in range(size)}
    with path.open("w", encoding="utf-8") as recording:
        recording.write(json.dumps({key: held[key] for key in sorted(held)}, indent=2))
        recording.flush()
        os.fsync(recording.fileno())  # on the disk already: the first add's sync is its own

    @CheckedJsonCache(path, usage_log=None)
    def _system_one(model: str, state: str, questions: str) -> dict:
        return gate_answer(len(state))  # the live answer, at once: only the keeping is timed

    _system_one(*gate_request(0))  # a recorded call: the cache reads the file now
    times, cpu = [], []
    for number in range(size, size + adds):
        start, start_cpu = time.perf_counter(), time.process_time()
        _system_one(*gate_request(number))
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    assert len(read_recording(path)) == size + adds, "an added answer is not in the file"
    return times, cpu


def adding(sizes: list[int], adds: int) -> None:
    rows, smallest = [], None
    with tempfile.TemporaryDirectory() as scratch:
        for size in sizes:
            times, cpu = seconds_to_add(size, adds, Path(scratch))
            median = statistics.median(times)
            smallest = smallest or median
            rows.append([f"{size:,} answers", f"{median * 1000:.2f} ms",
                         f"{max(times) * 1000:.2f} ms", f"{median / smallest:.1f}x",
                         f"{statistics.median(cpu) * 1000:.2f} ms"])
    print(f"{platform.python_version()} on {os.cpu_count()} cores; {adds} answers added to each "
          "recording, one after the other\n")
    print(markdown_table(["recording", "median add", "slowest add",
                          f"median vs {sizes[0]:,} answers", "median CPU"], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.43)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--adding", action="store_true",
                        help="time adding answers to recordings of --sizes answers instead")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1_000, 10_000])
    parser.add_argument("--adds", type=int, default=30)
    args = parser.parse_args()
    if args.adding:
        adding(args.sizes, args.adds)
        return
    calls = len(read_recording(RECORDING_PATH))
    python = sys.executable
    ways = {
        "calls only, one customer after the other": [python, "-c", CALLS_ONLY, "C-1042",
                                                     "C-2210"],
        "calls only, both customers side by side": [python, "-c", CALLS_ONLY, "C-1042,C-2210"],
        "make record (the calls; the 7 notebooks, started meanwhile)": None,
    }
    results = {}
    for what, command in ways.items():
        times = []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as scratch, LoopbackSystemOne(
                    RECORDING_PATH, latency=args.latency) as server:
                recording = Path(scratch) / "new.json"
                command_now = command or [python, "-m", "tools.record", "--output",
                                          str(recording), "--notebooks-out", scratch]
                times.append(timed_run(command_now, server.base_url, recording))
                assert server.hits() == calls, f"{server.hits()} calls went live, not {calls}"
        results[what] = statistics.median(times)
    total_latency = calls * args.latency
    print(f"{platform.python_version()} on {os.cpu_count()} cores; {calls} calls at "
          f"{args.latency} s each = {total_latency:.1f} s of latency; medians of {args.repeats}\n")
    print(timings_table(results, total_latency, "the sum of latencies"))


if __name__ == "__main__":
    main()
