//! Backup then restore gives back the identical tree; incremental backups hard-link
//! unchanged files.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::*;
use hellostateful_mover::{MANIFEST_FILE, Manifest, RestoreOutcome, Selector};
use proptest::prelude::*;

#[test]
fn child() {
    child_main();
}

/// One thing to create: under the `parent`-th directory made so far (modulo).
#[derive(Debug, Clone)]
enum Node {
    Dir { mode: u32 },
    File { len: usize, seed: u8, mode: u32 },
    Link { target: String },
}

#[derive(Debug, Clone)]
struct Op {
    parent: usize,
    name: String,
    node: Node,
    uid: u32,
    mtime: (i64, i64),
}

fn op() -> impl Strategy<Value = Op> {
    let node = prop_oneof![
        3 => prop::sample::select(vec![0o755u32, 0o700, 0o555, 0o1777]).prop_map(|mode| Node::Dir { mode }),
        6 => (
            prop_oneof![8 => 0usize..3000, 1 => (1usize << 20)..(3usize << 20)],
            any::<u8>(),
            prop::sample::select(vec![0o644u32, 0o600, 0o755, 0o400, 0o000, 0o4755]),
        )
            .prop_map(|(len, seed, mode)| Node::File { len, seed, mode }),
        1 => "[a-z./ ]{1,20}".prop_map(|target| Node::Link { target }),
    ];
    (
        any::<usize>(),
        // Spaces, unicode, newlines; never "." or ".." (the filter).
        "[a-zA-Z0-9 _.\\-\n\u{e9}\u{4e2d}\u{1f600}]{1,16}"
            .prop_filter("not . or ..", |n| n != "." && n != ".."),
        node,
        prop::sample::select(vec![0u32, 1234]),
        (0i64..2_000_000_000, 0i64..1_000_000_000),
    )
        .prop_map(|(parent, name, node, uid, mtime)| Op {
            parent,
            name,
            node,
            uid,
            mtime,
        })
}

/// Builds the tree; metadata (modes, mtimes) is applied children-first at the end.
fn build(root: &Path, ops: &[Op]) {
    fs::create_dir_all(root).expect("mkdir");
    let mut dirs: Vec<PathBuf> = vec![root.to_owned()];
    let mut made: Vec<(PathBuf, &Op)> = Vec::new();
    for op in ops {
        let path = dirs[op.parent % dirs.len()].join(&op.name);
        if path.symlink_metadata().is_ok() {
            continue;
        }
        match &op.node {
            Node::Dir { .. } => {
                fs::create_dir(&path).expect("mkdir");
                dirs.push(path.clone());
            }
            Node::File { len, seed, .. } => {
                let data: Vec<u8> = (0..*len)
                    .map(|i| (i as u8).wrapping_mul(31).wrapping_add(*seed))
                    .collect();
                fs::write(&path, data).expect("write");
            }
            Node::Link { target } => {
                std::os::unix::fs::symlink(target, &path).expect("symlink");
            }
        }
        made.push((path, op));
    }
    for (path, op) in made.iter().rev() {
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::lchown(path, Some(op.uid), Some(op.uid)).expect("chown");
        }
        match op.node {
            Node::Dir { mode } | Node::File { mode, .. } => chmod(path, mode),
            Node::Link { .. } => {}
        }
        set_mtime(path, op.mtime.0, op.mtime.1);
    }
    chmod(root, 0o750);
    set_mtime(root, 1_600_000_000, 42);
}

fn round_trip(ops: &[Op]) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = tmp.path().join("src");
    build(&source.join("0"), ops);
    let app = app(&tmp.path().join("backup"));
    let report = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("backup");
    assert_eq!(report.ordinals, vec![0]);

    // The destination volume has other content, which must be gone afterwards.
    let dest = tmp.path().join("dest");
    fs::create_dir_all(dest.join("0/stale/deeper")).expect("mkdir");
    fs::write(dest.join("0/stale/deeper/file"), b"old").expect("write");
    let outcome = hellostateful_mover::restore(&app, &restore_opts(&dest, Selector::Latest))
        .expect("restore");
    let RestoreOutcome::Restored(restored) = outcome else {
        panic!("not restored: {outcome:?}");
    };
    assert_eq!(restored.id, report.id);
    assert_eq!(restored.files, report.files);
    assert_eq!(shape(&dest.join("0")), shape(&source.join("0")));
    assert!(leftovers(&dest.join("0")).is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn backup_then_restore_gives_the_same_tree(ops in prop::collection::vec(op(), 0..60)) {
        round_trip(&ops);
    }
}

#[test]
fn second_backup_links_unchanged_files_and_copies_changed_ones() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 0);
    make_volume(&source.join("1"), 0);
    settle(&source);
    let app = app(&tmp.path().join("backup"));
    let first = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("first");
    assert_eq!(first.linked_files, 0);
    assert_eq!(first.new_bytes, first.bytes);

    change_volume(&source.join("0"), 1);
    let second = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("second");
    assert!(second.id > first.id, "{} then {}", first.id, second.id);
    let dir = app.dir();
    let ino = |id: &str, rel: &str| fs::metadata(dir.join(id).join(rel)).expect("stat").ino();
    // Unchanged: same inode in both snapshots.
    for rel in [
        "0/logs/f5.txt",
        "0/big.bin",
        "1/logs/f3.txt",
        "1/stateful.log",
    ] {
        assert_eq!(ino(&first.id, rel), ino(&second.id, rel), "{rel}");
    }
    // Changed (rewritten contents) and new files: copies.
    for rel in ["0/logs/f3.txt", "0/stateful.log"] {
        assert_ne!(ino(&first.id, rel), ino(&second.id, rel), "{rel}");
        assert_eq!(
            fs::read(dir.join(&second.id).join(rel)).expect("read"),
            fs::read(source.join(rel)).expect("read")
        );
    }
    assert!(dir.join(&second.id).join("0/new-in-1").exists());
    assert_eq!(second.files, first.files + 1);
    assert!(second.linked_files >= first.files - 2);
    assert!(second.new_bytes < 100, "{}", second.new_bytes);
    assert_eq!(all_snapshots_verify(&app), 2);

    // Restoring the first snapshot still gives the first version.
    let dest = volumes(tmp.path(), "dest", 7);
    let first_id = Selector::Id(first.id.parse().expect("id"));
    hellostateful_mover::restore(&app, &restore_opts(&dest, first_id)).expect("restore");
    let expected = tmp.path().join("expected");
    make_volume(&expected.join("0"), 0);
    let contents = |root: &Path| -> Vec<(PathBuf, Vec<u8>)> {
        shape(root).into_iter().map(|(p, n)| (p, n.5)).collect()
    };
    assert_eq!(contents(&dest.join("0")), contents(&expected.join("0")));
}

/// `--reread` trusts no unchanged-file check: every file is read and copied again (a file
/// written through mmap can change without its times moving), and the next backup links to
/// those fresh copies.
#[test]
fn a_reread_copies_even_unchanged_files_and_the_next_backup_links_to_them() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 0);
    settle(&source);
    let app = app(&tmp.path().join("backup"));
    let first = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("first");
    let reread_opts = hellostateful_mover::BackupOptions {
        reread: true,
        ..backup_opts(&source)
    };
    let reread = hellostateful_mover::backup(&app, &reread_opts).expect("reread");
    assert_eq!(reread.linked_files, 0, "{reread:?}");
    assert_eq!(reread.new_bytes, reread.bytes, "{reread:?}");
    let dir = app.dir();
    let ino = |id: &str, rel: &str| fs::metadata(dir.join(id).join(rel)).expect("stat").ino();
    assert_ne!(ino(&first.id, "0/big.bin"), ino(&reread.id, "0/big.bin"));
    let next = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("next");
    assert_eq!(next.linked_files, next.files, "{next:?}");
    assert_eq!(ino(&reread.id, "0/big.bin"), ino(&next.id, "0/big.bin"));
    assert_eq!(all_snapshots_verify(&app), 3);
}

/// More entries than the mover handles in one batch (4,096): files are copied, linked
/// and restored a batch at a time, the previous snapshot's entries are read alongside the
/// walk, and hard links whose first path lies in an earlier batch stay links.
#[test]
fn a_volume_of_several_batches_round_trips_and_links_through_the_streamed_entries() {
    const FILES: usize = 5_000;
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = tmp.path().join("src");
    let volume = source.join("0");
    for n in 0..FILES {
        let dir = volume.join(format!("d{:02}", n % 7));
        if n < 7 {
            fs::create_dir_all(&dir).expect("mkdir");
        }
        fs::write(dir.join(format!("f{n:05}")), n.to_string()).expect("write");
    }
    // First paths early in the walk (d00), second paths late (d06): other batches.
    for n in [0, 7, 14] {
        let first = volume.join(format!("d00/f{n:05}"));
        fs::hard_link(&first, volume.join(format!("d06/zz-link-{n}"))).expect("link");
    }
    settle(&source);
    let app = app(&tmp.path().join("backup"));
    let first = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("first");
    assert_eq!(first.files as usize, FILES + 3);

    // Every 100th file changes (in every batch); the rest must be linked.
    for n in (0..FILES).step_by(100) {
        fs::write(
            volume.join(format!("d{:02}/f{n:05}", n % 7)),
            format!("changed {n}"),
        )
        .expect("rewrite");
    }
    let second = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("second");
    // Second paths are links within the snapshot, not counted as linked from the last.
    assert_eq!(
        second.linked_files as usize,
        FILES - FILES / 100,
        "{second:?}"
    );
    let snapshot = app.dir().join(&second.id).join("0");
    let ino = |rel: &str| fs::metadata(snapshot.join(rel)).expect("stat").ino();
    for n in [0, 7, 14] {
        assert_eq!(
            ino(&format!("d00/f{n:05}")),
            ino(&format!("d06/zz-link-{n}"))
        );
    }
    assert_eq!(all_snapshots_verify(&app), 2);

    let dest = volumes(tmp.path(), "dest", 3);
    let latest = hellostateful_mover::restore(&app, &restore_opts(&dest, Selector::Latest));
    assert!(
        matches!(latest, Ok(RestoreOutcome::Restored(_))),
        "{latest:?}"
    );
    let mut restored = shape(&dest.join("0"));
    let mut live = shape(&volume);
    // The volume roots' mtimes differ (staging is made and removed in the destination).
    restored.remove(Path::new(""));
    live.remove(Path::new(""));
    assert!(
        restored == live,
        "the restored tree differs from the live one"
    );
    let restored_ino = |rel: &str| fs::metadata(dest.join("0").join(rel)).expect("stat").ino();
    assert_eq!(restored_ino("d00/f00007"), restored_ino("d06/zz-link-7"));
}

/// Big files are restored with direct reads of the snapshot: sizes that are not whole
/// blocks or chunks come back exact.
#[test]
fn big_files_of_any_size_restore_exactly() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = tmp.path().join("src");
    let volume = source.join("0");
    fs::create_dir_all(&volume).expect("mkdir");
    const MIB: usize = 1 << 20;
    for (name, len) in [
        ("chunks", 5 * MIB),
        ("tail", 4 * MIB + 4099),
        ("block-tail", 6 * MIB + 4096),
    ] {
        let data: Vec<u8> = (0..len)
            .map(|i| (i % 253) as u8 ^ name.len() as u8)
            .collect();
        fs::write(volume.join(name), data).expect("write");
    }
    let app = app(&tmp.path().join("backup"));
    hellostateful_mover::backup(&app, &backup_opts(&source)).expect("backup");
    let dest = volumes(tmp.path(), "dest", 3);
    let restored = hellostateful_mover::restore(&app, &restore_opts(&dest, Selector::Latest));
    assert!(
        matches!(restored, Ok(RestoreOutcome::Restored(_))),
        "{restored:?}"
    );
    for name in ["chunks", "tail", "block-tail"] {
        assert!(
            fs::read(dest.join("0").join(name)).expect("read")
                == fs::read(volume.join(name)).expect("read"),
            "{name} differs"
        );
    }
}

/// The snapshot the previous version wrote (format 2: entries inline in the manifest)
/// is still the base of the next backup after an upgrade.
#[test]
fn the_first_backup_after_an_upgrade_links_to_a_snapshot_of_format_2() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 0);
    settle(&source);
    let app = app(&tmp.path().join("backup"));
    let first = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("first");
    let snapshot = app.dir().join(&first.id);
    let path = snapshot.join(MANIFEST_FILE);
    let mut manifest: Manifest =
        serde_json::from_slice(&fs::read(&path).expect("read")).expect("parse");
    for replica in &mut manifest.replicas {
        let entries = snapshot.join(replica.entry_file_name());
        replica.entries = fs::read_to_string(&entries)
            .expect("read")
            .lines()
            .map(|line| serde_json::from_str(line).expect("parse"))
            .collect();
        replica.entry_file = None;
        fs::remove_file(entries).expect("remove");
    }
    manifest.format = 2;
    manifest.checksum = String::new();
    let digest = blake3::hash(&serde_json::to_vec(&manifest).expect("json"));
    manifest.checksum = digest.to_hex().to_string();
    fs::write(&path, serde_json::to_vec_pretty(&manifest).expect("json")).expect("write");
    assert_eq!(all_snapshots_verify(&app), 1);

    let second = hellostateful_mover::backup(&app, &backup_opts(&source)).expect("second");
    assert_eq!(second.linked_files, first.files, "{second:?}");
    assert_eq!(all_snapshots_verify(&app), 2);
}

#[test]
fn cli_prints_one_json_line_and_lists_newest_first() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = volumes(tmp.path(), "src", 0);
    fs::write(source.join("README"), b"not a volume").expect("write");
    let target = tmp.path().join("backup");
    let target = target.to_str().expect("utf8");
    let source = source.to_str().expect("utf8");
    let log = tmp.path().join("termination-log");
    let common = ["--target", target, "--namespace", NS, "--name", NAME];
    let mut ids = Vec::new();
    for _ in 0..3 {
        let mut args = vec!["backup", "--source", source, "--keep-last", "2"];
        args.extend(common);
        args.extend(["--termination-log", log.to_str().expect("utf8")]);
        let out = run_child(&args, &[]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json = json_line(&out);
        for key in [
            "id",
            "time",
            "bytes",
            "files",
            "newBytes",
            "linkedFiles",
            "durationMs",
            "ordinals",
            "pruned",
        ] {
            assert!(json.get(key).is_some(), "{key} missing in {json}");
        }
        assert_eq!(json["ordinals"], serde_json::json!([0]));
        let logged: serde_json::Value =
            serde_json::from_slice(&fs::read(&log).expect("log")).expect("json");
        assert_eq!(logged, json);
        assert!(String::from_utf8_lossy(&out.stderr).contains("README"));
        ids.push(json["id"].as_str().expect("id").to_owned());
    }
    let mut args = vec!["backups", "--json"];
    args.extend(common);
    let listed = json_line(&run_child(&args, &[]));
    let listed: Vec<&str> = listed
        .as_array()
        .expect("array")
        .iter()
        .map(|s| s["id"].as_str().expect("id"))
        .collect();
    // --keep-last 2: the oldest was pruned; newest first.
    assert_eq!(listed, vec![ids[2].as_str(), ids[1].as_str()]);

    let mut args = vec!["restore", "--dest", source, "--from", "latest"];
    args.extend(common);
    let out = run_child(&args, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = json_line(&out);
    assert_eq!(json["restored"], true);
    assert_eq!(json["id"], ids[2].as_str());

    let empty = tmp.path().join("nothing");
    let mut args = vec![
        "restore",
        "--dest",
        source,
        "--from",
        "latest",
        "--if-exists",
        "--target",
        empty.to_str().expect("utf8"),
    ];
    args.extend(&common[2..]);
    let out = run_child(&args, &[]);
    assert!(out.status.success());
    assert_eq!(
        json_line(&out),
        serde_json::json!({"restored": false, "reason": "NoBackup"})
    );
}
