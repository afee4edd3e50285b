#!/usr/bin/env bash
# Monitoring (manifests/monitoring): the alerts pass promtool's checks and unit tests (each
# fires when it should and resolves), the component renders with the manifests, and a real
# Prometheus (Debian's) scrapes the reconciler in the test cluster with the alerts loaded,
# sees an app's per-app series, every metric the alerts and the Grafana dashboard name is
# one the reconciler exports, every dashboard query runs, no alert fires while all is well,
# a failed restore fires its alert, and an app whose scheduled backups keep failing has its
# overdue alert pending until one succeeds.
set -uo pipefail
E2E_SUITE=monitoring
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=hs.sh
source "$(dirname "${BASH_SOURCE[0]}")/hs.sh"

MONITORING=$E2E_ROOT/manifests/monitoring
WORK=$(mktemp -d /tmp/monitoring-e2e.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# The rules of the PrometheusRule, as promtool and Prometheus read them.
python3 -c 'import sys, yaml; print(yaml.safe_dump(yaml.safe_load(open(sys.argv[1]))["spec"]))' \
  "$MONITORING/alerts.yaml" >"$WORK/rules.yaml"
# A port of its own: Debian's package may run a Prometheus of its own on 9090.
PROMETHEUS_PORT=19090
metrics() {
  kubectl get --raw "/api/v1/namespaces/$RECONCILER_NS/services/hellostateful-reconciler-metrics:8080/proxy/metrics"
}
prometheus_api() { curl -fsS --max-time 5 "http://127.0.0.1:$PROMETHEUS_PORT/api/v1/$1"; }

test_the_alerts_pass_promtools_checks_and_unit_tests() {
  promtool check rules "$WORK/rules.yaml"
  cp "$MONITORING/alerts_test.yaml" "$WORK/"
  (cd "$WORK" && promtool test rules alerts_test.yaml)
}

test_the_component_renders_with_the_manifests() {
  local out
  mkdir -p "$WORK/overlay"
  cp -r "$E2E_ROOT/manifests" "$WORK/overlay/base"
  printf 'resources: [base]\ncomponents: [base/monitoring]\n' >"$WORK/overlay/kustomization.yaml"
  out=$(kubectl kustomize "$WORK/overlay")
  grep -q '^kind: ServiceMonitor$' <<<"$out" && grep -q '^kind: PrometheusRule$' <<<"$out"
  # The ServiceMonitor selects the metrics Service by its labels; the dashboard is in a
  # ConfigMap that Grafana's sidecar loads, beside the reconciler.
  python3 -c '
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")
service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "hellostateful-reconciler-metrics")
wanted = monitor["spec"]["selector"]["matchLabels"]
assert all(service["metadata"]["labels"].get(k) == v for k, v in wanted.items()), (wanted, service["metadata"]["labels"])
assert monitor["spec"]["endpoints"][0]["port"] in [p["name"] for p in service["spec"]["ports"]]
dashboard = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "hellostateful-dashboard")
assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1", dashboard["metadata"]
assert dashboard["metadata"]["namespace"] == "hellostateful-system", dashboard["metadata"]
panels = json.loads(dashboard["data"]["dashboard.json"])["panels"]
assert panels and all(p["targets"] and all(t["expr"] for t in p["targets"]) for p in panels), panels
' <<<"$out"
}

# only_exported_metrics_are_named: every metric the alerts and the dashboard name is one the
# reconciler exports (the per-app ones once an app has a successful backup).
only_exported_metrics_are_named() {
  local exported name
  exported=$(metrics | awk '$1 == "#" && $2 == "TYPE" { print $3 }')
  for name in $(grep -oh 'hellostateful_[a-z_]*' "$WORK/rules.yaml" "$MONITORING/dashboard.json" | sort -u); do
    # A counter's series carry _total, a histogram's _bucket; their TYPE lines do not.
    name=${name%_total} name=${name%_bucket}
    grep -qx "$name" <<<"$exported" ||
      { echo "the alerts or the dashboard name $name, which the reconciler does not export"; return 1; }
  done
}

# dashboard_queries_run: each query of the dashboard runs on the real Prometheus, and those
# of the per-app panel find the app NS's series.
dashboard_queries_run() {
  local expr answer
  while IFS= read -r expr; do
    answer=$(curl -fsS --max-time 5 "http://127.0.0.1:$PROMETHEUS_PORT/api/v1/query" --data-urlencode "query=$expr") ||
      { echo "Prometheus refused the dashboard's query: $expr"; return 1; }
    jq -e '.status == "success"' <<<"$answer" >/dev/null || { echo "$expr: $answer"; return 1; }
    if [[ $expr == *last_success_timestamp* || $expr == hellostateful_backup_last_bytes ||
      $expr == hellostateful_backup_last_duration_seconds || $expr == hellostateful_snapshots ]]; then
      jq -e --arg ns "$1" '[.data.result[] | select(.metric.namespace == $ns)] | length == 1' <<<"$answer" >/dev/null ||
        { echo "$expr has no series of $1: $answer"; return 1; }
    fi
  done < <(jq -r '.panels[].targets[].expr' "$MONITORING/dashboard.json")
}

scraped() {
  prometheus_api 'query?query=up%7Bjob%3D%22hellostateful-reconciler-metrics%22%7D' |
    jq -e '.data.result[0].value[1] == "1"' >/dev/null
}
# value_of QUERY: the value of the one series QUERY finds.
value_of() {
  curl -fsS --max-time 5 "http://127.0.0.1:$PROMETHEUS_PORT/api/v1/query" --data-urlencode "query=$1" |
    jq -r 'if (.data.result | length) == 1 then .data.result[0].value[1] else "\(.data.result | length) series" end'
}
series_of() {
  prometheus_api "query?query=hellostateful_backup_last_success_timestamp_seconds%7Bnamespace%3D%22$1%22%7D" |
    jq -e '.data.result | length == 1' >/dev/null
}
test_a_real_prometheus_scrapes_the_reconciler_with_the_alerts_loaded() {
  local ns ip
  ns=$(new_ns mon)
  trap "[[ -z \${PROMETHEUS_PID:-} ]] || kill \$PROMETHEUS_PID 2>/dev/null; cleanup_ns '$ns'; umount '$SMALL_ROOT/$ns' 2>/dev/null; rmdir '$SMALL_ROOT/$ns' 2>/dev/null" EXIT
  app_yaml watched '{"replicas": 1, "backupSchedule": "0 0 1 1 *"}' | kubectl -n "$ns" apply -f - >/dev/null
  # Backed up on demand only, and overdue once its newest backup (before the first: the app)
  # is a minute old: checked below, once that minute has passed.
  app_yaml ondemand '{"replicas": 1, "backup": {"maxAgeSeconds": 60}}' | kubectl -n "$ns" apply -f - >/dev/null
  ip=$(kubectl -n "$RECONCILER_NS" get service hellostateful-reconciler-metrics -o jsonpath='{.spec.clusterIP}')
  # The job name is the one the ServiceMonitor gives (the Service's), which the alerts use.
  cat >"$WORK/prometheus.yml" <<EOF
global: {scrape_interval: 2s, evaluation_interval: 2s}
rule_files: [$WORK/rules.yaml]
scrape_configs:
  - job_name: hellostateful-reconciler-metrics
    static_configs: [{targets: ["$ip:8080"]}]
EOF
  prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/data" \
    --web.listen-address="127.0.0.1:$PROMETHEUS_PORT" >"$WORK/prometheus.log" 2>&1 &
  PROMETHEUS_PID=$!
  wait_for "Prometheus scrapes the reconciler" 60 scraped || { tail -n 20 "$WORK/prometheus.log"; return 1; }
  prometheus_api rules | jq -e '[.data.groups[].rules[] | select(.health == "ok")] | length == 5' >/dev/null ||
    { prometheus_api rules; return 1; }
  wait_for "watched Ready" 120 app_ready "$ns" watched || { on_fail "$ns"; return 1; }
  [[ $(request "$ns" watched backup) == Succeeded ]] || { on_fail "$ns"; return 1; }
  wait_for "watched's last successful backup in Prometheus" 60 series_of "$ns"
  # Its per-app series say what its status says: one backup succeeded, none runs, and the
  # backup's retention left one snapshot, started at its id's time.
  local of_app="namespace=\"$ns\",name=\"watched\"" id check
  id=$(kubectl -n "$ns" get hellostateful watched -o jsonpath='{.status.lastBackup.id}')
  for check in "hellostateful_backups_total{$of_app,result=\"succeeded\"}=1" \
    "hellostateful_backups_total{$of_app,result=\"failed\"}=0" \
    "hellostateful_operation_in_flight{$of_app,operation=\"backup\"}=0" \
    "hellostateful_snapshots{$of_app}=1" \
    "hellostateful_snapshot_oldest_timestamp_seconds{$of_app}=$(date -u -d "$(sed -E 's/^(....)(..)(..)T(..)(..)(..)Z.*/\1-\2-\3 \4:\5:\6/' <<<"$id")" +%s)" \
    "hellostateful_backup_last_bytes{$of_app}=$(kubectl -n "$ns" get hellostateful watched -o jsonpath='{.status.lastBackup.bytes}')"; do
    [[ $(value_of "${check%=*}") == "${check##*=}" ]] ||
      { echo "${check%=*} is $(value_of "${check%=*}"), not ${check##*=}"; metrics | grep "$ns"; return 1; }
  done
  only_exported_metrics_are_named
  dashboard_queries_run "$ns"
  # All is well here: the reconciler answers and runs, and this app is not overdue (other
  # suites' apps, beside this one, may fail backups and restores on purpose).
  prometheus_api alerts | jq -e --arg ns "$ns" '[.data.alerts[] | select(
    (.labels.alertname | test("Reconciler")) or (.labels.namespace == $ns and .labels.name == "watched"))] |
    length == 0' >/dev/null || { prometheus_api alerts; return 1; }
  # A restore of a backup that does not exist fails: the real rule, on the real metric,
  # fires for this app (other suites' apps may fail restores beside it: theirs are apart).
  [[ $(request "$ns" watched restore hello-stateful.example.com/restore-from=20000101T000000Z) == Failed ]] ||
    { on_fail "$ns"; return 1; }
  wait_for "HelloStatefulRestoreFailed firing for $ns/watched" 60 restore_alert_firing "$ns" ||
    { prometheus_api alerts; prometheus_api 'query?query=hellostateful_restores_total'; return 1; }

  # No schedule, a max age of a minute: overdue once the app is a minute old without a
  # backup, in status and on the real metric and rule; on time again once one succeeds.
  wait_for "HelloStatefulBackupOverdue pending for ondemand" 240 overdue_alert "$ns" ondemand pending ||
    { prometheus_api alerts; on_fail "$ns"; return 1; }
  status_contains "$ns" ondemand '{.status.conditions[?(@.type=="BackupOverdue")].message}' \
    "more than backup.maxAgeSeconds (60s) ago"
  [[ $(request "$ns" ondemand backup) == Succeeded ]] || { on_fail "$ns"; return 1; }
  [[ $(jp "$ns" ondemand '{.status.conditions[?(@.type=="BackupOverdue")].status}') == False ]] ||
    { kubectl -n "$ns" get hellostateful ondemand -o yaml; return 1; }
  wait_for "HelloStatefulBackupOverdue gone for ondemand" 30 no_overdue_alert "$ns" ondemand ||
    { prometheus_api alerts; return 1; }

  # Scheduled backups that keep failing (their target's filesystem is too small): the
  # overdue rule holds on the real metric, so its alert is pending (it fires once pending for
  # its `for: 5m`, as promtool's tests check), and it is gone once a backup succeeds.
  mkdir -p "$SMALL_ROOT/$ns"
  mount -t tmpfs -o size=256k tmpfs "$SMALL_ROOT/$ns" || return 1
  app_yaml late "{\"replicas\": 1, \"backupSchedule\": \"* * * * *\", \"backup\": {\"target\": {\"hostPath\": \"$SMALL_ROOT\"}}}" |
    kubectl -n "$ns" apply -f - >/dev/null
  wait_for "late Ready" 120 app_ready "$ns" late || { on_fail "$ns"; return 1; }
  kubectl -n "$ns" exec late-0 -c app -- dd if=/dev/urandom of=/usr/share/hello/big bs=1024 count=1024 2>/dev/null
  wait_for "HelloStatefulBackupOverdue pending for late" 300 overdue_alert "$ns" late pending ||
    { prometheus_api alerts; on_fail "$ns"; return 1; }
  kubectl -n "$ns" exec late-0 -c app -- rm /usr/share/hello/big
  wait_for "HelloStatefulBackupOverdue gone once a backup succeeded" 180 no_overdue_alert "$ns" late ||
    { prometheus_api alerts; on_fail "$ns"; return 1; }
}
# overdue_alert NS NAME STATE: HelloStatefulBackupOverdue is in STATE for app NS/NAME.
overdue_alert() {
  prometheus_api alerts | jq -e --arg ns "$1" --arg name "$2" --arg state "$3" '[.data.alerts[] | select(
    .labels.alertname == "HelloStatefulBackupOverdue" and .labels.namespace == $ns
    and .labels.name == $name and .state == $state)] | length == 1' >/dev/null
}
no_overdue_alert() {
  prometheus_api alerts | jq -e --arg ns "$1" --arg name "$2" '[.data.alerts[] | select(
    .labels.alertname == "HelloStatefulBackupOverdue" and .labels.namespace == $ns
    and .labels.name == $name)] | length == 0' >/dev/null
}
restore_alert_firing() {
  prometheus_api alerts | jq -e --arg ns "$1" '[.data.alerts[] | select(.labels.alertname == "HelloStatefulRestoreFailed"
    and .labels.namespace == $ns and .labels.name == "watched" and .state == "firing")] | length == 1' >/dev/null
}

run_test the_alerts_pass_promtools_checks_and_unit_tests test_the_alerts_pass_promtools_checks_and_unit_tests
run_test the_component_renders_with_the_manifests test_the_component_renders_with_the_manifests
run_test a_real_prometheus_scrapes_the_reconciler_with_the_alerts_loaded test_a_real_prometheus_scrapes_the_reconciler_with_the_alerts_loaded
summary
