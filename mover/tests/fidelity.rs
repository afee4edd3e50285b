//! What `rsync -aHSX` and restic keep, a backup and restore keep too: names of any
//! length a filesystem takes, the app's own names that look like the mover's, sparse
//! files, hard links, extended attributes and ACLs.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::*;
use hellostateful_mover::{RestoreOutcome, Selector};

#[test]
fn child() {
    child_main();
}

/// Backs up `source` (ordinal volumes), restores into fresh volumes, returns their root.
fn round_trip(tmp: &Path, source: &Path) -> PathBuf {
    let app = app(&tmp.join("backup"));
    hellostateful_mover::backup(&app, &backup_opts(source)).expect("backup");
    assert_eq!(all_snapshots_verify(&app), 1);
    let dest = tmp.join("dest");
    fs::create_dir_all(dest.join("0")).expect("mkdir");
    let outcome = hellostateful_mover::restore(&app, &restore_opts(&dest, Selector::Latest))
        .expect("restore");
    assert!(matches!(outcome, RestoreOutcome::Restored(_)));
    dest
}

#[test]
fn the_apps_names_like_the_movers_and_paths_near_path_max_survive() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = tmp.path().join("src");
    let volume = source.join("0");
    fs::create_dir_all(volume.join(".hellostateful-cache")).expect("mkdir");
    fs::write(volume.join(".hellostateful-notes"), b"mine").expect("write");
    fs::write(volume.join(".hellostateful-cache/x"), b"mine too").expect("write");
    // 15 directories of 255 bytes and a file: a relative path of about 3,900 bytes, whose
    // absolute path in the backup target is longer than PATH_MAX (4096).
    let mut deep = volume.clone();
    for i in 0..15 {
        deep.push(
            format!("{i:x}")
                .repeat(255)
                .chars()
                .take(255)
                .collect::<String>(),
        );
    }
    fs::create_dir_all(&deep).expect("deep dirs");
    let name = "f".repeat(200);
    fs::write(deep.join(&name), b"deep").expect("deep file");
    let rel_len = deep
        .join(&name)
        .strip_prefix(&volume)
        .expect("rel")
        .as_os_str()
        .len();
    assert!(rel_len > 3800, "{rel_len}");

    let dest = round_trip(tmp.path(), &source);
    assert!(
        shape(&dest.join("0")) == shape(&volume),
        "not the same tree"
    );
    assert_eq!(
        fs::read(dest.join("0/.hellostateful-notes")).expect("read"),
        b"mine"
    );
    assert!(
        dest.join("0")
            .join(deep.strip_prefix(&volume).expect("rel"))
            .join(&name)
            .metadata()
            .is_ok_and(|md| md.size() == 4)
    );
}

/// Bytes allocated to a file (holes take none).
fn allocated(path: &Path) -> u64 {
    fs::metadata(path).expect("stat").blocks() * 512
}

#[test]
fn holes_stay_holes_in_the_snapshot_and_on_restore() {
    use std::os::unix::fs::FileExt;
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = tmp.path().join("src");
    let volume = source.join("0");
    fs::create_dir_all(&volume).expect("mkdir");
    // 64 MiB with 8 KiB of data at its start and at 32 MiB, then a trailing hole; and a
    // small one (512 KiB, data at 256 KiB only).
    let big = fs::File::create(volume.join("disk.img")).expect("create");
    big.write_all_at(&[1u8; 8192], 0).expect("write");
    big.write_all_at(&[2u8; 8192], 32 << 20).expect("write");
    big.set_len(64 << 20).expect("truncate");
    let small = fs::File::create(volume.join("small.db")).expect("create");
    small.write_all_at(&[3u8; 4096], 256 << 10).expect("write");
    small.set_len(512 << 10).expect("truncate");
    drop((big, small));
    if allocated(&volume.join("disk.img")) >= 1 << 20 {
        eprintln!("SKIPPED: this filesystem does not make holes");
        return;
    }

    let dest = round_trip(tmp.path(), &source);
    let app_dir = app(&tmp.path().join("backup")).dir();
    let id = hellostateful_mover::list(&app(&tmp.path().join("backup"))).expect("list")[0]
        .id
        .clone();
    for name in ["disk.img", "small.db"] {
        let live = volume.join(name);
        for copy in [
            app_dir.join(&id).join("0").join(name),
            dest.join("0").join(name),
        ] {
            assert_eq!(
                fs::read(&copy).expect("read"),
                fs::read(&live).expect("read")
            );
            assert!(
                allocated(&copy) <= allocated(&live) + 8192,
                "{}: {} bytes allocated, the original {}",
                copy.display(),
                allocated(&copy),
                allocated(&live)
            );
        }
    }
}

#[test]
fn hard_links_within_a_volume_stay_links_in_the_snapshot_and_on_restore() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = tmp.path().join("src");
    let volume = source.join("0");
    fs::create_dir_all(volume.join("dir/deeper")).expect("mkdir");
    fs::write(volume.join("a"), b"shared by two").expect("write");
    fs::hard_link(volume.join("a"), volume.join("dir/b")).expect("link");
    fs::write(volume.join("c"), vec![7u8; 3 << 20]).expect("write");
    fs::hard_link(volume.join("c"), volume.join("dir/c2")).expect("link");
    fs::hard_link(volume.join("c"), volume.join("dir/deeper/c3")).expect("link");
    fs::write(volume.join("alone"), b"one link").expect("write");

    let dest = round_trip(tmp.path(), &source);
    let backup = app(&tmp.path().join("backup"));
    let id = hellostateful_mover::list(&backup).expect("list")[0]
        .id
        .clone();
    let snapshot = backup.dir().join(&id).join("0");
    let ino = |root: &Path, rel: &str| fs::metadata(root.join(rel)).expect("stat").ino();
    for root in [&snapshot, &dest.join("0")] {
        assert_eq!(ino(root, "a"), ino(root, "dir/b"), "{}", root.display());
        assert_eq!(ino(root, "c"), ino(root, "dir/c2"));
        assert_eq!(ino(root, "c"), ino(root, "dir/deeper/c3"));
        assert_ne!(ino(root, "a"), ino(root, "c"));
        assert_eq!(
            fs::read(root.join("dir/b")).expect("read"),
            b"shared by two"
        );
    }
    assert!(
        shape(&dest.join("0")) == shape(&volume),
        "not the same tree"
    );
    // The 3 MiB file was copied once.
    let report = hellostateful_mover::backup(&backup, &backup_opts(&source)).expect("again");
    assert_eq!(report.files, 6);
}

fn xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let mut value = vec![0u8; 4096];
    let len = rustix::fs::getxattr(path, name, &mut value[..]).ok()?;
    value.truncate(len);
    Some(value)
}

/// A POSIX ACL as the kernel stores it: version 2, then (tag, perm, id) entries.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut bytes = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        bytes.extend(tag.to_le_bytes());
        bytes.extend(perm.to_le_bytes());
        bytes.extend(id.to_le_bytes());
    }
    bytes
}

#[test]
fn extended_attributes_and_acls_come_back() {
    use rustix::fs::XattrFlags;
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = tmp.path().join("src");
    let volume = source.join("0");
    fs::create_dir_all(volume.join("shared")).expect("mkdir");
    fs::write(volume.join("doc"), b"with attributes").expect("write");
    const ANY: u32 = u32::MAX;
    // user::rw-, user:1234:r--, group::r--, mask::r--, other::---
    let access = acl(&[
        (0x01, 6, ANY),
        (0x02, 4, 1234),
        (0x04, 4, ANY),
        (0x10, 4, ANY),
        (0x20, 0, ANY),
    ]);
    // default: user::rwx, group::r-x, other::---
    let default = acl(&[(0x01, 7, ANY), (0x04, 5, ANY), (0x20, 0, ANY)]);
    let set = |path: &Path, name: &str, value: &[u8]| {
        rustix::fs::setxattr(path, name, value, XattrFlags::empty())
    };
    if set(&volume.join("doc"), "user.origin", b"scanner-7").is_err() {
        eprintln!("SKIPPED: this filesystem has no user extended attributes");
        return;
    }
    set(&volume.join("shared"), "user.team", b"\x00binary\xff").expect("dir xattr");
    set(&volume.join("doc"), "system.posix_acl_access", &access).expect("acl");
    set(&volume.join("shared"), "system.posix_acl_default", &default).expect("default acl");
    // The volume root's own: a default ACL there governs every file the app creates.
    set(&volume, "user.volume", b"root").expect("root xattr");
    set(&volume, "system.posix_acl_default", &default).expect("root default acl");
    let mode_with_acl = fs::metadata(volume.join("doc")).expect("stat").mode() & 0o777;

    let dest = round_trip(tmp.path(), &source);
    let backup = app(&tmp.path().join("backup"));
    let id = hellostateful_mover::list(&backup).expect("list")[0]
        .id
        .clone();
    for root in [backup.dir().join(&id).join("0"), dest.join("0")] {
        for (rel, name) in [
            ("doc", "user.origin"),
            ("doc", "system.posix_acl_access"),
            ("shared", "user.team"),
            ("shared", "system.posix_acl_default"),
            ("", "user.volume"),
            ("", "system.posix_acl_default"),
        ] {
            assert_eq!(
                xattr(&root.join(rel), name),
                xattr(&volume.join(rel), name),
                "{name} of {}",
                root.join(rel).display()
            );
        }
    }
    assert_eq!(
        fs::metadata(dest.join("0/doc")).expect("stat").mode() & 0o777,
        mode_with_acl
    );
}
