//! Crash safety: a backup or restore stopped at every filesystem step in turn (the
//! `HELLOSTATEFUL_MOVER_FAULT_AFTER` hook aborts the process like `kill -9`), and at
//! seeded random times with SIGKILL. Afterwards the target holds only complete,
//! verifying snapshots, live data is entirely old or entirely new, and the next run
//! completes and cleans up.

mod common;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use hellostateful_mover::FAULT_ENV;

#[test]
fn child() {
    child_main();
}

fn no_tmp_left(app_dir: &Path) {
    let names: Vec<String> = fs::read_dir(app_dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp-") || n.starts_with(".del-"))
        .collect();
    assert!(names.is_empty(), "{names:?}");
}

#[test]
fn backup_killed_at_every_step_leaves_only_complete_snapshots() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 0);
    make_volume(&source.join("1"), 0);
    let target = tmp.path().join("backup");
    let app = app(&target);
    hellostateful_mover::backup(&app, &backup_opts(&source)).expect("first backup");
    make_volume(&source.join("0"), 1);

    let mut step = 1;
    loop {
        let out = run_child(
            &cli_args("backup", "--source", &source, &target),
            &[(FAULT_ENV, step.to_string())],
        );
        if out.status.success() {
            break;
        }
        // Aborted at `step`: only complete snapshots are visible, all verify.
        let n = all_snapshots_verify(&app);
        assert!((1..=1 + step).contains(&n), "step {step}: {n} snapshots");
        step += 1;
        assert!(step < 500, "backup never finished");
    }
    assert!(step > 20, "too few steps ({step}) to be a meaningful test");
    // A normal run afterwards succeeds and removes every leftover.
    hellostateful_mover::backup(&app, &backup_opts(&source)).expect("backup after crashes");
    no_tmp_left(&app.dir());
    all_snapshots_verify(&app);
}

/// A restore of two ordinals stopped at every step in turn: the set is never part old,
/// part new as far as anyone can see. Until the swap commits, the live data is entirely
/// old; after, a backup (read-only volumes, as in its Job) refuses the half-swapped set
/// with a clear message instead of keeping a mix; the next restore finishes the swap.
#[test]
fn restore_killed_at_every_step_is_all_or_nothing_and_finished_by_the_next_restore() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 1);
    make_volume(&source.join("1"), 1);
    let target = tmp.path().join("backup");
    let app = app(&target);
    hellostateful_mover::backup(&app, &backup_opts(&source)).expect("backup");
    let new = [shape(&source.join("0")), shape(&source.join("1"))];

    let dest = tmp.path().join("dest");
    fs::create_dir(&dest).expect("mkdir");
    let old_tree = tmp.path().join("old");
    make_volume(&old_tree.join("0"), 5);
    make_volume(&old_tree.join("1"), 6);
    fs::write(old_tree.join("0/only-old"), b"x").expect("write");
    let old = [shape(&old_tree.join("0")), shape(&old_tree.join("1"))];
    // `dest` itself stays (a read-only bind mount of it is made once, below).
    let reset = || {
        for ord in ["0", "1"] {
            let _ = fs::remove_dir_all(dest.join(ord));
            fs::create_dir_all(dest.join(ord)).expect("mkdir");
            let status = std::process::Command::new("cp")
                .args(["-a", "--"])
                .arg(old_tree.join(ord).join("."))
                .arg(dest.join(ord))
                .status()
                .expect("cp");
            assert!(status.success());
        }
    };
    let same = |root: &Path, want: &common::Shape| {
        let mut got = shape(root);
        got.remove(Path::new("")); // the root's own mtime changes as entries move
        let mut want = want.clone();
        want.remove(Path::new(""));
        got == want
    };
    let set_is = |root: &Path, want: &[common::Shape; 2]| {
        (0..2).all(|ord| same(&root.join(ord.to_string()), &want[ord]))
    };
    let read_only = tmp.path().join("read-only");
    fs::create_dir(&read_only).expect("mkdir");
    let mount = |args: &[&str]| {
        std::process::Command::new("mount")
            .args(args)
            .arg(&dest)
            .arg(&read_only)
            .status()
            .is_ok_and(|s| s.success())
    };
    let _unmount;
    let backup_source = if mount(&["--bind"]) {
        _unmount = Unmount(&read_only);
        assert!(mount(&["-o", "remount,ro,bind"]), "remount read-only");
        read_only.clone()
    } else {
        eprintln!("backups read the volumes read-write: cannot bind-mount (not root?)");
        dest.clone()
    };

    let log = tmp.path().join("termination-log");
    let mut restore = cli_args("restore", "--dest", &dest, &target);
    restore.extend(["--termination-log", log.to_str().expect("utf8")]);
    let other = tmp.path().join("other");
    let mut step = 1;
    let mut refused = 0;
    loop {
        reset();
        let _ = fs::remove_file(&log);
        let out = run_child(&restore, &[(FAULT_ENV, step.to_string())]);
        if out.status.success() {
            let json: serde_json::Value =
                serde_json::from_slice(&fs::read(&log).expect("log")).expect("json");
            assert_eq!(json["restored"], true);
            break;
        }
        let journals: Vec<String> = (0..2)
            .filter_map(|ord| {
                fs::read_to_string(dest.join(format!("{ord}/.hellostateful-journal"))).ok()
            })
            .collect();
        let committed = journals.iter().any(|j| !j.contains("\"Prepared\""));
        if !committed {
            assert!(
                set_is(&dest, &old) || (journals.is_empty() && set_is(&dest, &new)),
                "step {step}: the live data changed before the swap committed"
            );
        }
        // What the reconciler reads of a killed Job: whether the live data may be a mix.
        // The note is written just before the commit and replaced by the outcome, so it
        // is also there for a kill just before the first or just after the last move
        // (erring on the side of caution).
        let note = fs::read_to_string(&log).unwrap_or_default();
        let noted = note.contains(hellostateful_mover::SWAP_INTERRUPTED);
        let edge = journals.len() == 2 || (journals.is_empty() && set_is(&dest, &new));
        assert!(
            noted == committed || (noted && edge),
            "step {step}: committed {committed}, journals {journals:?}, termination log {note:?}"
        );

        // A scheduled backup in between.
        let _ = fs::remove_dir_all(&other);
        let backup = run_child(&cli_args("backup", "--source", &backup_source, &other), &[]);
        let stderr = String::from_utf8_lossy(&backup.stderr);
        if committed {
            assert!(
                !backup.status.success()
                    && stderr.contains("interrupted while it replaced the live data"),
                "step {step}: a half-swapped set was backed up: {stderr}"
            );
            refused += 1;
        } else {
            assert!(backup.status.success(), "step {step}: {stderr}");
            let id = hellostateful_mover::list(&common::app(&other)).expect("list")[0]
                .id
                .clone();
            let snapshot = common::app(&other).dir().join(id);
            assert!(
                set_is(&snapshot, &old) || set_is(&snapshot, &new),
                "step {step}: the backup holds a mix"
            );
        }

        // The Job's retry: a restore that finishes (or undoes) the interrupted one first.
        let done = run_child(&restore, &[]);
        assert!(
            done.status.success(),
            "step {step}: {}",
            String::from_utf8_lossy(&done.stderr)
        );
        assert!(set_is(&dest, &new), "step {step}: not the restored data");
        for ord in 0..2 {
            assert!(
                leftovers(&dest.join(ord.to_string())).is_empty(),
                "step {step}"
            );
        }
        step += 1;
        assert!(step < 1000, "restore never finished");
    }
    assert!(step > 40, "too few steps ({step}) to be a meaningful test");
    assert!(refused > 5, "only {refused} steps were past the commit");
    assert!(set_is(&dest, &new));
}

/// A restore stopped at every step in turn: a volume whose journal is gone (its swap is
/// over: nothing redoes any of it) already has its root's owner and mode from the backup.
#[test]
fn a_restore_killed_once_a_volume_dropped_its_journal_has_given_that_root_its_owner_and_mode() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 1);
    make_volume(&source.join("1"), 1);
    let target = tmp.path().join("backup");
    let dest = tmp.path().join("dest");
    let ordinals = ["0", "1"];
    for ord in ordinals {
        chmod(&source.join(ord), 0o750);
    }
    hellostateful_mover::backup(&app(&target), &backup_opts(&source)).expect("backup");
    // The root's mode, owner and group (its mtime may be lost by a crash), and the rest.
    let root_of = |shape: &common::Shape| {
        let (_, mode, uid, gid, ..) = shape[Path::new("")];
        (mode, uid, gid)
    };
    let below_root = |root: &Path| {
        let mut shape = shape(root);
        shape.remove(Path::new(""));
        shape
    };
    let new = ordinals.map(|ord| {
        (
            root_of(&shape(&source.join(ord))),
            below_root(&source.join(ord)),
        )
    });

    let restore = cli_args("restore", "--dest", &dest, &target);
    let mut step = 1;
    loop {
        let _ = fs::remove_dir_all(&dest);
        for (ord, version) in ordinals.iter().zip([5, 6]) {
            make_volume(&dest.join(ord), version);
            chmod(&dest.join(ord), 0o755);
        }
        let out = run_child(&restore, &[(FAULT_ENV, step.to_string())]);
        for (ord, (root, below)) in ordinals.iter().zip(&new) {
            let volume = dest.join(ord);
            if !volume.join(".hellostateful-journal").exists() && below_root(&volume) == *below {
                assert_eq!(
                    root_of(&shape(&volume)),
                    *root,
                    "step {step}: volume {ord} swapped in, its journal gone, its root not set"
                );
            }
        }
        if out.status.success() {
            break;
        }
        step += 1;
        assert!(step < 1000, "restore never finished");
    }
    assert!(step > 40, "too few steps ({step}) to be a meaningful test");
}

/// A tiny deterministic PRNG (xorshift) for the kill delays.
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

#[test]
fn sigkill_at_random_times_never_leaves_a_partial_snapshot() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = tmp.path().join("src");
    for ord in 0..2 {
        let volume = source.join(ord.to_string());
        for d in 0..20 {
            fs::create_dir_all(volume.join(format!("d{d}"))).expect("mkdir");
            for f in 0..40 {
                fs::write(
                    volume.join(format!("d{d}/f{f}")),
                    format!("{d}/{f}\n").repeat(50 + f),
                )
                .expect("write");
            }
        }
    }
    let target = tmp.path().join("backup");
    let app = app(&target);
    let mut seed = 0x5eed_u64;
    for round in 0..12 {
        // Touch some files so that each run copies something.
        fs::write(
            source.join(format!("0/d{}/f0", round % 20)),
            format!("round {round}"),
        )
        .expect("write");
        let mut child = common::child(&cli_args("backup", "--source", &source, &target))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        let delay = Duration::from_micros(next(&mut seed) % 150_000);
        let deadline = Instant::now() + delay;
        while Instant::now() < deadline {
            if child.try_wait().expect("wait").is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = child.kill(); // SIGKILL; fine if it already finished
        child.wait().expect("wait");
        all_snapshots_verify(&app);
    }
    hellostateful_mover::backup(&app, &backup_opts(&source)).expect("final backup");
    no_tmp_left(&app.dir());
    assert!(all_snapshots_verify(&app) >= 1);
}
