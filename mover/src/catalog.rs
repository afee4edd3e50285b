//! The snapshots of one app: finding, listing, resolving `latest`, cleaning up what
//! crashed runs left behind, and pruning.
//!
//! Only directories named by a valid backup id are snapshots; they appear only by an
//! atomic rename after their manifest is written (see `backup`), and disappear by an
//! atomic rename to `.del-<id>` before they are deleted, so a reader never sees a
//! partial one.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::error::{MoverError, Result, io_err};
use crate::fsops;
use crate::lock;
use crate::manifest::{MANIFEST_FILE, Manifest};
use crate::names::{App, BackupId, Selector};

/// Prefix of a snapshot being written.
pub(crate) const TMP_PREFIX: &str = ".tmp-";
/// Prefix of a snapshot being deleted.
pub(crate) const DEL_PREFIX: &str = ".del-";

/// A complete snapshot with its checked manifest.
#[derive(Debug)]
pub struct Snapshot {
    /// Its id.
    pub id: BackupId,
    /// `<target>/<ns>/<name>/<id>`.
    pub dir: PathBuf,
    /// Its manifest (already checked by [`Manifest::load`]).
    pub manifest: Manifest,
}

/// One line of `backups`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotInfo {
    /// Backup id.
    pub id: String,
    /// When the backup started.
    pub time: DateTime<Utc>,
    /// Total size of the files.
    pub bytes: u64,
    /// Number of files.
    pub files: u64,
    /// Bytes copied by this backup (not hard-linked).
    pub new_bytes: u64,
    /// Wall time of the backup.
    pub duration_ms: u64,
    /// Replica ordinals held.
    pub ordinals: Vec<u32>,
    /// The manifest's result.
    #[serde(skip)]
    pub state: String,
}

impl From<&Snapshot> for SnapshotInfo {
    fn from(s: &Snapshot) -> Self {
        let m = &s.manifest;
        Self {
            id: m.id.clone(),
            time: m.start_time,
            bytes: m.bytes,
            files: m.files,
            new_bytes: m.new_bytes,
            duration_ms: m.duration_ms,
            ordinals: m.ordinals.clone(),
            state: m.result.clone(),
        }
    }
}

/// Ids of the directories in `app_dir` that are named like snapshots, oldest first.
/// A missing app directory has none.
pub(crate) fn snapshot_ids(app_dir: &Path) -> Result<Vec<BackupId>> {
    let entries = match fs::read_dir(app_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("list", app_dir)(e)),
    };
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_err("list", app_dir))?;
        if let Some(id) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<BackupId>().ok())
        {
            ids.push(id);
        }
    }
    ids.sort();
    Ok(ids)
}

/// Loads snapshot `id` of the app in `app_dir`.
pub(crate) fn load(app_dir: &Path, id: &BackupId) -> Result<Snapshot> {
    let dir = app_dir.join(id.as_str());
    let manifest = Manifest::load(&dir.join(MANIFEST_FILE), id.as_str())?;
    Ok(Snapshot {
        id: id.clone(),
        dir,
        manifest,
    })
}

/// Every complete snapshot, newest first. Snapshot-named directories whose manifest is
/// missing or invalid are not complete: they are reported on stderr and skipped.
pub fn complete_snapshots(app: &App) -> Result<Vec<Snapshot>> {
    let app_dir = app.dir();
    let mut out = Vec::new();
    for id in snapshot_ids(&app_dir)?.into_iter().rev() {
        match load(&app_dir, &id) {
            Ok(snapshot) => out.push(snapshot),
            Err(e) => crate::warn(format!("skipping backup {id}: {}", crate::chain(&e))),
        }
    }
    Ok(out)
}

/// The newest snapshot with a valid manifest, if any (older ones are not loaded): the
/// base for the next incremental backup, which must not link to a damaged one.
pub(crate) fn latest(app_dir: &Path) -> Result<Option<Snapshot>> {
    for id in snapshot_ids(app_dir)?.into_iter().rev() {
        match load(app_dir, &id) {
            Ok(snapshot) => return Ok(Some(snapshot)),
            Err(e) => crate::warn(format!("skipping backup {id}: {}", crate::chain(&e))),
        }
    }
    Ok(None)
}

/// The snapshot `selector` names. An explicit id that does not exist is an error that
/// lists the ids that do; a damaged one (also as `latest`) is an error naming the bad file.
pub fn resolve(app: &App, selector: &Selector) -> Result<Snapshot> {
    let app_dir = app.dir();
    let ids = snapshot_ids(&app_dir)?;
    match selector {
        // The newest snapshot, even if damaged: silently restoring older data than asked
        // for would be worse than failing with the name of the bad file.
        Selector::Latest => match ids.last() {
            Some(id) => load(&app_dir, id),
            None => Err(MoverError::NoBackup {
                app: app.label(),
                dir: app_dir.clone(),
            }),
        },
        Selector::Id(id) => {
            if !ids.contains(id) {
                return Err(MoverError::NoSuchBackup {
                    id: id.to_string(),
                    app: app.label(),
                    existing: ids.iter().rev().map(ToString::to_string).collect(),
                });
            }
            load(&app_dir, id)
        }
    }
}

/// Lists the complete snapshots, newest first.
pub fn list(app: &App) -> Result<Vec<SnapshotInfo>> {
    let incomplete = incomplete(app)?;
    if !incomplete.is_empty() {
        crate::warn(format!(
            "incomplete backups (in progress, or left by a crash and removed by the next backup): {}",
            incomplete.join(", ")
        ));
    }
    Ok(complete_snapshots(app)?
        .iter()
        .map(SnapshotInfo::from)
        .collect())
}

/// Names of `.tmp-*` directories: backups being written or left by a crash.
pub fn incomplete(app: &App) -> Result<Vec<String>> {
    let app_dir = app.dir();
    if !app_dir.exists() {
        return Ok(Vec::new());
    }
    Ok(fsops::list_dir(&app_dir)?
        .iter()
        .filter_map(|p| p.file_name()?.to_str())
        .filter(|n| n.starts_with(TMP_PREFIX))
        .map(str::to_owned)
        .collect())
}

/// Removes what crashed runs left: half-written (`.tmp-*`) and half-deleted (`.del-*`)
/// snapshots. Only called with the exclusive lock held, so nothing removed is in use.
pub(crate) fn clean_leftovers(app_dir: &Path) -> Result<()> {
    for path in fsops::list_dir(app_dir)? {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if name.starts_with(TMP_PREFIX) || name.starts_with(DEL_PREFIX) {
            crate::warn(format!(
                "removing {} left by an interrupted run",
                path.display()
            ));
            fsops::remove_tree(&path)?;
        }
    }
    Ok(())
}

/// What `prune` did.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PruneOutcome {
    /// Ids deleted, newest first.
    pub pruned: Vec<String>,
    /// Complete snapshots kept, newest first.
    pub kept: Vec<String>,
    /// True if another backup, restore or prune held the lock, so nothing was done.
    pub busy: bool,
}

/// Deletes complete snapshots older than the newest `keep_last` (≥ 1, so the newest good
/// snapshot is never deleted). If a backup, restore or prune is running it does nothing
/// and reports `busy` rather than waiting: pruning is never urgent, and the next backup's
/// `--keep-last` or the next prune catches up.
pub fn prune(app: &App, keep_last: u32) -> Result<PruneOutcome> {
    check_keep_last(keep_last)?;
    let app_dir = app.dir();
    if !app_dir.exists() {
        return Ok(PruneOutcome::default());
    }
    let Some(_lock) = lock::try_exclusive(&app_dir)? else {
        crate::warn(format!(
            "a backup, restore or prune of {} is running; nothing pruned",
            app.label()
        ));
        return Ok(PruneOutcome {
            busy: true,
            ..PruneOutcome::default()
        });
    };
    clean_leftovers(&app_dir)?;
    prune_locked(app, keep_last)
}

pub(crate) fn check_keep_last(keep_last: u32) -> Result<()> {
    if keep_last == 0 {
        return Err(MoverError::Usage(
            "--keep-last must be at least 1: the newest good backup is never deleted".into(),
        ));
    }
    Ok(())
}

/// Prune with the exclusive lock already held.
pub(crate) fn prune_locked(app: &App, keep_last: u32) -> Result<PruneOutcome> {
    let app_dir = app.dir();
    let complete = complete_snapshots(app)?;
    let keep = (keep_last as usize).min(complete.len());
    let (kept, old) = complete.split_at(keep);
    let mut pruned = Vec::new();
    for snapshot in old {
        // Rename first: a prune killed mid-delete leaves a `.del-*` directory that is not
        // listed and is removed by the next run, never a partial snapshot.
        let doomed = app_dir.join(format!("{DEL_PREFIX}{}", snapshot.id));
        fsops::durable_rename(&snapshot.dir, &doomed)?;
        fsops::remove_tree(&doomed)?;
        pruned.push(snapshot.id.to_string());
    }
    Ok(PruneOutcome {
        pruned,
        kept: kept.iter().map(|s| s.id.to_string()).collect(),
        busy: false,
    })
}
