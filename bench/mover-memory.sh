#!/usr/bin/env bash
# Peak memory of the data mover at scale: backup, verify and prune of an app with
# BENCH_MEMORY_FILES files (default 200,000) and BENCH_MEMORY_SNAPSHOTS snapshots (default
# 20), each measured with GNU time's "Maximum resident set size". Not a test; the goal
# (issue #12) is 64 MB for each. Prints "name: ours X MB, peer 64 MB, ratio R" lines
# (ratio = goal / ours, > 1 is within the goal).
set -euo pipefail
cd "$(dirname "$0")/.."

FILES=${BENCH_MEMORY_FILES:-200000}
SNAPSHOTS=${BENCH_MEMORY_SNAPSHOTS:-20}
GOAL_MB=64

command -v /usr/bin/time >/dev/null ||
  { apt-get update -qq >/dev/null && apt-get install -y -qq time >/dev/null; }

TARGET_DIR=${CARGO_TARGET_DIR:-target}
[[ $TARGET_DIR == /* ]] || TARGET_DIR=$PWD/$TARGET_DIR
echo "bench: building the mover (target dir $TARGET_DIR)" >&2
CARGO_TARGET_DIR=$TARGET_DIR cargo build --quiet --release -p hellostateful-mover --example mover
MOVER=$TARGET_DIR/release/examples/mover

WORK=$(mktemp -d /var/tmp/bench-memory.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
echo "bench: generating $FILES files" >&2
python3 - "$WORK/src/0" "$FILES" <<'PY'
import os, sys
root, files = sys.argv[1], int(sys.argv[2])
for n in range(files):
    d = os.path.join(root, f"d{n % 100}", f"e{n % 17}")
    if n < 1700:
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"file-{n:07d}.dat"), "wb") as f:
        f.write(b"%d\n" % n)
PY

ARGS=(--namespace bench --name app --target "$WORK/target")
# Peak RSS in MB of one mover command (which must succeed).
peak() {
  local out=$WORK/time.out
  if ! /usr/bin/time -v -o "$out" "$MOVER" "$@" >"$WORK/stdout" 2>"$WORK/stderr"; then
    echo "bench: mover $1 failed:" >&2
    cat "$WORK/stderr" >&2
    exit 1
  fi
  awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2 / 1024}' "$out"
}
line() { printf '%s: ours %s MB, peer %s MB, ratio %.2f\n' "$1" "$2" "$GOAL_MB" "$(echo "$GOAL_MB / $2" | bc -l)"; }

echo "bench: $SNAPSHOTS backups" >&2
first=$(peak backup "${ARGS[@]}" --source "$WORK/src")
for _ in $(seq 2 "$SNAPSHOTS"); do
  # A few files change each time, as in real use.
  for n in 1 2 3; do echo "$RANDOM" >>"$WORK/src/0/d$n/e$n/file-000000$n.dat" 2>/dev/null || true; done
  last=$(peak backup "${ARGS[@]}" --source "$WORK/src")
done
verify=$(peak verify "${ARGS[@]}" latest)
list=$(peak backups "${ARGS[@]}" --json)
prune=$(peak prune "${ARGS[@]}" --keep-last 1)

echo "# peak RSS of the mover with $FILES files and $SNAPSHOTS snapshots (GNU time, max RSS); goal: $GOAL_MB MB each (ratio = goal / ours, > 1 meets it)"
echo "# kernel $(uname -r), filesystem $(stat -f -c %T "$WORK")"
line memory-first-backup "$first"
line memory-incremental-backup "$last"
line memory-verify "$verify"
line memory-list "$list"
line memory-prune "$prune"
