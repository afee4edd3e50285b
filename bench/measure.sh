# Measuring and data for the benches that time commands against peers (bench/mover.sh,
# bench/objstore.sh): sourced after `log`, `WORK` (scratch dir) and `RUNS` are set.
# shellcheck shell=bash

now() { echo "$EPOCHREALTIME"; }
calc() { echo "$@" | bc -l; }

# Page cache: dropped before every timed run when permitted (cold reads), else all warm.
if sync && echo 3 2>/dev/null >/proc/sys/vm/drop_caches; then
  CACHE="dropped before every timed run (sync; echo 3 > /proc/sys/vm/drop_caches)"
  drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
else
  CACHE="NOT dropped (no permission): every run reads warm data"
  drop() { sync; }
fi

# ---- timing ----------------------------------------------------------------------------
declare -A TIMES
# timed KEY CMD...: one timed run of CMD (stdout to $WORK/out, stderr to $WORK/err), its
# seconds appended to TIMES[KEY]. The caller prepared the destination; here only the sync and
# cache drop happen before the clock, and the final sync inside it. A failure ends the bench.
timed() {
  local key=$1 s e rc=0
  shift
  drop
  s=$(now)
  "$@" >"$WORK/out" 2>"$WORK/err" || rc=$?
  sync
  e=$(now)
  if ((rc != 0)); then
    log "FAILED ($key, exit $rc): $*"
    tail -n 40 "$WORK/err" >&2
    exit 1
  fi
  TIMES[$key]+="$(calc "$e - $s") "
}
# median min max of TIMES[KEY]
stats() {
  # shellcheck disable=SC2086 # the times are a space-separated list
  printf '%s\n' ${TIMES[$1]} | sort -g | awk '
    { a[NR] = $1 }
    END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; print m, a[1], a[NR] }'
}
fmt() { local m lo hi; read -r m lo hi < <(stats "$1"); printf '%.2fs (min %.2f, max %.2f)' "$m" "$lo" "$hi"; }
median() { stats "$1" | cut -d' ' -f1; }
# Each shape's lines are shown (stderr) when it is done and printed (stdout) at the end, in
# the order of bench/README.md.
declare -A BLOCK
# block SHAPE GOAL_COMMENT NAME_PREFIX OURS_KEY PEER_KEY_PREFIX PEERS...
block() {
  local shape=$1 text="# $2" name=$3 ours=$4 peer=$5 p l
  shift 5
  for p in "$@"; do
    l=$(printf '%s-vs-%s: ours %s, peer %s, ratio %.2f' "$name" "$p" "$(fmt "$ours")" "$(fmt "$peer:$p")" \
      "$(calc "$(median "$peer:$p") / $(median "$ours")")")
    text+=$'\n'$l
  done
  BLOCK[$shape]=$text
  log "$text"
}

# ---- data -------------------------------------------------------------------------------
# gen_small DIR N: N files of 1-64 KiB (uniform), 1 to 4 directory levels deep (8 names per
# level), random content; gen_big DIR N MB. Both seeded: the same data on every machine.
gen_small() {
  python3 - "$1" "$2" <<'PY'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rnd = random.Random(42)
for i in range(n):
    parts = [f"d{rnd.randrange(8)}" for _ in range(rnd.randint(1, 4))]
    d = os.path.join(root, *parts)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:06d}.dat"), "wb") as f:
        f.write(rnd.randbytes(rnd.randint(1024, 65536)))
PY
}
gen_big() {
  python3 - "$1" "$2" "$3" <<'PY'
import os, random, sys
root, n, mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(root, exist_ok=True)
for i in range(n):
    rnd = random.Random(1000 + i)
    with open(os.path.join(root, f"big{i}.bin"), "wb") as f:
        for _ in range(mb):
            f.write(rnd.randbytes(1 << 20))
PY
}

# change_files change|undo: append the same 4 KiB to the files listed in $WORK/changed, or
# truncate them back and reset their times (the same inode: directories stay untouched).
change_files() {
  python3 - "$1" "$WORK/small/0" "$WORK/changed" "$WORK/changed.meta" <<'PY'
import json, os, random, sys
op, root, listing, meta = sys.argv[1:]
if op == "change":
    patch = random.Random(7).randbytes(4096)
    saved = {}
    for name in (line.rstrip("\n") for line in open(listing)):
        path = os.path.join(root, name)
        st = os.stat(path)
        saved[name] = [st.st_size, st.st_atime_ns, st.st_mtime_ns]
        with open(path, "ab") as f:
            f.write(patch)
    with open(meta, "w") as f:
        json.dump(saved, f)
else:
    with open(meta) as f:
        saved = json.load(f)
    for name, (size, atime, mtime) in saved.items():
        path = os.path.join(root, name)
        os.truncate(path, size)
        os.utime(path, ns=(atime, mtime))
PY
}
