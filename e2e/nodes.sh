#!/usr/bin/env bash
# Real clusters have many nodes. Extra Node objects (no kubelet behind them) sort before the
# test cluster's one real node: a tainted control plane, a cordoned node and a NotReady one.
# Their Leases are renewed while a test runs, so the node lifecycle controller keeps the
# "Ready" ones Ready and each decision is made for the reason the test names.
set -uo pipefail
E2E_SUITE=nodes
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/hs.sh"

REAL_NODE=hellostateful-node
CONTROL_PLANE=aaa-hs-control-plane
CORDONED=aab-hs-cordoned
NOT_READY=aac-hs-notready
# Ready and free, made only while a test needs a better-looking node than the real one.
SPARE=aad-hs-spare
FAKE_NODES=("$CONTROL_PLANE" "$CORDONED" "$NOT_READY" "$SPARE")

now() { date -u +%Y-%m-%dT%H:%M:%S.%6NZ; }

# fake_node NAME READY SPEC_JSON: a Node with the given spec, Ready or not.
fake_node() {
  local name=$1 ready=$2 spec=$3 status
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata: {name: $name, labels: {kubernetes.io/hostname: $name, hellostateful-e2e: fake}}
spec: $spec
EOF
  status=$([[ $ready == true ]] && echo True || echo False)
  kubectl patch node "$name" --subresource=status --type=merge -p "{\"status\": {\"conditions\": [{\"type\": \"Ready\", \"status\": \"$status\", \"reason\": \"E2E\", \"lastHeartbeatTime\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\", \"lastTransitionTime\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"}]}}" >/dev/null
}

# renew_leases: keeps the fake nodes' heartbeats fresh until killed.
renew_leases() {
  local name
  while :; do
    for name in "$CONTROL_PLANE" "$CORDONED" "$SPARE"; do
      kubectl -n kube-node-lease apply -f - >/dev/null 2>&1 <<EOF
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: $name}
spec: {holderIdentity: $name, leaseDurationSeconds: 40, renewTime: "$(now)"}
EOF
    done
    sleep 5
  done
}

RENEWER=""
setup_nodes() {
  fake_node "$CONTROL_PLANE" true '{"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}'
  fake_node "$CORDONED" true '{"unschedulable": true}'
  fake_node "$NOT_READY" false '{}'
  renew_leases &
  RENEWER=$!
}
teardown_nodes() {
  [[ -z $RENEWER ]] || kill "$RENEWER" 2>/dev/null
  kubectl delete node "${FAKE_NODES[@]}" --ignore-not-found --wait=false >/dev/null 2>&1
  kubectl -n kube-node-lease delete lease "${FAKE_NODES[@]}" --ignore-not-found >/dev/null 2>&1
}
trap teardown_nodes EXIT

node_is_ready() { [[ $(kubectl get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]; }


# pinned_to NS NAME NODE / ready_reason_is NS NAME REASON: conditions to wait for.
pinned_to() { [[ $(pinned_node "$1" "$2") == "$3" ]]; }
ready_reason_is() { [[ $(jp "$1" "$2" '{.status.conditions[?(@.type=="Ready")].reason}') == "$3" ]]; }

# fake_nodes_as_set_up: the tainted and the cordoned node are Ready, the third is not.
fake_nodes_as_set_up() {
  node_is_ready "$CONTROL_PLANE" || { echo "$CONTROL_PLANE is not Ready"; return 1; }
  node_is_ready "$CORDONED" || { echo "$CORDONED is not Ready"; return 1; }
  if node_is_ready "$NOT_READY"; then echo "$NOT_READY is Ready"; return 1; fi
}

test_the_data_node_is_one_the_app_can_run_on() {
  local ns
  ns=$(new_ns place)
  trap "cleanup_ns '$ns'" EXIT
  fake_nodes_as_set_up
  app_yaml web '{"replicas": 2}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "app Ready" 120 app_ready "$ns" web || { on_fail "$ns"; return 1; }
  [[ $(jp "$ns" web '{.status.nodeName}') == "$REAL_NODE" ]]
  [[ $(pinned_node "$ns" web) == "$REAL_NODE" ]]
  [[ $(kubectl -n "$ns" get pod web-0 -o jsonpath='{.spec.nodeName}') == "$REAL_NODE" ]]
  # The decision was made while the tainted and the cordoned nodes were Ready.
  fake_nodes_as_set_up
}

test_no_fitting_node_is_reported_with_each_reason() {
  local ns message
  ns=$(new_ns nofit)
  trap "cleanup_ns '$ns'" EXIT
  app_yaml pinned "{\"replicas\": 1, \"nodeSelector\": {\"kubernetes.io/hostname\": \"$CONTROL_PLANE\"}}" |
    kubectl -n "$ns" apply -f - >/dev/null
  wait_for "Ready=False NoNode" 60 ready_reason_is "$ns" pinned NoNode || { on_fail "$ns"; return 1; }
  fake_nodes_as_set_up
  message=$(jp "$ns" pinned '{.status.conditions[?(@.type=="Ready")].message}')
  echo "status: $message"
  [[ $message == *"had a taint the app does not tolerate (node-role.kubernetes.io/control-plane:NoSchedule)"* ]]
  [[ $message == *"1 cordoned (unschedulable)"* && $message == *"not Ready"* && $message == *"did not match the app's nodeSelector"* ]]
  [[ -z $(kubectl get pv -l "hello-stateful.example.com/namespace=$ns,app.kubernetes.io/component=storage" -o name) ]]
}

test_a_toleration_and_a_selector_pin_the_data_to_a_tainted_node() {
  local ns
  ns=$(new_ns tolerate)
  trap "kubectl delete namespace '$ns' --wait=false >/dev/null 2>&1; cleanup_ns '$ns'" EXIT
  app_yaml cp "{\"replicas\": 1, \"nodeSelector\": {\"kubernetes.io/hostname\": \"$CONTROL_PLANE\"},
    \"tolerations\": [{\"key\": \"node-role.kubernetes.io/control-plane\", \"operator\": \"Exists\", \"effect\": \"NoSchedule\"}]}" |
    kubectl -n "$ns" apply -f - >/dev/null
  wait_for "volume pinned to the control plane" 60 pinned_to "$ns" cp "$CONTROL_PLANE" || { on_fail "$ns"; return 1; }
  [[ $(jp "$ns" cp '{.status.nodeName}') == "$CONTROL_PLANE" ]]
  # The pod carries the toleration and the selector (no kubelet runs it: it stays Pending).
  wait_for "pod made" 60 kubectl -n "$ns" get pod cp-0 >/dev/null
  [[ $(kubectl -n "$ns" get pod cp-0 -o jsonpath='{.spec.nodeSelector.kubernetes\.io/hostname}') == "$CONTROL_PLANE" ]]
  [[ $(kubectl -n "$ns" get pod cp-0 -o jsonpath='{.spec.tolerations[?(@.key=="node-role.kubernetes.io/control-plane")].operator}') == Exists ]]
}

# Backups in a node directory are on one node: an app restored from them (its own, or
# another app's by spec.restoreFrom) must have its volumes made there, not on the node that
# sorts first.
test_an_app_restored_from_node_directory_backups_is_made_on_their_node() {
  local ns
  ns=$(new_ns onnode)
  trap "kubectl delete node '$SPARE' --ignore-not-found --wait=false >/dev/null 2>&1; cleanup_ns '$ns'" EXIT
  app_yaml src '{"replicas": 1}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "src Ready" 120 app_ready "$ns" src || { on_fail "$ns"; return 1; }
  wait_for "src wrote" 60 lines_at_least "$(host_log "$ns" src 0)" 1
  "$HS_PLUGIN" -n "$ns" backup src --timeout 3m >/dev/null || { on_fail "$ns"; return 1; }
  fake_node "$SPARE" true '{}'
  # The reconciler learns of the spare's Ready status from its Node watch, which is not
  # ordered with the app watch: an app made a moment later may be placed before it knows.
  # An app that only the spare fits is placed once it does.
  app_yaml known '{"replicas": 0, "nodeSelector": {"kubernetes.io/hostname": "'"$SPARE"'"}}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "the spare known to the reconciler" 60 bash -c "[[ \$(kubectl -n '$ns' get hellostateful known -o jsonpath='{.status.nodeName}') == '$SPARE' ]]"
  # Without backups to restore, the spare node (first by name, Ready, free) is chosen.
  app_yaml fresh '{"replicas": 0}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "fresh placed" 60 bash -c "[[ -n \$(kubectl -n '$ns' get hellostateful fresh -o jsonpath='{.status.nodeName}') ]]"
  [[ $(jp "$ns" fresh '{.status.nodeName}') == "$SPARE" ]] || { echo "fresh is on $(jp "$ns" fresh '{.status.nodeName}')"; return 1; }
  # From src's backups: on the node that holds them, running, with src's data.
  app_yaml copy '{"replicas": 1, "restoreFrom": {"name": "src"}}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "copy Ready" 180 app_ready "$ns" copy || { on_fail "$ns"; return 1; }
  [[ $(pinned_node "$ns" copy) == "$REAL_NODE" && $(jp "$ns" copy '{.status.nodeName}') == "$REAL_NODE" ]]
  [[ $(jp "$ns" copy '{.status.isRestored}') == true ]]
  head -n1 "$(host_log "$ns" copy 0)" | cmp -s - <(head -n1 "$BACKUP_ROOT/$ns/src/$(backups_of "$ns" src | tail -n1)/0/stateful.log")
  # src deleted and created again with restoreFromExisting: back on its backups' node.
  kubectl -n "$ns" delete hellostateful src --wait=true --timeout=120s >/dev/null
  app_yaml src '{"replicas": 1, "restoreFromExisting": true}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "src Ready again" 180 app_ready "$ns" src || { on_fail "$ns"; return 1; }
  [[ $(pinned_node "$ns" src) == "$REAL_NODE" && $(jp "$ns" src '{.status.isRestored}') == true ]]
  node_is_ready "$SPARE"
}

setup_nodes
run_test the_data_node_is_one_the_app_can_run_on test_the_data_node_is_one_the_app_can_run_on
run_test no_fitting_node_is_reported_with_each_reason test_no_fitting_node_is_reported_with_each_reason
run_test a_toleration_and_a_selector_pin_the_data_to_a_tainted_node test_a_toleration_and_a_selector_pin_the_data_to_a_tainted_node
run_test an_app_restored_from_node_directory_backups_is_made_on_their_node test_an_app_restored_from_node_directory_backups_is_made_on_their_node
summary
