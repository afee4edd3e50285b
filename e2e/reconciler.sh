#!/usr/bin/env bash
# Integration tests of the reconciler on the real cluster, with the reconciler running
# in-cluster from manifests/ (so its RBAC is exercised too). Run by e2e/run-all.
set -uo pipefail
E2E_SUITE=reconciler
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/hs.sh"

NS=$(new_ns rec)
APP=minikube-hello-stateful
trap 'cleanup_ns "$NS"' EXIT

test_seed_manifest_makes_every_child_and_the_app_writes() {
  app_yaml "$APP" | kubectl -n "$NS" apply -f - >/dev/null
  wait_for "app Ready" 180 app_ready "$NS" "$APP" || { on_fail "$NS"; return 1; }
  kubectl -n "$NS" get statefulset "$APP" >/dev/null
  [[ $(kubectl -n "$NS" get service "$APP" -o jsonpath='{.spec.clusterIP}') == None ]]
  [[ $(kubectl -n "$NS" get pvc "data-$APP-0" -o jsonpath='{.status.phase}') == Bound ]]
  local pv="hellostateful.$NS.$APP.0"
  [[ $(kubectl get pv "$pv" -o jsonpath='{.spec.persistentVolumeReclaimPolicy}') == Retain ]]
  [[ $(kubectl get pv "$pv" -o jsonpath='{.spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values[0]}') == hellostateful-node ]]
  [[ $(kubectl -n "$NS" get cronjob "backup-$APP" -o jsonpath='{.spec.schedule}') == '*/5 * * * *' ]]
  [[ $(kubectl -n "$NS" get statefulset "$APP" -o jsonpath='{.metadata.ownerReferences[0].kind}') == HelloStateful ]]
  [[ $(kubectl -n "$NS" get statefulset "$APP" -o jsonpath='{.metadata.labels.app\.kubernetes\.io/managed-by}') == hellostateful-reconciler ]]
  # The app really writes, into its own volume on the node.
  wait_for "two log lines on the node" 60 lines_at_least "$(host_log "$NS" "$APP" 0)" 2
  [[ $(jp "$NS" "$APP" '{.status.backendVolumes[0]}') == "data-$APP-0" ]]
  [[ $(jp "$NS" "$APP" '{.status.isRestored}') == false ]]
  # restoreFromExisting without any backup: started fresh, and said so.
  [[ $(jp "$NS" "$APP" '{.status.conditions[?(@.type=="Restoring")].reason}') == NoBackup ]]
  has_event "$NS" NoBackup
  [[ $(jp "$NS" "$APP" '{.status.observedGeneration}') == $(jp "$NS" "$APP" '{.metadata.generation}') ]]
}

test_an_unchanged_app_causes_no_write() {
  wait_for "app Ready" 60 app_ready "$NS" "$APP"
  local writes reconciles status
  writes=$(reconciler_metric hellostateful_child_writes)
  reconciles=$(reconciler_metric hellostateful_reconciles)
  status=$(kubectl -n "$NS" get hellostateful "$APP" -o jsonpath='{.status}')
  # A change of an annotation the reconciler reads triggers a pass, like a resync would
  # (others' annotations are not even kept by the reconciler); this one changes nothing now.
  annotate "$NS" "$APP" "hello-stateful.example.com/delete-backups=false"
  wait_for "a reconcile pass" 30 metric_above hellostateful_reconciles "$reconciles"
  [[ $(reconciler_metric hellostateful_child_writes) == "$writes" ]] || { echo "children were written"; return 1; }
  [[ $(kubectl -n "$NS" get hellostateful "$APP" -o jsonpath='{.status}') == "$status" ]] || { echo "status was rewritten"; return 1; }
}

test_two_replicas_get_two_volumes() {
  kubectl -n "$NS" patch hellostateful "$APP" --type merge -p '{"spec":{"replicas":2}}' >/dev/null
  wait_for "second claim bound" 90 bash -c "[[ \$(kubectl -n '$NS' get pvc 'data-$APP-1' -o jsonpath='{.status.phase}') == Bound ]]" ||
    { on_fail "$NS"; return 1; }
  wait_for "replica 1 writes into its own volume" 90 lines_at_least "$(host_log "$NS" "$APP" 1)" 1 ||
    { on_fail "$NS"; return 1; }
  wait_for "app Ready with 2 replicas" 90 bash -c "[[ \$(kubectl -n '$NS' get hellostateful '$APP' -o jsonpath='{.status.readyReplicas}') == 2 ]]" ||
    { on_fail "$NS"; return 1; }
  [[ $(kubectl get pv "hellostateful.$NS.$APP.1" -o jsonpath='{.spec.claimRef.name}') == "data-$APP-1" ]]
  [[ $(jp "$NS" "$APP" '{.status.backendVolumes}') == "[\"data-$APP-0\",\"data-$APP-1\"]" ]]
}

test_a_storage_size_change_is_reported_not_claimed_applied() {
  kubectl -n "$NS" patch hellostateful "$APP" --type merge -p '{"spec":{"storage":{"size":"5Gi"}}}' >/dev/null
  wait_for "StorageApplied=False" 30 bash -c "[[ \$(kubectl -n '$NS' get hellostateful '$APP' -o jsonpath='{.status.conditions[?(@.type==\"StorageApplied\")].reason}') == StorageImmutable ]]"
  status_contains "$NS" "$APP" '{.status.conditions[?(@.type=="StorageApplied")].message}' "storage.size 5Gi (the volumes were made with 1Gi)"
  has_event "$NS" StorageImmutable
  [[ $(kubectl -n "$NS" get pvc "data-$APP-0" -o jsonpath='{.spec.resources.requests.storage}') == 1Gi ]]
  # Written another way, the same size is what the volumes have.
  kubectl -n "$NS" patch hellostateful "$APP" --type merge -p '{"spec":{"storage":{"size":"1024Mi"}}}' >/dev/null
  wait_for "StorageApplied=True" 30 bash -c "[[ \$(kubectl -n '$NS' get hellostateful '$APP' -o jsonpath='{.status.conditions[?(@.type==\"StorageApplied\")].status}') == True ]]"
}

test_schedule_changes_reach_the_cronjob() {
  kubectl -n "$NS" patch hellostateful "$APP" --type merge -p '{"spec":{"backupSchedule":"*/7 * * * *","backup":{"suspend":true}}}' >/dev/null
  wait_for "CronJob schedule updated" 30 bash -c "[[ \$(kubectl -n '$NS' get cronjob 'backup-$APP' -o jsonpath='{.spec.schedule}/{.spec.suspend}') == '*/7 * * * */true' ]]"
  # A hand edit of a child is corrected.
  kubectl -n "$NS" patch cronjob "backup-$APP" --type merge -p '{"spec":{"schedule":"0 0 * * *"}}' >/dev/null
  wait_for "hand edit corrected" 30 bash -c "[[ \$(kubectl -n '$NS' get cronjob 'backup-$APP' -o jsonpath='{.spec.schedule}') == '*/7 * * * *' ]]"
  kubectl -n "$NS" patch hellostateful "$APP" --type json -p '[{"op":"remove","path":"/spec/backupSchedule"}]' >/dev/null
  wait_for "CronJob removed with the schedule" 30 bash -c "! kubectl -n '$NS' get cronjob 'backup-$APP' >/dev/null 2>&1"
  # A hand-scaled StatefulSet goes back to the spec. (Down, not up: a StatefulSet scaled up
  # by hand makes claims of its own that nobody owns.)
  kubectl -n "$NS" scale statefulset "$APP" --replicas=1 >/dev/null
  wait_for "replicas back to 2" 30 bash -c "[[ \$(kubectl -n '$NS' get statefulset '$APP' -o jsonpath='{.spec.replicas}') == 2 ]]"
}

# Scaling down keeps the removed replica's volume with its data, and says so; scaling up
# again brings the replica back on it.
test_scaling_down_reports_the_kept_volume_and_scaling_up_reuses_it() {
  local log lines
  log=$(host_log "$NS" "$APP" 1)
  kubectl -n "$NS" patch hellostateful "$APP" --type merge -p '{"spec":{"replicas":1}}' >/dev/null
  wait_for "StorageApplied=False (volume kept)" 30 bash -c "[[ \$(kubectl -n '$NS' get hellostateful '$APP' -o jsonpath='{.status.conditions[?(@.type==\"StorageApplied\")].reason}') == RemovedReplicasVolumesKept ]]"
  status_contains "$NS" "$APP" '{.status.conditions[?(@.type=="StorageApplied")].message}' "PersistentVolumeClaims data-$APP-1"
  has_event "$NS" RemovedReplicasVolumesKept
  wait_for "replica 1 stopped" 60 bash -c "! kubectl -n '$NS' get pod '$APP-1' >/dev/null 2>&1"
  kubectl -n "$NS" get pvc "data-$APP-1" >/dev/null
  lines=$(wc -l <"$log")
  kubectl -n "$NS" patch hellostateful "$APP" --type merge -p '{"spec":{"replicas":2}}' >/dev/null
  wait_for "StorageApplied=True" 30 bash -c "[[ \$(kubectl -n '$NS' get hellostateful '$APP' -o jsonpath='{.status.conditions[?(@.type==\"StorageApplied\")].status}') == True ]]"
  wait_for "replica 1 writes on after its old lines" 90 lines_at_least "$log" $((lines + 1))
}

# What the CRD accepts, the API server accepts for every child made of it: each spec of
# e2e/children.yaml is dry-run created, and so is every child of those the CRD accepts.
test_the_api_server_accepts_the_children_of_whatever_the_crd_accepts() {
  local bin="${CARGO_TARGET_DIR:-$E2E_ROOT/target}/x86_64-unknown-linux-gnu/release/hellostateful-reconciler" out
  [[ -x $bin ]] || { echo "no reconciler binary at $bin: run e2e/build-image first"; return 1; }
  out=$("$bin" check-children "$E2E_ROOT/e2e/children.yaml" --namespace "$NS") || { echo "$out"; return 1; }
  echo "$out" | cut -c1-150
  # The edge cases land where they should: accepted whole, refused by the CRD up front, or
  # reported in status by the reconciler; never a child the API server refuses.
  local row
  for row in seed a2345678901234567890123456789012345678901234z macro-and-digest dynamic from-another \
    restricted placed none-running mount-with-colon claim-not-a-name serves-ports; do
    grep -q "^$row: accepted with its [0-9]* children$" <<<"$out" || { echo "$row was not accepted whole"; return 1; }
  done
  for row in class-not-a-name selector-not-a-label toleration-exists-with-value toleration-bad-effect \
    toleration-value-too-long command-too-long negative-user zero-size six-fields probe-with-host \
    probe-tcp-host host-port port-twice resource-claims; do
    grep -q "^$row: refused by the CRD: " <<<"$out" || { echo "the CRD did not refuse $row"; return 1; }
  done
  for row in minute-61 root-not-allowed selector-key-not-a-label; do
    grep -q "^$row: reported in status: " <<<"$out" || { echo "$row is not reported in status"; return 1; }
  done
  # Nothing was stored: it was all a dry run.
  [[ -z $(kubectl -n "$NS" get hellostateful seed --ignore-not-found -o name) ]]
}

test_on_demand_backup_is_acknowledged_with_an_id() {
  local token id snapshot
  token=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
  annotate "$NS" "$APP" "hello-stateful.example.com/backup-requested=$token"
  wait_for "backup acknowledged" 120 acknowledged "$NS" "$APP" backupRequest "$token" || { on_fail "$NS"; return 1; }
  [[ $(jp "$NS" "$APP" '{.status.backupRequest.phase}') == Succeeded ]] || { jp "$NS" "$APP" '{.status.backupRequest}'; return 1; }
  id=$(jp "$NS" "$APP" '{.status.backupRequest.backupId}')
  [[ -n $id ]]
  wait_for "lastBackup recorded" 30 bash -c "[[ \$(kubectl -n '$NS' get hellostateful '$APP' -o jsonpath='{.status.lastBackup.id}') == '$id' ]]"
  snapshot=$BACKUP_ROOT/$NS/$APP/$id
  [[ -f $snapshot/manifest.json && -f $snapshot/0/stateful.log && -f $snapshot/1/stateful.log ]]
  # The snapshot holds what the app wrote: the same first line as the live log.
  [[ $(head -n1 "$snapshot/0/stateful.log") == $(head -n1 "$(host_log "$NS" "$APP" 0)") ]]
  [[ $(jp "$NS" "$APP" '{.status.conditions[?(@.type=="BackupSucceeded")].status}') == True ]]
}

# backup.consistency.mode stop: the app is stopped for the copy and started again after.
# Its pods mark a clean shutdown on SIGTERM and clear the mark when they start, so a
# snapshot holding the mark was copied while the app was down, after it had stopped.
test_a_stop_mode_backup_copies_a_stopped_app_and_starts_it_again() {
  local app=still pod id snapshot
  app_yaml "$app" '{"replicas": 1, "backup": {"consistency": {"mode": "stop", "maxStopSeconds": 120}},
    "command": ["sh", "-c"],
    "args": ["cd /usr/share/hello && rm -f shutdown && trap \"echo stopped-cleanly > shutdown; exit 0\" TERM && while :; do date >> stateful.log; sleep 0.2 & wait $!; done"]}' |
    kubectl -n "$NS" apply -f - >/dev/null
  wait_for "app Ready" 120 app_ready "$NS" "$app" || { on_fail "$NS"; return 1; }
  pod=$(kubectl -n "$NS" get pod "$app-0" -o jsonpath='{.metadata.uid}')
  [[ $(request "$NS" "$app" backup) == Succeeded ]] || { on_fail "$NS"; return 1; }
  id=$(jp "$NS" "$app" '{.status.backupRequest.backupId}')
  snapshot=$BACKUP_ROOT/$NS/$app/$id
  [[ $(cat "$snapshot/0/shutdown") == stopped-cleanly ]] || { echo "no shutdown mark in $snapshot/0"; on_fail "$NS"; return 1; }
  [[ -s $snapshot/0/stateful.log ]]
  # Nothing changed while it was read (a live copy of this log would name it).
  [[ -z $(jp "$NS" "$app" '{.status.lastBackup.inconsistentFiles}') ]] || { jp "$NS" "$app" '{.status.lastBackup}'; return 1; }
  [[ $(jp "$NS" "$app" '{.status.conditions[?(@.type=="BackupSucceeded")].status}') == True ]]
  has_event "$NS" StoppedForBackup
  # It runs again, in a new pod that cleared the mark.
  wait_for "app Ready again" 120 app_ready "$NS" "$app" || { on_fail "$NS"; return 1; }
  [[ $(kubectl -n "$NS" get pod "$app-0" -o jsonpath='{.metadata.uid}') != "$pod" ]]
  wait_for "the new pod cleared the mark" 60 bash -c "[[ ! -e '$(data_dir "$NS" "$app" 0)/shutdown' ]]"
  [[ $(kubectl -n "$NS" get statefulset "$app" -o jsonpath='{.spec.replicas}') == 1 ]]
  kubectl -n "$NS" delete hellostateful "$app" --wait=true --timeout=60s >/dev/null
  [[ $(reconciler_restarts) == 0 ]]
}

# An app that runs as a non-root user on node-directory volumes (hostPath, which takes no
# fsGroup): its volumes are given to its user before its pods start, so it writes; and
# again after a restore, whose swap sets each volume root's owner as its snapshot says.
test_a_non_root_app_writes_into_volumes_given_to_its_user() {
  local app=nobody dir lines
  app_yaml "$app" '{"replicas": 1, "securityContext":
    {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000, "runAsNonRoot": true}}' |
    kubectl -n "$NS" apply -f - >/dev/null
  wait_for "app Ready" 120 app_ready "$NS" "$app" || { on_fail "$NS"; return 1; }
  dir=$(data_dir "$NS" "$app" 0)
  [[ $(stat -c '%u:%g %a' "$dir") == "1000:2000 2770" ]] || { stat "$dir"; return 1; }
  wait_for "the app writes" 60 lines_at_least "$dir/stateful.log" 1 || { on_fail "$NS"; return 1; }
  [[ $(stat -c '%u' "$dir/stateful.log") == 1000 ]]
  [[ $(kubectl -n "$NS" get statefulset "$app" -o jsonpath='{.metadata.annotations.hello-stateful\.example\.com/prepared}') == "1000:2000:2770/1" ]]
  [[ $(request "$NS" "$app" backup) == Succeeded ]] || { on_fail "$NS"; return 1; }
  [[ $(request "$NS" "$app" restore) == Succeeded ]] || { on_fail "$NS"; return 1; }
  wait_for "app Ready after the restore" 120 app_ready "$NS" "$app" || { on_fail "$NS"; return 1; }
  lines=$(wc -l <"$dir/stateful.log")
  wait_for "it writes on after the restore" 60 lines_at_least "$dir/stateful.log" $((lines + 1)) ||
    { stat "$dir" "$dir/stateful.log"; on_fail "$NS"; return 1; }
  kubectl -n "$NS" delete hellostateful "$app" --wait=true --timeout=60s >/dev/null
  [[ $(reconciler_restarts) == 0 ]]
}

test_delete_removes_children_wipes_live_data_and_keeps_backups() {
  local backups_before live
  backups_before=$(backups_of "$NS" "$APP")
  live=$(data_dir "$NS" "$APP" 0)
  [[ -f $live/stateful.log ]] || { echo "no live data in $live"; return 1; }
  kubectl -n "$NS" delete hellostateful "$APP" --wait=true --timeout=120s >/dev/null
  wait_for "StatefulSet gone" 60 bash -c "! kubectl -n '$NS' get statefulset '$APP' >/dev/null 2>&1"
  wait_for "data claims gone" 60 bash -c "[[ -z \$(kubectl -n '$NS' get pvc -l app.kubernetes.io/component=storage -o name) ]]"
  wait_for "data volumes released" 60 bash -c "[[ -z \$(kubectl get pv -l hello-stateful.example.com/namespace='$NS',app.kubernetes.io/component=storage -o name) ]]"
  # The live data is wiped; the backups, their claim and their volume stay.
  [[ -d $live && -z $(ls -A "$live") ]] || { echo "live data left in $live:"; ls -A "$live"; return 1; }
  [[ -n $backups_before && $(backups_of "$NS" "$APP") == "$backups_before" ]]
  [[ $(kubectl -n "$NS" get pvc "backups-$APP" -o jsonpath='{.status.phase}') == Bound ]]
  local volume
  volume=$(backup_volumes_of "$NS" "$APP")
  [[ -n $volume && -z $(kubectl get "$volume" -o jsonpath='{.metadata.deletionTimestamp}') ]]
}

test_invalid_specs_are_refused_with_clear_messages() {
  expect_fail "backupSchedule must be a cron schedule" kubectl -n "$NS" apply -f - <<<"$(app_yaml bad1 '{"backupSchedule": "every minute"}')"
  expect_fail "spec.replicas" kubectl -n "$NS" apply -f - <<<"$(app_yaml bad2 '{"replicas": -1}')"
  expect_fail "storage.size must be a quantity" kubectl -n "$NS" apply -f - <<<"$(app_yaml bad3 '{"storage": {"size": "1000Pi"}}')"
  expect_fail "at most 45 characters" kubectl -n "$NS" apply -f - <<<"$(app_yaml "$(printf 'a%.0s' {1..46})" '{}')"
  expect_fail "takes one of hostPath, persistentVolumeClaim or objectStore" kubectl -n "$NS" apply -f - <<<"$(app_yaml bad5 '{"backup": {"target": {"hostPath": "/tmp/x", "persistentVolumeClaim": "c"}}}')"
  # An object store's endpoint and prefix are a tenant's input to a privileged deputy.
  local store='"bucket": "b", "credentialsSecret": "s"'
  expect_fail "objectStore.endpoint must be http(s)://host[:port]" kubectl -n "$NS" apply -f - <<<"$(app_yaml bad7 "{\"backup\": {\"target\": {\"objectStore\": {\"endpoint\": \"file:///etc\", $store}}}}")"
  expect_fail "objectStore.prefix must be" kubectl -n "$NS" apply -f - <<<"$(app_yaml bad8 "{\"backup\": {\"target\": {\"objectStore\": {\"endpoint\": \"https://s3.example.com\", \"prefix\": \"../other-ns\", $store}}}}")"
  # What the schema cannot see is reported in status and an event, without a hot loop.
  app_yaml bad6 '{"backupSchedule": "61 * * * *"}' | kubectl -n "$NS" apply -f - >/dev/null
  wait_for "InvalidSpec in status" 30 bash -c "[[ \$(kubectl -n '$NS' get hellostateful bad6 -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].reason}') == InvalidSpec ]]"
  has_event "$NS" InvalidSpec
  if kubectl -n "$NS" get statefulset bad6 >/dev/null 2>&1; then echo "a StatefulSet was made for an invalid spec"; return 1; fi
  kubectl -n "$NS" delete hellostateful bad6 --wait=true --timeout=60s >/dev/null
  [[ $(reconciler_restarts) == 0 ]]
}

# A real service: the app's container takes the args, environment, ports, probes and
# resources of its spec (core/v1 types), and its Service exposes the ports.
test_an_app_serves_its_port_with_its_environment_probes_and_resources() {
  local app=web page writes reconciles
  kubectl -n "$NS" create configmap web-settings --from-literal=SUFFIX=from-a-configmap >/dev/null
  app_yaml "$app" '{"replicas": 1,
    "command": ["sh", "-c"],
    "args": ["echo \"$GREETING $POD $APP_SUFFIX\" > /usr/share/hello/index.html && exec httpd -f -p 8080 -h /usr/share/hello"],
    "env": [{"name": "GREETING", "value": "hello"}, {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
    "envFrom": [{"configMapRef": {"name": "web-settings"}, "prefix": "APP_"}],
    "ports": [{"name": "http", "containerPort": 8080}],
    "resources": {"requests": {"cpu": "0.05", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
    "readinessProbe": {"httpGet": {"path": "/index.html", "port": "http"}, "periodSeconds": 1},
    "livenessProbe": {"tcpSocket": {"port": 8080}},
    "startupProbe": {"exec": {"command": ["test", "-s", "/usr/share/hello/index.html"]}, "periodSeconds": 1}}' |
    kubectl -n "$NS" apply -f - >/dev/null
  # Ready only once the readiness probe reaches the server.
  wait_for "app Ready" 120 app_ready "$NS" "$app" || { on_fail "$NS"; return 1; }
  [[ $(kubectl -n "$NS" get service "$app" -o jsonpath='{.spec.ports[0].name}:{.spec.ports[0].port}') == http:8080 ]]
  page=$(kubectl -n "$NS" exec "$app-0" -- wget -qO- "http://$app-0.$app.$NS.svc:8080/index.html") ||
    { on_fail "$NS"; return 1; }
  [[ $page == "hello $app-0 from-a-configmap" ]] || { echo "served: $page"; return 1; }
  [[ $(kubectl -n "$NS" get pod "$app-0" -o jsonpath='{.spec.containers[0].resources.requests.cpu}') == 50m ]]
  # cpu 0.05 reads back as 50m, the same amount: no write on the next pass.
  writes=$(reconciler_metric hellostateful_child_writes)
  reconciles=$(reconciler_metric hellostateful_reconciles)
  annotate "$NS" "$app" "hello-stateful.example.com/delete-backups=false"
  wait_for "a reconcile pass" 30 metric_above hellostateful_reconciles "$reconciles"
  [[ $(reconciler_metric hellostateful_child_writes) == "$writes" ]] || { echo "children were written"; return 1; }
  # What only the API server checks of a container (here a quantity) is refused there and
  # said in status; the app serves on as it was.
  kubectl -n "$NS" patch hellostateful "$app" --type merge -p '{"spec":{"resources":{"requests":{"cpu":"lots"}}}}' >/dev/null
  wait_for "ChildRefused in status" 30 bash -c "[[ \$(kubectl -n '$NS' get hellostateful '$app' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].reason}') == ChildRefused ]]" ||
    { on_fail "$NS"; return 1; }
  status_contains "$NS" "$app" '{.status.conditions[?(@.type=="Ready")].message}' "quantities must match"
  [[ $(kubectl -n "$NS" get pod "$app-0" -o jsonpath='{.status.containerStatuses[0].ready}') == true ]]
  # A probe aimed at another host and a port of the node are refused by the CRD.
  expect_fail "a probe takes no host" kubectl -n "$NS" patch hellostateful "$app" --type merge \
    -p '{"spec":{"livenessProbe":{"tcpSocket":{"host":"10.0.0.1","port":10250}}}}'
  expect_fail "no hostPort or hostIP" kubectl -n "$NS" patch hellostateful "$app" --type merge \
    -p '{"spec":{"ports":[{"containerPort":8080,"hostPort":8080}]}}'
  kubectl -n "$NS" delete hellostateful "$app" --wait=true --timeout=60s >/dev/null
  [[ $(reconciler_restarts) == 0 ]]
}

run_test seed_manifest_makes_every_child_and_the_app_writes test_seed_manifest_makes_every_child_and_the_app_writes
run_test an_unchanged_app_causes_no_write test_an_unchanged_app_causes_no_write
run_test two_replicas_get_two_volumes test_two_replicas_get_two_volumes
run_test a_storage_size_change_is_reported_not_claimed_applied test_a_storage_size_change_is_reported_not_claimed_applied
run_test schedule_changes_reach_the_cronjob test_schedule_changes_reach_the_cronjob
run_test scaling_down_reports_the_kept_volume_and_scaling_up_reuses_it test_scaling_down_reports_the_kept_volume_and_scaling_up_reuses_it
run_test the_api_server_accepts_the_children_of_whatever_the_crd_accepts test_the_api_server_accepts_the_children_of_whatever_the_crd_accepts
run_test on_demand_backup_is_acknowledged_with_an_id test_on_demand_backup_is_acknowledged_with_an_id
run_test a_stop_mode_backup_copies_a_stopped_app_and_starts_it_again test_a_stop_mode_backup_copies_a_stopped_app_and_starts_it_again
run_test a_non_root_app_writes_into_volumes_given_to_its_user test_a_non_root_app_writes_into_volumes_given_to_its_user
run_test delete_removes_children_wipes_live_data_and_keeps_backups test_delete_removes_children_wipes_live_data_and_keeps_backups
run_test invalid_specs_are_refused_with_clear_messages test_invalid_specs_are_refused_with_clear_messages
run_test an_app_serves_its_port_with_its_environment_probes_and_resources test_an_app_serves_its_port_with_its_environment_probes_and_resources
summary
