#!/usr/bin/env bash
# Two real nodes: `e2e/cluster add-node` starts a second kubelet, with its own containerd,
# bridge and cgroup root, beside the first. Pods scheduled there run for real, so these
# tests see where the reconciler, the app and its mover Jobs actually run. Both nodes share
# this machine's filesystem: where data lives is checked through the API (a volume's node
# affinity, a pod's nodeName), its content through the files.
set -uo pipefail
E2E_SUITE=multinode
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/hs.sh"

NODE_A=hellostateful-node
NODE_B=hellostateful-node-b
LOCAL_CLASS=unset # each test's own: see local_class
LOCAL_ROOT=/tmp/hs-e2e-local

node_of_pod() { kubectl -n "$1" get pod "$2" -o jsonpath='{.spec.nodeName}' 2>/dev/null; }
# nodes_of_movers NS NAME COMPONENT: the nodes the app's backup or restore pods ran on
nodes_of_movers() {
  kubectl -n "$1" get pods -l "app.kubernetes.io/instance=$2,app.kubernetes.io/component=$3" \
    -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort -u
}
reconciler_node() {
  kubectl -n "$RECONCILER_NS" get pods -l app.kubernetes.io/component=reconciler \
    --field-selector=status.phase=Running -o jsonpath='{.items[*].spec.nodeName}'
}

# move_reconciler_to NODE: its pod made again on NODE (the other node cordoned meanwhile).
move_reconciler_to() {
  local other=$NODE_A
  [[ $1 == "$NODE_A" ]] && other=$NODE_B
  [[ $(reconciler_node) == "$1" ]] && return 0
  kubectl cordon "$other" >/dev/null
  kubectl -n "$RECONCILER_NS" delete pods -l app.kubernetes.io/component=reconciler --wait=false >/dev/null
  wait_for "the reconciler running on $1" 120 bash -c "[[ \$(kubectl -n $RECONCILER_NS get pods -l app.kubernetes.io/component=reconciler -o jsonpath='{.items[*].spec.nodeName}') == '$1' ]]"
  local moved=$?
  kubectl uncordon "$other" >/dev/null
  ((moved == 0)) && kubectl -n "$RECONCILER_NS" rollout status deployment/hellostateful-reconciler --timeout=120s >/dev/null
}

setup() {
  "$E2E_ROOT/e2e/cluster" add-node || return 1
}
teardown() {
  kubectl uncordon "$NODE_A" "$NODE_B" >/dev/null 2>&1
  move_reconciler_to "$NODE_A" >/dev/null 2>&1
  kubectl delete storageclass -l hellostateful-e2e=local --ignore-not-found >/dev/null 2>&1
  "$E2E_ROOT/e2e/cluster" remove-node
  rm -rf "$LOCAL_ROOT"
}

# The first node cordoned: the reconciler itself, the app, its data and every mover Job run
# on the second; an app deleted and created again is restored there, on its backups' node,
# even once the first node takes pods again.
test_the_whole_job_runs_on_the_second_node() {
  local ns
  ns=$(new_ns second)
  # The app's data is on the second node: it must take pods while the app is deleted.
  trap "kubectl uncordon '$NODE_A' >/dev/null 2>&1; cleanup_ns '$ns'; move_reconciler_to '$NODE_A' >/dev/null 2>&1" EXIT
  move_reconciler_to "$NODE_B"
  kubectl cordon "$NODE_A" >/dev/null
  app_yaml web '{"replicas": 2, "restoreFromExisting": true, "backupSchedule": "0 0 1 1 *"}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "web Ready" 180 app_ready "$ns" web || { on_fail "$ns"; return 1; }
  [[ $(jp "$ns" web '{.status.nodeName}') == "$NODE_B" && $(pinned_node "$ns" web) == "$NODE_B" ]]
  [[ $(node_of_pod "$ns" web-0) == "$NODE_B" && $(node_of_pod "$ns" web-1) == "$NODE_B" ]]
  wait_for "web-1 wrote" 60 lines_at_least "$(host_log "$ns" web 1)" 2
  "$HS_PLUGIN" -n "$ns" backup web --timeout 3m || { on_fail "$ns"; return 1; }
  [[ $(nodes_of_movers "$ns" web backup) == "$NODE_B" ]]
  local first_line id
  first_line=$(head -n1 "$(host_log "$ns" web 1)")
  id=$(backups_of "$ns" web | tail -n1)
  echo "data" >"$(data_dir "$ns" web 0)/after-backup"
  "$HS_PLUGIN" -n "$ns" restore web --from "$id" --yes --timeout 3m || { on_fail "$ns"; return 1; }
  [[ $(nodes_of_movers "$ns" web restore) == "$NODE_B" ]]
  [[ ! -e $(data_dir "$ns" web 0)/after-backup ]]

  # Deleted, then made again with both nodes open: restored on the node of its backups.
  kubectl -n "$ns" delete hellostateful web --wait=true --timeout=120s >/dev/null
  kubectl uncordon "$NODE_A" >/dev/null
  app_yaml web '{"replicas": 2, "restoreFromExisting": true, "backupSchedule": "0 0 1 1 *"}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "web Ready again" 180 app_ready "$ns" web || { on_fail "$ns"; return 1; }
  [[ $(jp "$ns" web '{.status.isRestored}') == true && $(pinned_node "$ns" web) == "$NODE_B" ]]
  [[ $(node_of_pod "$ns" web-1) == "$NODE_B" && $(nodes_of_movers "$ns" web restore) == "$NODE_B" ]]
  [[ $(head -n1 "$(host_log "$ns" web 1)") == "$first_line" ]]
  # One wipe Job pod for the one deletion: no pass cleaned it up again from a store that had
  # not yet heard the app was gone (that Job's pod would wait for claims that now belong
  # to the new app, and the new app for that pass).
  local wipes
  wipes=$(kubectl -n "$ns" get events --field-selector reason=SuccessfulCreate \
    -o jsonpath='{range .items[*]}{.involvedObject.name}{"\n"}{end}' | grep -c '^wipe-')
  [[ $wipes == 1 ]] || { echo "wipe pods made: $wipes"; return 1; }
}

# A cordoned node still runs its apps, and their data is there only: backups of it go on
# there. A restore, which stops the app, waits until the node takes pods again (the app could
# not start again there before), with the app running and the request saying why.
test_a_cordoned_node_keeps_its_backups_and_holds_a_restore_back() {
  local ns pod_uid
  ns=$(new_ns cordon)
  trap "kubectl uncordon '$NODE_B' >/dev/null 2>&1; cleanup_ns '$ns'" EXIT
  app_yaml web "{\"replicas\": 1, \"nodeSelector\": {\"kubernetes.io/hostname\": \"$NODE_B\"}}" | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "web Ready" 120 app_ready "$ns" web || { on_fail "$ns"; return 1; }
  [[ $(pinned_node "$ns" web) == "$NODE_B" ]]
  wait_for "web wrote" 60 lines_at_least "$(host_log "$ns" web 0)" 1
  kubectl cordon "$NODE_B" >/dev/null
  "$HS_PLUGIN" -n "$ns" backup web --timeout 3m || { on_fail "$ns"; return 1; }
  [[ $(nodes_of_movers "$ns" web backup) == "$NODE_B" ]]
  pod_uid=$(kubectl -n "$ns" get pod web-0 -o jsonpath='{.metadata.uid}')
  "$HS_PLUGIN" -n "$ns" restore web --from latest --yes --wait=false >/dev/null
  wait_for "the restore held back" 60 bash -c "[[ \$(kubectl -n '$ns' get hellostateful web -o jsonpath='{.status.restoreRequest.message}') == *'node $NODE_B, cordoned'* ]]" || { on_fail "$ns"; return 1; }
  echo "status: $(jp "$ns" web '{.status.restoreRequest.message}')"
  [[ $(jp "$ns" web '{.status.restoreRequest.phase}') == Pending && $(kubectl -n "$ns" get pod web-0 -o jsonpath='{.metadata.uid}') == "$pod_uid" ]]
  app_ready "$ns" web
  kubectl uncordon "$NODE_B" >/dev/null
  wait_for "the restore done" 120 bash -c "[[ \$(kubectl -n '$ns' get hellostateful web -o jsonpath='{.status.restoreRequest.phase}') == Succeeded ]]" || { on_fail "$ns"; return 1; }
  wait_for "web Ready after the restore" 120 app_ready "$ns" web || { on_fail "$ns"; return 1; }
}

# local_volume NS NAME NODE [CLAIM]: a `local` PersistentVolume hs-e2e-NS-NAME of the test
# class on NODE for the test of namespace NS (kept for its CLAIM if given).
local_volume() {
  local ns=$1 name=hs-e2e-$1-$2 claim_ref=""
  [[ -z ${4:-} ]] || claim_ref="claimRef: {namespace: $ns, name: $4}"
  mkdir -p "$LOCAL_ROOT/$name"
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: PersistentVolume
metadata: {name: $name, labels: {hellostateful-e2e: local, hellostateful-e2e-test: $ns}}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Delete
  storageClassName: $LOCAL_CLASS
  local: {path: $LOCAL_ROOT/$name}
  $claim_ref
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$3]}]
EOF
}

# local_class NS: a StorageClass of node-local volumes for the test of namespace NS (its
# LOCAL_CLASS from then on), bound where their first pod is scheduled. Its own, so that
# tests side by side never bind each other's volumes.
local_class() {
  LOCAL_CLASS=hs-e2e-local-$1
  kubectl apply -f - >/dev/null <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: $LOCAL_CLASS, labels: {hellostateful-e2e: local}}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
EOF
}

# store_in_bucket NS PREFIX: the object store up, its bucket tenant-a, NS's local class and
# the bucket's keys in NS (secret s3); sets `store` (the caller's local) to the app's
# objectStore under PREFIX.
store_in_bucket() {
  eval "$(e2e/objstore up)"
  e2e/objstore bucket tenant-a || return 1
  local_class "$1"
  keys_secret "$1" s3 tenant-a tenant-a-secret
  store="{\"endpoint\": \"$HS_S3_ENDPOINT\", \"bucket\": \"tenant-a\", \"prefix\": \"$2\", \"credentialsSecret\": \"s3\", \"insecure\": true}"
}

# spread_app NS TARGET-JSON [MORE-SPEC-MEMBERS]: app web, 2 replicas on node-local volumes,
# one on each node, backed up to TARGET; Ready, with a replica on each node.
spread_app() {
  local ns=$1 target=$2 more=${3:-}
  local_volume "$ns" a "$NODE_A"
  local_volume "$ns" b "$NODE_B"
  app_yaml web "{\"replicas\": 2, \"restoreFromExisting\": false, $more\"storage\": {\"storageClassName\": \"$LOCAL_CLASS\"}, \"backup\": {\"target\": $target}}" |
    kubectl -n "$ns" apply -f - >/dev/null
  wait_for "web Ready" 180 app_ready "$ns" web || { on_fail "$ns"; return 1; }
  local nodes
  nodes=$(printf '%s\n' "$(node_of_pod "$ns" web-0)" "$(node_of_pod "$ns" web-1)" | sort | tr '\n' ' ')
  [[ $nodes == "$NODE_A $NODE_B " ]] || { echo "replicas on: $nodes"; return 1; }
}

# app_on_new_volumes NS NAME RESTORE-MEMBER STORE N: app NAME, 2 replicas on two new
# node-local volumes (aN on one node, bN on the other), backed up to object store STORE,
# made with RESTORE-MEMBER in its spec.
app_on_new_volumes() {
  local ns=$1 name=$2 restore=$3 store=$4 n=$5
  local_volume "$ns" a$n "$NODE_A"
  local_volume "$ns" b$n "$NODE_B"
  app_yaml "$name" "{\"replicas\": 2, $restore, \"storage\": {\"storageClassName\": \"$LOCAL_CLASS\"}, \"backup\": {\"target\": {\"objectStore\": $store}}}" |
    kubectl -n "$ns" apply -f - >/dev/null
}
# restored NS NAME N: app NAME Ready, restored before it started: each of its volumes aN and
# bN holds the marker as it was backed up.
restored() {
  local ns=$1 name=$2 n=$3 volume
  wait_for "$name Ready, restored" 180 app_ready "$ns" "$name" || { on_fail "$ns"; return 1; }
  [[ $(jp "$ns" "$name" '{.status.isRestored}') == true ]] || { echo "$name not restored"; return 1; }
  for volume in "a$n" "b$n"; do
    [[ $(cat "$LOCAL_ROOT/hs-e2e-$ns-$volume/marker" 2>&1) == "before the backup" ]] ||
      { echo "volume $volume: $(cat "$LOCAL_ROOT/hs-e2e-$ns-$volume/marker" 2>&1)"; on_fail "$ns"; return 1; }
  done
}
# restore_failed NS NAME: the app's restore before its first start failed.
restore_failed() {
  [[ $(jp "$1" "$2" '{.status.conditions[?(@.type=="Restoring")].reason}') == RestoreFailed ]]
}

# Dynamic volumes with backups in a node directory (the default target): the app's pods run
# on the backups' node, so its claims are bound there and every mover Job can mount them
# with the backup claim. Left to the scheduler, the app would go to the emptier node (the
# reconciler runs on the first), where no backup Job could reach its data.
test_dynamic_volumes_follow_node_directory_backups() {
  local ns
  ns=$(new_ns follow)
  trap "cleanup_ns '$ns'; kubectl delete pv -l hellostateful-e2e-test=$ns --wait=false >/dev/null 2>&1" EXIT
  local_class "$ns"
  local_volume "$ns" a "$NODE_A"
  local_volume "$ns" b "$NODE_B"
  app_yaml web "{\"replicas\": 1, \"restoreFromExisting\": true, \"storage\": {\"storageClassName\": \"$LOCAL_CLASS\"}}" |
    kubectl -n "$ns" apply -f - >/dev/null
  wait_for "web Ready" 180 app_ready "$ns" web || { on_fail "$ns"; return 1; }
  local node
  node=$(jp "$ns" web '{.status.nodeName}')
  [[ -n $node && $(node_of_pod "$ns" web-0) == "$node" ]] || { echo "backups on $node, web-0 on $(node_of_pod "$ns" web-0)"; return 1; }
  [[ $(kubectl -n "$ns" get statefulset web -o jsonpath='{.spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values[0]}') == "$node" ]]
  "$HS_PLUGIN" -n "$ns" backup web --timeout 3m || { on_fail "$ns"; return 1; }
  [[ $(nodes_of_movers "$ns" web backup) == "$node" ]]
}

# Replicas whose node-local claims are on two nodes, backups on a claim of the tenant's: one
# mover pod cannot mount them all, so a backup fails (after the settings' moverStartSeconds) with the
# scheduler's own reason, while the app keeps running on both nodes and its data is
# untouched. (A Job per replica would not help: the backup claim itself is on one node. An
# object store takes backups in parts: see the next test.)
test_replicas_on_two_nodes_run_and_a_backup_says_why_it_cannot() {
  local ns message
  ns=$(new_ns spread)
  trap "cleanup_ns '$ns'; kubectl delete pv -l hellostateful-e2e-test=$ns --wait=false >/dev/null 2>&1" EXIT
  local_class "$ns"
  local_volume "$ns" backups "$NODE_A" my-backups
  kubectl -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: my-backups}
spec: {accessModes: [ReadWriteOnce], storageClassName: $LOCAL_CLASS, resources: {requests: {storage: 1Gi}}}
EOF
  spread_app "$ns" '{"persistentVolumeClaim": "my-backups"}' || return 1
  echo "keep" >"$LOCAL_ROOT/hs-e2e-$ns-b/keep"
  if "$HS_PLUGIN" -n "$ns" backup web --timeout 3m; then
    echo "a backup of claims on two nodes succeeded in one pod"; return 1
  fi
  message=$(jp "$ns" web '{.status.backupRequest.message}')
  echo "status: $message"
  [[ $(jp "$ns" web '{.status.backupRequest.phase}') == Failed && $message == *"cannot start after ${E2E_MOVER_START_SECONDS:-60}s"*"Unschedulable"* ]]
  [[ $(kubectl -n "$ns" get pod web-0 web-1 -o jsonpath='{.items[*].status.phase}') == "Running Running" ]]
  [[ -f $LOCAL_ROOT/hs-e2e-$ns-b/keep ]]
  app_ready "$ns" web
}

# Replicas whose volumes are on two nodes, backed up to an object store: each volume by a Job
# on its own node, and the parts sealed into one snapshot by one more Job, on the schedule
# and on demand. The snapshot, read from the store, holds both replicas' logs. Restored the
# same way: each volume staged by a Job on its node, one Job commits, and a Job per volume
# swaps it in; both volumes are then as backed up, and the app runs on both nodes again.
# Restored again while one volume refuses the swap (an immutable file), the request withdrawn
# once its parts began: the other volume is swapped in, so the app stays stopped, never
# running on a mix, until a new request finishes the swap on that volume first. Deleted and made again (restoreFromExisting) on new volumes:
# restored in parts before it starts, each new claim bound where its part ran. A second app
# made from web's backup (restoreFrom) on two more volumes, one too small: fails, with the
# staging removed from the other; given room and asked again, restored in parts, its records
# kept with its own backups, none left behind under either app.
test_replicas_on_two_nodes_are_backed_up_and_restored_in_parts_through_an_object_store() {
  local ns
  ns=$(new_ns parts)
  trap "cleanup_ns '$ns'; kubectl delete pv -l hellostateful-e2e-test=$ns --wait=false >/dev/null 2>&1" EXIT
  local store
  store_in_bucket "$ns" multinode || return 1
  spread_app "$ns" "{\"objectStore\": $store}" '"backupSchedule": "* * * * *", ' || return 1
  wait_for "both replicas wrote" 60 bash -c "[[ -s $LOCAL_ROOT/hs-e2e-$ns-a/stateful.log && -s $LOCAL_ROOT/hs-e2e-$ns-b/stateful.log ]]"

  wait_for "a scheduled backup" 150 bash -c "[[ \$(kubectl -n $ns get hellostateful web -o jsonpath='{.status.lastBackup.job}') =~ ^backup-web-[0-9]+\$ ]]" ||
    { on_fail "$ns"; return 1; }
  kubectl -n "$ns" patch hellostateful web --type merge -p '{"spec": {"backupSchedule": "0 0 1 1 *"}}' >/dev/null
  local volume
  for volume in a b; do echo "before the backup" >"$LOCAL_ROOT/hs-e2e-$ns-$volume/marker"; done
  "$HS_PLUGIN" -n "$ns" backup web --timeout 3m || { on_fail "$ns"; return 1; }
  local set id ordinal
  set=$(jp "$ns" web '{.status.backupRequest.job}')
  id=$(jp "$ns" web '{.status.backupRequest.backupId}')
  # Each part ran where its replica's volume is; the seal made the one snapshot.
  for ordinal in 0 1; do
    [[ $(kubectl -n "$ns" get pods -l "batch.kubernetes.io/job-name=$set-$ordinal" -o jsonpath='{.items[*].spec.nodeName}') == \
      "$(node_of_pod "$ns" "web-$ordinal")" ]] || { echo "part $ordinal ran elsewhere"; on_fail "$ns"; return 1; }
  done
  [[ $(jp "$ns" web '{.status.lastBackup.id}') == "$id" ]]
  s3 GET "tenant-a/multinode/$ns/web/snapshots/$id.json" | python3 -c '
import json, sys
manifest = json.load(sys.stdin)
assert manifest["ordinals"] == [0, 1], manifest["ordinals"]
for replica in manifest["replicas"]:
    names = [e["path"] for e in replica["entries"]]
    assert "stateful.log" in names, (replica["ordinal"], names)
' || return 1
  [[ -z $(keys tenant-a "multinode/$ns/web/parts/") ]] || { echo "parts left after sealing"; return 1; }

  for volume in a b; do echo "after the backup" >"$LOCAL_ROOT/hs-e2e-$ns-$volume/marker"; done
  "$HS_PLUGIN" -n "$ns" restore web --from "$id" --yes --timeout 4m || { on_fail "$ns"; return 1; }
  local restore
  restore=$(jp "$ns" web '{.status.restoreRequest.job}')
  [[ $(jp "$ns" web '{.status.restoreRequest.backupId}') == "$id" ]]
  for volume in a b; do
    [[ $(cat "$LOCAL_ROOT/hs-e2e-$ns-$volume/marker") == "before the backup" ]] ||
      { echo "volume $volume: $(cat "$LOCAL_ROOT/hs-e2e-$ns-$volume/marker")"; on_fail "$ns"; return 1; }
  done
  wait_for "web Ready again" 120 app_ready "$ns" web || { on_fail "$ns"; return 1; }
  # Each replica's stage and swap ran where its volume is (its pod's node, before and after).
  for ordinal in 0 1; do
    local node
    node=$(node_of_pod "$ns" "web-$ordinal")
    for part in "$restore-$ordinal" "$restore-swap-$ordinal"; do
      [[ $(kubectl -n "$ns" get pods -l "batch.kubernetes.io/job-name=$part" -o jsonpath='{.items[*].spec.nodeName}') == "$node" ]] ||
        { echo "$part ran elsewhere than $node"; on_fail "$ns"; return 1; }
    done
  done
  [[ -z $(keys tenant-a "multinode/$ns/web/restores/") ]] || { echo "restore records left: $(keys tenant-a "multinode/$ns/web/restores/")"; return 1; }

  for volume in a b; do echo "after the backup" >"$LOCAL_ROOT/hs-e2e-$ns-$volume/marker"; done
  chattr +i "$LOCAL_ROOT/hs-e2e-$ns-b/marker"
  trap "chattr -i '$LOCAL_ROOT/hs-e2e-$ns-b/marker' 2>/dev/null; cleanup_ns '$ns'; kubectl delete pv -l hellostateful-e2e-test=$ns --wait=false >/dev/null 2>&1" EXIT
  local done_before
  done_before=$(jp "$ns" web '{.status.restoreRequest.job}')
  "$HS_PLUGIN" -n "$ns" restore web --from "$id" --yes --wait=false >/dev/null || return 1
  # Withdrawn once it began (its parts are made): still followed to its end, and the swap
  # that failed recorded, so that the app stays stopped.
  wait_for "the restore's parts" 120 bash -c "job=\$(kubectl -n $ns get hellostateful web -o jsonpath='{.status.restoreRequest.job}'); [[ -n \$job && \$job != $done_before ]] && kubectl -n $ns get job \$job-0 >/dev/null 2>&1" ||
    { on_fail "$ns"; return 1; }
  kubectl -n "$ns" annotate hellostateful web hello-stateful.example.com/restore-requested- >/dev/null
  wait_for "the withdrawn restore failed" 300 bash -c "[[ \$(kubectl -n $ns get hellostateful web -o jsonpath='{.status.restoreRequest.phase}') == Failed ]]" ||
    { on_fail "$ns"; return 1; }
  local message
  message=$(jp "$ns" web '{.status.restoreRequest.message}')
  echo "status: $message"
  [[ $message == *"interrupted while it replaced the live data"*"request the restore again"* ]] || return 1
  [[ $(cat "$LOCAL_ROOT/hs-e2e-$ns-a/marker") == "before the backup" ]] || { echo "volume a was not swapped"; return 1; }
  [[ $(kubectl -n "$ns" get statefulset web -o jsonpath='{.spec.replicas}') == 0 ]] || { echo "the app runs on a mix"; return 1; }
  chattr -i "$LOCAL_ROOT/hs-e2e-$ns-b/marker"
  "$HS_PLUGIN" -n "$ns" restore web --from "$id" --yes --timeout 4m || { on_fail "$ns"; return 1; }
  for volume in a b; do
    [[ $(cat "$LOCAL_ROOT/hs-e2e-$ns-$volume/marker") == "before the backup" ]] ||
      { echo "volume $volume: $(cat "$LOCAL_ROOT/hs-e2e-$ns-$volume/marker")"; on_fail "$ns"; return 1; }
  done
  wait_for "web Ready again" 120 app_ready "$ns" web || { on_fail "$ns"; return 1; }
  [[ -z $(keys tenant-a "multinode/$ns/web/restores/") ]] || { echo "restore records left: $(keys tenant-a "multinode/$ns/web/restores/")"; return 1; }

  kubectl -n "$ns" delete hellostateful web --timeout=120s >/dev/null || { on_fail "$ns"; return 1; }
  wait_for "web's claims gone" 60 bash -c "[[ -z \$(kubectl -n $ns get pvc -o name) ]]" || return 1
  app_on_new_volumes "$ns" web '"restoreFromExisting": true' "$store" 2
  restored "$ns" web 2 || return 1
  local parts
  parts=$(kubectl -n "$ns" get jobs -l "hello-stateful.example.com/action=created,hello-stateful.example.com/part-of" -o jsonpath='{range .items[*]}{.status.succeeded}{end}')
  [[ $parts == 1111 ]] || { echo "initial restore parts succeeded: '$parts' (want 4 stages and swaps)"; on_fail "$ns"; return 1; }

  # A second app made from web's backup (restoreFrom) on two more volumes, one of them too
  # small for it (a 4 KiB tmpfs): that part refuses at once, so the commit is refused, and
  # the other volume is rid of what it staged before the failure is reported.
  local small="$LOCAL_ROOT/hs-e2e-$ns-b3"
  mkdir -p "$small" && mount -t tmpfs -o size=4k tmpfs "$small" || return 1
  trap "umount -l '$small' 2>/dev/null || true; chattr -i '$LOCAL_ROOT/hs-e2e-$ns-b/marker' 2>/dev/null; cleanup_ns '$ns'; kubectl delete pv -l hellostateful-e2e-test=$ns --wait=false >/dev/null 2>&1" EXIT
  app_on_new_volumes "$ns" copy "\"restoreFrom\": {\"name\": \"web\", \"backupId\": \"$id\"}" "$store" 3
  wait_for "copy's restore failed" 180 restore_failed "$ns" copy || { on_fail "$ns"; return 1; }
  message=$(jp "$ns" copy '{.status.conditions[?(@.type=="Restoring")].message}')
  echo "status: $message"
  [[ $message == *"its part Job restore-copy-"*"not enough space"* ]] || return 1
  local left
  left=$(ls -A "$LOCAL_ROOT/hs-e2e-$ns-a3" | { grep -vx '.hellostateful-lock' || true; })
  [[ -z $left ]] || { echo "left on the volume that staged: $left"; return 1; }
  # An undo Job is made on every volume (each asks the store whether the set was committed);
  # at least one must have succeeded for the failure to be taken for a refusal.
  [[ $(kubectl -n "$ns" get jobs -o jsonpath='{range .items[*]}{.metadata.name}={.status.succeeded}{"\n"}{end}' | grep -cE '^restore-copy-[0-9a-f]+-undo-[01]=1$') -ge 1 ]] ||
    { echo "no undo Job succeeded"; on_fail "$ns"; return 1; }

  # Given room and asked again: restored in parts, its records kept with copy's own backups.
  umount -l "$small"
  "$HS_PLUGIN" -n "$ns" restore copy --yes --timeout 4m || { on_fail "$ns"; return 1; }
  restored "$ns" copy 3 || return 1
  local copy_nodes set
  copy_nodes=$(printf '%s\n' "$(node_of_pod "$ns" copy-0)" "$(node_of_pod "$ns" copy-1)" | sort | tr '\n' ' ')
  [[ $copy_nodes == "$NODE_A $NODE_B " ]] || { echo "copy's replicas on: $copy_nodes"; return 1; }
  set=$(jp "$ns" copy '{.status.restoreRequest.job}')
  [[ $(kubectl -n "$ns" get job "$set-0" "$set-1" "$set-swap-0" "$set-swap-1" -o jsonpath='{range .items[*]}{.status.succeeded}{end}') == 1111 ]] ||
    { echo "copy's restore parts: want 2 stages and 2 swaps succeeded"; on_fail "$ns"; return 1; }
  local records
  records=$(keys tenant-a "multinode/$ns/")
  records=$(grep '/restores/' <<<"$records" || true)
  [[ -z $records ]] || { echo "restore records left: $records"; return 1; }
}

# hold_pods_of_job NS JOB NAME: an admission policy NAME (a test's, not the product's) that
# refuses every pod of Job JOB in namespace NS, until deleted.
hold_pods_of_job() {
  kubectl apply -f - >/dev/null <<EOF
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: $3}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}
  validations:
    - expression: "!(has(object.metadata.labels) && object.metadata.labels.exists(k, k == 'batch.kubernetes.io/job-name' && object.metadata.labels[k] == '$2'))"
      message: "held by the test until its node is gone"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: $3}
spec:
  policyName: $3
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {kubernetes.io/metadata.name: $1}
EOF
}

# Node b removed for good while a restore in parts waits to swap its volume (the swap's pods
# held back by a test's admission policy until then; volume a swapped already): the app
# never runs on a mix of restored and old volumes, not after the restore fails, nor when it
# is asked again while the node is still gone; once a node of that name is back, the
# restore asked again finishes and the app runs restored on both volumes.
test_a_node_removed_while_a_restore_waits_to_swap_never_runs_the_app_on_a_mix() {
  local ns hold
  ns=$(new_ns swapgone)
  hold=hs-e2e-hold-$ns
  trap "kubectl delete validatingadmissionpolicybinding,validatingadmissionpolicy $hold --ignore-not-found >/dev/null 2>&1; cleanup_ns '$ns'; kubectl delete pv -l hellostateful-e2e-test=$ns --wait=false >/dev/null 2>&1" EXIT
  move_reconciler_to "$NODE_A" || return 1
  local store
  store_in_bucket "$ns" swapgone || return 1
  spread_app "$ns" "{\"objectStore\": $store}" || return 1
  local volume a=$LOCAL_ROOT/hs-e2e-$ns-a b=$LOCAL_ROOT/hs-e2e-$ns-b
  for volume in "$a" "$b"; do echo "before the backup" >"$volume/marker"; done
  "$HS_PLUGIN" -n "$ns" backup web --timeout 3m || { on_fail "$ns"; return 1; }
  local id
  id=$(jp "$ns" web '{.status.backupRequest.backupId}')
  for volume in "$a" "$b"; do echo "after the backup" >"$volume/marker"; done

  # The replica on node b (volume b).
  local on_b=0
  [[ $(node_of_pod "$ns" web-1) == "$NODE_B" ]] && on_b=1
  "$HS_PLUGIN" -n "$ns" restore web --from "$id" --yes --wait=false >/dev/null || return 1
  local set
  wait_for "the restore's set" 120 bash -c "[[ -n \$(kubectl -n $ns get hellostateful web -o jsonpath='{.status.restoreRequest.job}') ]]" ||
    { on_fail "$ns"; return 1; }
  set=$(jp "$ns" web '{.status.restoreRequest.job}')
  hold_pods_of_job "$ns" "$set-swap-$on_b" "$hold"
  wait_for "volume a swapped, volume b's swap waiting" 240 bash -c \
    "[[ \$(kubectl -n $ns get job $set-swap-$((1 - on_b)) -o jsonpath='{.status.succeeded}') == 1 ]] && kubectl -n $ns get job $set-swap-$on_b >/dev/null 2>&1" ||
    { on_fail "$ns"; return 1; }
  [[ $(cat "$a/marker") == "before the backup" && $(cat "$b/marker") == "after the backup" ]] ||
    { echo "markers: a $(cat "$a/marker"), b $(cat "$b/marker")"; return 1; }

  "$E2E_ROOT/e2e/cluster" remove-node || return 1
  kubectl delete validatingadmissionpolicybinding,validatingadmissionpolicy "$hold" >/dev/null
  wait_for "the restore failed" 300 bash -c "[[ \$(kubectl -n $ns get hellostateful web -o jsonpath='{.status.restoreRequest.phase}') == Failed ]]" ||
    { on_fail "$ns"; return 1; }
  echo "status: $(jp "$ns" web '{.status.restoreRequest.message}')"
  [[ $(kubectl -n "$ns" get statefulset web -o jsonpath='{.spec.replicas}') == 0 ]] || { echo "the app runs on a mix"; return 1; }

  # Asked again with the node still gone: acknowledged, and the app still stopped.
  local token
  token=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
  annotate "$ns" web "hello-stateful.example.com/restore-from=$id" "hello-stateful.example.com/restore-requested=$token"
  wait_for "the retry acknowledged" 180 bash -c "[[ \$(kubectl -n $ns get hellostateful web -o jsonpath='{.status.restoreRequest.token}') == '$token' ]]" ||
    { on_fail "$ns"; return 1; }
  echo "asked again with the node gone: $(jp "$ns" web '{.status.restoreRequest.phase}'): $(jp "$ns" web '{.status.restoreRequest.message}')"
  [[ $(kubectl -n "$ns" get statefulset web -o jsonpath='{.spec.replicas}') == 0 ]] || { echo "the app runs on a mix"; return 1; }
  [[ $(cat "$b/marker") == "after the backup" ]] || return 1

  # The node back (a node of that name registers again): asked once more, restored.
  "$E2E_ROOT/e2e/cluster" add-node || return 1
  "$HS_PLUGIN" -n "$ns" restore web --from "$id" --yes --timeout 5m || { on_fail "$ns"; return 1; }
  for volume in "$a" "$b"; do
    [[ $(cat "$volume/marker") == "before the backup" ]] || { echo "$volume: $(cat "$volume/marker")"; on_fail "$ns"; return 1; }
  done
  wait_for "web Ready again" 180 app_ready "$ns" web || { on_fail "$ns"; return 1; }
}

# A backup made while a restore in parts is under way (here one left unfinished midway,
# volume a swapped and volume b not: the swap on b held back by a test's admission policy
# until the reconciler stopped it; the backup's Job made from the app's CronJob as its
# schedule would): its parts are not made until the restore ended, else they would read
# that mix and seal it as the newest backup; one asked for meanwhile says it waits (before,
# it was made at once). Once the restore asked again ended, both run.
test_a_backup_made_while_a_restore_is_under_way_waits_for_it() {
  local ns hold
  ns=$(new_ns beside)
  hold=hs-e2e-hold-$ns
  trap "kubectl delete validatingadmissionpolicybinding,validatingadmissionpolicy $hold --ignore-not-found >/dev/null 2>&1; cleanup_ns '$ns'; kubectl delete pv -l hellostateful-e2e-test=$ns --wait=false >/dev/null 2>&1" EXIT
  local store
  store_in_bucket "$ns" beside || return 1
  spread_app "$ns" "{\"objectStore\": $store}" '"backupSchedule": "0 0 1 1 *", ' || return 1
  local volume a=$LOCAL_ROOT/hs-e2e-$ns-a b=$LOCAL_ROOT/hs-e2e-$ns-b
  for volume in "$a" "$b"; do echo "before the backup" >"$volume/marker"; done
  "$HS_PLUGIN" -n "$ns" backup web --timeout 3m || { on_fail "$ns"; return 1; }
  local id on_b=0 set
  id=$(jp "$ns" web '{.status.backupRequest.backupId}')
  for volume in "$a" "$b"; do echo "after the backup" >"$volume/marker"; done
  [[ $(node_of_pod "$ns" web-1) == "$NODE_B" ]] && on_b=1
  "$HS_PLUGIN" -n "$ns" restore web --from "$id" --yes --wait=false >/dev/null || return 1
  wait_for "the restore's set" 120 bash -c "[[ -n \$(kubectl -n $ns get hellostateful web -o jsonpath='{.status.restoreRequest.job}') ]]" ||
    { on_fail "$ns"; return 1; }
  set=$(jp "$ns" web '{.status.restoreRequest.job}')
  hold_pods_of_job "$ns" "$set-swap-$on_b" "$hold"
  wait_for "the restore left unfinished" 300 bash -c "[[ \$(kubectl -n $ns get hellostateful web -o jsonpath='{.status.restoreRequest.phase}') == Failed ]]" ||
    { on_fail "$ns"; return 1; }
  [[ $(cat "$a/marker") == "before the backup" && $(cat "$b/marker") == "after the backup" ]] ||
    { echo "markers: a $(cat "$a/marker"), b $(cat "$b/marker")"; return 1; }

  kubectl -n "$ns" create job --from=cronjob/backup-web backup-web-beside >/dev/null || return 1
  # A pass that saw it: one that answers a backup asked for after it was made.
  local token
  token=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
  annotate "$ns" web "hello-stateful.example.com/backup-requested=$token"
  wait_for "the backup request answered" 120 bash -c "[[ \$(kubectl -n $ns get hellostateful web -o jsonpath='{.status.backupRequest.token}') == '$token' ]]" ||
    { on_fail "$ns"; return 1; }
  local said
  said="$(jp "$ns" web '{.status.backupRequest.phase}'): $(jp "$ns" web '{.status.backupRequest.message}')"
  echo "backup asked meanwhile: $said"
  [[ $said == "Pending: waiting for the restore to finish" ]] || { on_fail "$ns"; return 1; }
  local parts
  parts=$(kubectl -n "$ns" get jobs -l hello-stateful.example.com/part-of=backup-web-beside -o name)
  [[ -z $parts ]] || { echo "backup parts made on the unfinished restore's volumes: $parts"; on_fail "$ns"; return 1; }
  [[ $(kubectl -n "$ns" get job backup-web-beside -o jsonpath='{.spec.suspend}') == true ]] || return 1

  kubectl delete validatingadmissionpolicybinding,validatingadmissionpolicy "$hold" >/dev/null
  "$HS_PLUGIN" -n "$ns" restore web --from "$id" --yes --timeout 5m || { on_fail "$ns"; return 1; }
  for volume in "$a" "$b"; do
    [[ $(cat "$volume/marker") == "before the backup" ]] || { echo "$volume: $(cat "$volume/marker")"; on_fail "$ns"; return 1; }
  done
  kubectl -n "$ns" wait --for=condition=complete job/backup-web-beside --timeout=300s >/dev/null || { on_fail "$ns"; return 1; }
  # Its parts were made once the restore asked again had swapped in the last volume.
  local swapped made ordinal
  set=$(jp "$ns" web '{.status.restoreRequest.job}')
  swapped=$(kubectl -n "$ns" get job "$set-swap-$on_b" -o jsonpath='{.status.completionTime}')
  for ordinal in 0 1; do
    made=$(kubectl -n "$ns" get job "backup-web-beside-$ordinal" -o jsonpath='{.metadata.creationTimestamp}')
    [[ -n $swapped && ! $made < $swapped ]] || { echo "part $ordinal made at $made, the swap ended at $swapped"; return 1; }
  done
  [[ $(kubectl -n "$ns" get job backup-web-beside -o jsonpath='{.metadata.annotations.hello-stateful\.example\.com/parts-begun}') == true ]] || return 1
  wait_for "the backup asked meanwhile ran after the restore" 300 bash -c \
    "[[ \$(kubectl -n $ns get hellostateful web -o jsonpath='{.status.backupRequest.phase}') == Succeeded ]]" || { on_fail "$ns"; return 1; }
}

# deletion_waits_for_pod_of_gone_node NS NAME POD: status says deletion waits for POD, and
# what to do if its node is gone.
deletion_waits_for_pod_of_gone_node() {
  local message
  message=$(jp "$1" "$2" '{.status.conditions[?(@.type=="Ready")].message}')
  [[ $message == "deletion waits for "*"pod $3"*"a node that is gone for good"* ]] || { echo "Ready: $message"; return 1; }
}

# Node b removed for good (its kubelet stopped, its Node object deleted) under an app whose
# data is there: deletion says meanwhile what it waits for, and ends by itself once the
# cluster gives up the gone node's pods (the pod garbage collector deletes them), without a
# wipe Job that could never run there; the event says the data was left, under a directory
# named by the deleted app's uid that no later app is given. Its backups, asked to be deleted
# with it, are on that node too: no purge Job is waited for either (found by the deletion's
# model, `reconciler/src/deletion_model.rs`). Last, as the node stays gone.
test_deleting_an_app_whose_node_is_gone_for_good_ends_and_says_what_it_waits_for() {
  local ns
  ns=$(new_ns gone)
  trap "cleanup_ns '$ns'" EXIT
  move_reconciler_to "$NODE_A" || return 1
  app_yaml web "{\"replicas\": 1, \"backupSchedule\": \"0 0 1 1 *\", \"nodeSelector\": {\"kubernetes.io/hostname\": \"$NODE_B\"}}" |
    kubectl -n "$ns" apply -f - >/dev/null
  wait_for "web Ready" 180 app_ready "$ns" web || { on_fail "$ns"; return 1; }
  [[ $(pinned_node "$ns" web) == "$NODE_B" && $(node_of_pod "$ns" web-0) == "$NODE_B" ]] ||
    { echo "web is not on $NODE_B"; on_fail "$ns"; return 1; }
  local live
  live=$(data_dir "$ns" web 0)
  wait_for "web-0 wrote" 60 lines_at_least "$live/stateful.log" 1 || return 1

  # Its backups, on node b too, are to be deleted with it: no purge Job can run there now.
  [[ $(kubectl get pv -l hello-stateful.example.com/namespace="$ns",app.kubernetes.io/component=backup \
    -o jsonpath='{.items[*].spec.nodeAffinity.required.nodeSelectorTerms[*].matchExpressions[*].values[*]}') == "$NODE_B" ]] ||
    { echo "web's backup volume is not on $NODE_B"; kubectl get pv -o wide; return 1; }
  kubectl -n "$ns" annotate hellostateful web hello-stateful.example.com/delete-backups=true >/dev/null

  "$E2E_ROOT/e2e/cluster" remove-node || return 1
  local gone=$SECONDS
  kubectl -n "$ns" delete hellostateful web --wait=false >/dev/null
  wait_for "deletion saying it waits for web-0" 60 deletion_waits_for_pod_of_gone_node "$ns" web web-0 ||
    { on_fail "$ns"; return 1; }
  wait_for "web deleted" 300 bash -c "! kubectl -n $ns get hellostateful web >/dev/null 2>&1" ||
    { on_fail "$ns"; return 1; }
  echo "deleted $((SECONDS - gone)) s after its node was"
  local skipped
  skipped=$(kubectl -n "$ns" get events --field-selector reason=WipeSkipped -o jsonpath='{.items[*].message}')
  echo "event: $skipped"
  [[ $skipped == *"its node $NODE_B is gone"* ]] || return 1
  skipped=$(kubectl -n "$ns" get events --field-selector reason=PurgeSkipped -o jsonpath='{.items[*].message}')
  echo "event: $skipped"
  [[ $skipped == *"backups not deleted: their node $NODE_B is gone"* ]] || return 1
  [[ -z $(kubectl -n "$ns" get jobs -o name) ]] || { echo "Jobs made for a gone node: $(kubectl -n "$ns" get jobs -o name)"; return 1; }
  if kubectl get pv "hellostateful.$ns.web.0" >/dev/null 2>&1; then echo "web's volume was not released"; return 1; fi
  [[ -s $live/stateful.log ]] || { echo "the data was not left in $live"; return 1; }
}

trap teardown EXIT
setup || { echo "multinode: 0 passed, 1 failed"; exit 1; }
run_test the_whole_job_runs_on_the_second_node test_the_whole_job_runs_on_the_second_node
run_test a_cordoned_node_keeps_its_backups_and_holds_a_restore_back test_a_cordoned_node_keeps_its_backups_and_holds_a_restore_back
# The tests above cordon a node; those below need both schedulable and share nothing else
# (each its own namespace and volumes), so the longest runs beside the other two.
beside run_test replicas_on_two_nodes_are_backed_up_and_restored_in_parts_through_an_object_store test_replicas_on_two_nodes_are_backed_up_and_restored_in_parts_through_an_object_store
run_test dynamic_volumes_follow_node_directory_backups test_dynamic_volumes_follow_node_directory_backups
run_test replicas_on_two_nodes_run_and_a_backup_says_why_it_cannot test_replicas_on_two_nodes_run_and_a_backup_says_why_it_cannot
run_test a_backup_made_while_a_restore_is_under_way_waits_for_it test_a_backup_made_while_a_restore_is_under_way_waits_for_it
wait_beside
# Last: these remove the second node (the first adds it back).
run_test a_node_removed_while_a_restore_waits_to_swap_never_runs_the_app_on_a_mix test_a_node_removed_while_a_restore_waits_to_swap_never_runs_the_app_on_a_mix
run_test deleting_an_app_whose_node_is_gone_for_good_ends_and_says_what_it_waits_for test_deleting_an_app_whose_node_is_gone_for_good_ends_and_says_what_it_waits_for
summary
