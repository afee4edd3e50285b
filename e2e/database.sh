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
# shellcheck source=postgres.sh
source "$E2E_DIR/postgres.sh"

NS=$(new_ns db)
APP=pg
trap 'cleanup_ns "$NS"' EXIT

sql() { pg_sql "$NS" "$APP" "$1"; }

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
  pg_image
}

test_postgres_runs_as_a_non_root_app_with_its_password_from_a_secret() {
  pg_app "$NS" "$APP" stop
  wait_for "postgres Ready" 180 app_ready "$NS" "$APP" || { on_fail "$NS"; return 1; }
  [[ $(kubectl -n "$NS" exec "$APP-0" -c app -- id -u) == 65532 ]]
  # Over the network, through its Service's name, a password is needed and the Secret's works.
  expect_fail "password authentication failed" kubectl -n "$NS" exec "$APP-0" -c app -- \
    env PGPASSWORD=wrong "$PG_BIN/psql" -h "$APP-0.$APP" -U postgres -c 'select 1'
  kubectl -n "$NS" exec "$APP-0" -c app -- sh -c \
    "PGPASSWORD=\$POSTGRES_PASSWORD $PG_BIN/psql -h $APP-0.$APP -U postgres -Atc 'select 1'" | grep -qx 1
  kubectl -n "$NS" exec "$APP-0" -c app -- "$PG_BIN/pgbench" -h "$PG_SOCKETS" -U postgres -i -s 2 -q postgres >/dev/null 2>&1
  [[ $(sql 'select count(*) from pgbench_accounts') == 200000 ]]
}

test_a_stop_mode_backup_under_load_restores_a_consistent_database() {
  local id before after
  # pgbench clients in a pod of their own, through the Service, again whenever the server
  # goes away (the backup stops it).
  pg_load "$NS" "$APP" load -n -c 2 -T 5
  wait_for "transactions committed under load" 120 committed_at_least 200 || { on_fail "$NS"; return 1; }
  [[ $(request "$NS" "$APP" backup) == Succeeded ]] || { on_fail "$NS"; return 1; }
  id=$(jp "$NS" "$APP" '{.status.backupRequest.backupId}')
  has_event "$NS" StoppedForBackup
  [[ -z $(jp "$NS" "$APP" '{.status.lastBackup.inconsistentFiles}') ]] || { jp "$NS" "$APP" '{.status.lastBackup}'; return 1; }
  wait_for "postgres Ready after the backup" 180 app_ready "$NS" "$APP" || { on_fail "$NS"; return 1; }
  before=$(sql 'select count(*) from pgbench_history')
  wait_for "the clients write on after the backup" 120 committed_at_least $((before + 200)) || { on_fail "$NS"; return 1; }
  # Waited for: the pod object goes only once its container has, so no client writes after
  # the count (into the restored database either).
  kubectl -n "$NS" delete pod load --wait=true --timeout=90s >/dev/null
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
  kubectl -n "$NS" exec "$APP-0" -c app -- "$PG_BIN/pg_amcheck" -h "$PG_SOCKETS" -U postgres -d postgres --heapallindexed
}

run_test the_image_is_made_from_debians_postgresql test_the_image_is_made_from_debians_postgresql
run_test postgres_runs_as_a_non_root_app_with_its_password_from_a_secret test_postgres_runs_as_a_non_root_app_with_its_password_from_a_secret
run_test a_stop_mode_backup_under_load_restores_a_consistent_database test_a_stop_mode_backup_under_load_restores_a_consistent_database
summary
