#!/usr/bin/env bash
# The ValidatingAdmissionPolicies of manifests/admission-policy.yaml bound a compromised
# reconciler: acting as its ServiceAccount, each probe below writes (server dry run: nothing
# is stored) a minimal object that breaks one rule and must be refused with that rule's
# message, and the same object made allowed, which must be admitted (the fence is probed with
# real writes of inert objects: dry runs are not fenced). Last, a real app runs,
# backs up and is deleted under the policies: the reconciler's own children are admitted.
#
# E2E_POLICY_AS=USER probes as USER (with group system:masters for the rights) instead of the
# reconciler: for trying a copy of the policies that matches USER before applying them.
set -uo pipefail
E2E_SUITE=policy
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/hs.sh"

RECONCILER_SA=system:serviceaccount:hellostateful-system:hellostateful-reconciler
if [[ -n ${E2E_POLICY_AS:-} ]]; then
  AS=(--as="$E2E_POLICY_AS" --as-group=system:masters)
else
  AS=(--as="$RECONCILER_SA")
fi
SETTINGS=$(kubectl -n "$RECONCILER_NS" get configmap hellostateful-settings -o json)
MOVER=$(jq -r '.data.moverImage' <<<"$SETTINGS")
# The admin's backup roots, one per line.
ROOTS=$(jq -r '.data.backupRoots | split(",")[] | gsub("^\\s+|\\s+$"; "") | select(. != "")' <<<"$SETTINGS")
ROOT=$(head -n 1 <<<"$ROOTS")
# The namespaces where the reconciler may make nothing: its own, the cluster's, the admin's.
SYSTEM_NAMESPACES=("$RECONCILER_NS" kube-system kube-public kube-node-lease)
mapfile -t -O 4 SYSTEM_NAMESPACES < <(jq -r '.data.systemNamespaces // "" | split(",")[] |
  gsub("^\\s+|\\s+$"; "") | select(. != "")' <<<"$SETTINGS")

# The app of the last test, started first so that it is up by then.
APP_NS=$(new_ns policy)
trap 'cleanup_ns "$APP_NS"' EXIT
APP_START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
kubectl -n "$APP_NS" apply -f - >/dev/null \
  <<<"$(app_yaml probe '{"replicas": 1, "restoreFromExisting": false, "backupSchedule": "*/5 * * * *"}')"

# as_reconciler CMD...: kubectl as the reconciler (or E2E_POLICY_AS).
as_reconciler() { kubectl "${AS[@]}" "$@"; }

# refused PATTERN: the object on stdin, created by the reconciler, is refused with PATTERN.
refused() { expect_fail "$1" as_reconciler create --dry-run=server -f -; }

# The admission webhook's refusal of a StatefulSet not controlled by an app of its name
# (admission-webhook.yaml): the probes' zero uid is no app's.
NO_APP_REFUSAL='admission webhook "statefulsets.hello-stateful.example.com" denied the request: StatefulSet hs-policy-probe is not controlled by HelloStateful hs-policy-probe of namespace'

# admitted: the object on stdin, created by the reconciler, is admitted by every policy. The
# probes' StatefulSets name no app's uid, which the webhook then refuses: the
# API server calls webhooks only after every policy admitted the object, so that refusal,
# and no other, counts as admitted here (the webhook is probed on its own below).
admitted() {
  local object out
  object=$(cat)
  out=$(as_reconciler create --dry-run=server -f - <<<"$object" 2>&1) && return 0
  grep -qF "$NO_APP_REFUSAL" <<<"$out" && return 0
  echo "refused, but should be admitted:"; echo "$out"; echo "$object"; return 1
}

# workload KIND [POD_FIELDS] [CONTAINER] [NAMESPACE] [TEMPLATE_METADATA]: a minimal Job,
# CronJob or StatefulSet whose pod runs the mover image within every rule; POD_FIELDS (", a:
# b") are added to its pod spec; CONTAINER, when given, is its only container.
workload() {
  local kind=$1 fields=${2:-} container=${3:-} ns=${4:-default} meta=${5:-}
  local restart=Never
  [[ $kind == StatefulSet ]] && restart=Always
  [[ -n $container ]] || container="{name: c, image: $MOVER, securityContext: {allowPrivilegeEscalation: false}}"
  local pod="{metadata: {labels: {app: hs-policy-probe}$meta}, spec: {restartPolicy: $restart, automountServiceAccountToken: false, containers: [$container]$fields}}"
  # A StatefulSet is controlled by the app it is named after, as the reconciler's are (no app
  # of that name exists: a dry run stores nothing for the garbage collector to delete).
  local owner=""
  [[ $kind == StatefulSet ]] && owner=", ownerReferences: [{apiVersion: hello-stateful.example.com/v1alpha1, kind: HelloStateful"
  [[ $kind == StatefulSet ]] && owner+=", name: hs-policy-probe, uid: 00000000-0000-0000-0000-000000000000, controller: true}]"
  printf 'metadata: {name: hs-policy-probe, namespace: %s%s}\n' "$ns" "$owner"
  case $kind in
    Job) printf 'apiVersion: batch/v1\nkind: Job\nspec: {template: %s}\n' "$pod" ;;
    CronJob) printf 'apiVersion: batch/v1\nkind: CronJob\nspec: {schedule: "*/5 * * * *", jobTemplate: {spec: {template: %s}}}\n' "$pod" ;;
    StatefulSet) printf 'apiVersion: apps/v1\nkind: StatefulSet\nspec: {serviceName: hs-policy-probe, selector: {matchLabels: {app: hs-policy-probe}}, template: %s}\n' "$pod" ;;
  esac
}

# probed_container SECURITY_CONTEXT [CONTAINER_FIELDS]: the container a probe is about.
probed_container() { echo "{name: p, image: $MOVER, securityContext: {$1}${2:-}}"; }

# container_rule PATTERN SECURITY_CONTEXT [CONTAINER_FIELDS] [POD_FIELDS]: refused in
# `containers` and in `initContainers` of every kind of workload.
container_rule() {
  local pattern=$1 sc=$2 fields=${3:-} pod=${4:-} kind probed
  probed=$(probed_container "$sc" "$fields")
  for kind in Job CronJob StatefulSet; do
    workload "$kind" "$pod" "$probed" | refused "$pattern" || { echo "  in containers of a $kind"; return 1; }
    workload "$kind" ", initContainers: [$probed]$pod" | refused "$pattern" ||
      { echo "  in initContainers of a $kind"; return 1; }
  done
}

# container_ok SECURITY_CONTEXT [CONTAINER_FIELDS] [POD_FIELDS]: admitted in both lists.
container_ok() {
  local sc=$1 fields=${2:-} pod=${3:-} kind probed
  probed=$(probed_container "$sc" "$fields")
  for kind in Job CronJob StatefulSet; do
    workload "$kind" "$pod" "$probed" | admitted || { echo "  in containers of a $kind"; return 1; }
    workload "$kind" ", initContainers: [$probed]$pod" | admitted || { echo "  in initContainers of a $kind"; return 1; }
  done
}

test_every_container_runs_unprivileged() {
  local row pattern sc fields pod
  # PATTERN | SECURITY_CONTEXT | CONTAINER_FIELDS | POD_FIELDS
  while IFS='|' read -r pattern sc fields pod; do
    [[ -n $pattern ]] || continue
    container_rule "$pattern" "$sc" "$fields" "$pod"
  done <<'EOF'
never privileged|privileged: true||
sets allowPrivilegeEscalation: false|||
sets allowPrivilegeEscalation: false|allowPrivilegeEscalation: true||
add no capabilities beyond the mover's|allowPrivilegeEscalation: false, capabilities: {add: [CHOWN, SYS_ADMIN]}||
add no capabilities beyond the mover's|allowPrivilegeEscalation: false, capabilities: {add: [NET_RAW]}||
add no capabilities beyond the mover's|allowPrivilegeEscalation: false, capabilities: {add: [ALL]}||
never run Unconfined|allowPrivilegeEscalation: false, seccompProfile: {type: Unconfined}||
never run Unconfined|allowPrivilegeEscalation: false, appArmorProfile: {type: Unconfined}||
keep procMount Default|allowPrivilegeEscalation: false, procMount: Unmasked||, hostUsers: false
open no host ports|allowPrivilegeEscalation: false|, ports: [{containerPort: 8080, hostPort: 8080}]|
EOF
  # The same containers within the rules: the mover's own capabilities, confined, no host port.
  container_ok "allowPrivilegeEscalation: false, privileged: false, capabilities: {drop: [ALL], add: [CHOWN, DAC_OVERRIDE, FOWNER, FSETID]}"
  container_ok "allowPrivilegeEscalation: false, seccompProfile: {type: RuntimeDefault}, appArmorProfile: {type: RuntimeDefault}"
  container_ok "allowPrivilegeEscalation: false, procMount: Default" ", ports: [{containerPort: 8080}]"
  # Pod templates hold no ephemeral containers: the API server itself refuses them (the
  # policy checks them too, should that ever change).
  workload Job ", ephemeralContainers: [$(probed_container "privileged: true")]" |
    refused "ephemeral containers not allowed in pod template"
}

test_pods_never_share_the_nodes_namespaces_or_run_unconfined() {
  local kind row pattern fields meta
  for kind in Job CronJob StatefulSet; do
    # PATTERN | POD_FIELDS | TEMPLATE_METADATA
    while IFS='|' read -r pattern fields meta; do
      [[ -n $pattern ]] || continue
      workload "$kind" "$fields" "" default "$meta" | refused "$pattern" || { echo "  a $kind with$fields$meta"; return 1; }
    done <<'EOF'
never share the node's namespaces|, hostNetwork: true|
never share the node's namespaces|, hostPID: true|
never share the node's namespaces|, hostIPC: true|
never run Unconfined (seccomp or AppArmor): pod seccompProfile|, securityContext: {seccompProfile: {type: Unconfined}}|
never run Unconfined (seccomp or AppArmor): pod appArmorProfile|, securityContext: {appArmorProfile: {type: Unconfined}}|
never run Unconfined (seccomp or AppArmor): annotation container.apparmor|, securityContext: {}|, annotations: {container.apparmor.security.beta.kubernetes.io/c: unconfined}
EOF
    workload "$kind" ", hostNetwork: false, hostPID: false, hostIPC: false, securityContext: {seccompProfile: {type: RuntimeDefault}, appArmorProfile: {type: RuntimeDefault}}" |
      admitted
    workload "$kind" "" "" default ", annotations: {container.apparmor.security.beta.kubernetes.io/c: runtime/default}" | admitted
  done
}

test_pods_get_no_service_account_token_and_no_node_by_name() {
  local kind no_automount
  no_automount="{name: c, image: $MOVER, securityContext: {allowPrivilegeEscalation: false}}"
  for kind in Job CronJob StatefulSet; do
    workload "$kind" ", serviceAccountName: hellostateful-reconciler" "" | refused "default ServiceAccount only"
    workload "$kind" ", serviceAccount: kube-proxy" "" | refused "default ServiceAccount only"
    workload "$kind" ", nodeName: $(hostname)" | refused "never name their node"
    # automountServiceAccountToken unset or true.
    workload "$kind" | sed 's/automountServiceAccountToken: false, //' | refused "automountServiceAccountToken: false"
    workload "$kind" | sed 's/automountServiceAccountToken: false/automountServiceAccountToken: true/' |
      refused "automountServiceAccountToken: false"
    workload "$kind" ", serviceAccountName: default, serviceAccount: default" | admitted
    workload "$kind" | admitted
  done
}

test_pods_mount_only_claims_and_empty_dirs() {
  local kind row pattern volume
  for kind in Job CronJob StatefulSet; do
    # PATTERN | VOLUME
    while IFS='|' read -r pattern volume; do
      [[ -n $pattern ]] || continue
      workload "$kind" ", volumes: [$volume]" | refused "$pattern" || { echo "  a $kind with $volume"; return 1; }
    done <<'EOF'
never mount a node path directly|{name: v, hostPath: {path: /var/run}}
mount only persistentVolumeClaim and emptyDir volumes|{name: v, secret: {secretName: s}}
mount only persistentVolumeClaim and emptyDir volumes|{name: v, configMap: {name: c}}
mount only persistentVolumeClaim and emptyDir volumes|{name: v, projected: {sources: [{serviceAccountToken: {path: token}}]}}
mount only persistentVolumeClaim and emptyDir volumes|{name: v, downwardAPI: {items: [{path: l, fieldRef: {fieldPath: metadata.labels}}]}}
mount only persistentVolumeClaim and emptyDir volumes|{name: v, nfs: {server: 10.0.0.1, path: /}}
mount only persistentVolumeClaim and emptyDir volumes|{name: v, csi: {driver: secrets-store.csi.k8s.io}}
mount only persistentVolumeClaim and emptyDir volumes|{name: v, ephemeral: {volumeClaimTemplate: {spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}}}}
EOF
    workload "$kind" ", volumes: [{name: d, persistentVolumeClaim: {claimName: data-x-0, readOnly: true}}, {name: e, emptyDir: {}}]" |
      admitted
  done
}

test_nothing_is_made_in_a_system_namespace() {
  local ns kind object objects=()
  service() { printf 'apiVersion: v1\nkind: Service\nmetadata: {name: hs-policy-probe, namespace: %s}\nspec: {clusterIP: None, ports: [{port: 80}]}\n' "$1"; }
  claim() { printf 'apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: hs-policy-probe, namespace: %s}\nspec: {accessModes: [ReadWriteOnce], storageClassName: "", resources: {requests: {storage: 1Gi}}}\n' "$1"; }
  echo "system namespaces: ${SYSTEM_NAMESPACES[*]}"
  for ns in "${SYSTEM_NAMESPACES[@]}"; do
    for kind in Job CronJob StatefulSet; do
      workload "$kind" "" "" "$ns" | refused "makes no ${kind,,}s in the system namespace $ns"
    done
    service "$ns" | refused "makes no services in the system namespace $ns"
    claim "$ns" | refused "makes no persistentvolumeclaims in the system namespace $ns"
  done
  for kind in Job CronJob StatefulSet; do workload "$kind" "" "" "$APP_NS" | admitted; done
  service "$APP_NS" | admitted
  claim "$APP_NS" | admitted
}

# volume PATH [CLAIM_NAMESPACE] [SOURCE]: a PersistentVolume bound to claim data-x-0 of
# CLAIM_NAMESPACE (none when "-"), of hostPath PATH or of SOURCE.
volume() {
  local path=$1 ns=${2:-ns1} source=${3:-} claim=""
  [[ $ns == - ]] || claim=", claimRef: {namespace: $ns, name: data-x-0}"
  [[ -n $source ]] || source="hostPath: {path: $path, type: DirectoryOrCreate}"
  printf 'apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: hs-policy-probe}\nspec: {capacity: {storage: 1Gi}, accessModes: [ReadWriteOnce], storageClassName: "", %s%s}\n' "$source" "$claim"
}

test_volumes_are_their_claims_own_directories() {
  local root path ns row pattern source
  # The reconciler's own: a replica's data (this version, and 0.1.0's), a backup directory
  # under each allowed root.
  volume "$HOSTPATH_ROOT/ns1/app/0a1b2c3d-0000-4000-8000-000000000000/0" | admitted
  volume "$HOSTPATH_ROOT/ns1/app/1" | admitted
  for root in $ROOTS; do volume "$root/ns1/app" | admitted; done
  # PATTERN | PATH | CLAIM_NAMESPACE (- for no claimRef)
  while IFS='|' read -r pattern path ns; do
    [[ -n $pattern ]] || continue
    volume "$path" "$ns" | refused "$pattern" || { echo "  path $path, claim namespace $ns"; return 1; }
  done <<EOF
outside the allowed roots|/etc|ns1
outside the allowed roots|/var/lib/kubelet/pods|ns1
outside the allowed roots|${ROOT}-other/ns1/app|ns1
not the directory of the volume's claim (it has no claimRef namespace)|$ROOT/ns1/app|-
not the directory of the volume's claim ns2/data-x-0|$ROOT/ns1/app|ns2
not the directory of the volume's claim ns2/data-x-0|$HOSTPATH_ROOT/ns1/app/uid/0|ns2
not the directory of the volume's claim ns1/data-x-0|$ROOT/ns1|ns1
not the directory of the volume's claim ns1/data-x-0|$ROOT/ns1/app/x|ns1
not the directory of the volume's claim ns1/data-x-0|$ROOT/ns1/app/x/y|ns1
not the directory of the volume's claim ns1/data-x-0|$HOSTPATH_ROOT/ns1|ns1
not the directory of the volume's claim ns1/data-x-0|$HOSTPATH_ROOT/ns1/app|ns1
not the directory of the volume's claim ns1/data-x-0|$HOSTPATH_ROOT/ns1/app/uid/0/x|ns1
not the directory of the volume's claim ns1/data-x-0|$HOSTPATH_ROOT/ns1/app/uid/data|ns1
makes no volume for a claim in the system namespace kube-system|$ROOT/kube-system/app|kube-system
makes no volume for a claim in the system namespace $RECONCILER_NS|$HOSTPATH_ROOT/$RECONCILER_NS/app/uid/0|$RECONCILER_NS
EOF
  # Any other volume source.
  while IFS='|' read -r source; do
    [[ -n $source ]] || continue
    volume "" ns1 "$source" | refused "makes only hostPath volumes" || { echo "  $source"; return 1; }
  done <<'EOF'
local: {path: /tmp/backup/ns1/app}, nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [node-a]}]}]}}
csi: {driver: hostpath.csi.k8s.io, volumeHandle: v}
nfs: {server: 10.0.0.1, path: /}
iscsi: {targetPortal: "10.0.0.1:3260", iqn: "iqn.2001-04.com.example:storage", lun: 0}
EOF
}

# The app's data volume, once the reconciler made it.
app_volume() {
  local uid
  uid=$(kubectl -n "$APP_NS" get hellostateful probe -o jsonpath='{.metadata.uid}')
  [[ -n $uid ]] && kubectl get pv "hellostateful.$APP_NS.probe.0" -o name >/dev/null
}

test_volume_updates_keep_their_claim_and_path() {
  local pv="hellostateful.$APP_NS.probe.0"
  wait_for "the app's data volume" 120 app_volume || { on_fail "$APP_NS"; return 1; }
  patch() { as_reconciler patch pv "$pv" --dry-run=server --type=merge -p "$1"; }
  # What the reconciler does to a Released volume: reopen it to its claim.
  patch '{"spec": {"claimRef": {"uid": null, "resourceVersion": null}}}' >/dev/null
  patch '{"metadata": {"labels": {"hs-policy-probe": "x"}}}' >/dev/null
  expect_fail "may not move a volume to another claim" patch '{"spec": {"claimRef": {"name": "data-other-0", "uid": null}}}'
  # Another namespace: its claim's directory is not this path either.
  expect_fail "not the directory of the volume's claim" patch '{"spec": {"claimRef": {"namespace": "default", "uid": null}}}'
  # A volume's source is immutable: the API server refuses the change before the policy
  # (which refuses it too).
  expect_fail "spec.persistentvolumesource: Forbidden" \
    patch "{\"spec\": {\"hostPath\": {\"path\": \"$(kubectl get pv "$pv" -o jsonpath='{.spec.hostPath.path}')x\"}}}"
}

# signed WHO KIND: an inert workload of KIND (a suspended Job, a StatefulSet of 0 replicas) in
# the app's namespace, written by the leader WHO ("": naming none).
signed() {
  local who=$1 kind=$2 annotations=""
  [[ -z $who ]] || annotations=", annotations: {hello-stateful.example.com/written-by-leader: \"$who\"}"
  workload "$kind" "" "" "$APP_NS" |
    sed -e "s|^metadata: {\(.*\)}$|metadata: {\1$annotations}|" \
      -e 's/^spec: {template:/spec: {suspend: true, template:/' \
      -e 's/^spec: {serviceName:/spec: {replicas: 0, serviceName:/'
}

test_a_deposed_leaders_late_writes_are_refused() {
  local holder kind out
  holder=$(kubectl -n "$RECONCILER_NS" get lease hellostateful-reconciler -o jsonpath='{.spec.holderIdentity}')
  [[ -n $holder ]] || { echo "no replica holds the reconciler's Lease"; return 1; }
  # Real writes: dry runs store nothing and are not fenced.
  for kind in Job StatefulSet; do
    signed "$holder-deposed" "$kind" |
      expect_fail "names the leader $holder-deposed, but the reconciler's Lease is held by $holder" \
        as_reconciler create -f - || { echo "  a $kind"; return 1; }
    signed "" "$kind" | expect_fail "names no leader" as_reconciler create -f - ||
      { echo "  a $kind"; return 1; }
  done
  # The leader's own writes are admitted; a patch by a deposed one is refused.
  out=$(signed "$holder" Job | as_reconciler create -f - 2>&1) || { echo "$out"; return 1; }
  expect_fail "is held by $holder" as_reconciler -n "$APP_NS" patch job hs-policy-probe --type=merge \
    -p "{\"metadata\": {\"annotations\": {\"hello-stateful.example.com/written-by-leader\": \"$holder-deposed\"}}, \"spec\": {\"suspend\": false}}" ||
    return 1
  [[ $(kubectl -n "$APP_NS" get job hs-policy-probe -o jsonpath='{.spec.suspend}') == true ]] ||
    { echo "the refused patch resumed the Job"; return 1; }
  kubectl -n "$APP_NS" delete job hs-policy-probe --wait=true >/dev/null
}

# sts_patch JSON_PATCH: the app probe's StatefulSet patched by the reconciler (a dry run).
sts_patch() { as_reconciler -n "$APP_NS" patch statefulset probe --dry-run=server --type=json -p "$1"; }

# An app's StatefulSet is controlled by the app it is named after (policy
# hellostateful-reconciler-statefulsets): with its owner reference removed, or made anew
# without one, it is refused; a template change that keeps the owner is admitted.
test_an_apps_statefulset_is_controlled_by_its_app() {
  wait_for "app probe ready" 150 app_ready "$APP_NS" probe || { on_fail "$APP_NS"; return 1; }
  expect_fail "is controlled by the app it is named after" sts_patch '[{"op": "remove", "path": "/metadata/ownerReferences"}]' || return 1
  expect_fail "is controlled by the app it is named after" \
    sts_patch '[{"op": "replace", "path": "/metadata/ownerReferences/0/name", "value": "another"}]' || return 1
  workload StatefulSet "" "" "$APP_NS" | sed 's/ownerReferences: \[[^]]*\]/ownerReferences: []/' |
    refused "is controlled by the app it is named after" || return 1
  sts_patch '[{"op": "add", "path": "/spec/template/metadata/labels/probe", "value": "1"}]' >/dev/null ||
    { echo "a template change keeping the owner was refused"; return 1; }
}

# An app's StatefulSet runs its app's spec.image and nothing else, and is controlled by the
# app's uid, not only its name (the webhook of admission-webhook.yaml, which reads the app).
test_an_apps_statefulset_runs_only_its_apps_image() {
  local uid image other=example.invalid/other:1
  wait_for "app probe ready" 150 app_ready "$APP_NS" probe || { on_fail "$APP_NS"; return 1; }
  uid=$(kubectl -n "$APP_NS" get hellostateful probe -o jsonpath='{.metadata.uid}')
  image=$(kubectl -n "$APP_NS" get statefulset probe -o jsonpath='{.spec.template.spec.containers[0].image}')
  [[ -n $uid && -n $image && $image != "$other" ]] || { echo "app uid '$uid', image '$image'"; return 1; }
  expect_fail "runs only its app's spec.image ($image); app runs $other" \
    sts_patch "[{\"op\": \"replace\", \"path\": \"/spec/template/spec/containers/0/image\", \"value\": \"$other\"}]" || return 1
  expect_fail "runs only its app's spec.image ($image); extra runs $other" \
    sts_patch "[{\"op\": \"add\", \"path\": \"/spec/template/spec/initContainers\", \"value\": [{\"name\": \"extra\", \"image\": \"$other\", \"securityContext\": {\"allowPrivilegeEscalation\": false}}]}]" ||
    return 1
  # Named after the app, but controlled by another uid (a policy can check only the name):
  # refused as one named after no app is, naming nothing of the app.
  expect_fail "is not controlled by HelloStateful probe of namespace $APP_NS (its controller is 00000000-0000-0000-0000-000000000000)" \
    sts_patch '[{"op": "replace", "path": "/metadata/ownerReferences/0/uid", "value": "00000000-0000-0000-0000-000000000000"}]' ||
    return 1
  # Named after no app.
  workload StatefulSet "" "" "$APP_NS" | refused "$NO_APP_REFUSAL $APP_NS" || return 1
  # What the reconciler does: scale, and change the template keeping the app's image.
  sts_patch '[{"op": "replace", "path": "/spec/replicas", "value": 0}]' >/dev/null ||
    { echo "scaling was refused"; return 1; }
  sts_patch '[{"op": "add", "path": "/spec/template/metadata/labels/probe", "value": "1"}]' >/dev/null ||
    { echo "a template change keeping the app's image was refused"; return 1; }
}

# The reconciler writes an app's status and metadata, never its spec (policy
# hellostateful-reconciler-apps): else it could choose the image the webhook holds it to.
# (Its status writes, to the status subresource, which the policy does not match, are
# proven by the next test.)
test_the_reconciler_never_changes_an_apps_spec() {
  local app=(-n "$APP_NS" patch hellostateful probe --dry-run=server --type=merge)
  expect_fail "never changes an app's spec" as_reconciler "${app[@]}" -p '{"spec": {"image": "example.invalid/other:1"}}' || return 1
  as_reconciler "${app[@]}" -p '{"metadata": {"labels": {"hs-policy-probe": "x"}}}' >/dev/null ||
    { echo "a label patch was refused"; return 1; }
}

test_the_reconcilers_own_children_are_admitted() {
  local token out
  wait_for "app probe ready" 150 app_ready "$APP_NS" probe || { on_fail "$APP_NS"; return 1; }
  kubectl -n "$APP_NS" get statefulset/probe service/probe cronjob/backup-probe pvc/data-probe-0 >/dev/null
  token=$(date +%s)
  annotate "$APP_NS" probe "hello-stateful.example.com/backup-requested=$token"
  wait_for "backup $token acknowledged" 150 acknowledged "$APP_NS" probe backupRequest "$token" || { on_fail "$APP_NS"; return 1; }
  [[ $(jp "$APP_NS" probe '{.status.backupRequest.phase}') == Succeeded ]] || { on_fail "$APP_NS"; return 1; }
  [[ -n $(backup_volumes_of "$APP_NS" probe) ]]
  # Deletion: the wipe Job is the reconciler's too.
  kubectl -n "$APP_NS" delete hellostateful probe --wait=true --timeout=120s >/dev/null || { on_fail "$APP_NS"; return 1; }
  out=$(kubectl -n "$RECONCILER_NS" logs deploy/hellostateful-reconciler --since-time="$APP_START" 2>&1)
  if grep -i "forbidden\|ValidatingAdmissionPolicy\|denied the request" <<<"$out" | grep -F "$APP_NS"; then
    echo "the reconciler's own writes in $APP_NS were refused"; return 1
  fi
}

run_test every_container_runs_unprivileged test_every_container_runs_unprivileged
run_test pods_never_share_the_nodes_namespaces_or_run_unconfined test_pods_never_share_the_nodes_namespaces_or_run_unconfined
run_test pods_get_no_service_account_token_and_no_node_by_name test_pods_get_no_service_account_token_and_no_node_by_name
run_test pods_mount_only_claims_and_empty_dirs test_pods_mount_only_claims_and_empty_dirs
run_test nothing_is_made_in_a_system_namespace test_nothing_is_made_in_a_system_namespace
run_test volumes_are_their_claims_own_directories test_volumes_are_their_claims_own_directories
run_test volume_updates_keep_their_claim_and_path test_volume_updates_keep_their_claim_and_path
run_test a_deposed_leaders_late_writes_are_refused test_a_deposed_leaders_late_writes_are_refused
run_test an_apps_statefulset_is_controlled_by_its_app test_an_apps_statefulset_is_controlled_by_its_app
run_test an_apps_statefulset_runs_only_its_apps_image test_an_apps_statefulset_runs_only_its_apps_image
run_test the_reconciler_never_changes_an_apps_spec test_the_reconciler_never_changes_an_apps_spec
run_test the_reconcilers_own_children_are_admitted test_the_reconcilers_own_children_are_admitted
summary
