//! A restore made in parts: when an app's replicas keep their volumes on different nodes,
//! no one pod can mount them all, so the all-or-nothing swap of `swap` becomes a two-phase
//! commit whose coordinator's decision is kept in the store:
//!
//! 1. `restore --part-of SET --from X`, one pod per volume: stages the snapshot on the
//!    volume, marks it `Prepared` (journal naming SET), and records what it staged at
//!    `restores/<set>/<ordinal>.json`. Live data is untouched. The records are always those
//!    of the app the volumes are, even when the snapshot is another app's (`--into-app`):
//!    a later restore of these volumes, from whichever backups, must find them.
//! 2. `commit-restore --part-of SET --replicas N`, once every part ended: checks that
//!    every ordinal staged, and the same backup, then writes `restores/<set>/commit.json`.
//!    From then on the set is committed: every volume of it is rolled forward, whatever
//!    fails.
//! 3. `restore --part-of SET --swap`, one pod per volume again: swaps the staged data in,
//!    and removes the volume's record (the last one removes the commit record). Or, when
//!    the commit was refused, `restore --part-of SET --undo` on each volume that staged:
//!    removes its staging now rather than at the volume's next restore (it takes as much
//!    room as the backup).
//!
//! Any restore of a volume first recovers a journal of a set: rolled forward if the set's
//! commit record exists (or its swap began), else rolled back ([`swap::recover_parts`]).
//!
//! A record must never outlive the staging it describes, else a commit would take a volume
//! whose staging is gone for staged, and its swap would find nothing to swap in. So a stage
//! writes its staging, then its journal, then its record; and whatever drops a staging
//! never committed (a retried stage, the volume's next restore, an undo) removes its
//! record first. A crash in between leaves at worst a staging no record names: the commit
//! is refused and the staging dropped later. A swap marks its volume swapped in before its
//! journal goes, and removes its record after: so it fails on a volume of a committed set
//! that holds neither journal nor mark of it, and, run again after it finished, reports
//! the volume restored again.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::path::Path as Key;
use serde::{Deserialize, Serialize};

use super::parts::STALE_PARTS;
use super::{PartSet, Store};
use crate::confined::Dir;
use crate::error::{MoverError, Result};
use crate::restore::{self, RestoreOptions, RestoreOutcome, RestoreReport, Source};
use crate::{swap, volumes};

/// What one pod staged, as recorded for the coordinator.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StagedPart {
    /// The backup staged; None when the app has no backup at all and the restore was asked
    /// only if one exists (a newly created app then starts empty).
    pub id: Option<String>,
    /// The volumes this pod mounted.
    pub volumes: Vec<u32>,
    /// Those the backup holds data for, now staged (the others are left as they are).
    pub staged: Vec<u32>,
    pub bytes: u64,
    pub files: u64,
    pub duration_ms: u64,
}

/// The coordinator's decision: the set goes ahead with this backup.
#[derive(Debug, Serialize, Deserialize)]
struct Committed {
    id: String,
}

fn set_prefix(set: &PartSet) -> String {
    format!("restores/{set}")
}

fn record_key(set: &PartSet, ordinal: u32) -> Key {
    Key::from(format!("{}/{ordinal}.json", set_prefix(set)))
}

fn commit_key(set: &PartSet) -> Key {
    Key::from(format!("{}/commit.json", set_prefix(set)))
}

impl Store {
    fn get_json<T: for<'de> Deserialize<'de>>(&self, key: &Key) -> Result<Option<T>> {
        let Some(bytes) = self.get_bytes(key)? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| MoverError::ManifestParse {
                path: self.address(key),
                source,
            })
    }

    fn put_json(&self, key: &Key, value: &impl Serialize) -> Result<()> {
        let bytes = serde_json::to_vec(value).map_err(|source| MoverError::ManifestParse {
            path: self.address(key),
            source,
        })?;
        self.put_bytes(key, Bytes::from(bytes))
    }

    /// Removes the record of what `ordinal` staged for restore set `set` (a journal names
    /// it: one that is no set of ours has no records).
    fn unrecord_stage(&self, set: &str, ordinal: u32) -> Result<()> {
        match set.parse::<PartSet>() {
            Ok(set) => self.delete_key(&record_key(&set, ordinal)),
            Err(_) => Ok(()),
        }
    }

    /// Whether restore set `set` was committed (a journal names it: it is one word of
    /// DNS-label characters, else it is no set of ours and was never committed).
    fn restore_committed(&self, set: &str) -> Result<bool> {
        match set.parse::<PartSet>() {
            Ok(set) => Ok(self.get_json::<Committed>(&commit_key(&set))?.is_some()),
            Err(_) => Ok(false),
        }
    }
}

/// Phase 1, in the pod of one volume (or a few) under `options.dest`: stages the backup of
/// `store` and records it for the coordinator in `records`, the place of the app the
/// volumes are (`store` itself, unless the backup is another app's: `spec.restoreFrom`).
/// The live data is not touched.
pub fn stage_part(
    store: &Store,
    records: &Store,
    options: &RestoreOptions,
    set: &PartSet,
) -> Result<StagedPart> {
    let started = Instant::now();
    let volumes = volumes::ordinal_dirs(&options.dest)?;
    let _volume_locks = swap::lock_volumes(&volumes, options.lock_wait)?;
    // Also undoes this set's own staging, record first, when this pod is a retry.
    recover(records, &volumes)?;
    let mounted: Vec<u32> = volumes.iter().map(|(o, _)| *o).collect();
    let part = if options.if_exists && !super::any(store)? {
        StagedPart {
            id: None,
            volumes: mounted.clone(),
            staged: Vec::new(),
            bytes: 0,
            files: 0,
            duration_ms: started.elapsed().as_millis() as u64,
        }
    } else {
        let snapshot = super::resolve(store, &options.from)?;
        let source = Source::Store(store, &snapshot);
        let staged = restore::stage_volumes(&source, &volumes, &options.dest)?;
        swap::prepare(
            &staged.volumes,
            source.id(),
            &staged.ordinals,
            Some(&set.to_string()),
        )?;
        staged.warn();
        StagedPart {
            id: Some(snapshot.id.to_string()),
            staged: staged.ordinals.clone(),
            volumes: mounted.clone(),
            bytes: staged.bytes,
            files: staged.files,
            duration_ms: started.elapsed().as_millis() as u64,
        }
    };
    // Last, once the staging is durable and journaled: a failure before leaves a staging
    // without a record, one after both, which a retry drops record first.
    for ordinal in mounted {
        records.put_json(&record_key(set, ordinal), &part)?;
    }
    Ok(part)
}

/// Phase 2, in a pod of its own once every part ended: commits `set` if every ordinal of
/// `0..replicas` staged the same backup. Else nothing was committed: the set's records
/// are removed and the volumes keep their data (the next restore of each drops its
/// staging). When every part found no backup at all (`--if-exists`), there is nothing to
/// commit: says so.
pub fn commit(store: &Store, set: &PartSet, replicas: u32) -> Result<RestoreOutcome> {
    let started = Instant::now();
    // Committed by an earlier run of this set whose end went unrecorded (its Job made
    // again once the first was gone, say): some volume may be swapped in already, so the
    // commit stands, whatever the records say now, and its swaps finish it.
    if let Some(committed) = store.get_json::<Committed>(&commit_key(set))? {
        return Ok(RestoreOutcome::Restored(RestoreReport {
            restored: true,
            id: committed.id,
            bytes: 0,
            files: 0,
            duration_ms: started.elapsed().as_millis() as u64,
            ordinals: Vec::new(),
        }));
    }
    let mut parts = Vec::new();
    let mut missing = Vec::new();
    for ordinal in 0..replicas {
        match store.get_json::<StagedPart>(&record_key(set, ordinal))? {
            Some(part) => parts.push(part),
            None => missing.push(ordinal),
        }
    }
    let ids: std::collections::BTreeSet<Option<&str>> =
        parts.iter().map(|p| p.id.as_deref()).collect();
    let refusal = if !missing.is_empty() {
        Some(format!(
            "ordinal(s) {missing:?} did not stage restore {set}: their parts failed or never ran"
        ))
    } else if ids.len() > 1 {
        Some(format!(
            "the parts of restore {set} staged different backups ({}): one was made meanwhile",
            ids.into_iter()
                .map(|id| id.unwrap_or("none"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    } else {
        None
    };
    if let Some(refusal) = refusal {
        for key in store.list_keys(&set_prefix(set))? {
            store.delete_key(&key.location)?;
        }
        return Err(MoverError::Usage(format!(
            "{}: {refusal}; nothing was committed, the live data was not replaced",
            store.app().label()
        )));
    }
    let Some(id) = parts.first().and_then(|p| p.id.clone()) else {
        for key in store.list_keys(&set_prefix(set))? {
            store.delete_key(&key.location)?;
        }
        return Ok(restore::not_restored());
    };
    // Before the commit, so that a commit record is never left by a commit that failed.
    remove_stale_sets(store)?;
    store.put_json(&commit_key(set), &Committed { id: id.clone() })?;
    let mut ordinals: Vec<u32> = parts.iter().flat_map(|p| p.staged.clone()).collect();
    ordinals.sort_unstable();
    Ok(RestoreOutcome::Restored(RestoreReport {
        restored: true,
        id,
        bytes: parts.iter().map(|p| p.bytes).sum(),
        files: parts.iter().map(|p| p.files).sum(),
        duration_ms: started.elapsed().as_millis() as u64,
        ordinals,
    }))
}

/// The records of sets that never committed and are older than a Job can run. A commit
/// record stays until every volume of its set swapped (a volume may still need it).
fn remove_stale_sets(store: &Store) -> Result<()> {
    let now = chrono::Utc::now();
    let keys = store.list_keys("restores")?;
    let committed: Vec<String> = keys
        .iter()
        .filter(|k| k.location.filename() == Some("commit.json"))
        .filter_map(|k| k.location.parts().nth(1).map(|p| p.as_ref().to_owned()))
        .collect();
    for key in keys {
        let set = key.location.parts().nth(1).map(|p| p.as_ref().to_owned());
        let stale = now - key.last_modified > STALE_PARTS;
        if stale && set.is_some_and(|set| !committed.contains(&set)) {
            store.delete_key(&key.location)?;
        }
    }
    Ok(())
}

/// Finishes or undoes, under their locks, whatever restore was interrupted in `volumes`,
/// made in parts or not (see [`swap::recover_parts`]), asking the store whether a set was
/// committed, and removing the record of a staging before it is undone.
pub(crate) fn recover(store: &Store, volumes: &[(u32, Dir)]) -> Result<()> {
    let committed = |set: &str| store.restore_committed(set);
    let unrecord = |set: &str, ordinal| store.unrecord_stage(set, ordinal);
    for set in swap::recover_parts(volumes, committed, unrecord)? {
        forget_volumes(store, &set, volumes)?;
    }
    Ok(())
}

/// Removes the records of `volumes` from set `set`, whose swap they finished, and the
/// set's commit record with the last of them.
fn forget_volumes(store: &Store, set: &str, volumes: &[(u32, Dir)]) -> Result<()> {
    let Ok(set) = set.parse::<PartSet>() else {
        return Ok(()); // no set of ours: it has no records
    };
    for (ordinal, _) in volumes {
        store.delete_key(&record_key(&set, *ordinal))?;
    }
    let left = store.list_keys(&set_prefix(&set))?;
    if left.iter().all(|k| k.location == commit_key(&set)) {
        store.delete_key(&commit_key(&set))?;
    }
    Ok(())
}

/// Phase 3, in the pod of one volume (or a few) under `dest`: swaps the staged backup of
/// committed set `set` in, then removes the volume's record. Run again after it finished
/// (its end went unreported), it finds its volumes marked swapped in and reports so again.
/// Fails, changing nothing, when a volume that staged holds neither its staging nor that
/// mark: the staging was lost, and its live data is not the backup.
pub fn swap_part(
    store: &Store,
    dest: &Path,
    lock_wait: Duration,
    set: &PartSet,
) -> Result<RestoreReport> {
    let started = Instant::now();
    let volumes = volumes::ordinal_dirs(dest)?;
    let _volume_locks = swap::lock_volumes(&volumes, lock_wait)?;
    let name = set.to_string();
    let mut states = Vec::new();
    for (ordinal, volume) in &volumes {
        states.push((*ordinal, volume, swap::part_state(volume, &name)?));
    }
    let Some(committed) = store.get_json::<Committed>(&commit_key(set))? else {
        // The last volume's swap removes the commit record: this is a run again of it if
        // every volume is marked.
        let marked: Option<Vec<&String>> = states
            .iter()
            .map(|(.., state)| match state {
                swap::PartState::Swapped(id) => Some(id),
                _ => None,
            })
            .collect();
        return match marked.as_deref() {
            Some([id, ..]) => Ok(RestoreReport {
                restored: true,
                id: (*id).clone(),
                bytes: 0,
                files: 0,
                duration_ms: started.elapsed().as_millis() as u64,
                ordinals: Vec::new(),
            }),
            _ => Err(MoverError::Usage(format!(
                "{}: restore {set} was not committed: nothing to swap in",
                store.app().label()
            ))),
        };
    };
    let mut part: Option<StagedPart> = None;
    let mut unstaged = Vec::new();
    for (ordinal, volume, state) in &states {
        let record: Option<StagedPart> = store.get_json(&record_key(set, *ordinal))?;
        if *state == swap::PartState::Absent {
            match &record {
                // The backup holds no data for this volume: nothing to swap in.
                Some(record) if !record.staged.contains(ordinal) => unstaged.push(*volume),
                _ => {
                    return Err(MoverError::StagingLost {
                        path: volume.path().to_owned(),
                        set: name.clone(),
                        id: committed.id.clone(),
                    });
                }
            }
        }
        part = part.or(record);
    }
    // Marked before any record of this pod goes: a run again finds the mark.
    for volume in unstaged {
        swap::mark_swapped(volume, &name, &committed.id)?;
    }
    recover(store, &volumes).map_err(|e| MoverError::SwapInterrupted {
        id: committed.id.clone(),
        source: Box::new(e),
    })?;
    // Also when an earlier run of this pod swapped it in already.
    forget_volumes(store, &name, &volumes)?;
    Ok(RestoreReport {
        restored: true,
        id: committed.id,
        bytes: part.as_ref().map_or(0, |p| p.bytes),
        files: part.as_ref().map_or(0, |p| p.files),
        duration_ms: started.elapsed().as_millis() as u64,
        ordinals: part.map(|p| p.staged).unwrap_or_default(),
    })
}

/// After a refused commit, in the pod of one volume (or a few) under `dest`: removes what
/// set `set` staged there, and its journal; the live data stays as it is. Refused for a
/// committed set, which only its swap finishes.
pub fn undo_part(
    store: &Store,
    dest: &Path,
    lock_wait: Duration,
    set: &PartSet,
) -> Result<RestoreOutcome> {
    if store.restore_committed(&set.to_string())? {
        return Err(MoverError::Usage(format!(
            "{}: restore {set} was committed: its swap (--swap) finishes it, not an undo",
            store.app().label()
        )));
    }
    let volumes = volumes::ordinal_dirs(dest)?;
    let _volume_locks = swap::lock_volumes(&volumes, lock_wait)?;
    recover(store, &volumes)?;
    Ok(restore::not_restored())
}

#[cfg(test)]
mod tests {
    use super::super::collect::tests::options;
    use super::*;
    use crate::names::Selector;

    /// A pod's view: the one volume of `ordinal`, holding `log`.
    fn volume(ordinal: u32, log: &str) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join(ordinal.to_string());
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::write(dir.join("log"), log).expect("write");
        tmp
    }

    fn log(pod: &tempfile::TempDir, ordinal: u32) -> String {
        std::fs::read_to_string(pod.path().join(format!("{ordinal}/log"))).expect("read")
    }

    fn set(name: &str) -> PartSet {
        name.parse().expect("set")
    }

    fn restore_options(pod: &tempfile::TempDir) -> RestoreOptions {
        RestoreOptions {
            dest: pod.path().to_owned(),
            from: Selector::Latest,
            if_exists: false,
            lock_wait: Duration::ZERO,
            commit_note: None,
        }
    }

    /// Two volumes, on "two nodes", backed up as "backed up", then written over.
    fn backed_up_then_changed(store: &Store) -> [tempfile::TempDir; 2] {
        let pods = [volume(0, "backed up 0"), volume(1, "backed up 1")];
        for pod in &pods {
            super::super::backup_part(store, &options(pod.path()), &set("b1")).expect("part");
        }
        super::super::seal(store, &set("b1"), 2, None, Duration::ZERO).expect("seal");
        for (ordinal, pod) in pods.iter().enumerate() {
            std::fs::write(pod.path().join(format!("{ordinal}/log")), "live").expect("write");
        }
        pods
    }

    fn swap_in(store: &Store, pod: &tempfile::TempDir, name: &str) -> Result<RestoreReport> {
        swap_part(store, pod.path(), Duration::ZERO, &set(name))
    }

    #[test]
    fn parts_staged_apart_are_committed_once_and_swapped_in_on_each_volume() {
        let store = Store::in_memory("ns", "app");
        let pods = backed_up_then_changed(&store);
        for pod in &pods {
            let staged =
                stage_part(&store, &store, &restore_options(pod), &set("r1")).expect("stage");
            assert_eq!(staged.staged, staged.volumes);
        }
        assert_eq!(
            (log(&pods[0], 0), log(&pods[1], 1)),
            ("live".into(), "live".into())
        );
        swap_in(&store, &pods[0], "r1").expect_err("not committed yet");
        assert_eq!(
            log(&pods[0], 0),
            "live",
            "nothing swapped before the commit"
        );

        let RestoreOutcome::Restored(report) = commit(&store, &set("r1"), 2).expect("commit")
        else {
            panic!("nothing committed");
        };
        assert_eq!((report.ordinals, report.files), (vec![0, 1], 2));
        for (ordinal, pod) in pods.iter().enumerate() {
            let swapped = swap_in(&store, pod, "r1").expect("swap");
            assert_eq!(swapped.id, report.id);
            assert_eq!(log(pod, ordinal as u32), format!("backed up {ordinal}"));
        }
        assert!(
            store.list_keys("restores").expect("keys").is_empty(),
            "records removed"
        );
        for pod in &pods {
            assert_no_staging(pod);
        }
    }

    /// The pod's volume holds its data, lock and the mark of its last swap only: no
    /// staging, no journal.
    fn assert_no_staging(pod: &tempfile::TempDir) {
        let names: Vec<_> = std::fs::read_dir(pod.path().join(pod_ordinal(pod)))
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert!(
            names
                .iter()
                .all(|n| ["log", ".hellostateful-lock", ".hellostateful-swapped"]
                    .contains(&n.to_string_lossy().as_ref())),
            "no staging or journal left: {names:?}"
        );
    }

    fn pod_ordinal(pod: &tempfile::TempDir) -> String {
        std::fs::read_dir(pod.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .next()
            .expect("one volume")
    }

    /// A set committed once, then run again (its Job made anew under the same name) with a
    /// part that does not stage this time: the commit stands, and the swaps finish the set
    /// on every volume. Refused, it removed the commit while a volume held the backup and
    /// another would have its staging rolled back: the app on a mix.
    #[test]
    fn a_committed_set_run_again_stays_committed_whatever_its_parts_do() {
        let store = Store::in_memory("ns", "app");
        let pods = backed_up_then_changed(&store);
        for pod in &pods {
            stage_part(&store, &store, &restore_options(pod), &set("r1")).expect("stage");
        }
        let RestoreOutcome::Restored(first) = commit(&store, &set("r1"), 2).expect("commit") else {
            panic!("nothing committed");
        };
        swap_in(&store, &pods[0], "r1").expect("swap 0");
        // Run again: volume 1's part never stages (its node is gone, say).
        store
            .delete_key(&record_key(&set("r1"), 1))
            .expect("record of ordinal 1 gone");
        let RestoreOutcome::Restored(again) = commit(&store, &set("r1"), 2).expect("commit again")
        else {
            panic!("the commit was undone");
        };
        assert_eq!(again.id, first.id);
        swap_in(&store, &pods[1], "r1").expect("swap 1 finishes the set");
        assert_eq!(
            (log(&pods[0], 0), log(&pods[1], 1)),
            ("backed up 0".into(), "backed up 1".into())
        );
    }

    #[test]
    fn a_part_that_never_staged_commits_nothing_and_the_next_restore_drops_the_staging() {
        let store = Store::in_memory("ns", "app");
        let pods = backed_up_then_changed(&store);
        stage_part(&store, &store, &restore_options(&pods[0]), &set("r1")).expect("stage 0");
        let refused = commit(&store, &set("r1"), 2).expect_err("ordinal 1 is missing");
        let message = crate::chain(&refused);
        assert!(message.contains("ordinal(s) [1]"), "{message}");
        assert!(refused.is_permanent());
        assert!(store.list_keys("restores").expect("keys").is_empty());
        assert_eq!(log(&pods[0], 0), "live");
        assert!(pods[0].path().join("0/.hellostateful-staging").exists());
        swap_in(&store, &pods[0], "r1").expect_err("not committed: nothing to swap in");

        // The next restore of the volume rolls the uncommitted staging back, then runs.
        for pod in &pods {
            stage_part(&store, &store, &restore_options(pod), &set("r2")).expect("stage");
        }
        commit(&store, &set("r2"), 2).expect("commit");
        for pod in &pods {
            swap_in(&store, pod, "r2").expect("swap");
        }
        assert_eq!(log(&pods[0], 0), "backed up 0");
    }

    #[test]
    fn a_refused_sets_staging_is_undone_and_a_committed_one_cannot_be() {
        let store = Store::in_memory("ns", "app");
        let pods = backed_up_then_changed(&store);
        let undo = |pod: &tempfile::TempDir, name: &str| {
            undo_part(&store, pod.path(), Duration::ZERO, &set(name))
        };
        stage_part(&store, &store, &restore_options(&pods[0]), &set("r1")).expect("stage 0");
        commit(&store, &set("r1"), 2).expect_err("ordinal 1 is missing");
        let outcome = undo(&pods[0], "r1").expect("undo");
        assert!(matches!(outcome, RestoreOutcome::NotRestored(_)));
        assert_eq!(log(&pods[0], 0), "live");
        assert_no_staging(&pods[0]);

        for pod in &pods {
            stage_part(&store, &store, &restore_options(pod), &set("r2")).expect("stage");
        }
        commit(&store, &set("r2"), 2).expect("commit");
        let refused = undo(&pods[0], "r2").expect_err("committed");
        assert!(crate::chain(&refused).contains("was committed"));
        swap_in(&store, &pods[0], "r2").expect("swap");
        assert_eq!(log(&pods[0], 0), "backed up 0");
    }

    #[test]
    fn a_committed_set_is_swapped_in_by_whichever_restore_next_runs_on_a_volume() {
        let store = Store::in_memory("ns", "app");
        let pods = backed_up_then_changed(&store);
        for pod in &pods {
            stage_part(&store, &store, &restore_options(pod), &set("r1")).expect("stage");
        }
        commit(&store, &set("r1"), 2).expect("commit");
        swap_in(&store, &pods[0], "r1").expect("swap 0");
        // Volume 1's swap never ran. A later set's staging on it finishes r1 first, so the
        // set never ends part old, part new.
        std::fs::write(pods[0].path().join("0/log"), "written after r1").expect("write");
        stage_part(&store, &store, &restore_options(&pods[1]), &set("r2")).expect("stage r2");
        assert_eq!(log(&pods[1], 1), "backed up 1", "r1 rolled forward");
        assert!(
            store.list_keys("restores/r1").expect("keys").is_empty(),
            "r1 is finished on every volume: its records are removed"
        );
    }

    #[test]
    fn another_apps_backup_is_restored_in_parts_with_the_records_of_the_app_restored_into() {
        let source = Store::in_memory("ns", "source");
        backed_up_then_changed(&source);
        let copy = Store::in_memory("ns", "copy");
        let pods = [volume(0, "new 0"), volume(1, "new 1")];
        for pod in &pods {
            stage_part(&source, &copy, &restore_options(pod), &set("r1")).expect("stage");
        }
        assert!(source.list_keys("restores").expect("keys").is_empty());
        commit(&copy, &set("r1"), 2).expect("commit");
        swap_in(&copy, &pods[0], "r1").expect("swap 0");
        assert_eq!(log(&pods[0], 0), "backed up 0");

        // Volume 1's swap never ran. The app's next restore, from its own backups (it has
        // none yet), finds the set committed among its records and rolls it forward.
        let options = RestoreOptions {
            if_exists: true,
            ..restore_options(&pods[1])
        };
        let outcome = crate::restore_from_store(&copy, &copy, &options).expect("restore");
        assert!(matches!(outcome, RestoreOutcome::NotRestored(_)));
        assert_eq!(
            log(&pods[1], 1),
            "backed up 1",
            "r1 rolled forward, not back"
        );
        assert!(copy.list_keys("restores").expect("keys").is_empty());
    }

    #[test]
    fn without_any_backup_parts_asked_only_if_one_exists_stage_and_commit_nothing() {
        let store = Store::in_memory("ns", "app");
        let pods = [volume(0, "new 0"), volume(1, "new 1")];
        for pod in &pods {
            let options = RestoreOptions {
                if_exists: true,
                ..restore_options(pod)
            };
            let staged = stage_part(&store, &store, &options, &set("r1")).expect("stage");
            assert_eq!(staged.id, None);
        }
        let outcome = commit(&store, &set("r1"), 2).expect("commit");
        assert!(matches!(outcome, RestoreOutcome::NotRestored(_)));
        assert!(store.list_keys("restores").expect("keys").is_empty());
        assert_eq!(log(&pods[1], 1), "new 1");
        stage_part(&store, &store, &restore_options(&pods[0]), &set("r2")).expect_err("no backup");
    }

    #[test]
    fn a_stage_record_is_removed_before_its_staging_so_a_failed_retry_is_never_committed() {
        let store = Store::in_memory("ns", "app");
        let pods = backed_up_then_changed(&store);
        for pod in &pods {
            stage_part(&store, &store, &restore_options(pod), &set("r1")).expect("stage");
        }
        // Volume 1's pod failed after it recorded its staging (its termination log could
        // not be written, say). Its retry rolls that staging back, then fails itself: here,
        // asked for a backup that is not there.
        let retry = RestoreOptions {
            from: "20200101T000000Z".parse().expect("selector"),
            ..restore_options(&pods[1])
        };
        stage_part(&store, &store, &retry, &set("r1")).expect_err("no such backup");
        assert!(!pods[1].path().join("1/.hellostateful-staging").exists());

        let refused = commit(&store, &set("r1"), 2).expect_err("volume 1 holds no staging");
        let message = crate::chain(&refused);
        assert!(message.contains("ordinal(s) [1]"), "{message}");
        assert_eq!(
            (log(&pods[0], 0), log(&pods[1], 1)),
            ("live".into(), "live".into())
        );
    }

    /// Volume `ordinal` of `pod` without its staging nor its journal, as a retried stage that
    /// rolled it back left it when its record stayed in the store.
    fn lose_staging(pod: &tempfile::TempDir, ordinal: u32) {
        let volume = pod.path().join(ordinal.to_string());
        std::fs::remove_dir_all(volume.join(".hellostateful-staging")).expect("rm staging");
        std::fs::remove_file(volume.join(".hellostateful-journal")).expect("rm journal");
    }

    #[test]
    fn a_committed_swap_that_finds_no_staging_on_its_volume_fails_instead_of_reporting_restored() {
        let store = Store::in_memory("ns", "app");
        let pods = backed_up_then_changed(&store);
        for pod in &pods {
            stage_part(&store, &store, &restore_options(pod), &set("r1")).expect("stage");
        }
        lose_staging(&pods[1], 1);
        commit(&store, &set("r1"), 2).expect("commit: both records are there");

        let lost = swap_in(&store, &pods[1], "r1").expect_err("nothing to swap in on volume 1");
        let message = crate::chain(&lost);
        assert!(
            message.contains("restore r1 was committed") && message.contains("NOT restored"),
            "{message}"
        );
        assert!(
            lost.is_permanent(),
            "retrying cannot bring the staging back"
        );
        assert_eq!(log(&pods[1], 1), "live");
        swap_in(&store, &pods[1], "r1").expect_err("and so does its retry");

        swap_in(&store, &pods[0], "r1").expect("volume 0 is swapped in all the same");
        assert_eq!(log(&pods[0], 0), "backed up 0");
    }

    #[test]
    fn a_swap_retried_after_it_finished_reports_restored_again_even_once_its_set_is_forgotten() {
        let store = Store::in_memory("ns", "app");
        let [pod0, pod1] = backed_up_then_changed(&store);
        // A third volume, made after the backup: the backup holds nothing for it.
        let pods = [pod0, pod1, volume(2, "new 2")];
        for pod in &pods {
            stage_part(&store, &store, &restore_options(pod), &set("r1")).expect("stage");
        }
        let RestoreOutcome::Restored(report) = commit(&store, &set("r1"), 3).expect("commit")
        else {
            panic!("nothing committed");
        };
        for pod in &pods {
            assert_eq!(swap_in(&store, pod, "r1").expect("swap").id, report.id);
        }
        assert!(
            store.list_keys("restores").expect("keys").is_empty(),
            "the last swap removed the commit record"
        );
        // Each pod's retry (its first run's end went unreported): nothing left to do.
        for pod in &pods {
            let again = swap_in(&store, pod, "r1").expect("swap retried");
            assert_eq!(again.id, report.id);
        }
        assert_eq!(
            (log(&pods[0], 0), log(&pods[1], 1), log(&pods[2], 2)),
            ("backed up 0".into(), "backed up 1".into(), "new 2".into())
        );
    }

    #[test]
    fn parts_that_staged_different_backups_are_not_committed() {
        let store = Store::in_memory("ns", "app");
        let pods = backed_up_then_changed(&store);
        stage_part(&store, &store, &restore_options(&pods[0]), &set("r1")).expect("stage 0");
        super::super::backup_part(&store, &options(pods[0].path()), &set("b2")).expect("part");
        super::super::backup_part(&store, &options(pods[1].path()), &set("b2")).expect("part");
        super::super::seal(&store, &set("b2"), 2, None, Duration::ZERO).expect("seal");
        stage_part(&store, &store, &restore_options(&pods[1]), &set("r1")).expect("stage 1");
        let refused = commit(&store, &set("r1"), 2).expect_err("two backups");
        assert!(crate::chain(&refused).contains("different backups"));
    }
}
