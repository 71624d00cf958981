"""How long a live recording takes when every call costs what Jev's does (~0.43 s).

    python -m benchmarks.live_recording_benchmark [--latency 0.43] [--repeats 3]

The loopback server (tools/loopback_server.py) answers from the committed recording after
`--latency` seconds, so the SDK, the cache writes and the notebooks all run for real. Measured:
the calls alone, one customer after the other and both side by side; and the whole `make record`
(calls, then the notebooks on the new recording). Prints medians against the sum of the calls'
latencies.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.markdown_table import timings_table
from memorybook.config import RECORDING_PATH
from memorybook.recording import read_recording
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.43)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
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
