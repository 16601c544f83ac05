#!/usr/bin/env bash
# The Postgres the tests use: Debian's packaged cluster (postgresql 15), started if it is down, with a login role
# `hsstore` (password `hsstore`) on 127.0.0.1:5432. Each test makes and drops its own throwaway database.
# Run as root (CI) or as a user who may run pg_ctlcluster and runuser; idempotent.
set -euo pipefail
version=$(pg_lsclusters --no-header | awk 'NR==1 {print $1}')
cluster=$(pg_lsclusters --no-header | awk 'NR==1 {print $2}')
if [ -z "${version}" ]; then
    echo "no Postgres cluster on this machine (apt-get install postgresql)" >&2
    exit 1
fi
if ! pg_lsclusters --no-header | awk 'NR==1 {print $4}' | grep -q online; then
    pg_ctlcluster "${version}" "${cluster}" start
fi
for _ in $(seq 50); do
    pg_isready -q -h 127.0.0.1 -p 5432 && break
    sleep 0.2
done
runuser -u postgres -- psql -q -v ON_ERROR_STOP=1 -d postgres -c "
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'hsstore') THEN
    CREATE ROLE hsstore LOGIN CREATEDB PASSWORD 'hsstore';
  END IF;
END \$\$;"
