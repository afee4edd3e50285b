//! The mover's subcommands, flattened into the reconciler binary's command line and run
//! in Kubernetes Jobs. stdout carries one line of JSON (or the `backups` table), stderr
//! carries warnings and `error: ...` with the full cause chain; any failure exits 1.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use crate::catalog::SnapshotInfo;
use crate::error::{MoverError, Result};
use crate::names::{App, BackupId, Selector};
use crate::objstore::{self, PartSet, Store, StoreConfig};
use crate::{BackupOptions, RestoreOptions};

/// The data-mover subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum MoverCommand {
    /// Back up every replica volume into a new snapshot.
    #[command(
        long_about = "Back up every replica volume (the ordinal subdirectories of \
        --source) into a new snapshot <target>/<namespace>/<name>/<id>/. Files unchanged since \
        the previous snapshot are hard links to it. Prints one line of JSON: \
        {\"id\",\"time\",\"bytes\",\"files\",\"newBytes\",\"linkedFiles\",\"durationMs\",\
        \"ordinals\",\"pruned\"}, and with --keep-last \"snapshots\" (how many are left) and \
        \"oldest\" (the oldest left's id).\n\nExample:\n  hellostateful-reconciler backup --namespace \
        default --name hello --source /data --target /backup --keep-last 7 \
        --termination-log /dev/termination-log"
    )]
    Backup(BackupArgs),
    /// Seal the parts of a backup made by several pods into one snapshot.
    #[command(
        long_about = "When an app's replicas keep their volumes on different nodes, each \
        volume is backed up by a pod of its own (`backup --part-of SET`, object stores \
        only) into a part; this seals the parts of SET, which must hold ordinals \
        0..--replicas once each, into one snapshot, then applies --keep-last. Prints what \
        `backup` prints, for the whole snapshot.\n\nExample:\n  hellostateful-reconciler \
        seal --namespace default --name hello --store-endpoint https://s3.example.com \
        --store-bucket backups --part-of backup-hello-1a2b3c4d --replicas 3 --keep-last 7"
    )]
    Seal(SealArgs),
    /// Restore a snapshot into the replica volumes.
    #[command(
        long_about = "Verify a snapshot, copy it into a staging directory on each \
        volume under --dest, and swap it in with a crash-safe journal: a restore killed at \
        any point and run again (or followed by a backup) leaves each volume entirely old \
        or entirely new. Prints {\"restored\":true,\"id\",\"bytes\",\"files\",\"durationMs\",\
        \"ordinals\"}, or with --if-exists and no backup {\"restored\":false,\"reason\":\
        \"NoBackup\"}.\n\nExample:\n  hellostateful-reconciler restore --namespace default \
        --name hello --dest /data --from latest --if-exists"
    )]
    Restore(RestoreArgs),
    /// Commit a restore made by several pods, once each staged its volumes.
    #[command(
        long_about = "When an app's replicas keep their volumes on different nodes, each \
        volume is restored by a pod of its own in two steps: `restore --part-of SET --from \
        ID` stages the backup beside the live data, and, once this has committed SET, \
        `restore --part-of SET --swap` swaps it in. This commits SET only if every ordinal of \
        0..--replicas staged the same backup; from then on every volume of it is swapped in \
        (a swap interrupted anywhere is finished by the next restore of that volume), \
        and before, none is. Refused, it removes the set's records: `restore --part-of SET \
        --undo` then removes each volume's staged copy. Object stores only. --name is the \
        app restored into, also when its parts restore another app's backups (restore \
        --into-app). Prints what `restore` prints, for every volume.\n\nExample:\n  hellostateful-reconciler commit-restore --namespace default \
        --name hello --store-endpoint https://s3.example.com --store-bucket backups \
        --part-of restore-hello-1a2b3c4d --replicas 3"
    )]
    CommitRestore(CommitRestoreArgs),
    /// List the complete snapshots of an app, newest first.
    #[command(
        long_about = "List the complete snapshots of an app, newest first: id, time, \
        size, files and state. With --json prints a JSON array of {\"id\",\"time\",\"bytes\",\
        \"files\",\"newBytes\",\"durationMs\",\"ordinals\"}.\n\nExample:\n  \
        hellostateful-reconciler backups --namespace default --name hello --json"
    )]
    Backups(ListArgs),
    /// Recompute every checksum of a snapshot.
    #[command(
        long_about = "Recompute the checksum of every file of a snapshot and compare \
        with its manifest. Prints each bad, missing or unexpected file and exits 1 if there \
        is any.\n\nExample:\n  hellostateful-reconciler verify --namespace default --name \
        hello latest"
    )]
    Verify(VerifyArgs),
    /// Print one snapshot's manifest figures.
    #[command(
        long_about = "Print one line of JSON describing a snapshot: {\"id\",\"app\",\
        \"time\",\"endTime\",\"durationMs\",\"bytes\",\"files\",\"newBytes\",\
        \"linkedFiles\",\"inconsistentFiles\",\"ordinals\",\"format\",\
        \"manifestChecksum\",\"newest\"}. Its manifest's checksum and tree are checked; \
        `verify` checks the files.\n\nExample:\n  hellostateful-reconciler describe \
        --namespace default --name hello latest"
    )]
    Describe(DescribeArgs),
    /// Delete one snapshot.
    #[command(
        long_about = "Delete one complete snapshot, holding the app's lock (waiting up to \
        --lock-timeout for a running backup, restore or prune). The newest complete \
        snapshot is refused unless --force. Prints {\"deleted\":id,\"kept\":[ids]}.\n\n\
        Example:\n  hellostateful-reconciler delete --namespace default --name hello \
        20261129T150102Z"
    )]
    Delete(DeleteArgs),
    /// Delete old snapshots, keeping the newest N.
    #[command(
        long_about = "Delete complete snapshots older than the newest N (N >= 1: the \
        newest good snapshot is never deleted). If a backup, restore or prune of the app is \
        running, deletes nothing, says so on stderr and exits 0 with \"busy\":true. Prints \
        {\"pruned\":[ids],\"kept\":[ids],\"busy\":false}.\n\nExample:\n  \
        hellostateful-reconciler prune --namespace default --name hello --keep-last 7"
    )]
    Prune(PruneArgs),
    /// Empty every replica volume (for a deleted app).
    #[command(
        long_about = "Remove everything inside each replica volume (the ordinal \
        subdirectories of --dest), keeping the volumes themselves (mount points), so that a \
        deleted app's data does not survive for the next app of the same name. Symlinks are \
        removed as links, never followed. Prints {\"wiped\":[ordinals],\"entries\":N}, N \
        being the files, directories and symlinks removed.\n\nExample:\n  \
        hellostateful-reconciler wipe --dest /data --termination-log /dev/termination-log"
    )]
    Wipe(WipeArgs),
    /// Give every replica volume's root directory to the app's user.
    #[command(
        long_about = "Give the root directory of each replica volume (the ordinal \
        subdirectories of --dest) to --uid and --gid, with --mode, so that an app running as \
        that non-root user can write into volumes whose type takes no fsGroup (static \
        hostPath volumes). The files inside keep their owners. Idempotent. Prints \
        {\"prepared\":[ordinals],\"owner\":\"uid:gid\",\"mode\":\"octal\"}.\n\nExample:\n  \
        hellostateful-reconciler prepare --dest /data --uid 1000 --gid 2000 --mode 2770"
    )]
    Prepare(PrepareArgs),
    /// Delete every backup of an app.
    #[command(
        long_about = "Delete every snapshot of an app, complete or incomplete, and \
        everything else in <target>/<namespace>/<name>/ except its lock file. Takes the \
        app's lock first (waiting up to --lock-timeout for a running backup, restore or \
        prune) and never follows a symlink. Prints {\"purged\":[ids],\"entries\":N}, N \
        being the files, directories and symlinks removed.\n\nExample:\n  \
        hellostateful-reconciler purge --target /backup --namespace default --name hello"
    )]
    Purge(PurgeArgs),
}

/// Which app, and where its backups live.
#[derive(clap::Args, Debug, Clone)]
pub struct AppArgs {
    /// Backup root directory; snapshots go to <DIR>/<namespace>/<name>/<id>/
    #[arg(long, value_name = "DIR", default_value = "/backup")]
    pub target: PathBuf,
    /// Namespace of the app (a DNS label)
    #[arg(long, value_name = "NS")]
    pub namespace: String,
    /// Name of the app (a DNS subdomain)
    #[arg(long, value_name = "NAME")]
    pub name: String,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub store: StoreArgs,
}

/// An S3-compatible object store as the backup location, instead of `--target`. The
/// keys are read from the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`),
/// never from the command line, which other users of the node can read; so is the PEM of a
/// private CA that signed an https endpoint's certificate (`HELLOSTATEFUL_STORE_CA`).
#[derive(clap::Args, Debug, Clone)]
pub struct StoreArgs {
    /// Keep backups in the object store at this S3 endpoint (https://host[:port]) instead
    /// of --target; objects go below <bucket>/<prefix>/<namespace>/<name>/
    #[arg(long, value_name = "URL", requires = "store_bucket")]
    pub store_endpoint: Option<String>,
    /// The object store's bucket
    #[arg(long, value_name = "BUCKET", requires = "store_endpoint")]
    pub store_bucket: Option<String>,
    /// Key prefix inside the bucket
    #[arg(long, value_name = "PREFIX", default_value = "")]
    pub store_prefix: String,
    /// Region to sign requests for
    #[arg(long, value_name = "REGION", default_value = "us-east-1")]
    pub store_region: String,
    /// Allow a plain-HTTP endpoint
    #[arg(long)]
    pub store_insecure: bool,
}

/// Where an app's backups live, as the command line says.
enum Location {
    Dir(App),
    Store(Box<Store>),
}

impl AppArgs {
    fn location(&self) -> Result<Location> {
        self.location_of(&self.name)
    }

    /// The place of app `name` of the same namespace, in the same target.
    fn location_of(&self, name: &str) -> Result<Location> {
        let (Some(endpoint), Some(bucket)) = (&self.store.store_endpoint, &self.store.store_bucket)
        else {
            return Ok(Location::Dir(App::new(
                &self.target,
                &self.namespace,
                name,
            )?));
        };
        let config = StoreConfig {
            endpoint: endpoint.clone(),
            bucket: bucket.clone(),
            prefix: self.store.store_prefix.clone(),
            region: self.store.store_region.clone(),
            insecure: self.store.store_insecure,
            access_key_id: std::env::var(objstore::ACCESS_KEY_ENV).unwrap_or_default(),
            secret_access_key: std::env::var(objstore::SECRET_KEY_ENV).unwrap_or_default(),
            ca_pem: std::env::var(objstore::CA_ENV)
                .ok()
                .filter(|pem| !pem.trim().is_empty()),
        };
        let store = Store::open(&config, &self.namespace, name)?;
        Ok(Location::Store(Box::new(store)))
    }
}

/// Arguments of `backup`.
#[derive(clap::Args, Debug, Clone)]
pub struct BackupArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub app: AppArgs,
    /// Directory holding one subdirectory (mounted volume) per replica ordinal: 0, 1, ...
    #[arg(long, value_name = "DIR", default_value = "/data")]
    pub source: PathBuf,
    /// After success, delete snapshots older than the newest N (N >= 1)
    #[arg(long, value_name = "N")]
    pub keep_last: Option<u32>,
    /// Also write the JSON result to this file (Kubernetes: /dev/termination-log); on
    /// failure the error message is written instead
    #[arg(long, value_name = "PATH")]
    pub termination_log: Option<PathBuf>,
    /// Seconds to wait for another backup, restore or prune of the app to finish
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub lock_timeout: u64,
    /// At most this many bytes in the app's backup directory (a node directory) once the
    /// new snapshot is in it, counting all of its oldest snapshot and what each later one
    /// copied: a backup that would pass it stops, fails and leaves the earlier ones as they
    /// were
    #[arg(long, value_name = "BYTES", conflicts_with = "part_of")]
    pub max_bytes: Option<u64>,
    /// Back up the volumes under --source as a part of the snapshot that `seal --part-of
    /// SET` makes (object stores only); retention waits for the seal
    #[arg(long, value_name = "SET", conflicts_with = "keep_last")]
    pub part_of: Option<String>,
    /// Read every file again rather than link or reuse those whose size, times, owner and
    /// inode are unchanged since the previous snapshot (a file written through mmap can
    /// change without its times moving; as restic's --force)
    #[arg(long)]
    pub reread: bool,
}

/// Arguments of `seal`.
#[derive(clap::Args, Debug, Clone)]
pub struct SealArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub app: AppArgs,
    /// The set whose parts to seal (as given to `backup --part-of`)
    #[arg(long, value_name = "SET")]
    pub part_of: String,
    /// How many replicas the snapshot holds: the parts must cover ordinals 0..N
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub replicas: u32,
    /// After success, delete snapshots older than the newest N (N >= 1)
    #[arg(long, value_name = "N")]
    pub keep_last: Option<u32>,
    /// Also write the JSON result to this file (Kubernetes: /dev/termination-log); on
    /// failure the error message is written instead
    #[arg(long, value_name = "PATH")]
    pub termination_log: Option<PathBuf>,
    /// Seconds to wait for a collection of the app's unreferenced contents to finish
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub lock_timeout: u64,
}

/// Arguments of `restore`.
#[derive(clap::Args, Debug, Clone)]
pub struct RestoreArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub app: AppArgs,
    /// Directory holding one subdirectory (mounted volume) per replica ordinal: 0, 1, ...
    #[arg(long, value_name = "DIR", default_value = "/data")]
    pub dest: PathBuf,
    /// The snapshot to restore: a backup id such as 20261129T150102Z, or "latest"
    #[arg(long, value_name = "ID|latest", required_unless_present_any = ["swap", "undo"])]
    pub from: Option<String>,
    /// If the app has no complete backup at all, succeed without restoring anything
    #[arg(long)]
    pub if_exists: bool,
    /// Only stage the snapshot on the volumes under --dest, as a part of the restore that
    /// `commit-restore --part-of SET` commits (object stores only)
    #[arg(long, value_name = "SET")]
    pub part_of: Option<String>,
    /// Swap in what `--part-of SET` staged, once SET was committed
    #[arg(long, requires = "part_of", conflicts_with_all = ["from", "if_exists"])]
    pub swap: bool,
    /// Remove what `--part-of SET` staged, once SET's commit was refused (the live data
    /// stays as it is)
    #[arg(long, requires = "part_of", conflicts_with_all = ["from", "if_exists", "swap"])]
    pub undo: bool,
    /// Restore --name's backups into the volumes of app NAME of the same namespace
    /// (spec.restoreFrom): the records of a restore in parts, and of one interrupted in
    /// these volumes, are NAME's and kept with its backups (object stores only)
    #[arg(long, value_name = "NAME", conflicts_with_all = ["swap", "undo"])]
    pub into_app: Option<String>,
    /// Also write the JSON result to this file (Kubernetes: /dev/termination-log); on
    /// failure the error message is written instead
    #[arg(long, value_name = "PATH")]
    pub termination_log: Option<PathBuf>,
    /// Seconds to wait for a running backup or prune of the app to finish
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub lock_timeout: u64,
}

/// Arguments of `commit-restore`.
#[derive(clap::Args, Debug, Clone)]
pub struct CommitRestoreArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub app: AppArgs,
    /// The set to commit (as given to `restore --part-of`)
    #[arg(long, value_name = "SET")]
    pub part_of: String,
    /// How many replicas the app has: ordinals 0..N must all have staged
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub replicas: u32,
    /// Also write the JSON result to this file (Kubernetes: /dev/termination-log); on
    /// failure the error message is written instead
    #[arg(long, value_name = "PATH")]
    pub termination_log: Option<PathBuf>,
}

/// Arguments of `backups`.
#[derive(clap::Args, Debug, Clone)]
pub struct ListArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub app: AppArgs,
    /// Print a JSON array instead of a table
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `verify`.
#[derive(clap::Args, Debug, Clone)]
pub struct VerifyArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub app: AppArgs,
    /// The snapshot to check: a backup id such as 20261129T150102Z, or "latest"
    #[arg(value_name = "ID|latest")]
    pub id: String,
    /// Print {"id","files","bytes","problems":[...]} as one line of JSON (exit 1 still
    /// means damage)
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `describe`.
#[derive(clap::Args, Debug, Clone)]
pub struct DescribeArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub app: AppArgs,
    /// The snapshot: a backup id such as 20261129T150102Z, or "latest"
    #[arg(value_name = "ID|latest")]
    pub id: String,
}

/// Arguments of `delete`.
#[derive(clap::Args, Debug, Clone)]
pub struct DeleteArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub app: AppArgs,
    /// The backup id, such as 20261129T150102Z
    #[arg(value_name = "ID")]
    pub id: String,
    /// Also delete the newest complete snapshot
    #[arg(long)]
    pub force: bool,
    /// Seconds to wait for a running backup, restore or prune of the app to finish
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub lock_timeout: u64,
}

/// Arguments of `prune`.
#[derive(clap::Args, Debug, Clone)]
pub struct PruneArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub app: AppArgs,
    /// How many of the newest complete snapshots to keep (at least 1)
    #[arg(long, value_name = "N")]
    pub keep_last: u32,
}

/// Arguments of `wipe`.
#[derive(clap::Args, Debug, Clone)]
pub struct WipeArgs {
    /// Directory holding one subdirectory (mounted volume) per replica ordinal: 0, 1, ...
    #[arg(long, value_name = "DIR")]
    pub dest: PathBuf,
    /// Also write the JSON result to this file (Kubernetes: /dev/termination-log); on
    /// failure the error message is written instead
    #[arg(long, value_name = "PATH")]
    pub termination_log: Option<PathBuf>,
}

/// Arguments of `prepare`.
#[derive(clap::Args, Debug, Clone)]
pub struct PrepareArgs {
    /// Directory holding one subdirectory (mounted volume) per replica ordinal: 0, 1, ...
    #[arg(long, value_name = "DIR")]
    pub dest: PathBuf,
    /// User to own each volume's root directory
    #[arg(long, value_name = "UID")]
    pub uid: u32,
    /// Group to own each volume's root directory
    #[arg(long, value_name = "GID")]
    pub gid: u32,
    /// The root directories' permission bits, in octal (at most 7777)
    #[arg(long, value_name = "OCTAL", value_parser = parse_mode)]
    pub mode: u32,
    /// Also write the JSON result to this file (Kubernetes: /dev/termination-log); on
    /// failure the error message is written instead
    #[arg(long, value_name = "PATH")]
    pub termination_log: Option<PathBuf>,
}

/// Permission bits in octal, as chmod takes them.
fn parse_mode(text: &str) -> Result<u32, String> {
    u32::from_str_radix(text, 8)
        .ok()
        .filter(|mode| *mode <= 0o7777)
        .ok_or_else(|| format!("{text:?} is not an octal mode of at most 7777"))
}

/// Arguments of `purge`.
#[derive(clap::Args, Debug, Clone)]
pub struct PurgeArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub app: AppArgs,
    /// Also write the JSON result to this file (Kubernetes: /dev/termination-log); on
    /// failure the error message is written instead
    #[arg(long, value_name = "PATH")]
    pub termination_log: Option<PathBuf>,
    /// Seconds to wait for a running backup, restore or prune of the app to finish
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub lock_timeout: u64,
}

/// What a command printed and whether it succeeded.
struct Done {
    stdout: String,
    ok: bool,
}

/// Exit code of a failure that retrying cannot fix (see [`MoverError::is_permanent`]);
/// every other failure exits with 1.
pub const PERMANENT_FAILURE: u8 = 3;

/// Runs a mover command: prints its result on stdout (and to `--termination-log`),
/// errors on stderr; exit code 1 on a failure, [`PERMANENT_FAILURE`] when retrying is
/// pointless.
pub fn run(cmd: MoverCommand) -> ExitCode {
    let termination_log = match &cmd {
        MoverCommand::Backup(a) => a.termination_log.clone(),
        MoverCommand::Seal(a) => a.termination_log.clone(),
        MoverCommand::Restore(a) => a.termination_log.clone(),
        MoverCommand::CommitRestore(a) => a.termination_log.clone(),
        MoverCommand::Wipe(a) => a.termination_log.clone(),
        MoverCommand::Prepare(a) => a.termination_log.clone(),
        MoverCommand::Purge(a) => a.termination_log.clone(),
        _ => None,
    };
    match execute(cmd) {
        Ok(done) => {
            println!("{}", done.stdout);
            if let Some(path) = &termination_log
                && let Err(e) = write_termination_log(path, &done.stdout)
            {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
            if done.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            let message = format!("error: {}", crate::chain(&e));
            eprintln!("{message}");
            if let Some(path) = &termination_log
                && let Err(e) = write_termination_log(path, &message)
            {
                eprintln!("error: {e}");
            }
            if e.is_permanent() {
                ExitCode::from(PERMANENT_FAILURE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn write_termination_log(path: &Path, text: &str) -> std::result::Result<(), String> {
    std::fs::write(path, text)
        .map_err(|e| format!("cannot write termination log {}: {e}", path.display()))
}

fn json(value: &impl serde::Serialize) -> Result<String> {
    serde_json::to_string(value).map_err(|e| MoverError::Usage(format!("cannot encode JSON: {e}")))
}

/// A node directory is reached by one pod, which backs up or restores every volume itself.
fn parts_need_a_store() -> MoverError {
    MoverError::Usage(
        "a backup or restore in parts (--part-of) needs an object store (--store-endpoint, \
         --store-bucket)"
            .into(),
    )
}

fn execute(cmd: MoverCommand) -> Result<Done> {
    let ok = |stdout| Ok(Done { stdout, ok: true });
    match cmd {
        MoverCommand::Backup(a) => {
            let options = BackupOptions {
                source: a.source,
                keep_last: a.keep_last,
                lock_wait: Duration::from_secs(a.lock_timeout),
                max_bytes: a.max_bytes,
                reread: a.reread,
            };
            let set = a
                .part_of
                .as_deref()
                .map(str::parse::<PartSet>)
                .transpose()?;
            let report = match (a.app.location()?, set) {
                (Location::Dir(app), None) => crate::backup(&app, &options)?,
                (Location::Store(store), None) => objstore::backup(&store, &options)?,
                (Location::Store(store), Some(set)) => {
                    objstore::backup_part(&store, &options, &set)?
                }
                (Location::Dir(_), Some(_)) => return Err(parts_need_a_store()),
            };
            ok(json(&report)?)
        }
        MoverCommand::Seal(a) => {
            let set: PartSet = a.part_of.parse()?;
            let Location::Store(store) = a.app.location()? else {
                return Err(parts_need_a_store());
            };
            let wait = Duration::from_secs(a.lock_timeout);
            ok(json(&objstore::seal(
                &store,
                &set,
                a.replicas,
                a.keep_last,
                wait,
            )?)?)
        }
        MoverCommand::Restore(a) => {
            let lock_wait = Duration::from_secs(a.lock_timeout);
            let set = a
                .part_of
                .as_deref()
                .map(str::parse::<PartSet>)
                .transpose()?;
            let location = a.app.location()?;
            if let (Some(set), true) = (&set, a.swap || a.undo) {
                let Location::Store(store) = location else {
                    return Err(parts_need_a_store());
                };
                return if a.undo {
                    ok(json(&objstore::undo_part(
                        &store, &a.dest, lock_wait, set,
                    )?)?)
                } else {
                    ok(json(&objstore::swap_part(
                        &store, &a.dest, lock_wait, set,
                    )?)?)
                };
            }
            let options = RestoreOptions {
                dest: a.dest,
                from: a.from.as_deref().unwrap_or("latest").parse::<Selector>()?,
                if_exists: a.if_exists,
                lock_wait,
                commit_note: a.termination_log.clone(),
            };
            let records = match &a.into_app {
                None => None,
                Some(into) => match a.app.location_of(into)? {
                    Location::Store(records) => Some(records),
                    Location::Dir(_) => {
                        return Err(MoverError::Usage(
                            "--into-app needs an object store (--store-endpoint, \
                             --store-bucket): a restore from a node directory keeps no records"
                                .into(),
                        ));
                    }
                },
            };
            match (location, set) {
                (Location::Dir(app), None) => ok(json(&crate::restore(&app, &options)?)?),
                (Location::Store(store), None) => {
                    let records = records.as_deref().unwrap_or(&store);
                    ok(json(&crate::restore_from_store(
                        &store, records, &options,
                    )?)?)
                }
                (Location::Store(store), Some(set)) => {
                    let records = records.as_deref().unwrap_or(&store);
                    ok(json(&objstore::stage_part(
                        &store, records, &options, &set,
                    )?)?)
                }
                (Location::Dir(_), Some(_)) => Err(parts_need_a_store()),
            }
        }
        MoverCommand::CommitRestore(a) => {
            let set: PartSet = a.part_of.parse()?;
            let Location::Store(store) = a.app.location()? else {
                return Err(parts_need_a_store());
            };
            ok(json(&objstore::commit(&store, &set, a.replicas)?)?)
        }
        MoverCommand::Backups(a) => {
            let snapshots: Vec<SnapshotInfo> = match a.app.location()? {
                Location::Dir(app) => crate::list(&app)?,
                Location::Store(store) => objstore::list(&store)?,
            };
            if a.json {
                return ok(json(&snapshots)?);
            }
            let mut table = format!(
                "{:<22} {:<25} {:>14} {:>9}  STATE",
                "ID", "TIME", "BYTES", "FILES"
            );
            for s in &snapshots {
                let time = s.time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
                // Writing to a String cannot fail.
                let _ = write!(
                    table,
                    "\n{:<22} {:<25} {:>14} {:>9}  {}",
                    s.id, time, s.bytes, s.files, s.state
                );
            }
            ok(table)
        }
        MoverCommand::Verify(a) => {
            let selector = a.id.parse::<Selector>()?;
            let report = match a.app.location()? {
                Location::Dir(app) => crate::verify(&app, &selector)?,
                Location::Store(store) => objstore::verify(&store, &selector)?,
            };
            if a.json {
                let ok = report.problems.is_empty();
                return Ok(Done {
                    stdout: json(&report)?,
                    ok,
                });
            }
            if report.problems.is_empty() {
                return ok(format!(
                    "ok: backup {} verified: {} files, {} bytes",
                    report.id, report.files, report.bytes
                ));
            }
            eprintln!(
                "error: backup {} is damaged: {} problem(s)",
                report.id,
                report.problems.len()
            );
            Ok(Done {
                stdout: report
                    .problems
                    .iter()
                    .map(|p| format!("bad: {p}"))
                    .collect::<Vec<_>>()
                    .join("\n"),
                ok: false,
            })
        }
        MoverCommand::Describe(a) => {
            let selector = a.id.parse::<Selector>()?;
            let details = match a.app.location()? {
                Location::Dir(app) => crate::describe(&app, &selector)?,
                Location::Store(store) => objstore::describe(&store, &selector)?,
            };
            ok(json(&details)?)
        }
        MoverCommand::Delete(a) => {
            let id = a.id.parse::<BackupId>()?;
            let wait = Duration::from_secs(a.lock_timeout);
            let outcome = match a.app.location()? {
                Location::Dir(app) => crate::delete(&app, &id, a.force, wait)?,
                Location::Store(store) => objstore::delete(&store, &id, a.force)?,
            };
            ok(json(&outcome)?)
        }
        MoverCommand::Prune(a) => {
            let outcome = match a.app.location()? {
                Location::Dir(app) => crate::prune(&app, a.keep_last)?,
                Location::Store(store) => objstore::prune(&store, a.keep_last)?,
            };
            ok(json(&outcome)?)
        }
        MoverCommand::Wipe(a) => ok(json(&crate::wipe(&a.dest)?)?),
        MoverCommand::Prepare(a) => {
            let owner = crate::VolumeOwner {
                uid: a.uid,
                gid: a.gid,
                mode: a.mode,
            };
            ok(json(&crate::prepare(&a.dest, owner)?)?)
        }
        MoverCommand::Purge(a) => {
            let wait = Duration::from_secs(a.lock_timeout);
            let outcome = match a.app.location()? {
                Location::Dir(app) => crate::purge(&app, wait)?,
                Location::Store(store) => objstore::purge(&store)?,
            };
            ok(json(&outcome)?)
        }
    }
}
