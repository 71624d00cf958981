#!/usr/bin/env bash
# Run the whole test suite with the project's virtual environment.
# When PostgreSQL is installed and no server is named in MEMORYBOOK_TEST_PG_URL, a throwaway one
# is started on 127.0.0.1 for the store tests and stopped afterwards. Without one those tests are
# skipped with the reason shown, except in CI, where they fail.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -z "${MEMORYBOOK_TEST_PG_URL:-}" ]]; then
    pg_dir=$(mktemp -d /tmp/memorybook-pg.XXXXXX)
    chmod 755 "$pg_dir"
    trap 'tools/postgres_server.sh stop "$pg_dir" >/dev/null 2>&1 || true; rm -rf "$pg_dir"' EXIT
    if url=$(tools/postgres_server.sh start "$pg_dir" 2>"$pg_dir/start.err"); then
        export MEMORYBOOK_TEST_PG_URL=$url
    else
        echo "PostgreSQL not started ($(tail -n 1 "$pg_dir/start.err")); its tests will say why." >&2
    fi
fi

exec .venv/bin/python -m pytest "$@"
