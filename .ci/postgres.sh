#!/usr/bin/env bash
# Makes sure a PostgreSQL server (initdb, pg_ctl, postgres) is installed for the ledger tests,
# which start a throwaway server from it (tests/support/postgres.py). Installs Debian's
# `postgresql` package only when no server binaries are found; safe to run again.
set -euo pipefail

find_server() {
    local dir
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV) \
               $(command -v pg_ctl >/dev/null 2>&1 && dirname "$(readlink -f "$(command -v pg_ctl)")"); do
        if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/postgres" ]; then
            echo "$dir"
            return 0
        fi
    done
    return 1
}

if dir=$(find_server); then
    echo "postgres.sh: PostgreSQL server found in $dir; nothing to install"
    exit 0
fi

echo "postgres.sh: no PostgreSQL server binaries; installing Debian's postgresql package"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
$sudo apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql

if dir=$(find_server); then
    echo "postgres.sh: installed; PostgreSQL server in $dir"
else
    echo "postgres.sh: installed the postgresql package but found no initdb/pg_ctl/postgres" >&2
    exit 1
fi
