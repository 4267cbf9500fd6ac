#!/bin/sh
# First start: make the cluster with POSTGRES_USER as its superuser (password POSTGRES_PASSWORD, md5 over TCP) and
# the database POSTGRES_DB; then run the server in the foreground as the postgres user, listening on all of the
# container's interfaces (the compose network; nothing is published).
set -eu
BIN=$(ls -d /usr/lib/postgresql/*/bin | tail -n 1)
mkdir -p "$PGDATA" /run/postgresql
chown -R postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    printf '%s\n' "$POSTGRES_PASSWORD" > /tmp/pwfile
    chown postgres /tmp/pwfile
    runuser -u postgres -- "$BIN/initdb" -D "$PGDATA" --username="$POSTGRES_USER" --pwfile=/tmp/pwfile \
        --auth-local=trust --auth-host=md5 >/dev/null
    rm -f /tmp/pwfile
    echo "host all all 0.0.0.0/0 md5" >> "$PGDATA/pg_hba.conf"
    echo "CREATE DATABASE \"$POSTGRES_DB\";" | runuser -u postgres -- "$BIN/postgres" --single -D "$PGDATA" postgres >/dev/null
fi
exec runuser -u postgres -- "$BIN/postgres" -D "$PGDATA" -c listen_addresses='*'
