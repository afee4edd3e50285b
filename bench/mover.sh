#!/usr/bin/env bash
# Benchmark of the hellostateful data mover (the `mover` example binary) against cp, tar,
# rsync and restic. Not a test. Needs root to drop the page cache (without it, every run is
# warm and the header says so).
#
# Usage: bench/mover.sh
#   BENCH_MOVER_FILES=100000   files of the small-files shape (1-64 KiB each, nested dirs)
#   BENCH_MOVER_BIG_FILES=4    files of the big-files shape ...
#   BENCH_MOVER_BIG_MB=256     ... of this many MiB each
#   BENCH_MOVER_RUNS=3         timed runs of every command (default $BENCH_RUNS, else 3; >= 3)
#   BENCH_MOVER_DIR=/var/tmp   where the data and all copies go (one bench-mover.* dir)
# Quick run: BENCH_MOVER_FILES=2000 BENCH_MOVER_BIG_MB=16 bench/mover.sh
#
# Shapes, each timed against its peers (ratio = peer time / our time, > 1: ours is faster):
#   full-backup-small-*   full backup of the small-files shape: mover backup into an empty
#                         target vs cp -a, tar -cf, rsync -a, restic backup (fresh repo)
#   full-backup-big-*     the same on the big-files shape
#   incremental-*         second backup after 1% of the small files changed: mover backup
#                         into the target holding the first snapshot vs rsync -a --link-dest
#                         (to the first copy) and restic backup (into the repo holding the
#                         first backup); every run starts from that same state
#   restore-small-*, restore-big-*
#                         mover restore (verifies every checksum) of the snapshot into an
#                         empty volume vs cp -a and rsync -a from the snapshot's directory and
#                         restic restore --verify
# Every timed region is: the command, then `sync` (copies are only done once on disk). Before
# the clock starts: the previous output removed, the destination prepared, `sync`, and the
# page cache dropped. A failing command (or wrong output: file count or bytes) fails the
# bench with its stderr. Data is generated from fixed seeds.
#
# Prints "#" lines (machine, data, goals), then one line per (shape, peer):
#   name: ours 1.23s (min 1.20, max 1.30), peer 2.34s (min 2.30, max 2.40), ratio 1.90
# with medians; progress goes to stderr. Takes about 40 minutes at the defaults on the 2-core
# test machine (~60 % of it timed), 2 with the quick sizes; needs ~5.5 times the small-files
# data (~20 GB) free.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

log() { echo "bench: $*" >&2; }
die() { log "$*"; exit 1; }

FILES_N=${BENCH_MOVER_FILES:-100000}
BIG_FILES=${BENCH_MOVER_BIG_FILES:-4}
BIG_MB=${BENCH_MOVER_BIG_MB:-256}
RUNS=${BENCH_MOVER_RUNS:-${BENCH_RUNS:-3}}
BASE_DIR=${BENCH_MOVER_DIR:-/var/tmp}
[[ -z ${BENCH_MOVER_MB:-} ]] ||
  log "BENCH_MOVER_MB is no longer used: set BENCH_MOVER_FILES, BENCH_MOVER_BIG_FILES, BENCH_MOVER_BIG_MB"
for v in FILES_N BIG_FILES BIG_MB RUNS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, not '${!v}'"
done
((RUNS >= 3)) || die "the mover bench needs at least 3 runs for a median (BENCH_MOVER_RUNS=$RUNS)"

need() { command -v "$1" >/dev/null || { apt-get update -qq >/dev/null && apt-get install -y -qq "$2" >/dev/null; }; }
need rsync rsync
need restic restic
need bc bc
need python3 python3

# CARGO_TARGET_DIR as cargo sees it here: absolute as is, relative to the checkout (cargo
# runs in it), unset: target.
TARGET_DIR=${CARGO_TARGET_DIR:-target}
[[ $TARGET_DIR == /* ]] || TARGET_DIR=$ROOT/$TARGET_DIR
TARGET_DIR=$(realpath -m "$TARGET_DIR")
log "building the mover (target dir $TARGET_DIR)"
nice -n 10 cargo build --quiet --release -p hellostateful-mover --example mover
MOVER=$TARGET_DIR/release/examples/mover
[[ -x $MOVER ]] || die "no mover binary at $MOVER after the build"

mkdir -p "$BASE_DIR"
WORK=$(mktemp -d "$BASE_DIR/bench-mover.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
echo bench >"$WORK/pw"
export RESTIC_PASSWORD_FILE=$WORK/pw
unset RESTIC_REPOSITORY RESTIC_PASSWORD RESTIC_PASSWORD_COMMAND

source "$ROOT/bench/measure.sh"

# ---- checks of what a command produced (outside the clock) ------------------------------
# "files bytes" of the regular files under a directory (%.0f: mawk's %d stops at 2^31 - 1),
# but for the lock a restore leaves at a volume's top (one of the mover's reserved names,
# which backups skip).
tree_stats() {
  find "$1" -type f ! -path "$1/0/.hellostateful-lock" -printf '%s\n' |
    awk '{ n++; b += $1 } END { printf "%.0f %.0f\n", n, b }'
}
expect_tree() { # KEY DIR EXPECTED
  local got
  got=$(tree_stats "$2")
  [[ $got == "$3" ]] || die "FAILED ($1): $2 holds $got (files bytes), expected $3"
}
mover_field() { sed -n "s/.*\"$1\":\"\{0,1\}\([^\",}]*\).*/\1/p" "$WORK/out"; }
expect_mover() { # KEY EXPECTED_FILES EXPECTED_BYTES: what the mover's JSON line reports
  local got
  got="$(mover_field files) $(mover_field bytes)"
  [[ $got == "$2 $3" ]] || die "FAILED ($1): the mover reports $got (files bytes), expected $2 $3: $(cat "$WORK/out")"
}

need_space() { # BYTES WHAT
  local avail
  avail=$(df -B1 --output=avail "$WORK" | tail -n 1)
  ((avail > $1)) || die "$2 needs ~$(($1 / 1000000000)) GB free in $WORK, only $((avail / 1000000000)) GB"
}

# ---- the commands -----------------------------------------------------------------------
M=(--namespace bench --name app)
mover_backup() { "$MOVER" backup "${M[@]}" --target "$1" --source "$2"; }
mover_restore() { "$MOVER" restore "${M[@]}" --target "$1" --dest "$2" --from "$3"; }
# restic backs up "0" from inside the source dir, so a restore makes DEST/0 as ours does.
restic_backup() { (cd "$2" && RESTIC_REPOSITORY=$1 exec restic backup -q 0); }
restic_restore() { RESTIC_REPOSITORY=$1 restic restore -q latest --verify --target "$2"; }
restic_init() { rm -rf "$1"; RESTIC_REPOSITORY=$1 restic init -q >/dev/null; }

# full_backup SHAPE SRC FILES BYTES: every command RUNS times, interleaved; the last run's
# outputs of ours and restic stay in $WORK/SHAPE-{ours,repo} (and rsync's in -rsync) for the
# incremental and restore benches.
full_backup() {
  local shape=$1 src=$2 files=$3 bytes=$4 r out=$WORK/$1
  export RESTIC_CACHE_DIR=$WORK/$shape-cache
  for ((r = 1; r <= RUNS; r++)); do
    log "full backup of $shape files, run $r/$RUNS"
    rm -rf "$out-ours"
    timed "full-$shape:ours" mover_backup "$out-ours" "$src"
    expect_mover "full-$shape:ours" "$files" "$bytes"
    BASE_ID=$(mover_field id)

    rm -rf "$out-cp"
    timed "full-$shape:cp" cp -a "$src" "$out-cp"
    expect_tree "full-$shape:cp" "$out-cp" "$files $bytes"
    rm -rf "$out-cp"

    rm -f "$out.tar"
    timed "full-$shape:tar" tar -cf "$out.tar" -C "$src" .
    local n
    n=$(tar -tvf "$out.tar" | awk '$1 ~ /^-/ { n++ } END { print n + 0 }')
    ((n == files)) || die "FAILED (full-$shape:tar): $n files in the archive, expected $files"
    rm -f "$out.tar"

    rm -rf "$out-rsync"
    timed "full-$shape:rsync" rsync -a "$src/" "$out-rsync/"
    expect_tree "full-$shape:rsync" "$out-rsync" "$files $bytes"

    restic_init "$out-repo"
    rm -rf "$RESTIC_CACHE_DIR"
    timed "full-$shape:restic" restic_backup "$out-repo" "$src"
  done
}

# restore SHAPE FILES BYTES: from the snapshot / repo full_backup left, into an empty volume.
restore() {
  local shape=$1 files=$2 bytes=$3 r dest=$WORK/dest out=$WORK/$1
  local snap=$out-ours/bench/app/$BASE_ID
  export RESTIC_CACHE_DIR=$WORK/$shape-cache
  for ((r = 1; r <= RUNS; r++)); do
    log "restore of $shape files, run $r/$RUNS"
    rm -rf "$dest" && mkdir -p "$dest/0"
    timed "restore-$shape:ours" mover_restore "$out-ours" "$dest" "$BASE_ID"
    expect_mover "restore-$shape:ours" "$files" "$bytes"
    expect_tree "restore-$shape:ours" "$dest" "$files $bytes"

    rm -rf "$dest" && mkdir -p "$dest"
    timed "restore-$shape:cp" cp -a "$snap/0" "$dest/0"
    expect_tree "restore-$shape:cp" "$dest" "$files $bytes"

    rm -rf "$dest" && mkdir -p "$dest/0"
    timed "restore-$shape:rsync" rsync -a "$snap/0/" "$dest/0/"
    expect_tree "restore-$shape:rsync" "$dest" "$files $bytes"

    rm -rf "$dest" && mkdir -p "$dest"
    timed "restore-$shape:restic" restic_restore "$out-repo" "$dest"
    expect_tree "restore-$shape:restic" "$dest" "$files $bytes"
    rm -rf "$dest"
  done
}

# incremental: the 1% of the small files changed (every 100th by path) get the same 4 KiB
# appended before each repetition and are truncated back (same inode, size and mtime, so the
# parent directories are untouched) after it. Each command runs against its own baseline:
# ours the first snapshot (the new one removed after the run), rsync the first copy (the new
# tree removed), restic a hard-linked copy of the repo holding one backup (restic never
# rewrites a repo file) with a copy of its cache.
incremental() {
  local src=$WORK/small out=$WORK/small r
  export RESTIC_CACHE_DIR=$WORK/small-cache
  (cd "$src/0" && find . -type f | LC_ALL=C sort | awk 'NR % 100 == 0') >"$WORK/changed"
  CHANGED=$(wc -l <"$WORK/changed")
  ((CHANGED > 0)) || die "the small-files shape has fewer than 100 files: nothing to change"
  rm -rf "$out-repo.base" "$out-cache.base"
  cp -al "$out-repo" "$out-repo.base"
  cp -a "$RESTIC_CACHE_DIR" "$out-cache.base"
  for ((r = 1; r <= RUNS; r++)); do
    log "incremental backup, run $r/$RUNS"
    change_files change

    timed incremental:ours mover_backup "$out-ours" "$src"
    local id linked
    id=$(mover_field id) linked=$(mover_field linkedFiles)
    [[ -n $id && $id != "$BASE_ID" ]] || die "FAILED (incremental:ours): no new snapshot: $(cat "$WORK/out")"
    expect_mover incremental:ours "$small_files" $((small_bytes + CHANGED * 4096))
    ((linked == small_files - CHANGED)) ||
      die "FAILED (incremental:ours): $linked files linked, expected $((small_files - CHANGED)): $(cat "$WORK/out")"
    rm -rf "$out-ours/bench/app/$id"

    rm -rf "$out-rsync.next"
    timed incremental:rsync rsync -a --link-dest="$out-rsync/" "$src/" "$out-rsync.next/"
    local new
    new=$(find "$out-rsync.next" -type f -links 1 | wc -l)
    ((new == CHANGED)) || die "FAILED (incremental:rsync): $new files copied, expected $CHANGED"
    rm -rf "$out-rsync.next"

    rm -rf "$out-repo" "$RESTIC_CACHE_DIR"
    cp -al "$out-repo.base" "$out-repo"
    cp -a "$out-cache.base" "$RESTIC_CACHE_DIR"
    timed incremental:restic restic_backup "$out-repo" "$src"

    change_files undo
  done
  # The restore bench reads the repo holding only the first backup.
  rm -rf "$out-repo" "$RESTIC_CACHE_DIR" "$out-rsync"
  mv "$out-repo.base" "$out-repo"
  mv "$out-cache.base" "$RESTIC_CACHE_DIR"
}


# ---- run --------------------------------------------------------------------------------
started=$SECONDS
BIG_BYTES=$((BIG_FILES * BIG_MB * 1048576))
# At most 5 copies of a shape at once (data, ours, rsync, restic, and cp, tar or a restore)
# plus 10 %; a small file takes 32.5 KiB on average plus part of a block.
small_need=$((FILES_N * 36 * 1024 * 55 / 10)) big_need=$((BIG_BYTES * 55 / 10))
need_space $((small_need > big_need ? small_need : big_need)) "the mover bench"

mib() { calc "scale=0; $1 / 1048576"; }
GOAL_CP="goal: ratio vs cp -a >= 1.0"
RESTORE="restore incl. verification (ours checks every checksum, restic restore --verify; cp -a and rsync -a from the snapshot's directory check nothing) into an empty volume"

log "generating $BIG_FILES files of $BIG_MB MiB"
gen_big "$WORK/big/0" "$BIG_FILES" "$BIG_MB"
read -r big_files big_bytes < <(tree_stats "$WORK/big")
full_backup big "$WORK/big" "$big_files" "$big_bytes"
block full-big "full backup of $big_files files of $BIG_MB MiB ($(mib "$big_bytes") MiB) into an empty target; restic: a fresh repo each run; $GOAL_CP" \
  full-backup-big full-big:ours full-big cp tar rsync restic
rm -rf "$WORK/big-rsync"
restore big "$big_files" "$big_bytes"
block restore-big "$RESTORE, the big-files snapshot; $GOAL_CP" \
  restore-big restore-big:ours restore-big cp rsync restic
rm -rf "$WORK/big" "$WORK/big-"*

log "generating $FILES_N files of 1-64 KiB"
gen_small "$WORK/small/0" "$FILES_N"
read -r small_files small_bytes < <(tree_stats "$WORK/small")
small_dirs=$(find "$WORK/small/0" -mindepth 1 -type d | wc -l)
full_backup small "$WORK/small" "$small_files" "$small_bytes"
block full-small "full backup of $small_files files of 1-64 KiB in $small_dirs nested dirs ($(mib "$small_bytes") MiB) into an empty target; restic: a fresh repo each run; $GOAL_CP" \
  full-backup-small full-small:ours full-small cp tar rsync restic
incremental
block incremental "incremental backup after $CHANGED of the $small_files small files (1%) got 4 KiB appended: ours and restic into the target/repo holding the first backup, rsync -a --link-dest to the first copy; goal: ratio vs rsync >= 2.0" \
  incremental incremental:ours incremental rsync restic
restore small "$small_files" "$small_bytes"
block restore-small "$RESTORE, the small-files snapshot; $GOAL_CP" \
  restore-small restore-small:ours restore-small cp rsync restic

fs=$(stat -f -c %T "$WORK")
read -r fs_type fs_source < <(findmnt -n -o FSTYPE,SOURCE -T "$WORK")
echo "# mover: bench dir $BASE_DIR on $fs_type ($fs_source, stat -f: $fs), kernel $(uname -r), $(nproc) CPUs"
echo "# mover: page cache $CACHE; a final sync is inside every timing"
echo "# mover: median of $RUNS runs (min, max), runs interleaved; ratio = peer time / our time, > 1 means ours is faster"
echo "# mover: peers $(cp --version | head -n 1), $(tar --version | head -n 1), $(rsync --version | head -n 1 | awk '{ print $1, $3 }'), $(restic version | awk '{ print $1, $2 }') (repo format 2, default compression)"
for shape in full-small full-big incremental restore-small restore-big; do
  echo "${BLOCK[$shape]}"
done
log "mover bench took $(((SECONDS - started) / 60)) min $(((SECONDS - started) % 60)) s"
