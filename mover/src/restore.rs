//! Restoring a snapshot into live volumes.
//!
//! Under every volume's lock, an earlier interrupted restore is first finished or undone.
//! Each volume is checked for room for a full copy, then the snapshot is copied into
//! `.hellostateful-staging` on the volume itself, every file checked against the
//! manifest's checksum as it is written. Only when every ordinal is staged and verified
//! (so a missing or corrupt snapshot, or a full volume, fails before live data is
//! touched) and made durable are the contents swapped in, all volumes or none (see
//! `swap`).

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::catalog::{self, Snapshot};
use crate::confined::{Dir, FreeSpace, Inode};
use crate::entries::{self, BATCH, Entries};
use crate::error::{MoverError, Result, SWAP_INTERRUPTED, io_err};
use crate::fsops;
use crate::lock;
use crate::manifest::{Entry, Kind, Manifest, Replica};
use crate::names::{App, Selector};
use crate::objstore::{self, Store, StoredSnapshot};
use crate::swap;
use crate::volumes;

/// What to restore and where.
#[derive(Debug, Clone)]
pub struct RestoreOptions {
    /// Directory holding one subdirectory (mounted volume) per replica ordinal.
    pub dest: PathBuf,
    /// Which snapshot.
    pub from: Selector,
    /// Succeed without doing anything if the app has no complete snapshot.
    pub if_exists: bool,
    /// How long to wait for a backup or prune of the same app to finish.
    pub lock_wait: Duration,
    /// A file to write a failure message to at the moment the swap commits (Kubernetes:
    /// the termination log), so that a restore killed from then on reports that the live
    /// data may be half replaced. Overwritten by the caller with the outcome.
    pub commit_note: Option<PathBuf>,
}

/// The result of a restore (printed as one JSON line).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum RestoreOutcome {
    /// The snapshot was restored.
    Restored(RestoreReport),
    /// `--if-exists` and there is nothing to restore.
    NotRestored(NotRestored),
}

/// `{"restored":true,"id",...}`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreReport {
    /// Always true.
    pub restored: bool,
    /// The snapshot restored.
    pub id: String,
    /// Bytes of the files restored.
    pub bytes: u64,
    /// Number of files restored.
    pub files: u64,
    /// Wall time, including verification.
    pub duration_ms: u64,
    /// The ordinals restored.
    pub ordinals: Vec<u32>,
}

/// `{"restored":false,"reason":"NoBackup"}`.
#[derive(Debug, Clone, Serialize)]
pub struct NotRestored {
    /// Always false.
    pub restored: bool,
    /// Why: `NoBackup`.
    pub reason: &'static str,
}

/// Restores a snapshot of `app` into the ordinal volumes under `options.dest`.
pub fn restore(app: &App, options: &RestoreOptions) -> Result<RestoreOutcome> {
    let started = Instant::now();
    let volumes = volumes::ordinal_dirs(&options.dest)?;
    let _volume_locks = swap::lock_volumes(&volumes, options.lock_wait)?;
    swap::recover(&volumes)?;
    let app_dir = catalog::open_app_dir(app)?;
    let _lock = match &app_dir {
        Some(dir) => lock::shared(dir, options.lock_wait)?,
        None => None,
    };
    let no_backup = match &app_dir {
        Some(dir) => catalog::snapshot_ids(dir)?.is_empty(),
        None => true,
    };
    // "No backup at all", not "no valid backup": a damaged newest snapshot must fail
    // loudly rather than let the app start empty.
    if options.if_exists && no_backup {
        return Ok(not_restored());
    }
    let snapshot = catalog::resolve(app, &options.from)?;
    swap_in(&Source::Local(&snapshot), &volumes, options, started)
}

/// Restores a snapshot kept in an object store into the ordinal volumes under
/// `options.dest`: the same staging, checks and swap, each file downloaded and hashed.
/// A restore made in parts that was interrupted is finished or undone first, as `records`
/// say: the place of the app the volumes are (`store` itself, unless the backups are another
/// app's), where the app's volumes may have been on several nodes then.
pub fn restore_from_store(
    store: &Store,
    records: &Store,
    options: &RestoreOptions,
) -> Result<RestoreOutcome> {
    let started = Instant::now();
    let volumes = volumes::ordinal_dirs(&options.dest)?;
    let _volume_locks = swap::lock_volumes(&volumes, options.lock_wait)?;
    objstore::recover(records, &volumes)?;
    if options.if_exists && !objstore::any(store)? {
        return Ok(not_restored());
    }
    let snapshot = objstore::resolve(store, &options.from)?;
    swap_in(&Source::Store(store, &snapshot), &volumes, options, started)
}

pub(crate) fn not_restored() -> RestoreOutcome {
    RestoreOutcome::NotRestored(NotRestored {
        restored: false,
        reason: "NoBackup",
    })
}

/// Where a restore reads a snapshot from.
pub(crate) enum Source<'a> {
    /// A snapshot directory on the backup target.
    Local(&'a Snapshot),
    /// A manifest in an object store and the contents it names.
    Store(&'a Store, &'a StoredSnapshot),
}

impl Source<'_> {
    pub fn id(&self) -> &str {
        match self {
            Source::Local(s) => s.id.as_str(),
            Source::Store(_, s) => s.id.as_str(),
        }
    }

    fn manifest(&self) -> &Manifest {
        match self {
            Source::Local(s) => &s.manifest,
            Source::Store(_, s) => &s.manifest,
        }
    }

    fn entries<'r>(&self, replica: &'r Replica) -> Result<Entries<'r>> {
        match self {
            Source::Local(s) => entries::read(&s.handle, replica),
            Source::Store(..) => Ok(Entries::Inline(replica.entries.iter())),
        }
    }
}

/// Stages `source` on every volume, then swaps it in.
fn swap_in(
    source: &Source,
    volumes: &[(u32, Dir)],
    options: &RestoreOptions,
    started: Instant,
) -> Result<RestoreOutcome> {
    let staged = stage_volumes(source, volumes, &options.dest)?;
    if staged.ordinals.is_empty() {
        return Err(MoverError::Usage(format!(
            "backup {} holds ordinals {:?}, none of which is a volume in {}",
            source.id(),
            source.manifest().ordinals,
            options.dest.display()
        )));
    }
    let id = source.id();
    swap::prepare(&staged.volumes, id, &staged.ordinals, None)?;
    if let Some(note) = &options.commit_note {
        let text = format!(
            "error: {SWAP_INTERRUPTED} with backup {id} (it stopped before the swap finished; \
             the next restore finishes the swap first)"
        );
        std::fs::write(note, text).map_err(io_err("write", note))?;
    }
    let owned = swap::commit(&staged.volumes, id, &staged.ordinals).map_err(|e| {
        MoverError::SwapInterrupted {
            id: id.to_owned(),
            source: Box::new(e),
        }
    })?;
    if !owned {
        staged.shortfalls.unowned.store(true, Ordering::Relaxed);
    }
    staged.shortfalls.warn();
    Ok(RestoreOutcome::Restored(RestoreReport {
        restored: true,
        id: id.to_owned(),
        bytes: staged.bytes,
        files: staged.files,
        duration_ms: started.elapsed().as_millis() as u64,
        ordinals: staged.ordinals,
    }))
}

/// The volumes a snapshot was staged on, complete and durable, not yet prepared.
pub(crate) struct StagedVolumes<'v> {
    pub volumes: Vec<swap::Staged<'v>>,
    /// Their ordinals (those of the mounted volumes the snapshot holds).
    pub ordinals: Vec<u32>,
    pub bytes: u64,
    pub files: u64,
    shortfalls: Shortfalls,
}

impl StagedVolumes<'_> {
    /// Warns of what the staging could not give back as it was.
    pub fn warn(&self) {
        self.shortfalls.warn();
    }
}

/// Copies `source` into the staging directory of each of `volumes` it holds data for (all
/// checked for room first), and makes them durable. On an error, every staging directory
/// made is removed: nothing live was touched.
pub(crate) fn stage_volumes<'v>(
    source: &Source,
    volumes: &'v [(u32, Dir)],
    dest: &Path,
) -> Result<StagedVolumes<'v>> {
    let manifest = source.manifest();
    let snapshot_id = source.id();
    let mut pairs: Vec<(&Replica, &Dir)> = Vec::new();
    for replica in &manifest.replicas {
        match volumes.iter().find(|(o, _)| *o == replica.ordinal) {
            Some((_, volume)) => pairs.push((replica, volume)),
            None => crate::warn(format!(
                "backup {} holds ordinal {} but {} has no such volume; skipped",
                snapshot_id,
                replica.ordinal,
                dest.display()
            )),
        }
    }
    for (ordinal, volume) in volumes {
        if !manifest.ordinals.contains(ordinal) {
            crate::warn(format!(
                "backup {} has no data for ordinal {ordinal}; {} left untouched",
                snapshot_id,
                volume.path().display()
            ));
        }
    }
    check_space(source, &pairs)?;
    let mut staged = StagedVolumes {
        volumes: Vec::new(),
        ordinals: pairs.iter().map(|(r, _)| r.ordinal).collect(),
        bytes: 0,
        files: 0,
        shortfalls: Shortfalls::default(),
    };
    for (replica, volume) in &pairs {
        match stage(source, replica, volume, &staged.shortfalls) {
            Ok((bytes, files, staging)) => {
                staged.bytes += bytes;
                staged.files += files;
                staged.volumes.push(swap::Staged {
                    volume,
                    staging,
                    root: replica.root,
                    root_xattrs: replica.root_xattrs.clone(),
                });
            }
            Err(e) => {
                for (_, volume) in &pairs {
                    if let Err(e) = volume.remove_tree(swap::STAGING) {
                        crate::warn(crate::chain(&e));
                    }
                }
                return Err(e);
            }
        }
    }
    for (_, volume) in &pairs {
        volume.sync_filesystem()?;
    }
    Ok(staged)
}

/// What a restore could not give back as it was, for one warning each.
#[derive(Default)]
struct Shortfalls {
    /// Ownership could not be set (not root).
    unowned: AtomicBool,
    /// Extended attributes the volume's filesystem or this process refused.
    refused_xattrs: Mutex<BTreeSet<String>>,
}

impl Shortfalls {
    fn warn(&self) {
        if self.unowned.load(Ordering::Relaxed) {
            crate::warn(
                "not permitted to set file ownership (not running as root?): restored files \
                 belong to the restoring user"
                    .to_owned(),
            );
        }
        if let Ok(refused) = self.refused_xattrs.lock()
            && !refused.is_empty()
        {
            crate::warn(format!(
                "extended attributes not restored (not supported by this filesystem or not \
                 permitted): {}",
                refused.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
    }
}

/// A restore writes a full copy beside the live data before swapping it in: refuse before
/// writing anything when it cannot fit. Volumes on one filesystem (a node directory's, or
/// claims of one disk) share its free space: their copies must fit together.
fn check_space(source: &Source, pairs: &[(&Replica, &Dir)]) -> Result<()> {
    struct Filesystem<'v> {
        dev: u64,
        free: FreeSpace,
        needed_bytes: u64,
        needed_inodes: u64,
        volumes: Vec<&'v Dir>,
    }
    let mut filesystems: Vec<Filesystem> = Vec::new();
    for (replica, volume) in pairs {
        let dev = volume.stat()?.dev;
        let at = match filesystems.iter().position(|fs| fs.dev == dev) {
            Some(at) => at,
            None => {
                let free = volume.free_space()?;
                filesystems.push(Filesystem {
                    dev,
                    free,
                    needed_bytes: 0,
                    needed_inodes: 0,
                    volumes: Vec::new(),
                });
                filesystems.len() - 1
            }
        };
        let fs = &mut filesystems[at];
        let block = fs.free.block;
        let (mut bytes, mut inodes) = (block, 1u64);
        for entry in source.entries(replica)? {
            let entry = entry?;
            bytes += match entry.kind {
                Kind::File => entry.size.div_ceil(block) * block,
                Kind::Dir => block,
                // Short targets live in the inode.
                Kind::Symlink => 0,
            };
            inodes += 1;
        }
        fs.needed_bytes = fs.needed_bytes.saturating_add(bytes);
        fs.needed_inodes = fs.needed_inodes.saturating_add(inodes);
        fs.volumes.push(volume);
    }
    for fs in filesystems {
        let fits_inodes = fs.free.inodes.is_none_or(|n| fs.needed_inodes <= n);
        if fs.needed_bytes <= fs.free.bytes && fits_inodes {
            continue;
        }
        let mut paths = fs.volumes.iter().map(|volume| volume.path().to_owned());
        let Some(path) = paths.next() else {
            continue;
        };
        return Err(MoverError::NoSpace {
            path,
            sharing: paths.collect(),
            id: source.id().to_owned(),
            needed_bytes: fs.needed_bytes,
            free_bytes: fs.free.bytes,
            needed_inodes: fs.free.inodes.map(|_| fs.needed_inodes),
            free_inodes: fs.free.inodes,
        });
    }
    Ok(())
}

/// Copies one replica of `snapshot` into the volume's staging directory, checking every
/// file against the manifest. Returns (bytes, files, the staging directory's inode).
/// Everything is written beneath the staging directory's fd: the tenant may swap
/// directories in the volume meanwhile. The entries are streamed: files are copied a
/// batch at a time.
fn stage(
    source: &Source,
    replica: &Replica,
    volume: &Dir,
    shortfalls: &Shortfalls,
) -> Result<(u64, u64, Inode)> {
    let replica_dir;
    let from = match source {
        Source::Local(snapshot) => {
            replica_dir = snapshot.handle.open_dir(replica.ordinal.to_string())?;
            From::Dir(&replica_dir)
        }
        Source::Store(store, _) => From::Store(store),
    };
    volume.make_dir(swap::STAGING)?;
    let staging = volume.open_dir(swap::STAGING)?;
    let stager = Stager {
        id: source.id(),
        from,
        staging: &staging,
        shortfalls,
    };
    let mut batch: Vec<Entry> = Vec::new();
    let mut dirs: Vec<Entry> = Vec::new();
    let (mut bytes, mut files) = (0, 0);
    // The reader checks each entry before it is written (the manifest is forgeable) and,
    // at its end, that the file is still the one the manifest sealed.
    for entry in source.entries(replica)? {
        let entry = entry?;
        let rel = entry.rel_path();
        match entry.kind {
            Kind::Dir => {
                staging.make_dir(&rel)?;
                dirs.push(entry);
            }
            Kind::Symlink => {
                let target = entry.link_target().unwrap_or_default();
                staging.symlink(&target, &rel)?;
                stager.note_owner(staging.set_symlink_meta(&rel, &entry.meta)?);
            }
            Kind::File => {
                bytes += entry.size;
                files += 1;
                batch.push(entry);
                if batch.len() >= BATCH {
                    stager.files(&std::mem::take(&mut batch))?;
                }
            }
        }
    }
    stager.files(&batch)?;
    for entry in dirs.iter().rev() {
        let dir = staging.open_dir(entry.rel_path())?;
        stager.note_owner(dir.set_meta(&entry.meta)?);
        stager.note_refused(fsops::write_xattrs(&dir, &entry.xattrs, dir.path())?);
    }
    Ok((bytes, files, staging.stat()?))
}

/// Where one replica's file contents come from.
enum From<'a> {
    /// The replica's directory in a local snapshot.
    Dir(&'a Dir),
    /// Content-addressed objects.
    Store(&'a Store),
}

/// Writes one replica's files into its staging directory.
struct Stager<'a> {
    id: &'a str,
    from: From<'a>,
    staging: &'a Dir,
    shortfalls: &'a Shortfalls,
}

impl Stager<'_> {
    fn note_owner(&self, owned: bool) {
        if !owned {
            self.shortfalls.unowned.store(true, Ordering::Relaxed);
        }
    }

    fn note_refused(&self, names: Vec<String>) {
        if !names.is_empty()
            && let Ok(mut refused) = self.shortfalls.refused_xattrs.lock()
        {
            refused.extend(names);
        }
    }

    /// `what` names the file read: its path in the snapshot, or its object.
    fn damaged(&self, what: &Path, problem: &str) -> MoverError {
        MoverError::Damaged {
            id: self.id.to_owned(),
            problems: vec![format!("{}: {problem}", what.display())],
        }
    }

    /// Copies a batch of file entries in parallel, then makes its hard links (to files of
    /// this batch or of an earlier one: the manifest lists a link after its first path).
    fn files(&self, batch: &[Entry]) -> Result<()> {
        fsops::par_map(batch, |entry, buf| {
            if entry.hard_link_to().is_some() {
                return Ok(());
            }
            self.file(entry, buf)
        })?;
        for entry in batch {
            if let Some(first) = entry.hard_link_to() {
                self.staging
                    .hard_link(&first, self.staging, &entry.rel_path())?;
            }
        }
        Ok(())
    }

    fn file(&self, entry: &Entry, buf: &mut Vec<u8>) -> Result<()> {
        let rel = entry.rel_path();
        let to = self.staging.join(&rel);
        let (file, len, hash, from) = match self.from {
            From::Dir(source) => {
                let src = match source.open_file(&rel) {
                    Ok(src) => src,
                    Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => {
                        return Err(self.damaged(&source.join(&rel), "missing"));
                    }
                    Err(e) => return Err(e),
                };
                let from = source.join(&rel);
                let dst = self.staging.create_file(&rel, entry.meta.mode)?;
                let layout = fsops::Layout {
                    size: entry.size,
                    holes: entry.sparse,
                    read_once: true,
                };
                let copied = fsops::copy_into(&src, dst, &from, &to, buf, layout)?;
                (copied.file, copied.len, copied.hash, from)
            }
            From::Store(store) => {
                let from = store.content_address(entry);
                if entry.blake3.is_none() {
                    return Err(self.damaged(&rel, "the manifest has no checksum for it"));
                }
                let dst = self.staging.create_file(&rel, entry.meta.mode)?;
                let mut writer = fsops::HoleWriter::new(&dst, entry.sparse);
                let fetched = store.fetch_content(entry, |chunk| {
                    writer.write(chunk).map_err(io_err("write", &to))
                })?;
                writer.finish().map_err(io_err("write", &to))?;
                let Some((len, hash)) = fetched else {
                    return Err(self.damaged(
                        &from,
                        &format!("missing (the contents of {})", rel.display()),
                    ));
                };
                (dst, len, hash, from)
            }
        };
        if len != entry.size {
            return Err(self.damaged(
                &from,
                &format!("{len} bytes, the manifest says {}", entry.size),
            ));
        }
        if entry.blake3.as_deref() != Some(hash.to_hex().as_str()) {
            return Err(self.damaged(&from, "contents do not match the manifest checksum"));
        }
        self.note_owner(fsops::apply_meta_new_file(&file, &entry.meta, &to)?);
        // After the chown, which clears security.capability.
        self.note_refused(fsops::write_xattrs(&file, &entry.xattrs, &to)?);
        Ok(())
    }
}
