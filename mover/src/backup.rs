//! Taking a snapshot.
//!
//! The snapshot is written as `.tmp-<id>` next to the others, made durable with one
//! `syncfs`, and renamed to `<id>` only when complete, so a half-written snapshot is
//! never visible. Files whose size, mtime, mode, owner, inode number and ctime are those
//! recorded by the previous complete snapshot are hard links to it; the rest are copied
//! and hashed from what was written. As git does for its index, a file whose ctime or
//! mtime is not clearly before the previous snapshot started is never trusted: it may
//! have changed again within the same timestamp tick.
//!
//! A file that keeps changing while it is copied is kept as read, flagged `inconsistent`
//! in the manifest and named in the report, and the backup still succeeds (an app that
//! appends to a log all the time must still be backed up); the reconciler says so in the
//! app's status and events.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::collections::hash_map::Entry as HashEntry;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use rustix::fs::FileType;
use serde::Serialize;

use crate::catalog::{self, PruneOutcome, Snapshot};
use crate::confined::{Dir, Inode};
use crate::entries::{self, BATCH, Entries, EntryWriter};
use crate::error::{MoverError, Result};
use crate::fsops::{self, meta_of};
use crate::lock;
use crate::manifest::{self, Entry, Kind, Manifest, Meta, Replica, SUCCEEDED, SourceStamp, Xattrs};
use crate::names::{App, BackupId};
use crate::swap;
use crate::volumes;

/// How many times a file that changes while being copied is copied again before we keep
/// what we read.
pub(crate) const COPY_ATTEMPTS: u32 = 3;

/// File timestamps come from the kernel's coarse clock, which may lag the clock a
/// snapshot's start time is read from by a tick: a change this close to the start counts
/// as made during the snapshot.
const CLOCK_SLACK: TimeDelta = TimeDelta::seconds(1);

/// How many inconsistent files the report names (it must fit a termination message).
pub(crate) const NAMED_INCONSISTENT: usize = 10;

/// Directories opened per batch at most (each holds three descriptors until its batch is
/// written).
const BATCH_DIRS: usize = 64;

/// What to back up and how.
#[derive(Debug, Clone)]
pub struct BackupOptions {
    /// Directory holding one subdirectory per replica ordinal.
    pub source: PathBuf,
    /// Prune to this many complete snapshots after success (≥ 1).
    pub keep_last: Option<u32>,
    /// How long to wait for another backup of the same app to finish.
    pub lock_wait: Duration,
    /// At most this many bytes in the app's backup directory once the new snapshot is in
    /// it (node directories; the admin's bound on a tenant's use of a node's disk).
    pub max_bytes: Option<u64>,
    /// Read every file again, trusting no unchanged-file check: a file written through
    /// `mmap` can change without its times moving, and its stale copy would otherwise be
    /// linked on and on.
    pub reread: bool,
}

impl BackupOptions {
    /// When the previous snapshot started, for the unchanged-file check; None when this
    /// backup reads everything again (or there is none).
    pub(crate) fn quick_check_since(
        &self,
        previous: Option<DateTime<Utc>>,
    ) -> Option<DateTime<Utc>> {
        previous.filter(|_| !self.reread)
    }
}

/// The result of a successful backup (printed as one JSON line).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupReport {
    /// The new snapshot's id.
    pub id: String,
    /// When it started.
    pub time: DateTime<Utc>,
    /// Total size of its files.
    pub bytes: u64,
    /// Number of files.
    pub files: u64,
    /// Bytes copied (not hard-linked).
    pub new_bytes: u64,
    /// Files hard-linked to the previous snapshot.
    pub linked_files: u64,
    /// Wall time.
    pub duration_ms: u64,
    /// Replica ordinals backed up.
    pub ordinals: Vec<u32>,
    /// Snapshots deleted by `--keep-last`.
    pub pruned: Vec<String>,
    /// With `--keep-last`: the complete snapshots left after it, this one included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<u64>,
    /// With `--keep-last`: the oldest of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oldest: Option<String>,
    /// Files that kept changing while they were copied (kept as read, may be torn).
    #[serde(skip_serializing_if = "manifest::is_zero")]
    pub inconsistent: u64,
    /// The first few of them, `<ordinal>/<path>`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inconsistent_files: Vec<String>,
}

impl BackupReport {
    /// Takes in what the backup's own retention did, if it ran.
    pub(crate) fn retained(&mut self, retained: Option<PruneOutcome>) {
        if let Some(outcome) = retained {
            self.snapshots = Some(outcome.kept.len() as u64);
            self.oldest = outcome.kept.last().cloned();
            self.pruned = outcome.pruned;
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Totals {
    /// The bound on the backup directory, if any: the copy stops as soon as it is passed.
    pub budget: Option<Budget>,
    pub bytes: u64,
    pub files: u64,
    pub new_bytes: u64,
    pub linked_files: u64,
    pub inconsistent: u64,
    /// The first few inconsistent files, `<ordinal>/<path>`.
    pub inconsistent_named: Vec<String>,
}

/// How much the app's backup directory may hold, and how much its snapshots already may.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    pub limit: u64,
    pub held: u64,
}

impl Totals {
    /// Fails once what was copied so far would take the directory past its bound.
    fn within_budget(&self) -> Result<()> {
        match self.budget {
            Some(Budget { limit, held }) if held.saturating_add(self.new_bytes) > limit => {
                Err(MoverError::OverLimit {
                    limit,
                    held,
                    copied: self.new_bytes,
                })
            }
            _ => Ok(()),
        }
    }
}

/// Backs up every ordinal volume under `options.source` into a new snapshot of `app`.
pub fn backup(app: &App, options: &BackupOptions) -> Result<BackupReport> {
    let started = Instant::now();
    let start_time = Utc::now();
    if let Some(keep) = options.keep_last {
        catalog::check_keep_last(keep)?;
    }
    let volumes = volumes::ordinal_dirs(&options.source)?;
    let app_dir = catalog::create_app_dir(app)?;
    let _lock = lock::exclusive(&app_dir, options.lock_wait)?;
    // A restore interrupted mid-swap may have left a mix of old and new volumes.
    swap::check_settled(&volumes)?;
    catalog::clean_leftovers(&app_dir)?;
    let previous = catalog::latest(&app_dir)?;
    let budget = match options.max_bytes {
        Some(limit) => Some(Budget {
            limit,
            held: catalog::held_bytes(&app_dir)?,
        }),
        None => None,
    };

    let mut id = BackupId::at(start_time);
    if let Some(last) = catalog::snapshot_ids(&app_dir)?.pop()
        && last >= id
    {
        // Same second, or a clock that went backwards: stay sortable after the last one.
        id = last.next();
    }
    let tmp_name = format!("{}{id}", catalog::TMP_PREFIX);
    app_dir.make_dir(&tmp_name)?;
    let written = app_dir.open_dir(&tmp_name).and_then(|tmp| {
        let previous_start =
            options.quick_check_since(previous.as_ref().map(|p| p.manifest.start_time));
        let (replicas, totals) =
            write_snapshot(&tmp, &volumes, previous.as_ref(), previous_start, budget)?;
        Ok((tmp, replicas, totals))
    });
    let (tmp, replicas, totals) = match written {
        Ok(done) => done,
        Err(e) => {
            discard(&app_dir, &tmp_name);
            return Err(e);
        }
    };

    let ordinals: Vec<u32> = volumes.iter().map(|(o, _)| *o).collect();
    let mut manifest = totals.manifest(&id, app.label(), start_time, started, ordinals, replicas);
    let finished = manifest
        .write(&tmp)
        .and_then(|()| tmp.sync_filesystem())
        .and_then(|()| app_dir.durable_rename(&tmp_name, &app_dir, id.as_str()));
    if let Err(e) = finished {
        discard(&app_dir, &tmp_name);
        return Err(e);
    }

    let retained = match options.keep_last {
        Some(keep) => Some(catalog::prune_locked(&app_dir, keep)?),
        None => None,
    };
    Ok(totals.report(&manifest, retained))
}

impl Totals {
    /// The manifest of a snapshot that ended with these totals (sealed when written).
    pub(crate) fn manifest(
        &self,
        id: &BackupId,
        app: String,
        start_time: DateTime<Utc>,
        started: Instant,
        ordinals: Vec<u32>,
        replicas: Vec<Replica>,
    ) -> Manifest {
        Manifest {
            format: manifest::FORMAT,
            id: id.to_string(),
            app,
            result: SUCCEEDED.to_owned(),
            start_time,
            end_time: Utc::now(),
            duration_ms: started.elapsed().as_millis() as u64,
            bytes: self.bytes,
            files: self.files,
            new_bytes: self.new_bytes,
            linked_files: self.linked_files,
            inconsistent_files: self.inconsistent,
            ordinals,
            replicas,
            checksum: String::new(),
        }
    }

    /// The report of the backup that wrote `manifest`.
    pub(crate) fn report(
        self,
        manifest: &Manifest,
        retained: Option<PruneOutcome>,
    ) -> BackupReport {
        let mut report = BackupReport {
            id: manifest.id.clone(),
            time: manifest.start_time,
            bytes: self.bytes,
            files: self.files,
            new_bytes: self.new_bytes,
            linked_files: self.linked_files,
            duration_ms: manifest.duration_ms,
            ordinals: manifest.ordinals.clone(),
            pruned: Vec::new(),
            snapshots: None,
            oldest: None,
            inconsistent: self.inconsistent,
            inconsistent_files: self.inconsistent_named,
        };
        report.retained(retained);
        report
    }
}

/// Best-effort removal of a failed snapshot; a leftover is removed by the next backup.
fn discard(app_dir: &Dir, tmp_name: &str) {
    if let Err(e) = app_dir.remove_tree(tmp_name) {
        crate::warn(format!(
            "could not remove the incomplete backup (the next backup will): {}",
            crate::chain(&e)
        ));
    }
}

/// The quick check: whether the live file (`now`, with `meta` and `stamp` taken from it)
/// is the one `previous` recorded in a snapshot started at `recorded_at`. The inode
/// number and ctime catch a file replaced with its old size and mtime (`cp -p`, `rsync`,
/// `tar x`); the slack around `recorded_at` catches a change within the same tick as
/// the copy the previous snapshot made.
pub(crate) fn unchanged_since(
    previous: &Entry,
    recorded_at: DateTime<Utc>,
    now: &Inode,
    meta: &Meta,
    stamp: &SourceStamp,
) -> bool {
    let Some(recorded) = previous.source else {
        return false;
    };
    let settled = |t: DateTime<Utc>| t + CLOCK_SLACK < recorded_at;
    previous.size == now.size
        && previous.meta == *meta
        && recorded == *stamp
        && settled(recorded.ctime)
        && settled(previous.meta.mtime)
}

/// One replica's files in the previous snapshot, for the quick check, looked up in walk
/// order.
enum PreviousFiles<'a> {
    None,
    /// Format 3: the entries file is in walk order, so it is read alongside the walk and
    /// a lookup only moves forward (what was read is checked again after linking).
    Stream {
        entries: Entries<'a>,
        next: Option<Box<Entry>>,
    },
    /// Formats 1 and 2: the entries were loaded whole; indexed by path.
    Map(HashMap<PathBuf, &'a Entry>),
}

impl<'a> PreviousFiles<'a> {
    fn open(snapshot: &'a Snapshot, replica: &'a Replica) -> Self {
        match entries::read(&snapshot.handle, replica) {
            Ok(Entries::Inline(inline)) => PreviousFiles::Map(
                inline
                    .filter(|e| e.kind == Kind::File)
                    .map(|e| (e.rel_path(), e))
                    .collect(),
            ),
            Ok(entries) => PreviousFiles::Stream {
                entries,
                next: None,
            },
            Err(e) => {
                not_linking(&e);
                PreviousFiles::None
            }
        }
    }

    /// The previous snapshot's entry of the file at `rel`, if it has one. Calls come in
    /// walk order.
    fn take(&mut self, rel: &Path) -> Option<Entry> {
        let (entries, next) = match self {
            PreviousFiles::None => return None,
            PreviousFiles::Map(map) => return map.get(rel).map(|e| (*e).clone()),
            PreviousFiles::Stream { entries, next } => (entries, next),
        };
        loop {
            let candidate = match next.take().map(|e| Ok(*e)).or_else(|| entries.next()) {
                None => return None,
                Some(Ok(entry)) => entry,
                Some(Err(e)) => {
                    not_linking(&e);
                    *self = PreviousFiles::None;
                    return None;
                }
            };
            match candidate.rel_path().as_path().cmp(rel) {
                Ordering::Less => {}
                Ordering::Equal => return (candidate.kind == Kind::File).then_some(candidate),
                Ordering::Greater => {
                    *next = Some(Box::new(candidate));
                    return None;
                }
            }
        }
    }
}

fn not_linking(e: &MoverError) {
    crate::warn(format!(
        "not linking to the previous backup (its files are copied again): {}",
        crate::chain(e)
    ));
}

fn write_snapshot(
    tmp: &Dir,
    volumes: &[(u32, Dir)],
    previous: Option<&Snapshot>,
    previous_start: Option<DateTime<Utc>>,
    budget: Option<Budget>,
) -> Result<(Vec<Replica>, Totals)> {
    let mut totals = Totals {
        budget,
        ..Totals::default()
    };
    let mut replicas = Vec::new();
    for (ordinal, source) in volumes {
        let previous_files = previous
            .and_then(|p| {
                let replica = p.manifest.replicas.iter().find(|r| r.ordinal == *ordinal)?;
                Some(PreviousFiles::open(p, replica))
            })
            .unwrap_or(PreviousFiles::None);
        let name = ordinal.to_string();
        tmp.make_dir(&name)?;
        let previous = previous.and_then(|p| match p.handle.open_dir(&name) {
            Ok(dir) => Some(dir),
            Err(e) => {
                if e.io_kind() != Some(io::ErrorKind::NotFound) {
                    not_linking(&e);
                }
                None
            }
        });
        let copy = ReplicaCopy {
            ordinal: *ordinal,
            source,
            dest: tmp.open_dir(&name)?,
            previous,
            previous_start,
        };
        replicas.push(copy.run(tmp, previous_files, &mut totals)?);
    }
    Ok((replicas, totals))
}

struct ReplicaCopy<'a> {
    ordinal: u32,
    source: &'a Dir,
    dest: Dir,
    previous: Option<Dir>,
    previous_start: Option<DateTime<Utc>>,
}

/// A regular file found by the walk, copied or linked with its batch.
struct FileJob {
    rel: PathBuf,
    /// Its directory.
    dir: Arc<DirHandles>,
    lstat: Inode,
    /// Its entry in the previous snapshot, if any.
    previous: Option<Entry>,
}

impl FileJob {
    /// Its name in its directory.
    fn name(&self) -> &Path {
        Path::new(self.rel.file_name().unwrap_or_default())
    }
}

/// A directory of the walk, opened once for the files directly in it: in the volume, in
/// the new snapshot and, if it has it, in the previous snapshot. Its files are opened,
/// created and linked by name, without resolving their path again (per file, three
/// `openat2` and three `close` fewer).
struct DirHandles {
    rel: PathBuf,
    source: Dir,
    dest: Dir,
    previous: Option<Dir>,
}

/// What the walk found, in walk order, waiting for its batch to be written.
enum Pending {
    /// A directory or symlink, already made.
    Done(Entry),
    /// A regular file, copied (or linked from the previous snapshot) in parallel.
    File(FileJob),
    /// Another path of a multiply-linked file seen earlier: a hard link to its copy.
    Link(FileJob),
}

/// One replica's copy between batches: what a batch needs from the ones before it.
struct ReplicaState<'p> {
    pending: Vec<Pending>,
    /// The first path of each multiply-linked file, and its entry once written (`None`
    /// before, or if it vanished). Only files with several links are held.
    first_links: HashMap<(u64, u64), (PathBuf, Option<Entry>)>,
    /// Directories, to set their metadata after their contents are written.
    dirs: Vec<(PathBuf, Meta, Xattrs)>,
    previous_files: PreviousFiles<'p>,
    writer: EntryWriter,
    /// The handles of the directories from the root to the last one walked.
    open_dirs: Vec<Arc<DirHandles>>,
    /// Directories opened since the last batch (a batch keeps its files' directories
    /// open: bounded, so that one file per directory cannot exhaust the descriptors).
    opened_in_batch: usize,
}

impl ReplicaState<'_> {
    /// The handles of `rel`'s directory, if it could be opened; closes those of
    /// directories the walk has left.
    fn parent_of(&mut self, rel: &Path) -> Option<Arc<DirHandles>> {
        while self
            .open_dirs
            .last()
            .is_some_and(|dir| !rel.starts_with(&dir.rel))
        {
            self.open_dirs.pop();
        }
        self.open_dirs
            .last()
            .filter(|dir| Some(dir.rel.as_path()) == rel.parent())
            .cloned()
    }
}

enum FileOutcome {
    /// Unchanged: a hard link to the previous snapshot's copy.
    Linked(Entry),
    Copied(Entry),
    /// Another path of a file copied in this snapshot: a hard link to that copy.
    HardLink(Entry),
    Vanished,
}

impl ReplicaCopy<'_> {
    /// Walks the volume and writes its copy and its entries file, a batch of files at a
    /// time: memory holds one batch, not the volume's entries.
    fn run(
        &self,
        snapshot: &Dir,
        previous_files: PreviousFiles,
        totals: &mut Totals,
    ) -> Result<Replica> {
        let root = meta_of(&self.source.stat()?, self.source.path())?;
        let root_xattrs = fsops::read_xattrs(self.source, self.source.path())?;
        let root_handles = DirHandles {
            rel: PathBuf::new(),
            source: self.source.try_clone()?,
            dest: self.dest.try_clone()?,
            previous: self.previous.as_ref().map(Dir::try_clone).transpose()?,
        };
        let mut state = ReplicaState {
            pending: Vec::new(),
            first_links: HashMap::new(),
            dirs: Vec::new(),
            previous_files,
            writer: EntryWriter::create(snapshot, self.ordinal)?,
            open_dirs: vec![Arc::new(root_handles)],
            opened_in_batch: 0,
        };
        let mut buf = Vec::new();
        self.source.walk(swap::is_reserved, |rel, lstat| {
            let path = self.source.join(rel);
            let parent = state.parent_of(rel);
            match lstat.kind {
                FileType::Directory => {
                    let meta = meta_of(lstat, &path)?;
                    let source = match self.source.open_dir(rel) {
                        Ok(dir) => Some(dir),
                        Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => None,
                        Err(e) => return Err(e),
                    };
                    let xattrs = match &source {
                        Some(dir) => fsops::read_xattrs(dir, &path)?,
                        None => Xattrs::new(),
                    };
                    self.dest.make_dir(rel)?;
                    if let Some(source) = source {
                        state.open_dirs.push(Arc::new(DirHandles {
                            rel: rel.to_owned(),
                            source,
                            dest: self.dest.open_dir(rel)?,
                            // Not there (or not a directory): its files are copied.
                            previous: self.previous.as_ref().and_then(|p| p.open_dir(rel).ok()),
                        }));
                        state.opened_in_batch += 1;
                    }
                    let mut entry = Entry::new(rel, Kind::Dir, 0, meta);
                    entry.xattrs.clone_from(&xattrs);
                    state.pending.push(Pending::Done(entry));
                    state.dirs.push((rel.to_owned(), meta, xattrs));
                }
                FileType::Symlink => {
                    let target = match self.source.read_link(rel) {
                        Ok(target) => target,
                        Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => {
                            vanished(&path);
                            return Ok(());
                        }
                        Err(e) => return Err(e),
                    };
                    let meta = meta_of(lstat, &path)?;
                    self.dest.symlink(&target, rel)?;
                    self.dest.set_symlink_meta(rel, &meta)?;
                    let size = target.as_os_str().len() as u64;
                    state.pending.push(Pending::Done(
                        Entry::new(rel, Kind::Symlink, size, meta).with_target(&target),
                    ));
                }
                FileType::RegularFile => {
                    let Some(dir) = parent else {
                        // Its directory vanished before we could open it.
                        vanished(&path);
                        return Ok(());
                    };
                    // Files with several links: the first path found is copied, the
                    // others become links to it (as `rsync -H` and restic keep them).
                    let seen_before = lstat.nlink > 1
                        && match state.first_links.entry((lstat.dev, lstat.ino)) {
                            HashEntry::Occupied(_) => true,
                            HashEntry::Vacant(slot) => {
                                slot.insert((rel.to_owned(), None));
                                false
                            }
                        };
                    let job = FileJob {
                        rel: rel.to_owned(),
                        dir,
                        lstat: *lstat,
                        previous: None,
                    };
                    state.pending.push(if seen_before {
                        Pending::Link(job)
                    } else {
                        Pending::File(FileJob {
                            previous: state.previous_files.take(rel),
                            ..job
                        })
                    });
                }
                _ => crate::warn(format!(
                    "skipping {}: sockets, fifos and device files are not backed up",
                    path.display()
                )),
            }
            if state.pending.len() >= BATCH || state.opened_in_batch >= BATCH_DIRS {
                self.write_batch(&mut state, totals, &mut buf)?;
            }
            Ok(())
        })?;
        self.write_batch(&mut state, totals, &mut buf)?;
        // Children before parents: setting a directory's mtime must come after its
        // contents are written, and a read-only mode after its children are created.
        for (rel, meta, xattrs) in state.dirs.iter().rev() {
            let dir = self.dest.open_dir(rel)?;
            dir.set_meta(meta)?;
            // The manifest keeps them; a target that refuses some only loses them from
            // the browsable copy.
            fsops::write_xattrs(&dir, xattrs, dir.path())?;
        }
        self.dest.set_meta(&root)?;
        fsops::write_xattrs(&self.dest, &root_xattrs, self.dest.path())?;
        Ok(Replica {
            ordinal: self.ordinal,
            root,
            root_xattrs,
            entries: Vec::new(),
            entry_file: Some(state.writer.finish()?),
        })
    }

    /// Copies (or links) the pending files in parallel, then writes every pending entry
    /// in walk order.
    fn write_batch(
        &self,
        state: &mut ReplicaState,
        totals: &mut Totals,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        let pending = std::mem::take(&mut state.pending);
        state.opened_in_batch = 0;
        let copied = fsops::par_map(&pending, |item, buf| match item {
            Pending::File(job) => self.file(job, buf).map(Some),
            _ => Ok(None),
        })?;
        for (item, outcome) in pending.into_iter().zip(copied) {
            let entry = match (item, outcome) {
                (Pending::Done(entry), _) => Some(entry),
                (Pending::File(job), Some(outcome)) => {
                    let entry = self.count(&job, outcome, totals);
                    if let Some((first, recorded)) =
                        state.first_links.get_mut(&(job.lstat.dev, job.lstat.ino))
                        && *first == job.rel
                    {
                        recorded.clone_from(&entry);
                    }
                    entry
                }
                // Sequential: its first path, in this batch or an earlier one, is written.
                (Pending::File(job) | Pending::Link(job), _) => {
                    let outcome = match state.first_links.get(&(job.lstat.dev, job.lstat.ino)) {
                        Some((first, Some(copied))) => self.link_within(&job, first, copied)?,
                        _ => None,
                    };
                    let outcome = match outcome {
                        Some(outcome) => outcome,
                        // The first path vanished, or this one is no longer the same inode.
                        None => self.file(&job, buf)?,
                    };
                    self.count(&job, outcome, totals)
                }
            };
            totals.within_budget()?;
            if let Some(entry) = entry {
                state.writer.push(&entry)?;
            }
        }
        Ok(())
    }

    /// Adds a file's outcome to the totals; returns its entry.
    fn count(&self, job: &FileJob, outcome: FileOutcome, totals: &mut Totals) -> Option<Entry> {
        let entry = match outcome {
            FileOutcome::Linked(entry) => {
                totals.linked_files += 1;
                entry
            }
            FileOutcome::Copied(entry) => {
                totals.new_bytes += entry.size;
                if entry.inconsistent {
                    totals.inconsistent += 1;
                    if totals.inconsistent_named.len() < NAMED_INCONSISTENT {
                        totals.inconsistent_named.push(format!(
                            "{}/{}",
                            self.ordinal,
                            job.rel.display()
                        ));
                    }
                }
                entry
            }
            FileOutcome::HardLink(entry) => entry,
            FileOutcome::Vanished => return None,
        };
        totals.files += 1;
        totals.bytes += entry.size;
        Some(entry)
    }

    /// Makes `job` a hard link to the copy of `first`, the path of the same inode that was
    /// copied, if it still is that inode (it may have been replaced since the walk).
    fn link_within(
        &self,
        job: &FileJob,
        first: &Path,
        copied: &Entry,
    ) -> Result<Option<FileOutcome>> {
        let now = match job.dir.source.lstat(job.name()) {
            Ok(now) => now,
            Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => {
                vanished(&self.source.join(&job.rel));
                return Ok(Some(FileOutcome::Vanished));
            }
            Err(e) => return Err(e),
        };
        if (now.dev, now.ino) != (job.lstat.dev, job.lstat.ino) || copied.inconsistent {
            return Ok(None);
        }
        self.dest.hard_link(first, &job.dir.dest, job.name())?;
        let mut entry =
            Entry::new(&job.rel, Kind::File, copied.size, copied.meta).with_hard_link(first);
        entry.blake3.clone_from(&copied.blake3);
        entry.source = copied.source;
        entry.sparse = copied.sparse;
        entry.xattrs.clone_from(&copied.xattrs);
        Ok(Some(FileOutcome::HardLink(entry)))
    }

    fn file(&self, job: &FileJob, buf: &mut Vec<u8>) -> Result<FileOutcome> {
        let from = self.source.join(&job.rel);
        let to = self.dest.join(&job.rel);
        let meta = meta_of(&job.lstat, &from)?;
        let stamp = fsops::stamp_of(&job.lstat, &from)?;
        if let Some(linked) = self.link_unchanged(job, meta, stamp)? {
            return Ok(FileOutcome::Linked(linked));
        }
        let mut attempt = 1;
        loop {
            let src = match job.dir.source.open_file(job.name()) {
                Ok(src) => src,
                Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => {
                    vanished(&from);
                    return Ok(FileOutcome::Vanished);
                }
                Err(e) => return Err(e),
            };
            let before = Inode::of(&src, &from)?;
            // A regular file reached without a symlink is inside the volume whatever its
            // inode: an app that saves by renaming a new file over the old one gets the new
            // one backed up (its own metadata is recorded below). Anything else in its place
            // (a directory, a FIFO, a device) is a swap, and refused.
            if before.kind != FileType::RegularFile {
                before.expect_same(&job.lstat, &from)?;
            }
            let dst = job.dir.dest.create_file(job.name(), before.mode)?;
            let layout = fsops::Layout {
                size: before.size,
                holes: has_holes(&before),
                // The live file: the app may read it too, and it may be cached.
                read_once: false,
            };
            let copied = fsops::copy_into(&src, dst, &from, &to, buf, layout)?;
            // Read between the two fstats: a change to them moves the ctime.
            let xattrs = fsops::read_xattrs(&src, &from)?;
            let after = Inode::of(&src, &from)?;
            let consistent = match check_copy(&before, &after, copied.len) {
                CopyCheck::Consistent => true,
                CopyCheck::Short => {
                    return Err(MoverError::Io {
                        action: "read all of",
                        path: from,
                        source: io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!(
                                "short read: {} of its {} bytes, though its size and times \
                                 did not change meanwhile",
                                copied.len, before.size
                            ),
                        ),
                    });
                }
                CopyCheck::Changed if attempt < COPY_ATTEMPTS => {
                    drop(copied);
                    job.dir.dest.remove_file(job.name())?;
                    attempt += 1;
                    continue;
                }
                CopyCheck::Changed => {
                    // The app keeps writing (a log appended every few seconds). We keep
                    // what we read and record *its* size and checksum with the stamps
                    // from before the copy, so the snapshot is self-consistent and the
                    // next backup sees a different ctime and copies the file again.
                    crate::warn(format!(
                        "{} changed while being copied {COPY_ATTEMPTS} times; keeping the {} \
                         bytes read, flagged inconsistent",
                        from.display(),
                        copied.len
                    ));
                    false
                }
            };
            let meta = meta_of(&before, &from)?;
            fsops::apply_meta_new_file(&copied.file, &meta, &to)?;
            fsops::write_xattrs(&copied.file, &xattrs, &to)?;
            let mut entry = Entry::new(&job.rel, Kind::File, copied.len, meta);
            entry.xattrs = xattrs;
            entry.blake3 = Some(copied.hash.to_hex().to_string());
            entry.source = Some(fsops::stamp_of(&before, &from)?);
            entry.inconsistent = !consistent;
            entry.sparse = has_holes(&before);
            return Ok(FileOutcome::Copied(entry));
        }
    }

    /// Hard-links the file to the previous snapshot's copy if it passes the quick check.
    /// Linked files are never modified afterwards: their inode is shared. The previous
    /// snapshot is tenant-writable too, so what got linked is checked after the link.
    fn link_unchanged(
        &self,
        job: &FileJob,
        meta: Meta,
        stamp: SourceStamp,
    ) -> Result<Option<Entry>> {
        let (Some(previous_dir), Some(previous), Some(recorded_at)) =
            (&job.dir.previous, &job.previous, self.previous_start)
        else {
            return Ok(None);
        };
        if !unchanged_since(previous, recorded_at, &job.lstat, &meta, &stamp) {
            return Ok(None);
        }
        match previous_dir.hard_link(job.name(), &job.dir.dest, job.name()) {
            Ok(()) => {}
            // Too many links to one inode, or the old copy is gone: copy instead.
            Err(MoverError::Copy { source, .. })
                if source.kind() == io::ErrorKind::NotFound
                    || source.raw_os_error() == Some(rustix::io::Errno::MLINK.raw_os_error()) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
        // Whatever was there is now linked (never followed): keep it only if it is a
        // regular file of the recorded size, else copy instead.
        let linked = job.dir.dest.lstat(job.name())?;
        if linked.kind != FileType::RegularFile || linked.size != previous.size {
            job.dir.dest.remove_file(job.name())?;
            return Ok(None);
        }
        let mut entry = Entry::new(&job.rel, Kind::File, job.lstat.size, meta);
        entry.blake3.clone_from(&previous.blake3);
        entry.source = Some(stamp);
        entry.sparse = previous.sparse;
        entry.xattrs.clone_from(&previous.xattrs);
        Ok(Some(entry))
    }
}

/// Whether a file takes fewer blocks than its size: it has holes to keep.
pub(crate) fn has_holes(inode: &Inode) -> bool {
    inode.blocks.saturating_mul(512) < inode.size
}

/// What the `fstat`s before and after a copy say about it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum CopyCheck {
    /// Nothing changed and every byte was read.
    Consistent,
    /// The file was written (or its metadata changed) while we read it.
    Changed,
    /// Nothing changed, yet we read a different number of bytes than its size.
    Short,
}

pub(crate) fn check_copy(before: &Inode, after: &Inode, read: u64) -> CopyCheck {
    let stamp = |i: &Inode| (i.size, i.mtime, i.mtime_nsec, i.ctime, i.ctime_nsec);
    if stamp(before) != stamp(after) {
        CopyCheck::Changed
    } else if read != before.size {
        CopyCheck::Short
    } else {
        CopyCheck::Consistent
    }
}
pub(crate) fn vanished(path: &Path) {
    crate::warn(format!(
        "{} vanished during the backup; not backed up",
        path.display()
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inode(size: u64, mtime: i64, ctime: i64) -> Inode {
        Inode {
            dev: 1,
            ino: 42,
            kind: FileType::RegularFile,
            mode: 0o100644,
            uid: 1,
            gid: 1,
            size,
            blocks: size.div_ceil(512),
            nlink: 1,
            mtime,
            mtime_nsec: 0,
            ctime,
            ctime_nsec: 0,
        }
    }

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).expect("time")
    }

    #[test]
    fn a_reread_trusts_no_previous_snapshot() {
        let options = |reread| BackupOptions {
            source: PathBuf::from("/data"),
            keep_last: None,
            lock_wait: std::time::Duration::ZERO,
            max_bytes: None,
            reread,
        };
        assert_eq!(options(false).quick_check_since(Some(at(5))), Some(at(5)));
        assert_eq!(options(true).quick_check_since(Some(at(5))), None);
        assert_eq!(options(false).quick_check_since(None), None);
    }

    #[test]
    fn quick_check_trusts_only_identical_settled_files() {
        let path = Path::new("f");
        let now = inode(10, 100, 200);
        let meta = meta_of(&now, path).expect("meta");
        let stamp = fsops::stamp_of(&now, path).expect("stamp");
        let mut recorded = Entry::new(path, Kind::File, 10, meta);
        recorded.source = Some(stamp);
        let check = |e: &Entry, recorded_at: i64, live: &Inode| {
            let meta = meta_of(live, path).expect("meta");
            let stamp = fsops::stamp_of(live, path).expect("stamp");
            unchanged_since(e, at(recorded_at), live, &meta, &stamp)
        };
        assert!(check(&recorded, 202, &now));
        // Changed within the slack before the snapshot started: racy, copied again.
        assert!(!check(&recorded, 201, &now));
        assert!(!check(&recorded, 200, &now));
        // Replaced: another inode, or rewritten in place (ctime moved).
        assert!(!check(&recorded, 300, &Inode { ino: 43, ..now }));
        assert!(!check(&recorded, 300, &inode(10, 100, 250)));
        assert!(!check(&recorded, 300, &inode(11, 100, 200)));
        // A manifest without stamps (older versions) is never trusted.
        let mut old = recorded.clone();
        old.source = None;
        assert!(!check(&old, 300, &now));
    }

    #[test]
    fn a_copy_is_judged_by_the_stamps_around_it() {
        let before = inode(10, 100, 200);
        assert_eq!(check_copy(&before, &before, 10), CopyCheck::Consistent);
        assert_eq!(check_copy(&before, &before, 9), CopyCheck::Short);
        assert_eq!(check_copy(&before, &before, 11), CopyCheck::Short);
        for after in [
            inode(11, 100, 200),
            inode(10, 101, 200),
            inode(10, 100, 201),
        ] {
            assert_eq!(check_copy(&before, &after, 10), CopyCheck::Changed);
        }
    }

    /// A file deeper than PATH_MAX below its volume is backed up to a node directory and
    /// restored (a single `openat2` of its path fails).
    #[test]
    fn a_file_deeper_than_path_max_is_backed_up_and_restored() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let source = tmp.path().join("src");
        std::fs::create_dir_all(source.join("0")).expect("mkdir");
        let volume = Dir::open_trusted(&source.join("0")).expect("open");
        let deep = crate::confined::tests::deeper_than_path_max().join("f");
        let parent = deep.parent().expect("parent");
        volume.make_dirs(parent).expect("mkdir");
        volume.write_file(&deep, b"deep").expect("write");
        let app = crate::App::new(tmp.path().join("backups"), "ns", "app").expect("app");
        let options = BackupOptions {
            source: source.clone(),
            keep_last: None,
            lock_wait: std::time::Duration::ZERO,
            max_bytes: None,
            reread: false,
        };
        let report = backup(&app, &options).expect("backup");
        assert_eq!(report.files, 1, "{report:?}");

        volume.write_file(&deep, b"changed").expect("change");
        let restore = crate::RestoreOptions {
            dest: source,
            from: crate::Selector::Latest,
            if_exists: false,
            lock_wait: std::time::Duration::ZERO,
            commit_note: None,
        };
        crate::restore(&app, &restore).expect("restore");
        let volume = Dir::open_trusted(&tmp.path().join("src/0")).expect("open");
        assert_eq!(volume.read_file(&deep).expect("read"), b"deep");
    }
}
