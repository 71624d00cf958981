#!/usr/bin/env bash
# A throwaway PostgreSQL server for the memory-store tests and benchmark.
#
#   tools/postgres_server.sh start DIR   # prints postgresql://postgres@127.0.0.1:PORT/memorybook_test
#   tools/postgres_server.sh stop DIR
#   tools/postgres_server.sh restart DIR   # a fast shutdown and start, as an operator's restart
#
# `start` creates a cluster in DIR/data on first use (trust auth, loopback only,
# no Unix socket, fsync off: it is for tests, never for real data), starts it on
# a free port, creates the database and prints its URL -- the only thing written
# to stdout. Starting a running server just prints its URL again; stopping a
# stopped one does nothing; a server started again gets its previous port back
# while that port is free (another one otherwise). Logs go to DIR/initdb.log and
# DIR/server.log.
#
# Works as root (the cluster is then owned by the `postgres` user, because
# PostgreSQL refuses to run as root) and as an ordinary user.
set -euo pipefail

DATABASE=memorybook_test
SUPERUSER=postgres

die() { echo "postgres_server.sh: $*" >&2; exit 1; }

find_bindir() {
    local candidate
    if command -v pg_config >/dev/null 2>&1; then
        candidate=$(pg_config --bindir 2>/dev/null || true)
        if [[ -x "$candidate/initdb" ]]; then echo "$candidate"; return; fi
    fi
    # Debian keeps the server binaries out of PATH; take the newest version.
    for candidate in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [[ -x "$candidate/initdb" ]]; then echo "$candidate"; return; fi
    done
    die "no PostgreSQL server binaries found (looked at pg_config --bindir and /usr/lib/postgresql/*/bin); install them with: apt-get install -y postgresql"
}

# Run a command as the cluster owner: `postgres` when we are root, else ourselves.
as_owner() {
    if [[ $(id -u) -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    python3 - <<'EOF'
import socket
with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    print(probe.getsockname()[1])
EOF
}

is_running() { as_owner "$BINDIR/pg_ctl" status -D "$DATA" >/dev/null 2>&1; }

# The port is line 4 of postmaster.pid while the server runs.
running_port() { sed -n 4p "$DATA/postmaster.pid"; }

start() {
    mkdir -p "$DIR"
    if [[ $(id -u) -eq 0 ]]; then
        id postgres >/dev/null 2>&1 || die "user 'postgres' not found; install the server with: apt-get install -y postgresql"
        chown postgres: "$DIR"
        runuser -u postgres -- test -w "$DIR" \
            || die "user 'postgres' cannot write to $DIR (a parent folder is private?); choose a folder such as /tmp/memorybook-pg"
    fi
    if [[ ! -f "$DATA/PG_VERSION" ]]; then
        as_owner "$BINDIR/initdb" -D "$DATA" -U "$SUPERUSER" --auth=trust -E UTF8 --locale=C.UTF-8 \
            >"$DIR/initdb.log" 2>&1 || die "initdb failed; see $DIR/initdb.log"
        cat >>"$DATA/postgresql.conf" <<'EOF'

# Added by tools/postgres_server.sh: a private, throwaway test server.
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
    fi
    # A port free a moment ago can be taken by another process before the server binds it; then
    # the server exits at once, saying so in its log, and another free port is tried.
    local attempt port
    for attempt in 1 2 3; do
        is_running && break
        if [[ $attempt -eq 1 && -f "$DIR/port" ]]; then port=$(cat "$DIR/port"); else port=$(free_port); fi
        if as_owner "$BINDIR/pg_ctl" start -D "$DATA" -l "$LOG" -w -t 60 -o "-p $port" >/dev/null; then
            break
        fi
        tail -n 5 "$LOG" | grep -q "Address already in use" && [[ $attempt -lt 3 ]] \
            || die "the server did not start; see $LOG"
    done
    port=$(running_port)
    echo "$port" >"$DIR/port"
    if ! as_owner "$BINDIR/psql" -h 127.0.0.1 -p "$port" -U "$SUPERUSER" -d postgres -tAq \
        -c "SELECT 1 FROM pg_database WHERE datname = '$DATABASE'" | grep -q 1; then
        as_owner "$BINDIR/createdb" -h 127.0.0.1 -p "$port" -U "$SUPERUSER" "$DATABASE" \
            || die "could not create database $DATABASE; see $LOG"
    fi
    echo "postgresql://$SUPERUSER@127.0.0.1:$port/$DATABASE"
}

stop() {
    [[ -f "$DATA/PG_VERSION" ]] || return 0
    if is_running; then
        as_owner "$BINDIR/pg_ctl" stop -D "$DATA" -m fast -w >/dev/null || die "the server did not stop; see $LOG"
    fi
}

restart() {
    is_running || die "no server is running in $DIR"
    as_owner "$BINDIR/pg_ctl" restart -D "$DATA" -m fast -w -t 60 >/dev/null \
        || die "the server did not restart; see $LOG"
}

[[ $# -eq 2 ]] || die "usage: $0 start|stop|restart DIR"
COMMAND=$1
DIR=$(realpath -m "$2")
DATA="$DIR/data"
LOG="$DIR/server.log"
BINDIR=$(find_bindir)
case "$COMMAND" in
    start) start ;;
    stop) stop ;;
    restart) restart ;;
    *) die "usage: $0 start|stop|restart DIR" ;;
esac
