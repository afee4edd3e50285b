#!/usr/bin/env bash
# Benchmark: what a backup costs a real database that serves writes, in each consistency
# mode (backup.consistency.mode live and stop), and how long after the request its copy is
# consistent. Not a test. Needs the e2e cluster with the reconciler installed (KUBECONFIG),
# and root (the database's image is loaded into the node).
#
#   BENCH_LOAD_SECONDS=20   seconds of load measured before each backup (the peer)
#
# For each mode, in a namespace of its own (deleted at the end): PostgreSQL 15 (Debian's, as
# e2e/database.sh runs it) with pgbench's TPC-B tables at scale 2, written by 2 pgbench
# clients in a pod of their own, which log every transaction (its latency and when it ended).
# After BENCH_LOAD_SECONDS of load an on-demand backup is asked for and waited for; then
# the load goes on until the app is Ready again and BENCH_LOAD_SECONDS more.
#
# Prints one line per comparison: "name: ours X, peer Y, ratio R", after "#" lines:
#   consistency_<mode>_write_p99_ms   p99 latency of the transactions that ended while the
#                                     backup ran, vs those of the load before it
#   consistency_<mode>_commits_per_s  transactions per second while the backup ran, vs before
#   consistency_stop_outage_s         the longest time without a transaction, from the request
#                                     until the app is Ready again, vs the whole backup
#   consistency_stop_point_s          from the request to the consistency point (the app
#                                     stopped: its StoppedForBackup event), vs the whole backup
# A live backup has no single consistency point: each file is copied as it is read, so a
# database's files may be torn between them (README, "Consistent backups").
set -euo pipefail
cd "$(dirname "$0")/.."
export KUBECONFIG=${KUBECONFIG:-/var/lib/hellostateful-e2e/kubeconfig}
LOAD_SECONDS=${BENCH_LOAD_SECONDS:-20}
# shellcheck source=../e2e/lib.sh
source e2e/lib.sh
# shellcheck source=../e2e/hs.sh
source e2e/hs.sh
# shellcheck source=../e2e/postgres.sh
source e2e/postgres.sh

log() { echo "bench: $*" >&2; }
kubectl get --raw /readyz >/dev/null 2>&1 ||
  { log "no cluster reachable with KUBECONFIG=$KUBECONFIG (start one: e2e/cluster up)"; exit 1; }
NAMESPACES=()
trap 'for ns in "${NAMESPACES[@]}"; do cleanup_ns "$ns"; done' EXIT

log "making the PostgreSQL image"
pg_image

# transactions NS: every transaction the load pod logged, "end_seconds latency_ms" per line
transactions() {
  kubectl -n "$1" exec load -- sh -c 'cat /log/tx.*' |
    awk '$3 ~ /^[0-9]+$/ { printf "%d.%06d %.3f\n", $5, $6, $3 / 1000 }' | sort -n
}

# measure MODE: one backup of a loaded database in MODE; prints its lines
measure() {
  local mode=$1 ns app=pg requested finished ready stopped=""
  ns=$(new_ns "bench-$mode")
  NAMESPACES+=("$ns")
  pg_app "$ns" "$app" "$mode"
  wait_for "postgres Ready ($mode)" 180 app_ready "$ns" "$app" >&2
  kubectl -n "$ns" exec "$app-0" -c app -- "$PG_BIN/pgbench" -h "$PG_SOCKETS" -U postgres -i -s 2 -q postgres >/dev/null 2>&1
  pg_load "$ns" "$app" load -n -c 2 -T 5 -l --log-prefix=tx
  wait_for "the load running ($mode)" 60 bash -c "[[ \$(kubectl -n $ns get pod load -o jsonpath='{.status.phase}') == Running ]]" >&2
  sleep "$LOAD_SECONDS"
  log "$mode: backing up under load"
  requested=$(date +%s.%N)
  [[ $(request "$ns" "$app" backup) == Succeeded ]] || { log "$mode: the backup failed"; return 1; }
  finished=$(date +%s.%N)
  wait_for "postgres Ready after the backup ($mode)" 300 app_ready "$ns" "$app" >&2
  ready=$(date +%s.%N)
  if [[ $mode == stop ]]; then
    stopped=$(kubectl -n "$ns" get events.events.k8s.io -o json | jq -r '
      [.items[] | select(.reason == "StoppedForBackup") | (.eventTime // .deprecatedLastTimestamp)] | first // ""')
    [[ -n $stopped ]] && stopped=$(date -d "$stopped" +%s.%N)
  fi
  sleep "$LOAD_SECONDS"
  kubectl -n "$ns" exec load -- touch /log/stop
  wait_for "the load stopped ($mode)" 60 bash -c "! kubectl -n $ns exec load -- pgrep -f 'pgbench -h' >/dev/null 2>&1" >&2
  transactions "$ns" | python3 -c '
import sys
mode, requested, finished, ready, stopped, load = sys.argv[1], *map(float, sys.argv[2:5]), sys.argv[5], float(sys.argv[6])
rows = [tuple(map(float, line.split())) for line in sys.stdin]
before = [lat for end, lat in rows if requested - load <= end < requested]
during = [lat for end, lat in rows if requested <= end <= finished]
def p99(values):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * 0.99))] if values else float("nan")
def line(name, ours, peer, unit=""):
    ratio = ours / peer if peer else float("nan")
    print(f"{name}: ours {ours:.3f}{unit}, peer {peer:.3f}{unit}, ratio {ratio:.2f}")
backup = finished - requested
print(f"# {mode}: {len(before)} transactions in the {load:.0f} s before the backup, {len(during)} in its {backup:.1f} s")
line(f"consistency_{mode}_write_p99_ms", p99(during), p99(before))
line(f"consistency_{mode}_commits_per_s", len(during) / backup, len(before) / load)
if mode == "stop":
    ends = [end for end, _ in rows if requested <= end <= ready]
    edges = [requested] + ends + [ready]
    outage = max(b - a for a, b in zip(edges, edges[1:]))
    line("consistency_stop_outage_s", outage, backup)
    if stopped:
        line("consistency_stop_point_s", float(stopped) - requested, backup)
' "$mode" "$requested" "$finished" "$ready" "$stopped" "$LOAD_SECONDS"
}

echo "# A real database under write load while it is backed up: p99 write latency and"
echo "# throughput during the backup vs the same load just before it (ratio: the cost), and in"
echo "# stop mode the outage and the time to the consistency point vs the whole backup."
measure live
measure stop
