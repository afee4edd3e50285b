//! Collecting the contents no snapshot names any more, safely beside running backups.
//!
//! A backup may reuse any stored content it listed at its start, so contents must not be
//! deleted while one runs. Backups and collections announce themselves with lock objects
//! (`locks/backup-…`, `locks/collect-…`), each put first and the others listed after: S3
//! reads its own writes, so of two that start together at least one sees the other. A
//! collection runs only when no other lock is fresh, looks again just before it deletes,
//! and gives way otherwise; a backup waits until no collection's lock is fresh.
//!
//! A lock is a lease: its mover puts it again every `Lease::renew` while it runs, so one
//! not renewed for `Lease::duration` was left by a mover that was killed, and is passed
//! over (and deleted by the next collection) — a killed collection holds backups off for
//! minutes, not for as long as a Job may run. Ages are read on the store's clock (the
//! times it gave the locks, this mover's own among them), never the pod's. Locks of movers
//! older than leases (their names lack `.lease`) are never renewed, and stay fresh for as
//! long as a Job may run.

use std::collections::HashSet;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use object_store::path::Path as Key;
use object_store::{ObjectMeta, ObjectStoreExt};
use serde::Serialize;

use super::Store;
use crate::error::{MoverError, Result};
use crate::manifest::{Kind, Manifest};

/// Older unrenewed locks were left by a killed mover: a Job runs 12 hours at most.
const UNRENEWED_STALE: TimeDelta = TimeDelta::hours(13);
/// The end of the name of a lock that its mover renews.
const LEASED: &str = ".lease";
/// How often a waiting backup looks again.
const POLL: Duration = Duration::from_secs(2);
/// Contents stored this recently are never collected, named or not: they may be the
/// uploads of a backup whose lock a listing that lags did not show yet.
pub(super) const GRACE: TimeDelta = TimeDelta::hours(1);

/// How a mover keeps its locks fresh, and how long another's stays fresh unrenewed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Lease {
    /// How often a held lock is put again.
    renew: Duration,
    /// How long after its last renewal a lock is fresh: many renewals, each retried for
    /// up to half a minute, may fail before a live mover's lock goes stale.
    duration: TimeDelta,
}

impl Default for Lease {
    fn default() -> Self {
        Lease {
            renew: Duration::from_secs(30),
            duration: TimeDelta::minutes(5),
        }
    }
}

/// A lock object of this process, renewed while held and deleted when dropped.
pub(crate) struct Lock<'a> {
    store: &'a Store,
    key: Key,
    renewal: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
}

impl Drop for Lock<'_> {
    fn drop(&mut self) {
        if let Some((stop, renewing)) = self.renewal.take() {
            drop(stop);
            // Joined before the delete: no renewal may put the lock back after it.
            let _ = renewing.join();
        }
        if let Err(e) = self.store.delete_key(&self.key) {
            crate::warn(format!(
                "could not remove the lock {} (it is ignored once stale): {}",
                self.store.address(&self.key).display(),
                crate::chain(&e)
            ));
        }
    }
}

/// The locks of other movers, as one listing showed them.
struct Locks {
    /// Held by a live mover (or one not known to be dead).
    fresh: Vec<ObjectMeta>,
    /// Left by a mover that was killed.
    stale: Vec<ObjectMeta>,
    /// The store's time, as near as the listing tells.
    now: DateTime<Utc>,
}

impl Store {
    fn put_lock(&self, kind: &str) -> Result<Lock<'_>> {
        // The pod's name tells two movers apart (their pids are alike).
        let host = std::env::var("HOSTNAME").unwrap_or_default();
        let key = Key::from(format!(
            "locks/{kind}-{}-{}{LEASED}",
            Utc::now().format("%Y%m%dT%H%M%S%.9fZ"),
            host.chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect::<String>()
        ));
        self.put_bytes(&key, bytes::Bytes::new())?;
        let (stop, stopped) = mpsc::channel::<()>();
        let (objects, runtime, renew) = (
            self.objects.clone(),
            self.runtime.handle().clone(),
            self.lease.renew,
        );
        let renewed = key.clone();
        let address = self.address(&key);
        let renewing = std::thread::Builder::new()
            .name("lock-renewal".into())
            .spawn(move || {
                // Until the lock is dropped (its sender with it).
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(renew) {
                    let put = objects.put(&renewed, bytes::Bytes::new().into());
                    if let Err(e) = runtime.block_on(put) {
                        crate::warn(format!(
                            "could not renew the lock {}: {}",
                            address.display(),
                            crate::chain(&e)
                        ));
                    }
                }
            });
        let renewing = renewing.map_err(|source| MoverError::Io {
            action: "start renewing the lock",
            path: self.address(&key),
            source,
        })?;
        Ok(Lock {
            store: self,
            key,
            renewal: Some((stop, renewing)),
        })
    }

    /// The locks other than `mine`, fresh or stale.
    fn other_locks(&self, mine: &[&Key]) -> Result<Locks> {
        let locks = self.list_keys("locks")?;
        // The store's clock: the time it gave this mover's own newest lock (a listing that
        // lags may not show it yet: then the pod's clock).
        let now = locks
            .iter()
            .filter(|l| mine.contains(&&l.location))
            .map(|l| l.last_modified)
            .max()
            .unwrap_or_else(Utc::now);
        let (fresh, stale) = locks
            .into_iter()
            .filter(|l| !mine.contains(&&l.location))
            .partition(|l| is_fresh(l, now, self.lease.duration));
        Ok(Locks { fresh, stale, now })
    }
}

/// Whether `lock` is held by a live mover at `now` (the store's time).
fn is_fresh(lock: &ObjectMeta, now: DateTime<Utc>, lease: TimeDelta) -> bool {
    let leased = lock
        .location
        .filename()
        .is_some_and(|name| name.ends_with(LEASED));
    now - lock.last_modified < if leased { lease } else { UNRENEWED_STALE }
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
            .fresh
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
    /// Contents no snapshot names, left for a later collection: stored too recently.
    pub recent: u64,
}

/// Deletes the contents no snapshot names, unless another mover holds a lock (`own` is the
/// caller's own backup lock, if it has one). A manifest that cannot be read stops it: its
/// contents cannot be told apart.
pub(crate) fn collect(store: &Store, own: Option<&Lock<'_>>) -> Result<Collected> {
    let lock = store.put_lock("collect")?;
    let mut mine = vec![&lock.key];
    mine.extend(own.map(|l| &l.key));
    let busy = || {
        crate::warn(format!(
            "a backup or collection of {} is running; unreferenced contents are collected by a later prune",
            store.app().label()
        ));
        Ok(Collected {
            busy: true,
            ..Collected::default()
        })
    };
    let locks = store.other_locks(&mine)?;
    if !locks.fresh.is_empty() {
        return busy();
    }
    for stale in &locks.stale {
        crate::warn(format!(
            "removing the lock {} of a mover that was killed (not renewed since {})",
            store.address(&stale.location).display(),
            stale.last_modified
        ));
        store.delete_key(&stale.location)?;
    }
    // Contents' BLAKE3s and pack ids: the file names of the objects to keep.
    let mut named: HashSet<String> = HashSet::new();
    for id in store.snapshot_ids()? {
        let snapshot = super::catalog::load(store, &id).map_err(|e| {
            MoverError::Usage(format!(
                "not collecting unreferenced contents: backup {id} cannot be read ({}), so what it names is unknown; \
                 if it is damaged, delete it ({})",
                crate::chain(&e),
                store.app().delete_command(&id)
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
    let stored: Vec<ObjectMeta> = store
        .list_keys("data")?
        .into_iter()
        .chain(store.list_keys("packs")?)
        .collect();
    // Reading every manifest took a while: a backup that began meanwhile (and saw no lock
    // of this collection in a listing that lagged) may already reuse what is unnamed.
    let locks = store.other_locks(&mine)?;
    if !locks.fresh.is_empty() {
        return busy();
    }
    let mut collected = Collected::default();
    for object in stored {
        if object
            .location
            .filename()
            .is_some_and(|name| !named.contains(name))
        {
            if locks.now - object.last_modified < store.collect_grace {
                collected.recent += 1;
                continue;
            }
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
            reread: false,
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
        let locks = store.other_locks(&[]).expect("locks");
        assert!(
            locks.fresh.is_empty() && locks.stale.is_empty(),
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

    /// A store whose locks are renewed every 10 ms and stale 300 ms after their last renewal.
    fn store_of_short_leases() -> Store {
        let mut store = Store::in_memory("ns", "app");
        store.lease = Lease {
            renew: Duration::from_millis(10),
            duration: TimeDelta::milliseconds(300),
        };
        store
    }

    fn modified(store: &Store, key: &Key) -> Option<DateTime<Utc>> {
        let locks = store.list_keys("locks").expect("list");
        Some(
            locks
                .into_iter()
                .find(|l| &l.location == key)?
                .last_modified,
        )
    }

    /// Waits (up to 10 s) until `done`.
    fn eventually(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "never: {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_held_lock_is_renewed_until_it_is_dropped_then_gone() {
        let store = store_of_short_leases();
        let lock = store.put_lock("backup").expect("lock");
        let key = lock.key.clone();
        assert!(key.as_ref().ends_with(LEASED), "{key}");
        let first = modified(&store, &key).expect("stored");
        eventually("the lock renewed", || {
            modified(&store, &key).is_some_and(|at| at > first)
        });
        drop(lock);
        assert_eq!(modified(&store, &key), None, "no renewal puts it back");
    }

    #[test]
    fn a_lock_is_fresh_for_its_lease_or_unrenewed_for_as_long_as_a_job_runs() {
        let now = Utc::now();
        let lock = |name: &str, age: TimeDelta| ObjectMeta {
            location: Key::from(format!("locks/{name}")),
            last_modified: now - age,
            size: 0,
            e_tag: None,
            version: None,
        };
        let lease = TimeDelta::minutes(5);
        let leased = "collect-20261203T100000.000000000Z-pod.lease";
        assert!(is_fresh(&lock(leased, TimeDelta::minutes(4)), now, lease));
        assert!(!is_fresh(&lock(leased, TimeDelta::minutes(5)), now, lease));
        // Put after the store's "now" (a listing of another mover's newer renewal).
        assert!(is_fresh(&lock(leased, TimeDelta::seconds(-3)), now, lease));
        // A mover of an earlier version never renews its lock.
        let unrenewed = "collect-20261203T100000.000000000Z-pod";
        assert!(is_fresh(&lock(unrenewed, TimeDelta::hours(12)), now, lease));
        assert!(!is_fresh(
            &lock(unrenewed, TimeDelta::hours(13)),
            now,
            lease
        ));
    }

    #[test]
    fn a_killed_collections_lock_holds_backups_off_only_until_its_lease_ends() {
        let store = store_of_short_leases();
        let volume = volume_with(&[("a", "first")]);
        // What a collection killed midway leaves: its lock, renewed no more.
        let dead = Key::from("locks/collect-20261203T100000.000000000Z-killed.lease");
        store.put_bytes(&dead, bytes::Bytes::new()).expect("put");
        let waiting = BackupOptions {
            lock_wait: Duration::from_secs(30),
            ..options(volume.path())
        };
        super::super::backup(&store, &waiting).expect("the backup runs once the lease ends");
        // The next collection removes it.
        super::super::prune(&store, 1).expect("prune");
        assert_eq!(modified(&store, &dead), None, "the stale lock removed");

        // A lock of an earlier mover (never renewed) is trusted for as long as a Job runs.
        let earlier = Key::from("locks/collect-20261203T100000.000000000Z-earlier");
        store.put_bytes(&earlier, bytes::Bytes::new()).expect("put");
        let error = super::super::backup(&store, &options(volume.path()))
            .expect_err("held off")
            .to_string();
        assert!(error.contains("locks/collect-"), "{error}");
    }

    /// One manifest that cannot be read: what it names is unknown, so nothing is collected,
    /// but the backup that stored its snapshot before pruning has succeeded (failing it
    /// would only have its Job's retry store another snapshot).
    #[test]
    fn a_damaged_manifest_stops_collecting_but_fails_no_backup() {
        let store = Store::in_memory("ns", "app");
        let volume = volume_with(&[("a", "first")]);
        super::super::backup(&store, &options(volume.path())).expect("first backup");
        let damaged = store.snapshot_ids().expect("ids")[0].clone();
        store
            .put_bytes(
                &Store::manifest_key(&damaged),
                bytes::Bytes::from_static(b"{not json"),
            )
            .expect("damage it");
        std::fs::write(volume.path().join("0/a"), "second").expect("change");
        let pruning = BackupOptions {
            keep_last: Some(5),
            ..options(volume.path())
        };
        let report = super::super::backup(&store, &pruning).expect("the backup succeeds");
        assert!(report.pruned.is_empty(), "{report:?}");
        assert_eq!(
            (report.snapshots, report.oldest.as_deref()),
            (Some(1), Some(report.id.as_str())),
            "only the snapshots that can be read are counted"
        );
        assert_eq!(
            store.snapshot_ids().expect("ids").len(),
            2,
            "one snapshot more"
        );
        let error = collect(&store, None)
            .expect_err("nothing collected")
            .to_string();
        assert!(
            error.contains(&format!("backups delete app {damaged}")),
            "says how to get rid of it: {error}"
        );
    }

    /// Contents stored within the grace period are left, named or not (they may be the
    /// uploads of a backup whose lock a lagging listing did not show), and collected once
    /// older.
    #[test]
    fn recently_stored_contents_are_left_for_a_later_collection() {
        let mut store = Store::in_memory("ns", "app");
        store.collect_grace = GRACE;
        let volume = volume_with(&[("a", "first")]);
        super::super::backup(&store, &options(volume.path())).expect("first backup");
        std::fs::write(volume.path().join("0/a"), "second").expect("change");
        super::super::backup(&store, &options(volume.path())).expect("second backup");
        let outcome = super::super::prune(&store, 1).expect("prune");
        let collected = outcome.collected.expect("collected");
        assert_eq!(
            (collected.objects, collected.recent),
            (0, 1),
            "{collected:?}"
        );
        assert_eq!(contents(&store).len(), 2, "nothing deleted");

        store.collect_grace = TimeDelta::zero();
        let collected = collect(&store, None).expect("collect");
        assert_eq!(
            (collected.objects, collected.recent),
            (1, 0),
            "{collected:?}"
        );
    }
}
