//! Confinement: a tenant that races the mover (swapping directories for symlinks) or
//! forges a snapshot never makes it read or write outside the volume or backup, and
//! `wipe` / `purge` remove links, never what they point at.

mod common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use hellostateful_mover::{
    Entry, EntryFile, Kind, MANIFEST_FILE, Manifest, MoverError, Selector, chain,
};
use rustix::fs::{CWD, RenameFlags};

#[test]
fn child() {
    child_main();
}

const SECRET: &[u8] = b"the node's secret";
/// How long a race runs at most, and how many runs it tries.
const RACE_DEADLINE: Duration = Duration::from_secs(8);
const RACE_RUNS: u32 = 200;

/// `<tmp>/outside` holding files named like the volume's (so a followed symlink finds
/// them) with the secret as content.
fn outside(tmp: &Path) -> PathBuf {
    let outside = tmp.join("outside");
    fs::create_dir_all(&outside).expect("mkdir");
    for name in ["f", "g"] {
        fs::write(outside.join(name), SECRET).expect("write");
    }
    outside
}

/// One tenant move per pair (a directory in the tree, a symlink parked beside it):
/// `RENAME_EXCHANGE` them, so the tree alternates between the two, never missing.
fn exchange(pairs: &[(PathBuf, PathBuf)]) -> u64 {
    let mut swaps = 0;
    for (a, b) in pairs {
        // Missing while the mover moves it: the tenant just tries again.
        if rustix::fs::renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).is_ok() {
            swaps += 1;
        }
    }
    swaps
}

/// One tenant move per directory: if it is a directory now, swap in a fresh symlink to
/// `target` (the directory goes to `park`), so the mover meets a new symlink each time.
fn replace_with_symlinks(dirs: &[PathBuf], target: &Path, park: &Path, n: &AtomicU64) -> u64 {
    let mut swaps = 0;
    for dir in dirs {
        if !fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        let parked = park.join(n.fetch_add(1, Ordering::Relaxed).to_string());
        symlink(target, &parked).expect("symlink");
        if rustix::fs::renameat_with(CWD, dir, CWD, &parked, RenameFlags::EXCHANGE).is_ok() {
            swaps += 1;
        }
    }
    swaps
}

/// Runs `attempt` up to [`RACE_RUNS`] times (or until the deadline) while another thread
/// repeats `tenant`; returns (successes, failures).
fn race(tenant: impl Fn() -> u64 + Sync, mut attempt: impl FnMut() -> bool) -> (u32, u32) {
    let stop = AtomicBool::new(false);
    let swaps = AtomicU64::new(0);
    let (mut ok, mut failed) = (0, 0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                swaps.fetch_add(tenant(), Ordering::Relaxed);
            }
        });
        let start = Instant::now();
        for _ in 0..RACE_RUNS {
            if start.elapsed() > RACE_DEADLINE {
                break;
            }
            if attempt() {
                ok += 1;
            } else {
                failed += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    let swaps = swaps.load(Ordering::Relaxed);
    eprintln!("race: {ok} succeeded, {failed} failed cleanly, {swaps} swaps");
    assert!(swaps > 0, "the tenant never swapped anything");
    (ok, failed)
}

/// Every regular file below `root` (symlinks not followed) with its contents.
fn files(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    walkdir::WalkDir::new(root)
        .sort_by_file_name()
        .into_iter()
        .map(|e| e.expect("walk"))
        .filter(|e| e.file_type().is_file())
        .map(|e| (e.path().to_owned(), fs::read(e.path()).expect("read")))
        .collect()
}

#[test]
fn backup_racing_a_directory_swapped_for_a_symlink_never_copies_outside_data() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let outside = outside(tmp.path());
    let source = tmp.path().join("src");
    fs::create_dir_all(source.join("0/d")).expect("mkdir");
    fs::write(source.join("0/d/f"), b"in-source f").expect("write");
    fs::write(source.join("0/d/g"), b"in-source g").expect("write");
    fs::write(source.join("0/plain"), b"in-source plain").expect("write");
    fs::create_dir(tmp.path().join("park")).expect("mkdir");
    symlink(&outside, tmp.path().join("park/d")).expect("symlink");
    let app = app(&tmp.path().join("backup"));
    let pairs = [(source.join("0/d"), tmp.path().join("park/d"))];

    let mut seen = Vec::new();
    let (ok, _) = race(
        || exchange(&pairs),
        || match hellostateful_mover::backup(&app, &backup_opts(&source)) {
            Ok(report) => {
                // The copy of the volume (beside it: the mover's manifest and entries).
                seen.extend(files(&app.dir().join(&report.id).join("0")));
                true
            }
            Err(e) => {
                let incomplete = hellostateful_mover::incomplete(&app).expect("incomplete");
                assert!(incomplete.is_empty(), "{incomplete:?} after {}", chain(&e));
                false
            }
        },
    );
    for (path, data) in &seen {
        assert!(
            data.starts_with(b"in-source"),
            "{} holds {:?}",
            path.display(),
            String::from_utf8_lossy(data)
        );
    }
    if ok > 0 {
        assert!(all_snapshots_verify(&app) > 0);
    }
    for (_, data) in files(&outside) {
        assert_eq!(data, SECRET);
    }
}

/// Names and contents of everything below `root`, symlinks as their targets.
fn listing(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    walkdir::WalkDir::new(root)
        .sort_by_file_name()
        .into_iter()
        .map(|e| e.expect("walk"))
        .map(|e| {
            let data = if e.file_type().is_file() {
                fs::read(e.path()).expect("read")
            } else if e.file_type().is_symlink() {
                fs::read_link(e.path())
                    .expect("readlink")
                    .into_os_string()
                    .into_encoded_bytes()
            } else {
                Vec::new()
            };
            (e.path().to_owned(), data)
        })
        .collect()
}

#[test]
fn restore_racing_directories_swapped_for_symlinks_never_writes_outside() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let outside = outside(tmp.path());
    let before = listing(&outside);
    let source = tmp.path().join("src");
    fs::create_dir_all(source.join("0/d/sub")).expect("mkdir");
    for (name, data) in [("d/f", "f"), ("d/g", "g"), ("d/sub/h", "h"), ("plain", "p")] {
        fs::write(source.join("0").join(name), data).expect("write");
    }
    let app = app(&tmp.path().join("backup"));
    hellostateful_mover::backup(&app, &backup_opts(&source)).expect("backup");
    let dest = tmp.path().join("dest");
    fs::create_dir_all(dest.join("0/d")).expect("mkdir");
    fs::write(dest.join("0/d/f"), b"live").expect("write");
    let park = tmp.path().join("park");
    fs::create_dir(&park).expect("mkdir");
    // The staging directory the mover writes into, the one it moves the old contents
    // into, and one of the app's own.
    let dirs =
        [".hellostateful-staging", ".hellostateful-old", "d"].map(|n| dest.join("0").join(n));
    let n = AtomicU64::new(0);

    let mut changed = None;
    race(
        || replace_with_symlinks(&dirs, &outside, &park, &n),
        || {
            let outcome =
                hellostateful_mover::restore(&app, &restore_opts(&dest, Selector::Latest));
            if changed.is_none() && listing(&outside) != before {
                changed = Some(format!("{outcome:?}"));
            }
            if outcome.is_err() {
                // A swap the tenant broke leaves its volume for the admin to clear (the
                // mover never guesses); clear it so that the race goes on.
                for name in leftovers(&dest.join("0")) {
                    let path = dest.join("0").join(name);
                    let _ = fs::remove_dir_all(&path).or_else(|_| fs::remove_file(&path));
                }
            }
            outcome.is_ok()
        },
    );
    assert_eq!(changed, None, "something was written outside the volume");
    assert_eq!(listing(&outside), before);
}

/// Rewrites snapshot `id`'s replica 0 entries with `edit` applied and reseals its
/// manifest, as a tenant writing into its own backups can.
fn forge(app_dir: &Path, id: &str, edit: impl FnOnce(&mut Vec<Entry>)) {
    let snapshot = app_dir.join(id);
    let path = snapshot.join(MANIFEST_FILE);
    let mut manifest: Manifest =
        serde_json::from_slice(&fs::read(&path).expect("read")).expect("parse");
    let entries_path = snapshot.join(manifest.replicas[0].entry_file_name());
    let mut entries: Vec<Entry> = fs::read_to_string(&entries_path)
        .expect("read")
        .lines()
        .map(|line| serde_json::from_str(line).expect("parse"))
        .collect();
    edit(&mut entries);
    let mut text = Vec::new();
    for entry in &entries {
        serde_json::to_writer(&mut text, entry).expect("json");
        text.push(b'\n');
    }
    fs::write(&entries_path, &text).expect("write");
    manifest.replicas[0].entry_file = Some(EntryFile {
        count: entries.len() as u64,
        bytes: text.len() as u64,
        blake3: blake3::hash(&text).to_hex().to_string(),
    });
    // Sealed as the mover seals: the compact JSON with the checksum empty.
    manifest.checksum = String::new();
    let digest = blake3::hash(&serde_json::to_vec(&manifest).expect("json"));
    manifest.checksum = digest.to_hex().to_string();
    fs::write(&path, serde_json::to_vec_pretty(&manifest).expect("json")).expect("write");
}

#[test]
fn forged_manifest_with_an_entry_beneath_a_symlink_or_twice_is_refused_before_live_data_is_touched()
{
    let tmp = tempfile::tempdir().expect("tempdir");
    let outside = tmp.path().join("outside");
    fs::create_dir(&outside).expect("mkdir");
    let source = tmp.path().join("src");
    fs::create_dir_all(source.join("0/a")).expect("mkdir");
    fs::write(source.join("0/a/x"), b"planted").expect("write");
    fs::write(source.join("0/f"), b"f").expect("write");
    let target = tmp.path().join("backup");
    let app = app(&target);
    let b = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("backup");
    let dest = volumes(tmp.path(), "dest", 3);
    let live = |dest: &Path| {
        let mut s = shape(&dest.join("0"));
        s.remove(Path::new(""));
        s
    };
    let before = live(&dest);

    // `a` becomes a symlink to outside, and `a/x` (whose contents match) is written
    // through it unless refused.
    forge(&app.dir(), &b.id, |entries| {
        for entry in entries.iter_mut() {
            if entry.path.as_deref() == Some("a") {
                entry.kind = Kind::Symlink;
                entry.target = Some(outside.to_string_lossy().into_owned());
                entry.size = outside.as_os_str().len() as u64;
            }
        }
    });
    let e = hellostateful_mover::restore(&app, &restore_opts(&dest, Selector::Latest))
        .expect_err("entry beneath a symlink");
    assert!(e.is_permanent(), "{e:?}");
    assert!(
        chain(&e).contains("\"a/x\" lies beneath \"a\""),
        "{}",
        chain(&e)
    );
    let e = hellostateful_mover::verify(&app, &Selector::Latest).expect_err("verify");
    assert!(matches!(e, MoverError::ManifestInvalid { .. }), "{e:?}");
    let (dest_s, target_s) = (dest.to_string_lossy(), target.to_string_lossy());
    let cli = [
        "restore",
        "--dest",
        &dest_s,
        "--from",
        "latest",
        "--target",
        &target_s,
        "--namespace",
        NS,
        "--name",
        NAME,
    ];
    let output = run_child(&cli, &[]);
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    assert_eq!(fs::read_dir(&outside).expect("ls").count(), 0);
    assert!(live(&dest) == before, "live data changed");
    assert!(leftovers(&dest.join("0")).is_empty());

    forge(&app.dir(), &b.id, |entries| {
        entries.retain(|e| e.path.as_deref() == Some("f"));
        let again = entries[0].clone();
        entries.push(again);
    });
    let e = hellostateful_mover::restore(&app, &restore_opts(&dest, Selector::Latest))
        .expect_err("duplicate");
    assert!(e.is_permanent(), "{e:?}");
    assert!(chain(&e).contains("\"f\" appears twice"), "{}", chain(&e));
    assert!(live(&dest) == before, "live data changed");
}

/// A tree with nested and unreadable directories and symlinks pointing outside.
fn plant(volume: &Path, outside: &Path) {
    fs::create_dir_all(volume.join("b")).expect("mkdir");
    fs::create_dir_all(volume.join("locked")).expect("mkdir");
    fs::write(volume.join("a"), b"a").expect("write");
    fs::write(volume.join("b/c"), b"c").expect("write");
    fs::write(volume.join("locked/z"), b"z").expect("write");
    chmod(&volume.join("locked"), 0o000);
    symlink(outside, volume.join("evil")).expect("symlink");
    symlink(outside.join("secret"), volume.join("b/evil")).expect("symlink");
}

#[test]
fn wipe_empties_each_volume_removing_symlinks_as_links() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let outside = tmp.path().join("outside");
    fs::create_dir(&outside).expect("mkdir");
    fs::write(outside.join("secret"), SECRET).expect("write");
    let before = listing(&outside);
    let dest = tmp.path().join("data");
    plant(&dest.join("0"), &outside);
    fs::create_dir_all(dest.join("1")).expect("mkdir");
    fs::write(dest.join("1/only"), b"1").expect("write");
    let log = tmp.path().join("termination-log");
    let (dest_s, log_s) = (dest.to_string_lossy(), log.to_string_lossy());

    let output = run_child(
        &["wipe", "--dest", &dest_s, "--termination-log", &log_s],
        &[],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let result = json_line(&output);
    assert_eq!(result, serde_json::json!({"wiped": [0, 1], "entries": 8}));
    let logged: serde_json::Value =
        serde_json::from_slice(&fs::read(&log).expect("log")).expect("json");
    assert_eq!(logged, result);
    for ordinal in ["0", "1"] {
        let volume = dest.join(ordinal);
        assert!(volume.is_dir(), "the mount point is kept");
        assert_eq!(fs::read_dir(&volume).expect("ls").count(), 0);
    }
    assert_eq!(listing(&outside), before);
}

fn hold_lock(app_dir: &Path) -> fs::File {
    let file = fs::File::create(app_dir.join(".lock")).expect("lock file");
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive).expect("flock");
    file
}

#[test]
fn purge_waits_for_the_lock_then_deletes_every_snapshot_but_not_symlink_targets() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let outside = tmp.path().join("outside");
    fs::create_dir(&outside).expect("mkdir");
    fs::write(outside.join("secret"), SECRET).expect("write");
    let before = listing(&outside);
    let source = volumes(tmp.path(), "src", 0);
    let target = tmp.path().join("backup");
    let app = app(&target);
    let first = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("backup");
    fs::write(source.join("0/stateful.log"), b"changed").expect("write");
    let second = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("backup");
    let app_dir = app.dir();
    fs::create_dir(app_dir.join(".tmp-20000101T000000Z")).expect("mkdir");
    plant(&app_dir.join(".tmp-20000101T000000Z"), &outside);
    symlink(&outside, app_dir.join("evil")).expect("symlink");
    symlink(&outside, app_dir.join(&second.id).join("0/evil")).expect("symlink");
    let target_s = target.to_string_lossy();
    let args = |timeout: &'static str| {
        vec![
            "purge".to_owned(),
            "--target".into(),
            target_s.to_string(),
            "--namespace".into(),
            NS.into(),
            "--name".into(),
            NAME.into(),
            "--lock-timeout".into(),
            timeout.into(),
        ]
    };
    let held = hold_lock(&app_dir);

    let busy: Vec<String> = args("0");
    let busy: Vec<&str> = busy.iter().map(String::as_str).collect();
    let output = run_child(&busy, &[]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("another backup"));
    assert_eq!(hellostateful_mover::list(&app).expect("list").len(), 2);

    let waiting: Vec<String> = args("60");
    let waiting: Vec<&str> = waiting.iter().map(String::as_str).collect();
    let mut purge = common::child(&waiting)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = purge.stderr.take().expect("stderr");
    // Bounded by the child's own lock timeout: it exits (EOF) if it never waits.
    let told = BufReader::new(stderr)
        .lines()
        .map_while(|l| l.ok())
        .any(|l| l.contains("waiting up to 60s"));
    assert!(told, "purge did not wait for the lock");
    assert_eq!(hellostateful_mover::list(&app).expect("list").len(), 2);
    drop(held);
    let output = purge.wait_with_output().expect("wait");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let result = json_line(&output);
    assert_eq!(
        result["purged"],
        serde_json::json!(["20000101T000000Z", first.id, second.id])
    );
    assert!(
        result["entries"].as_u64().expect("entries") > 20,
        "{result}"
    );
    let left: Vec<_> = fs::read_dir(&app_dir)
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left, vec![".lock"]);
    assert_eq!(listing(&outside), before);
}

#[test]
fn a_file_an_app_replaces_by_rename_is_backed_up_not_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = tmp.path().join("src");
    fs::create_dir_all(source.join("0")).expect("mkdir");
    fs::write(source.join("0/state"), b"version 0").expect("write");
    let app = app(&tmp.path().join("backup"));
    let version = AtomicU64::new(0);
    // The app saves the way careful apps do: write a new file, rename it over the old one.
    let save = || {
        let n = version.fetch_add(1, Ordering::Relaxed) + 1;
        let next = source.join(format!("0/.state.{n}"));
        fs::write(&next, format!("version {n}")).expect("write");
        fs::rename(&next, source.join("0/state")).expect("rename");
        1
    };
    let (ok, failed) = race(save, || {
        match hellostateful_mover::backup(&app, &backup_opts(&source)) {
            Ok(_) => true,
            Err(e) => {
                eprintln!("backup failed: {}", chain(&e));
                false
            }
        }
    });
    assert_eq!(failed, 0, "{ok} backups succeeded, {failed} failed");
    assert!(all_snapshots_verify(&app) > 0);
}
