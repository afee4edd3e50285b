# Helpers for the hellostateful e2e suites (bash; source after lib.sh). They assume
# KUBECONFIG points at the test cluster, whose only node is this machine: hostPath volumes
# and backups are plain directories here.

HOSTPATH_ROOT=/tmp/hostpath-provisioner
BACKUP_ROOT=${BACKUP_ROOT:-/tmp/backup}
# The second backup root e2e/install allows (a cluster admin's choice).
SMALL_ROOT=/tmp/hs-e2e-small
E2E_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HS_PLUGIN=${HS_PLUGIN:-${CARGO_TARGET_DIR:-$E2E_ROOT/target}/release/kubectl-hellostateful}
RECONCILER_NS=hellostateful-system
# This tree's version (Cargo.toml's), which its plugin, image, manifests and chart carry.
HS_VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$E2E_ROOT/Cargo.toml" | head -n1)

# new_ns PREFIX: a fresh tenant namespace (printed) that enforces Pod Security baseline and
# warns on restricted, as a shared cluster would; deleted by cleanup_ns.
new_ns() {
  local ns="$1-$RANDOM$RANDOM"
  kubectl create namespace "$ns" >/dev/null
  kubectl label namespace "$ns" pod-security.kubernetes.io/enforce=baseline \
    pod-security.kubernetes.io/warn=restricted >/dev/null
  echo "$ns"
}

# cleanup_ns NS: delete the namespace, its apps' node data and backups.
cleanup_ns() {
  local ns=$1
  kubectl -n "$ns" delete hellostatefuls --all --wait=true --timeout=120s >/dev/null 2>&1 || true
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
  rm -rf "${HOSTPATH_ROOT:?}/$ns" "${BACKUP_ROOT:?}/$ns"
  # Backup volumes outlive their apps by design; a test namespace takes them along.
  kubectl delete pv -l "hello-stateful.example.com/namespace=$ns" --wait=false >/dev/null 2>&1 || true
}

# app_yaml NAME [SPEC-JSON]: a HelloStateful manifest (spec defaults to the 2018 one).
app_yaml() {
  local name=$1 spec=${2:-'{"replicas": 1, "restoreFromExisting": true, "backupSchedule": "*/5 * * * *"}'}
  printf 'apiVersion: hello-stateful.example.com/v1alpha1\nkind: HelloStateful\nmetadata: {name: %s}\nspec: %s\n' "$name" "$spec"
}

# status NS NAME JSONPATH: one status field.
jp() { kubectl -n "$1" get hellostateful "$2" -o "jsonpath=$3" 2>/dev/null; }

# ready NS NAME: the app's Ready condition is True.
app_ready() { [[ $(jp "$1" "$2" '{.status.conditions[?(@.type=="Ready")].status}') == True ]]; }

# data_dir NS NAME ORDINAL: the live volume of a replica on the node (its path carries the
# app's uid, so the app must exist).
data_dir() { echo "$HOSTPATH_ROOT/$1/$2/$(kubectl -n "$1" get hellostateful "$2" -o jsonpath='{.metadata.uid}')/$3"; }

# host_log NS NAME ORDINAL: the app's log file on the node.
host_log() { echo "$(data_dir "$1" "$2" "$3")/stateful.log"; }

# pinned_node NS NAME: the node the app's first static data volume is pinned to.
pinned_node() {
  kubectl get pv "hellostateful.$1.$2.0" \
    -o jsonpath='{.spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values[0]}' 2>/dev/null
}

# lines_at_least FILE N
lines_at_least() { [[ -f $1 && $(wc -l <"$1") -ge $2 ]]; }

# backups_of NS NAME: complete snapshot ids on the node, oldest first.
backups_of() { find "$BACKUP_ROOT/$1/$2" -mindepth 1 -maxdepth 1 -type d ! -name '.*' -printf '%f\n' 2>/dev/null | sort; }

# backup_volumes_of NS NAME: the PersistentVolumes of app NS/NAME's node-directory backups
# (one per root it used; named with the root's hash), as pv/NAME lines.
backup_volumes_of() {
  kubectl get pv -o name \
    -l "app.kubernetes.io/instance=$2,app.kubernetes.io/component=backup,hello-stateful.example.com/namespace=$1"
}

# has_backup NS NAME: at least one complete snapshot exists.
has_backup() { [[ -n $(backups_of "$1" "$2") ]]; }

# api_reachable_through_service: the API server answers on the `kubernetes` Service's
# ClusterIP from this node, the path pods take (kube-proxy's rules apply to the node too).
api_reachable_through_service() {
  local ip
  ip=$(kubectl -n default get service kubernetes -o jsonpath='{.spec.clusterIP}')
  [[ $(curl -sk -m 2 -o /dev/null -w '%{http_code}' "https://$ip/readyz") == 200 ]]
}

# request_seen NS NAME backupRequest|restoreRequest TOKEN: the token is in status, in any phase.
request_seen() { [[ $(jp "$1" "$2" "{.status.$3.token}") == "$4" ]]; }

# acknowledged NS NAME backupRequest|restoreRequest TOKEN: the token's request has ended.
acknowledged() {
  local token phase
  token=$(jp "$1" "$2" "{.status.$3.token}")
  phase=$(jp "$1" "$2" "{.status.$3.phase}")
  [[ $token == "$4" && ( $phase == Succeeded || $phase == Failed ) ]]
}

# annotate NS NAME KEY=VALUE...
annotate() { local ns=$1 name=$2; shift 2; kubectl -n "$ns" annotate --overwrite hellostateful "$name" "$@" >/dev/null; }

# reconciler_metric NAME: a counter of the in-cluster reconciler (sum over labels).
reconciler_metric() {
  kubectl get --raw "/api/v1/namespaces/$RECONCILER_NS/services/hellostateful-reconciler-metrics:8080/proxy/metrics" |
    awk -v m="$1" '$1 ~ "^"m"(_total)?([{].*)?$" { s += $2 } END { print s + 0 }'
}

# reconciler_pid POD: the pid, on this node, of the reconciler process of pod POD.
reconciler_pid() {
  local pid
  for pid in $(pgrep -f 'hellostateful-reconciler run'); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "POD_NAME=$1"; then echo "$pid"; return 0; fi
  done
  return 1
}

# reconciler_restarts: restart count of the reconciler container.
reconciler_restarts() {
  kubectl -n "$RECONCILER_NS" get pods -l app.kubernetes.io/component=reconciler \
    -o jsonpath='{range .items[*]}{.status.containerStatuses[0].restartCount}{"\n"}{end}' | awk '{ s += $1 } END { print s + 0 }'
}

# expect_fail PATTERN CMD...: CMD fails and its output contains PATTERN.
expect_fail() {
  local pattern=$1 out; shift
  if out=$("$@" 2>&1); then
    echo "expected failure, but it succeeded: $*"; echo "$out"; return 1
  fi
  grep -qF -- "$pattern" <<<"$out" || { echo "output lacks '$pattern':"; echo "$out"; return 1; }
}

# on_fail NS: print debugging details (use as: some_check || { on_fail NS; return 1; })
on_fail() {
  dump_debug "$1"
  kubectl -n "$RECONCILER_NS" logs deploy/hellostateful-reconciler --tail=40 >&2 || true
  # Last, so that the end of a long failure output (what CI shows) says where things stand.
  echo "----- summary: namespace $1 -----" >&2
  kubectl -n "$1" get hellostateful,statefulset,pods,pvc -o wide >&2 2>&1 || true
  kubectl -n "$1" get hellostateful -o jsonpath='{range .items[*]}{.metadata.name}: {range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}{end}' >&2 2>&1 || true
  kubectl -n "$RECONCILER_NS" get pods -o wide >&2 2>&1 || true
}

# metric_above NAME VALUE: the reconciler's counter NAME is above VALUE.
metric_above() { (( $(reconciler_metric "$1") > $2 )); }

# has_event NS REASON: an event with REASON exists in NS. (Output is captured first: under
# pipefail, `kubectl ... | grep -q` can fail when grep exits before kubectl.)
has_event() { [[ -n $(kubectl -n "$1" get events --field-selector "reason=$2" -o name 2>/dev/null) ]]; }

# status_contains NS NAME JSONPATH TEXT: a status field contains TEXT (case-insensitive).
status_contains() {
  local value
  value=$(jp "$1" "$2" "$3")
  [[ ${value,,} == *"${4,,}"* ]] || { echo "$3 = '$value' lacks '$4'"; return 1; }
}

# has_job NS COMPONENT: a Job of that component exists.
has_job() { [[ -n $(kubectl -n "$1" get jobs -l "app.kubernetes.io/component=$2" -o name 2>/dev/null) ]]; }

# request NS NAME KIND ANNOTATIONS...: set an on-demand annotation token, wait for its
# acknowledgement, print the phase.
request() {
  local ns=$1 name=$2 kind=$3 token
  shift 3
  token=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
  annotate "$ns" "$name" "$@" "hello-stateful.example.com/$kind-requested=$token"
  wait_for "$kind $token acknowledged" 180 acknowledged "$ns" "$name" "${kind}Request" "$token" >&2 || return 1
  jp "$ns" "$name" "{.status.${kind}Request.phase}"
}

# The object store of e2e/objstore (its `up` exports HS_S3_ENDPOINT and the admin's keys):
# s3 METHOD PATH [CURL-ARGS...]: a request to the store with the admin's keys (curl signs it).
s3() {
  local method=$1 path=$2; shift 2
  curl -sf --aws-sigv4 "aws:amz:us-east-1:s3" -u "$HS_S3_ADMIN_KEY:$HS_S3_ADMIN_SECRET" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -X "$method" "$@" "$HS_S3_ENDPOINT/$path"
}
# keys BUCKET PREFIX: the object keys below PREFIX, one per line.
keys() {
  local listing
  listing=$(s3 GET "$1?list-type=2&prefix=${2//\//%2F}")
  { grep -o '<Key>[^<]*</Key>' <<<"$listing" || true; } | sed 's/<[^>]*>//g'
}
# keys_secret NS NAME KEY SECRET: a Secret of an object store's keys.
keys_secret() {
  kubectl -n "$1" create secret generic "$2" --from-literal=AWS_ACCESS_KEY_ID="$3" \
    --from-literal=AWS_SECRET_ACCESS_KEY="$4" >/dev/null
}
