//! Helpers shared by the integration tests: building trees, describing them for
//! comparison, and running the mover in a child process (the test binary re-executed)
//! so it can be killed or crash without taking the test down.

#![allow(dead_code)] // each test file uses a different subset

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use hellostateful_mover::{App, BackupOptions, RestoreOptions, Selector};
use rustix::fs::{AtFlags, CWD, Timespec, Timestamps};

pub const NS: &str = "ns";
pub const NAME: &str = "app";

/// Env var carrying the child's mover arguments (JSON array).
pub const CHILD_ARGS: &str = "HELLOSTATEFUL_MOVER_TEST_CHILD";

/// One entry of a tree: (kind, mode, uid, gid, mtime ns, contents or symlink target).
pub type Node = (char, u32, u32, u32, i128, Vec<u8>);

/// What a tree looks like, by relative path ("" is the root).
pub type Shape = BTreeMap<PathBuf, Node>;

/// The top-level names the mover keeps in a volume for itself.
pub const MOVER_NAMES: [&str; 5] = [
    ".hellostateful-staging",
    ".hellostateful-old",
    ".hellostateful-journal",
    ".hellostateful-journal.tmp",
    ".hellostateful-lock",
];

/// Describes every entry under `root` (and `root` itself as ""), skipping the mover's
/// own top-level names.
pub fn shape(root: &Path) -> Shape {
    let mut out = Shape::new();
    let walk = walkdir::WalkDir::new(root)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| {
            !(e.depth() == 1 && MOVER_NAMES.contains(&e.file_name().to_string_lossy().as_ref()))
        });
    for entry in walk {
        let entry = entry.expect("walk");
        let rel = entry.path().strip_prefix(root).expect("prefix").to_owned();
        let md = entry.path().symlink_metadata().expect("lstat");
        let (kind, data) = if md.is_dir() {
            ('d', Vec::new())
        } else if md.file_type().is_symlink() {
            let target = fs::read_link(entry.path()).expect("readlink");
            ('l', target.into_os_string().into_encoded_bytes())
        } else {
            ('f', fs::read(entry.path()).expect("read"))
        };
        let mode = if kind == 'l' { 0 } else { md.mode() & 0o7777 };
        let mtime = md.mtime() as i128 * 1_000_000_000 + md.mtime_nsec() as i128;
        out.insert(rel, (kind, mode, md.uid(), md.gid(), mtime, data));
    }
    out
}

/// Names of the mover's reserved entries left at the top of a volume, but for its lock
/// file (kept, like the app directory's `.lock`).
pub fn leftovers(volume: &Path) -> Vec<String> {
    fs::read_dir(volume)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| MOVER_NAMES.contains(&n.as_str()) && n != ".hellostateful-lock")
        .collect()
}

pub fn set_mtime(path: &Path, secs: i64, nanos: i64) {
    let t = Timespec {
        tv_sec: secs,
        tv_nsec: nanos,
    };
    rustix::fs::utimensat(
        CWD,
        path,
        &Timestamps {
            last_access: t,
            last_modification: t,
        },
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .expect("utimensat");
}

/// Waits until the clock is clearly past every status change under `root`, so that a
/// backup taken now records its files as settled and the next one may link them (a file
/// changed within a second of a backup's start is always copied again).
pub fn settle(root: &Path) {
    let newest = walkdir::WalkDir::new(root)
        .into_iter()
        .map(|e| {
            let md = e.expect("walk").path().symlink_metadata().expect("lstat");
            std::time::UNIX_EPOCH
                + std::time::Duration::new(md.ctime() as u64, md.ctime_nsec() as u32)
        })
        .max()
        .expect("root itself");
    let settled = newest + std::time::Duration::from_millis(1100);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::SystemTime::now() < settled {
        assert!(
            std::time::Instant::now() < deadline,
            "the clock does not advance"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

pub fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A small but varied volume: nested dirs, an empty dir, empty/small/large files,
/// a symlink. `version` changes a few files and adds one.
pub fn make_volume(root: &Path, version: u8) {
    fs::create_dir_all(root.join("logs/old")).expect("mkdir");
    fs::create_dir_all(root.join("empty")).expect("mkdir");
    for i in 0..20 {
        let path = root.join(format!("logs/f{i}.txt"));
        fs::write(&path, format!("line {i}\n").repeat(i * 10)).expect("write");
        set_mtime(&path, 1_700_000_000 + i as i64, 5);
    }
    fs::write(root.join("logs/old/empty"), b"").expect("write");
    set_mtime(&root.join("logs/old/empty"), 1_700_000_000, 0);
    let big: Vec<u8> = (0..(2 << 20) + 7).map(|i| (i % 251) as u8).collect();
    fs::write(root.join("big.bin"), &big).expect("write");
    set_mtime(&root.join("big.bin"), 1_700_000_000, 0);
    if fs::symlink_metadata(root.join("link")).is_err() {
        std::os::unix::fs::symlink("logs/f1.txt", root.join("link")).expect("symlink");
    }
    change_volume(root, version);
}

/// What `version` changes in a volume made by [`make_volume`]: `stateful.log`,
/// `logs/f3.txt` (from version 1) and a new file.
pub fn change_volume(root: &Path, version: u8) {
    fs::write(root.join("stateful.log"), format!("version {version}\n")).expect("write");
    if version > 0 {
        fs::write(root.join(format!("new-in-{version}")), b"new").expect("write");
        fs::write(root.join("logs/f3.txt"), format!("changed {version}")).expect("write");
    }
}

pub fn app(target: &Path) -> App {
    App::new(target, NS, NAME).expect("app")
}

pub fn backup_opts(source: &Path) -> BackupOptions {
    BackupOptions {
        source: source.to_owned(),
        keep_last: None,
        lock_wait: std::time::Duration::from_secs(30),
        max_bytes: None,
        reread: false,
    }
}

pub fn restore_opts(dest: &Path, from: Selector) -> RestoreOptions {
    RestoreOptions {
        dest: dest.to_owned(),
        from,
        if_exists: false,
        lock_wait: std::time::Duration::from_secs(30),
        commit_note: None,
    }
}

/// A command that re-runs this test binary's `child` test, which runs the mover with
/// `args`. The test file must define `child` calling [`child_main`].
pub fn child(args: &[&str]) -> Command {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ARGS, serde_json::to_string(args).expect("json"));
    cmd
}

/// Body of each test file's `child` test: a no-op unless re-executed by [`child`].
pub fn child_main() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: hellostateful_mover::cli::MoverCommand,
    }
    let Ok(args) = std::env::var(CHILD_ARGS) else {
        return;
    };
    let args: Vec<String> = serde_json::from_str(&args).expect("child args");
    let cli = Cli::parse_from(std::iter::once("mover".to_owned()).chain(args));
    let code = hellostateful_mover::cli::run(cli.command);
    let permanent = hellostateful_mover::cli::PERMANENT_FAILURE;
    std::process::exit(if code == std::process::ExitCode::SUCCESS {
        0
    } else if code == std::process::ExitCode::from(permanent) {
        i32::from(permanent)
    } else {
        1
    });
}

/// The mover's command line for `verb` (`backup --source` or `restore --dest`) of the
/// test app.
pub fn cli_args<'a>(
    verb: &'a str,
    dir_flag: &'a str,
    dir: &'a Path,
    target: &'a Path,
) -> Vec<&'a str> {
    let mut args = vec![
        verb,
        dir_flag,
        dir.to_str().expect("utf8"),
        "--target",
        target.to_str().expect("utf8"),
        "--namespace",
        NS,
        "--name",
        NAME,
    ];
    if verb == "restore" {
        args.extend(["--from", "latest"]);
    }
    args
}

/// Runs a child to completion and returns its output.
pub fn run_child(args: &[&str], env: &[(&str, String)]) -> Output {
    let mut cmd = child(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("spawn child")
}

/// The JSON line a child printed (the test harness adds its own lines around it).
pub fn json_line(output: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .filter_map(|l| l.find(['{', '[']).map(|i| &l[i..]))
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON in {stdout}"))
}

/// Every complete snapshot verifies clean; returns how many there are.
pub fn all_snapshots_verify(app: &App) -> usize {
    let snapshots = hellostateful_mover::list(app).expect("list");
    for s in &snapshots {
        let id = Selector::Id(s.id.parse().expect("id"));
        let report = hellostateful_mover::verify(app, &id).expect("verify");
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }
    snapshots.len()
}

/// `<tmp>/<name>/0` made with [`make_volume`]; returns `<tmp>/<name>`.
pub fn volumes(tmp: &Path, name: &str, version: u8) -> PathBuf {
    let root = tmp.join(name);
    make_volume(&root.join("0"), version);
    root
}

/// A 1 MiB tmpfs mounted at `path`, unmounted when the result is dropped; `None` where
/// this process may not mount (not root): the caller's test says it skipped.
pub fn small_tmpfs(path: &Path) -> Option<Unmount<'_>> {
    Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(path)
        .status()
        .is_ok_and(|s| s.success())
        .then_some(Unmount(path))
}

/// Unmounts a test's mount when dropped, so a failing assertion leaves nothing mounted.
pub struct Unmount<'a>(pub &'a Path);

impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}
