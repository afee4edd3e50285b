#!/usr/bin/env bash
# Backups in an S3-compatible object store (spec.backup.target.objectStore), against a real
# one: SeaweedFS on this node (e2e/objstore), reached by the mover pods over the network.
# Each app reads its keys from a Secret of its own namespace; SeaweedFS gives each tenant's
# keys its own bucket only.
set -uo pipefail
E2E_SUITE=objstore
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/hs.sh"

eval "$(e2e/objstore up)"
e2e/objstore bucket tenant-a
e2e/objstore bucket tenant-b

# store_app NS NAME BUCKET SECRET [RESTORE] [EXTRA-SPEC-JSON]: an app backed up to BUCKET with
# SECRET's keys, restoring its newest backup before it starts unless RESTORE is false. The
# store is $HS_S3_ENDPOINT; STORE_EXTRA (JSON members) is added to its objectStore.
store_app() {
  local ns=$1 name=$2 bucket=$3 secret=$4 restore=${5:-true} extra=${6:-}
  app_yaml "$name" "{\"replicas\": 1, \"restoreFromExisting\": $restore, \"backupSchedule\": \"0 0 1 1 *\"$extra,
    \"backup\": {\"target\": {\"objectStore\": {\"endpoint\": \"$HS_S3_ENDPOINT\", \"bucket\": \"$bucket\",
    \"prefix\": \"e2e\", \"credentialsSecret\": \"$secret\", \"insecure\": true${STORE_EXTRA:-}}}}}" |
    kubectl -n "$ns" apply -f - >/dev/null
}
# puts_above N: the store has served more than N PUT requests since it started.
puts_above() { (($(e2e/objstore puts) > $1)); }
# tenant_a_app NS NAME: an app backed up to bucket tenant-a with tenant-a's keys, Ready.
tenant_a_app() {
  keys_secret "$1" s3 tenant-a tenant-a-secret
  store_app "$1" "$2" tenant-a s3
  wait_for "$2 Ready" 120 app_ready "$1" "$2"
}
# failed_then NS...: in an EXIT trap, the details of each namespace if the test failed.
failed_then() {
  local rc=$? ns
  ((rc == 0)) && return 0
  for ns in "$@"; do on_fail "$ns"; done
}

# The walkthrough with the store as the target: the data comes back from the store after the
# app, its node directory and every node-directory backup are gone; and into a new app made
# from that backup.
test_data_comes_back_from_the_store_alone() {
  local ns first lines id
  ns=$(new_ns s3walk)
  trap "failed_then '$ns'; cleanup_ns '$ns'" EXIT
  tenant_a_app "$ns" hello
  wait_for "two lines written" 60 lines_at_least "$(host_log "$ns" hello 0)" 2
  first=$(head -n1 "$(host_log "$ns" hello 0)")
  lines=$(wc -l <"$(host_log "$ns" hello 0)")
  [[ $(request "$ns" hello backup) == Succeeded ]]
  id=$(jp "$ns" hello '{.status.backupRequest.backupId}')
  keys tenant-a "e2e/$ns/hello/snapshots/" | grep -qx "e2e/$ns/hello/snapshots/$id.json"
  [[ -z $(backups_of "$ns" hello) ]] || { echo "a node-directory backup was made"; return 1; }
  # Every object went with the checksum of its payload, which the store checked and kept.
  local object
  for object in $(keys tenant-a "e2e/$ns/hello/" | grep -E '/(snapshots|packs)/'); do
    s3 HEAD "tenant-a/$object" -I -H "x-amz-checksum-mode: ENABLED" | grep -qi '^x-amz-checksum-crc64nvme:' ||
      { echo "$object was stored without a checksum"; return 1; }
  done

  kubectl -n "$ns" delete hellostateful hello --wait=true --timeout=120s >/dev/null
  rm -rf "${HOSTPATH_ROOT:?}/$ns" "${BACKUP_ROOT:?}/$ns"
  store_app "$ns" hello tenant-a s3
  wait_for "hello Ready again" 180 app_ready "$ns" hello
  [[ $(jp "$ns" hello '{.status.isRestored}') == true ]]
  [[ $(head -n1 "$(host_log "$ns" hello 0)") == "$first" ]]
  (($(wc -l <"$(host_log "$ns" hello 0)") >= lines))

  # Another app made from hello's backup (restoreFrom), by the plugin with the store as flags:
  # its Job reads hello's objects into copy's volume, and keeps its restore's records with
  # copy's own backups.
  "$HS_PLUGIN" -n "$ns" create copy --from-backup "hello/$id" --schedule "0 0 1 1 *" \
    --object-store-endpoint "$HS_S3_ENDPOINT" --object-store-bucket tenant-a --object-store-prefix e2e \
    --object-store-secret s3 --object-store-insecure >/dev/null || return 1
  wait_for "copy Ready" 180 app_ready "$ns" copy
  [[ $(jp "$ns" copy '{.status.isRestored}') == true ]]
  [[ $(head -n1 "$(host_log "$ns" copy 0)") == "$first" ]]
}

# Contents are shared between backups: a second backup sends only what changed. Small files
# travel together in packs; larger ones are objects of their own, named by their BLAKE3.
test_second_backup_sends_only_what_changed() {
  local ns before first second
  ns=$(new_ns s3inc)
  trap "failed_then '$ns'; cleanup_ns '$ns'" EXIT
  keys_secret "$ns" s3 tenant-a tenant-a-secret
  # 40 small files and 4 of 2 MiB, of random data, then the 2018 loop.
  store_app "$ns" many tenant-a s3 true ', "command": ["sh", "-c", "mkdir -p /usr/share/hello/many; [ -f /usr/share/hello/many/done ] || { for i in $(seq 1 40); do head -c 65536 /dev/urandom > /usr/share/hello/many/f$i; done; for i in 1 2 3 4; do head -c 2097152 /dev/urandom > /usr/share/hello/many/big$i; done; touch /usr/share/hello/many/done; }; while true; do date >> /usr/share/hello/stateful.log; sleep 10; done"]'
  wait_for "many Ready" 120 app_ready "$ns" many
  wait_for "44 files written" 60 test -f "$(data_dir "$ns" many 0)/many/done"
  before=$(e2e/objstore puts)
  [[ $(request "$ns" many backup) == Succeeded ]]
  first=$(($(e2e/objstore puts) - before))
  before=$(e2e/objstore puts)
  [[ $(request "$ns" many backup) == Succeeded ]]
  second=$(($(e2e/objstore puts) - before))
  echo "PUT requests: first backup $first, second backup $second"
  # Each backup also puts two empty lock objects (its own, and its retention's collection's).
  # The first sends the 4 larger files, one pack (the 40 small files and the log) and the
  # manifest; the second at most a pack holding the log (if it grew meanwhile) and its
  # manifest.
  ((first >= 8 && first <= 9 && second <= 4))
}

# A damaged object is found before the live data is touched, and the restore is refused.
test_corrupted_object_is_refused_before_live_data_is_touched() {
  local ns id object live
  ns=$(new_ns s3bad)
  trap "failed_then '$ns'; cleanup_ns '$ns'" EXIT
  tenant_a_app "$ns" bad
  wait_for "a line written" 60 lines_at_least "$(host_log "$ns" bad 0)" 1
  [[ $(request "$ns" bad backup) == Succeeded ]]
  id=$(jp "$ns" bad '{.status.backupRequest.backupId}')
  object=$(keys tenant-a "e2e/$ns/bad/" | grep -E '/(data|packs)/' | head -n1)
  [[ -n $object ]]
  printf 'not what was backed up\n' | s3 PUT "tenant-a/$object" --data-binary @- >/dev/null
  live=$(cat "$(host_log "$ns" bad 0)")
  [[ $(request "$ns" bad restore "hello-stateful.example.com/restore-from=$id") == Failed ]]
  status_contains "$ns" bad '{.status.restoreRequest.message}' "is damaged"
  # The app runs again on its own data, which the refused restore left as it was.
  wait_for "bad Ready after the refused restore" 120 app_ready "$ns" bad
  [[ $(head -c ${#live} "$(host_log "$ns" bad 0)") == "$live" ]]
}

# Wrong keys: the restore before the app starts fails at once (no retry can help) and the
# app stays stopped, saying why; without the restore the app runs, and its backup fails,
# saying why.
test_wrong_keys_fail_at_once_with_a_clear_message() {
  local ns message
  ns=$(new_ns s3keys)
  trap "failed_then '$ns'; cleanup_ns '$ns'" EXIT
  keys_secret "$ns" s3 tenant-a not-the-secret
  store_app "$ns" locked tenant-a s3
  wait_for "the restore to fail" 120 \
    status_contains "$ns" locked '{.status.conditions[?(@.type=="Restoring")].reason}' RestoreFailed
  message=$(jp "$ns" locked '{.status.conditions[?(@.type=="Restoring")].message}')
  echo "Restoring: $message"
  [[ $message == *"s3://tenant-a/e2e/$ns/locked"* && $message == *"403 Forbidden (SignatureDoesNotMatch)"* ]]
  [[ $(jp "$ns" locked '{.status.conditions[?(@.type=="Ready")].status}') != True ]]
  # A permanent failure: one pod, not the Job's retries.
  [[ $(kubectl -n "$ns" get pods -l app.kubernetes.io/component=restore -o name | wc -l) -eq 1 ]]

  store_app "$ns" locked tenant-a s3 false
  wait_for "locked Ready without the restore" 120 app_ready "$ns" locked
  [[ $(request "$ns" locked backup) == Failed ]]
  message=$(jp "$ns" locked '{.status.backupRequest.message}')
  echo "backupRequest: $message"
  [[ $message == *"s3://tenant-a/e2e/$ns/locked"* && $message == *"403 Forbidden (SignatureDoesNotMatch)"* ]]
}

# Two namespaces, the same app name, separate Secrets: neither reaches the other's objects.
test_tenants_never_see_each_others_objects() {
  local a b
  a=$(new_ns s3ta) b=$(new_ns s3tb)
  trap "failed_then '$a' '$b'; cleanup_ns '$a'; cleanup_ns '$b'" EXIT
  keys_secret "$a" s3 tenant-a tenant-a-secret
  keys_secret "$b" s3 tenant-b tenant-b-secret
  store_app "$a" same tenant-a s3
  # b names a's bucket with its own keys: refused by the store.
  store_app "$b" same tenant-a s3 false
  wait_for "a/same Ready" 120 app_ready "$a" same
  wait_for "b/same Ready" 120 app_ready "$b" same
  [[ $(request "$a" same backup) == Succeeded ]]
  [[ $(request "$b" same backup) == Failed ]]
  status_contains "$b" same '{.status.backupRequest.message}' "s3://tenant-a/e2e/$b/same"
  status_contains "$b" same '{.status.backupRequest.message}' "403 Forbidden (AccessDenied)"
  # With its own bucket it works, and each namespace's objects stay below its own prefix.
  store_app "$b" same tenant-b s3 false
  [[ $(request "$b" same backup) == Succeeded ]]
  [[ -n $(keys tenant-a "e2e/$a/same/snapshots/") && -z $(keys tenant-a "e2e/$b/") ]]
  [[ -n $(keys tenant-b "e2e/$b/same/snapshots/") && -z $(keys tenant-b "e2e/$a/") ]]
}

# The server is down during a backup: that backup fails with a clear message, the one before
# stays whole, and the next one succeeds once the server is back.
test_store_down_fails_the_backup_and_keeps_the_last_good_one() {
  local ns good
  ns=$(new_ns s3down)
  trap "failed_then '$ns'; e2e/objstore start; cleanup_ns '$ns'" EXIT
  tenant_a_app "$ns" down
  [[ $(request "$ns" down backup) == Succeeded ]]
  good=$(jp "$ns" down '{.status.backupRequest.backupId}')
  e2e/objstore stop
  [[ $(request "$ns" down backup) == Failed ]]
  status_contains "$ns" down '{.status.backupRequest.message}' "s3://tenant-a/e2e/$ns/down"
  e2e/objstore start
  [[ $(request "$ns" down backup) == Succeeded ]]
  keys tenant-a "e2e/$ns/down/snapshots/" | grep -qx "e2e/$ns/down/snapshots/$good.json"
}

# The server stops in the middle of a backup's upload: that backup fails with a clear
# message, the one before stays whole, and the next one succeeds once the server is back.
test_store_stopped_mid_upload_fails_that_backup_only() {
  local ns good token big phase before
  ns=$(new_ns s3mid)
  trap "failed_then '$ns'; e2e/objstore start; cleanup_ns '$ns'" EXIT
  tenant_a_app "$ns" mid
  [[ $(request "$ns" mid backup) == Succeeded ]]
  good=$(jp "$ns" mid '{.status.backupRequest.backupId}')
  # Enough new data that its upload takes seconds: 3 files of 256 MiB.
  big=$(data_dir "$ns" mid 0)/big
  mkdir "$big"
  for i in 1 2 3; do head -c 268435456 /dev/urandom >"$big/f$i"; done
  before=$(e2e/objstore puts)
  token=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
  annotate "$ns" mid "hello-stateful.example.com/backup-requested=$token"
  # Past the backup's lock object: parts of the first file are being sent (768 MiB go as
  # about 96 parts, in some seconds).
  wait_for "parts being sent" 120 puts_above $((before + 2))
  e2e/objstore stop
  wait_for "backup $token acknowledged" 240 acknowledged "$ns" mid backupRequest "$token"
  phase=$(jp "$ns" mid '{.status.backupRequest.phase}')
  [[ $phase == Failed ]] || { echo "the backup ended $phase before the server stopped"; return 1; }
  status_contains "$ns" mid '{.status.backupRequest.message}' "s3://tenant-a/e2e/$ns/mid"
  status_contains "$ns" mid '{.status.backupRequest.message}' "the store could not be reached"
  echo "backupRequest: $(jp "$ns" mid '{.status.backupRequest.message}')"
  e2e/objstore start
  [[ $("$HS_PLUGIN" -n "$ns" backups mid -o json | jq -r '.[].id') == "$good" ]]
  "$HS_PLUGIN" -n "$ns" verify mid "$good" | grep -q "every checksum matches"
  [[ $(request "$ns" mid backup) == Succeeded ]]
  [[ $("$HS_PLUGIN" -n "$ns" backups mid -o json | jq -r '.[].id' | wc -l) -eq 2 ]]
}

# An https endpoint whose certificate a private CA signed: refused, saying why, until
# endpointCA names that CA; then backups, and the plugin's verify, go over https.
test_https_endpoint_with_a_private_ca() {
  local ns id
  ns=$(new_ns s3tls)
  trap "failed_then '$ns'; cleanup_ns '$ns'" EXIT
  keys_secret "$ns" s3 tenant-a tenant-a-secret
  kubectl -n "$ns" create secret generic s3-ca --from-file=ca.crt="$HS_S3_TLS_CA" >/dev/null
  HS_S3_ENDPOINT=$HS_S3_TLS_ENDPOINT store_app "$ns" tls tenant-a s3 false
  wait_for "tls Ready" 120 app_ready "$ns" tls
  [[ $(request "$ns" tls backup) == Failed ]]
  echo "backupRequest: $(jp "$ns" tls '{.status.backupRequest.message}')"
  status_contains "$ns" tls '{.status.backupRequest.message}' "certificate is not trusted"
  HS_S3_ENDPOINT=$HS_S3_TLS_ENDPOINT STORE_EXTRA=', "endpointCA": {"name": "s3-ca", "key": "ca.crt"}' \
    store_app "$ns" tls tenant-a s3 false
  [[ $(request "$ns" tls backup) == Succeeded ]]
  id=$(jp "$ns" tls '{.status.backupRequest.backupId}')
  "$HS_PLUGIN" -n "$ns" verify tls "$id" | grep -q "every checksum matches"
  keys tenant-a "e2e/$ns/tls/snapshots/" | grep -qx "e2e/$ns/tls/snapshots/$id.json"
}

# The cluster admin's endpoint allowlist (the reconciler's --object-store-endpoints): an app
# naming another store is refused before anything is made or sent, and says why; an app
# naming a listed one is backed up.
# allow_endpoints LIST: the admin's setting objectStoreEndpoints, and the reconciler restarted
# to read it.
allow_endpoints() {
  kubectl -n "$RECONCILER_NS" patch configmap hellostateful-settings --type merge \
    -p "{\"data\": {\"objectStoreEndpoints\": \"$1\"}}" >/dev/null
  kubectl -n "$RECONCILER_NS" rollout restart deploy/hellostateful-reconciler >/dev/null
  kubectl -n "$RECONCILER_NS" rollout status deploy/hellostateful-reconciler --timeout=120s >/dev/null
}

test_admin_allows_only_listed_endpoints() {
  local ns
  ns=$(new_ns s3allow)
  trap "failed_then '$ns'; allow_endpoints ''; cleanup_ns '$ns'" EXIT
  allow_endpoints "$HS_S3_ENDPOINT"
  keys_secret "$ns" s3 tenant-a tenant-a-secret
  HS_S3_ENDPOINT=http://elsewhere.example:8333 store_app "$ns" elsewhere tenant-a s3
  wait_for "elsewhere refused" 60 \
    status_contains "$ns" elsewhere '{.status.conditions[?(@.type=="Ready")].reason}' BackupTargetRefused
  status_contains "$ns" elsewhere '{.status.conditions[?(@.type=="Ready")].message}' \
    "not an object store the cluster admin allows ($HS_S3_ENDPOINT)"
  has_event "$ns" BackupTargetRefused
  [[ -z $(kubectl -n "$ns" get statefulsets,cronjobs,jobs -o name) ]]
  # The plugin's own pods send the app's keys nowhere else either.
  expect_fail "is not one the cluster admin allows" "$HS_PLUGIN" -n "$ns" backups elsewhere
  [[ -z $(kubectl -n "$ns" get pods -o name) ]] || { kubectl -n "$ns" get pods; return 1; }
  store_app "$ns" listed tenant-a s3
  wait_for "listed Ready" 120 app_ready "$ns" listed
  [[ $(request "$ns" listed backup) == Succeeded ]]
  "$HS_PLUGIN" -n "$ns" backups listed >/dev/null
}

# The plugin's whole job on a store: back up, list, describe, verify, restore an older
# backup, delete one, and delete the app with its backups.
test_plugin_restores_an_older_backup_and_deletes_them_all() {
  local ns log older_lines older newer gone
  ns=$(new_ns s3plug)
  trap "failed_then '$ns'; cleanup_ns '$ns'" EXIT
  tenant_a_app "$ns" p
  log=$(host_log "$ns" p 0)
  wait_for "a line written" 60 lines_at_least "$log" 1
  older=$("$HS_PLUGIN" -n "$ns" backup p --wait -o json | jq -r .backupId)
  older_lines=$(wc -l <"$log")
  wait_for "a line written after the older backup" 60 lines_at_least "$log" $((older_lines + 1))
  newer=$("$HS_PLUGIN" -n "$ns" backup p --wait -o json | jq -r .backupId)
  gone=$(tail -n1 "$log")
  [[ $("$HS_PLUGIN" -n "$ns" backups p -o json | jq -r '.[].id' | sort | tr '\n' ' ') == "$older $newer " ]]
  "$HS_PLUGIN" -n "$ns" backups describe p "$older" | grep -q "format 4"
  "$HS_PLUGIN" -n "$ns" verify p "$older" | grep -q "every checksum matches"

  "$HS_PLUGIN" -n "$ns" restore p --from "$older" --yes >/dev/null
  wait_for "p Ready after the restore" 120 app_ready "$ns" p
  [[ $(jp "$ns" p '{.status.restoreRequest.backupId}') == "$older" ]]
  # The older backup's lines, then only lines written since the restore.
  (($(grep -c . "$log") >= older_lines))
  ! grep -qxF "$gone" "$log"

  expect_fail "--force" "$HS_PLUGIN" -n "$ns" backups delete p "$newer" --yes
  "$HS_PLUGIN" -n "$ns" backups delete p "$older" --yes | grep -q "1 left"
  "$HS_PLUGIN" -n "$ns" delete p --delete-backups --yes >/dev/null
  [[ -z $(keys tenant-a "e2e/$ns/") ]]
}

# Tests that neither stop the store nor count its requests share nothing but the running
# store (each its own namespace and prefix): two lanes side by side. The others after them.
first_lane() {
  run_test plugin_restores_an_older_backup_and_deletes_them_all test_plugin_restores_an_older_backup_and_deletes_them_all
  run_test data_comes_back_from_the_store_alone test_data_comes_back_from_the_store_alone
}
beside first_lane
run_test tenants_never_see_each_others_objects test_tenants_never_see_each_others_objects
run_test corrupted_object_is_refused_before_live_data_is_touched test_corrupted_object_is_refused_before_live_data_is_touched
run_test wrong_keys_fail_at_once_with_a_clear_message test_wrong_keys_fail_at_once_with_a_clear_message
run_test https_endpoint_with_a_private_ca test_https_endpoint_with_a_private_ca
wait_beside
run_test second_backup_sends_only_what_changed test_second_backup_sends_only_what_changed
run_test store_down_fails_the_backup_and_keeps_the_last_good_one test_store_down_fails_the_backup_and_keeps_the_last_good_one
run_test store_stopped_mid_upload_fails_that_backup_only test_store_stopped_mid_upload_fails_that_backup_only
run_test --alone admin_allows_only_listed_endpoints test_admin_allows_only_listed_endpoints
summary
