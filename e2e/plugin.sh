#!/usr/bin/env bash
# The plugin against the real cluster with the reconciler running: every command, its
# output formats (they must parse), its exit codes, and dry runs that change nothing.
# Terminal behaviour (prompts only on a TTY) is tested in kubectl-hellostateful/tests/pty.rs.
set -uo pipefail
E2E_SUITE=plugin
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/hs.sh"

NS=$(new_ns plugin)
trap 'cleanup_ns "$NS"; kubectl delete clusterrolebinding "$NS-viewer" >/dev/null 2>&1' EXIT
hs() { "$HS_PLUGIN" -n "$NS" "$@"; }
ESC=$'\e'

test_dry_runs_change_nothing() {
  local yaml
  yaml=$(hs create demo --schedule '*/5 * * * *' --replicas 1 --dry-run=client -o yaml)
  python3 -c 'import sys, yaml; d = yaml.safe_load(sys.stdin); assert d["kind"] == "HelloStateful" and d["spec"]["backupSchedule"] == "*/5 * * * *", d' <<<"$yaml"
  # The API server's answer: the CRD defaults a port's protocol, as for a Pod.
  hs create demo --schedule '*/5 * * * *' --env MODE=primary --port 8080 --full-read-every 24h \
    --max-backup-age 26h --dry-run=server -o json |
    jq -e '.metadata.name == "demo" and .spec.env == [{"name": "MODE", "value": "primary"}] and
      .spec.ports == [{"containerPort": 8080, "protocol": "TCP"}] and
      .spec.backup.fullReadEverySeconds == 86400 and .spec.backup.maxAgeSeconds == 93600' >/dev/null
  if kubectl -n "$NS" get hellostateful demo >/dev/null 2>&1; then echo "a dry run created the app"; return 1; fi
  "$HS_PLUGIN" install --dry-run -o yaml | python3 -c 'import sys, yaml; kinds = {d["kind"] for d in yaml.safe_load_all(sys.stdin) if d}; assert {"CustomResourceDefinition", "Deployment", "ClusterRole"} <= kinds, kinds'
}

test_create_list_get_in_every_format() {
  hs create demo --schedule '*/5 * * * *' --replicas 1
  expect_fail "already exists" hs create demo --schedule '*/5 * * * *'
  wait_for "demo Ready" 120 app_ready "$NS" demo || { on_fail "$NS"; return 1; }
  local table
  table=$(hs list)
  [[ $(head -n1 <<<"$table" | tr -s ' ') == "NAME READY REPLICAS SCHEDULE LAST BACKUP RESTORED AGE" ]] || { echo "$table"; return 1; }
  grep -q '^demo  *1/1  *1  *\*/5 \* \* \* \*' <<<"$table" || { echo "$table"; return 1; }
  [[ $table != *"$ESC"* ]] || { echo "colour codes in piped output"; return 1; }
  hs get demo -o json | jq -e '.spec.backupSchedule == "*/5 * * * *" and .status.readyReplicas == 1' >/dev/null
  hs list -o json | jq -e '.items | length == 1' >/dev/null
  hs get demo -o yaml | python3 -c 'import sys, yaml; assert yaml.safe_load(sys.stdin)["metadata"]["name"] == "demo"'
  [[ $(hs get demo -o name) == hellostateful.hello-stateful.example.com/demo ]]
  "$HS_PLUGIN" list -A | grep -q "^$NS  *demo "
  hs get demo -o wide | head -n1 | grep -q NODE
  expect_fail "apps in it: demo" hs get missing
}

test_status_shows_children_conditions_and_events() {
  local out
  out=$(hs status demo)
  for want in "demo" "Conditions:" "Ready" "data-demo-0" "backup-demo"; do
    [[ $out == *"$want"* ]] || { echo "status lacks '$want':"; echo "$out"; return 1; }
  done
  [[ $out != *"$ESC"* ]]
  [[ $(hs describe demo | head -n1) == $(head -n1 <<<"$out") ]]
}

test_backup_waits_for_its_id_and_backups_lists_it() {
  local out id
  out=$(hs backup demo --wait --timeout 3m) || { echo "$out"; on_fail "$NS"; return 1; }
  id=$(jp "$NS" demo '{.status.backupRequest.backupId}')
  [[ -n $id && $out == *"$id"* ]] || { echo "$out"; return 1; }
  hs backups demo -o json | jq -e --arg id "$id" 'map(.id) | index($id) != null' >/dev/null
  hs backups demo | grep -q "^$id "
  # Status counts what the backup's retention left (the metrics read the same fields).
  hs status demo | grep -qE "^  [1-9][0-9]* snapshot\(s\) kept after it, the oldest [0-9]{8}T[0-9]{6}Z" ||
    { hs status demo; return 1; }
}

# A file whose size, times, owner and inode are unchanged is linked from the previous
# backup; `backup --full` reads it again (a file written through mmap can change unseen).
# backs_up_by_linking FILE: writes 1 MiB of FILE into demo's volume, then takes plain backups
# until one links it instead of copying it; prints that backup's id.
backs_up_by_linking() {
  local attempt id
  head -c 1048576 /dev/urandom >"$(data_dir "$NS" demo 0)/$1"
  # A file changed within a second of the previous backup's start is copied again (it may
  # have changed within the same clock tick), so the first backups after the write may copy
  # it; one whose previous backup started later links it.
  for attempt in 1 2 3; do
    hs backup demo --timeout 3m >/dev/null || { on_fail "$NS"; return 1; }
    id=$(jp "$NS" demo '{.status.backupRequest.backupId}')
    if hs backups describe demo "$id" -o json | jq -e '.linkedFiles >= 1 and .newBytes < 1048576' >/dev/null; then
      echo "$id"
      return 0
    fi
  done
  echo "no plain backup linked the unchanged file after $attempt" >&2
  hs backups demo >&2
  return 1
}

# reads_every_file ID: demo's backup ID copied every file again.
reads_every_file() {
  hs backups describe demo "$1" -o json | jq -e '.linkedFiles == 0 and .newBytes == .bytes and .bytes > 1048576' >/dev/null ||
    { hs backups describe demo "$1" -o json; return 1; }
}

test_a_full_backup_reads_every_file_again() {
  local plain full
  plain=$(backs_up_by_linking static.bin) || return 1
  hs backup demo --full --timeout 3m >/dev/null || { on_fail "$NS"; return 1; }
  full=$(jp "$NS" demo '{.status.backupRequest.backupId}')
  [[ $full != "$plain" ]]
  reads_every_file "$full"
}

# The bound on a stale copy (backup.fullReadEverySeconds, a week by default): once the
# newest full read is that old, the next plain request reads every file, status says when,
# and the one after it links again. The age is made by setting status as an admin could.
test_a_backup_reads_every_file_again_once_the_last_full_read_is_old() {
  local full after
  backs_up_by_linking static-2.bin >/dev/null || return 1
  kubectl -n "$NS" patch hellostateful demo --subresource=status --type=merge \
    -p '{"status":{"lastFullRead":"2026-01-01T00:00:00Z"}}' >/dev/null
  hs status demo | grep -q '^Full reads: *every 7d, the last at 2026-01-01T00:00:00Z' ||
    { hs status demo; return 1; }
  hs backup demo --timeout 3m >/dev/null || { on_fail "$NS"; return 1; }
  full=$(jp "$NS" demo '{.status.backupRequest.backupId}')
  reads_every_file "$full" || return 1
  [[ $(jp "$NS" demo '{.status.lastFullRead}') == "$(jp "$NS" demo '{.status.lastBackup.time}')" ]] ||
    { kubectl -n "$NS" get hellostateful demo -o yaml; return 1; }
  hs backup demo --timeout 3m >/dev/null || { on_fail "$NS"; return 1; }
  after=$(jp "$NS" demo '{.status.backupRequest.backupId}')
  hs backups describe demo "$after" -o json | jq -e '.linkedFiles >= 1' >/dev/null ||
    { hs backups describe demo "$after" -o json; return 1; }
}

test_report_archives_the_app_its_children_events_and_logs() {
  local dir out file
  dir=$(mktemp -d)
  trap "rm -rf '$dir'" EXIT
  out=$(hs report demo -f "$dir/r.tar.gz") || { echo "$out"; return 1; }
  [[ $out == "Wrote $dir/r.tar.gz ("* ]] || { echo "$out"; return 1; }
  tar -tzf "$dir/r.tar.gz" >"$dir/list"
  for file in README.txt app.yaml events.txt version.txt children/statefulset-demo.yaml \
    children/service-demo.yaml children/pod-demo-0.yaml children/persistentvolumeclaim-data-demo-0.yaml logs/demo-0.log; do
    grep -qx "$file" "$dir/list" || { echo "no $file in:"; cat "$dir/list"; return 1; }
  done
  grep -q '^logs/reconciler/hellostateful-reconciler-' "$dir/list" || { cat "$dir/list"; return 1; }
  grep -q '^children/job-backup-demo-' "$dir/list" && grep -q '^logs/backup-demo-' "$dir/list" || { cat "$dir/list"; return 1; }
  tar -xzOf "$dir/r.tar.gz" app.yaml |
    python3 -c 'import sys, yaml; d = yaml.safe_load(sys.stdin); assert d["metadata"]["name"] == "demo" and d["status"]["conditions"], d'
  grep -q " HelloStateful/demo " <(tar -xzOf "$dir/r.tar.gz" events.txt)
  # A mover Job's pod log ends with the mover's JSON summary.
  grep -q '"newBytes"' <(tar -xzOf "$dir/r.tar.gz" --wildcards 'logs/backup-demo-*')
  if grep -qi secret "$dir/list"; then echo "a Secret in the report"; return 1; fi
  # A tenant with edit in the namespace gets the rest, and is told what was left out.
  kubectl -n "$NS" create rolebinding report-tenant --clusterrole=edit --user=report-tenant >/dev/null
  out=$(hs --as=report-tenant report demo -f "$dir/t.tar.gz") || { echo "$out"; return 1; }
  [[ $out == *"not included: the reconciler's pods in hellostateful-system"* ]] || { echo "$out"; return 1; }
  grep -q "^- the reconciler's pods in hellostateful-system: " <(tar -xzOf "$dir/t.tar.gz" README.txt)
  [[ $(tar -tzf "$dir/t.tar.gz") == *$'\n'logs/demo-0.log$'\n'* ]]
  hs report demo -f "$dir/j.tar.gz" -o json | jq -e '.entries | index("app.yaml") != null' >/dev/null
  expect_fail "not found" hs report nosuch -f "$dir/n.tar.gz"
}

test_restore_refuses_without_a_terminal_or_yes() {
  local before
  before=$(kubectl -n "$NS" get hellostateful demo -o jsonpath='{.metadata.annotations}')
  expect_fail "--yes" hs restore demo --from latest </dev/null
  [[ $(kubectl -n "$NS" get hellostateful demo -o jsonpath='{.metadata.annotations}') == "$before" ]]
  expect_fail "not a backup id" hs restore demo --from ../x --yes
}

test_restore_with_yes_waits_until_done() {
  hs restore demo --from latest --yes --wait --timeout 4m || { on_fail "$NS"; return 1; }
  [[ $(jp "$NS" demo '{.status.restoreRequest.phase}') == Succeeded ]]
  [[ $(jp "$NS" demo '{.status.isRestored}') == true ]]
}

test_logs_show_the_apps_file() {
  wait_for "demo Ready" 120 app_ready "$NS" demo
  wait_for "two log lines" 60 lines_at_least "$(host_log "$NS" demo 0)" 2
  local out
  out=$(hs logs demo --tail 2)
  [[ $(wc -l <<<"$out") == 2 && $out == *UTC* ]] || { echo "$out"; return 1; }
  expect_fail "replica" hs logs demo --replica 5
}

test_version_reports_plugin_and_reconciler() {
  local out
  out=$("$HS_PLUGIN" version)
  [[ $out == *"kubectl-hellostateful $HS_VERSION"* && $out == *"Reconciler: $HS_VERSION"* && $out == *"available (1/1 pods)"* ]] || { echo "$out"; return 1; }
  # The image the pod really runs, as the kubelet reports it.
  "$HS_PLUGIN" version -o json | jq -e '.server != null and .reconciler.availableReplicas >= 1 and (.reconciler.pods[0].image | test("hellostateful-reconciler")) and .reconciler.pods[0].ready' >/dev/null
  # Without a cluster it still names itself, and fails like `kubectl version`.
  out=$("$HS_PLUGIN" version --kubeconfig <(sed 's#server: .*#server: https://127.0.0.1:1#' "$KUBECONFIG") 2>&1) && { echo "exit 0 without a cluster"; return 1; }
  [[ $out == *"Plugin:     kubectl-hellostateful $HS_VERSION"* && $out == *"cannot reach the cluster"* ]] || { echo "$out"; return 1; }
  "$HS_PLUGIN" completion bash | grep -q "kubectl-hellostateful\|hellostateful"
  # What kubectl's plugin completion asks: the apps of the namespace given on the line.
  [[ $("$HS_PLUGIN" __complete -n "$NS" status "") == $'demo\t1 replica(s)\n:4' ]] || { "$HS_PLUGIN" __complete -n "$NS" status ""; return 1; }
}

test_forbidden_says_which_verb_on_which_resource() {
  local kubeconfig token server
  kubectl -n "$NS" create serviceaccount nobody >/dev/null
  token=$(kubectl -n "$NS" create token nobody)
  server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
  kubeconfig=$(mktemp)
  KUBECONFIG=$kubeconfig kubectl config set-cluster c --server="$server" --insecure-skip-tls-verify=true >/dev/null
  KUBECONFIG=$kubeconfig kubectl config set-credentials nobody --token="$token" >/dev/null
  KUBECONFIG=$kubeconfig kubectl config set-context c --cluster=c --user=nobody --namespace="$NS" >/dev/null
  KUBECONFIG=$kubeconfig kubectl config use-context c >/dev/null
  expect_fail "list" "$HS_PLUGIN" --kubeconfig "$kubeconfig" list
  expect_fail "forbidden" "$HS_PLUGIN" --kubeconfig "$kubeconfig" list
  rm -f "$kubeconfig"
}

# kubectl's global flags reach the API server: --token, --user and --cluster choose the
# credentials and the server, --as impersonates, --request-timeout bounds a silent server.
test_kubectl_global_flags_reach_the_api_server() {
  local kubeconfig server nobody viewer port listener out
  kubectl -n "$NS" create serviceaccount flag-nobody >/dev/null
  kubectl -n "$NS" create serviceaccount flag-viewer >/dev/null
  kubectl -n "$NS" create rolebinding flag-viewer --clusterrole=view --serviceaccount="$NS:flag-viewer" >/dev/null
  nobody=$(kubectl -n "$NS" create token flag-nobody)
  viewer=$(kubectl -n "$NS" create token flag-viewer)
  server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
  kubeconfig=$(mktemp)
  k() { KUBECONFIG=$kubeconfig kubectl config "$@" >/dev/null; }
  k set-cluster good --server="$server" --insecure-skip-tls-verify=true
  k set-cluster closed --server=https://127.0.0.1:1 --insecure-skip-tls-verify=true
  k set-credentials anonymous
  k set-credentials viewer --token="$viewer"
  k set-context c --cluster=closed --user=anonymous --namespace="$NS"
  k use-context c
  hsk() { "$HS_PLUGIN" --kubeconfig "$kubeconfig" "$@"; }
  expect_fail "Connection refused" hsk list
  expect_fail "system:serviceaccount:$NS:flag-nobody" hsk --cluster good --token "$nobody" list
  [[ $(hsk --cluster good --user viewer list -o name) == hellostateful.hello-stateful.example.com/demo ]]
  expect_fail "User \"system:serviceaccount:$NS:flag-nobody\" cannot list" hs --as "system:serviceaccount:$NS:flag-nobody" list
  hs --as "system:serviceaccount:$NS:flag-viewer" --as-group system:serviceaccounts get demo -o name | grep -qx hellostateful.hello-stateful.example.com/demo
  out=$(hs -v=1 get demo -o name 2>&1 >/dev/null)
  [[ $out == *"using cluster"* ]] || { echo "-v=1 printed: $out"; return 1; }
  # A server that accepts connections and never answers: the request gives up on time.
  exec {listener}< <(python3 -c 'import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True); time.sleep(120)')
  read -r port <&"$listener"
  k set-cluster silent --server="https://127.0.0.1:$port" --insecure-skip-tls-verify=true
  local t0=$SECONDS
  # (kube's own connect timeout, without the flag, is 30 s)
  expect_fail "deadline has elapsed" timeout 60 "$HS_PLUGIN" --kubeconfig "$kubeconfig" --cluster silent --request-timeout 2s list
  (( SECONDS - t0 < 20 )) || { echo "--request-timeout 2s took $((SECONDS - t0)) s"; return 1; }
  exec {listener}<&-
  rm -f "$kubeconfig"
}

test_invalid_spec_shows_the_apis_reason() {
  expect_fail "storage.size must be a quantity" hs create huge --size 1000Pi --schedule '*/5 * * * *'
  expect_fail "schedule" hs create badcron --schedule 'every minute'
}

# starts_with_file LIVE SNAPSHOT: the live file begins with the snapshot's whole content.
starts_with_file() { cmp -s -n "$(stat -c %s "$2")" "$1" "$2"; }

test_create_from_backup_restores_an_older_backup_of_another_app() {
  local older newer live out
  older=$(backups_of "$NS" demo | tail -n1)
  live=$(host_log "$NS" demo 0)
  # demo writes a line every 10 s: its next backup holds more than the one before.
  wait_for "demo wrote since $older" 60 bash -c "(( \$(stat -c %s '$live') > \$(stat -c %s '$BACKUP_ROOT/$NS/demo/$older/0/stateful.log') ))"
  hs backup demo --wait --timeout 3m >/dev/null || { on_fail "$NS"; return 1; }
  newer=$(backups_of "$NS" demo | tail -n1)
  [[ $older != "$newer" ]] || { echo "no new backup after $older"; return 1; }
  out=$(hs create copy --from-backup "demo/$older" 2>&1) || { echo "$out"; return 1; }
  [[ $out == *"It restores backup $older of app demo before it starts"* ]] || { echo "$out"; return 1; }
  wait_for "copy Ready" 180 app_ready "$NS" copy || { on_fail "$NS"; return 1; }
  [[ $(jp "$NS" copy '{.status.isRestored}') == true ]]
  status_contains "$NS" copy '{.status.conditions[?(@.type=="Restoring")].message}' "backup $older of app demo"
  # copy's log is the older snapshot's, then its own lines: not the newer snapshot's.
  starts_with_file "$(host_log "$NS" copy 0)" "$BACKUP_ROOT/$NS/demo/$older/0/stateful.log" ||
    { echo "copy does not start from $older"; return 1; }
  if starts_with_file "$(host_log "$NS" copy 0)" "$BACKUP_ROOT/$NS/demo/$newer/0/stateful.log"; then
    echo "copy holds the newer backup $newer"; return 1
  fi
  hs status copy | grep -q "Restore on create: *backup $older of app demo" || { hs status copy; return 1; }
  # demo itself is untouched and still runs.
  app_ready "$NS" demo
}

# schedule_suspended NS APP: the CronJob of APP's scheduled backups is suspended.
schedule_suspended() { [[ $(kubectl -n "$1" get cronjob "backup-$2" -o jsonpath='{.spec.suspend}') == true ]]; }

# no_backup_running NS APP: every backup Job of APP has finished.
no_backup_running() {
  kubectl -n "$1" get jobs -l "app.kubernetes.io/instance=$2,app.kubernetes.io/component=backup" -o json |
    jq -e '[.items[] | select([.status.conditions[]? | select((.type == "Complete" or .type == "Failed") and .status == "True")] | length == 0)] | length == 0' >/dev/null
}

test_backups_describe_verify_and_delete_one() {
  local ids id oldest newest out log
  # Which backup is the newest must not change mid-test: no scheduled backup may land.
  kubectl -n "$NS" patch hellostateful demo --type merge -p '{"spec":{"backup":{"suspend":true}}}' >/dev/null
  trap "kubectl -n '$NS' patch hellostateful demo --type merge -p '{\"spec\":{\"backup\":{\"suspend\":false}}}' >/dev/null" EXIT
  wait_for "scheduled backups suspended" 60 schedule_suspended "$NS" demo
  wait_for "no backup running" 180 no_backup_running "$NS" demo
  ids=$(backups_of "$NS" demo)
  # The oldest that holds the app's log (a scheduled backup may have run before the app
  # first wrote: it holds no file).
  oldest=""
  for id in $ids; do
    if [[ -f $BACKUP_ROOT/$NS/demo/$id/0/stateful.log ]]; then oldest=$id; break; fi
  done
  newest=$(tail -n1 <<<"$ids")
  [[ -n $oldest && $oldest != "$newest" ]] || { echo "one backup with the log only: $ids"; return 1; }
  out=$(hs backups describe demo "$newest") || { echo "$out"; return 1; }
  [[ $out == *"Backup:     $newest (the newest"* && $out == *"App:        $NS/demo"* && $out == *"Manifest:   format 3"* ]] ||
    { echo "$out"; return 1; }
  hs backups describe demo "$oldest" -o json |
    jq -e --arg id "$oldest" '.id == $id and .newest == false and .files >= 1 and .format == 3' >/dev/null
  out=$(hs verify demo "$oldest") || { echo "$out"; return 1; }
  [[ $out == "backup $oldest of $NS/demo verified: "*"every checksum matches" ]] || { echo "$out"; return 1; }
  # Damage the oldest snapshot's copy of the log: a new file in its place, so that the
  # copies hard-linked into other snapshots stay whole.
  log="$BACKUP_ROOT/$NS/demo/$oldest/0/stateful.log"
  out=$(cat "$log")
  rm -f "$log"
  printf '%s\ntampered\n' "$out" >"$log"
  expect_fail "backup $oldest of $NS/demo is damaged: 1 problem(s)" hs verify demo "$oldest"
  if out=$(hs verify demo "$oldest" -o json 2>/dev/null); then echo "verify passed a damaged backup"; return 1; fi
  jq -e '.problems | length == 1 and (.[0] | contains("stateful.log"))' <<<"$out" >/dev/null || { echo "$out"; return 1; }
  hs verify demo >/dev/null
  # Delete: never without confirmation, the newest only with --force.
  expect_fail "--yes" hs backups delete demo "$oldest" </dev/null
  expect_fail "--force" hs backups delete demo "$newest" --yes
  out=$(hs backups delete demo "$oldest" --yes) || { echo "$out"; return 1; }
  [[ $out == "backup $oldest of $NS/demo deleted; "*" left" ]] || { echo "$out"; return 1; }
  [[ ! -e $BACKUP_ROOT/$NS/demo/$oldest ]]
  hs backups demo -o json | jq -e --arg id "$oldest" 'map(.id) | index($id) == null' >/dev/null
  expect_fail "backup $oldest of $NS/demo does not exist" hs backups describe demo "$oldest"
  expect_fail "not found" hs verify nosuch
}

test_create_from_backup_refuses_a_source_without_backups() {
  expect_fail "app nosuch has no backups in namespace $NS" hs create stray --from-backup nosuch
  if kubectl -n "$NS" get hellostateful stray >/dev/null 2>&1; then echo "stray was created anyway"; return 1; fi
  expect_fail "is not an app name" hs create stray --from-backup 'Demo'
  expect_fail "is not a backup id" hs create stray --from-backup 'demo/../x'
  # Applied without the plugin: the reconciler keeps it stopped and says why, and starts
  # it on empty volumes once the field is removed.
  app_yaml stray '{"replicas": 1, "restoreFrom": {"name": "nosuch"}}' | kubectl -n "$NS" apply -f - >/dev/null
  wait_for "stray says its source is missing" 60 bash -c \
    "[[ \$(kubectl -n '$NS' get hellostateful stray -o jsonpath='{.status.conditions[?(@.type==\"Restoring\")].reason}') == RestoreSourceMissing ]]"
  status_contains "$NS" stray '{.status.conditions[?(@.type=="Ready")].message}' "backups-nosuch does not exist"
  if kubectl -n "$NS" get statefulset stray >/dev/null 2>&1; then echo "stray started without its data"; return 1; fi
  has_event "$NS" RestoreSourceMissing
  kubectl -n "$NS" patch hellostateful stray --type=json -p '[{"op": "remove", "path": "/spec/restoreFrom"}]' >/dev/null
  wait_for "stray Ready on empty volumes" 120 app_ready "$NS" stray || { on_fail "$NS"; return 1; }
  [[ $(jp "$NS" stray '{.status.isRestored}') == false ]]
  [[ $(jp "$NS" stray '{.status.conditions[?(@.type=="Restoring")].reason}') == NotRestored ]]
  # A backup id that does not exist fails the restore with the mover's words.
  hs create stray2 --from-backup demo/20000101T000000Z >/dev/null 2>&1
  wait_for "stray2's restore failed" 120 bash -c \
    "[[ \$(kubectl -n '$NS' get hellostateful stray2 -o jsonpath='{.status.conditions[?(@.type==\"Restoring\")].reason}') == RestoreFailed ]]" ||
    { on_fail "$NS"; return 1; }
  status_contains "$NS" stray2 '{.status.conditions[?(@.type=="Restoring")].message}' "20000101T000000Z"
  status_contains "$NS" stray2 '{.status.conditions[?(@.type=="Restoring")].message}' "spec.restoreFrom"
  if kubectl -n "$NS" get statefulset stray2 >/dev/null 2>&1; then echo "stray2 started without its data"; return 1; fi
  kubectl -n "$NS" delete hellostateful stray stray2 --wait=true --timeout=120s >/dev/null
}

test_create_from_backup_of_a_deleted_app_brings_its_newest_data() {
  local newest
  # demo was deleted above; its backups were kept.
  newest=$(backups_of "$NS" demo | tail -n1)
  [[ -n $newest ]]
  hs create copy2 --from-backup demo 2>/dev/null
  hs get copy2 -o json | jq -e '.spec.restoreFrom == {"name": "demo"}' >/dev/null
  wait_for "copy2 Ready" 180 app_ready "$NS" copy2 || { on_fail "$NS"; return 1; }
  status_contains "$NS" copy2 '{.status.conditions[?(@.type=="Restoring")].message}' "backup $newest of app demo"
  starts_with_file "$(host_log "$NS" copy2 0)" "$BACKUP_ROOT/$NS/demo/$newest/0/stateful.log" ||
    { echo "copy2 does not start from $newest"; return 1; }
}

test_delete_says_backups_are_kept() {
  local out
  expect_fail "--yes" hs delete demo </dev/null
  out=$(hs delete demo --yes) || { echo "$out"; return 1; }
  [[ $out == *"Its live data is wiped. Its backups are kept in node directory /tmp/backup"* ]] || { echo "$out"; return 1; }
  # It returned once the reconciler had cleaned up and released the app.
  if kubectl -n "$NS" get hellostateful demo >/dev/null 2>&1; then echo "delete returned before demo was gone"; return 1; fi
  has_backup "$NS" demo
}

# Without a running reconciler the app's finalizer holds it: delete warns before it asks,
# and says why it stopped waiting, instead of hanging until its timeout.
test_delete_without_a_running_reconciler_says_why_the_app_stays() {
  local out
  hs create held --replicas 1
  wait_for "held Ready" 120 app_ready "$NS" held || { on_fail "$NS"; return 1; }
  kubectl -n "$RECONCILER_NS" scale deployment/hellostateful-reconciler --replicas=0 >/dev/null
  trap "kubectl -n '$RECONCILER_NS' scale deployment/hellostateful-reconciler --replicas=1 >/dev/null" EXIT
  wait_for "no reconciler available" 60 bash -c "[[ -z \$(kubectl -n '$RECONCILER_NS' get deployment hellostateful-reconciler -o jsonpath='{.status.availableReplicas}') ]]"
  expect_fail "the app and its data stay until it runs again" hs delete held --yes --timeout 5m
  out=$(hs delete held --yes --wait=false 2>&1) || { echo "$out"; return 1; }
  [[ $out == *"Warning: the reconciler Deployment"*"has no available pod"* ]] || { echo "$out"; return 1; }
  kubectl -n "$NS" get hellostateful held >/dev/null
  kubectl -n "$RECONCILER_NS" scale deployment/hellostateful-reconciler --replicas=1 >/dev/null
  kubectl -n "$RECONCILER_NS" rollout status deployment/hellostateful-reconciler --timeout=120s >/dev/null
  wait_for "held gone once the reconciler runs" 120 bash -c "! kubectl -n '$NS' get hellostateful held >/dev/null 2>&1"
}

test_backups_of_a_deleted_app_are_listed_then_deleted_on_request() {
  local out
  # demo was deleted above: its catalog is still there, read through its backup claim.
  hs backups demo -o json | jq -e 'length >= 1' >/dev/null || { hs backups demo; return 1; }
  # Created again and deleted with --delete-backups: the snapshots, their claim and their
  # volume go, after the reconciler purged them.
  hs create demo --replicas 1
  wait_for "demo Ready" 120 app_ready "$NS" demo || { on_fail "$NS"; return 1; }
  has_backup "$NS" demo
  # The status of the new demo shows its own events, not the deleted one's.
  has_event "$NS" Deleted
  [[ $(hs status demo -o json | jq '[.events[] | select(.reason == "Deleted")] | length') == 0 ]] ||
    { echo "status shows the deleted app's events"; hs status demo; return 1; }
  expect_fail "--yes" hs delete demo --delete-backups </dev/null
  out=$(hs delete demo --delete-backups --yes -o name) || { echo "$out"; return 1; }
  [[ $out == hellostateful.hello-stateful.example.com/demo ]] || { echo "$out"; return 1; }
  if kubectl -n "$NS" get hellostateful demo >/dev/null 2>&1; then echo "delete returned before demo was gone"; return 1; fi
  if has_backup "$NS" demo; then echo "backups left: $(backups_of "$NS" demo)"; return 1; fi
  wait_for "backup claim gone" 60 bash -c "! kubectl -n '$NS' get pvc backups-demo >/dev/null 2>&1"
  wait_for "backup volume gone" 60 bash -c "[[ -z \$(kubectl get pv -o name -l app.kubernetes.io/instance=demo,app.kubernetes.io/component=backup,hello-stateful.example.com/namespace='$NS') ]]"
  has_event "$NS" Deleted
}

# Scheduled backups that keep failing (their target is full): once two scheduled runs pass
# without a successful backup the app says so (BackupOverdue in status, an event, `list`,
# the reconciler's per-app metric), and says so no more once a backup succeeds again.
test_failing_scheduled_backups_are_reported_overdue_until_one_succeeds() {
  local ns metrics
  ns=$(new_ns late)
  mkdir -p "$SMALL_ROOT/$ns"
  mount -t tmpfs -o size=256k tmpfs "$SMALL_ROOT/$ns"
  trap "cleanup_ns '$ns'; umount '$SMALL_ROOT/$ns'; rmdir '$SMALL_ROOT/$ns'" EXIT
  app_yaml late "{\"replicas\": 1, \"backupSchedule\": \"* * * * *\", \"backup\": {\"target\": {\"hostPath\": \"$SMALL_ROOT\"}}}" |
    kubectl -n "$ns" apply -f - >/dev/null
  wait_for "late Ready" 120 app_ready "$ns" late || { on_fail "$ns"; return 1; }
  kubectl -n "$ns" exec late-0 -c app -- dd if=/dev/urandom of=/usr/share/hello/big bs=1024 count=1024 2>/dev/null
  wait_for "BackupOverdue" 240 status_contains "$ns" late \
    '{.status.conditions[?(@.type=="BackupOverdue")].status}' True || { on_fail "$ns"; return 1; }
  status_contains "$ns" late '{.status.conditions[?(@.type=="BackupOverdue")].message}' "have passed"
  has_event "$ns" BackupOverdue
  "$HS_PLUGIN" -n "$ns" list | grep -q "(overdue)" || { "$HS_PLUGIN" -n "$ns" list; return 1; }
  metrics=$(kubectl get --raw "/api/v1/namespaces/$RECONCILER_NS/services/hellostateful-reconciler-metrics:8080/proxy/metrics")
  grep -qx "hellostateful_backup_overdue{namespace=\"$ns\",name=\"late\"} 1" <<<"$metrics" ||
    { grep "backup_overdue" <<<"$metrics"; return 1; }
  kubectl -n "$ns" exec late-0 -c app -- rm /usr/share/hello/big
  wait_for "BackupOverdue False after a backup succeeded" 180 status_contains "$ns" late \
    '{.status.conditions[?(@.type=="BackupOverdue")].status}' False || { on_fail "$ns"; return 1; }
  has_event "$ns" BackupsOnTime
  ! "$HS_PLUGIN" -n "$ns" list | grep -q "(overdue)"
}

# Last: it replaces the running reconciler for a minute, and puts it back. Installs keep the
# settings an admin changed (here moverStartSeconds) unless a flag sets them.
test_install_waits_names_an_image_the_nodes_cannot_pull_and_keeps_the_admins_settings() {
  local good out start
  good=$(kubectl -n "$RECONCILER_NS" get configmap hellostateful-settings -o jsonpath='{.data.moverImage}')
  start=$(kubectl -n "$RECONCILER_NS" get configmap hellostateful-settings -o jsonpath='{.data.moverStartSeconds}')
  kubectl -n "$RECONCILER_NS" patch configmap hellostateful-settings --type merge -p '{"data": {"moverStartSeconds": "75"}}' >/dev/null
  if out=$("$HS_PLUGIN" install --image hellostateful.invalid/reconciler:0.0.0 --timeout 3m 2>&1); then
    echo "install succeeded with an image nobody can pull:"; echo "$out"; "$HS_PLUGIN" install --image "$good"; return 1
  fi
  echo "$out" | tail -n 2
  local ok=1
  [[ $out == *"the reconciler cannot start: ImagePullBackOff (image hellostateful.invalid/reconciler:0.0.0)"* && $out == *"--image"* ]] || ok=0
  # Put the real image back; install waits until its pod is the available one.
  "$HS_PLUGIN" install --image "$good" >/dev/null
  ((ok)) || { echo "unexpected output: $out"; return 1; }
  [[ $(kubectl -n "$RECONCILER_NS" get deploy hellostateful-reconciler -o jsonpath='{.status.availableReplicas}') == 1 ]]
  local kept before
  kept=$(kubectl -n "$RECONCILER_NS" get configmap hellostateful-settings -o jsonpath='{.data.moverStartSeconds}')
  kubectl -n "$RECONCILER_NS" patch configmap hellostateful-settings --type merge -p "{\"data\": {\"moverStartSeconds\": \"${start:-60}\"}}" >/dev/null
  [[ $kept == 75 ]] || { echo "moverStartSeconds after two installs: $kept"; return 1; }
  # The same image again, named by a tag: it may be a rebuilt one, so the pods are replaced.
  before=$(live_pods reconciler)
  out=$("$HS_PLUGIN" install 2>&1) || { echo "$out"; return 1; }
  [[ $out == *"deployment.apps/hellostateful-reconciler restarted: its image $good is named by a tag"* ]] ||
    { echo "no restart said: $out"; return 1; }
  [[ -n $(live_pods reconciler) && $(live_pods reconciler) != "$before" ]] || { echo "the reconciler's pod was not replaced"; return 1; }
}

# live_pods COMPONENT: the uids of the component's pods that are not being deleted.
live_pods() {
  kubectl -n "$RECONCILER_NS" get pods -l "app.kubernetes.io/name=hellostateful,app.kubernetes.io/component=$1" -o json |
    jq -r '[.items[] | select(.metadata.deletionTimestamp == null) | .metadata.uid] | sort | join(" ")'
}

run_test dry_runs_change_nothing test_dry_runs_change_nothing
run_test create_list_get_in_every_format test_create_list_get_in_every_format
run_test status_shows_children_conditions_and_events test_status_shows_children_conditions_and_events
run_test backup_waits_for_its_id_and_backups_lists_it test_backup_waits_for_its_id_and_backups_lists_it
run_test a_full_backup_reads_every_file_again test_a_full_backup_reads_every_file_again
run_test a_backup_reads_every_file_again_once_the_last_full_read_is_old test_a_backup_reads_every_file_again_once_the_last_full_read_is_old
run_test report_archives_the_app_its_children_events_and_logs test_report_archives_the_app_its_children_events_and_logs
run_test restore_refuses_without_a_terminal_or_yes test_restore_refuses_without_a_terminal_or_yes
run_test restore_with_yes_waits_until_done test_restore_with_yes_waits_until_done
run_test logs_show_the_apps_file test_logs_show_the_apps_file
run_test version_reports_plugin_and_reconciler test_version_reports_plugin_and_reconciler
run_test forbidden_says_which_verb_on_which_resource test_forbidden_says_which_verb_on_which_resource
run_test kubectl_global_flags_reach_the_api_server test_kubectl_global_flags_reach_the_api_server
run_test invalid_spec_shows_the_apis_reason test_invalid_spec_shows_the_apis_reason
run_test create_from_backup_restores_an_older_backup_of_another_app test_create_from_backup_restores_an_older_backup_of_another_app
run_test backups_describe_verify_and_delete_one test_backups_describe_verify_and_delete_one
run_test create_from_backup_refuses_a_source_without_backups test_create_from_backup_refuses_a_source_without_backups
run_test delete_says_backups_are_kept test_delete_says_backups_are_kept
run_test create_from_backup_of_a_deleted_app_brings_its_newest_data test_create_from_backup_of_a_deleted_app_brings_its_newest_data
run_test --alone delete_without_a_running_reconciler_says_why_the_app_stays test_delete_without_a_running_reconciler_says_why_the_app_stays
run_test backups_of_a_deleted_app_are_listed_then_deleted_on_request test_backups_of_a_deleted_app_are_listed_then_deleted_on_request
run_test failing_scheduled_backups_are_reported_overdue_until_one_succeeds test_failing_scheduled_backups_are_reported_overdue_until_one_succeeds
run_test --alone install_waits_names_an_image_the_nodes_cannot_pull_and_keeps_the_admins_settings test_install_waits_names_an_image_the_nodes_cannot_pull_and_keeps_the_admins_settings
summary
