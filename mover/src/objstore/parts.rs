//! A snapshot made in parts. When an app's replicas keep their volumes on different nodes
//! (ReadWriteOnce claims of a StorageClass), no one pod can mount them all: each volume is
//! backed up by a pod on its own node into a part, and one more step seals the parts into
//! a single snapshot, with one id for the set.
//!
//! ```text
//! parts/<set>/<ordinal>.json    a part: the manifest of the ordinals one pod backed up
//!                               (named by the first), sealed as a snapshot's is
//! ```
//!
//! A part is not a snapshot: listings and restores never see it. A collection keeps what
//! parts name (their contents are sent, but no snapshot names them yet), and sealing
//! removes its set's parts, and those of sets older than a Job can run (left by a set
//! whose part failed).

use std::str::FromStr;
use std::time::Duration;

use chrono::Utc;
use object_store::path::Path as Key;

use super::Store;
use super::collect::lock_backup;
use super::upload::{Sent, send};
use crate::backup::{BackupOptions, BackupReport, NAMED_INCONSISTENT};
use crate::catalog::PruneOutcome;
use crate::error::{MoverError, Result};
use crate::manifest::{INLINE_FORMAT, Manifest, SUCCEEDED};
use crate::names::BackupId;

/// The name a set's parts share (the sealing Job's, in Kubernetes): what DNS labels
/// allow, so that it is one plain key segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartSet(String);

impl FromStr for PartSet {
    type Err = MoverError;

    fn from_str(s: &str) -> Result<Self> {
        let plain = (1..=63).contains(&s.len())
            && s.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-');
        if !plain {
            return Err(MoverError::Usage(format!(
                "invalid part set {s:?}: 1 to 63 lowercase letters, digits or '-', starting and ending with a letter or digit"
            )));
        }
        Ok(Self(s.to_owned()))
    }
}

impl std::fmt::Display for PartSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parts older than this were left by a set that never sealed (a Job runs 12 hours at most).
pub(super) const STALE_PARTS: chrono::TimeDelta = chrono::TimeDelta::hours(13);

fn set_prefix(set: &PartSet) -> String {
    format!("parts/{set}")
}

/// Backs up the ordinal volumes under `options.source` (those this pod mounts) into a part
/// of `set`. Retention waits for the seal.
pub fn backup_part(store: &Store, options: &BackupOptions, set: &PartSet) -> Result<BackupReport> {
    let Sent {
        lock,
        mut manifest,
        totals,
        ..
    } = send(store, options)?;
    let first = manifest.ordinals.first().copied().unwrap_or_default();
    let key = Key::from(format!("{}/{first}.json", set_prefix(set)));
    store.put_sealed(&key, &mut manifest)?;
    drop(lock);
    Ok(totals.report(&manifest, None))
}

/// Seals the parts of `set`, which must hold ordinals `0..replicas` once each, into one
/// snapshot, then keeps the newest `keep_last` snapshots.
pub fn seal(
    store: &Store,
    set: &PartSet,
    replicas: u32,
    keep_last: Option<u32>,
    lock_wait: Duration,
) -> Result<BackupReport> {
    if let Some(keep) = keep_last {
        crate::catalog::check_keep_last(keep)?;
    }
    let lock = lock_backup(store, lock_wait)?;
    let parts = stored_parts(store, Some(set))?;
    let mut manifest = merged(store, set, replicas, parts.iter().map(|(_, m)| m))?;
    let ids = store.snapshot_ids()?;
    let mut id = BackupId::at(manifest.start_time);
    if let Some(last) = ids.last()
        && *last >= id
    {
        id = last.next();
    }
    manifest.id = id.to_string();
    store.put_sealed(&Store::manifest_key(&id), &mut manifest)?;
    let now = Utc::now();
    for (key, _) in &parts {
        store.delete_key(key)?;
    }
    for stale in store.list_keys("parts")? {
        if now - stale.last_modified > STALE_PARTS {
            store.delete_key(&stale.location)?;
        }
    }
    let retained = match keep_last {
        Some(keep) => Some(super::catalog::prune_holding(store, keep, Some(&lock))?),
        None => None,
    };
    Ok(report(&manifest, retained))
}

/// One manifest of every part, each checked as a snapshot's is.
fn merged<'a>(
    store: &Store,
    set: &PartSet,
    replicas: u32,
    parts: impl Iterator<Item = &'a Manifest>,
) -> Result<Manifest> {
    let mut all: Option<Manifest> = None;
    for part in parts {
        let Some(whole) = all.as_mut() else {
            all = Some(part.clone());
            continue;
        };
        whole.start_time = whole.start_time.min(part.start_time);
        whole.end_time = whole.end_time.max(part.end_time);
        whole.bytes += part.bytes;
        whole.files += part.files;
        whole.new_bytes += part.new_bytes;
        whole.linked_files += part.linked_files;
        whole.inconsistent_files += part.inconsistent_files;
        whole.replicas.extend(part.replicas.iter().cloned());
    }
    let mut whole = all.ok_or_else(|| missing(store, set, (0..replicas).collect()))?;
    whole.replicas.sort_by_key(|r| r.ordinal);
    whole.ordinals = whole.replicas.iter().map(|r| r.ordinal).collect();
    if let Some(twice) = whole.ordinals.windows(2).find(|w| w[0] == w[1]) {
        return Err(MoverError::Usage(format!(
            "the parts of {set} hold ordinal {} twice; no snapshot was made",
            twice[0]
        )));
    }
    let absent: Vec<u32> = (0..replicas)
        .filter(|o| !whole.ordinals.contains(o))
        .collect();
    if !absent.is_empty() {
        return Err(missing(store, set, absent));
    }
    whole.format = INLINE_FORMAT;
    whole.result = SUCCEEDED.to_owned();
    whole.duration_ms = (whole.end_time - whole.start_time)
        .num_milliseconds()
        .max(0) as u64;
    whole.checksum.clear();
    Ok(whole)
}

fn missing(store: &Store, set: &PartSet, ordinals: Vec<u32>) -> MoverError {
    MoverError::Usage(format!(
        "{} has no part of {set} for ordinal(s) {ordinals:?}: their backups failed or never ran; no snapshot was made, earlier backups are intact",
        store.app().label()
    ))
}

/// The report a one-step backup of the same volumes would have printed.
fn report(manifest: &Manifest, retained: Option<PruneOutcome>) -> BackupReport {
    let inconsistent_files = manifest
        .replicas
        .iter()
        .flat_map(|r| {
            r.entries
                .iter()
                .filter(|e| e.inconsistent)
                .map(move |e| format!("{}/{}", r.ordinal, e.rel_path().display()))
        })
        .take(NAMED_INCONSISTENT)
        .collect();
    let mut report = BackupReport {
        id: manifest.id.clone(),
        time: manifest.start_time,
        bytes: manifest.bytes,
        files: manifest.files,
        new_bytes: manifest.new_bytes,
        linked_files: manifest.linked_files,
        duration_ms: manifest.duration_ms,
        ordinals: manifest.ordinals.clone(),
        pruned: Vec::new(),
        snapshots: None,
        oldest: None,
        inconsistent: manifest.inconsistent_files,
        inconsistent_files,
    };
    report.retained(retained);
    report
}

/// The stored parts (of `set`, or of every set), each with its checked manifest.
pub(crate) fn stored_parts(store: &Store, set: Option<&PartSet>) -> Result<Vec<(Key, Manifest)>> {
    let prefix = set.map_or_else(|| "parts".to_owned(), set_prefix);
    let mut parts = Vec::new();
    for meta in store.list_keys(&prefix)? {
        let Some(bytes) = store.get_bytes(&meta.location)? else {
            continue; // removed since it was listed: a stale part
        };
        let manifest = Manifest::parse_part(&bytes, &store.address(&meta.location))?;
        parts.push((meta.location, manifest));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::super::collect::tests::options;
    use super::*;
    use crate::names::Selector;

    /// A pod's view: the one volume of `ordinal`, holding `files`.
    fn volume(ordinal: u32, files: &[(&str, &str)]) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join(ordinal.to_string());
        std::fs::create_dir(&dir).expect("mkdir");
        for (name, text) in files {
            std::fs::write(dir.join(name), text).expect("write");
        }
        tmp
    }

    fn set(name: &str) -> PartSet {
        name.parse().expect("set")
    }

    #[test]
    fn parts_backed_up_apart_seal_into_one_snapshot_that_restores_every_ordinal() {
        let store = Store::in_memory("ns", "app");
        let zero = volume(0, &[("log", "written on node a")]);
        let one = volume(1, &[("log", "written on node b"), ("more", "b")]);
        backup_part(&store, &options(one.path()), &set("s1")).expect("part 1");
        backup_part(&store, &options(zero.path()), &set("s1")).expect("part 0");
        assert!(
            store.snapshot_ids().expect("ids").is_empty(),
            "a part is no snapshot"
        );

        let report = seal(&store, &set("s1"), 2, Some(3), Duration::ZERO).expect("seal");
        assert_eq!((report.ordinals.clone(), report.files), (vec![0, 1], 3));
        assert_eq!(store.snapshot_ids().expect("ids").len(), 1);
        assert!(
            stored_parts(&store, None).expect("parts").is_empty(),
            "parts removed"
        );
        let verified = super::super::verify(&store, &Selector::Latest).expect("verify");
        assert!(verified.problems.is_empty(), "{:?}", verified.problems);
        let whole = super::super::resolve(&store, &Selector::Latest).expect("snapshot");
        assert_eq!(whole.manifest.id, report.id);
        assert_eq!(whole.manifest.ordinals, vec![0, 1]);

        // The next set is incremental on the sealed snapshot: nothing is sent again.
        backup_part(&store, &options(zero.path()), &set("s2")).expect("part 0");
        let again = backup_part(&store, &options(one.path()), &set("s2")).expect("part 1");
        assert_eq!(again.new_bytes, 0, "unchanged files are not sent again");
        let second = seal(&store, &set("s2"), 2, None, Duration::ZERO).expect("seal");
        assert!(second.id > report.id, "{} after {}", second.id, report.id);
    }

    #[test]
    fn a_missing_part_makes_no_snapshot_and_names_the_ordinal() {
        let store = Store::in_memory("ns", "app");
        let zero = volume(0, &[("log", "a")]);
        backup_part(&store, &options(zero.path()), &set("s1")).expect("part 0");
        let refused = seal(&store, &set("s1"), 3, None, Duration::ZERO).expect_err("refused");
        let message = crate::chain(&refused);
        assert!(message.contains("ordinal(s) [1, 2]"), "{message}");
        assert!(refused.is_permanent(), "retrying cannot bring a part");
        assert!(store.snapshot_ids().expect("ids").is_empty());
        assert_eq!(stored_parts(&store, None).expect("parts").len(), 1, "kept");

        let nothing = seal(&store, &set("other"), 1, None, Duration::ZERO).expect_err("none");
        assert!(crate::chain(&nothing).contains("ordinal(s) [0]"));
    }

    #[test]
    fn a_collection_keeps_what_unsealed_parts_name() {
        let store = Store::in_memory("ns", "app");
        let zero = volume(0, &[("log", "first")]);
        super::super::backup(&store, &options(zero.path())).expect("backup");
        std::fs::write(zero.path().join("0/log"), "second").expect("change");
        backup_part(&store, &options(zero.path()), &set("s1")).expect("part");
        let pruned = super::super::prune(&store, 1).expect("prune");
        let collected = pruned.collected.expect("collected");
        assert_eq!(
            collected.objects, 0,
            "the part's pack is kept: {collected:?}"
        );

        seal(&store, &set("s1"), 1, Some(1), Duration::ZERO).expect("seal");
        let verified = super::super::verify(&store, &Selector::Latest).expect("verify");
        assert!(verified.problems.is_empty(), "{:?}", verified.problems);
    }

    #[test]
    fn a_set_name_is_one_plain_key_segment() {
        for good in ["backup-hello-1a2b3c4d", "a", "backup-web-29412345"] {
            assert!(good.parse::<PartSet>().is_ok(), "{good}");
        }
        for bad in ["", "-a", "a-", "A", "a/b", "..", "a.b", &"a".repeat(64)] {
            assert!(bad.parse::<PartSet>().is_err(), "{bad:?}");
        }
    }
}
