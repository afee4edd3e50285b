#!/usr/bin/env bash
# Benchmark of the in-cluster reconciler with BENCH_APPS HelloStatefuls (default 200).
# Not a test. Needs KUBECONFIG (the e2e cluster) and root (to read the reconciler's RSS).
# Usage: bench/reconciler.sh
#   BENCH_APPS=N              number of apps (replicas 0 + a backup schedule: no pods)
#   BENCH_WITH_APPS="cmd"     run cmd while the N converged apps exist (BENCH_NS exported),
#                             its stdout is printed after ours (bench/run: bench/plugin.sh)
# Prints one line per comparison: "name: ours X, peer Y, ratio R".
#
# Steps (namespaces bench-<id>-ours and bench-<id>-peer, deleted at the end):
#  1. converge: one `kubectl apply --server-side` of N apps, time until every app's
#     StatefulSet, Service, CronJob and backup claim exist (polled every 0.2 s; the backup
#     PersistentVolume is made just before its claim);
#     peer: the same 5N children, exported from app 0 (status, uid, resourceVersion,
#     ownerReferences, managedFields, finalizers, creationTimestamp, generation and the
#     volume binder's annotations stripped) and renamed per app, in one
#     `kubectl apply --server-side` call into the peer namespace.
#  2. writes per resync: a forced full pass over every app (rollout restart of the
#     reconciler, until it has reconciled as many times as there are apps in the cluster);
#     ours = write requests for the bench's apps: the child applies the reconciler logs for
#     them + apps whose resourceVersion changed (only the reconciler writes them). The API
#     server's apiserver_request_total writes (verbs POST/PUT/PATCH/APPLY/DELETE; child kinds
#     + hellostatefuls) over the same window, and over an equal window without a restart, are
#     printed beside it: they count every client in the cluster (e2e suites included).
#     peer: apiserver_request_total writes around a re-apply of the unchanged peer children
#     with `kubectl apply --server-side` (what a controller that applies blindly would send).
#  3. RSS of the reconciler process (VmRSS from /proc, found through crictl) with N apps,
#     vs the goal (40 MB with 1,000 apps) and vs kube-scheduler, the smallest Go controller
#     of this cluster.
#  4. At rest: BENCH_REST_SECONDS (default 600) in which nothing changes; the reconciler's
#     own request counter (reads, watch renewals, writes) per app per minute, beside the API
#     server's apiserver_request_total reads and writes of the same kinds (all clients).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
need_cluster

N=$BENCH_APPS
REST=${BENCH_REST_SECONDS:-600}
ID=$(date +%s | tail -c 6)$RANDOM
OURS=bench-$ID-ours
PEER=bench-$ID-peer
WORK=$(mktemp -d /tmp/bench-reconciler.XXXXXX)
cleanup() {
  local rc=$?
  stop_proxy
  log "deleting namespaces $OURS $PEER"
  delete_namespaces "$OURS" "$PEER"
  rm -rf "$WORK"
  return $rc
}
trap cleanup EXIT

start_proxy
kubectl get deploy -n "$RECONCILER_NS" hellostateful-reconciler >/dev/null ||
  { log "the reconciler is not installed (kubectl apply -k manifests/)"; exit 1; }
others=$(concurrent_e2e)
[[ -z $others ]] || log "note: e2e suites running now ($others): their writes share the API server counters"

kubectl create namespace "$OURS" >/dev/null
kubectl create namespace "$PEER" >/dev/null

# 1. Converge -----------------------------------------------------------------------------
app_manifests "$OURS" "$N" >"$WORK/apps.json"
log "creating $N apps in $OURS"
writes0=$(reconciler_metric hellostateful_child_writes_total)
passes0=$(reconciler_metric hellostateful_reconciles_total)
req0=$(apiserver_requests)
t0=$(now)
kubectl apply --server-side -f "$WORK/apps.json" >/dev/null
t_apps=$(calc "$(now) - $t0")
wait_at_least $((4 * N)) 0.2 600 children "$OURS"
t1=$(now)
ours_converge=$(calc "$t1 - $t0")
ours_requests=$(($(apiserver_requests) - req0))
writes1=$(reconciler_metric hellostateful_child_writes_total)
passes1=$(reconciler_metric hellostateful_reconciles_total)
log "children of $N apps exist after $(printf %.2f "$ours_converge")s (the apply of the apps took $(printf %.2f "$t_apps")s; reconciler child writes: $((writes1 - writes0)))"
wait_at_least "$N" 0.5 300 ready_apps "$OURS"
# Settled: no child write for 3 s.
prev=-1
while cur=$(reconciler_metric hellostateful_child_writes_total); [[ $cur != "$prev" ]]; do
  prev=$cur
  sleep 3
done
# The same apps, validated and admitted by the API server but not stored (so no reconcile):
# what creating them costs without the reconciler's concurrent work.
t0=$(now)
sed "s/\"$OURS\"/\"$PEER\"/g" "$WORK/apps.json" | kubectl apply --server-side --dry-run=server -f - >/dev/null
t_dry=$(calc "$(now) - $t0")

# 3a. RSS of the reconciler that created the N apps -------------------------------------
pid=$(reconciler_pid) || true
[[ -n $pid ]] || { log "cannot find the reconciler process through crictl"; exit 1; }
rss_created=$(rss_mb "$pid")
parts_created=$(rss_parts "$pid")

# Peer objects: app 0's five children as exported (StatefulSet, Service, CronJob, and the
# backup directory's PersistentVolume and its pre-bound claim), renamed per app, without
# what the API server and the volume binder added (status, bind annotations, finalizers,
# the claimRef's uid).
{
  kubectl get statefulsets,services,cronjobs,persistentvolumeclaims -n "$OURS" -l app.kubernetes.io/instance=b00000 -o json
  kubectl get persistentvolumes -o json \
    -l "app.kubernetes.io/instance=b00000,app.kubernetes.io/component=backup,hello-stateful.example.com/namespace=$OURS"
} | jq -cs '
  [.[] | (.items // [.])[] | del(.status) | del(.spec.volumeClaimTemplates[]?.status)
   | del(.spec.claimRef.uid, .spec.claimRef.resourceVersion)
   | .metadata |= (del(.uid, .resourceVersion, .ownerReferences, .managedFields, .finalizers,
                       .creationTimestamp, .generation, .selfLink)
                   | if .annotations then .annotations |= with_entries(select(.key | test("^(pv|volume)[.]kubernetes[.]io/") | not)) else . end)
   | if .spec.claimRef == {} then del(.spec.claimRef) else . end]' >"$WORK/template.json"
[[ $(jq length "$WORK/template.json") == 5 ]] || { log "app b00000 does not have 5 children"; exit 1; }
# The managed-by label is changed so that the in-cluster reconciler (which watches its
# children by that label) does not even see the peer's objects.
python3 - "$WORK/template.json" "$OURS" "$PEER" "$N" >"$WORK/peer.json" <<'PY'
import json, sys
template, ours, peer, n = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3], int(sys.argv[4])
items = []
for i in range(n):
    text = template.replace(ours, peer).replace("b00000", f"b{i:05d}")
    for obj in json.loads(text):
        labels = obj["metadata"].get("labels", {})
        if labels.get("app.kubernetes.io/managed-by") == "hellostateful-reconciler":
            labels["app.kubernetes.io/managed-by"] = "hellostateful-bench-peer"
        items.append(obj)
json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout)
PY
log "applying the same $((5 * N)) children with kubectl into $PEER"
req0=$(apiserver_requests)
t0=$(now)
kubectl apply --server-side -f "$WORK/peer.json" >/dev/null
t1=$(now)
peer_converge=$(calc "$t1 - $t0")
peer_requests=$(($(apiserver_requests) - req0))
[[ $(children "$PEER") == $((4 * N)) ]] || { log "peer objects missing"; exit 1; }
log "kubectl apply --server-side of $((5 * N)) objects: $(printf %.2f "$peer_converge")s"

# While the apps exist: the plugin bench, if asked for.
if [[ -n ${BENCH_WITH_APPS:-} ]]; then
  BENCH_NS=$OURS BENCH_APPS=$N bash -c "$BENCH_WITH_APPS" >"$WORK/with-apps.out"
fi

# 2. Writes per resync --------------------------------------------------------------------
# Peer first: the unchanged children applied again by kubectl.
p0=$(apiserver_writes)
kubectl apply --server-side -f "$WORK/peer.json" >/dev/null
p1=$(apiserver_writes)
peer_writes=$((p1 - p0))

# Only the reconciler writes the apps (finalizer, status): a changed resourceVersion of an
# app is a write of the reconciler. (Children also change when their own controllers write
# their status, so for them the reconciler's log is the record.)
versions() {
  kubectl get hellostatefuls -n "$OURS" \
    -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.resourceVersion}{"\n"}{end}' | sort
}
versions >"$WORK/rv0"
old_pod=$(kubectl -n "$RECONCILER_NS" get pods -l app.kubernetes.io/component=reconciler \
  -o jsonpath='{.items[0].metadata.name}')
apiserver_read_series >"$WORK/g0"
apiserver_write_series >"$WORK/s0"
r0=$(now)
log "restarting the reconciler ($old_pod) for a full pass over every app"
kubectl -n "$RECONCILER_NS" rollout restart deployment/hellostateful-reconciler >/dev/null
kubectl -n "$RECONCILER_NS" rollout status deployment/hellostateful-reconciler --timeout=180s >/dev/null
# The new pod has passed once over every app in the cluster (other namespaces included).
total=$(count /apis/hello-stateful.example.com/v1alpha1/hellostatefuls)
new_reconciles() {
  local pod
  pod=$(kubectl -n "$RECONCILER_NS" get pods -l app.kubernetes.io/component=reconciler \
    --field-selector=status.phase=Running -o jsonpath='{.items[*].metadata.name}')
  [[ $pod != *"$old_pod"* ]] || return 1
  reconciler_metric hellostateful_reconciles_total | cut -d. -f1
}
wait_at_least "$total" 0.5 300 new_reconciles
# Writes (if any) come at the end of a pass: let the last passes finish (the reconciler's
# own write and read counters still for 4 s: some apps get their first pass only after
# others got a second; other apps in the cluster may keep it busy, so bounded).
requests() { reconciler_metric "hellostateful_api_requests_total{kind=\"$1\"}" | cut -d. -f1; }
prev=-1
while cur="$(reconciler_metric hellostateful_child_writes_total) $(requests read)"; [[ $cur != "$prev" ]]; do
  prev=$cur
  sleep 4
  (( $(calc "$(now) - $r0 > 240") )) && break
done
apiserver_write_series >"$WORK/s1"
apiserver_read_series >"$WORK/g1"
r1=$(now)
window=$(calc "$r1 - $r0")
sum() { awk '{n += $2} END {print n + 0}' "$1"; }
api_writes=$(($(sum "$WORK/s1") - $(sum "$WORK/s0")))
reads=$(($(sum "$WORK/g1") - $(sum "$WORK/g0")))
write_kinds=$(series_delta "$WORK/s0" "$WORK/s1")
versions >"$WORK/rv1"
app_writes=$(comm -13 "$WORK/rv0" "$WORK/rv1" | wc -l)
own_writes=$(reconciler_metric hellostateful_child_writes_total | cut -d. -f1)
# The reconciler logs every child it applies ("Kind name"); the bench apps are b00000...
child_writes=$(kubectl -n "$RECONCILER_NS" logs deployment/hellostateful-reconciler 2>/dev/null |
  grep '"applying"' | grep -cE '"(StatefulSet|Service|CronJob|PersistentVolumeClaim|PersistentVolume) [^"]*b[0-9]{5}[^"]*"' || true)
ours_writes=$((child_writes + app_writes))
reconciles=$(reconciler_metric hellostateful_reconciles_total | cut -d. -f1)

# 3b. RSS after the full pass (new process), kube-scheduler's as a peer.
pid=$(reconciler_pid) || true
rss_resync=$(rss_mb "$pid")
parts_resync=$(rss_parts "$pid")
rss=$(calc "if ($rss_created > $rss_resync) $rss_created else $rss_resync")
sched_pid=$(cat /var/lib/hellostateful-e2e/pids/kube-scheduler.pid 2>/dev/null || pgrep -xo kube-scheduler)
rss_sched=$(rss_mb "$sched_pid")

# 4. At rest: nothing changes for BENCH_REST_SECONDS; the reconciler's own request counter
# (reads, watch renewals, writes) beside the API server's reads and writes of the same kinds.
log "at rest for ${REST}s: counting requests"
apiserver_write_series >"$WORK/b0"
apiserver_read_series >"$WORK/q0"
rest_reads0=$(requests read) rest_watches0=$(requests watch) rest_writes0=$(requests write)
rest_passes0=$(reconciler_metric hellostateful_reconciles_total | cut -d. -f1)
sleep "$REST"
apiserver_write_series >"$WORK/b1"
apiserver_read_series >"$WORK/q1"
rest_reads=$(($(requests read) - ${rest_reads0:-0}))
rest_watches=$(($(requests watch) - ${rest_watches0:-0}))
rest_writes=$(($(requests write) - ${rest_writes0:-0}))
rest_passes=$(($(reconciler_metric hellostateful_reconciles_total | cut -d. -f1) - rest_passes0))
background="$(($(sum "$WORK/b1") - $(sum "$WORK/b0")))"
background_kinds=$(series_delta "$WORK/b0" "$WORK/b1")
rest_api_reads="$(($(sum "$WORK/q1") - $(sum "$WORK/q0")))"
rest_read_kinds=$(series_delta "$WORK/q0" "$WORK/q1")
per_app_minute() { calc "$1 / $total / ($REST / 60)"; }

line() { printf '%s: ours %s, peer %s, ratio %.2f\n' "$1" "$2" "$3" "$4"; }
f2() { printf %.2f "$1"; }
echo "# reconciler: $N apps (replicas 0 + backupSchedule: a StatefulSet, a Service, a CronJob, a backup PersistentVolume and its claim each; no pods), the in-cluster reconciler, a 1-node cluster on 2 cores${others:+, e2e suites running meanwhile: $others}"
echo "# converge: ratio = ours / peer; ours = from kubectl apply of the $N apps to all $((5 * N)) children existing; peer = one kubectl apply --server-side of the same $((5 * N)) children; goal <= 1.2"
echo "#   ours: the apply of the apps alone took $(f2 "$t_apps")s ($(f2 "$t_dry")s as --dry-run=server, without the reconciler's concurrent work); $(printf %.0f "$(calc "$passes1 - $passes0")") reconcile passes, $((writes1 - writes0)) child writes, $ours_requests API requests in all; peer: $peer_requests API requests"
echo "# writes: ours = write requests for the $N apps in a full pass after a reconciler restart (child applies in the reconciler's log + apps whose resourceVersion changed); peer = write requests of re-applying the unchanged children with kubectl apply --server-side; ratio = ours/peer; goal ours = 0 (ratio 0)"
echo "#   window $(printf %.1f "$window")s: $reconciles reconcile passes ($total apps in the cluster), $reads GET/LIST of the child kinds + hellostatefuls; API server writes (child kinds + hellostatefuls, all namespaces): $api_writes${write_kinds:+ ($write_kinds)}, of which the reconciler's child writes (all apps) $own_writes"
echo "# at rest: ${REST}s in which nothing changes, $total apps in the cluster, $rest_passes reconcile passes; ours = the reconciler's own GET requests (hellostateful_api_requests_total{kind=\"read\"}) per app per minute; peer = the API server's GET/LIST of the child kinds + hellostatefuls from all clients (apiserver_request_total) per app per minute; ratio = ours / goal 0.05"
echo "#   the reconciler sent $rest_reads reads, $rest_watches watch renewals and $rest_writes writes; API server reads of those kinds: $rest_api_reads${rest_read_kinds:+ ($rest_read_kinds)}, writes: $background${background_kinds:+ ($background_kinds)}"
echo "# rss: VmRSS of the reconciler process in MB (10^6 B), the larger of after creating the apps ($rss_created: $parts_created) and after the restart's full pass ($rss_resync: $parts_resync); ratio = ours/peer; goal <= 40 MB with 1,000 apps (BENCH_APPS=1000; ratio <= 1.0 on the goal line); kube-scheduler = the smallest Go controller of this cluster, for scale"
line reconciler-converge-vs-kubectl-apply "$(f2 "$ours_converge")s" "$(f2 "$peer_converge")s" "$(calc "$ours_converge / $peer_converge")"
line steady-state-writes-per-resync "$ours_writes writes/$N apps (apiserver_request_total, all clients: $api_writes)" "$peer_writes writes (kubectl re-apply)" "$(calc "$ours_writes / $peer_writes")"
line reconciler-reads-at-rest "$(printf %.3f "$(per_app_minute "$rest_reads")") reads/app/min" "$(printf %.3f "$(per_app_minute "$rest_api_reads")") API server reads/app/min (0.05 goal)" "$(calc "$(per_app_minute "$rest_reads") / 0.05")"
line reconciler-writes-at-rest "$rest_writes writes (goal 0)" "$background API server writes of those kinds, all clients" "$(calc "$rest_writes / $((background > 0 ? background : 1))")"
line reconciler-rss-vs-goal "$rss MB" "40 MB (goal)" "$(calc "$rss / 40")"
line reconciler-rss-vs-kube-scheduler "$rss MB" "$rss_sched MB (kube-scheduler)" "$(calc "$rss / $rss_sched")"
# What ran while the apps existed (the plugin bench), after our own lines.
[[ ! -s $WORK/with-apps.out ]] || cat "$WORK/with-apps.out"
