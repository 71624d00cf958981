"""How long the collection takes to check, against the floor of starting its kernels at all.

    python -m benchmarks.collection_benchmark [--repeats 3] [--test-command-repeats 1]
                                              [--skip-test-command]

The floor: for each notebook, a notebook with one cell holding the same imports, run the same way.
Prints medians of the repeats, the ratio to the floor, and the machine; then the whole test command
(`make test`, i.e. tools/test.sh) against plain serial nbval over the notebooks, timed in the same
run (goal: at most 7x on a quiet machine, issue 36), with the CPU time the test command and
everything it started used: that CPU time shared out over every core is the least wall time any
scheduling of the same work could reach; and the CPU time every other process on the machine used
meanwhile, which says how quiet it was. Not a test: timings on a shared machine are noisy, so read
the ratios.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import nbformat

from benchmarks.markdown_table import timings_table

REPO_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def import_lines(notebook: nbformat.NotebookNode) -> str:
    """Every import statement of a notebook's code cells, in order."""
    lines = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        for node in ast.parse(cell.source).body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                lines.append(ast.unparse(node))
    return "\n".join(dict.fromkeys(lines))


def write_floor_notebooks(folder: Path) -> None:
    """An import-only twin of each notebook, executed so that nbval compares its one cell."""
    for path in NOTEBOOKS:
        twin = nbformat.v4.new_notebook()
        twin.metadata = nbformat.read(path, as_version=4).metadata
        cell = nbformat.v4.new_code_cell(import_lines(nbformat.read(path, as_version=4)))
        cell.execution_count = 1
        twin.cells = [cell]
        nbformat.write(twin, folder / path.name)


def timed(command: list[str], cwd: Path) -> float:
    env = {k: v for k, v in os.environ.items() if k != "TYPESAFE_API_KEY"}
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


CPUACCT = Path("/sys/fs/cgroup/cpuacct")  # cgroup v1's CPU accounting, where it is mounted


@contextlib.contextmanager
def cpu_account() -> Iterator[tuple[Callable[[], None] | None, Callable[[], float]]]:
    """(join, used): `join` makes the calling process and all it starts count in a new cgroup;
    `used()` is their CPU seconds, every process counted, even those no parent waited for.

    Without a cgroup this process may make (not root, or no cgroup v1 cpuacct), `join` is None and
    `used()` counts what getrusage sees: the children and the descendants that were waited for.
    """
    group = CPUACCT / f"memorybook-benchmark-{os.getpid()}"
    try:
        group.mkdir()
    except OSError:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        before = usage.ru_utime + usage.ru_stime

        def waited_for() -> float:
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            return usage.ru_utime + usage.ru_stime - before

        yield None, waited_for
        return
    try:
        def join() -> None:
            (group / "cgroup.procs").write_text(str(os.getpid()))

        yield join, lambda: int((group / "cpuacct.usage").read_text()) / 1e9
    finally:
        with contextlib.suppress(OSError):
            group.rmdir()


def machine_busy_seconds() -> float | None:
    """CPU seconds every process on the machine has used since it started (Linux's /proc/stat:
    all but idle and iowait), or None where there is no /proc/stat."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    ticks = [int(field) for field in fields[:8]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def timed_test_command() -> tuple[float, float, bool, float | None]:
    """One `tools/test.sh -q`, timed whatever its outcome; a failure is reported, not hidden.

    Returns its wall time, the CPU time of it and every process it started, whether that CPU
    time counts them all (see cpu_account), and the CPU time the machine's other processes used
    meanwhile (None where it cannot be read, or `cpu` may miss some of its own).
    """
    env = {k: v for k, v in os.environ.items() if k != "TYPESAFE_API_KEY"}
    with (tempfile.NamedTemporaryFile("w+", prefix="memorybook-test-command-", suffix=".log",
                                      delete=False) as log, cpu_account() as (join, cpu_used)):
        start, busy_before = time.perf_counter(), machine_busy_seconds()
        result = subprocess.run(["tools/test.sh", "-q"], cwd=REPO_ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, preexec_fn=join)
        seconds, cpu, busy_after = time.perf_counter() - start, cpu_used(), machine_busy_seconds()
    counted_all = join is not None  # else `cpu` misses some of ours, and they would count here
    others = (None if busy_before is None or busy_after is None or not counted_all
              else max(0.0, busy_after - busy_before - cpu))
    outcome = "passed" if result.returncode == 0 else f"FAILED (exit {result.returncode})"
    print(f"  the test command: {seconds:.1f} s, {cpu:.1f} s of CPU, {outcome}; "
          f"its output: {log.name}", file=sys.stderr)
    return seconds, cpu, counted_all, others


def median_of(repeats: int, command: list[str], cwd: Path) -> float:
    return statistics.median(timed(command, cwd) for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--test-command-repeats", type=int, default=1)
    parser.add_argument("--skip-test-command", action="store_true")
    args = parser.parse_args()
    python = sys.executable
    nbval = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval",
             "--nbval-current-env", "-o", "addopts=", "-o", "testpaths="]
    with tempfile.TemporaryDirectory() as scratch:
        floor_dir = Path(scratch) / "notebooks"
        floor_dir.mkdir()
        write_floor_notebooks(floor_dir)
        results = {
            "nbval, the collection's notebooks": median_of(
                args.repeats, [*nbval, *map(str, NOTEBOOKS)], REPO_ROOT),
            "nbval, import-only twins (the floor)": median_of(
                args.repeats, [*nbval, str(floor_dir)], REPO_ROOT),
            "executing the notebooks (make run)": median_of(
                args.repeats, [python, "-m", "tools.execute", *map(str, NOTEBOOKS)], REPO_ROOT),
        }
    for what, seconds in results.items():
        print(f"  {what}: {seconds:.1f} s", file=sys.stderr)
    if not args.skip_test_command:
        runs = [timed_test_command() for _ in range(args.test_command_repeats)]
        results["the whole test command (make test)"] = statistics.median(run[0] for run in runs)
        test_command_cpu = statistics.median(run[1] for run in runs)
        every_process = all(run[2] for run in runs)
        others_cpu = (None if any(run[3] is None for run in runs)
                      else statistics.median(run[3] for run in runs))
    floor = results["nbval, import-only twins (the floor)"]
    print(f"{platform.python_version()} on {os.cpu_count()} cores, {platform.machine()}; "
          f"{len(NOTEBOOKS)} notebooks; medians of {args.repeats} runs "
          f"(the test command: {args.test_command_repeats})\n")
    print(timings_table(results, floor, "the floor"))
    if not args.skip_test_command:
        serial_nbval = results["nbval, the collection's notebooks"]
        cores = os.cpu_count() or 1
        print(f"\nmake test / serial nbval over the notebooks = "
              f"{results['the whole test command (make test)'] / serial_nbval:.2f} "
              "(goal: <= 7 on a quiet machine, issue 36)")
        counted = ("every process it started, counted in a cgroup" if every_process else
                   "at least: getrusage misses processes no parent waited for")
        print(f"make test used {test_command_cpu:.1f} s of CPU ({counted}); shared out perfectly "
              f"over {cores} cores that is {test_command_cpu / cores:.1f} s, "
              f"{test_command_cpu / cores / serial_nbval:.2f}x serial nbval: the least any "
              "scheduling of the same work could reach")
        if others_cpu is not None:
            print(f"meanwhile the machine's other processes used {others_cpu:.1f} s of CPU, "
                  f"{others_cpu / results['the whole test command (make test)'] / cores:.0%} of "
                  f"its {cores} cores (0% on a quiet machine)")


if __name__ == "__main__":
    main()
