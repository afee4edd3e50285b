#!/usr/bin/env bash
# Benchmark of the hellostateful data mover against cp, tar, rsync and restic.
# Not a test. Usage: bench/mover.sh   (BENCH_MOVER_MB=100 for a quick run; default 1024)
# Prints one line per comparison: "name: ours X, peer Y, ratio R".
set -euo pipefail

cd "$(dirname "$0")/.."
MB=${BENCH_MOVER_MB:-1024}

need() { command -v "$1" >/dev/null || { apt-get update -qq >/dev/null && apt-get install -y -qq "$2" >/dev/null; }; }
need rsync rsync
need restic restic

cargo build --quiet --release -p hellostateful-mover --example mover
MOVER=${CARGO_TARGET_DIR:-target}/release/examples/mover

WORK=$(mktemp -d /var/tmp/bench-mover.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
SRC=$WORK/src
mkdir -p "$SRC/0"

# Data: half in many small files (4-64 KiB) in nested dirs, half in 4 large files.
python3 - "$SRC/0" "$MB" <<'PY'
import os, random, sys
root, mb = sys.argv[1], int(sys.argv[2])
rnd = random.Random(42)
small_total, n = mb * 1024 * 1024 // 2, 0
while small_total > 0:
    d = os.path.join(root, f"d{n % 32}", f"e{n % 7}")
    os.makedirs(d, exist_ok=True)
    size = rnd.randint(4096, 65536)
    with open(os.path.join(d, f"f{n}.dat"), "wb") as f:
        f.write(rnd.randbytes(size))
    small_total -= size
    n += 1
big = mb * 1024 * 1024 // 2 // 4
for i in range(4):
    with open(os.path.join(root, f"big{i}.bin"), "wb") as f:
        for _ in range(big // (1 << 20)):
            f.write(os.urandom(1 << 20))
PY
BYTES=$(du -sb "$SRC" | cut -f1)
FILES=$(find "$SRC" -type f | wc -l)

# Caches: dropped before every timed run when permitted (cold reads), else all warm.
if echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then CACHE=cold; else CACHE=warm; fi
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }

# seconds for a command (sync included: copies are only done when on disk)
t() { drop; local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; sync; e=$(date +%s.%N); echo "$e - $s" | bc -l; }
mbps() { echo "scale=1; $BYTES / 1048576 / $1" | bc -l; }
line() { printf '%s: ours %s, peer %s, ratio %.2f\n' "$1" "$2" "$3" "$4"; }

echo "# data: $((BYTES / 1048576)) MiB in $FILES files; page cache: $CACHE; 2 samples each, best kept"
echo "# ratio: throughput comparisons ours/peer, time comparisons peer/ours: > 1 means ours is faster"

best() { local a b; a=$(t "$@"); b=$(t "$@"); echo "if ($a < $b) $a else $b" | bc -l; }

M="--namespace bench --name app"
run_ours_full() { rm -rf "$WORK/t"; "$MOVER" backup $M --target "$WORK/t" --source "$SRC"; }
run_cp() { rm -rf "$WORK/cp"; cp -a "$SRC" "$WORK/cp"; }
run_tar() { tar -cf "$WORK/x.tar" -C "$SRC" .; }

ours=$(best run_ours_full); cp_t=$(best run_cp); tar_t=$(best run_tar)
line full-backup-vs-cp "$(mbps "$ours") MB/s" "$(mbps "$cp_t") MB/s" "$(echo "$cp_t / $ours" | bc -l)"
line full-backup-vs-tar "$(mbps "$ours") MB/s" "$(mbps "$tar_t") MB/s" "$(echo "$tar_t / $ours" | bc -l)"

# Incremental: a full baseline, then 1% of the files changed.
rm -rf "$WORK/t" "$WORK/r" "$WORK/repo"
mkdir -p "$WORK/r"
"$MOVER" backup $M --target "$WORK/t" --source "$SRC" >/dev/null
rsync -a "$SRC/" "$WORK/r/base/"
echo bench > "$WORK/pw"
export RESTIC_PASSWORD_FILE=$WORK/pw RESTIC_REPOSITORY=$WORK/repo
restic init -q >/dev/null
restic backup -q "$SRC" >/dev/null
find "$SRC" -type f | sort | awk 'NR % 100 == 0' | while read -r f; do echo changed >> "$f"; done
ours=$(t "$MOVER" backup $M --target "$WORK/t" --source "$SRC")
rs=$(t rsync -a --link-dest="$WORK/r/base/" "$SRC/" "$WORK/r/next/")
rc=$(t restic backup -q "$SRC")
line incremental-vs-rsync "$(printf %.2f "$ours")s" "$(printf %.2f "$rs")s" "$(echo "$rs / $ours" | bc -l)"
line incremental-vs-restic "$(printf %.2f "$ours")s" "$(printf %.2f "$rc")s" "$(echo "$rc / $ours" | bc -l)"

# Restore of the latest snapshot, verification included, into a volume with old data.
mkdir -p "$WORK/dest/0"
run_restore() { "$MOVER" restore $M --target "$WORK/t" --dest "$WORK/dest" --from latest; }
run_cp_back() { rm -rf "$WORK/cpb"; cp -a "$WORK/t/bench/app/$(ls "$WORK/t/bench/app" | sort | tail -1)/0" "$WORK/cpb"; }
ours=$(best run_restore); cp_t=$(best run_cp_back)
line restore-vs-cp "$(mbps "$ours") MB/s" "$(mbps "$cp_t") MB/s" "$(echo "$cp_t / $ours" | bc -l)"
