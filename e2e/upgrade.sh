#!/usr/bin/env bash
# Upgrades from the previous version: the version named below is built once (cached by
# commit), installed with its own plugin on the test cluster, given apps with each kind of
# backup target and backups of them; then the current plugin's `install` upgrades it, as
# CHANGELOG.md tells users to. Proven: the apps keep running (no pod replaced or
# restarted), every old backup is listed, verified and restored, and new backups work.
# Going back to an earlier version is not supported (CHANGELOG.md's version policy): no
# test does it.
#
#   bash e2e/upgrade.sh      (the cluster up, the object store up, the reconciler installed,
#                             as e2e/run-all does; it leaves the current version installed)
#
# It removes the install and makes one of its own: run it after the suites that use it.
set -uo pipefail
E2E_SUITE=upgrade
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=hs.sh
source "$(dirname "${BASH_SOURCE[0]}")/hs.sh"

# The previous version. 0.1.0 was never tagged, so until the release after 0.2.0 names
# v0.2.0's commit here, it is a commit of 0.2.0's making that CI passed (2026-12-07), before
# per-app metrics, spec.backup.maxAgeSeconds, lastBackup's snapshot counts, the Helm chart
# and the version check of `install`.
PREVIOUS=0d3f0a6bdd5682d5d97010baa5e33f16aa91a9c9
PREVIOUS_DIR=${HS_E2E_CACHE:-/var/cache/hellostateful}/previous-$PREVIOUS
PREVIOUS_PLUGIN=$PREVIOUS_DIR/kubectl-hellostateful
PREVIOUS_IMAGE=hellostateful-reconciler:previous-${PREVIOUS:0:12}
# What e2e/install sets, kept across the upgrade by `install` (it keeps the cluster's settings).
BACKUP_ROOTS=/tmp/backup,/tmp/hs-e2e-small

# The previous version's plugin and image, built from its own tree with its own build script
# (the one its release used), in the shared cargo target directory: its dependencies are
# those already built. The image is packed again under a name of its own, so that the
# current image's tag keeps naming the current image. e2e/run-all runs this while other
# suites run (E2E_RUN=^previous_version$), after copying the current plugin away: cargo puts
# the plugin it builds where the current one was.
test_previous_version() {
  [[ -x $PREVIOUS_PLUGIN && -f $PREVIOUS_DIR/image.tar ]] && return 0
  # A shallow clone (as some CI checkouts are) lacks it: its origin has it.
  git -C "$E2E_ROOT" cat-file -e "$PREVIOUS^{commit}" 2>/dev/null ||
    git -C "$E2E_ROOT" fetch -q --unshallow 2>/dev/null || true
  git -C "$E2E_ROOT" cat-file -e "$PREVIOUS^{commit}" ||
    { echo "the previous version $PREVIOUS is not in this clone's history"; return 1; }
  local triple arch target=${CARGO_TARGET_DIR:-$E2E_ROOT/target}
  case $(uname -m) in
    x86_64) triple=x86_64-unknown-linux-gnu arch=amd64 ;;
    aarch64) triple=aarch64-unknown-linux-gnu arch=arm64 ;;
  esac
  rm -rf "$PREVIOUS_DIR"
  mkdir -p "$PREVIOUS_DIR/src"
  git -C "$E2E_ROOT" archive "$PREVIOUS" | tar -x -C "$PREVIOUS_DIR/src"
  # Cargo names a workspace crate's artifacts by its path within the workspace, so both
  # versions' crates share names, and it judges them up to date by the files' times: files
  # of now make it compile the previous version's (tar gives them the commit's time), and
  # forgetting what it built (below) makes the next build of a checkout compile its own.
  find "$PREVIOUS_DIR/src" -type f -exec touch {} +
  local status=0
  CARGO_TARGET_DIR=$target nice -n 10 "$PREVIOUS_DIR/src/e2e/build-image" --fast --with-plugin \
    "$PREVIOUS_DIR/own-name.tar" >/dev/null || status=$?
  rm -rf "$target/$triple/release/.fingerprint/"{hellostateful-api,hellostateful-mover,hellostateful-reconciler,kubectl-hellostateful}-*
  ((status == 0)) || return 1
  cp "$target/$triple/release/hellostateful-reconciler" "$PREVIOUS_DIR/hellostateful-reconciler"
  cp "$target/$triple/release/kubectl-hellostateful" "$PREVIOUS_DIR/plugin"
  "$E2E_ROOT/e2e/mkimage" --name "$PREVIOUS_IMAGE" --out "$PREVIOUS_DIR/image.tar.part" \
    --file "$PREVIOUS_DIR/hellostateful-reconciler:/usr/local/bin/hellostateful-reconciler" \
    --file "/etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt" \
    --entrypoint /usr/local/bin/hellostateful-reconciler --cmd run --user 65532 --arch "$arch"
  rm -f "$PREVIOUS_DIR/own-name.tar" "$PREVIOUS_DIR/hellostateful-reconciler"
  mv "$PREVIOUS_DIR/image.tar.part" "$PREVIOUS_DIR/image.tar"
  # Last: its presence says the build is whole.
  mv "$PREVIOUS_DIR/plugin" "$PREVIOUS_PLUGIN"
}

# reconciler_runs IMAGE: the reconciler's one pod runs IMAGE and is Ready.
reconciler_runs() {
  [[ $(kubectl -n "$RECONCILER_NS" get pods -l app.kubernetes.io/component=reconciler \
    -o jsonpath='{range .items[*]}{.spec.containers[0].image} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}') == "$1 True" ]]
}
# pods_of NS NAME: the app's pods, with their uid and restart count, one a line.
pods_of() {
  kubectl -n "$1" get pods -l "app.kubernetes.io/instance=$2,app.kubernetes.io/component=app" --sort-by=.metadata.name \
    -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.uid} {.status.containerStatuses[0].restartCount}{"\n"}{end}'
}
# app_metric_seen NS NAME: the reconciler exports the app's per-app metrics (the current
# version does, from its first pass over the app; the previous one had none).
app_metric_seen() {
  local metrics
  metrics=$(kubectl get --raw "/api/v1/namespaces/$RECONCILER_NS/services/hellostateful-reconciler-metrics:8080/proxy/metrics")
  [[ $metrics == *"hellostateful_backups_total{namespace=\"$1\",name=\"$2\","* ]]
}

test_apps_and_backups_of_the_previous_version_survive_the_upgrade() {
  local ns node_first store_first node_pods store_pods node_old store_old id
  [[ -x $PREVIOUS_PLUGIN ]] || { echo "no previous version at $PREVIOUS_DIR (test previous_version)"; return 1; }
  eval "$(e2e/objstore up)"
  e2e/objstore bucket tenant-a

  # A cluster with the previous version only: the current one is removed (the CRD stays,
  # as `uninstall` keeps it), and the previous one installed by its own plugin.
  "$HS_PLUGIN" uninstall --yes >/dev/null
  wait_for "the reconciler's namespace gone" 120 not_found namespace "$RECONCILER_NS"
  e2e/cluster load "$PREVIOUS_DIR/image.tar" >/dev/null
  "$PREVIOUS_PLUGIN" install --image "$PREVIOUS_IMAGE" --backup-roots "$BACKUP_ROOTS" --timeout 3m >/dev/null
  # After an uninstall and an install, the API server is restarted, as README's
  # Troubleshooting says (kubernetes/kubernetes#130887: else it fences with a stale Lease).
  e2e/cluster restart kube-apiserver >/dev/null 2>&1
  wait_for "the API server back" 60 kubectl get --raw /readyz
  kubectl -n "$RECONCILER_NS" patch configmap hellostateful-settings --type merge \
    -p "{\"data\": {\"moverStartSeconds\": \"${E2E_MOVER_START_SECONDS:-60}\"}}" >/dev/null
  kubectl -n "$RECONCILER_NS" rollout restart deployment/hellostateful-reconciler >/dev/null
  wait_for "the previous reconciler running" 120 reconciler_runs "$PREVIOUS_IMAGE"

  # Its apps: two replicas backed up to node directories, one to the object store.
  ns=$(new_ns upgrade)
  trap "on_fail_then_cleanup '$ns'" EXIT
  keys_secret "$ns" s3 tenant-a tenant-a-secret
  app_yaml node '{"replicas": 2, "restoreFromExisting": true, "backupSchedule": "0 0 1 1 *"}' |
    kubectl -n "$ns" apply -f - >/dev/null
  app_yaml store "{\"replicas\": 1, \"restoreFromExisting\": true, \"backupSchedule\": \"0 0 1 1 *\",
    \"backup\": {\"target\": {\"objectStore\": {\"endpoint\": \"$HS_S3_ENDPOINT\", \"bucket\": \"tenant-a\",
    \"prefix\": \"upgrade\", \"credentialsSecret\": \"s3\", \"insecure\": true}}}}" |
    kubectl -n "$ns" apply -f - >/dev/null
  wait_for "node Ready" 180 app_ready "$ns" node
  wait_for "store Ready" 180 app_ready "$ns" store
  wait_for "node's lines" 60 lines_at_least "$(host_log "$ns" node 1)" 2
  wait_for "store's lines" 60 lines_at_least "$(host_log "$ns" store 0)" 2
  node_first=$(head -n1 "$(host_log "$ns" node 1)")
  store_first=$(head -n1 "$(host_log "$ns" store 0)")
  "$PREVIOUS_PLUGIN" -n "$ns" backup node --timeout 3m >/dev/null &
  "$PREVIOUS_PLUGIN" -n "$ns" backup store --timeout 3m >/dev/null || return 1
  wait $! || return 1
  node_old=$(jp "$ns" node '{.status.lastBackup.id}')
  store_old=$(jp "$ns" store '{.status.lastBackup.id}')
  [[ -n $node_old && -n $store_old ]] || { kubectl -n "$ns" get hellostateful -o yaml; return 1; }
  node_pods=$(pods_of "$ns" node) store_pods=$(pods_of "$ns" store)

  # The upgrade, as CHANGELOG.md says: the current plugin's install. It keeps the cluster's
  # settings and installs its own image.
  "$HS_PLUGIN" install --timeout 3m >/dev/null
  wait_for "the current reconciler running" 120 reconciler_runs "hellostateful-reconciler:$HS_VERSION"
  [[ $(kubectl -n "$RECONCILER_NS" get configmap hellostateful-settings -o jsonpath='{.data.backupRoots}') == "$BACKUP_ROOTS" ]]
  wait_for "the current reconciler's pass over node" 120 app_metric_seen "$ns" node
  wait_for "the current reconciler's pass over store" 120 app_metric_seen "$ns" store
  app_ready "$ns" node && app_ready "$ns" store
  # Not one pod replaced or restarted: the StatefulSets the previous version made are what
  # the current one makes.
  [[ $(pods_of "$ns" node) == "$node_pods" && $(pods_of "$ns" store) == "$store_pods" ]] ||
    { echo "pods before: $node_pods $store_pods"; echo "after: $(pods_of "$ns" node) $(pods_of "$ns" store)"; return 1; }

  # From now on, going back is refused, with the reason (the previous version's plugin did
  # not check): here the installed version is made to look newer than the plugin's.
  kubectl -n "$RECONCILER_NS" label --overwrite deployment hellostateful-reconciler app.kubernetes.io/version=99.0.0 >/dev/null
  expect_fail "version 99.0.0, newer than this plugin's $HS_VERSION: going back is not supported" \
    "$HS_PLUGIN" install --timeout 3m
  "$HS_PLUGIN" install --allow-downgrade --dry-run=server >/dev/null
  kubectl -n "$RECONCILER_NS" label --overwrite deployment hellostateful-reconciler "app.kubernetes.io/version=$HS_VERSION" >/dev/null

  # Every old backup is listed and checks out; new ones are made beside them.
  for app in node store; do
    id=$([[ $app == node ]] && echo "$node_old" || echo "$store_old")
    [[ $("$HS_PLUGIN" -n "$ns" backups "$app" -o json | jq -r '.[].id') == "$id" ]]
    "$HS_PLUGIN" -n "$ns" verify "$app" "$id" | grep -q "every checksum matches"
    "$HS_PLUGIN" -n "$ns" backup "$app" --timeout 3m >/dev/null
    [[ $("$HS_PLUGIN" -n "$ns" backups "$app" -o json | jq length) == 2 ]]
    [[ $(jp "$ns" "$app" '{.status.lastBackup.snapshots}') == 2 ]]
  done
  # The old backups restore, each app's data back to where the previous version saw it.
  "$HS_PLUGIN" -n "$ns" restore node --from "$node_old" --yes --timeout 4m >/dev/null &
  "$HS_PLUGIN" -n "$ns" restore store --from "$store_old" --yes --timeout 4m >/dev/null || return 1
  wait $! || return 1
  [[ $(head -n1 "$(host_log "$ns" node 1)") == "$node_first" ]]
  [[ $(head -n1 "$(host_log "$ns" store 0)") == "$store_first" ]]
  [[ $(jp "$ns" node '{.status.restoreRequest.phase}') == Succeeded &&
    $(jp "$ns" store '{.status.restoreRequest.phase}') == Succeeded ]]
}

# not_found KIND NAME: no such object (cluster-scoped).
not_found() { ! kubectl get "$1" "$2" >/dev/null 2>&1; }
on_fail_then_cleanup() {
  local rc=$?
  ((rc == 0)) || on_fail "$1"
  cleanup_ns "$1"
}

run_test previous_version test_previous_version
run_test apps_and_backups_of_the_previous_version_survive_the_upgrade test_apps_and_backups_of_the_previous_version_survive_the_upgrade
summary
