//! The snapshots of one app: finding, listing, resolving `latest`, cleaning up what
//! crashed runs left behind, and pruning.
//!
//! Only directories named by a valid backup id are snapshots; they appear only by an
//! atomic rename after their manifest is written (see `backup`), and disappear by an
//! atomic rename to `.del-<id>` before they are deleted, so a reader never sees a
//! partial one.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::confined::Dir;
use crate::error::{MoverError, Result};
use crate::lock;
use crate::manifest::Manifest;
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
    /// Its manifest (already checked: sealed, safe paths, a tree without surprises).
    pub manifest: Manifest,
    /// The snapshot directory, opened beneath the app directory.
    pub(crate) handle: Dir,
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

impl From<&Manifest> for SnapshotInfo {
    fn from(m: &Manifest) -> Self {
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

/// The app's directory if it exists. Its path below the target is opened without
/// following symlinks: the tenant can write into its own backups.
pub(crate) fn open_app_dir(app: &App) -> Result<Option<Dir>> {
    let missing = |e: &MoverError| e.io_kind() == Some(io::ErrorKind::NotFound);
    let target = match Dir::open_trusted(app.target()) {
        Ok(target) => target,
        Err(e) if missing(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    match target.open_dir(app.rel_dir()) {
        Ok(dir) => Ok(Some(dir)),
        Err(e) if missing(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The app's directory, created (with the target) if missing.
pub(crate) fn create_app_dir(app: &App) -> Result<Dir> {
    Dir::create_trusted(app.target())?.make_dirs(&app.rel_dir())
}

/// Ids of the directories in `app_dir` that are named like snapshots, oldest first.
pub(crate) fn snapshot_ids(app_dir: &Dir) -> Result<Vec<BackupId>> {
    let mut ids: Vec<BackupId> = app_dir
        .names()?
        .iter()
        .filter_map(|n| n.to_str()?.parse().ok())
        .collect();
    ids.sort();
    Ok(ids)
}

/// Loads snapshot `id` of the app in `app_dir`.
pub(crate) fn load(app_dir: &Dir, id: &BackupId) -> Result<Snapshot> {
    let handle = app_dir.open_dir(id.as_str())?;
    let manifest = Manifest::load(&handle, id.as_str())?;
    Ok(Snapshot {
        id: id.clone(),
        dir: handle.path().to_owned(),
        manifest,
        handle,
    })
}

/// Every complete snapshot, newest first. Snapshot-named directories whose manifest is
/// missing or invalid are not complete: they are reported on stderr and skipped.
/// The complete snapshots (their manifests load and check), newest first, each summed up
/// in a line. Manifests are loaded one at a time and dropped: memory holds one snapshot's
/// entries, however many snapshots there are.
fn complete_in(app_dir: &Dir) -> Result<Vec<(BackupId, SnapshotInfo)>> {
    let mut out = Vec::new();
    for id in snapshot_ids(app_dir)?.into_iter().rev() {
        match load(app_dir, &id) {
            Ok(snapshot) => out.push((id, SnapshotInfo::from(&snapshot.manifest))),
            Err(e) => crate::warn(format!("skipping backup {id}: {}", crate::chain(&e))),
        }
    }
    Ok(out)
}

/// An upper bound of the bytes the app's complete snapshots take: all of the oldest's, and
/// what each later one copied. A file the oldest does not hold was copied by a later one
/// or is linked from one, since a backup links only files of the newest snapshot before
/// it.
pub(crate) fn held_bytes(app_dir: &Dir) -> Result<u64> {
    let complete = complete_in(app_dir)?;
    let Some(((_, oldest), later)) = complete.split_last() else {
        return Ok(0);
    };
    Ok(later.iter().fold(oldest.bytes, |held, (_, info)| {
        held.saturating_add(info.new_bytes)
    }))
}

/// The newest snapshot with a valid manifest, if any (older ones are not loaded): the
/// base for the next incremental backup, which must not link to a damaged one.
pub(crate) fn latest(app_dir: &Dir) -> Result<Option<Snapshot>> {
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
    let app_dir = open_app_dir(app)?;
    let ids = match &app_dir {
        Some(dir) => snapshot_ids(dir)?,
        None => Vec::new(),
    };
    match (selector, app_dir) {
        // The newest snapshot, even if damaged: silently restoring older data than asked
        // for would be worse than failing with the name of the bad file.
        (Selector::Latest, Some(app_dir)) if !ids.is_empty() => load(&app_dir, &ids[ids.len() - 1]),
        (Selector::Latest, _) => Err(MoverError::NoBackup {
            app: app.label(),
            dir: app.dir(),
        }),
        (Selector::Id(id), Some(app_dir)) if ids.contains(id) => load(&app_dir, id),
        (Selector::Id(id), _) => Err(MoverError::NoSuchBackup {
            id: id.to_string(),
            app: app.label(),
            existing: ids.iter().rev().map(ToString::to_string).collect(),
        }),
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
    let Some(app_dir) = open_app_dir(app)? else {
        return Ok(Vec::new());
    };
    Ok(complete_in(&app_dir)?
        .into_iter()
        .map(|(_, info)| info)
        .collect())
}

/// Names of `.tmp-*` directories: backups being written or left by a crash.
pub fn incomplete(app: &App) -> Result<Vec<String>> {
    let Some(app_dir) = open_app_dir(app)? else {
        return Ok(Vec::new());
    };
    Ok(app_dir
        .names()?
        .iter()
        .filter_map(|n| n.to_str())
        .filter(|n| n.starts_with(TMP_PREFIX))
        .map(str::to_owned)
        .collect())
}

/// Removes what crashed runs left: half-written (`.tmp-*`) and half-deleted (`.del-*`)
/// snapshots. Only called with the exclusive lock held, so nothing removed is in use.
pub(crate) fn clean_leftovers(app_dir: &Dir) -> Result<()> {
    for name in app_dir.names()? {
        let Some(name) = name.to_str() else {
            continue;
        };
        if name.starts_with(TMP_PREFIX) || name.starts_with(DEL_PREFIX) {
            crate::warn(format!(
                "removing {} left by an interrupted run",
                app_dir.join(name).display()
            ));
            app_dir.remove_tree(name)?;
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
    /// True if another backup, restore or prune held the lock, so nothing was done (in an
    /// object store: nothing was collected).
    pub busy: bool,
    /// In an object store: the contents deleted because no snapshot names them any more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collected: Option<crate::objstore::Collected>,
}

/// Deletes complete snapshots older than the newest `keep_last` (≥ 1, so the newest good
/// snapshot is never deleted). If a backup, restore or prune is running it does nothing
/// and reports `busy` rather than waiting: pruning is never urgent, and the next backup's
/// `--keep-last` or the next prune catches up.
pub fn prune(app: &App, keep_last: u32) -> Result<PruneOutcome> {
    check_keep_last(keep_last)?;
    let Some(app_dir) = open_app_dir(app)? else {
        return Ok(PruneOutcome::default());
    };
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
    prune_locked(&app_dir, keep_last)
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
pub(crate) fn prune_locked(app_dir: &Dir, keep_last: u32) -> Result<PruneOutcome> {
    let complete = complete_in(app_dir)?;
    let keep = (keep_last as usize).min(complete.len());
    let (kept, old) = complete.split_at(keep);
    let mut pruned = Vec::new();
    for (id, _) in old {
        // Rename first: a prune killed mid-delete leaves a `.del-*` directory that is not
        // listed and is removed by the next run, never a partial snapshot.
        let doomed = format!("{DEL_PREFIX}{id}");
        app_dir.durable_rename(id.as_str(), app_dir, &doomed)?;
        app_dir.remove_tree(&doomed)?;
        pruned.push(id.to_string());
    }
    Ok(PruneOutcome {
        pruned,
        kept: kept.iter().map(|(id, _)| id.to_string()).collect(),
        busy: false,
        collected: None,
    })
}

/// One snapshot in full (`describe`): its manifest's figures. Loading it checked the
/// manifest's seal and tree; `verify` checks the files' contents.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotDetails {
    /// Backup id.
    pub id: String,
    /// `namespace/name` of the app backed up.
    pub app: String,
    /// When the backup started.
    pub time: DateTime<Utc>,
    /// When it finished.
    pub end_time: DateTime<Utc>,
    /// Wall time of the backup.
    pub duration_ms: u64,
    /// Total size of the regular files.
    pub bytes: u64,
    /// Number of regular files.
    pub files: u64,
    /// Bytes copied by this backup.
    pub new_bytes: u64,
    /// Files hard-linked to the backup before.
    pub linked_files: u64,
    /// Files that kept changing while copied (may be torn).
    pub inconsistent_files: u64,
    /// Replica ordinals held.
    pub ordinals: Vec<u32>,
    /// Manifest format.
    pub format: u32,
    /// The manifest's checksum, which matched when it was loaded.
    pub manifest_checksum: String,
    /// Whether it is the newest complete backup (retention never deletes it).
    pub newest: bool,
}

/// The snapshot `selector` names, in full.
pub fn describe(app: &App, selector: &Selector) -> Result<SnapshotDetails> {
    let snapshot = resolve(app, selector)?;
    let newest = match open_app_dir(app)? {
        Some(dir) => latest(&dir)?.is_some_and(|l| l.id == snapshot.id),
        None => false,
    };
    Ok(SnapshotDetails::of(snapshot.manifest, newest))
}

impl SnapshotDetails {
    /// The figures of a loaded (so checked) manifest.
    pub(crate) fn of(m: Manifest, newest: bool) -> Self {
        SnapshotDetails {
            id: m.id,
            app: m.app,
            time: m.start_time,
            end_time: m.end_time,
            duration_ms: m.duration_ms,
            bytes: m.bytes,
            files: m.files,
            new_bytes: m.new_bytes,
            linked_files: m.linked_files,
            inconsistent_files: m.inconsistent_files,
            ordinals: m.ordinals,
            format: m.format,
            manifest_checksum: m.checksum,
            newest,
        }
    }
}

/// What `delete` did.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteOutcome {
    /// The id deleted.
    pub deleted: String,
    /// Complete snapshots left, newest first.
    pub kept: Vec<String>,
}

/// Deletes snapshot `id`, holding the exclusive lock (waiting up to `lock_wait` for a
/// running backup, restore or prune). The newest complete snapshot is refused unless
/// `force`: it is the one a restore or the next incremental backup needs.
pub fn delete(app: &App, id: &BackupId, force: bool, lock_wait: Duration) -> Result<DeleteOutcome> {
    let no_such = |existing: Vec<String>| MoverError::NoSuchBackup {
        id: id.to_string(),
        app: app.label(),
        existing,
    };
    let Some(app_dir) = open_app_dir(app)? else {
        return Err(no_such(Vec::new()));
    };
    let _lock = lock::exclusive(&app_dir, lock_wait)?;
    let ids = snapshot_ids(&app_dir)?;
    if !ids.contains(id) {
        return Err(no_such(ids.iter().rev().map(ToString::to_string).collect()));
    }
    let newest = latest(&app_dir)?.map(|s| s.id);
    if newest.as_ref() == Some(id) && !force {
        return Err(MoverError::Usage(format!(
            "backup {id} is the newest good backup of {}: a restore and the next incremental backup need it, so it is deleted only with --force",
            app.label()
        )));
    }
    let doomed = format!("{DEL_PREFIX}{id}");
    app_dir.durable_rename(id.as_str(), &app_dir, &doomed)?;
    app_dir.remove_tree(&doomed)?;
    app_dir.sync()?;
    let kept = snapshot_ids(&app_dir)?
        .iter()
        .rev()
        .map(ToString::to_string)
        .collect();
    Ok(DeleteOutcome {
        deleted: id.to_string(),
        kept,
    })
}

/// What `purge` did.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PurgeOutcome {
    /// Ids of the snapshots deleted, complete and incomplete, oldest first.
    pub purged: Vec<String>,
    /// Files, directories and symlinks removed.
    pub entries: u64,
}

/// Deletes every snapshot of the app, complete or not, and everything else in its
/// directory except the lock file, holding the exclusive lock (waiting up to
/// `lock_wait`) so that no backup, restore or prune runs meanwhile.
pub fn purge(app: &App, lock_wait: Duration) -> Result<PurgeOutcome> {
    let Some(app_dir) = open_app_dir(app)? else {
        return Ok(PurgeOutcome::default());
    };
    let _lock = lock::exclusive(&app_dir, lock_wait)?;
    let mut outcome = PurgeOutcome::default();
    // Sorted names put `.del-*` and `.tmp-*` before the ids, so a leftover `.del-<id>`
    // is gone before the complete `<id>` is renamed to it.
    for name in app_dir.names()? {
        if name == lock::LOCK_FILE {
            continue;
        }
        let text = name.to_str().unwrap_or_default();
        let id = [TMP_PREFIX, DEL_PREFIX]
            .iter()
            .find_map(|prefix| text.strip_prefix(prefix))
            .unwrap_or(text);
        let is_snapshot = id.parse::<BackupId>().is_ok();
        if is_snapshot && id == text {
            // Renamed first, as in prune: a purge killed midway never leaves a partial
            // snapshot that a restore would pick.
            let doomed = format!("{DEL_PREFIX}{id}");
            app_dir.durable_rename(&name, &app_dir, &doomed)?;
            outcome.entries += app_dir.remove_tree(&doomed)?;
        } else {
            outcome.entries += app_dir.remove_tree(&name)?;
        }
        if is_snapshot && !outcome.purged.iter().any(|p| p == id) {
            outcome.purged.push(id.to_owned());
        }
    }
    app_dir.sync()?;
    outcome.purged.sort_by_key(|id| id.parse::<BackupId>().ok());
    Ok(outcome)
}
