//! Faults: each fails with a clear error naming the file, and loses nothing.

mod common;

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use hellostateful_mover::{BackupOptions, MoverError, Selector, chain};

#[test]
fn child() {
    child_main();
}

fn err_text(e: &MoverError) -> String {
    chain(e)
}

#[test]
fn missing_source_fails_naming_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let app = app(&tmp.path().join("backup"));
    let missing = tmp.path().join("no-such-dir");
    let e = hellostateful_mover::backup(&app, &backup_opts(&missing)).expect_err("missing");
    let text = err_text(&e);
    assert!(
        text.contains("no-such-dir") && text.contains("No such file"),
        "{text}"
    );

    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).expect("mkdir");
    let e = hellostateful_mover::backup(&app, &backup_opts(&empty)).expect_err("no ordinals");
    assert!(err_text(&e).contains("no replica volumes"), "{e}");
}

#[test]
fn full_target_fails_cleanly_and_keeps_earlier_snapshots() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let target = tmp.path().join("small");
    fs::create_dir(&target).expect("mkdir");
    let Some(_unmount) = small_tmpfs(&target) else {
        eprintln!("SKIPPED full_target test: cannot mount a tmpfs (not root?)");
        return;
    };

    let source = tmp.path().join("src");
    fs::create_dir_all(source.join("0")).expect("mkdir");
    fs::write(source.join("0/small"), b"fits").expect("write");
    let app = app(&target);
    let first = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("small backup");

    fs::write(source.join("0/huge"), vec![7u8; 3 << 20]).expect("write");
    let e = hellostateful_mover::backup(&app, &backup_opts(&source)).expect_err("ENOSPC");
    // Files are copied side by side: whichever write the full disk refuses first is named,
    // `huge`, or `small` beside it once `huge` took the space.
    let text = err_text(&e);
    assert!(
        text.contains("No space left on device")
            && (text.contains("/0/huge") || text.contains("/0/small")),
        "{text}"
    );
    let listed = hellostateful_mover::list(&app).expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, first.id);
    assert!(
        hellostateful_mover::incomplete(&app)
            .expect("incomplete")
            .is_empty()
    );
    assert_eq!(all_snapshots_verify(&app), 1);
}

/// The admin's bound on an app's backup directory: a backup that would take it past the
/// bound stops and fails saying so, and the earlier snapshots stay whole; one that fits
/// (its unchanged files linked, not copied) succeeds.
#[test]
fn a_backup_past_the_apps_bound_fails_and_keeps_earlier_snapshots() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let app = app(&tmp.path().join("backup"));
    let source = tmp.path().join("src");
    fs::create_dir_all(source.join("0")).expect("mkdir");
    fs::write(source.join("0/a"), vec![1u8; 40_000]).expect("write");
    fs::write(source.join("0/b"), vec![2u8; 40_000]).expect("write");
    settle(&source);
    let bounded = |max_bytes| hellostateful_mover::BackupOptions {
        max_bytes: Some(max_bytes),
        ..backup_opts(&source)
    };
    let first = hellostateful_mover::backup(&app, &bounded(100_000)).expect("fits");
    assert_eq!(first.new_bytes, 80_000);

    // Unchanged, the next one copies nothing and fits again.
    let linked = hellostateful_mover::backup(&app, &bounded(100_000)).expect("linked");
    assert_eq!(linked.new_bytes, 0);

    // 80 000 held, and 40 000 new would make 120 000.
    fs::write(source.join("0/c"), vec![3u8; 40_000]).expect("write");
    let e = hellostateful_mover::backup(&app, &bounded(100_000)).expect_err("past the bound");
    let text = err_text(&e);
    assert!(
        text.contains("past the 100000 bytes")
            && text.contains("hold up to 80000 bytes")
            && text.contains("nodeBackupLimit"),
        "{text}"
    );
    assert!(matches!(e, MoverError::OverLimit { .. }), "{e:?}");
    let listed = hellostateful_mover::list(&app).expect("list");
    assert_eq!(listed.len(), 2);
    assert!(
        hellostateful_mover::incomplete(&app)
            .expect("incomplete")
            .is_empty()
    );
    assert_eq!(all_snapshots_verify(&app), 2);
    hellostateful_mover::backup(&app, &bounded(120_000)).expect("fits a larger bound");
}

#[test]
fn unreadable_file_fails_naming_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    common::chmod(tmp.path(), 0o755);
    let source = tmp.path().join("src");
    fs::create_dir_all(source.join("0/dir")).expect("mkdir");
    fs::write(source.join("0/dir/readable"), b"ok").expect("write");
    fs::write(source.join("0/dir/secret"), b"no").expect("write");
    common::chmod(&source.join("0/dir/secret"), 0o000);
    let target = tmp.path().join("backup");
    fs::create_dir(&target).expect("mkdir");
    common::chmod(&target, 0o777);

    if rustix::process::geteuid().is_root() {
        // Root reads mode-000 files, so drop to `nobody` in a child process.
        let out = common::child(&cli_args("backup", "--source", &source, &target))
            .uid(65534)
            .gid(65534)
            .output()
            .expect("spawn");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            stderr.contains("dir/secret") && stderr.contains("Permission denied"),
            "{stderr}"
        );
    } else {
        let e = hellostateful_mover::backup(&app(&target), &backup_opts(&source))
            .expect_err("unreadable");
        assert!(err_text(&e).contains("dir/secret"), "{e}");
    }
    let app = app(&target);
    assert!(hellostateful_mover::list(&app).expect("list").is_empty());
    assert!(
        hellostateful_mover::incomplete(&app)
            .expect("incomplete")
            .is_empty()
    );
}

#[test]
fn ids_with_path_tricks_are_refused() {
    for bad in [
        "../20261129T150102Z",
        "20261129T150102Z/..",
        "..",
        "a/b",
        "",
    ] {
        let e = bad.parse::<Selector>().expect_err(bad);
        assert!(e.to_string().contains("invalid backup id"), "{e}");
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = run_child(
        &[
            "verify",
            "--target",
            tmp.path().to_str().expect("utf8"),
            "--namespace",
            NS,
            "--name",
            NAME,
            "../../etc",
        ],
        &[],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid backup id"));
    let out = run_child(
        &[
            "backups",
            "--namespace",
            "..",
            "--name",
            NAME,
            "--target",
            "/x",
        ],
        &[],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid namespace"));
}

#[test]
fn unknown_id_lists_existing_ones() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 0);
    let app = app(&tmp.path().join("backup"));
    let b = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("backup");
    let sel = Selector::Id("20000101T000000Z".parse().expect("id"));
    let e = hellostateful_mover::restore(&app, &restore_opts(&source, sel)).expect_err("unknown");
    assert!(e.to_string().contains(&b.id), "{e}");
}

#[test]
fn edited_manifest_or_damaged_file_is_refused_before_live_data_is_touched() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 0);
    let app = app(&tmp.path().join("backup"));
    let b = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("backup");
    let dest = volumes(tmp.path(), "dest", 3);
    // The volume root's own mtime changes when staging is made and removed; its
    // contents must not.
    let live = |dest: &Path| {
        let mut s = shape(&dest.join("0"));
        s.remove(Path::new(""));
        s
    };
    let before = live(&dest);
    // The manifest and the entries file it seals.
    for name in ["manifest.json", "entries-0.jsonl"] {
        let manifest = app.dir().join(&b.id).join(name);
        let original = fs::read_to_string(&manifest).expect("read");
        // A hand edit (here: a size) is refused by verify and restore, naming the file.
        let edited = original
            .replacen("\"bytes\": ", "\"bytes\": 1", 1)
            .replacen("\"size\":0", "\"size\":1", 1);
        assert_ne!(edited, original);
        fs::write(&manifest, edited).expect("edit");
        let e = hellostateful_mover::verify(&app, &Selector::Latest).expect_err("edited");
        assert!(err_text(&e).contains(name), "{e}");
        let e = hellostateful_mover::restore(
            &app,
            &restore_opts(&dest, Selector::Id(b.id.parse().expect("id"))),
        )
        .expect_err("edited");
        assert!(err_text(&e).contains(name), "{e}");
        assert!(live(&dest) == before, "live data changed");
        fs::write(&manifest, &original).expect("put back");
    }

    // A damaged file (same size, different bytes) and a missing one are named.
    let snap = app.dir().join(&b.id).join("0");
    let mut data = fs::read(snap.join("big.bin")).expect("read");
    data[1000] ^= 1;
    fs::write(snap.join("big.bin"), &data).expect("corrupt");
    let report = hellostateful_mover::verify(&app, &Selector::Latest).expect("verify");
    assert!(
        report.problems.iter().any(|p| p.contains("big.bin")),
        "{:?}",
        report.problems
    );
    let e = hellostateful_mover::restore(&app, &restore_opts(&dest, Selector::Latest))
        .expect_err("damaged");
    assert!(err_text(&e).contains("big.bin"), "{e}");
    assert!(live(&dest) == before, "live data changed");
    assert!(leftovers(&dest.join("0")).is_empty());

    fs::remove_file(snap.join("logs/f2.txt")).expect("remove");
    let report = hellostateful_mover::verify(&app, &Selector::Latest).expect("verify");
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("f2.txt") && p.contains("missing"))
    );
    let out = run_child(
        &[
            "verify",
            "--target",
            tmp.path().join("backup").to_str().expect("utf8"),
            "--namespace",
            NS,
            "--name",
            NAME,
            "latest",
        ],
        &[],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("bad: "));
}

fn hold_lock(app_dir: &Path) -> fs::File {
    fs::create_dir_all(app_dir).expect("mkdir");
    hold_lock_file(&app_dir.join(".lock"))
}

fn hold_lock_file(path: &Path) -> fs::File {
    let file = fs::File::create(path).expect("lock file");
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive).expect("flock");
    file
}

/// What a running restore holds is its volumes' locks and their staging directories: a
/// second restore (a retried Job beside a slow one) waits, then fails clearly, and
/// deletes nothing of the first's.
#[test]
fn a_second_restore_during_a_restore_waits_and_touches_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 1);
    let app = app(&tmp.path().join("backup"));
    hellostateful_mover::backup(&app, &backup_opts(&source)).expect("backup");
    let dest = volumes(tmp.path(), "dest", 7);
    // The volume root's own mtime changes as the mover's lock file is made.
    let below_root = |root: &Path| {
        let mut shape = shape(root);
        shape.remove(Path::new(""));
        shape
    };
    let live = below_root(&dest.join("0"));
    let staging = dest.join("0/.hellostateful-staging");
    fs::create_dir(&staging).expect("mkdir");
    fs::write(staging.join("being-written"), b"x").expect("write");
    let held = hold_lock_file(&dest.join("0/.hellostateful-lock"));

    let mut opts = restore_opts(&dest, Selector::Latest);
    opts.lock_wait = Duration::from_millis(300);
    let e = hellostateful_mover::restore(&app, &opts).expect_err("locked");
    let text = err_text(&e);
    assert!(
        text.contains(".hellostateful-lock") && text.contains("another"),
        "{text}"
    );
    assert!(
        staging.join("being-written").exists(),
        "the running restore's staging"
    );
    assert!(below_root(&dest.join("0")) == live, "live data changed");

    drop(held);
    hellostateful_mover::restore(&app, &restore_opts(&dest, Selector::Latest))
        .expect("restore once the other is done");
    assert!(
        shape(&dest.join("0")) == shape(&source.join("0")),
        "not restored"
    );
    assert!(leftovers(&dest.join("0")).is_empty());
}

/// A restore stages a full copy beside the live data: a volume without room for it is
/// refused before anything is written, with the figures.
#[test]
fn a_restore_that_cannot_fit_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 0);
    let app = app(&tmp.path().join("backup"));
    hellostateful_mover::backup(&app, &backup_opts(&source)).expect("backup");
    let volume = tmp.path().join("dest/0");
    fs::create_dir_all(&volume).expect("mkdir");
    let Some(_unmount) = small_tmpfs(&volume) else {
        eprintln!("SKIPPED full volume test: cannot mount a tmpfs (not root?)");
        return;
    };
    fs::write(volume.join("live"), b"old data").expect("write");
    let live = fs::read(volume.join("live")).expect("read");

    let dest = tmp.path().join("dest");
    let e = hellostateful_mover::restore(&app, &restore_opts(&dest, Selector::Latest))
        .expect_err("does not fit");
    let text = err_text(&e);
    assert!(
        text.contains("not enough space")
            && text.contains("needs")
            && text.contains("nothing was changed"),
        "{text}"
    );
    assert!(e.is_permanent());
    assert_eq!(fs::read(volume.join("live")).expect("read"), live);
    assert!(leftovers(&volume).is_empty());
}

/// Two volumes on one filesystem, each copy fitting alone but not both: refused before
/// anything is written, naming both (each checked alone, both passed and staging filled
/// the disk).
#[test]
fn volumes_on_one_filesystem_must_fit_their_copies_together() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = tmp.path().join("src");
    for ordinal in ["0", "1"] {
        fs::create_dir_all(source.join(ordinal)).expect("mkdir");
        fs::write(source.join(ordinal).join("big"), vec![1u8; 600 * 1024]).expect("write");
    }
    let app = app(&tmp.path().join("backup"));
    hellostateful_mover::backup(&app, &backup_opts(&source)).expect("backup");
    let dest = tmp.path().join("dest");
    fs::create_dir_all(&dest).expect("mkdir");
    let Some(_unmount) = small_tmpfs(&dest) else {
        eprintln!("SKIPPED shared filesystem test: cannot mount a tmpfs (not root?)");
        return;
    };
    for ordinal in ["0", "1"] {
        fs::create_dir(dest.join(ordinal)).expect("mkdir");
        fs::write(dest.join(ordinal).join("live"), b"old data").expect("write");
    }

    let e = hellostateful_mover::restore(&app, &restore_opts(&dest, Selector::Latest))
        .expect_err("the two copies do not fit together");
    let text = err_text(&e);
    assert!(
        text.contains("not enough space")
            && text.contains(&format!("{} (on one filesystem)", dest.join("1").display())),
        "{text}"
    );
    for ordinal in ["0", "1"] {
        assert_eq!(
            fs::read(dest.join(ordinal).join("live")).expect("read"),
            b"old data"
        );
        assert!(leftovers(&dest.join(ordinal)).is_empty());
    }
}

#[test]
fn concurrent_backup_waits_then_fails_clearly_and_prune_stays_away() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 0);
    let app = app(&tmp.path().join("backup"));
    hellostateful_mover::backup(&app, &backup_opts(&source)).expect("backup");
    let held = hold_lock(&app.dir());

    let mut opts = backup_opts(&source);
    opts.lock_wait = Duration::from_millis(300);
    let e = hellostateful_mover::backup(&app, &opts).expect_err("locked");
    let text = err_text(&e);
    assert!(
        text.contains(".lock") && text.contains("another backup"),
        "{text}"
    );
    let pruned = hellostateful_mover::prune(&app, 1).expect("prune");
    assert!(pruned.busy && pruned.pruned.is_empty());

    // A waiting backup proceeds as soon as the holder is done.
    let waiter = {
        let app = app.clone();
        let opts = backup_opts(&source);
        std::thread::spawn(move || hellostateful_mover::backup(&app, &opts))
    };
    drop(held);
    waiter.join().expect("thread").expect("backup after unlock");
    assert_eq!(all_snapshots_verify(&app), 2);
}

#[test]
fn lock_of_a_killed_backup_is_recovered() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 0);
    let target = tmp.path().join("backup");
    let app = app(&target);
    let out = run_child(
        &[
            "backup",
            "--source",
            source.to_str().expect("utf8"),
            "--target",
            target.to_str().expect("utf8"),
            "--namespace",
            NS,
            "--name",
            NAME,
        ],
        &[(hellostateful_mover::FAULT_ENV, "5".into())],
    );
    assert!(!out.status.success(), "the child should have crashed");
    assert_eq!(
        hellostateful_mover::incomplete(&app)
            .expect("incomplete")
            .len(),
        1
    );

    let start = Instant::now();
    let mut opts = backup_opts(&source);
    opts.lock_wait = Duration::from_secs(5);
    hellostateful_mover::backup(&app, &opts).expect("backup after a crash");
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(
        hellostateful_mover::incomplete(&app)
            .expect("incomplete")
            .is_empty()
    );
    assert_eq!(all_snapshots_verify(&app), 1);
}

#[test]
fn prune_keeps_the_newest_and_refuses_zero() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 0);
    let app = app(&tmp.path().join("backup"));
    let mut ids = Vec::new();
    for i in 0..4 {
        fs::write(source.join("0/stateful.log"), format!("{i}")).expect("write");
        ids.push(
            hellostateful_mover::backup(&app, &backup_opts(&source))
                .expect("backup")
                .id,
        );
    }
    assert!(hellostateful_mover::prune(&app, 0).is_err());
    let out = hellostateful_mover::prune(&app, 2).expect("prune");
    assert_eq!(out.pruned, vec![ids[1].clone(), ids[0].clone()]);
    assert_eq!(out.kept, vec![ids[3].clone(), ids[2].clone()]);
    // The survivors' hard-linked files are intact.
    assert_eq!(all_snapshots_verify(&app), 2);
}

/// What the reconciler's snapshot metrics come from: a backup with retention says how
/// many snapshots it left and the oldest; one without says nothing it did not count.
#[test]
fn a_backup_with_retention_reports_the_snapshots_left_and_the_oldest() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 0);
    let app = app(&tmp.path().join("backup"));
    let plain = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("backup");
    assert_eq!((plain.snapshots, plain.oldest), (None, None));
    let keeping = |n| BackupOptions {
        keep_last: Some(n),
        ..backup_opts(&source)
    };
    let second = hellostateful_mover::backup(&app, &keeping(3)).expect("backup");
    assert_eq!(second.snapshots, Some(2));
    assert_eq!(second.oldest.as_deref(), Some(plain.id.as_str()));
    let third = hellostateful_mover::backup(&app, &keeping(1)).expect("backup");
    assert_eq!(third.pruned, vec![second.id.clone(), plain.id.clone()]);
    assert_eq!(third.snapshots, Some(1));
    assert_eq!(third.oldest.as_deref(), Some(third.id.as_str()));
}

#[test]
fn one_backup_is_described_and_deleted_but_the_newest_only_with_force() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 0);
    let app = app(&tmp.path().join("backup"));
    let mut ids = Vec::new();
    for i in 0..3 {
        fs::write(source.join("0/stateful.log"), format!("version {i}")).expect("write");
        if i == 0 {
            // The files the next backups leave unchanged are linked to this one's.
            settle(&source);
        }
        ids.push(
            hellostateful_mover::backup(&app, &backup_opts(&source))
                .expect("backup")
                .id,
        );
    }
    let wait = std::time::Duration::from_secs(5);
    let middle = Selector::Id(ids[1].parse().expect("id"));
    let details = hellostateful_mover::describe(&app, &middle).expect("describe");
    assert_eq!(details.id, ids[1]);
    assert_eq!(details.app, format!("{NS}/{NAME}"));
    assert!(
        details.files >= 1 && details.linked_files >= 1,
        "{details:?}"
    );
    assert_eq!((details.format, details.newest), (3, false));
    assert!(
        hellostateful_mover::describe(&app, &Selector::Latest)
            .expect("latest")
            .newest
    );

    let newest = ids[2].parse().expect("id");
    let refused = hellostateful_mover::delete(&app, &newest, false, wait).expect_err("refused");
    assert!(refused.to_string().contains("--force"), "{refused}");
    assert!(refused.is_permanent());
    let gone = hellostateful_mover::delete(&app, &ids[1].parse().expect("id"), false, wait)
        .expect("delete");
    assert_eq!(gone.kept, vec![ids[2].clone(), ids[0].clone()]);
    let missing = hellostateful_mover::delete(&app, &ids[1].parse().expect("id"), false, wait)
        .expect_err("gone already");
    assert!(
        missing.to_string().contains(&ids[2]),
        "lists what exists: {missing}"
    );
    // The survivors, which shared files with the deleted one by hard links, are intact.
    assert_eq!(all_snapshots_verify(&app), 2);
    let forced = hellostateful_mover::delete(&app, &newest, true, wait).expect("forced");
    assert_eq!(forced.kept, vec![ids[0].clone()]);
    assert_eq!(all_snapshots_verify(&app), 1);
}

/// Backup Jobs mount the app's volumes read-only: a volume that a restore wrote into must
/// still back up without any write to it.
#[test]
fn backup_reads_a_read_only_volume_that_a_restore_wrote() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let target = tmp.path().join("target");
    let source = volumes(tmp.path(), "src", 0);
    let app = app(&target);
    hellostateful_mover::backup(&app, &backup_opts(&source)).expect("first backup");
    hellostateful_mover::restore(&app, &restore_opts(&source, Selector::Latest)).expect("restore");
    let volume = source.join("0");
    let bind = |args: &[&str]| {
        std::process::Command::new("mount")
            .args(args)
            .arg(&volume)
            .arg(&volume)
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if !bind(&["--bind"]) {
        eprintln!("SKIPPED read-only volume test: cannot bind-mount (not root?)");
        return;
    }
    let _unmount = Unmount(&volume);
    assert!(bind(&["-o", "remount,ro,bind"]), "remount read-only");
    assert!(
        fs::write(volume.join("probe"), b"x").is_err(),
        "volume is read-only"
    );
    let second = hellostateful_mover::backup(&app, &backup_opts(&source))
        .unwrap_or_else(|e| panic!("backup of a read-only volume: {}", err_text(&e)));
    assert_eq!(
        hellostateful_mover::list(&app).expect("list")[0].id,
        second.id
    );
}

/// Jobs fail at once on a failure that retrying cannot fix (exit code 3), and retry others.
#[test]
fn permanent_failures_have_their_own_exit_code() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 0);
    let target = tmp.path().join("backup");
    let (target, source) = (target.to_string_lossy(), source.to_string_lossy());
    let common = ["--target", &target, "--namespace", NS, "--name", NAME];
    let backup = run_child(
        &[&["backup", "--source", &source][..], &common].concat(),
        &[],
    );
    assert_eq!(backup.status.code(), Some(0), "{backup:?}");
    let unknown = [
        &["restore", "--dest", &source, "--from", "20000101T000000Z"][..],
        &common,
    ]
    .concat();
    let output = run_child(&unknown, &[]);
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("20000101T000000Z"));
    let missing = [&["backup", "--source", "/nonexistent/volumes"][..], &common].concat();
    let output = run_child(&missing, &[]);
    assert_eq!(
        output.status.code(),
        Some(1),
        "a missing source may appear: retried"
    );
}
