//! Taking a snapshot.
//!
//! The snapshot is written as `.tmp-<id>` next to the others, made durable with one
//! `syncfs`, and renamed to `<id>` only when complete, so a half-written snapshot is
//! never visible. Files that pass rsync's quick check against the previous complete
//! snapshot (same size, mtime, mode, owner) are hard links to it; the rest are copied
//! and hashed from what was written.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use walkdir::WalkDir;

use crate::catalog::{self, Snapshot};
use crate::error::{MoverError, Result, io_err};
use crate::fsops::{self, meta_of};
use crate::lock;
use crate::manifest::{Entry, Kind, MANIFEST_FILE, Manifest, Meta, Replica, SUCCEEDED};
use crate::names::{App, BackupId};
use crate::swap;
use crate::volumes;

/// How many times a file that changes while being copied is copied again before we keep
/// what we read.
const COPY_ATTEMPTS: u32 = 3;

/// What to back up and how.
#[derive(Debug, Clone)]
pub struct BackupOptions {
    /// Directory holding one subdirectory per replica ordinal.
    pub source: PathBuf,
    /// Prune to this many complete snapshots after success (≥ 1).
    pub keep_last: Option<u32>,
    /// How long to wait for another backup of the same app to finish.
    pub lock_wait: Duration,
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
}

#[derive(Debug, Default)]
struct Totals {
    bytes: u64,
    files: u64,
    new_bytes: u64,
    linked_files: u64,
}

/// Backs up every ordinal volume under `options.source` into a new snapshot of `app`.
pub fn backup(app: &App, options: &BackupOptions) -> Result<BackupReport> {
    let started = Instant::now();
    let start_time = Utc::now();
    if let Some(keep) = options.keep_last {
        catalog::check_keep_last(keep)?;
    }
    let volumes = volumes::ordinal_dirs(&options.source)?;
    // A restore killed mid-swap must be finished first, or we would back up a mix.
    for (_, volume) in &volumes {
        swap::recover(volume)?;
    }
    let app_dir = app.dir();
    fs::create_dir_all(&app_dir).map_err(io_err("create directory", &app_dir))?;
    let _lock = lock::exclusive(&app_dir, options.lock_wait)?;
    catalog::clean_leftovers(&app_dir)?;
    let previous = catalog::latest(&app_dir)?;

    let mut id = BackupId::at(start_time);
    if let Some(last) = catalog::snapshot_ids(&app_dir)?.pop()
        && last >= id
    {
        // Same second, or a clock that went backwards: stay sortable after the last one.
        id = last.next();
    }
    let tmp = app_dir.join(format!("{}{id}", catalog::TMP_PREFIX));
    fsops::make_dir(&tmp)?;
    let written = write_snapshot(&tmp, &volumes, previous.as_ref());
    let (replicas, totals) = match written {
        Ok(done) => done,
        Err(e) => {
            discard(&tmp);
            return Err(e);
        }
    };

    let ordinals: Vec<u32> = volumes.iter().map(|(o, _)| *o).collect();
    let mut manifest = Manifest {
        format: 0,
        id: id.to_string(),
        app: app.label(),
        result: SUCCEEDED.to_owned(),
        start_time,
        end_time: Utc::now(),
        duration_ms: started.elapsed().as_millis() as u64,
        bytes: totals.bytes,
        files: totals.files,
        new_bytes: totals.new_bytes,
        linked_files: totals.linked_files,
        ordinals: ordinals.clone(),
        replicas,
        checksum: String::new(),
    };
    let finished = manifest
        .write(&tmp.join(MANIFEST_FILE))
        .and_then(|()| fsops::sync_filesystem(&tmp))
        .and_then(|()| fsops::durable_rename(&tmp, &app_dir.join(id.as_str())));
    if let Err(e) = finished {
        discard(&tmp);
        return Err(e);
    }

    let pruned = match options.keep_last {
        Some(keep) => catalog::prune_locked(app, keep)?.pruned,
        None => Vec::new(),
    };
    Ok(BackupReport {
        id: id.to_string(),
        time: start_time,
        bytes: totals.bytes,
        files: totals.files,
        new_bytes: totals.new_bytes,
        linked_files: totals.linked_files,
        duration_ms: manifest.duration_ms,
        ordinals,
        pruned,
    })
}

/// Best-effort removal of a failed snapshot; a leftover is removed by the next backup.
fn discard(tmp: &Path) {
    if let Err(e) = fsops::remove_tree(tmp) {
        crate::warn(format!(
            "could not remove the incomplete backup (the next backup will): {}",
            crate::chain(&e)
        ));
    }
}

/// Previous snapshot's files by (ordinal, relative path), for the quick check.
type PreviousFiles<'a> = HashMap<(u32, PathBuf), &'a Entry>;

fn write_snapshot(
    tmp: &Path,
    volumes: &[(u32, PathBuf)],
    previous: Option<&Snapshot>,
) -> Result<(Vec<Replica>, Totals)> {
    let previous_files: PreviousFiles = previous
        .map(|p| {
            p.manifest
                .replicas
                .iter()
                .flat_map(|r| r.entries.iter().map(move |e| (r.ordinal, e)))
                .filter(|(_, e)| e.kind == Kind::File)
                .map(|(o, e)| ((o, e.rel_path()), e))
                .collect()
        })
        .unwrap_or_default();
    let mut totals = Totals::default();
    let mut replicas = Vec::new();
    for (ordinal, source) in volumes {
        let copy = ReplicaCopy {
            ordinal: *ordinal,
            source,
            dest: tmp.join(ordinal.to_string()),
            previous: previous.map(|p| p.dir.join(ordinal.to_string())),
            previous_files: &previous_files,
        };
        replicas.push(copy.run(&mut totals)?);
    }
    Ok((replicas, totals))
}

struct ReplicaCopy<'a> {
    ordinal: u32,
    source: &'a Path,
    dest: PathBuf,
    previous: Option<PathBuf>,
    previous_files: &'a PreviousFiles<'a>,
}

/// A regular file found by the walk, copied or linked in parallel afterwards.
struct FileJob {
    slot: usize,
    rel: PathBuf,
    lstat: fs::Metadata,
}

enum FileOutcome {
    Linked(Entry),
    Copied(Entry),
    Vanished,
}

impl ReplicaCopy<'_> {
    fn run(&self, totals: &mut Totals) -> Result<Replica> {
        let root_stat = fs::symlink_metadata(self.source).map_err(io_err("stat", self.source))?;
        let root = meta_of(&root_stat, self.source)?;
        fsops::make_dir(&self.dest)?;

        // Walk first (directories and symlinks are made as we go, in order), then copy
        // the files in parallel. `slots` keeps manifest order = walk order.
        let mut slots: Vec<Option<Entry>> = Vec::new();
        let mut jobs = Vec::new();
        let mut dirs: Vec<(PathBuf, Meta)> = Vec::new();
        let walk = WalkDir::new(self.source)
            .min_depth(1)
            .follow_links(false)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|e| !(e.depth() == 1 && swap::is_reserved(e.file_name())));
        for item in walk {
            let entry = match item {
                Ok(entry) => entry,
                Err(e) => {
                    let path = e.path().unwrap_or(self.source).to_owned();
                    let source = io::Error::from(e);
                    if source.kind() == io::ErrorKind::NotFound {
                        vanished(&path);
                        continue;
                    }
                    return Err(io_err("read", path)(source));
                }
            };
            let path = entry.path();
            let rel = path.strip_prefix(self.source).unwrap_or(path).to_owned();
            let lstat = match entry.metadata() {
                Ok(md) => md,
                Err(e) => {
                    let source = io::Error::from(e);
                    if source.kind() == io::ErrorKind::NotFound {
                        vanished(path);
                        continue;
                    }
                    return Err(io_err("stat", path)(source));
                }
            };
            let dest = self.dest.join(&rel);
            let file_type = lstat.file_type();
            if file_type.is_dir() {
                let meta = meta_of(&lstat, path)?;
                fsops::make_dir(&dest)?;
                slots.push(Some(Entry::new(&rel, Kind::Dir, 0, meta)));
                dirs.push((dest, meta));
            } else if file_type.is_symlink() {
                let target = match fs::read_link(path) {
                    Ok(target) => target,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        vanished(path);
                        continue;
                    }
                    Err(e) => return Err(io_err("read symlink", path)(e)),
                };
                let meta = meta_of(&lstat, path)?;
                std::os::unix::fs::symlink(&target, &dest)
                    .map_err(io_err("create symlink", &dest))?;
                crate::fault::step();
                fsops::apply_meta_symlink(&dest, &meta)?;
                let size = target.as_os_str().len() as u64;
                slots.push(Some(
                    Entry::new(&rel, Kind::Symlink, size, meta).with_target(&target),
                ));
            } else if file_type.is_file() {
                jobs.push(FileJob {
                    slot: slots.len(),
                    rel,
                    lstat,
                });
                slots.push(None);
            } else {
                crate::warn(format!(
                    "skipping {}: sockets, fifos and device files are not backed up",
                    path.display()
                ));
            }
        }

        let copied = fsops::par_map(&jobs, |job, buf| self.file(job, buf))?;
        for (job, outcome) in jobs.iter().zip(copied) {
            let entry = match outcome {
                FileOutcome::Linked(entry) => {
                    totals.linked_files += 1;
                    entry
                }
                FileOutcome::Copied(entry) => {
                    totals.new_bytes += entry.size;
                    entry
                }
                FileOutcome::Vanished => continue,
            };
            totals.files += 1;
            totals.bytes += entry.size;
            slots[job.slot] = Some(entry);
        }
        // Children before parents: setting a directory's mtime must come after its
        // contents are written, and a read-only mode after its children are created.
        for (dest, meta) in dirs.iter().rev() {
            fsops::apply_meta_dir(dest, meta)?;
        }
        fsops::apply_meta_dir(&self.dest, &root)?;
        Ok(Replica {
            ordinal: self.ordinal,
            root,
            entries: slots.into_iter().flatten().collect(),
        })
    }

    fn file(&self, job: &FileJob, buf: &mut Vec<u8>) -> Result<FileOutcome> {
        let from = self.source.join(&job.rel);
        let to = self.dest.join(&job.rel);
        let meta = meta_of(&job.lstat, &from)?;
        let size = job.lstat.len();
        if let Some(linked) = self.link_unchanged(job, meta, size, &to)? {
            return Ok(FileOutcome::Linked(linked));
        }
        let mut attempt = 1;
        loop {
            let mut src = match fsops::open_nofollow(&from) {
                Ok(src) => src,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    vanished(&from);
                    return Ok(FileOutcome::Vanished);
                }
                Err(e) => return Err(io_err("open", &from)(e)),
            };
            let before = src.metadata().map_err(io_err("stat", &from))?;
            let copied = fsops::copy_new(&mut src, &from, &to, buf)?;
            let after = src.metadata().map_err(io_err("stat", &from))?;
            let stable = same_content_stamp(&before, &after) && copied.len == before.len();
            if !stable && attempt < COPY_ATTEMPTS {
                drop(copied);
                fs::remove_file(&to).map_err(io_err("remove", &to))?;
                attempt += 1;
                continue;
            }
            if !stable {
                // The app keeps writing (a log appended every few seconds). We keep what
                // we read and record *its* size and checksum with the mtime from before
                // the copy, so the snapshot is self-consistent and the next backup sees
                // a different mtime and copies the file again.
                crate::warn(format!(
                    "{} changed while being copied; keeping the {} bytes read",
                    from.display(),
                    copied.len
                ));
            }
            let meta = meta_of(&before, &from)?;
            fsops::apply_meta_fd(&copied.file, &meta, &to)?;
            let mut entry = Entry::new(&job.rel, Kind::File, copied.len, meta);
            entry.blake3 = Some(copied.hash.to_hex().to_string());
            return Ok(FileOutcome::Copied(entry));
        }
    }

    /// Hard-links `to` to the previous snapshot's copy if the file passes the quick
    /// check. Linked files are never modified afterwards: their inode is shared.
    fn link_unchanged(
        &self,
        job: &FileJob,
        meta: Meta,
        size: u64,
        to: &Path,
    ) -> Result<Option<Entry>> {
        let (Some(previous_dir), Some(previous)) = (
            &self.previous,
            self.previous_files.get(&(self.ordinal, job.rel.clone())),
        ) else {
            return Ok(None);
        };
        if previous.size != size || previous.meta != meta {
            return Ok(None);
        }
        let from = previous_dir.join(&job.rel);
        match fs::hard_link(&from, to) {
            Ok(()) => {
                crate::fault::step();
                let mut entry = Entry::new(&job.rel, Kind::File, size, meta);
                entry.blake3.clone_from(&previous.blake3);
                Ok(Some(entry))
            }
            // Too many links to one inode, or the old copy is gone: copy instead.
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(rustix::io::Errno::MLINK.raw_os_error()) =>
            {
                Ok(None)
            }
            Err(source) => Err(MoverError::Copy {
                from,
                to: to.to_owned(),
                source,
            }),
        }
    }
}

fn same_content_stamp(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.len() == b.len() && a.mtime() == b.mtime() && a.mtime_nsec() == b.mtime_nsec()
}

fn vanished(path: &Path) {
    crate::warn(format!(
        "{} vanished during the backup; not backed up",
        path.display()
    ));
}
