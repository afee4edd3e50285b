//! The snapshots of one app in an object store: listing, resolving `latest`, checking,
//! and deleting. A snapshot is its manifest object; the contents it names are shared.

use std::collections::HashSet;

use futures::TryStreamExt;
use object_store::path::Path as Key;

use super::Store;
use super::collect::{Lock, collect};
use crate::catalog::{
    DeleteOutcome, PruneOutcome, PurgeOutcome, SnapshotDetails, SnapshotInfo, check_keep_last,
};
use crate::error::{MoverError, Result};
use crate::manifest::{Kind, Manifest, PackRef};
use crate::names::{BackupId, Selector};
use crate::verify::VerifyReport;

/// A complete snapshot in the store, with its checked manifest.
#[derive(Debug)]
pub(crate) struct StoredSnapshot {
    pub id: BackupId,
    pub manifest: Manifest,
}

/// Loads and checks snapshot `id`'s manifest.
pub(crate) fn load(store: &Store, id: &BackupId) -> Result<StoredSnapshot> {
    let key = Store::manifest_key(id);
    let address = store.address(&key);
    let Some(bytes) = store.get_bytes(&key)? else {
        return Err(MoverError::NoSuchBackup {
            id: id.to_string(),
            app: store.app().label(),
            existing: Vec::new(),
        });
    };
    let manifest = Manifest::parse_inline(&bytes, &address, id.as_str())?;
    Ok(StoredSnapshot {
        id: id.clone(),
        manifest,
    })
}

/// The newest snapshot whose manifest loads, if any: the base of the next backup.
pub(crate) fn latest(store: &Store, ids: &[BackupId]) -> Option<StoredSnapshot> {
    for id in ids.iter().rev() {
        match load(store, id) {
            Ok(snapshot) => return Some(snapshot),
            Err(e) => crate::warn(format!("skipping backup {id}: {}", crate::chain(&e))),
        }
    }
    None
}

/// The snapshot `selector` names; `latest` is the newest even if damaged (as on a node).
pub(crate) fn resolve(store: &Store, selector: &Selector) -> Result<StoredSnapshot> {
    let ids = store.snapshot_ids()?;
    match selector {
        Selector::Latest => match ids.last() {
            Some(id) => load(store, id),
            None => Err(MoverError::NoBackup {
                app: store.app().label(),
                dir: store.app().dir(),
            }),
        },
        Selector::Id(id) if ids.contains(id) => load(store, id),
        Selector::Id(id) => Err(MoverError::NoSuchBackup {
            id: id.to_string(),
            app: store.app().label(),
            existing: ids.iter().rev().map(ToString::to_string).collect(),
        }),
    }
}

/// Whether the app has any snapshot at all (valid or not).
pub(crate) fn any(store: &Store) -> Result<bool> {
    Ok(!store.snapshot_ids()?.is_empty())
}

/// The complete snapshots, newest first; damaged ones are named on stderr and skipped.
pub fn list(store: &Store) -> Result<Vec<SnapshotInfo>> {
    let mut out = Vec::new();
    for id in store.snapshot_ids()?.into_iter().rev() {
        match load(store, &id) {
            Ok(s) => out.push(SnapshotInfo::from(&s.manifest)),
            Err(e) => crate::warn(format!("skipping backup {id}: {}", crate::chain(&e))),
        }
    }
    Ok(out)
}

/// The snapshot `selector` names, in full.
pub fn describe(store: &Store, selector: &Selector) -> Result<SnapshotDetails> {
    let snapshot = resolve(store, selector)?;
    let newest = latest(store, &store.snapshot_ids()?).is_some_and(|l| l.id == snapshot.id);
    Ok(SnapshotDetails::of(snapshot.manifest, newest))
}

/// Downloads every object the snapshot names and checks its size and BLAKE3.
pub fn verify(store: &Store, selector: &Selector) -> Result<VerifyReport> {
    let snapshot = resolve(store, selector)?;
    // Each content once where it lies (the same content may lie in two places).
    let mut checked: HashSet<(&str, Option<&PackRef>)> = HashSet::new();
    let mut problems = Vec::new();
    let (mut files, mut bytes) = (0u64, 0u64);
    for replica in &snapshot.manifest.replicas {
        for entry in replica.entries.iter().filter(|e| e.kind == Kind::File) {
            files += 1;
            bytes += entry.size;
            let Some(blake3) = entry.blake3.as_deref() else {
                problems.push(format!(
                    "{}/{}: no checksum",
                    replica.ordinal,
                    entry.rel_path().display()
                ));
                continue;
            };
            if !checked.insert((blake3, entry.pack.as_ref())) {
                continue;
            }
            let name = || {
                format!(
                    "{}/{} ({})",
                    replica.ordinal,
                    entry.rel_path().display(),
                    store.content_address(entry).display()
                )
            };
            match store.fetch_content(entry, |_| Ok(()))? {
                None => problems.push(format!("{}: missing", name())),
                Some((len, _)) if len != entry.size => problems.push(format!(
                    "{}: {len} bytes, the manifest says {}",
                    name(),
                    entry.size
                )),
                Some((_, hash)) if hash.to_hex().as_str() != blake3 => {
                    problems.push(format!("{}: contents do not match their checksum", name()))
                }
                Some(_) => {}
            }
        }
    }
    Ok(VerifyReport {
        id: snapshot.id.to_string(),
        files,
        bytes,
        problems,
    })
}

/// Deletes snapshot `id`'s manifest; the newest good one only with `force`. Its contents
/// stay (other snapshots share them).
pub fn delete(store: &Store, id: &BackupId, force: bool) -> Result<DeleteOutcome> {
    let ids = store.snapshot_ids()?;
    if !ids.contains(id) {
        return Err(MoverError::NoSuchBackup {
            id: id.to_string(),
            app: store.app().label(),
            existing: ids.iter().rev().map(ToString::to_string).collect(),
        });
    }
    if latest(store, &ids).is_some_and(|l| l.id == *id) && !force {
        return Err(MoverError::Usage(format!(
            "backup {id} is the newest good backup of {}: a restore and the next incremental backup need it, so it is deleted only with --force",
            store.app().label()
        )));
    }
    store.delete_key(&Store::manifest_key(id))?;
    let collected = collect(store, None)?;
    if collected.objects > 0 {
        eprintln!(
            "note: {} contents no backup names any more were deleted ({} bytes)",
            collected.objects, collected.bytes
        );
    }
    if collected.recent > 0 {
        eprintln!(
            "note: {} contents no backup names any more were stored within the last {} hour(s); a later prune or backup deletes them",
            collected.recent,
            super::collect::GRACE.num_hours()
        );
    }
    Ok(DeleteOutcome {
        deleted: id.to_string(),
        kept: ids
            .iter()
            .rev()
            .filter(|i| *i != id)
            .map(ToString::to_string)
            .collect(),
    })
}

/// Deletes the manifests of complete snapshots older than the newest `keep_last` (≥ 1),
/// then collects the contents no snapshot names any more.
pub fn prune(store: &Store, keep_last: u32) -> Result<PruneOutcome> {
    prune_holding(store, keep_last, None)
}

/// [`prune`] by a backup that holds `own` lock. Collecting is left to a later prune, with
/// a warning, when it fails (a manifest that cannot be read, the store failing): what was
/// pruned stays pruned, and a backup that pruned after storing its snapshot has succeeded
/// (failing it would only have its Job's retry store another snapshot).
pub(crate) fn prune_holding(
    store: &Store,
    keep_last: u32,
    own: Option<&Lock<'_>>,
) -> Result<PruneOutcome> {
    check_keep_last(keep_last)?;
    let complete = list(store)?;
    let keep = (keep_last as usize).min(complete.len());
    let (kept, old) = complete.split_at(keep);
    let mut pruned = Vec::new();
    for snapshot in old {
        let id: BackupId = snapshot.id.parse()?;
        store.delete_key(&Store::manifest_key(&id))?;
        pruned.push(snapshot.id.clone());
    }
    let collected = match collect(store, own) {
        Ok(collected) => Some(collected),
        Err(e) => {
            crate::warn(format!(
                "contents no backup names were not collected: {}",
                crate::chain(&e)
            ));
            None
        }
    };
    Ok(PruneOutcome {
        pruned,
        kept: kept.iter().map(|s| s.id.clone()).collect(),
        busy: collected.as_ref().is_some_and(|c| c.busy),
        collected,
    })
}

/// Deletes every object of the app: manifests first (so no snapshot is left naming
/// deleted contents), then the contents.
pub fn purge(store: &Store) -> Result<PurgeOutcome> {
    let ids = store.snapshot_ids()?;
    let mut outcome = PurgeOutcome::default();
    for id in &ids {
        store.delete_key(&Store::manifest_key(id))?;
        outcome.purged.push(id.to_string());
        outcome.entries += 1;
    }
    let everything: Vec<_> = store
        .block_on(store.objects.list(None).try_collect::<Vec<_>>())
        .map_err(store.failed("list", &Key::from("")))?;
    for meta in everything {
        store.delete_key(&meta.location)?;
        outcome.entries += 1;
    }
    Ok(outcome)
}
