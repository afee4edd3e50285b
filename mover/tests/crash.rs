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

#[test]
fn restore_killed_at_every_step_is_finished_by_the_next_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 1);
    make_volume(&source.join("1"), 1);
    let target = tmp.path().join("backup");
    let app = app(&target);
    hellostateful_mover::backup(&app, &backup_opts(&source)).expect("backup");
    let new = [shape(&source.join("0")), shape(&source.join("1"))];

    let dest = tmp.path().join("dest");
    let old_tree = tmp.path().join("old");
    make_volume(&old_tree.join("0"), 5);
    make_volume(&old_tree.join("1"), 6);
    fs::write(old_tree.join("0/only-old"), b"x").expect("write");
    let old = [shape(&old_tree.join("0")), shape(&old_tree.join("1"))];
    let reset = || {
        let _ = fs::remove_dir_all(&dest);
        for ord in ["0", "1"] {
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
    let volume_is = |ord: usize, want: &[common::Shape; 2]| {
        let mut got = shape(&dest.join(ord.to_string()));
        got.remove(Path::new("")); // the root's own mtime changes as entries move
        let mut want = want[ord].clone();
        want.remove(Path::new(""));
        got == want
    };

    let mut step = 1;
    loop {
        reset();
        let restore = cli_args("restore", "--dest", &dest, &target);
        let out = run_child(&restore, &[(FAULT_ENV, step.to_string())]);
        if out.status.success() {
            break;
        }
        // Without a journal a volume must still be entirely old (a staging directory may
        // be left); with one it may be mid-swap until recovered.
        for ord in 0..2 {
            let volume = dest.join(ord.to_string());
            if !volume.join(".hellostateful-journal").exists() {
                assert!(
                    volume_is(ord, &old) || volume_is(ord, &new),
                    "step {step}: ordinal {ord} mixed without a journal"
                );
            }
        }
        // Alternate how recovery happens: a new restore, or a backup of the same volumes
        // (which must finish the swap before reading them).
        let done = if step % 2 == 0 {
            run_child(&restore, &[])
        } else {
            run_child(
                &cli_args("backup", "--source", &dest, &tmp.path().join("other")),
                &[],
            )
        };
        assert!(
            done.status.success(),
            "step {step}: {}",
            String::from_utf8_lossy(&done.stderr)
        );
        for ord in 0..2 {
            let entirely_new = volume_is(ord, &new);
            assert!(
                entirely_new || volume_is(ord, &old),
                "step {step}: ordinal {ord} is a mix after recovery"
            );
            if step % 2 == 0 {
                assert!(entirely_new, "step {step}: a completed restore must be new");
            }
            assert!(
                leftovers(&dest.join(ord.to_string())).is_empty(),
                "step {step}"
            );
        }
        step += 1;
        assert!(step < 1000, "restore never finished");
    }
    assert!(step > 40, "too few steps ({step}) to be a meaningful test");
    for ord in 0..2 {
        assert!(volume_is(ord, &new));
    }
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
