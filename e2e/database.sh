#!/usr/bin/env bash
# A real database: Debian's PostgreSQL 15, made into an image by e2e/mkimage, run by a
# HelloStateful as a non-root user (on node-directory volumes, prepared for it) with its
# password from a Secret, its port and a readiness probe, backed up in stop mode while
# pgbench clients write to it, and restored. Run by e2e/run-all.
set -uo pipefail
E2E_SUITE=database
E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$E2E_DIR/lib.sh"
# shellcheck source=hs.sh
source "$E2E_DIR/hs.sh"

NS=$(new_ns db)
APP=pg
PG_IMAGE=hellostateful-postgres:15
PG_BIN=/usr/lib/postgresql/15/bin
# The app's root filesystem is read-only: its socket and lock files go on its volume, where a
# clean shutdown removes them.
SOCKETS=/var/lib/pg/run
trap 'cleanup_ns "$NS"' EXIT

# sql QUERY: its one value, asked through the app's own socket.
sql() { kubectl -n "$NS" exec "$APP-0" -c app -- "$PG_BIN/psql" -h "$SOCKETS" -U postgres -Atc "$1"; }

# committed_at_least N: pgbench's history holds N transactions or more.
committed_at_least() { local count; count=$(sql 'select count(*) from pgbench_history') && ((count >= $1)); }

# TPC-B's invariant: every transaction adds the same delta to an account, a teller and a
# branch and records it in the history, atomically. A database copied while it wrote,
# torn between its files, breaks it or does not start at all.
balanced() {
  [[ $(sql 'select (select sum(abalance) from pgbench_accounts) = h.d
      and (select sum(tbalance) from pgbench_tellers) = h.d
      and (select sum(bbalance) from pgbench_branches) = h.d
    from (select coalesce(sum(delta), 0) as d from pgbench_history) h') == t ]]
}

test_the_image_is_made_from_debians_postgresql() {
  [[ -x $PG_BIN/postgres ]] || { echo "no $PG_BIN/postgres: e2e/deps installs postgresql-15"; return 1; }
  local stage tar
  stage=$(mktemp -d) tar=$(mktemp --suffix .tar)
  cp -a /usr/lib/postgresql/15 "$stage/"
  # Its JIT compiler (LLVM) alone is larger than the rest; the server runs without it.
  rm -rf "$stage/15/lib/bitcode" "$stage"/15/lib/llvmjit*
  "$E2E_DIR/mkimage" --name "$PG_IMAGE" --out "$tar" --busybox --with-libs \
    --tree "$stage/15:/usr/lib/postgresql/15" --tree /usr/share/postgresql/15:/usr/share/postgresql/15 \
    --file /usr/share/zoneinfo/Etc/UTC:/usr/share/zoneinfo/UTC --env TZ=UTC --user 65532 >/dev/null
  "$E2E_DIR/cluster" load "$tar" >/dev/null
  rm -rf "$stage" "$tar"
}

test_postgres_runs_as_a_non_root_app_with_its_password_from_a_secret() {
  kubectl -n "$NS" create secret generic pg-password \
    --from-literal=password="$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')" >/dev/null
  # The server gets a fast shutdown (SIGINT) when the pod is stopped: the smart one that
  # SIGTERM asks for would wait for the clients to leave.
  local script="set -e
B=$PG_BIN D=/var/lib/pg/data
mkdir -p $SOCKETS
if [ ! -s \$D/PG_VERSION ]; then
  printf '%s\\n' \"\$POSTGRES_PASSWORD\" > $SOCKETS/pw
  \$B/initdb -D \$D -U postgres --pwfile=$SOCKETS/pw --auth-local=trust --auth-host=scram-sha-256 --no-locale -E UTF8
  rm $SOCKETS/pw
  echo 'host all all 0.0.0.0/0 scram-sha-256' >> \$D/pg_hba.conf
fi
\$B/postgres -D \$D -k $SOCKETS -c listen_addresses='*' &
trap \"kill -INT \$!\" TERM
wait \$! || wait \$!"
  local spec
  spec=$(jq -cn --arg image "$PG_IMAGE" --arg script "$script" --arg bin "$PG_BIN" --arg sockets "$SOCKETS" '{
    replicas: 1, image: $image, mountPath: "/var/lib/pg",
    command: ["/bin/sh", "-c", $script],
    securityContext: {runAsUser: 65532, runAsGroup: 65532, fsGroup: 65532, runAsNonRoot: true},
    env: [{name: "POSTGRES_PASSWORD", valueFrom: {secretKeyRef: {name: "pg-password", key: "password"}}}],
    ports: [{name: "postgres", containerPort: 5432}],
    readinessProbe: {exec: {command: [($bin + "/pg_isready"), "-h", $sockets, "-U", "postgres"]}, periodSeconds: 2},
    backup: {consistency: {mode: "stop", maxStopSeconds: 300}}}')
  app_yaml "$APP" "$spec" | kubectl -n "$NS" apply -f - >/dev/null
  wait_for "postgres Ready" 180 app_ready "$NS" "$APP" || { on_fail "$NS"; return 1; }
  [[ $(kubectl -n "$NS" exec "$APP-0" -c app -- id -u) == 65532 ]]
  # Over the network, through its Service's name, a password is needed and the Secret's works.
  expect_fail "password authentication failed" kubectl -n "$NS" exec "$APP-0" -c app -- \
    env PGPASSWORD=wrong "$PG_BIN/psql" -h "$APP-0.$APP" -U postgres -c 'select 1'
  kubectl -n "$NS" exec "$APP-0" -c app -- sh -c \
    "PGPASSWORD=\$POSTGRES_PASSWORD $PG_BIN/psql -h $APP-0.$APP -U postgres -Atc 'select 1'" | grep -qx 1
  kubectl -n "$NS" exec "$APP-0" -c app -- "$PG_BIN/pgbench" -h "$SOCKETS" -U postgres -i -s 2 -q postgres >/dev/null 2>&1
  [[ $(sql 'select count(*) from pgbench_accounts') == 200000 ]]
}

test_a_stop_mode_backup_under_load_restores_a_consistent_database() {
  local id before after
  # pgbench clients in a pod of their own, through the Service, again whenever the server
  # goes away (the backup stops it). The server comes back in a new pod at a new address:
  # each attempt is bounded (a connection begun to the old address as it went away would
  # wait out TCP's own timeout, minutes).
  kubectl -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: batch/v1
kind: Job
metadata: {name: load}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 1
      containers:
      - name: pgbench
        image: $PG_IMAGE
        env:
        - {name: PGPASSWORD, valueFrom: {secretKeyRef: {name: pg-password, key: password}}}
        - {name: PGCONNECT_TIMEOUT, value: "3"}
        command: ["/bin/sh", "-c", "while :; do timeout -s KILL 20 $PG_BIN/pgbench -h $APP -U postgres -n -c 2 -T 5 postgres >/dev/null 2>&1 || sleep 1; done"]
        securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}, runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
EOF
  wait_for "transactions committed under load" 120 committed_at_least 200 || { on_fail "$NS"; return 1; }
  [[ $(request "$NS" "$APP" backup) == Succeeded ]] || { on_fail "$NS"; return 1; }
  id=$(jp "$NS" "$APP" '{.status.backupRequest.backupId}')
  has_event "$NS" StoppedForBackup
  [[ -z $(jp "$NS" "$APP" '{.status.lastBackup.inconsistentFiles}') ]] || { jp "$NS" "$APP" '{.status.lastBackup}'; return 1; }
  wait_for "postgres Ready after the backup" 180 app_ready "$NS" "$APP" || { on_fail "$NS"; return 1; }
  before=$(sql 'select count(*) from pgbench_history')
  wait_for "the clients write on after the backup" 120 committed_at_least $((before + 200)) || { on_fail "$NS"; return 1; }
  # Foreground: the Job goes only once its pod has gone, so no client writes after the count
  # (a background delete leaves the pod writing through its grace period, into the restored
  # database too).
  kubectl -n "$NS" delete job load --cascade=foreground --wait=true --timeout=90s >/dev/null
  before=$(sql 'select count(*) from pgbench_history')

  [[ $(request "$NS" "$APP" restore "hello-stateful.example.com/restore-from=$id") == Succeeded ]] ||
    { on_fail "$NS"; return 1; }
  [[ $(jp "$NS" "$APP" '{.status.restoreRequest.backupId}') == "$id" ]]
  wait_for "postgres Ready after the restore" 180 app_ready "$NS" "$APP" || { on_fail "$NS"; return 1; }
  after=$(sql 'select count(*) from pgbench_history')
  ((after > 0 && after < before)) || { echo "history: $after rows restored, $before before"; return 1; }
  balanced || { echo "the restored balances do not add up"; return 1; }
  # Every table and index, page by page, as PostgreSQL's own checker reads them.
  sql 'create extension if not exists amcheck' >/dev/null
  kubectl -n "$NS" exec "$APP-0" -c app -- "$PG_BIN/pg_amcheck" -h "$SOCKETS" -U postgres -d postgres --heapallindexed
}

run_test the_image_is_made_from_debians_postgresql test_the_image_is_made_from_debians_postgresql
run_test postgres_runs_as_a_non_root_app_with_its_password_from_a_secret test_postgres_runs_as_a_non_root_app_with_its_password_from_a_secret
run_test a_stop_mode_backup_under_load_restores_a_consistent_database test_a_stop_mode_backup_under_load_restores_a_consistent_database
summary
