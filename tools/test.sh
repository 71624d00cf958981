#!/usr/bin/env bash
# The README's test command (`make test`): every test, with the project's virtual environment.
#
# Two pytest runs share one scratch folder and one PostgreSQL server:
#   1. every test but the `after_notebooks` ones, on xdist workers: one more than the machine has
#      cores, at most four (MEMORYBOOK_TEST_WORKERS overrides). Many tests wait (on a loopback
#      server's latency, a kernel or a subprocess starting), and the extra worker fills those
#      waits; past four nothing is gained, as the browser tests alone run ~21 s on one worker.
#      conftest.py's scheduler hands out each notebook whole (its cells run in order in one
#      kernel on one worker; with --run-cells-again each cell runs a second time, and the whole
#      notebook again after its last cell), the files in its RUN_WHOLE whole (their tests share
#      one costly fixture), and every other test on its own, so a long test runs on one worker
#      while the others work through the rest;
#   2. the `after_notebooks` tests alone, which read what every worker's kernels logged.
# Arguments go to both runs (e.g. `tools/test.sh -q`, `tools/test.sh tests/store`).
#
# When PostgreSQL is installed and no server is named in MEMORYBOOK_TEST_PG_URL, a throwaway one
# is started on 127.0.0.1 for the store tests. Without one those tests are skipped with the reason
# shown, except in CI, where they fail. Whatever the outcome (pass, fail, Ctrl-C, SIGTERM), the server
# is stopped before this script exits, and the script fails if the server is still running then.
set -euo pipefail
cd "$(dirname "$0")/.."

scratch=$(mktemp -d /tmp/memorybook-test.XXXXXX)
chmod 755 "$scratch"  # the postgres user must reach the cluster inside when we are root
pg_dir="$scratch/postgres"
export MEMORYBOOK_USAGE_DIR="$scratch/usage"
mkdir "$MEMORYBOOK_USAGE_DIR"

server_still_running() {
    pgrep -f -- "-D $pg_dir/data" >/dev/null 2>&1
}

clean_up() {
    local status=$?
    trap - EXIT INT TERM HUP
    if [[ -n "${pg_start_pid:-}" ]]; then wait "$pg_start_pid" 2>/dev/null || true; fi  # then stop it
    if [[ -d "$pg_dir" ]]; then
        tools/postgres_server.sh stop "$pg_dir" >/dev/null 2>&1 || true
        if server_still_running; then
            echo "test.sh: the PostgreSQL server in $pg_dir is still running after the run." >&2
            status=1
        fi
    fi
    if ! server_still_running; then rm -rf "$scratch"; fi
    exit "$status"
}
# A pytest run goes to the background and is waited for: bash runs a trap only between commands,
# and `wait` is one, so a signal stops the run at once, not once every test has run. SIGTERM and
# SIGHUP (`kill`, `timeout`, make's own SIGTERM, a closed terminal) are passed on as SIGTERM to
# pytest and its xdist workers, which then stop as on Ctrl-C, their tests' servers and kernels
# stopped (conftest.py); Ctrl-C reaches them from the terminal already (conftest.py takes SIGINT
# back from the background's SIG_IGN). The run keeps this script's stdin (for --pdb).
pytest_pid=
run_pytest() {
    "$@" <&0 &
    pytest_pid=$!
    wait "$pytest_pid"
}
stopped() {  # the signal, the exit status that names it
    trap - INT TERM HUP
    if [[ -n "$pytest_pid" ]]; then
        if [[ $1 != INT ]]; then
            pkill -TERM -P "$pytest_pid" 2>/dev/null || true  # the workers
            kill -s TERM "$pytest_pid" 2>/dev/null || true
        fi
        wait "$pytest_pid" 2>/dev/null || true
    fi
    exit "$2"
}
trap clean_up EXIT
trap 'stopped INT 130' INT
trap 'stopped TERM 143' TERM
trap 'stopped HUP 129' HUP

# The server starts in the background while the bytecode below is written (each takes a second
# or two, mostly waiting); the runs wait for it.
pg_start_pid=
if [[ -z "${MEMORYBOOK_TEST_PG_URL:-}" ]]; then
    tools/postgres_server.sh start "$pg_dir" >"$scratch/postgres-url" \
        2>"$scratch/postgres-start.err" </dev/null &
    pg_start_pid=$!
fi

pytest=(.venv/bin/python -m pytest)
# Bytecode, once up front. Where PYTHONDONTWRITEBYTECODE is set (as on this project's machines),
# each of the ~260 interpreters a run starts (workers, kernels, services, commands) would compile
# the project's modules again (0.35 s for the service's), and each pytest process rewrite every
# test module's asserts (2 s). Both are written here into the ignored __pycache__ folders, as
# Python does wherever the variable is unset; the runs below only read them and keep the
# variable as they find it. Stale files are compiled again. A tree that cannot be written is run
# as it is. Measured in benchmarks/README.md.
PYTHONDONTWRITEBYTECODE= .venv/bin/python -m compileall -q memorybook dev tools tests benchmarks \
    examples conftest.py >/dev/null 2>&1 || true
run_pytest env PYTHONDONTWRITEBYTECODE= "${pytest[@]}" -p no:xdist --collect-only -q "$@" \
    >/dev/null 2>&1 || true
if [[ -n "$pg_start_pid" ]]; then
    if wait "$pg_start_pid"; then
        export MEMORYBOOK_TEST_PG_URL=$(<"$scratch/postgres-url")
    else
        echo "PostgreSQL not started ($(tail -n 1 "$scratch/postgres-start.err")); its tests will say why." >&2
    fi
    pg_start_pid=
fi
cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)  # nproc: Linux; getconf: macOS too
workers=${MEMORYBOOK_TEST_WORKERS:-$(( cores + 1 < 4 ? cores + 1 : 4 ))}
status=0
# conftest.py's scheduler replaces --dist; loadfile (whole files) is what runs without it.
run_pytest "${pytest[@]}" -n "$workers" --dist loadfile -m "not after_notebooks" --run-cells-again "$@" || status=$?
after_status=0
run_pytest "${pytest[@]}" -p no:xdist -m after_notebooks "$@" || after_status=$?
# Exit code 5 is "no test selected": the arguments chose files without after-notebooks tests.
if [[ $after_status -ne 0 && $after_status -ne 5 && $status -eq 0 ]]; then status=$after_status; fi
exit "$status"
