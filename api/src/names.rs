//! Names, labels and annotation keys of everything hellostateful makes, in one place so the
//! plugin, the reconciler and the tests agree.

use std::collections::BTreeMap;

/// API group of the custom resource.
pub const GROUP: &str = "hello-stateful.example.com";
/// Field manager of every server-side apply the reconciler makes.
pub const FIELD_MANAGER: &str = "hellostateful-reconciler";
/// Finalizer that releases cluster-scoped PersistentVolumes when an app is deleted.
pub const FINALIZER: &str = "hello-stateful.example.com/release-volumes";

/// Annotation whose new value (a token, usually a time) asks for one on-demand backup.
pub const BACKUP_REQUESTED: &str = "hello-stateful.example.com/backup-requested";
/// Annotation naming the on-demand backup request (its token) that reads every file again
/// rather than trust the unchanged-file check (`backup --full`).
pub const BACKUP_REREAD: &str = "hello-stateful.example.com/backup-reread";
/// Annotation on a backup Job, set to `"true"` when it (or, made in parts, its parts) reads
/// every file again.
pub const REREAD: &str = "hello-stateful.example.com/reread";
/// Annotation whose new value asks for one on-demand restore.
pub const RESTORE_REQUESTED: &str = "hello-stateful.example.com/restore-requested";
/// Annotation naming the snapshot a restore reads: a backup id or `latest`.
pub const RESTORE_FROM: &str = "hello-stateful.example.com/restore-from";
/// Annotation on a restore Job made in parts (see [`PARTS_LABEL`]), set to `"true"` when its
/// parts restore only if the app has a backup at all (a newly created app starts empty).
pub const RESTORE_IF_EXISTS: &str = "hello-stateful.example.com/restore-if-exists";
/// Annotation on a restore Job made in parts: the app of the namespace whose backups its
/// parts stage (`spec.restoreFrom`), when they are not the app's own.
pub const RESTORE_SOURCE: &str = "hello-stateful.example.com/restore-source";
/// Label on cluster-scoped PersistentVolumes: the namespace of the app they belong to.
pub const NAMESPACE_LABEL: &str = "hello-stateful.example.com/namespace";
/// Label on Jobs: what the Job does (backup or restore) and why.
pub const ACTION_LABEL: &str = "hello-stateful.example.com/action";
/// Label on a Job that seals a backup, or commits a restore, made in parts (an app whose
/// replicas' volumes may be on different nodes): how many replicas, each backed up or
/// staged by a Job of its own ([`part`]). It is made suspended, and let run once every
/// part ended.
pub const PARTS_LABEL: &str = "hello-stateful.example.com/parts";
/// Label on a Job that backs up, stages or swaps in one replica's volume: the name of the
/// Job its set is named after.
pub const PART_OF_LABEL: &str = "hello-stateful.example.com/part-of";
/// Annotation on a backup's set Job (see [`PARTS_LABEL`]), set (to `"true"`) before its
/// first part is made: a durable record that its parts read the volumes, kept when they
/// are gone (expired before the set was let run), so that no restore starts until it ends.
pub const PARTS_BEGUN: &str = "hello-stateful.example.com/parts-begun";
/// Annotation (`"true"`) on a backup Job made while the app's backup.consistency.mode was
/// stop: while the Job is unfinished the app is held at 0 replicas, and the Job, made
/// suspended, copies only once no pod of the app is left (see the reconciler's `stops`).
pub const STOPS_APP: &str = "hello-stateful.example.com/stops-app";
/// Annotation on a mover Job the reconciler stopped because its pod could not start: why.
pub const STOPPED_BECAUSE: &str = "hello-stateful.example.com/stopped-because";
/// Annotation set (to `"true"`) before deleting an app: its backups go with it.
pub const DELETE_BACKUPS: &str = "hello-stateful.example.com/delete-backups";
/// Annotation on a backup PersistentVolume: the uid of the namespace it was made for, so
/// that a namespace deleted and created again by someone else never gets its backups.
pub const NAMESPACE_UID_ANNOTATION: &str = "hello-stateful.example.com/namespace-uid";
/// Annotation on an app's backup claim: the image of the reconciler's data mover. An admission
/// policy lets a tenant's pod mount that claim for writing only to run this image's `delete`
/// (the plugin's `backups delete`); every other pod of the tenant's mounts it read-only.
pub const MOVER_IMAGE_ANNOTATION: &str = "hello-stateful.example.com/mover-image";
/// Annotation on the StatefulSet: how the restore before the app's first start ended
/// (`restored <id>`, `no-backup`, or `outcome-unknown` when the pod that said was gone). A
/// durable record, so that any later pass finishes the status even when the write that
/// should have done so was lost.
pub const INITIAL_RESTORE: &str = "hello-stateful.example.com/initial-restore";
/// Annotation on the StatefulSet: whose the app's node-directory volumes were made, and how
/// many (`<uid>:<gid>:<mode>/<replicas>`), for an app that runs as a non-root user: pods
/// start only on volumes so prepared. A lost or forged record only makes the (idempotent)
/// preparation run again.
pub const PREPARED: &str = "hello-stateful.example.com/prepared";

/// Annotation on every StatefulSet, CronJob and Job the reconciler writes: the identity of
/// the leader that wrote it, which an admission policy compares with the Lease's holder, so
/// that a deposed leader's late write is refused by the API server itself.
pub const WRITTEN_BY_LEADER: &str = "hello-stateful.example.com/written-by-leader";

/// `app.kubernetes.io/name` of everything hellostateful makes.
pub const APP_NAME: &str = "hellostateful";
/// Name of the volume claim template; claims are `data-<app>-<ordinal>`.
pub const DATA_VOLUME: &str = "data";

/// Longest app name: CronJob names (`backup-<name>`) are limited to 52 characters.
pub const MAX_NAME_LEN: usize = 45;

/// Parts of an app, as `app.kubernetes.io/component`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// The app's pods, StatefulSet and Service.
    App,
    /// Volumes and claims.
    Storage,
    /// Backup CronJob and Jobs.
    Backup,
    /// Restore Jobs.
    Restore,
}

impl Component {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Component::App => "app",
            Component::Storage => "storage",
            Component::Backup => "backup",
            Component::Restore => "restore",
        }
    }
}

/// The labels every child of app `name` carries.
pub fn labels(name: &str, component: Component) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), APP_NAME.to_string()),
        ("app.kubernetes.io/instance".to_string(), name.to_string()),
        (
            "app.kubernetes.io/managed-by".to_string(),
            FIELD_MANAGER.to_string(),
        ),
        (
            "app.kubernetes.io/component".to_string(),
            component.as_str().to_string(),
        ),
    ])
}

/// The labels that select the app's pods (stable: a StatefulSet selector is immutable).
pub fn selector(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), APP_NAME.to_string()),
        ("app.kubernetes.io/instance".to_string(), name.to_string()),
        (
            "app.kubernetes.io/component".to_string(),
            Component::App.as_str().to_string(),
        ),
    ])
}

/// Label selector string of the app's pods, for list calls.
pub fn selector_string(name: &str) -> String {
    selector(name)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// StatefulSet and headless Service of the app.
pub fn statefulset(name: &str) -> String {
    name.to_string()
}

/// The backup CronJob (the 2018 name).
pub fn cronjob(name: &str) -> String {
    format!("backup-{name}")
}

/// The claim of replica `ordinal`, as the StatefulSet controller names it.
pub fn claim(name: &str, ordinal: i32) -> String {
    format!("{DATA_VOLUME}-{name}-{ordinal}")
}

/// The ordinal of claim `claim` of app `name`, if it is one of that app's data claims.
pub fn claim_ordinal(name: &str, claim: &str) -> Option<i32> {
    let ordinal = claim.strip_prefix(&format!("{DATA_VOLUME}-{name}-"))?;
    // Only the canonical form: `data-hello-01` is not a claim the StatefulSet would make.
    ordinal
        .parse()
        .ok()
        .filter(|n: &i32| *n >= 0 && n.to_string() == ordinal)
}

/// The static PersistentVolume of replica `ordinal`: cluster-scoped, so it carries the
/// namespace. Namespaces and names are DNS labels, which hold no `.`, so the join cannot
/// collide (`team-a/db` and `team/a-db` differ, where a `-` join would not).
pub fn volume(namespace: &str, name: &str, ordinal: i32) -> String {
    format!("hellostateful.{namespace}.{name}.{ordinal}")
}

/// The name hellostateful 0.1.0 gave a static volume. Such volumes are still used by the
/// claims bound to them, and released with the app.
pub fn legacy_volume(namespace: &str, name: &str, ordinal: i32) -> String {
    format!("hellostateful-{namespace}-{name}-{ordinal}")
}

/// The node directory of a static volume. The app's uid is part of it, so data left by an
/// earlier app of the same name (one whose namespace was deleted before its data could be
/// wiped) is never handed to a new one.
pub fn volume_host_path(namespace: &str, name: &str, uid: &str, ordinal: i32) -> String {
    format!(
        "{}/{namespace}/{name}/{uid}/{ordinal}",
        crate::defaults::HOSTPATH_ROOT
    )
}

/// The claim of the app's backup directory on a node root, in the app's namespace. It has
/// no owner: backups outlive the app (restore on re-creation, the catalog of a deleted app).
pub fn backup_claim(name: &str) -> String {
    format!("backups-{name}")
}

/// The static PersistentVolume of the app's backup directory under `root`
/// (`<root>/<namespace>/<name>`): one per root the app ever used, each kept while its
/// directory may hold snapshots, as the record of which namespace (by uid) owns them.
/// Earlier versions named it without the root's hash; either is found by its path.
pub fn backup_volume(root: &str, namespace: &str, name: &str) -> String {
    format!(
        "hellostateful-backups.{namespace}.{name}.{}",
        short_hash(root.trim_end_matches('/'))
    )
}

/// The app's own backup directory under an allowed node root.
pub fn backup_host_path(root: &str, namespace: &str, name: &str) -> String {
    format!("{}/{namespace}/{name}", root.trim_end_matches('/'))
}

/// The Job that wipes the live data of an app being deleted.
pub fn wipe_job(name: &str, uid: &str) -> String {
    format!("wipe-{name}-{}", short_hash(uid))
}

/// The Job that gives the app's volumes to its user (see `PREPARED`): one per app and
/// what it prepares (`key`), so that a change makes a Job of its own.
pub fn prepare_job(name: &str, uid: &str, key: &str) -> String {
    format!("prepare-{name}-{}", short_hash(&format!("{uid}/{key}")))
}

/// The Job that deletes the backups of an app being deleted with its backups.
pub fn purge_job(name: &str, uid: &str) -> String {
    format!("purge-{name}-{}", short_hash(uid))
}

/// The Job of an on-demand backup: named from the app's uid and the token, so one token
/// makes one Job.
pub fn backup_job(name: &str, uid: &str, token: &str) -> String {
    format!("backup-{name}-{}", short_hash(&format!("{uid}/{token}")))
}

/// The Job that backs up, or stages a restore on, replica `ordinal`'s volume as a part of
/// the set Job `set` seals or commits (see [`PARTS_LABEL`]).
pub fn part(set: &str, ordinal: i32) -> String {
    part_named(set, &format!("-{ordinal}"))
}

/// The Job that swaps a committed restore in on replica `ordinal`'s volume.
pub fn swap_part(set: &str, ordinal: i32) -> String {
    part_named(set, &format!("-swap-{ordinal}"))
}

/// The Job that removes the staging of a restore whose commit was refused from replica
/// `ordinal`'s volume.
pub fn undo_part(set: &str, ordinal: i32) -> String {
    part_named(set, &format!("-undo-{ordinal}"))
}

/// `<set><suffix>` within the 63 characters of a label value: when longer, characters go
/// from the middle of the set's name, keeping its unique end (the hash, or the CronJob's
/// schedule time) and the suffix whole. Total: `set` comes from the cluster (a Job's label
/// or name), so no length may underflow and no cut may split a character. A tail too long
/// to keep whole keeps as much of its end as fits, and the name never starts with the
/// tail's `-`.
fn part_named(set: &str, suffix: &str) -> String {
    const MAX: usize = 63;
    if set.len().saturating_add(suffix.len()) <= MAX {
        return format!("{set}{suffix}");
    }
    let suffix = end_within(suffix, MAX);
    let room = MAX.saturating_sub(suffix.len());
    let (rest, tail) = set
        .rfind('-')
        .and_then(|at| set.split_at_checked(at))
        .unwrap_or((set, ""));
    let tail = end_within(tail, room);
    let head = start_within(rest, room.saturating_sub(tail.len()));
    let tail = if head.is_empty() {
        tail.trim_start_matches('-')
    } else {
        tail
    };
    format!("{head}{tail}{suffix}")
}

/// The longest start of `text` of at most `max` bytes that ends on a character boundary.
fn start_within(text: &str, max: usize) -> &str {
    let end = (0..=max.min(text.len()))
        .rev()
        .find(|&at| text.is_char_boundary(at))
        .unwrap_or(0);
    text.get(..end).unwrap_or_default()
}

/// The longest end of `text` of at most `max` bytes that starts on a character boundary.
fn end_within(text: &str, max: usize) -> &str {
    let start = (text.len().saturating_sub(max)..=text.len())
        .find(|&at| text.is_char_boundary(at))
        .unwrap_or(text.len());
    text.get(start..).unwrap_or_default()
}

/// The Job of an on-demand restore. Named from the app's uid too, so that a Job of an
/// earlier app of the same name (still being garbage-collected) is never taken for it.
pub fn restore_job(name: &str, uid: &str, token: &str) -> String {
    format!("restore-{name}-{}", short_hash(&format!("{uid}/{token}")))
}

/// The Job that restores a newly created app (`restoreFromExisting`), named from the
/// app's uid so that an app created again gets a Job of its own; a retry after a failed
/// attempt is named from its restore-requested token as well.
pub fn initial_restore_job(name: &str, uid: &str, retry: Option<&str>) -> String {
    let attempt = match retry {
        None => format!("initial/{uid}"),
        Some(token) => format!("initial/{uid}/{token}"),
    };
    format!("restore-{name}-{}", short_hash(&attempt))
}

/// Eight hex digits of FNV-1a: stable across versions and platforms, unlike std's hasher.
pub fn short_hash(input: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in input.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{:08x}", (hash >> 32) as u32 ^ hash as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An RFC 1123 label, as the reconciler names a set Job.
    const DNS_LABEL: &str = "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?";
    /// A label whose end after its last `-` is long. The regex strategies pick `-` as often
    /// as a whole range of letters, so [`DNS_LABEL`] seldom makes one.
    const LONG_TAILED_LABEL: &str = "[a-z0-9]{1,2}-[a-z0-9]{40,60}";
    /// A DNS-like string whose end after its last `-` may be longer than a name.
    const LONG_TAILED: &str = "[a-z0-9-]{0,20}-[a-z0-9]{40,100}";

    fn is_dns_label(name: &str) -> bool {
        name.len() <= 63
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.ends_with(|c: char| c.is_ascii_alphanumeric())
    }

    /// App names the API admits: DNS labels of at most [`MAX_NAME_LEN`] characters.
    fn app_name() -> impl Strategy<Value = String> {
        let middle = MAX_NAME_LEN - 2;
        proptest::string::string_regex(&format!("[a-z0-9]([a-z0-9-]{{0,{middle}}}[a-z0-9])?"))
            .expect("a valid regex")
    }

    /// Each part Job of `set`'s replica `ordinal`, with the suffix it must end with.
    fn parts_of(set: &str, ordinal: i32) -> [(String, String); 3] {
        [
            (part(set, ordinal), format!("-{ordinal}")),
            (swap_part(set, ordinal), format!("-swap-{ordinal}")),
            (undo_part(set, ordinal), format!("-undo-{ordinal}")),
        ]
    }

    fn parts_are_label_values_ending_with_their_suffix(
        set: &str,
        ordinal: i32,
    ) -> Result<(), TestCaseError> {
        for (name, suffix) in parts_of(set, ordinal) {
            prop_assert!(name.len() <= 63, "{name:?}: {} bytes", name.len());
            prop_assert!(name.ends_with(&suffix), "{name:?} lost {suffix:?}");
        }
        Ok(())
    }

    /// What `part_named` gave before it was made total, where its arithmetic held.
    fn part_named_before(set: &str, suffix: &str) -> Option<String> {
        if set.len() + suffix.len() <= 63 {
            return Some(format!("{set}{suffix}"));
        }
        let tail = set.rfind('-').map_or(0, |at| set.len() - at);
        let head = 63usize.checked_sub(suffix.len())?.checked_sub(tail)?;
        Some(format!(
            "{}{}{suffix}",
            set.get(..head)?,
            set.get(set.len() - tail..)?
        ))
    }

    proptest! {
        #[test]
        fn parts_of_any_string_never_panic_and_fit_a_label_value(
            set in any::<String>(),
            ordinal in any::<i32>(),
        ) {
            parts_are_label_values_ending_with_their_suffix(&set, ordinal)?;
        }

        #[test]
        fn parts_of_any_dns_like_string_never_panic_and_fit_a_label_value(
            set in prop_oneof!["[a-z0-9-]{0,300}", LONG_TAILED],
            ordinal in any::<i32>(),
        ) {
            parts_are_label_values_ending_with_their_suffix(&set, ordinal)?;
        }

        #[test]
        fn parts_of_a_dns_label_are_dns_labels(
            set in prop_oneof![DNS_LABEL, LONG_TAILED_LABEL],
            ordinal in any::<i32>(),
        ) {
            for (name, _) in parts_of(&set, ordinal) {
                prop_assert!(is_dns_label(&name), "{set:?} gave {name:?}");
            }
        }

        #[test]
        fn parts_of_ascii_sets_are_named_as_before_wherever_that_worked(
            set in prop_oneof!["[a-z0-9-]{0,100}", LONG_TAILED],
            ordinal in any::<i32>(),
        ) {
            let suffix = format!("-{ordinal}");
            if let Some(before) = part_named_before(&set, &suffix)
                && !before.starts_with('-')
            {
                prop_assert_eq!(part(&set, ordinal), before);
            }
        }

        #[test]
        fn the_other_builders_never_panic_on_any_input(
            namespace in any::<String>(),
            name in any::<String>(),
            uid in any::<String>(),
            token in any::<String>(),
            retry in proptest::option::of(any::<String>()),
            claim_name in any::<String>(),
            ordinal in any::<i32>(),
        ) {
            cronjob(&name);
            statefulset(&name);
            labels(&name, Component::Backup);
            selector_string(&name);
            claim_ordinal(&name, &claim_name);
            prop_assert_eq!(
                claim_ordinal(&name, &claim(&name, ordinal)),
                Some(ordinal).filter(|n| *n >= 0)
            );
            volume(&namespace, &name, ordinal);
            legacy_volume(&namespace, &name, ordinal);
            volume_host_path(&namespace, &name, &uid, ordinal);
            backup_claim(&name);
            backup_volume(&token, &namespace, &name);
            backup_host_path(&token, &namespace, &name);
            wipe_job(&name, &uid);
            purge_job(&name, &uid);
            backup_job(&name, &uid, &token);
            restore_job(&name, &uid, &token);
            initial_restore_job(&name, &uid, retry.as_deref());
            prop_assert_eq!(short_hash(&token).len(), 8);
        }

        #[test]
        fn children_of_any_admitted_app_name_fit_their_kubernetes_limits(
            namespace in DNS_LABEL,
            name in app_name(),
            uid in any::<String>(),
            token in any::<String>(),
            retry in proptest::option::of(any::<String>()),
            ordinal in any::<i32>(),
        ) {
            let cronjob = cronjob(&name);
            prop_assert!(is_dns_label(&cronjob) && cronjob.len() <= 52, "{cronjob}");
            for job in [
                wipe_job(&name, &uid),
                purge_job(&name, &uid),
                backup_job(&name, &uid, &token),
                restore_job(&name, &uid, &token),
                initial_restore_job(&name, &uid, retry.as_deref()),
            ] {
                prop_assert!(is_dns_label(&job), "{job}");
            }
            prop_assert!(claim(&name, ordinal).len() <= 63);
            prop_assert!(volume(&namespace, &name, ordinal).len() <= 253);
            prop_assert!(backup_volume(&token, &namespace, &name).len() <= 253);
            prop_assert!(backup_claim(&name).len() <= 253);
            let hash = short_hash(&uid);
            prop_assert!(hash.len() == 8 && hash.bytes().all(|b| b.is_ascii_hexdigit()));
        }
    }

    #[test]
    fn part_jobs_are_label_values_and_keep_the_sets_unique_end() {
        assert_eq!(part("backup-web-1a2b3c4d", 1), "backup-web-1a2b3c4d-1");
        let longest = "a".repeat(MAX_NAME_LEN);
        for set in [
            backup_job(&longest, "uid", "token"),
            format!("{}-29412345", cronjob(&longest)),
        ] {
            let tail = &set[set.rfind('-').expect("dash")..];
            for ordinal in [0, 9, 10, 19] {
                let part = part(&set, ordinal);
                assert!(part.len() <= 63, "{part}: {} characters", part.len());
                assert!(part.ends_with(&format!("{tail}-{ordinal}")), "{part}");
                let swap = swap_part(&set, ordinal);
                assert!(swap.len() <= 63, "{swap}: {} characters", swap.len());
                assert!(swap.ends_with(&format!("{tail}-swap-{ordinal}")), "{swap}");
            }
        }
    }

    #[test]
    fn a_set_whose_tail_fills_the_whole_name_gets_parts_without_a_panic() {
        let set = format!("x-{}", "a".repeat(61));
        for ordinal in [0, 1, 19] {
            for (name, suffix) in [
                (part(&set, ordinal), format!("-{ordinal}")),
                (swap_part(&set, ordinal), format!("-swap-{ordinal}")),
                (undo_part(&set, ordinal), format!("-undo-{ordinal}")),
            ] {
                assert!(name.len() <= 63, "{name}: {} bytes", name.len());
                assert!(name.ends_with(&format!("a{suffix}")), "{name}");
            }
        }
    }

    #[test]
    fn a_part_never_starts_with_the_dash_of_its_sets_tail() {
        let set = format!("x-{}", "a".repeat(60));
        assert_eq!(part(&set, 0), format!("{}-0", "a".repeat(60)));
    }

    #[test]
    fn a_claims_ordinal_is_read_back_only_from_the_name_the_statefulset_gives_it() {
        assert_eq!(claim_ordinal("hello", &claim("hello", 3)), Some(3));
        assert_eq!(claim_ordinal("hello", "data-hello-2-0"), None);
        assert_eq!(claim_ordinal("hello", "data-hello-01"), None);
        assert_eq!(claim_ordinal("hello", "data-hello--1"), None);
        assert_eq!(claim_ordinal("hello", "backups-hello"), None);
    }

    #[test]
    fn child_names_fit_their_limits_for_the_longest_name() {
        let name = "a".repeat(MAX_NAME_LEN);
        assert!(cronjob(&name).len() <= 52);
        assert!(backup_job(&name, "uid", "2026-11-29T15:00:00Z").len() <= 63);
        assert!(restore_job(&name, "uid", "x").len() <= 63);
        assert!(initial_restore_job(&name, "uid", Some("x")).len() <= 63);
        assert!(claim(&name, 19).len() <= 63);
        assert!(volume(&"n".repeat(63), &name, 19).len() <= 253);
        assert!(backup_volume("/any/root", &"n".repeat(63), &name).len() <= 253);
        assert!(backup_claim(&name).len() <= 253);
        assert!(wipe_job(&name, "uid").len() <= 63);
        assert!(purge_job(&name, "uid").len() <= 63);
    }

    #[test]
    fn look_alike_namespace_and_name_pairs_get_different_volumes() {
        // DNS labels hold '-' but never '.': the join is unambiguous.
        assert_ne!(volume("team-a", "db", 0), volume("team", "a-db", 0));
        assert_ne!(
            backup_volume("/r", "team-a", "db"),
            backup_volume("/r", "team", "a-db")
        );
        assert_ne!(
            backup_volume("/r", "team", "db"),
            backup_volume("/s", "team", "db"),
            "each root has a volume of its own"
        );
        assert_eq!(
            backup_volume("/r/", "team", "db"),
            backup_volume("/r", "team", "db")
        );
        assert_eq!(
            legacy_volume("team-a", "db", 0),
            legacy_volume("team", "a-db", 0),
            "the 0.1.0 names collided"
        );
    }

    #[test]
    fn job_names_are_stable_and_differ_per_token() {
        assert_eq!(backup_job("app", "u1", "t1"), backup_job("app", "u1", "t1"));
        assert_ne!(backup_job("app", "u1", "t1"), backup_job("app", "u1", "t2"));
        assert_ne!(
            restore_job("app", "u1", "t1"),
            restore_job("app", "u2", "t1")
        );
        assert_ne!(
            initial_restore_job("app", "u1", None),
            initial_restore_job("app", "u2", None)
        );
        assert_ne!(
            initial_restore_job("app", "u1", None),
            initial_restore_job("app", "u1", Some("t1"))
        );
        assert_eq!(short_hash("").len(), 8);
    }

    #[test]
    fn volumes_of_same_named_apps_in_two_namespaces_differ() {
        assert_ne!(volume("a", "app", 0), volume("b", "app", 0));
        assert_ne!(
            volume_host_path("a", "app", "u", 0),
            volume_host_path("b", "app", "u", 0)
        );
        assert_ne!(
            volume_host_path("a", "app", "u1", 0),
            volume_host_path("a", "app", "u2", 0),
            "a re-created app never gets the data of an earlier one"
        );
    }
}
