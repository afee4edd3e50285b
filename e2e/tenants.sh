#!/usr/bin/env bash
# Hostile tenants on a shared cluster. Each tenant acts through a kubeconfig whose token
# holds only the built-in `edit` role in its own namespace, which enforces Pod Security
# baseline. Every case asserts on the node's files (nothing outside the tenant's own
# directories is read, written or planted) and on a clear refusal in status or from the API.
set -uo pipefail
E2E_SUITE=tenants
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/hs.sh"

RECONCILER_SA=system:serviceaccount:hellostateful-system:hellostateful-reconciler
# A file that no tenant may ever see in its volumes or backups.
SECRET_DIR=$(mktemp -d /tmp/hs-tenants-secret-XXXX)
echo "node-secret-$RANDOM$RANDOM" >"$SECRET_DIR/secret"
SECRET=$(cat "$SECRET_DIR/secret")
trap 'rm -rf "$SECRET_DIR"' EXIT

# Tests run in subshells: each keeps its tenants here and removes them when it exits.
TEST_NAMESPACES=()
TEST_FILES=()
cleanup_tenants() {
  local ns
  for ns in "${TEST_NAMESPACES[@]}"; do cleanup_ns "$ns"; done
  rm -f "${TEST_FILES[@]}"
}

# tenant PREFIX: a baseline namespace (TNS) and a kubeconfig (TKC) whose token holds only
# `edit` in it, removed when the test ends.
tenant() {
  local token server
  TNS=$(new_ns "$1")
  TEST_NAMESPACES+=("$TNS")
  trap cleanup_tenants EXIT
  kubectl -n "$TNS" create serviceaccount tenant >/dev/null
  kubectl -n "$TNS" create rolebinding tenant-edit --clusterrole=edit --serviceaccount="$TNS:tenant" >/dev/null
  token=$(kubectl -n "$TNS" create token tenant --duration=2h)
  server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
  TKC=$(mktemp /tmp/hs-tenant-kubeconfig-XXXX)
  TEST_FILES+=("$TKC" "$TKC.ca")
  kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' |
    base64 -d >"$TKC.ca"
  KUBECONFIG=$TKC kubectl config set-cluster c --server="$server" --certificate-authority="$TKC.ca" >/dev/null
  KUBECONFIG=$TKC kubectl config set-credentials tenant --token="$token" >/dev/null
  KUBECONFIG=$TKC kubectl config set-context c --cluster=c --user=tenant --namespace="$TNS" >/dev/null
  KUBECONFIG=$TKC kubectl config use-context c >/dev/null
}

# as TENANT_KUBECONFIG CMD...: run kubectl as the tenant.
as() { local kubeconfig=$1; shift; kubectl --kubeconfig "$kubeconfig" "$@"; }

# no_secret_in DIR...: the node secret appears in none of these trees.
no_secret_in() {
  local found
  found=$(grep -rlF -- "$SECRET" "$@" 2>/dev/null || true)
  [[ -z $found ]] || { echo "the node secret leaked into: $found"; return 1; }
}

# no_host_path_pods NS: no pod of the namespace has a hostPath volume, and every one runs
# within baseline (the namespace enforces it: an admitted pod passed).
no_host_path_pods() {
  kubectl -n "$1" get pods -o json |
    jq -e '[.items[].spec.volumes[]? | select(.hostPath)] | length == 0' >/dev/null ||
    { kubectl -n "$1" get pods -o json | jq '.items[] | {name: .metadata.name, volumes: .spec.volumes}'; return 1; }
}

test_node_paths_as_backup_targets_are_refused() {
  local ns kubeconfig path name i=0 reason
  tenant paths; ns=$TNS; kubeconfig=$TKC
  # Refused by the API server: not clean absolute paths.
  for path in / /. // /tmp/backup/../etc /tmp/backup/ /tmp//backup; do
    expect_fail "backup.target.hostPath must be a clean absolute path" as "$kubeconfig" apply -f - \
      <<<"$(app_yaml "bad$i" "{\"replicas\": 1, \"restoreFromExisting\": true, \"backup\": {\"target\": {\"hostPath\": \"$path\"}}}")"
    i=$((i + 1))
  done
  # Accepted by the schema, refused by the reconciler: not one of the admin's roots.
  for path in /etc /var/lib/kubelet /tmp/backup/other "$SECRET_DIR" /tmp; do
    name="deny$i"
    i=$((i + 1))
    as "$kubeconfig" apply -f - >/dev/null \
      <<<"$(app_yaml "$name" "{\"replicas\": 1, \"restoreFromExisting\": true, \"backupSchedule\": \"*/1 * * * *\", \"backup\": {\"target\": {\"hostPath\": \"$path\"}}}")"
    wait_for "$name refused" 60 bash -c "[[ \$(kubectl -n '$ns' get hs '$name' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].reason}') == BackupTargetRefused ]]" ||
      { on_fail "$ns"; return 1; }
    status_contains "$ns" "$name" '{.status.conditions[?(@.type=="Ready")].message}' "not a backup root the cluster admin allows"
  done
  has_event "$ns" BackupTargetRefused
  # Nothing was made for them: no volume, claim, CronJob, Job or pod.
  [[ -z $(kubectl get pv -l "hello-stateful.example.com/namespace=$ns" -o name) ]]
  [[ -z $(kubectl -n "$ns" get pvc,cronjobs,jobs,pods -o name) ]] || { kubectl -n "$ns" get pvc,cronjobs,jobs,pods; return 1; }
  [[ ! -e /etc/$ns && ! -e /var/lib/kubelet/$ns && ! -e $SECRET_DIR/$ns && ! -e /tmp/$ns ]]
  # The tenant cannot mount a node path itself either: baseline refuses the pod.
  expect_fail "hostPath" as "$kubeconfig" run peek --image=busybox:1.36 --restart=Never \
    --overrides='{"spec": {"volumes": [{"name": "h", "hostPath": {"path": "/"}}], "containers": [{"name": "peek", "image": "busybox:1.36", "volumeMounts": [{"name": "h", "mountPath": "/h"}]}]}}'
}

test_a_tenant_sees_only_its_own_backups() {
  local victim attacker vk ak out
  tenant victim; victim=$TNS; vk=$TKC
  tenant attacker; attacker=$TNS; ak=$TKC
  local ns kubeconfig
  for pair in "$victim $vk" "$attacker $ak"; do
    read -r ns kubeconfig <<<"$pair"
    as "$kubeconfig" apply -f - >/dev/null <<<"$(app_yaml db '{"replicas": 1}')"
    wait_for "db ready in $ns" 120 app_ready "$ns" db || { on_fail "$ns"; return 1; }
    as "$kubeconfig" exec db-0 -c app -- sh -c "echo owned-by-$ns > /usr/share/hello/owner"
    [[ $(request "$ns" db backup) == Succeeded ]] || { on_fail "$ns"; return 1; }
  done
  no_host_path_pods "$victim"
  no_host_path_pods "$attacker"
  # The attacker mounts what its mover pods mount (its data claim and its backup claim),
  # as `kubectl exec` into a mover pod would see them, and looks for the victim's data.
  as "$ak" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: snoop}
spec:
  restartPolicy: Never
  securityContext: {seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: snoop
      image: busybox:1.36
      command: ["sh", "-c", "ls -laR /backup /data; cat /backup/*/*/*/0/owner; find / -xdev -name owner 2>/dev/null; true"]
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
      volumeMounts:
        - {name: backups, mountPath: /backup/$attacker/db}
        - {name: data, mountPath: /data/0}
  volumes:
    - {name: backups, persistentVolumeClaim: {claimName: backups-db, readOnly: true}}
    - {name: data, persistentVolumeClaim: {claimName: data-db-0}}
EOF
  wait_for "snoop pod finished" 90 bash -c "[[ \$(kubectl -n '$attacker' get pod snoop -o jsonpath='{.status.phase}') == Succeeded ]]" ||
    { on_fail "$attacker"; return 1; }
  out=$(as "$ak" logs snoop)
  [[ $out == *"owned-by-$attacker"* ]] || { echo "the attacker cannot even see its own backup:"; echo "$out"; return 1; }
  [[ $out != *"$victim"* && $out != *"owned-by-$victim"* ]] || { echo "the attacker saw the victim:"; echo "$out"; return 1; }
  # Nor can it mount the victim's claims or volumes: another namespace's claim is not found,
  # and PersistentVolumes are not the tenant's to read.
  expect_fail "forbidden" as "$ak" get pv
  expect_fail "forbidden" as "$ak" -n "$victim" get pvc
}

test_symlink_swaps_in_the_app_never_leak_node_files_into_backups() {
  local ns kubeconfig id ok=0 failed=0 snapshot extra
  tenant swap; ns=$TNS; kubeconfig=$TKC
  # The app swaps a directory of its volume for symlinks that lead out of it, as fast as it
  # can, while backups run: at the mover's /backup (its own snapshots), / and ../..
  as "$kubeconfig" apply -f - >/dev/null <<<"$(app_yaml racer '{"replicas": 1, "command": ["sh", "-c", "cd /usr/share/hello; mkdir -p d; echo inside > d/file; trap \"exit 0\" TERM; while true; do for t in /backup / ../.. /data; do mv d d.real; ln -s $t d; rm d; mv d.real d; done; usleep 50000; done"]}')"
  wait_for "racer ready" 120 app_ready "$ns" racer || { on_fail "$ns"; return 1; }
  for _ in $(seq 1 12); do
    case $(request "$ns" racer backup) in
      Succeeded) ok=$((ok + 1)) ;;
      Failed) failed=$((failed + 1)) ;;
      *) on_fail "$ns"; return 1 ;;
    esac
  done
  echo "backups while racing: $ok succeeded, $failed failed cleanly"
  ((ok > 0)) || { echo "no backup succeeded at all"; return 1; }
  # Every snapshot holds only the app's tree: d is a directory with its file, or a symlink
  # (kept as a link), never what a link pointed at.
  for id in $(backups_of "$ns" racer); do
    snapshot=$BACKUP_ROOT/$ns/racer/$id/0
    extra=$(find "$snapshot" -mindepth 1 | sed "s|^$snapshot/||" | grep -vxE 'd|d/file|d\.real|d\.real/file' || true)
    [[ -z $extra ]] || { echo "snapshot $id holds more than the app's tree: $extra"; find "$snapshot"; return 1; }
    # A kept link is one the app made (tested without following it: on this node, `../..`
    # from the snapshot leads to the snapshot's own manifest); a directory has no snapshot in it.
    if [[ -L $snapshot/d ]]; then
      [[ $(readlink "$snapshot/d") =~ ^(/backup|/|\.\./\.\.|/data)$ ]] || { echo "snapshot $id: d -> $(readlink "$snapshot/d")"; return 1; }
    else
      [[ ! -e $snapshot/d/manifest.json && ! -e $snapshot/d/$id ]]
    fi
  done
  no_secret_in "$BACKUP_ROOT/$ns"
  no_host_path_pods "$ns"
}

# Reseals a snapshot as the mover seals format 3 (what a tenant who read our source can
# do): each replica's entries file (one compact JSON entry per line, keys in the order the
# mover's types serialize them) recorded in the manifest with its count, size and blake3,
# and the manifest sealed with the blake3 of its compact JSON with an empty checksum.
seal_manifest() {
  python3 - "$1" <<'PY'
import json, os, subprocess, sys
# Debian's b3sum (no Python package to install).
blake3 = lambda data: subprocess.run(["b3sum", "--no-names"], input=data, capture_output=True,
                                     check=True).stdout.split()[0].decode()
snapshot = sys.argv[1]
path = os.path.join(snapshot, "manifest.json")
manifest = json.load(open(path))
order = ["path", "pathHex", "type", "size", "mode", "uid", "gid", "mtime", "blake3", "target",
         "targetHex", "source", "inconsistent", "sparse", "hardLink", "hardLinkHex", "xattrs"]
compact = lambda value: json.dumps(value, separators=(",", ":"), ensure_ascii=False)
for replica in manifest["replicas"]:
    name = os.path.join(snapshot, f"entries-{replica['ordinal']}.jsonl")
    entries = [json.loads(line) for line in open(name)]
    data = "".join(compact({k: e[k] for k in order if k in e}) + "\n" for e in entries).encode()
    open(name, "wb").write(data)
    replica["entryFile"] = {"count": len(entries), "bytes": len(data),
                            "blake3": blake3(data)}
manifest["checksum"] = ""
manifest["checksum"] = blake3(compact(manifest).encode())
open(path, "w").write(compact(manifest))
PY
}

test_a_forged_snapshot_beneath_a_symlink_is_refused_and_nothing_outside_is_written() {
  local ns kubeconfig id forged live
  tenant forge; ns=$TNS; kubeconfig=$TKC
  as "$kubeconfig" apply -f - >/dev/null <<<"$(app_yaml victim '{"replicas": 1}')"
  wait_for "app ready" 120 app_ready "$ns" victim || { on_fail "$ns"; return 1; }
  as "$kubeconfig" exec victim-0 -c app -- sh -c 'echo live > /usr/share/hello/keep'
  [[ $(request "$ns" victim backup) == Succeeded ]] || { on_fail "$ns"; return 1; }
  id=$(jp "$ns" victim '{.status.backupRequest.backupId}')
  # What a tenant can write into its own backups through its own pods: a later snapshot
  # whose manifest (sealed correctly) has a symlink entry leading out, and a file beneath
  # it, both in path order as the mover lists them.
  forged=29991231T000000Z
  python3 - "$BACKUP_ROOT/$ns/victim" "$id" "$forged" "$SECRET_DIR" <<'PY'
import json, shutil, sys, os
root, real, forged, outside = sys.argv[1:]
shutil.copytree(os.path.join(root, real), os.path.join(root, forged), symlinks=True)
path = os.path.join(root, forged, "manifest.json")
manifest = json.load(open(path))
manifest["id"] = forged
json.dump(manifest, open(path, "w"))
entries_path = os.path.join(root, forged, "entries-0.jsonl")
entries = [json.loads(line) for line in open(entries_path)]
template = next(e for e in entries if e["type"] == "file")
link = {k: v for k, v in template.items() if k not in ("blake3",)}
link.update({"path": "escape", "type": "symlink", "size": len(outside), "target": outside})
planted = dict(template, path="escape/planted")
entries += [link, planted]
entries.sort(key=lambda e: e["path"].encode().split(b"/"))
open(entries_path, "w").write("".join(json.dumps(e) + "\n" for e in entries))
os.symlink(outside, os.path.join(root, forged, "0", "escape"))
PY
  seal_manifest "$BACKUP_ROOT/$ns/victim/$forged"
  live=$(data_dir "$ns" victim 0)
  [[ $(request "$ns" victim restore "hello-stateful.example.com/restore-from=$forged") == Failed ]] || { on_fail "$ns"; return 1; }
  status_contains "$ns" victim '{.status.restoreRequest.message}' "which is a symlink entry"
  [[ ! -e $SECRET_DIR/planted && $(ls "$SECRET_DIR") == secret ]] || { ls -la "$SECRET_DIR"; return 1; }
  [[ $(cat "$live/keep") == live && ! -e $live/escape ]]
  # The same manifest with an entry listed twice is refused too.
  python3 - "$BACKUP_ROOT/$ns/victim/$forged/entries-0.jsonl" <<'PY'
import json, sys
path = sys.argv[1]
entries = [e for e in map(json.loads, open(path)) if not e["path"].startswith("escape")]
entries.append(dict(entries[-1]))
open(path, "w").write("".join(json.dumps(e) + "\n" for e in entries))
PY
  seal_manifest "$BACKUP_ROOT/$ns/victim/$forged"
  [[ $(request "$ns" victim restore "hello-stateful.example.com/restore-from=$forged") == Failed ]] || { on_fail "$ns"; return 1; }
  status_contains "$ns" victim '{.status.restoreRequest.message}' "twice"
  wait_for "app back on its own data" 120 app_ready "$ns" victim
  [[ $(cat "$(data_dir "$ns" victim 0)/keep") == live ]]
}

test_option_like_restore_sources_never_reach_the_mover() {
  local ns kubeconfig value
  tenant opt; ns=$TNS; kubeconfig=$TKC
  as "$kubeconfig" apply -f - >/dev/null <<<"$(app_yaml app '{"replicas": 1}')"
  wait_for "app ready" 120 app_ready "$ns" app || { on_fail "$ns"; return 1; }
  for value in -x --target=/ --help; do
    [[ $(request "$ns" app restore "hello-stateful.example.com/restore-from=$value") == Failed ]] || { on_fail "$ns"; return 1; }
    status_contains "$ns" app '{.status.restoreRequest.message}' "is not a backup id"
  done
  [[ -z $(kubectl -n "$ns" get jobs -l app.kubernetes.io/component=restore -o name) ]]
  app_ready "$ns" app
}

test_look_alike_namespace_and_name_pairs_never_collide() {
  local base a ak b bk
  base=lk$RANDOM
  # team-a/db and team/a-db: the same string when joined with '-'.
  a=$base-a
  b=$base
  for ns in "$a" "$b"; do kubectl create namespace "$ns" >/dev/null; TEST_NAMESPACES+=("$ns"); done
  trap cleanup_tenants EXIT
  kubectl label namespace "$a" "$b" pod-security.kubernetes.io/enforce=baseline >/dev/null
  app_yaml db '{"replicas": 1}' | kubectl -n "$a" apply -f - >/dev/null
  app_yaml a-db '{"replicas": 1}' | kubectl -n "$b" apply -f - >/dev/null
  wait_for "$a/db ready" 120 app_ready "$a" db || { on_fail "$a"; return 1; }
  wait_for "$b/a-db ready" 120 app_ready "$b" a-db || { on_fail "$b"; return 1; }
  kubectl -n "$a" exec db-0 -c app -- sh -c "echo $a/db > /usr/share/hello/owner"
  kubectl -n "$b" exec a-db-0 -c app -- sh -c "echo $b/a-db > /usr/share/hello/owner"
  [[ $(kubectl get pv "hellostateful.$a.db.0" -o jsonpath='{.spec.claimRef.namespace}') == "$a" ]]
  [[ $(kubectl get pv "hellostateful.$b.a-db.0" -o jsonpath='{.spec.claimRef.namespace}') == "$b" ]]
  [[ $(cat "$(data_dir "$a" db 0)/owner") == "$a/db" && $(cat "$(data_dir "$b" a-db 0)/owner") == "$b/a-db" ]]
}

test_delete_and_recreate_without_restore_starts_empty() {
  local ns kubeconfig old new
  tenant fresh; ns=$TNS; kubeconfig=$TKC
  as "$kubeconfig" apply -f - >/dev/null <<<"$(app_yaml app '{"replicas": 1}')"
  wait_for "app ready" 120 app_ready "$ns" app || { on_fail "$ns"; return 1; }
  as "$kubeconfig" exec app-0 -c app -- sh -c 'echo earlier-life > /usr/share/hello/marker'
  old=$(data_dir "$ns" app 0)
  as "$kubeconfig" delete hs app --wait=true --timeout=120s >/dev/null
  [[ -z $(ls -A "$old") ]] || { echo "the deleted app's data stayed in $old:"; ls -A "$old"; return 1; }
  has_event "$ns" Deleted
  as "$kubeconfig" apply -f - >/dev/null <<<"$(app_yaml app '{"replicas": 1, "restoreFromExisting": false}')"
  wait_for "app ready again" 120 app_ready "$ns" app || { on_fail "$ns"; return 1; }
  new=$(data_dir "$ns" app 0)
  [[ $new != "$old" && ! -e $new/marker ]] || { echo "the new app got old data in $new"; ls -la "$new"; return 1; }
  if as "$kubeconfig" exec app-0 -c app -- test -e /usr/share/hello/marker; then echo "marker visible to the new app"; return 1; fi
}

# made_again_and_refused NS: namespace NS deleted and made again (by someone else), and an
# app of the same name in it refused the earlier namespace's backups.
made_again_and_refused() {
  local ns=$1
  kubectl delete namespace "$ns" --wait=true --timeout=180s >/dev/null
  kubectl create namespace "$ns" >/dev/null
  kubectl label namespace "$ns" pod-security.kubernetes.io/enforce=baseline >/dev/null
  app_yaml app '{"replicas": 1, "restoreFromExisting": true}' | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "refused" 90 bash -c "[[ \$(kubectl -n '$ns' get hs app -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].reason}') == BackupsOfAnotherNamespace ]]" ||
    { on_fail "$ns"; return 1; }
}

# one_backup_volume NS NAME: app NS/NAME has exactly one backup volume (else lists them).
one_backup_volume() { [[ $(backup_volumes_of "$1" "$2" | wc -l) == 1 ]] || { backup_volumes_of "$1" "$2"; return 1; }; }

# The earlier namespace moved its backups to another root, then deleted its app with its
# backups, which empties the directory under the current root only: the first root's still
# holds snapshots, and its volume stays as the record of whose they are. So a namespace made
# again by someone else is refused that directory too, and no Job reads it.
test_backups_left_under_an_earlier_root_stay_the_earlier_namespaces() {
  local ns kubeconfig first
  tenant moved; ns=$TNS; kubeconfig=$TKC
  trap "cleanup_tenants; rm -rf '$SMALL_ROOT/$ns'" EXIT
  as "$kubeconfig" apply -f - >/dev/null <<<"$(app_yaml app '{"replicas": 1, "restoreFromExisting": true}')"
  wait_for "app ready" 120 app_ready "$ns" app || { on_fail "$ns"; return 1; }
  [[ $(request "$ns" app backup) == Succeeded ]] || { on_fail "$ns"; return 1; }
  first=$(backups_of "$ns" app)
  as "$kubeconfig" apply -f - >/dev/null <<<"$(app_yaml app "{\"replicas\": 1, \"restoreFromExisting\": true, \"backup\": {\"target\": {\"hostPath\": \"$SMALL_ROOT\"}}}")"
  [[ $(request "$ns" app backup) == Succeeded ]] || { on_fail "$ns"; return 1; }
  [[ -n $(find "$SMALL_ROOT/$ns/app" -mindepth 1 -maxdepth 1 -type d ! -name '.*') ]] || { echo "no backup under $SMALL_ROOT"; return 1; }
  [[ $(backup_volumes_of "$ns" app | wc -l) == 2 ]] || { backup_volumes_of "$ns" app; return 1; }
  as "$kubeconfig" annotate hs app hello-stateful.example.com/delete-backups=true >/dev/null
  as "$kubeconfig" delete hs app --wait=true --timeout=120s >/dev/null || { on_fail "$ns"; return 1; }
  [[ -z $(find "$SMALL_ROOT/$ns/app" -mindepth 1 -maxdepth 1 -type d ! -name '.*') ]] || { echo "not purged: $(ls -A "$SMALL_ROOT/$ns/app")"; return 1; }
  [[ -n $first && $(backups_of "$ns" app) == "$first" ]] || { echo "the first root holds: $(backups_of "$ns" app)"; return 1; }
  # The purged root's volume was deleted with the app; the API server removes it once the
  # volume-protection finalizer is off, which may be after the app is gone.
  wait_for "only the first root's backup volume left" 60 one_backup_volume "$ns" app || return 1

  made_again_and_refused "$ns" || return 1
  [[ -z $(kubectl -n "$ns" get jobs,pods -o name) ]] || { kubectl -n "$ns" get jobs,pods; return 1; }
  [[ $(backups_of "$ns" app) == "$first" ]]
}

test_a_namespace_made_again_by_someone_else_gets_no_data_and_no_backups() {
  local ns kubeconfig old_data uid
  tenant reborn; ns=$TNS; kubeconfig=$TKC
  as "$kubeconfig" apply -f - >/dev/null <<<"$(app_yaml app '{"replicas": 1, "restoreFromExisting": true}')"
  wait_for "app ready" 120 app_ready "$ns" app || { on_fail "$ns"; return 1; }
  as "$kubeconfig" exec app-0 -c app -- sh -c 'echo first-owner > /usr/share/hello/marker'
  [[ $(request "$ns" app backup) == Succeeded ]] || { on_fail "$ns"; return 1; }
  old_data=$(data_dir "$ns" app 0)
  # The namespace goes (its app with it), and someone else makes one of the same name.
  made_again_and_refused "$ns" || return 1
  has_event "$ns" BackupsOfAnotherNamespace
  # No Job could read the earlier namespace's backups, and no pod runs on its data.
  [[ -z $(kubectl -n "$ns" get jobs,pods -o name) ]] || { kubectl -n "$ns" get jobs,pods; return 1; }
  uid=$(kubectl -n "$ns" get hs app -o jsonpath='{.metadata.uid}')
  [[ $(data_dir "$ns" app 0) != "$old_data" ]]
  [[ ! -e $HOSTPATH_ROOT/$ns/app/$uid/0/marker ]]
  # The backups are still there for the admin to decide.
  has_backup "$ns" app
}

# writer_pod NAME IMAGE ARGS-JSON [READ-ONLY [INIT-CONTAINERS-JSON]]: a pod that mounts the
# backup claim of app db.
writer_pod() {
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  restartPolicy: Never
  securityContext: {seccompProfile: {type: RuntimeDefault}}
  initContainers: ${5:-[]}
  containers:
    - name: c
      image: $2
      args: $3
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
      volumeMounts: [{name: backups, mountPath: /backup}]
  volumes: [{name: backups, persistentVolumeClaim: {claimName: backups-db, readOnly: ${4:-false}}}]
YAML
}

# The app's backup claim is an ordinary claim of the tenant's namespace; only the mover may
# write through it. The tenant's pods and workloads mount it read-only, except the plugin's
# `backups delete` (the mover image the claim names, running delete), which still works as
# the tenant; the claim cannot be stripped of the label that makes it the policy's concern,
# nor an ephemeral container added to a pod that writes it.
test_a_tenants_pods_write_its_backups_only_to_delete_one() {
  local ns kubeconfig image older newer ids refusal="holds the backups of hellostateful app db"
  tenant writer; ns=$TNS; kubeconfig=$TKC
  as "$kubeconfig" apply -f - >/dev/null <<<"$(app_yaml db '{"replicas": 1}')"
  wait_for "db ready" 120 app_ready "$ns" db || { on_fail "$ns"; return 1; }
  [[ $(request "$ns" db backup) == Succeeded ]] || { on_fail "$ns"; return 1; }
  [[ $(request "$ns" db backup) == Succeeded ]] || { on_fail "$ns"; return 1; }
  image=$(kubectl -n "$ns" get pvc backups-db -o jsonpath='{.metadata.annotations.hello-stateful\.example\.com/mover-image}')
  [[ -n $image ]] || { kubectl -n "$ns" get pvc backups-db -o yaml; return 1; }

  local sh='["sh", "-c", "head -c 1000000 /dev/zero > /backup/filler"]'
  expect_fail "$refusal" as "$kubeconfig" create --dry-run=server -f - <<<"$(writer_pod fill busybox:1.36 "$sh")"
  as "$kubeconfig" create --dry-run=server -f - >/dev/null <<<"$(writer_pod read busybox:1.36 '["ls", "/backup"]' true)" ||
    { echo "a read-only mount was refused"; return 1; }
  # The mover image itself, for anything but delete, or with company.
  expect_fail "$refusal" as "$kubeconfig" create --dry-run=server -f - <<<"$(writer_pod m "$image" '["backup", "--target=/backup"]')"
  expect_fail "$refusal" as "$kubeconfig" create --dry-run=server -f - \
    <<<"$(writer_pod m "$image" '["delete", "--target=/backup"]' false '[{name: i, image: busybox:1.36, command: ["true"]}]')"
  as "$kubeconfig" create --dry-run=server -f - >/dev/null <<<"$(writer_pod m "$image" '["delete", "--target=/backup"]')" ||
    { echo "the plugin's delete pod was refused"; return 1; }
  # Workloads' pod templates alike.
  expect_fail "$refusal" as "$kubeconfig" create --dry-run=server -f - <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: fill}
spec:
  selector: {matchLabels: {a: fill}}
  template:
    metadata: {labels: {a: fill}}
$(writer_pod fill busybox:1.36 "$sh" | sed -n '/^spec:/,$p' | sed 's/^/    /; s/restartPolicy: Never/restartPolicy: Always/')
YAML
  expect_fail "$refusal" as "$kubeconfig" create --dry-run=server -f - <<YAML
apiVersion: batch/v1
kind: CronJob
metadata: {name: fill}
spec:
  schedule: "* * * * *"
  jobTemplate:
    spec:
      template:
$(writer_pod fill busybox:1.36 "$sh" | sed -n '/^spec:/,$p' | sed 's/^/        /')
YAML
  # The label that makes the claim the policy's cannot be taken away.
  expect_fail "is the hellostateful reconciler's" \
    as "$kubeconfig" label pvc backups-db app.kubernetes.io/managed-by-
  # A pod that writes the claim (an admin's here) takes no ephemeral container from the
  # tenant, even one the admin lets debug its pods (`edit` alone may not).
  kubectl -n "$ns" create role debugger --verb=update,patch --resource=pods/ephemeralcontainers >/dev/null
  kubectl -n "$ns" create rolebinding debugger --role=debugger --serviceaccount="$ns:tenant" >/dev/null
  kubectl -n "$ns" create -f - >/dev/null <<<"$(writer_pod holder busybox:1.36 '["sleep", "600"]')"
  wait_for "holder running" 60 bash -c "[[ \$(kubectl -n '$ns' get pod holder -o jsonpath='{.status.phase}') == Running ]]" ||
    { on_fail "$ns"; return 1; }
  expect_fail "$refusal" as "$kubeconfig" debug holder --image=busybox:1.36 -- true
  kubectl -n "$ns" delete pod holder --wait=false >/dev/null

  # The plugin's delete, as the tenant.
  mapfile -t ids < <(backups_of "$ns" db)
  older=${ids[0]} newer=${ids[1]}
  KUBECONFIG=$kubeconfig "$HS_PLUGIN" backups delete db "$older" --yes | grep -q "1 left" ||
    { on_fail "$ns"; return 1; }
  [[ $(backups_of "$ns" db) == "$newer" ]] || { backups_of "$ns" db; return 1; }
}

# apps_with NS N FIELD VALUE: N apps of NS have their Ready condition's FIELD (status,
# reason) at VALUE.
apps_with() {
  local count
  count=$(kubectl -n "$1" get hellostateful -o json |
    jq --arg field "$3" --arg value "$4" '[.items[] | select(any(.status.conditions[]?; .type == "Ready" and .[$field] == $value))] | length')
  ((count == $2))
}

# More deletions that cannot go on than the reconciler has workers (32): each waits on a
# wipe Job its namespace's quota refuses. None holds a worker while it waits, so another
# tenant's restore is acknowledged as soon as its own Jobs allow; once the quota goes, the
# deletions end.
test_a_tenants_stalled_deletions_delay_no_other_tenants_restore() {
  local ns other n=34 started took
  tenant stalled; ns=$TNS
  tenant bystander; other=$TNS
  kubectl -n "$other" apply -f - >/dev/null <<<"$(app_yaml other '{"replicas": 1}')"
  kubectl -n "$ns" create quota no-jobs --hard=count/jobs.batch=0 >/dev/null
  for i in $(seq 1 $n); do app_yaml "s$i" '{"replicas": 1}'; echo ---; done | kubectl -n "$ns" apply -f - >/dev/null
  wait_for "$n apps ready" 300 apps_with "$ns" "$n" status True || { on_fail "$ns"; return 1; }
  wait_for "another tenant's app ready" 120 app_ready "$other" other || { on_fail "$other"; return 1; }
  [[ $(request "$other" other backup) == Succeeded ]] || { on_fail "$other"; return 1; }

  kubectl -n "$ns" delete hellostateful --all --wait=false >/dev/null
  wait_for "every deletion refused its wipe Job" 180 apps_with "$ns" "$n" reason ChildRefused ||
    { kubectl -n "$ns" get hellostateful -o jsonpath='{range .items[*]}{.metadata.name}: {.status.conditions[?(@.type=="Ready")].message}{"\n"}{end}'; return 1; }
  started=$SECONDS
  [[ $(request "$other" other restore) == Succeeded ]] || { on_fail "$other"; return 1; }
  took=$((SECONDS - started))
  echo "  another tenant's restore acknowledged in ${took}s beside $n stalled deletions"
  ((took <= 90)) || { echo "the restore waited ${took}s"; return 1; }

  # The quota gone (and each app touched, so that none waits out its backoff), they end.
  kubectl -n "$ns" delete quota no-jobs >/dev/null
  kubectl -n "$ns" annotate hellostateful --all e2e/touched=1 >/dev/null 2>&1 || true
  wait_for "the deletions end" 300 bash -c "[[ -z \$(kubectl -n '$ns' get hellostateful -o name) ]]" ||
    { on_fail "$ns"; return 1; }
}

# look_alike_job NAME APP: a suspended Job that carries the reconciler's labels for app APP,
# as the set Job of a backup in one part.
look_alike_job() {
  cat <<YAML
apiVersion: batch/v1
kind: Job
metadata:
  name: $1
  labels:
    app.kubernetes.io/name: hellostateful
    app.kubernetes.io/managed-by: hellostateful-reconciler
    app.kubernetes.io/instance: $2
    app.kubernetes.io/component: backup
    hello-stateful.example.com/parts: "1"
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox:1.36, command: ["true"]}]
YAML
}

test_a_tenant_cannot_forge_the_reconcilers_label() {
  local ns kubeconfig
  tenant forger; ns=$TNS; kubeconfig=$TKC
  expect_fail "is the hellostateful reconciler's" as "$kubeconfig" create -f - <<<"$(look_alike_job forged x)"
  # Without the label, the same Job is the tenant's own business.
  look_alike_job plain x | sed '/managed-by/d' | as "$kubeconfig" create --dry-run=server -f - >/dev/null
  # Nor can a tenant give the label to an object of its own afterwards.
  as "$kubeconfig" create service clusterip plain --tcp=80 >/dev/null
  expect_fail "is the hellostateful reconciler's" \
    as "$kubeconfig" label service plain app.kubernetes.io/managed-by=hellostateful-reconciler
}

# The Job that crashed every reconciler pass (a tenant's, in a cluster without the label
# policy: an admin writes it here), beside an app of the name its labels give: the
# reconciler keeps running, and that app and another tenant's are served.
test_a_look_alike_job_stops_no_ones_reconciliation() {
  local ns other before
  tenant crasher; ns=$TNS
  kubectl -n "$ns" apply -f - >/dev/null <<<"$(app_yaml x '{"replicas": 1}')"
  wait_for "app x ready" 120 app_ready "$ns" x || { on_fail "$ns"; return 1; }
  before=$(reconciler_restarts)
  kubectl -n "$ns" create -f - >/dev/null <<<"$(look_alike_job "x-$(printf 'a%.0s' {1..61})" x)"
  tenant bystander; other=$TNS
  kubectl -n "$other" apply -f - >/dev/null <<<"$(app_yaml other '{"replicas": 1}')"
  wait_for "another tenant's app ready" 120 app_ready "$other" other || { on_fail "$other"; return 1; }
  [[ $(request "$other" other backup) == Succeeded ]] || { on_fail "$other"; return 1; }
  [[ $(request "$ns" x backup) == Succeeded ]] || { on_fail "$ns"; return 1; }
  [[ $(reconciler_restarts) == "$before" ]] ||
    { echo "the reconciler restarted: $before -> $(reconciler_restarts)"; on_fail "$ns"; return 1; }
  # The look-alike was never taken for a part of the app's: still suspended, nothing made for it.
  [[ $(kubectl -n "$ns" get jobs -o name | grep -c "x-aaaa") == 1 ]] || { kubectl -n "$ns" get jobs; return 1; }
  [[ $(kubectl -n "$ns" get job "x-$(printf 'a%.0s' {1..61})" -o jsonpath='{.spec.suspend}') == true ]]
}

# short_hash TEXT: the eight hex digits `names::short_hash` names Jobs with (FNV-1a, folded).
short_hash() {
  python3 -c 'import sys
h = 0xcbf29ce484222325
for b in sys.argv[1].encode():
    h = ((h ^ b) * 0x100000001b3) % 2**64
print(format((h >> 32) ^ (h & 0xffffffff), "08x"))' "$1"
}

# A tenant can make a Job of the name the app's restore Job will take (made from the app's
# name, uid and token, all readable): the API server then refuses the app's Job for good.
# Status names that Job and how to delete it; once deleted, the restore runs to its end.
test_a_job_holding_the_restore_jobs_name_is_named_until_deleted() {
  local ns kubeconfig uid token=t-held name ready
  tenant squatter; ns=$TNS; kubeconfig=$TKC
  kubectl -n "$ns" apply -f - >/dev/null <<<"$(app_yaml x '{"replicas": 1}')"
  wait_for "app x ready" 120 app_ready "$ns" x || { on_fail "$ns"; return 1; }
  [[ $(request "$ns" x backup) == Succeeded ]] || { on_fail "$ns"; return 1; }
  uid=$(kubectl -n "$ns" get hs x -o jsonpath='{.metadata.uid}')
  name=restore-x-$(short_hash "$uid/$token")
  look_alike_job "$name" x | sed '/managed-by/d' | as "$kubeconfig" create -f - >/dev/null || return 1
  as "$kubeconfig" annotate hs x "hello-stateful.example.com/restore-requested=$token" >/dev/null || return 1
  ready='{.status.conditions[?(@.type=="Ready")].message}'
  wait_for "status names the Job holding the name" 120 \
    status_contains "$ns" x "$ready" "kubectl delete job $name -n $ns" || { on_fail "$ns"; return 1; }
  [[ $(jp "$ns" x '{.status.restoreRequest.phase}') != Running ]] ||
    { echo "status says a restore runs that cannot"; on_fail "$ns"; return 1; }
  has_event "$ns" ChildRefused || { on_fail "$ns"; return 1; }
  # The look-alike was never taken for the app's Job: still suspended, no pod of it.
  [[ $(kubectl -n "$ns" get job "$name" -o jsonpath='{.spec.suspend}') == true ]] || return 1
  as "$kubeconfig" delete job "$name" --wait=true >/dev/null || return 1
  # The pass is retried with backoff (the look-alike's deletion is not watched).
  wait_for "restore $token acknowledged" 360 acknowledged "$ns" x restoreRequest "$token" || { on_fail "$ns"; return 1; }
  [[ $(jp "$ns" x '{.status.restoreRequest.phase}') == Succeeded ]] || { on_fail "$ns"; return 1; }
  wait_for "app x ready again" 120 app_ready "$ns" x || { on_fail "$ns"; return 1; }
}

# The reconciler's resident memory in kB, by its pid (see reconciler_pid).
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
# one_reconciler: one reconciler pod, not being deleted (a test before may have run two, and
# a replica scaled away stops gracefully, a while after it is deleted), and its process.
one_reconciler() {
  local pods
  pods=$(kubectl -n "$RECONCILER_NS" get pods -l app.kubernetes.io/component=reconciler \
    -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{"\n"}{end}')
  [[ $(wc -l <<<"$pods") == 1 && $pods != *" "?* ]] && reconciler_pid "${pods% }" >/dev/null &&
    [[ $(pgrep -fc 'hellostateful-reconciler run') == 1 ]]
}
# observed NS COUNT: COUNT apps of NS have a status for their current generation.
observed() {
  (( $(kubectl -n "$1" get hellostateful -o json |
    jq '[.items[] | select(.status.observedGeneration == .metadata.generation)] | length') == $2 ))
}

# A tenant's apps carrying all the metadata the API server allows (256 KiB of annotations
# each, of the operator's own group too, and a request token as long): the reconciler keeps
# only what it reads of them, bounded, so its memory grows by far less than their size.
test_a_tenants_oversized_apps_cost_the_reconciler_little() {
  local ns kubeconfig pod pid before after pad token i
  wait_for "one reconciler" 120 one_reconciler
  pod=$(kubectl -n "$RECONCILER_NS" get pods -l app.kubernetes.io/component=reconciler -o jsonpath='{.items[0].metadata.name}')
  tenant hoarder; ns=$TNS; kubeconfig=$TKC
  for i in $(seq 1 100); do app_yaml "big-$i" '{"replicas": 0}'; echo ---; done |
    as "$kubeconfig" create -f - >/dev/null
  wait_for "100 apps reconciled" 180 observed "$ns" 100 || { on_fail "$ns"; return 1; }
  pid=$(reconciler_pid "$pod"); before=$(rss_kb "$pid")
  # 240 kB each (an argument is at most 128 kB): 24 MB in all, were it kept.
  pad=$(head -c 60000 /dev/zero | tr '\0' x)
  as "$kubeconfig" annotate hellostateful --all "hello-stateful.example.com/pad-1=$pad" \
    "hello-stateful.example.com/pad-2=$pad" "pad-3=$pad" "pad-4=$pad" >/dev/null
  # Last, a request with an oversized token: once it is refused, the reconciler has seen
  # every annotation before it (a watch delivers in order).
  token=$(head -c 4096 /dev/zero | tr '\0' t)
  as "$kubeconfig" annotate hellostateful big-100 "hello-stateful.example.com/backup-requested=$token" >/dev/null
  wait_for "the oversized token refused" 60 status_contains "$ns" big-100 '{.status.backupRequest.message}' "4096 bytes" ||
    { on_fail "$ns"; return 1; }
  # Read again until answered: a read of one of these large apps may fail on a loaded
  # machine, and jp then prints nothing (a cold CI run saw it once).
  wait_for "the oversized request Failed" 30 status_contains "$ns" big-100 '{.status.backupRequest.phase}' Failed ||
    { on_fail "$ns"; return 1; }
  (( $(jp "$ns" big-100 '{.status.backupRequest.token}' | wc -c) < 300 )) || { echo "the token was copied into status"; return 1; }
  after=$(rss_kb "$pid")
  echo "reconciler RSS: $((before / 1000)) MB before the annotations, $((after / 1000)) MB after"
  [[ $(reconciler_pid "$pod") == "$pid" ]] || { echo "the reconciler restarted"; return 1; }
  (( after - before < 8000 )) || { echo "its memory grew by $(((after - before) / 1000)) MB"; return 1; }
}

test_even_the_reconciler_cannot_write_outside_the_roots() {
  local pv job
  pv='apiVersion: v1
kind: PersistentVolume
metadata: {name: hellostateful-vap-probe}
spec: {capacity: {storage: 1Gi}, accessModes: [ReadWriteOnce], hostPath: {path: PATH},
       claimRef: {namespace: ns, name: backups-app}}'
  expect_fail "outside the allowed roots" kubectl --as="$RECONCILER_SA" create --dry-run=server -f - <<<"${pv/PATH//etc}"
  expect_fail "outside the allowed roots" kubectl --as="$RECONCILER_SA" create --dry-run=server -f - <<<"${pv/PATH//tmp/backup}"
  expect_fail "outside the allowed roots" kubectl --as="$RECONCILER_SA" create --dry-run=server -f - <<<"${pv/PATH//tmp/backup-other/x}"
  kubectl --as="$RECONCILER_SA" create --dry-run=server -f - <<<"${pv/PATH//tmp/backup/ns/app}" >/dev/null
  job='apiVersion: batch/v1
kind: Job
metadata: {name: vap-probe, namespace: default}
spec: {template: {spec: {restartPolicy: Never, automountServiceAccountToken: false,
  containers: [{name: c, image: IMAGE, securityContext: {allowPrivilegeEscalation: false}}]VOLUMES}}}'
  local mover
  mover=$(kubectl -n hellostateful-system get configmap hellostateful-settings -o jsonpath='{.data.moverImage}')
  expect_fail "run only the mover image" kubectl --as="$RECONCILER_SA" create --dry-run=server -f - \
    <<<"$(sed -e 's/IMAGE/busybox:1.36/' -e 's/VOLUMES//' <<<"$job")"
  expect_fail "never mount a node path" kubectl --as="$RECONCILER_SA" create --dry-run=server -f - \
    <<<"$(sed -e "s|IMAGE|$mover|" -e 's|VOLUMES|, volumes: [{name: h, hostPath: {path: /}}]|' <<<"$job")"
  kubectl --as="$RECONCILER_SA" create --dry-run=server -f - <<<"$(sed -e "s|IMAGE|$mover|" -e 's/VOLUMES//' <<<"$job")" >/dev/null
}

# settings KEY=VALUE...: the reconciler restarted with these settings (as an admin sets them)
settings() {
  local patch="" pair
  for pair in "$@"; do patch+="${patch:+, }\"${pair%%=*}\": \"${pair#*=}\""; done
  kubectl -n "$RECONCILER_NS" patch configmap hellostateful-settings --type merge -p "{\"data\": {$patch}}" >/dev/null
  kubectl -n "$RECONCILER_NS" rollout restart deploy/hellostateful-reconciler >/dev/null
  kubectl -n "$RECONCILER_NS" rollout status deploy/hellostateful-reconciler --timeout=120s >/dev/null
}

# The admin's settings for untrusted tenants: no static node-directory volumes (they take
# node disk with no bound), and tolerations only of the taints listed (none of the control
# plane's). A tenant's app asking for either is refused with the reason, and nothing of it
# is made; one within the settings is made. And a bound on an app's backups in a node
# directory: a backup that would pass it fails, saying so, and the earlier one stays.
test_the_admin_may_refuse_static_volumes_and_tolerations_and_bound_backups() {
  local ns kubeconfig first
  tenant admin; ns=$TNS; kubeconfig=$TKC
  trap "settings staticDataVolumes=allow 'tolerableTaints=*' nodeBackupLimit=; cleanup_tenants" EXIT
  settings staticDataVolumes=refuse tolerableTaints=hellostateful.example.com/dedicated
  as "$kubeconfig" apply -f - >/dev/null <<<"$(app_yaml static '{"replicas": 1}')"
  as "$kubeconfig" apply -f - >/dev/null <<<"$(app_yaml tolerant '{"replicas": 1, "storage": {"storageClassName": "hs-e2e-none"}, "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]}')"
  as "$kubeconfig" apply -f - >/dev/null <<<"$(app_yaml within '{"replicas": 1, "storage": {"storageClassName": "hs-e2e-none"}, "tolerations": [{"key": "hellostateful.example.com/dedicated", "operator": "Exists"}]}')"
  wait_for "static refused" 60 bash -c "[[ \$(kubectl -n '$ns' get hs static -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].reason}') == StaticDataVolumesRefused ]]" ||
    { on_fail "$ns"; return 1; }
  wait_for "tolerant refused" 60 bash -c "[[ \$(kubectl -n '$ns' get hs tolerant -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].reason}') == TolerationRefused ]]" ||
    { on_fail "$ns"; return 1; }
  has_event "$ns" StaticDataVolumesRefused
  has_event "$ns" TolerationRefused
  kubectl -n "$ns" get hs tolerant -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}' | grep -qF 'node-role.kubernetes.io/control-plane'
  wait_for "within's StatefulSet" 60 kubectl -n "$ns" get statefulset within || { on_fail "$ns"; return 1; }
  [[ $(kubectl -n "$ns" get statefulsets,pvc,jobs -o name | grep -cE '/(data-)?(static|tolerant)') == 0 ]] ||
    { kubectl -n "$ns" get statefulsets,pvc,jobs; return 1; }

  settings staticDataVolumes=allow nodeBackupLimit=64Ki
  as "$kubeconfig" apply -f - >/dev/null <<<"$(app_yaml bounded '{"replicas": 1}')"
  wait_for "bounded ready" 120 app_ready "$ns" bounded || { on_fail "$ns"; return 1; }
  [[ $(request "$ns" bounded backup) == Succeeded ]] || { on_fail "$ns"; return 1; }
  first=$(backups_of "$ns" bounded)
  head -c 100000 /dev/urandom >"$(data_dir "$ns" bounded 0)/big"
  [[ $(request "$ns" bounded backup) == Failed ]] || { on_fail "$ns"; return 1; }
  kubectl -n "$ns" get hs bounded -o jsonpath='{.status.backupRequest.message}' | grep -F "past the 65536 bytes" | grep -qF nodeBackupLimit ||
    { kubectl -n "$ns" get hs bounded -o jsonpath='{.status.backupRequest.message}'; return 1; }
  [[ -n $first && $(backups_of "$ns" bounded) == "$first" ]]
}

# Every test is a tenant of its own (its own namespaces and kubeconfig), so the longest run
# in a lane beside the others.
second_lane() {
  run_test symlink_swaps_in_the_app_never_leak_node_files_into_backups test_symlink_swaps_in_the_app_never_leak_node_files_into_backups
  run_test a_namespace_made_again_by_someone_else_gets_no_data_and_no_backups test_a_namespace_made_again_by_someone_else_gets_no_data_and_no_backups
  run_test backups_left_under_an_earlier_root_stay_the_earlier_namespaces test_backups_left_under_an_earlier_root_stay_the_earlier_namespaces
  run_test a_look_alike_job_stops_no_ones_reconciliation test_a_look_alike_job_stops_no_ones_reconciliation
  run_test a_tenants_stalled_deletions_delay_no_other_tenants_restore test_a_tenants_stalled_deletions_delay_no_other_tenants_restore
}
beside second_lane
run_test node_paths_as_backup_targets_are_refused test_node_paths_as_backup_targets_are_refused
run_test a_tenant_sees_only_its_own_backups test_a_tenant_sees_only_its_own_backups
run_test a_forged_snapshot_beneath_a_symlink_is_refused test_a_forged_snapshot_beneath_a_symlink_is_refused_and_nothing_outside_is_written
run_test option_like_restore_sources_never_reach_the_mover test_option_like_restore_sources_never_reach_the_mover
run_test look_alike_namespace_and_name_pairs_never_collide test_look_alike_namespace_and_name_pairs_never_collide
run_test delete_and_recreate_without_restore_starts_empty test_delete_and_recreate_without_restore_starts_empty
run_test even_the_reconciler_cannot_write_outside_the_roots test_even_the_reconciler_cannot_write_outside_the_roots
run_test a_tenant_cannot_forge_the_reconcilers_label test_a_tenant_cannot_forge_the_reconcilers_label
run_test a_tenants_pods_write_its_backups_only_to_delete_one test_a_tenants_pods_write_its_backups_only_to_delete_one
run_test a_job_holding_the_restore_jobs_name_is_named_until_deleted test_a_job_holding_the_restore_jobs_name_is_named_until_deleted
wait_beside
run_test --alone a_tenants_oversized_apps_cost_the_reconciler_little test_a_tenants_oversized_apps_cost_the_reconciler_little
run_test --alone the_admin_may_refuse_static_volumes_and_tolerations_and_bound_backups test_the_admin_may_refuse_static_volumes_and_tolerations_and_bound_backups
summary
