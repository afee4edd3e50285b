#!/usr/bin/env bash
# Backups into an object store (spec.backup.target.objectStore) against restic's S3 backend
# (the engine K8up runs), `rclone copy` and `mc mirror` (mirrors, not backups: no snapshots,
# no history), all writing to the same real SeaweedFS on this machine (e2e/objstore) in the
# same run. mc is built from the Go module proxy once (a few minutes), cached by version.
# Not a test.
#
# Usage: bench/objstore.sh
#   BENCH_S3_FILES=20000     files of the small-files shape (1-64 KiB each, nested dirs)
#   BENCH_S3_BIG_FILES=2     files of the big-files shape ...
#   BENCH_S3_BIG_MB=128      ... of this many MiB each
#   BENCH_S3_RUNS=3          timed runs of every command (>= 3)
# Quick run: BENCH_S3_FILES=2000 BENCH_S3_BIG_MB=16 bench/objstore.sh
#
# Shapes (ratio = the peer's time / ours, > 1: ours is faster):
#   full-backup-small-s3, full-backup-big-s3
#                 a full backup into an empty place: ours under a new app name, restic into
#                 a fresh repository, rclone and mc into a fresh path, each run
#   incremental-s3
#                 the second backup after 1% of the small files got 4 KiB appended; each run
#                 starts from its own first backup (made untimed by each), and restic keeps
#                 the local cache its first backup made; rclone compares size and time, as
#                 it does by default, and mc overwrites what differs
# Every timed region is the command alone (the data is only read); the page cache is dropped
# before it when permitted. Goals: >= 1.0 on a full backup, >= 2.0 on the 1% incremental.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

log() { echo "bench: $*" >&2; }
die() { log "$*"; exit 1; }

FILES_N=${BENCH_S3_FILES:-20000}
BIG_FILES=${BENCH_S3_BIG_FILES:-2}
BIG_MB=${BENCH_S3_BIG_MB:-128}
RUNS=${BENCH_S3_RUNS:-3}
for v in FILES_N BIG_FILES BIG_MB RUNS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, not '${!v}'"
done
((RUNS >= 3)) || die "the object store bench needs at least 3 runs for a median (BENCH_S3_RUNS=$RUNS)"
need() { command -v "$1" >/dev/null || { apt-get update -qq >/dev/null && apt-get install -y -qq "$2" >/dev/null; }; }
need restic restic
need rclone rclone
MC_VERSION=v0.0.0-20250313080218-cf909e1063a9
MC=${HS_E2E_CACHE:-/var/cache/hellostateful}/tools/mc-$MC_VERSION
if [[ ! -x $MC ]]; then
  log "building mc $MC_VERSION from the Go module proxy (a few minutes, once)"
  GOBIN=$(mktemp -d) GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0 \
    bash -c 'go install -trimpath -ldflags "-s -w" "github.com/minio/mc@$1" && install -D "$GOBIN/mc" "$2"' _ "$MC_VERSION" "$MC" >&2
fi
need bc bc
need python3 python3

TARGET_DIR=${CARGO_TARGET_DIR:-target}
[[ $TARGET_DIR == /* ]] || TARGET_DIR=$ROOT/$TARGET_DIR
log "building the mover (target dir $TARGET_DIR)"
nice -n 10 cargo build --quiet --release -p hellostateful-mover --example mover
MOVER=$(realpath -m "$TARGET_DIR")/release/examples/mover
[[ -x $MOVER ]] || die "no mover binary at $MOVER after the build"

WORK=$(mktemp -d /var/tmp/bench-s3.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
echo bench >"$WORK/pw"
export RESTIC_PASSWORD_FILE=$WORK/pw RESTIC_CACHE_DIR=$WORK/restic-cache
unset RESTIC_REPOSITORY RESTIC_PASSWORD RESTIC_PASSWORD_COMMAND
source "$ROOT/bench/measure.sh"

eval "$(e2e/objstore up)"
# Each shape writes into a bucket of its own, dropped once it is measured: the store's disk
# holds one shape's copies at a time.
BUCKET=
fresh_bucket() {
  drop_bucket
  BUCKET=bench-$(date +%s)-$1
  e2e/objstore bucket "$BUCKET"
}
drop_bucket() { [[ -z $BUCKET ]] || e2e/objstore drop-bucket "$BUCKET"; BUCKET=; }
trap 'drop_bucket; rm -rf "$WORK"' EXIT
export AWS_ACCESS_KEY_ID=$HS_S3_ADMIN_KEY AWS_SECRET_ACCESS_KEY=$HS_S3_ADMIN_SECRET

# ours NAME SRC: a backup of SRC (holding the volume "0") as app bench/NAME.
ours() {
  "$MOVER" backup --namespace bench --name "$1" --source "$2" \
    --store-endpoint="$HS_S3_ENDPOINT" --store-bucket="$BUCKET" --store-insecure
}
# restic_backup REPO SRC / restic_init REPO: restic backs up "0" from inside SRC, as ours.
repo() { echo "s3:$HS_S3_ENDPOINT/$BUCKET/restic/$1"; }
restic_backup() { (cd "$2" && RESTIC_REPOSITORY=$(repo "$1") exec restic backup -q 0); }
restic_init() { RESTIC_REPOSITORY=$(repo "$1") restic init -q >/dev/null; }
# rclone_copy NAME SRC: rclone copies SRC/0 to rclone/NAME, as many transfers at once as ours.
export RCLONE_CONFIG_BENCH_TYPE=s3 RCLONE_CONFIG_BENCH_PROVIDER=Other \
  RCLONE_CONFIG_BENCH_ENDPOINT=$HS_S3_ENDPOINT RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=$HS_S3_ADMIN_KEY \
  RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=$HS_S3_ADMIN_SECRET RCLONE_CONFIG_BENCH_NO_CHECK_BUCKET=true
# (AWS_CA_BUNDLE, which this machine sets, breaks rclone 1.60's S3 client; the endpoint is HTTP.)
rclone_copy() { env -u AWS_CA_BUNDLE rclone copy -q --fast-list --transfers 16 --checkers 16 "$2/0" "bench:$BUCKET/rclone/$1"; }
# mc_mirror NAME SRC: mc mirrors SRC/0 to mc/NAME, overwriting what differs.
export MC_CONFIG_DIR=$WORK/mc MC_HOST_bench=${HS_S3_ENDPOINT/:\/\//://$HS_S3_ADMIN_KEY:$HS_S3_ADMIN_SECRET@}
mc_mirror() { "$MC" mirror --quiet --overwrite "$2/0" "bench/$BUCKET/mc/$1" >/dev/null; }
# files of the backup just timed, from ours' JSON line
reported_files() { sed -n 's/.*"files":\([0-9]*\).*/\1/p' "$WORK/out"; }

# full SHAPE SRC FILES: both tools RUNS times, interleaved, each into an empty place.
full() {
  local shape=$1 src=$2 files=$3 run
  for ((run = 1; run <= RUNS; run++)); do
    log "$shape: run $run of $RUNS"
    timed "$shape:ours" ours "$shape-$run" "$src"
    [[ $(reported_files) == "$files" ]] || die "FAILED ($shape): ours backed up $(reported_files) files, not $files"
    restic_init "$shape-$run"
    timed "$shape:restic" restic_backup "$shape-$run" "$src"
    timed "$shape:rclone" rclone_copy "$shape-$run" "$src"
    timed "$shape:mc" mc_mirror "$shape-$run" "$src"
  done
}

# incremental: per run, a first backup by each (untimed), then 1% of the files changed and
# the timed second backups, then the change undone.
incremental() {
  local run
  (cd "$WORK/small/0" && find . -type f | LC_ALL=C sort | awk 'NR % 100 == 0') >"$WORK/changed"
  CHANGED=$(wc -l <"$WORK/changed")
  for ((run = 1; run <= RUNS; run++)); do
    log "incremental: run $run of $RUNS"
    ours "inc-$run" "$WORK/small" >/dev/null
    restic_init "inc-$run"
    restic_backup "inc-$run" "$WORK/small"
    rclone_copy "inc-$run" "$WORK/small"
    mc_mirror "inc-$run" "$WORK/small"
    # The quick check trusts only files settled before the first backup began.
    sleep 1.1
    change_files change
    timed incremental:ours ours "inc-$run" "$WORK/small"
    [[ $(sed -n 's/.*"newBytes":\([0-9]*\).*/\1/p' "$WORK/out") -gt 0 ]] || die "FAILED (incremental): ours sent nothing"
    timed incremental:restic restic_backup "inc-$run" "$WORK/small"
    timed incremental:rclone rclone_copy "inc-$run" "$WORK/small"
    timed incremental:mc mc_mirror "inc-$run" "$WORK/small"
    change_files undo
  done
}

started=$SECONDS
mib() { calc "scale=0; $1 / 1048576"; }
GOAL_FULL="goal: ratio vs restic >= 1.0"

log "generating $BIG_FILES files of $BIG_MB MiB"
gen_big "$WORK/big/0" "$BIG_FILES" "$BIG_MB"
fresh_bucket big
full full-big "$WORK/big" "$BIG_FILES"
block full-big "full backup of $BIG_FILES files of $BIG_MB MiB into an empty place in the store (restic: a fresh repo each run); $GOAL_FULL" \
  full-backup-big-s3 full-big:ours full-big restic rclone mc
rm -rf "$WORK/big"

log "generating $FILES_N files of 1-64 KiB"
gen_small "$WORK/small/0" "$FILES_N"
small_bytes=$(find "$WORK/small" -type f -printf '%s\n' | awk '{ b += $1 } END { printf "%.0f\n", b }')
fresh_bucket small
full full-small "$WORK/small" "$FILES_N"
block full-small "full backup of $FILES_N files of 1-64 KiB ($(mib "$small_bytes") MiB) into an empty place in the store (restic: a fresh repo each run); $GOAL_FULL" \
  full-backup-small-s3 full-small:ours full-small restic rclone mc
fresh_bucket incremental
incremental
drop_bucket
block incremental "second backup after $CHANGED of the $FILES_N small files (1%) got 4 KiB appended, into the place holding the first; goal: ratio vs restic >= 2.0" \
  incremental-s3 incremental:ours incremental restic rclone mc

echo "# objstore: SeaweedFS ($HS_S3_ENDPOINT, built by e2e/cluster.d/build-seaweedfs.sh) on this machine, $(nproc) CPUs, kernel $(uname -r)"
echo "# objstore: page cache $CACHE"
echo "# objstore: median of $RUNS runs (min, max), runs interleaved; ratio = restic's time / ours, > 1 means ours is faster"
echo "# objstore: peer $(restic version | awk '{ print $1, $2 }') with its S3 backend (repo format 2, default compression, encrypted); ours: object_store over HTTP, not encrypted"
echo "# objstore: peer $(rclone version | head -n1) copy --fast-list --transfers 16 --checkers 16"
echo "# objstore: peer mc $MC_VERSION (github.com/minio/mc) mirror --overwrite"
for shape in full-small full-big incremental; do
  echo "${BLOCK[$shape]}"
done
log "object store bench took $(((SECONDS - started) / 60)) min $(((SECONDS - started) % 60)) s"
