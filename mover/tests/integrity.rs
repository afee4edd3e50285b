//! A backup never records a wrong file as good: replaced files are copied again even when
//! their size and mtime were preserved, a file that changes during its copy is flagged,
//! and a short read fails the backup.

mod common;

use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use common::*;
use hellostateful_mover::chain;

#[test]
fn child() {
    child_main();
}

/// The snapshot's manifest with each replica's entries (kept in its own file) inline.
fn manifest(app: &hellostateful_mover::App, id: &str) -> serde_json::Value {
    let snapshot = app.dir().join(id);
    let text = fs::read(snapshot.join("manifest.json")).expect("manifest");
    let mut manifest: serde_json::Value = serde_json::from_slice(&text).expect("json");
    for replica in manifest["replicas"].as_array_mut().expect("replicas") {
        let name = format!("entries-{}.jsonl", replica["ordinal"]);
        let lines = fs::read_to_string(snapshot.join(name)).expect("entries");
        replica["entries"] = lines
            .lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).expect("json"))
            .collect();
    }
    manifest
}

fn entry<'a>(manifest: &'a serde_json::Value, path: &str) -> &'a serde_json::Value {
    manifest["replicas"][0]["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .find(|e| e["path"] == path)
        .unwrap_or_else(|| panic!("{path} not in the manifest"))
}

/// `cp -p`, `rsync` and `tar x` replace a file and keep its mtime; with the same size,
/// only the inode number or the ctime tells.
#[test]
fn a_file_replaced_with_its_old_size_and_mtime_is_copied_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 0);
    let volume = source.join("0");
    settle(&source);
    let app = app(&tmp.path().join("backup"));
    let first = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("first");

    // In place: same inode, same size, mtime set back.
    let in_place = volume.join("logs/f5.txt");
    let before = fs::metadata(&in_place).expect("stat");
    let len = before.len() as usize;
    fs::write(&in_place, "X".repeat(len)).expect("rewrite");
    set_mtime(&in_place, before.mtime(), before.mtime_nsec());
    // Renamed over: a new inode with the old size, mode and mtime (what `cp -p` of a
    // same-sized file and `rsync` do).
    let renamed = volume.join("logs/f6.txt");
    let before = fs::metadata(&renamed).expect("stat");
    let fresh = volume.join("logs/.f6.new");
    fs::write(&fresh, "Y".repeat(before.len() as usize)).expect("write");
    set_mtime(&fresh, before.mtime(), before.mtime_nsec());
    fs::rename(&fresh, &renamed).expect("rename");

    let second = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("second");
    let dir = app.dir();
    let ino = |id: &str, rel: &str| fs::metadata(dir.join(id).join(rel)).expect("stat").ino();
    for rel in ["0/logs/f5.txt", "0/logs/f6.txt"] {
        assert_ne!(
            ino(&first.id, rel),
            ino(&second.id, rel),
            "{rel} was linked"
        );
        assert_eq!(
            fs::read(dir.join(&second.id).join(rel)).expect("read"),
            fs::read(source.join(rel)).expect("read"),
            "{rel}"
        );
    }
    // Untouched files are still linked.
    assert_eq!(
        ino(&first.id, "0/logs/f7.txt"),
        ino(&second.id, "0/logs/f7.txt")
    );
    assert_eq!(all_snapshots_verify(&app), 2);
}

/// A file changed within a second of a backup's start may have changed again within the
/// same timestamp tick after it was copied: the next backup copies it again.
#[test]
fn a_file_changed_just_before_a_backup_is_not_trusted_by_the_next() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 0);
    let app = app(&tmp.path().join("backup"));
    // No settle: every file was just written.
    let first = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("first");
    let second = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("second");
    assert_eq!(second.linked_files, 0, "{second:?}");
    assert_eq!(second.new_bytes, first.bytes);
    // Once settled, they are trusted.
    settle(&source);
    let third = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("third");
    let fourth = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("fourth");
    assert_eq!(third.linked_files, 0, "{third:?}");
    assert_eq!(fourth.linked_files, fourth.files, "{fourth:?}");
}

/// An app that never stops writing a file: after the last attempt the copy is kept as
/// read, flagged in the manifest, named in the report, and the backup succeeds.
#[test]
fn a_file_that_keeps_changing_is_kept_flagged_and_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = tmp.path().join("src");
    let volume = source.join("0");
    fs::create_dir_all(&volume).expect("mkdir");
    fs::write(volume.join("quiet"), b"still").expect("write");
    let busy = volume.join("busy.log");
    fs::write(&busy, vec![7u8; 32 << 20]).expect("write");
    let app = app(&tmp.path().join("backup"));

    // The writer runs all through each backup; on a busy machine it may still be
    // descheduled for a whole copy, which is then (rightly) consistent: back up again,
    // until one backup saw it change in all three attempts.
    let backup_while_written = || {
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let writer = s.spawn(|| {
                let mut file = fs::OpenOptions::new()
                    .append(true)
                    .open(&busy)
                    .expect("open");
                while !stop.load(Ordering::Relaxed) {
                    file.write_all(b"x").expect("append");
                }
            });
            let report = hellostateful_mover::backup(&app, &backup_opts(&source));
            stop.store(true, Ordering::Relaxed);
            writer.join().expect("writer");
            report.expect("backup")
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let report = loop {
        let report = backup_while_written();
        if report.inconsistent > 0 || std::time::Instant::now() > deadline {
            break report;
        }
    };
    assert_eq!(report.inconsistent, 1, "{report:?}");
    assert_eq!(report.inconsistent_files, vec!["0/busy.log".to_owned()]);
    let manifest = manifest(&app, &report.id);
    assert_eq!(manifest["inconsistentFiles"], 1);
    assert_eq!(entry(&manifest, "busy.log")["inconsistent"], true);
    assert!(entry(&manifest, "quiet").get("inconsistent").is_none());
    // What was kept is what the manifest describes.
    assert!(all_snapshots_verify(&app) >= 1);

    // The JSON line the reconciler reads carries them.
    let target = tmp.path().join("backup");
    let args = cli_args("backup", "--source", &source, &target);
    let out = run_child(&args, &[]);
    assert!(out.status.success());
    let json = json_line(&out);
    assert!(json.get("inconsistent").is_none(), "{json}");
}

/// A read that ends before the file's size, with nothing changed meanwhile, is a failing
/// disk or filesystem: the backup fails naming the file (sysfs files are such files:
/// 4096 bytes by `stat`, a few by `read`).
#[test]
fn a_short_read_fails_the_backup_naming_the_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = tmp.path().join("src");
    let volume = source.join("0");
    fs::create_dir_all(&volume).expect("mkdir");
    let short = volume.join("short");
    fs::write(&short, b"").expect("write");
    let sysfs = Path::new("/sys/kernel/mm/transparent_hugepage/enabled");
    let sysfs = if sysfs.exists() {
        sysfs
    } else {
        Path::new("/sys/kernel/profiling")
    };
    let mounted = std::process::Command::new("mount")
        .arg("--bind")
        .arg(sysfs)
        .arg(&short)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !mounted {
        eprintln!("SKIPPED short read test: cannot bind-mount (not root?)");
        return;
    }
    let _unmount = Unmount(&short);
    let md = fs::metadata(&short).expect("stat");
    let read = fs::read(&short).expect("read").len() as u64;
    assert!(read < md.len(), "{read} bytes read of {}", md.len());

    let app = app(&tmp.path().join("backup"));
    let e = hellostateful_mover::backup(&app, &backup_opts(&source)).expect_err("short read");
    let text = chain(&e);
    assert!(
        text.contains("cannot read all of") && text.contains("short") && text.contains("bytes"),
        "{text}"
    );
    assert!(hellostateful_mover::list(&app).expect("list").is_empty());
}
