#!/usr/bin/env bash
# Smoke test of the e2e cluster: storage, workloads, exec/logs, in-cluster API access, DNS.
#   eval "$(e2e/cluster up)" && bash e2e/smoke.sh
# Creates its own namespace, PersistentVolume and host directory and removes them at the end.
set -uo pipefail

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$E2E_DIR/lib.sh"
E2E_SUITE=smoke

if [[ -z ${KUBECONFIG:-} ]]; then eval "$("$E2E_DIR/cluster" env)"; fi
export KUBECONFIG

NS=hs-smoke-$(date +%s)
PV=$NS-data
HOSTDIR=$(mktemp -d /tmp/hs-smoke.XXXXXX)
chmod 0777 "$HOSTDIR"
CACHE=${HS_E2E_CACHE:-/var/cache/hellostateful}
PROBE_IMAGE=hellostateful-apiprobe:smoke

k() { kubectl -n "$NS" "$@"; }

cleanup() {
  k delete statefulset,job,cronjob,pod --all --grace-period=1 --wait=false >/dev/null 2>&1 || true
  kubectl delete namespace "$NS" --wait=true --timeout=90s >/dev/null 2>&1 || true
  kubectl delete pv "$PV" --wait=false >/dev/null 2>&1 || true
  rm -rf "$HOSTDIR"
}
trap cleanup EXIT

pod_phase() { [[ $(k get pod "$1" -o jsonpath='{.status.phase}') == "$2" ]]; }
pod_ready() { [[ $(k get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]; }

kubectl create namespace "$NS" >/dev/null || { echo "cannot create namespace $NS"; exit 1; }
wait_for "default service account in $NS" 30 k get serviceaccount default >/dev/null || exit 1
echo "namespace $NS, host dir $HOSTDIR"

# 1. StatefulSet + hostPath PV bound through claimRef: the pod writes to the node's disk
test_statefulset_hostpath() {
  kubectl apply -f - <<EOF
apiVersion: v1
kind: PersistentVolume
metadata: {name: $PV}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  hostPath: {path: $HOSTDIR, type: Directory}
  claimRef: {namespace: $NS, name: data-web-0}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web, namespace: $NS}
spec:
  serviceName: web
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: busybox:1.36
        imagePullPolicy: IfNotPresent
        command: ["sh", "-c", "echo smoke-\$(date +%s) > /data/hello.txt; echo smoke-log-line; exec sleep 3600"]
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      storageClassName: ""
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
EOF
  wait_for "PVC data-web-0 bound to $PV" 60 \
    bash -c "[[ \$(kubectl -n $NS get pvc data-web-0 -o jsonpath='{.status.phase}/{.spec.volumeName}') == Bound/$PV ]]"
  wait_for "pod web-0 Ready" 90 pod_ready web-0
  wait_for "file $HOSTDIR/hello.txt on the node" 30 grep -q '^smoke-' "$HOSTDIR/hello.txt"
  echo "node disk: $HOSTDIR/hello.txt = $(cat "$HOSTDIR/hello.txt")"
}

# 2. a Job completes; a CronJob fires and its Job completes
test_job_and_cronjob() {
  kubectl apply -f - <<EOF
apiVersion: batch/v1
kind: Job
metadata: {name: once, namespace: $NS}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: main, image: busybox:1.36, imagePullPolicy: IfNotPresent, command: ["sh", "-c", "echo job-done"]}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: tick, namespace: $NS}
spec:
  schedule: "*/1 * * * *"
  concurrencyPolicy: Forbid
  jobTemplate:
    spec:
      backoffLimit: 0
      template:
        spec:
          restartPolicy: Never
          containers:
          - {name: main, image: busybox:1.36, imagePullPolicy: IfNotPresent, command: ["sh", "-c", "echo tick"]}
EOF
  wait_for "job 'once' to complete" 60 \
    bash -c "[[ \$(kubectl -n $NS get job once -o jsonpath='{.status.succeeded}') == 1 ]]"
  local out; out=$(k logs job/once)
  [[ $out == *job-done* ]] || { echo "job logs: $out"; return 1; }
  wait_for "cronjob 'tick' to have a successful run" 150 \
    bash -c "[[ -n \$(kubectl -n $NS get cronjob tick -o jsonpath='{.status.lastSuccessfulTime}') ]]"
  echo "cronjob last success: $(k get cronjob tick -o jsonpath='{.status.lastSuccessfulTime}')"
  k delete cronjob tick --wait=false >/dev/null
}

# 3. kubectl exec and kubectl logs
test_exec_and_logs() {
  local in_pod on_node
  in_pod=$(k exec web-0 -- cat /data/hello.txt)
  on_node=$(cat "$HOSTDIR/hello.txt")
  echo "exec: $in_pod"
  [[ $in_pod == "$on_node" ]] || { echo "exec read '$in_pod', node has '$on_node'"; return 1; }
  wait_for "'smoke-log-line' in kubectl logs web-0" 20 bash -c "kubectl -n $NS logs web-0 | grep -q smoke-log-line"
}

# 4. a pod reaches the API server through the `kubernetes` Service with its ServiceAccount
#    token, verifying the server certificate (what an in-cluster client such as the
#    reconciler does). The probe is a small static Go program (e2e/cluster.d/apiprobe).
test_api_via_service() {
  local src=$E2E_DIR/cluster.d/apiprobe sum bin tar
  sum=$(cat "$src/main.go" "$src/go.mod" | sha256sum | cut -c1-12)
  bin=$CACHE/tools/apiprobe-$sum
  if [[ ! -x $bin ]]; then
    mkdir -p "$CACHE/tools"
    (cd "$src" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false go build -trimpath -ldflags '-s -w' -o "$bin.part" .)
    mv "$bin.part" "$bin"
  fi
  tar=$(mktemp /tmp/hs-apiprobe.XXXXXX.tar)
  "$E2E_DIR/mkimage" --name "$PROBE_IMAGE" --out "$tar" --file "$bin:/apiprobe:0755" --entrypoint /apiprobe --user 65532
  "$E2E_DIR/cluster" load "$tar" >/dev/null
  rm -f "$tar"
  kubectl apply -f - <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-reader, namespace: $NS}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: pod-reader, namespace: $NS}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
subjects:
- {kind: ServiceAccount, name: default, namespace: $NS}
---
apiVersion: v1
kind: Pod
metadata: {name: apiprobe, namespace: $NS}
spec:
  restartPolicy: Never
  containers:
  - name: probe
    image: $PROBE_IMAGE
    imagePullPolicy: IfNotPresent
EOF
  if ! wait_for "apiprobe pod to succeed" 60 pod_phase apiprobe Succeeded; then
    k logs apiprobe || true
    return 1
  fi
  # (no `kubectl ... | grep -q` under pipefail: grep -q may exit first and SIGPIPE kubectl)
  local out; out=$(k logs apiprobe)
  echo "$out"
  grep -qE '^GET .* -> 200$' <<<"$out"
}

# 5. deleting the StatefulSet removes its pod; the data stays on the node
test_delete_statefulset() {
  local before; before=$(cat "$HOSTDIR/hello.txt")
  k delete statefulset web --wait=false
  wait_for "pod web-0 to be gone" 60 bash -c "! kubectl -n $NS get pod web-0 >/dev/null 2>&1"
  [[ $(cat "$HOSTDIR/hello.txt") == "$before" ]] || { echo "host data changed or vanished"; return 1; }
  echo "node disk after delete: $(cat "$HOSTDIR/hello.txt")"
}

# 6. cluster DNS: a pod resolves the `kubernetes` Service and a Service of its own namespace
#    by name and reaches the latter by its short and its full name; kubelet gave it the
#    cluster's resolver, so no pod in this fresh namespace was warned MissingClusterDNS.
test_cluster_dns() {
  kubectl apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: greeter, namespace: $NS, labels: {app: greeter}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: busybox:1.36
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "mkdir -p /www && echo hello-by-name > /www/index.html && exec httpd -f -p 8080 -h /www"]
    readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: greeter, namespace: $NS}
spec:
  selector: {app: greeter}
  ports: [{port: 80, targetPort: 8080}]
EOF
  wait_for "pod greeter Ready" 60 pod_ready greeter
  local api_ip greeter_ip
  api_ip=$(kubectl -n default get service kubernetes -o jsonpath='{.spec.clusterIP}')
  greeter_ip=$(k get service greeter -o jsonpath='{.spec.clusterIP}')
  kubectl apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: dns-client, namespace: $NS}
spec:
  restartPolicy: Never
  containers:
  - name: client
    image: busybox:1.36
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "set -e; cat /etc/resolv.conf; nslookup kubernetes.default.svc.cluster.local; nslookup greeter.$NS.svc.cluster.local; echo \"fetched: \$(wget -qO- http://greeter/) \$(wget -qO- http://greeter.$NS.svc.cluster.local/)\""]
EOF
  if ! wait_for "dns-client pod to succeed" 60 pod_phase dns-client Succeeded; then
    k logs dns-client || true
    return 1
  fi
  local out; out=$(k logs dns-client)
  echo "$out"
  grep -q "^nameserver $(kubectl -n kube-system get service kube-dns -o jsonpath='{.spec.clusterIP}')$" <<<"$out"
  grep -q "^search $NS.svc.cluster.local svc.cluster.local cluster.local" <<<"$out"
  grep -qx "Address: $api_ip" <<<"$out"
  grep -qx "Address: $greeter_ip" <<<"$out"
  # Once (of many runs) both fetches answered 404: say what served them, should it recur.
  grep -qx "fetched: hello-by-name hello-by-name" <<<"$out" || {
    k get endpointslices -o wide
    k exec greeter -- ls -la /www
    kubectl get services -A -o wide | grep -w "$greeter_ip"
    return 1
  }
  local warned
  warned=$(k get events --field-selector reason=MissingClusterDNS -o name)
  [[ -z $warned ]] || { echo "kubelet warned MissingClusterDNS: $warned"; return 1; }
}

run_test statefulset_hostpath test_statefulset_hostpath
run_test job_and_cronjob test_job_and_cronjob
run_test exec_and_logs test_exec_and_logs
run_test api_via_service test_api_via_service
run_test delete_statefulset test_delete_statefulset
run_test cluster_dns test_cluster_dns

((_E2E_FAILED == 0)) || dump_debug "$NS"
summary
