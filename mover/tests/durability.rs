//! What the crash tests cannot show (an aborted process leaves the page cache behind, so
//! a missing fsync goes unnoticed): every rename that publishes something comes after the
//! syncs that make what it publishes durable, and is made durable itself. The mover's
//! trace hook (`HELLOSTATEFUL_MOVER_TRACE`) records creations, fsyncs, syncfs and renames
//! in order.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::*;
use hellostateful_mover::TRACE_ENV;

#[test]
fn child() {
    child_main();
}

/// (operation, path) in order; a rename is `rename <from>` then `to <to>`.
fn traced(args: &[&str], trace: &Path) -> Vec<(String, PathBuf)> {
    let _ = fs::remove_file(trace);
    let out = run_child(args, &[(TRACE_ENV, trace.display().to_string())]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::read_to_string(trace)
        .expect("trace")
        .lines()
        .map(|line| {
            let (op, path) = line.split_once(' ').expect("op path");
            (op.to_owned(), PathBuf::from(path))
        })
        .collect()
}

fn position(
    ops: &[(String, PathBuf)],
    from: usize,
    test: impl Fn(&str, &Path) -> bool,
) -> Option<usize> {
    ops.iter()
        .skip(from)
        .position(|(op, path)| test(op, path))
        .map(|i| i + from)
}

fn last_before(
    ops: &[(String, PathBuf)],
    end: usize,
    test: impl Fn(&str, &Path) -> bool,
) -> Option<usize> {
    ops[..end].iter().rposition(|(op, path)| test(op, path))
}

#[test]
fn a_snapshot_is_on_disk_before_it_is_named_and_its_name_is_too() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 0);
    let target = tmp.path().join("backup");
    let app_dir = app(&target).dir();
    let ops = traced(
        &cli_args("backup", "--source", &source, &target),
        &tmp.path().join("trace"),
    );
    let is_tmp = |path: &Path| {
        path.strip_prefix(&app_dir).is_ok_and(|rel| {
            rel.iter()
                .next()
                .is_some_and(|first| first.to_string_lossy().starts_with(".tmp-"))
        })
    };
    let publish = position(&ops, 0, |op, path| {
        op == "rename" && is_tmp(path) && path.parent() == Some(&app_dir)
    })
    .expect("the snapshot is renamed into place");
    let last_write = last_before(&ops, publish, |op, path| {
        (op == "create" || op == "fsync") && is_tmp(path)
    })
    .expect("files written");
    assert!(
        position(&ops, last_write, |op, path| op == "syncfs" && is_tmp(path))
            .is_some_and(|sync| sync < publish),
        "no syncfs between the last write into the snapshot and its rename: {:?}",
        &ops[last_write..=publish]
    );
    assert!(
        position(&ops, publish, |op, path| op == "fsync-dir"
            && path == app_dir)
        .is_some(),
        "the rename into place is never made durable"
    );
}

#[test]
fn a_restore_is_on_disk_before_its_journal_commits_and_every_journal_step_is_durable() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 1);
    make_volume(&source.join("1"), 1);
    let target = tmp.path().join("backup");
    hellostateful_mover::backup(&app(&target), &backup_opts(&source)).expect("backup");
    let dest = volumes(tmp.path(), "dest", 5);
    make_volume(&dest.join("1"), 6);
    let ops = traced(
        &cli_args("restore", "--dest", &dest, &target),
        &tmp.path().join("trace"),
    );

    let volumes = [dest.join("0"), dest.join("1")];
    let journal_tmp = |v: &Path| v.join(".hellostateful-journal.tmp");
    let mut first_journals = Vec::new();
    for volume in &volumes {
        let staging = volume.join(".hellostateful-staging");
        let first_journal = position(&ops, 0, |op, path| {
            op == "rename" && path == journal_tmp(volume)
        })
        .expect("a journal");
        let last_staged = last_before(&ops, first_journal, |op, path| {
            op == "create" && path.starts_with(&staging)
        })
        .expect("files staged");
        assert!(
            position(&ops, last_staged, |op, path| op == "syncfs"
                && path == volume)
            .is_some_and(|sync| sync < first_journal),
            "{}: staging not synced before the journal",
            volume.display()
        );
        first_journals.push(first_journal);

        // Every journal is fsynced before it is renamed in, and the rename is made durable
        // before the volume's next move.
        let mut from = 0;
        while let Some(rename) = position(&ops, from, |op, path| {
            op == "rename" && path == journal_tmp(volume)
        }) {
            let previous = last_before(&ops, rename, |op, path| {
                op == "rename" && path == journal_tmp(volume)
            });
            assert!(
                last_before(&ops, rename, |op, path| op == "fsync"
                    && path == journal_tmp(volume))
                .is_some_and(|fsync| previous.is_none_or(|p| fsync > p)),
                "{}: journal renamed in without an fsync",
                volume.display()
            );
            let durable = position(&ops, rename, |op, path| op == "fsync-dir" && path == volume);
            let next_move = position(&ops, rename + 2, |op, path| {
                op == "rename" && path.parent() == Some(volume.as_path())
            });
            assert!(
                durable.is_some_and(|d| next_move.is_none_or(|n| d < n)),
                "{}: journal rename not made durable before the next move",
                volume.display()
            );
            from = rename + 1;
        }
    }
    // All or nothing: no live entry moves before every volume is journaled.
    let first_move = position(&ops, 0, |op, path| {
        op == "rename"
            && volumes.iter().any(|v| path.parent() == Some(v.as_path()))
            && !path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(".hellostateful-"))
    })
    .expect("live entries moved");
    assert!(
        first_journals.iter().all(|&j| j < first_move),
        "a live entry moved before every volume was prepared"
    );
}
