# Helpers shared by bench/reconciler.sh and bench/plugin.sh (sourced, not run).
# Everything here talks to the cluster of $KUBECONFIG through one `kubectl proxy` started by
# start_proxy (killed by its pid on exit), so polling costs a curl, not a kubectl process.

export KUBECONFIG=${KUBECONFIG:-/var/lib/hellostateful-e2e/kubeconfig}
RECONCILER_NS=${RECONCILER_NS:-hellostateful-system}
METRICS_PATH=/api/v1/namespaces/$RECONCILER_NS/services/hellostateful-reconciler-metrics:8080/proxy/metrics
BENCH_APPS=${BENCH_APPS:-200}
# A schedule that never fires during a run (03:00 on January 1st): every app gets its CronJob,
# no backup Job ever starts.
BENCH_SCHEDULE=${BENCH_SCHEDULE:-0 3 1 1 *}
CRICTL=${CRICTL:-/var/cache/hellostateful/tools/crictl}
export CRI_CONFIG_FILE=${CRI_CONFIG_FILE:-/var/lib/hellostateful-e2e/crictl.yaml}

log() { echo "bench: $*" >&2; }
need_cluster() {
  kubectl get --raw /readyz >/dev/null 2>&1 ||
    { log "no cluster reachable with KUBECONFIG=$KUBECONFIG (start one: e2e/cluster up)"; exit 1; }
}
now() { date +%s.%N; }
calc() { echo "$@" | bc -l; }

PROXY_PID=
PROXY=
start_proxy() {
  local out
  out=$(mktemp /tmp/bench-proxy.XXXXXX)
  kubectl proxy --address=127.0.0.1 --port=0 >"$out" 2>&1 &
  PROXY_PID=$!
  for _ in $(seq 100); do
    PROXY=$(sed -n 's/^Starting to serve on \(.*\)$/http:\/\/\1/p' "$out")
    [[ -n $PROXY ]] && break
    sleep 0.1
  done
  rm -f "$out"
  [[ -n $PROXY ]] || { log "kubectl proxy did not start"; return 1; }
}
stop_proxy() { [[ -n $PROXY_PID ]] && kill "$PROXY_PID" 2>/dev/null; PROXY_PID=; }

api() { curl -fsS --max-time 30 "$PROXY$1"; }

# Number of objects of a list URL, asking the API server for one item only.
count() {
  api "$1?limit=1" | jq '(.items | length) + (.metadata.remainingItemCount // 0)'
}

# A counter of the in-cluster reconciler (the pod behind the metrics Service); empty if none.
reconciler_metric() {
  # awk reads to the end: leaving early makes curl's write fail (exit 23), which pipefail
  # reports once the output is larger than a pipe's buffer (per-app metrics, 1,000 apps).
  api "$METRICS_PATH" 2>/dev/null | awk -v m="$1" '$1 == m && !found {print $2; found = 1}'
}

# Write requests the API server has served for the children's kinds (main resource only:
# the reconciler never writes their status or scale) and for hellostatefuls (any
# subresource: finalizer, status). Leases and Events are not counted.
apiserver_write_series() {
  api /metrics | awk -v verbs="${1:-POST|PUT|PATCH|APPLY|DELETE|DELETECOLLECTION}" '
    /^apiserver_request_total\{/ {
      if ($0 !~ ("verb=\"(" verbs ")\"")) next
      if ($0 !~ /resource="hellostatefuls"/ &&
          !($0 ~ /resource="(statefulsets|services|cronjobs|persistentvolumeclaims|persistentvolumes)"/ &&
            $0 ~ /subresource=""/)) next
      match($0, /resource="[a-z]+"/); r = substr($0, RSTART + 10, RLENGTH - 11)
      match($0, /subresource="[a-z]*"/); sr = substr($0, RSTART + 13, RLENGTH - 14)
      match($0, /verb="[A-Z]+"/); v = substr($0, RSTART + 6, RLENGTH - 7)
      n[r (sr == "" ? "" : "/" sr) ":" v] += $NF
    }
    END { for (k in n) printf "%s %d\n", k, n[k] }' | sort
}
# Every request the API server has served (all kinds, all verbs), for context.
apiserver_requests() { api /metrics | awk '/^apiserver_request_total\{/ {n += $NF} END {printf "%d\n", n}'; }
# Reads (GET, LIST) of the same kinds, for context.
apiserver_read_series() { apiserver_write_series 'GET|LIST'; }
apiserver_writes() { apiserver_write_series | awk '{n += $2} END {printf "%d\n", n}'; }
# What changed between two saved apiserver_write_series outputs: "kind:VERB +n, ...".
series_delta() {
  join -a 2 -e 0 -o 0,1.2,2.2 "$1" "$2" | awk '$3 > $2 {printf "%s%s +%d", sep, $1, $3 - $2; sep = ", "}'
}

# HelloStateful manifests b00000.. in namespace $1, as one JSON List (kubectl 1.32 takes
# ~30 ms per document of a multi-document YAML file, ten times what it takes per item of a
# List: both sides of a comparison use Lists). replicas 0: no pods, so no claim or volume
# either (those are per replica); a backup schedule: each app gets a StatefulSet, a headless
# Service and a CronJob.
app_manifests() {
  jq -n --arg ns "$1" --argjson n "$2" --arg schedule "$BENCH_SCHEDULE" '{
    apiVersion: "v1", kind: "List",
    items: [range($n) | {
      apiVersion: "hello-stateful.example.com/v1alpha1", kind: "HelloStateful",
      metadata: {name: ("b" + (. | tostring | ("00000" + .)[-5:])), namespace: $ns},
      spec: {replicas: 0, backupSchedule: $schedule}}]}'
}

# Apps of namespace $1 whose status says Ready=True for the current generation.
ready_apps() {
  api "/apis/hello-stateful.example.com/v1alpha1/namespaces/$1/hellostatefuls" | jq '[.items[] |
    select(.status.observedGeneration == .metadata.generation) |
    select(any(.status.conditions[]?; .type == "Ready" and .status == "True"))] | length'
}

# Children that exist in namespace $1: StatefulSets + Services + CronJobs + claims (each
# app's backup claim, made right after its PersistentVolume), four per app.
children() {
  local ns=$1 a b c d
  a=$(count "/apis/apps/v1/namespaces/$ns/statefulsets") || return 1
  b=$(count "/api/v1/namespaces/$ns/services") || return 1
  c=$(count "/apis/batch/v1/namespaces/$ns/cronjobs") || return 1
  d=$(count "/api/v1/namespaces/$ns/persistentvolumeclaims") || return 1
  echo $((a + b + c + d))
}

# Polls `cmd` every $2 seconds until its output is >= $1, for at most $3 seconds.
wait_at_least() {
  local want=$1 every=$2 limit=$3 got deadline
  shift 3
  deadline=$(calc "$(now) + $limit")
  while :; do
    got=$("$@" 2>/dev/null || true)
    [[ -n $got ]] && (( got >= want )) && return 0
    (( $(calc "$(now) > $deadline") )) && { log "timed out: $* = ${got:-?} < $want"; return 1; }
    sleep "$every"
  done
}

# Host pid of the running reconciler container (the node is this machine).
reconciler_pid() {
  local id
  id=$("$CRICTL" ps -q --name '^reconciler$' --label "io.kubernetes.pod.namespace=$RECONCILER_NS" --state running 2>/dev/null | head -1)
  [[ -n $id ]] && "$CRICTL" inspect "$id" | jq -r '.info.pid'
}

# VmRSS of a pid in MB (10^6 bytes).
rss_mb() { awk '/^VmRSS:/ {printf "%.1f\n", $2 * 1024 / 1e6}' "/proc/$1/status"; }
# Its two parts, in MB: "heap and stacks X, binary Y" (RssAnon, RssFile + RssShmem).
rss_parts() {
  awk '/^RssAnon:/ {a = $2} /^Rss(File|Shmem):/ {f += $2}
       END {printf "heap and stacks %.1f, binary %.1f\n", a * 1024 / 1e6, f * 1024 / 1e6}' "/proc/$1/status"
}

# Deletes the bench namespaces given, waits (bounded) until they are gone, and removes what
# they left on the node.
delete_namespaces() {
  local ns
  [[ $# -gt 0 ]] || return 0
  kubectl delete namespace "$@" --wait=false --ignore-not-found >/dev/null 2>&1 || true
  for ns in "$@"; do
    kubectl wait --for=delete "namespace/$ns" --timeout=300s >/dev/null 2>&1 ||
      log "namespace $ns is still terminating"
    rm -rf "/tmp/hostpath-provisioner/$ns" "/tmp/backup/$ns"
    # Backup volumes outlive their apps by design.
    kubectl delete pv -l "hello-stateful.example.com/namespace=$ns" --wait=false >/dev/null 2>&1 || true
  done
}

# e2e suites running now: their writes land in the same API server counters.
concurrent_e2e() {
  pgrep -af 'e2e/(run-all|smoke|reconciler|scenarios|hs|plugin)[^ ]*' 2>/dev/null | awk '{print $NF}' | sort -u | paste -sd, - || true
}
