#!/usr/bin/env bash
# End-to-end scenarios on the real cluster, asserted on file contents: the 2018
# walkthrough, on-demand backup and restore with the plugin, replicas, namespaces, faults,
# bad input and security. Each scenario has its own namespace and cleans up after itself.
set -uo pipefail
E2E_SUITE=scenarios
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/hs.sh"

plugin() { "$HS_PLUGIN" "$@"; }

# newest_backup NS NAME: the newest complete snapshot id.
newest_backup() { backups_of "$1" "$2" | tail -n1; }

# begins_with FILE PREFIX-FILE: FILE starts with every line of PREFIX-FILE.
begins_with() {
  local n
  n=$(wc -l <"$2")
  ((n > 0)) && cmp -s <(head -n "$n" "$1") "$2"
}


test_walkthrough_2018() {
  local ns snap first_lines job_done pod_created live
  ns=$(new_ns walk)
  trap "cleanup_ns '$ns'" EXIT
  local spec='{"replicas": 1, "restoreFromExisting": true, "backupSchedule": "*/1 * * * *"}'
  app_yaml hello "$spec" | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "the log grows" 90 lines_at_least "$(host_log "$ns" hello 0)" 3 || { on_fail "$ns"; return 1; }
  wait_for "a scheduled backup on the node" 150 has_backup "$ns" hello || { on_fail "$ns"; return 1; }
  snap=$BACKUP_ROOT/$ns/hello/$(newest_backup "$ns" hello)
  [[ $(head -n1 "$snap/0/stateful.log") == $(head -n1 "$(host_log "$ns" hello 0)") ]]
  wait_for "lastBackup in status" 60 bash -c "[[ -n \$(kubectl -n '$ns' get hellostateful hello -o jsonpath='{.status.lastBackup.id}') ]]"
  # Delete the app: the reconciler wipes its live data; create it again.
  live=$(data_dir "$ns" hello 0)
  kubectl -n "$ns" delete hellostateful hello --wait=true --timeout=120s >/dev/null
  [[ -d $live && -z $(ls -A "$live") ]] || { echo "live data not wiped in $live:"; ls -A "$live"; return 1; }
  snap=$BACKUP_ROOT/$ns/hello/$(newest_backup "$ns" hello)
  first_lines=$(mktemp)
  cp "$snap/0/stateful.log" "$first_lines"
  app_yaml hello "$spec" | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "restored app Ready" 180 app_ready "$ns" hello || { on_fail "$ns"; return 1; }
  wait_for "new lines after the restored ones" 60 lines_at_least "$(host_log "$ns" hello 0)" "$(($(wc -l <"$first_lines") + 1))"
  begins_with "$(host_log "$ns" hello 0)" "$first_lines" || { echo "log does not begin with the backed-up lines"; head "$(host_log "$ns" hello 0)"; return 1; }
  [[ $(jp "$ns" hello '{.status.isRestored}') == true ]]
  # No app pod existed while the restore Job ran.
  job_done=$(kubectl -n "$ns" get jobs -l app.kubernetes.io/component=restore -o jsonpath='{.items[0].status.completionTime}')
  pod_created=$(kubectl -n "$ns" get pod hello-0 -o jsonpath='{.metadata.creationTimestamp}')
  [[ -n $job_done && ! $pod_created < $job_done ]] || { echo "app pod created $pod_created, restore done $job_done"; return 1; }
  rm -f "$first_lines"
}

test_on_demand_backup_and_restore_with_the_plugin() {
  local ns first second older lines
  ns=$(new_ns plug)
  trap "cleanup_ns '$ns'" EXIT
  app_yaml od '{"replicas": 1}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "log lines" 90 lines_at_least "$(host_log "$ns" od 0)" 2 || { on_fail "$ns"; return 1; }
  plugin -n "$ns" backup od --wait --timeout 3m || { on_fail "$ns"; return 1; }
  first=$(jp "$ns" od '{.status.backupRequest.backupId}')
  [[ -n $first && -d $BACKUP_ROOT/$ns/od/$first ]]
  older=$(mktemp)
  cp "$BACKUP_ROOT/$ns/od/$first/0/stateful.log" "$older"
  lines=$(wc -l <"$(host_log "$ns" od 0)")
  wait_for "more lines" 60 lines_at_least "$(host_log "$ns" od 0)" $((lines + 1))
  plugin -n "$ns" backup od --wait --timeout 3m
  second=$(jp "$ns" od '{.status.backupRequest.backupId}')
  [[ -n $second && $second != "$first" ]]
  kubectl -n "$ns" exec od-0 -c app -- sh -c 'echo MARKER >> /usr/share/hello/stateful.log'
  grep -q MARKER "$(host_log "$ns" od 0)"
  local started=$EPOCHREALTIME
  plugin -n "$ns" restore od --from "$first" --yes --wait --timeout 4m || { on_fail "$ns"; return 1; }
  [[ $(jp "$ns" od '{.status.restoreRequest.backupId}') == "$first" ]]
  if grep -q MARKER "$(host_log "$ns" od 0)"; then echo "marker survived the restore"; return 1; fi
  begins_with "$(host_log "$ns" od 0)" "$older"
  wait_for "back at 1 ready replica" 120 app_ready "$ns" od
  echo "figure: restore request to app Ready with its data: $(awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')s"
  rm -f "$older"
}

test_two_replicas_restore_into_their_own_volumes() {
  local ns id
  ns=$(new_ns two)
  trap "cleanup_ns '$ns'" EXIT
  app_yaml two '{"replicas": 2}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "both replicas ready" 120 bash -c "[[ \$(kubectl -n '$ns' get hellostateful two -o jsonpath='{.status.readyReplicas}') == 2 ]]" || { on_fail "$ns"; return 1; }
  kubectl -n "$ns" exec two-0 -c app -- sh -c 'echo replica-0 > /usr/share/hello/who'
  kubectl -n "$ns" exec two-1 -c app -- sh -c 'echo replica-1 > /usr/share/hello/who'
  [[ $(request "$ns" two backup) == Succeeded ]]
  id=$(jp "$ns" two '{.status.backupRequest.backupId}')
  [[ $(cat "$BACKUP_ROOT/$ns/two/$id/0/who") == replica-0 && $(cat "$BACKUP_ROOT/$ns/two/$id/1/who") == replica-1 ]]
  kubectl -n "$ns" exec two-0 -c app -- sh -c 'echo overwritten > /usr/share/hello/who'
  kubectl -n "$ns" exec two-1 -c app -- sh -c 'echo overwritten > /usr/share/hello/who'
  [[ $(request "$ns" two restore "hello-stateful.example.com/restore-from=$id") == Succeeded ]]
  [[ $(cat "$(data_dir "$ns" two 0)/who") == replica-0 && $(cat "$(data_dir "$ns" two 1)/who") == replica-1 ]]
  wait_for "both replicas back" 120 bash -c "[[ \$(kubectl -n '$ns' get hellostateful two -o jsonpath='{.status.readyReplicas}') == 2 ]]"
}

test_same_name_in_two_namespaces_never_mixes() {
  local a b
  a=$(new_ns same-a)
  b=$(new_ns same-b)
  trap "cleanup_ns '$a'; cleanup_ns '$b'" EXIT
  for ns in "$a" "$b"; do app_yaml same '{"replicas": 1}' | kubectl -n "$ns" apply -f - >/dev/null; done
  for ns in "$a" "$b"; do
    wait_for "app in $ns ready" 120 app_ready "$ns" same || { on_fail "$ns"; return 1; }
    kubectl -n "$ns" exec same-0 -c app -- sh -c "echo $ns > /usr/share/hello/owner"
    [[ $(request "$ns" same backup) == Succeeded ]]
  done
  [[ $(kubectl get pv "hellostateful.$a.same.0" -o jsonpath='{.spec.hostPath.path}') != $(kubectl get pv "hellostateful.$b.same.0" -o jsonpath='{.spec.hostPath.path}') ]]
  [[ $(cat "$BACKUP_ROOT/$a/same/$(newest_backup "$a" same)/0/owner") == "$a" ]]
  [[ $(cat "$BACKUP_ROOT/$b/same/$(newest_backup "$b" same)/0/owner") == "$b" ]]
}

test_restore_survives_reconciler_kills() {
  local ns id token phase killed=0
  ns=$(new_ns kill)
  trap "cleanup_ns '$ns'" EXIT
  app_yaml crash '{"replicas": 1}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "app ready" 120 app_ready "$ns" crash || { on_fail "$ns"; return 1; }
  kubectl -n "$ns" exec crash-0 -c app -- sh -c 'echo before > /usr/share/hello/state'
  [[ $(request "$ns" crash backup) == Succeeded ]]
  id=$(jp "$ns" crash '{.status.backupRequest.backupId}')
  kubectl -n "$ns" exec crash-0 -c app -- sh -c 'echo after > /usr/share/hello/state'
  token=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
  annotate "$ns" crash "hello-stateful.example.com/restore-from=$id" "hello-stateful.example.com/restore-requested=$token"
  # Kill the reconciler once the app is scaled down, and again while the Job runs.
  for wanted in scaled-down job-running; do
    case $wanted in
      scaled-down) wait_for "scale-down" 60 bash -c "[[ \$(kubectl -n '$ns' get statefulset crash -o jsonpath='{.spec.replicas}') == 0 ]]" ;;
      job-running) wait_for "restore Job exists" 60 has_job "$ns" restore ;;
    esac
    kubectl -n "$RECONCILER_NS" delete pod -l app.kubernetes.io/component=reconciler --grace-period=0 --force >/dev/null 2>&1
    killed=$((killed + 1))
  done
  kubectl -n "$RECONCILER_NS" rollout status deployment/hellostateful-reconciler --timeout=120s >/dev/null
  wait_for "restore acknowledged after $killed kills" 180 acknowledged "$ns" crash restoreRequest "$token" || { on_fail "$ns"; return 1; }
  phase=$(jp "$ns" crash '{.status.restoreRequest.phase}')
  [[ $phase == Succeeded ]] || { jp "$ns" crash '{.status.restoreRequest}'; return 1; }
  [[ $(cat "$(data_dir "$ns" crash 0)/state") == before ]]
  wait_for "app back" 120 app_ready "$ns" crash
  [[ $(kubectl -n "$ns" get jobs -l app.kubernetes.io/component=restore -o name | wc -l) == 1 ]] || { echo "more than one restore Job"; return 1; }
}

test_full_backup_target_fails_cleanly() {
  local ns target first lines
  ns=$(new_ns full)
  # The second backup root that e2e/install allows, as an admin would; the namespace's
  # directory in it is a small tmpfs.
  target=$SMALL_ROOT
  mkdir -p "$target/$ns"
  mount -t tmpfs -o size=256k tmpfs "$target/$ns"
  trap "cleanup_ns '$ns'; umount '$target/$ns'; rmdir '$target/$ns'" EXIT
  app_yaml full "{\"replicas\": 1, \"backup\": {\"target\": {\"hostPath\": \"$target\"}}}" | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "app ready" 120 app_ready "$ns" full || { on_fail "$ns"; return 1; }
  [[ $(request "$ns" full backup) == Succeeded ]]
  first=$(jp "$ns" full '{.status.backupRequest.backupId}')
  kubectl -n "$ns" exec full-0 -c app -- dd if=/dev/urandom of=/usr/share/hello/big bs=1024 count=1024 2>/dev/null
  [[ $(request "$ns" full backup) == Failed ]]
  status_contains "$ns" full '{.status.backupRequest.message}' "space"
  has_event "$ns" BackupFailed
  [[ $(jp "$ns" full '{.status.conditions[?(@.type=="BackupFailed")].status}') == True ]]
  # The earlier backup is intact and nothing half-written is visible.
  [[ $(ls "$target/$ns/full") == "$first" ]] || { ls -la "$target/$ns/full"; return 1; }
  # The app is unaffected: still ready, still writing.
  lines=$(wc -l <"$(host_log "$ns" full 0)")
  wait_for "app keeps writing" 60 lines_at_least "$(host_log "$ns" full 0)" $((lines + 1))
  app_ready "$ns" full
}

# A ResourceQuota refuses the backup's Job: status says so in the API server's words, never
# that the backup runs, and the backup goes on once the quota allows it.
test_a_job_refused_by_a_quota_is_said_and_goes_on_once_allowed() {
  local ns token
  ns=$(new_ns quota)
  trap "cleanup_ns '$ns'" EXIT
  app_yaml q '{"replicas": 1}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "app ready" 120 app_ready "$ns" q || { on_fail "$ns"; return 1; }
  kubectl -n "$ns" create quota no-jobs --hard=count/jobs.batch=0 >/dev/null
  # The quota controller must have counted the namespace's Jobs before it refuses any.
  wait_for "quota counted" 60 bash -c "[[ -n \$(kubectl -n '$ns' get quota no-jobs -o jsonpath='{.status.used}') ]]"
  token=$(date +%s)
  annotate "$ns" q "hello-stateful.example.com/backup-requested=$token"
  wait_for "the refusal in status" 90 status_contains "$ns" q \
    '{.status.conditions[?(@.type=="Ready")].message}' "exceeded quota" || { on_fail "$ns"; return 1; }
  [[ $(jp "$ns" q '{.status.conditions[?(@.type=="Ready")].reason}') == ChildRefused ]] || { on_fail "$ns"; return 1; }
  has_event "$ns" ChildRefused || { on_fail "$ns"; return 1; }
  [[ $(jp "$ns" q '{.status.backupRequest.phase}') != Running ]] ||
    { echo "status says a refused backup runs"; on_fail "$ns"; return 1; }
  ! has_job "$ns" backup || { echo "a Job exists despite the quota"; return 1; }
  kubectl -n "$ns" delete quota no-jobs >/dev/null
  wait_for "backup $token acknowledged" 360 acknowledged "$ns" q backupRequest "$token" || { on_fail "$ns"; return 1; }
  [[ $(jp "$ns" q '{.status.backupRequest.phase}') == Succeeded ]] || { on_fail "$ns"; return 1; }
  wait_for "Ready again" 60 app_ready "$ns" q || { on_fail "$ns"; return 1; }
}

test_corrupted_backup_is_refused_before_live_data_is_touched() {
  local ns id before
  ns=$(new_ns corrupt)
  trap "cleanup_ns '$ns'" EXIT
  app_yaml bad '{"replicas": 1}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "app ready" 120 app_ready "$ns" bad || { on_fail "$ns"; return 1; }
  kubectl -n "$ns" exec bad-0 -c app -- sh -c 'echo live > /usr/share/hello/keep'
  [[ $(request "$ns" bad backup) == Succeeded ]]
  id=$(jp "$ns" bad '{.status.backupRequest.backupId}')
  echo tampered >>"$BACKUP_ROOT/$ns/bad/$id/0/keep"
  kubectl -n "$ns" exec bad-0 -c app -- sh -c 'echo newer > /usr/share/hello/keep'
  [[ $(request "$ns" bad restore "hello-stateful.example.com/restore-from=$id") == Failed ]]
  status_contains "$ns" bad '{.status.restoreRequest.message}' "keep"
  [[ $(cat "$(data_dir "$ns" bad 0)/keep") == newer ]]
  wait_for "app back after the refused restore" 120 app_ready "$ns" bad
}

test_bad_annotations_are_reported_and_nothing_restarts() {
  local ns
  ns=$(new_ns badin)
  trap "cleanup_ns '$ns'" EXIT
  app_yaml odd '{"replicas": 1}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "app ready" 120 app_ready "$ns" odd || { on_fail "$ns"; return 1; }
  [[ $(request "$ns" odd restore "hello-stateful.example.com/restore-from=../../etc") == Failed ]]
  status_contains "$ns" odd '{.status.restoreRequest.message}' "not a backup id"
  [[ $(request "$ns" odd restore "hello-stateful.example.com/restore-from=20990101T000000Z") == Failed ]]
  status_contains "$ns" odd '{.status.restoreRequest.message}' "20990101T000000Z"
  wait_for "app back" 120 app_ready "$ns" odd
  [[ $(reconciler_restarts) == 0 ]]
}

test_api_server_restart_mid_reconcile_converges() {
  local ns restarts
  ns=$(new_ns apisrv)
  trap "cleanup_ns '$ns'" EXIT
  restarts=$(reconciler_restarts)
  app_yaml api '{"replicas": 1, "backupSchedule": "*/5 * * * *"}' | kubectl -n "$ns" apply -f - >/dev/null
  # Twice: once in the middle of the app's first passes, once at rest. Each time a new
  # request must be seen within 30 s of the API server being back for pods (every watch
  # resumes on its own within seconds; the 2-minute resync is not what finds it). Pods reach
  # it through the `kubernetes` Service, so only once kube-proxy has seen its endpoint again:
  # after a second restart soon after the first, kube-proxy's own client backs off, and
  # that took up to 85 s here. The reconciler's clock starts when the Service answers.
  local round token
  for round in 1 2; do
    "$E2E_ROOT/e2e/cluster" restart kube-apiserver
    wait_for "the API server answering through its Service after restart $round" 240 api_reachable_through_service
    # The cluster's own controllers can take minutes to create pods after a restart.
    wait_for "app Ready after API server restart $round" 300 app_ready "$ns" api || { on_fail "$ns"; return 1; }
    kubectl -n "$ns" get cronjob backup-api >/dev/null
    token=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
    annotate "$ns" api "hello-stateful.example.com/backup-requested=$token"
    wait_for "backup request seen within 30 s of API server restart $round" 30 \
      request_seen "$ns" api backupRequest "$token" || { on_fail "$ns"; return 1; }
    wait_for "backup done after API server restart $round" 120 acknowledged "$ns" api backupRequest "$token" || { on_fail "$ns"; return 1; }
    [[ $(jp "$ns" api '{.status.backupRequest.phase}') == Succeeded ]] ||
      { jp "$ns" api '{.status.backupRequest}'; echo; on_fail "$ns"; return 1; }
  done
  [[ $(reconciler_restarts) == "$restarts" ]] || { echo "the reconciler restarted"; return 1; }
}

# A backup in stop mode is let run only once the StatefulSet controller has seen the app
# asked to stop. The controller-manager frozen (SIGSTOP: a long pause, a lagging watch), the
# app's pod deleted by hand leaves no pod and a StatefulSet asking for none, but one its
# controller has not seen: it could still make the pod again from the spec it knew, beside
# the copy. The backup waits, suspended, and status says for what; thawed, the controller
# sees the spec, and the backup runs and the app starts again.
test_a_stop_mode_backup_waits_for_the_statefulset_controller_to_see_the_app_stopped() {
  local ns pid ready='{.status.conditions[?(@.type=="Ready")].message}'
  ns=$(new_ns seen)
  trap "[[ -z \${pid:-} ]] || kill -CONT \$pid 2>/dev/null || true; cleanup_ns '$ns'" EXIT
  app_yaml web '{"replicas": 1, "backup": {"consistency": {"mode": "stop", "maxStopSeconds": 300}}}' |
    kubectl -n "$ns" apply -f - >/dev/null
  wait_for "web Ready" 120 app_ready "$ns" web || { on_fail "$ns"; return 1; }
  wait_for "web wrote" 60 lines_at_least "$(host_log "$ns" web 0)" 1
  pid=$(cat "${HS_E2E_STATE:-/var/lib/hellostateful-e2e}/pids/kube-controller-manager.pid")
  kill -STOP "$pid"
  plugin -n "$ns" backup web --wait=false >/dev/null
  wait_for "the app asked to stop, its pod left running" 60 status_contains "$ns" web "$ready" "1 pod(s) to exit" ||
    { on_fail "$ns"; return 1; }
  [[ $(kubectl -n "$ns" get statefulset web -o jsonpath='{.spec.replicas}') == 0 ]]
  kubectl -n "$ns" delete pod web-0 --force --grace-period=0 >/dev/null 2>&1
  wait_for "status naming the StatefulSet controller" 60 status_contains "$ns" web "$ready" "StatefulSet controller to see" ||
    { on_fail "$ns"; return 1; }
  [[ $(kubectl -n "$ns" get jobs -l app.kubernetes.io/component=backup -o jsonpath='{.items[*].spec.suspend}') == true ]] ||
    { echo "the backup was let run"; kubectl -n "$ns" get jobs -o wide; return 1; }
  kill -CONT "$pid"
  pid=""
  wait_for "the backup" 180 bash -c "[[ \$(kubectl -n '$ns' get hellostateful web -o jsonpath='{.status.backupRequest.phase}') == Succeeded ]]" ||
    { on_fail "$ns"; return 1; }
  wait_for "web Ready again" 120 app_ready "$ns" web || { on_fail "$ns"; return 1; }
  has_event "$ns" StoppedForBackup
}

# lease_holder: the reconciler pod that holds the leader Lease.
lease_holder() { kubectl -n "$RECONCILER_NS" get lease hellostateful-reconciler -o jsonpath='{.spec.holderIdentity}'; }

# Two replicas; the leader is frozen (SIGSTOP: a long GC pause, a stuck node). The other
# takes the Lease once it has not been renewed for a whole Lease by its own clock; the old
# leader, thawed, makes no change and steps down; the new one acts.
test_two_reconcilers_and_a_paused_leader_never_act_at_once() {
  local ns leader follower pid token thawed
  ns=$(new_ns lead)
  # (each step may fail without stopping the rest: the frozen process may be gone already)
  trap "[[ -z \${pid:-} ]] || kill -CONT \$pid 2>/dev/null || true; kubectl -n '$RECONCILER_NS' scale deployment/hellostateful-reconciler --replicas=1 >/dev/null || true; cleanup_ns '$ns'" EXIT
  app_yaml lead '{"replicas": 1}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "app ready" 120 app_ready "$ns" lead || { on_fail "$ns"; return 1; }
  leader=$(lease_holder)
  kubectl -n "$RECONCILER_NS" scale deployment/hellostateful-reconciler --replicas=2 >/dev/null
  wait_for "a second reconciler running" 90 bash -c "[[ \$(kubectl -n '$RECONCILER_NS' get pods -l app.kubernetes.io/component=reconciler --field-selector status.phase=Running -o name | wc -l) == 2 ]]"
  follower=$(kubectl -n "$RECONCILER_NS" get pods -l app.kubernetes.io/component=reconciler -o name | sed 's|^pod/||' | grep -vx "$leader")
  # Only the leader is Ready (it serves /readyz once it holds the Lease).
  wait_for "the follower's process" 30 reconciler_pid "$follower" >/dev/null
  [[ $(kubectl -n "$RECONCILER_NS" get pod "$follower" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == False ]]
  [[ $(lease_holder) == "$leader" ]]

  pid=$(reconciler_pid "$leader")
  kill -STOP "$pid"
  wait_for "the follower taking the Lease" 60 bash -c "[[ \$(kubectl -n '$RECONCILER_NS' get lease hellostateful-reconciler -o jsonpath='{.spec.holderIdentity}') == '$follower' ]]"
  # Thawed at once (frozen much longer, its liveness probe would have it killed), the old
  # leader finds the Lease held by another, or loses the compare-and-swap of a renewal it
  # was in the middle of, and stops; until then its client refuses every write, so none
  # of its events is newer than the thaw.
  thawed=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  kill -CONT "$pid"
  wait_for "the old leader stepping down (its container restarts)" 60 bash -c "[[ \$(kubectl -n '$RECONCILER_NS' get pod '$leader' -o jsonpath='{.status.containerStatuses[0].restartCount}') -ge 1 ]]"
  local previous
  # The kubelet counts the restart before it serves the ended container's log.
  wait_for "the old leader's log" 30 kubectl -n "$RECONCILER_NS" logs "$leader" --previous
  previous=$(kubectl -n "$RECONCILER_NS" logs "$leader" --previous)
  grep -E "stopping: lease hellostateful-reconciler is held by" <<<"$previous" || {
    tail -n 20 <<<"$previous"
    kubectl -n "$RECONCILER_NS" get pod "$leader" -o jsonpath='{.status.containerStatuses[0].lastState}'
    return 1
  }
  [[ $(lease_holder) == "$follower" ]]
  # The new leader acts.
  token=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
  annotate "$ns" lead "hello-stateful.example.com/backup-requested=$token"
  wait_for "backup done by the new leader" 120 acknowledged "$ns" lead backupRequest "$token" || { on_fail "$ns"; return 1; }
  [[ $(jp "$ns" lead '{.status.backupRequest.phase}') == Succeeded ]]
  [[ $(lease_holder) == "$follower" ]]
  local late
  late=$(kubectl get events.events.k8s.io -A -o json | python3 -c '
import json, sys
old, since = sys.argv[1], sys.argv[2]
for e in json.load(sys.stdin)["items"]:
    when = (e.get("series") or {}).get("lastObservedTime") or e.get("eventTime") or ""
    if e.get("reportingInstance") == old and when[:19] >= since[:19]:
        print(e["metadata"]["namespace"], e["metadata"]["name"], e.get("reason"), when)
' "$leader" "$thawed")
  [[ -z $late ]] || { echo "the old leader wrote after it was thawed: $late"; return 1; }
}

# set_mover_image IMAGE: the admin's settings name another mover image; the reconciler
# reads them when it starts.
set_mover_image() {
  kubectl -n "$RECONCILER_NS" patch configmap hellostateful-settings --type merge \
    -p "{\"data\": {\"moverImage\": \"$1\"}}" >/dev/null
  kubectl -n "$RECONCILER_NS" rollout restart deployment/hellostateful-reconciler >/dev/null
  kubectl -n "$RECONCILER_NS" rollout status deployment/hellostateful-reconciler --timeout=120s >/dev/null
}

test_a_mover_that_cannot_start_fails_its_restore_and_the_app_comes_back() {
  local ns image
  ns=$(new_ns stuck)
  image=$(kubectl -n "$RECONCILER_NS" get configmap hellostateful-settings -o jsonpath='{.data.moverImage}')
  trap "set_mover_image '$image'; cleanup_ns '$ns'" EXIT
  app_yaml stuck '{"replicas": 1}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "app ready" 120 app_ready "$ns" stuck || { on_fail "$ns"; return 1; }
  kubectl -n "$ns" exec stuck-0 -c app -- sh -c 'echo live > /usr/share/hello/keep'
  [[ $(request "$ns" stuck backup) == Succeeded ]] || { on_fail "$ns"; return 1; }
  # An image no node can pull: the restore Job's pod never starts.
  set_mover_image hellostateful.invalid/missing:0
  [[ $(request "$ns" stuck restore "hello-stateful.example.com/restore-from=latest") == Failed ]] || { on_fail "$ns"; return 1; }
  status_contains "$ns" stuck '{.status.restoreRequest.message}' "ImagePull"
  has_event "$ns" JobStopped
  wait_for "the app back on its own data" 120 app_ready "$ns" stuck || { on_fail "$ns"; return 1; }
  [[ $(cat "$(data_dir "$ns" stuck 0)/keep") == live ]]
}

# slow_to_copy NS POD MARKER: 200 MB of random data and 20,000 small files in POD's
# volume, then MARKER in its marker file, so that the next backup copies for seconds: the
# big file alone took a fresh machine's mover a fifth of a second, less than one round of
# freeze_mover's loop under load; each small file is opened, read and written on its own.
slow_to_copy() {
  kubectl -n "$1" exec "$2" -c app -- sh -c "head -c 200000000 /dev/urandom > /usr/share/hello/big &&
    mkdir /usr/share/hello/many && i=0 && while [ \$i -lt 20000 ]; do echo \$i > /usr/share/hello/many/\$i; i=\$((i + 1)); done &&
    echo $3 > /usr/share/hello/marker"
}

# freeze_mover NS: waits for a backup mover of NS to start and stops it (SIGSTOP), its pid
# in FROZEN_MOVER. Fails if it ended before it was stopped: a copy faster than this loop
# leaves nothing to test (see slow_to_copy).
freeze_mover() {
  local ns=$1 deadline=$((SECONDS + 60)) pid
  until FROZEN_MOVER=$(pgrep -f "hellostateful-reconciler backup .*--namespace=$ns "); do
    ((SECONDS < deadline)) || { echo "no backup mover started"; return 1; }
    sleep 0.02
  done
  kill -STOP $FROZEN_MOVER 2>/dev/null
  for pid in $FROZEN_MOVER; do
    # The signal lands once the process runs again (after a disk wait, say).
    wait_for "mover $pid stopped" 10 bash -c "[[ \$(cut -d' ' -f3 /proc/$pid/stat 2>/dev/null) == T ]]" ||
      { echo "the mover ended before it was stopped"; return 1; }
  done
}

# A backup running when its app is deleted: deletion stops it before the wipe (its mover,
# frozen here mid-copy, is gone before any wipe Job exists), says meanwhile what it waits
# for, and the cut-short copy is never taken for a snapshot: the app made again restores
# the last complete backup.
test_delete_during_a_backup_wipes_nothing_under_it_and_records_no_partial_snapshot() {
  local ns before
  FROZEN_MOVER=""
  ns=$(new_ns delbk)
  trap "cleanup_ns '$ns'; [[ -z \${FROZEN_MOVER:-} ]] || kill -CONT \$FROZEN_MOVER 2>/dev/null" EXIT
  app_yaml mid '{"replicas": 1, "restoreFromExisting": true}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "app ready" 120 app_ready "$ns" mid || { on_fail "$ns"; return 1; }
  kubectl -n "$ns" exec mid-0 -c app -- sh -c 'echo complete > /usr/share/hello/marker'
  [[ $(request "$ns" mid backup) == Succeeded ]] || { on_fail "$ns"; return 1; }
  before=$(backups_of "$ns" mid)
  # Enough data that the next backup copies for a while; its mover is frozen once it starts.
  slow_to_copy "$ns" mid-0 partial
  annotate "$ns" mid "hello-stateful.example.com/backup-requested=$(date +%s%N)"
  freeze_mover "$ns" || { on_fail "$ns"; return 1; }
  kubectl -n "$ns" delete hellostateful mid --wait=false >/dev/null
  wait_for "deletion says it waits for the backup" 30 \
    status_contains "$ns" mid '{.status.conditions[?(@.type=="Ready")].message}' "deletion waits for Job backup-mid-" ||
    { on_fail "$ns"; return 1; }
  # The mover dies when its pod's grace period ends (the Job was stopped); until then no
  # wipe may run under it.
  while kill -0 $FROZEN_MOVER 2>/dev/null; do
    if [[ -n $(kubectl -n "$ns" get jobs -o name | grep wipe-) ]]; then
      echo "a wipe Job was made while the backup's mover still held the volume"; kubectl -n "$ns" get jobs,pods; return 1
    fi
    sleep 1
  done
  FROZEN_MOVER=""
  wait_for "app deleted" 120 bash -c "! kubectl -n '$ns' get hellostateful mid >/dev/null 2>&1" || { on_fail "$ns"; return 1; }
  [[ $(backups_of "$ns" mid) == "$before" ]] ||
    { echo "a snapshot was recorded by the cut-short backup:"; backups_of "$ns" mid; return 1; }
  app_yaml mid '{"replicas": 1, "restoreFromExisting": true}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "app restored and ready" 180 app_ready "$ns" mid || { on_fail "$ns"; return 1; }
  [[ $(cat "$(data_dir "$ns" mid 0)/marker") == complete ]] ||
    { echo "marker: $(cat "$(data_dir "$ns" mid 0)/marker")"; return 1; }
  [[ ! -e $(data_dir "$ns" mid 0)/big ]] || { echo "the cut-short backup's data came back"; return 1; }
}

# A backup Job deleted by hand while it runs (here with --cascade=orphan) leaves its pod
# running, no longer anyone's. Deleting the app waits for that pod as for any that mounts
# the app's volumes, and says so: no wipe runs under it, so whatever snapshot its mover
# finishes is whole (issue #33, found by the deletion model).
test_a_backup_pod_orphaned_by_hand_holds_the_deletion_until_it_ends() {
  local ns job pod sum restored
  FROZEN_MOVER=""
  ns=$(new_ns orphan)
  trap "cleanup_ns '$ns'; [[ -z \${FROZEN_MOVER:-} ]] || kill -CONT \$FROZEN_MOVER 2>/dev/null" EXIT
  app_yaml orph '{"replicas": 1, "restoreFromExisting": true}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "app ready" 120 app_ready "$ns" orph || { on_fail "$ns"; return 1; }
  kubectl -n "$ns" exec orph-0 -c app -- sh -c 'echo complete > /usr/share/hello/marker'
  [[ $(request "$ns" orph backup) == Succeeded ]] || { on_fail "$ns"; return 1; }
  slow_to_copy "$ns" orph-0 whole
  sum=$(kubectl -n "$ns" exec orph-0 -c app -- sha256sum /usr/share/hello/big | cut -d' ' -f1)
  annotate "$ns" orph "hello-stateful.example.com/backup-requested=$(date +%s%N)"
  freeze_mover "$ns" || { on_fail "$ns"; return 1; }
  job=$(kubectl -n "$ns" get jobs -l app.kubernetes.io/component=backup -o jsonpath='{.items[?(@.status.active==1)].metadata.name}')
  pod=$(kubectl -n "$ns" get pods -l "job-name=$job" -o jsonpath='{.items[*].metadata.name}')
  [[ -n $job && -n $pod && $pod != *" "* ]] || { kubectl -n "$ns" get jobs,pods; return 1; }
  kubectl -n "$ns" delete job "$job" --cascade=orphan --wait=false >/dev/null
  wait_for "the orphaned pod no longer the Job's" 60 bash -c \
    "[[ -z \$(kubectl -n '$ns' get pod '$pod' -o jsonpath='{.metadata.ownerReferences}') ]]" || { on_fail "$ns"; return 1; }
  # The request whose Job is gone failed, and says so: its Job is not made again beside the
  # orphaned pod, which still runs.
  wait_for "the request failed: its Job is gone" 60 \
    status_contains "$ns" orph '{.status.backupRequest.message}' "its Job $job is gone" || { on_fail "$ns"; return 1; }
  [[ $(kubectl -n "$ns" get hellostateful orph -o jsonpath='{.status.backupRequest.phase}') == Failed ]] ||
    { on_fail "$ns"; return 1; }
  [[ -z $(kubectl -n "$ns" get job "$job" -o name --ignore-not-found) ]] ||
    { echo "the request's Job was made again"; kubectl -n "$ns" get jobs,pods; return 1; }
  kubectl -n "$ns" delete hellostateful orph --wait=false >/dev/null
  wait_for "deletion says it waits for the orphaned pod" 60 \
    status_contains "$ns" orph '{.status.conditions[?(@.type=="Ready")].message}' "pod $pod" ||
    { on_fail "$ns"; return 1; }
  [[ -z $(kubectl -n "$ns" get jobs -o name | grep wipe-) ]] || { echo "a wipe Job beside the orphaned pod"; kubectl -n "$ns" get jobs,pods; return 1; }
  # Its mover goes on; until it ends no wipe may run under it.
  kill -CONT $FROZEN_MOVER
  while kill -0 $FROZEN_MOVER 2>/dev/null; do
    if [[ -n $(kubectl -n "$ns" get jobs -o name | grep wipe-) ]]; then
      echo "a wipe Job was made while the orphaned mover still held the volume"; kubectl -n "$ns" get jobs,pods; return 1
    fi
    sleep 1
  done
  FROZEN_MOVER=""
  wait_for "app deleted" 120 bash -c "! kubectl -n '$ns' get hellostateful orph >/dev/null 2>&1" || { on_fail "$ns"; return 1; }
  # The orphaned pod, ended, is nobody's to remove: until its user deletes it, it holds the
  # old data claim (the API server keeps a claim any scheduled pod names), and an app made
  # again waits for that claim to go (OldVolumeReleasing).
  kubectl -n "$ns" delete pod "$pod" --wait=false >/dev/null
  # Made again, it restores the newest backup: the orphan's, if its mover finished it (then
  # whole), else the one before.
  app_yaml orph '{"replicas": 1, "restoreFromExisting": true}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "app restored and ready" 180 app_ready "$ns" orph || { on_fail "$ns"; return 1; }
  restored=$(data_dir "$ns" orph 0)
  echo "  restored the backup marked $(cat "$restored/marker")"
  case $(cat "$restored/marker") in
    complete) [[ ! -e $restored/big ]] || { echo "big came back without its marker"; return 1; } ;;
    whole) [[ $(sha256sum "$restored/big" | cut -d' ' -f1) == "$sum" ]] || { echo "the orphan's snapshot is not whole"; return 1; } ;;
    *) echo "marker: $(cat "$restored/marker")"; return 1 ;;
  esac
}

test_reconciler_has_least_privilege() {
  local sa=system:serviceaccount:hellostateful-system:hellostateful-reconciler
  for denied in "get secrets" "list secrets" "create pods" "delete pods" "create deployments" "delete namespaces" "create clusterroles" "delete jobs" \
    "create namespaces" "patch namespaces" "patch configmaps" "patch validatingadmissionpolicies"; do
    [[ $(kubectl auth can-i $denied -A --as="$sa" 2>/dev/null) == no ]] || { echo "reconciler may $denied"; return 1; }
  done
  for allowed in "patch statefulsets" "create jobs" "patch jobs" "list pods" "patch persistentvolumes" "watch namespaces" "watch statefulsets" "delete persistentvolumeclaims" "list events"; do
    [[ $(kubectl auth can-i $allowed -A --as="$sa" 2>/dev/null) == yes ]] || { echo "reconciler may not $allowed"; return 1; }
  done
  # The reconciler itself runs as non-root without capabilities.
  [[ $(kubectl -n "$RECONCILER_NS" get deploy hellostateful-reconciler -o jsonpath='{.spec.template.spec.securityContext.runAsNonRoot}') == true ]]
  [[ $(kubectl -n "$RECONCILER_NS" get deploy hellostateful-reconciler -o jsonpath='{.spec.template.spec.containers[0].securityContext.capabilities.drop[0]}') == ALL ]]
}

# Each test has namespaces of its own, so three of the longest run in a lane beside the
# others (the ones that run alone, after every suite's shared tests, stay in this order).
second_lane() {
  run_test walkthrough_2018 test_walkthrough_2018
  run_test delete_during_a_backup_records_no_partial_snapshot test_delete_during_a_backup_wipes_nothing_under_it_and_records_no_partial_snapshot
  run_test corrupted_backup_is_refused_before_live_data_is_touched test_corrupted_backup_is_refused_before_live_data_is_touched
  run_test a_backup_pod_orphaned_by_hand_holds_the_deletion test_a_backup_pod_orphaned_by_hand_holds_the_deletion_until_it_ends
}
beside second_lane
run_test on_demand_backup_and_restore_with_the_plugin test_on_demand_backup_and_restore_with_the_plugin
run_test two_replicas_restore_into_their_own_volumes test_two_replicas_restore_into_their_own_volumes
run_test same_name_in_two_namespaces_never_mixes test_same_name_in_two_namespaces_never_mixes
run_test --alone restore_survives_reconciler_kills test_restore_survives_reconciler_kills
run_test full_backup_target_fails_cleanly test_full_backup_target_fails_cleanly
run_test a_job_refused_by_a_quota_is_said_and_goes_on_once_allowed test_a_job_refused_by_a_quota_is_said_and_goes_on_once_allowed
run_test bad_annotations_are_reported_and_nothing_restarts test_bad_annotations_are_reported_and_nothing_restarts
run_test --alone api_server_restart_mid_reconcile_converges test_api_server_restart_mid_reconcile_converges
run_test --alone a_mover_that_cannot_start_fails_its_restore_and_the_app_comes_back test_a_mover_that_cannot_start_fails_its_restore_and_the_app_comes_back
run_test --alone two_reconcilers_and_a_paused_leader_never_act_at_once test_two_reconcilers_and_a_paused_leader_never_act_at_once
run_test --alone a_stop_mode_backup_waits_for_the_statefulset_controller test_a_stop_mode_backup_waits_for_the_statefulset_controller_to_see_the_app_stopped
run_test reconciler_has_least_privilege test_reconciler_has_least_privilege
wait_beside
summary
