//! Collecting the contents no snapshot names any more, safely beside running backups.
//!
//! A backup may reuse any stored content it listed at its start, so contents must not be
//! deleted while one runs. Backups and collections announce themselves with lock objects
//! (`locks/backup-…`, `locks/collect-…`), each put first and the others listed after: S3
//! reads its own writes, so of two that start together at least one sees the other. A
//! collection runs only when no other lock is fresh and gives way otherwise; a backup waits
//! until no collection's lock is left. A lock older than any mover Job may run is stale.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use object_store::ObjectMeta;
use object_store::path::Path as Key;
use serde::Serialize;

use super::Store;
use crate::error::{MoverError, Result};
use crate::manifest::{Kind, Manifest};

/// Older locks were left by a killed mover: a Job runs 12 hours at most.
const STALE: TimeDelta = TimeDelta::hours(13);
/// How often a waiting backup looks again.
const POLL: Duration = Duration::from_secs(2);

/// A lock object of this process, deleted when dropped.
pub(crate) struct Lock<'a> {
    store: &'a Store,
    key: Key,
}

impl Drop for Lock<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.store.delete_key(&self.key) {
            crate::warn(format!(
                "could not remove the lock {} (it is ignored once stale): {}",
                self.store.address(&self.key).display(),
                crate::chain(&e)
            ));
        }
    }
}

impl Store {
    fn put_lock(&self, kind: &str) -> Result<Lock<'_>> {
        // The pod's name tells two movers apart (their pids are alike).
        let host = std::env::var("HOSTNAME").unwrap_or_default();
        let key = Key::from(format!(
            "locks/{kind}-{}-{}",
            Utc::now().format("%Y%m%dT%H%M%S%.9fZ"),
            host.chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect::<String>()
        ));
        self.put_bytes(&key, bytes::Bytes::new())?;
        Ok(Lock { store: self, key })
    }

    /// The fresh locks other than `mine`.
    fn other_locks(&self, mine: &[&Key]) -> Result<Vec<ObjectMeta>> {
        let locks = self.list_keys("locks")?;
        let now = Utc::now();
        Ok(locks
            .into_iter()
            .filter(|l| !mine.contains(&&l.location) && now - l.last_modified < STALE)
            .collect())
    }
}

fn is_collection(lock: &ObjectMeta) -> bool {
    lock.location
        .filename()
        .is_some_and(|name| name.starts_with("collect-"))
}

/// Announces a backup, then waits (up to `wait`) until no collection runs.
pub(crate) fn lock_backup(store: &Store, wait: Duration) -> Result<Lock<'_>> {
    let lock = store.put_lock("backup")?;
    let started = std::time::Instant::now();
    loop {
        let collecting = store
            .other_locks(&[&lock.key])?
            .into_iter()
            .find(is_collection);
        let Some(collection) = collecting else {
            return Ok(lock);
        };
        if started.elapsed() >= wait {
            return Err(MoverError::Locked {
                path: store.address(&collection.location),
                waited: wait,
            });
        }
        std::thread::sleep(POLL);
    }
}

/// What a collection did.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Collected {
    /// Contents deleted: no snapshot named them.
    pub objects: u64,
    /// Their bytes.
    pub bytes: u64,
    /// True if a backup or another collection ran, so nothing was deleted.
    pub busy: bool,
}

/// Deletes the contents no snapshot names, unless another mover holds a lock (`own` is the
/// caller's own backup lock, if it has one). A manifest that cannot be read stops it: its
/// contents cannot be told apart.
pub(crate) fn collect(store: &Store, own: Option<&Lock<'_>>) -> Result<Collected> {
    let lock = store.put_lock("collect")?;
    let mut mine = vec![&lock.key];
    mine.extend(own.map(|l| &l.key));
    if !store.other_locks(&mine)?.is_empty() {
        crate::warn(format!(
            "a backup or collection of {} is running; unreferenced contents are collected by a later prune",
            store.app().label()
        ));
        return Ok(Collected {
            busy: true,
            ..Collected::default()
        });
    }
    // Contents' BLAKE3s and pack ids: the file names of the objects to keep.
    let mut named: HashSet<String> = HashSet::new();
    for id in store.snapshot_ids()? {
        let snapshot = super::catalog::load(store, &id).map_err(|e| {
            MoverError::Usage(format!(
                "not collecting unreferenced contents: backup {id} cannot be read ({}), so what it names is unknown",
                crate::chain(&e)
            ))
        })?;
        name_contents(&snapshot.manifest, &mut named);
    }
    // A part's contents are named by no snapshot until its set is sealed.
    let parts = super::parts::stored_parts(store, None).map_err(|e| {
        MoverError::Usage(format!(
            "not collecting unreferenced contents: a part of a backup cannot be read ({}), so what it names is unknown",
            crate::chain(&e)
        ))
    })?;
    for (_, part) in &parts {
        name_contents(part, &mut named);
    }
    let mut collected = Collected::default();
    for object in store
        .list_keys("data")?
        .into_iter()
        .chain(store.list_keys("packs")?)
    {
        if object
            .location
            .filename()
            .is_some_and(|name| !named.contains(name))
        {
            store.delete_key(&object.location)?;
            collected.objects += 1;
            collected.bytes += object.size;
        }
    }
    drop(lock);
    Ok(collected)
}

/// Adds the names of the objects holding `manifest`'s contents (BLAKE3s and pack ids).
fn name_contents(manifest: &Manifest, named: &mut HashSet<String>) {
    for replica in &manifest.replicas {
        for entry in replica.entries.iter().filter(|e| e.kind == Kind::File) {
            let name = match &entry.pack {
                Some(pack) => Some(pack.id.clone()),
                None => entry.blake3.clone(),
            };
            named.extend(name);
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::backup::BackupOptions;
    use crate::names::Selector;

    fn volume_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(tmp.path().join("0")).expect("mkdir");
        for (name, text) in files {
            std::fs::write(tmp.path().join("0").join(name), text).expect("write");
        }
        tmp
    }

    /// A backup of the volumes under `source`, pruning nothing, waiting for no lock.
    pub(in crate::objstore) fn options(source: &std::path::Path) -> BackupOptions {
        BackupOptions {
            source: source.to_owned(),
            keep_last: None,
            lock_wait: Duration::ZERO,
            max_bytes: None,
        }
    }

    /// The keys of every content object and pack.
    fn contents(store: &Store) -> Vec<String> {
        let data = store.list_keys("data").expect("list");
        let packs = store.list_keys("packs").expect("list");
        data.into_iter()
            .chain(packs)
            .map(|m| m.location.to_string())
            .collect()
    }

    #[test]
    fn pruning_collects_only_contents_no_snapshot_names() {
        let store = Store::in_memory("ns", "app");
        let volume = volume_with(&[("a", "first")]);
        super::super::backup(&store, &options(volume.path())).expect("first backup");
        let first = contents(&store);
        assert_eq!(first.len(), 1, "one pack: {first:?}");
        std::fs::write(volume.path().join("0/a"), "second").expect("change");
        std::fs::write(volume.path().join("0/b"), "kept").expect("add");
        super::super::backup(&store, &options(volume.path())).expect("second backup");
        assert_eq!(contents(&store).len(), 2);

        let outcome = super::super::prune(&store, 1).expect("prune");
        assert_eq!(outcome.pruned.len(), 1);
        let collected = outcome.collected.expect("collected");
        assert_eq!((collected.objects, collected.busy), (1, false));
        let left = contents(&store);
        assert!(
            left.len() == 1 && !left.contains(&first[0]),
            "only the first backup's pack is collected: {left:?}"
        );
        let report = super::super::verify(&store, &Selector::Latest).expect("verify");
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        assert!(
            store.other_locks(&[]).expect("locks").is_empty(),
            "every lock removed"
        );
    }

    #[test]
    fn larger_files_are_objects_of_their_own_and_collected_as_such() {
        let store = Store::in_memory("ns", "app");
        let volume = volume_with(&[("small", "s")]);
        let large = vec![1u8; super::super::pack::PACKED_MAX as usize + 1];
        std::fs::write(volume.path().join("0/large"), &large).expect("write");
        super::super::backup(&store, &options(volume.path())).expect("first backup");
        let hash = blake3::hash(&large).to_hex().to_string();
        assert!(
            store.has_content(&hash).expect("head"),
            "{:?}",
            contents(&store)
        );
        std::fs::write(volume.path().join("0/large"), "now small").expect("shrink");
        super::super::backup(&store, &options(volume.path())).expect("second backup");
        let collected = super::super::prune(&store, 1)
            .expect("prune")
            .collected
            .expect("collected");
        assert_eq!(
            (collected.objects, collected.bytes),
            (1, large.len() as u64)
        );
        assert!(!store.has_content(&hash).expect("head"));
    }

    #[test]
    fn a_killed_backups_pack_is_not_sent_again() {
        let store = Store::in_memory("ns", "app");
        let volume = volume_with(&[("a", "sent before the kill"), ("b", "not sent")]);
        // What a backup killed before its manifest leaves: a pack holding "a".
        let mut pending = super::super::pack::Pending::default();
        let text = b"sent before the kill";
        let (_, full) = pending.add(&blake3::hash(text).to_hex(), text);
        assert!(full.is_none());
        store.put_pack(pending).expect("put");
        let report = super::super::backup(&store, &options(volume.path())).expect("backup");
        assert_eq!(report.new_bytes, "not sent".len() as u64, "{report:?}");
        let report = super::super::verify(&store, &Selector::Latest).expect("verify");
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }

    #[test]
    fn a_running_backup_holds_collection_off_and_a_collection_holds_backups_off() {
        let store = Store::in_memory("ns", "app");
        let volume = volume_with(&[("a", "first")]);
        super::super::backup(&store, &options(volume.path())).expect("first backup");
        std::fs::write(volume.path().join("0/a"), "second").expect("change");
        super::super::backup(&store, &options(volume.path())).expect("second backup");

        let running = store.put_lock("backup").expect("a backup's lock");
        let outcome = super::super::prune(&store, 1).expect("prune");
        let collected = outcome.collected.expect("collected");
        assert!(collected.busy && collected.objects == 0, "{collected:?}");
        assert_eq!(contents(&store).len(), 2, "nothing deleted");
        drop(running);

        let collecting = store.put_lock("collect").expect("a collection's lock");
        let error = super::super::backup(&store, &options(volume.path()))
            .expect_err("a backup waits for the collection, here not at all")
            .to_string();
        assert!(error.contains("locks/collect-"), "{error}");
        drop(collecting);
        super::super::backup(&store, &options(volume.path())).expect("then it runs");
    }
}
