#!/usr/bin/env bash
# Benchmark of the kubectl plugin. Not a test. Needs KUBECONFIG (the e2e cluster).
# Usage: bench/plugin.sh
#   BENCH_NS=ns      namespace whose apps to list (bench/reconciler.sh passes its own);
#                    without it, BENCH_APPS apps (default 200) are made in a bench-* namespace,
#                    listed, and deleted
#   BENCH_RUNS=20    timed runs of each command (after 3 warm-up runs)
# Prints one line per comparison: "name: ours X, peer Y, ratio R".
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
need_cluster

RUNS=${BENCH_RUNS:-20}
cargo build --quiet --release -p kubectl-hellostateful
TARGET_DIR=${CARGO_TARGET_DIR:-target}
[[ $TARGET_DIR == /* ]] || TARGET_DIR=$PWD/$TARGET_DIR
PLUGIN=$TARGET_DIR/release/kubectl-hellostateful
KUBECTL=$(readlink -f "$(command -v kubectl)")
command -v hyperfine >/dev/null || { apt-get update -qq >/dev/null && apt-get install -y -qq hyperfine >/dev/null; } || true

OWN_NS=
WORK=$(mktemp -d /tmp/bench-plugin.XXXXXX)
cleanup() {
  local rc=$?
  stop_proxy
  [[ -z $OWN_NS ]] || delete_namespaces "$OWN_NS"
  rm -rf "$WORK"
  return $rc
}
trap cleanup EXIT

if [[ -z ${BENCH_NS:-} ]]; then
  start_proxy
  OWN_NS=bench-$(date +%s | tail -c 6)$RANDOM-plugin
  kubectl create namespace "$OWN_NS" >/dev/null
  log "creating $BENCH_APPS apps in $OWN_NS"
  app_manifests "$OWN_NS" "$BENCH_APPS" | kubectl apply --server-side -f - >/dev/null
  wait_at_least "$BENCH_APPS" 0.5 600 ready_apps "$OWN_NS"
  BENCH_NS=$OWN_NS
fi
apps=$(kubectl get hellostatefuls -n "$BENCH_NS" -o name | wc -l)

# Both print the same table (kubectl from the CRD's printer columns) to a pipe.
ours_cmd=("$PLUGIN" list -n "$BENCH_NS")
peer_cmd=("$KUBECTL" get hellostatefuls -n "$BENCH_NS")
"${ours_cmd[@]}" >/dev/null || { log "plugin list failed"; exit 1; }
"${peer_cmd[@]}" >/dev/null

# Median wall time of a command in ms.
if command -v hyperfine >/dev/null; then
  tool=hyperfine
  median_ms() {
    hyperfine -N --style none --warmup 3 --runs "$RUNS" --export-json "$WORK/h.json" "$*" >/dev/null 2>&1
    jq '.results[0].median * 1000' "$WORK/h.json"
  }
else
  tool="a loop"
  median_ms() {
    local i s e
    for ((i = 0; i < 3; i++)); do "$@" >/dev/null 2>&1; done
    for ((i = 0; i < RUNS; i++)); do
      s=$(now); "$@" >/dev/null 2>&1; e=$(now)
      calc "($e - $s) * 1000"
    done | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
  }
fi
# Interleaved twice (ours, peer, ours, peer), best median kept: load from other work on the
# machine hits both alike.
ours1=$(median_ms "${ours_cmd[@]}"); peer1=$(median_ms "${peer_cmd[@]}")
ours2=$(median_ms "${ours_cmd[@]}"); peer2=$(median_ms "${peer_cmd[@]}")
ours=$(calc "if ($ours1 < $ours2) $ours1 else $ours2")
peer=$(calc "if ($peer1 < $peer2) $peer1 else $peer2")

size() { calc "$(stat -c %s "$1") / 1000000"; }
ours_size=$(size "$PLUGIN")
peer_size=$(size "$KUBECTL")
peer_version=$("$KUBECTL" version --client -o json 2>/dev/null | jq -r '.clientVersion.gitVersion' || echo '?')

line() { printf '%s: ours %s, peer %s, ratio %.2f\n' "$1" "$2" "$3" "$4"; }
echo "# plugin: list of $apps apps in one namespace, median of $RUNS runs ($tool, 3 warm-up, best of 2 interleaved rounds); ratio = ours/peer, goal <= 1.0"
echo "# plugin: release binary size in MB (10^6 B) vs $KUBECTL $peer_version; goal ours <= 15 MB; ratio = ours/peer"
line plugin-list-vs-kubectl-get "$(printf %.1f "$ours")ms" "$(printf %.1f "$peer")ms" "$(calc "$ours / $peer")"
line plugin-binary-size "$(printf %.1f "$ours_size") MB" "$(printf %.1f "$peer_size") MB (kubectl)" "$(calc "$ours_size / $peer_size")"
