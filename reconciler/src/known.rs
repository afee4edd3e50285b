//! What this replica last knew of each app, so that a pass builds on a copy no older than
//! its own last status write without reading the app again.
//!
//! The cached app lags a moment behind the API server. A pass that built status on a copy
//! older than this replica's own last write would write old conditions back (its write's
//! resourceVersion precondition would refuse it, and the pass would be lost). While the watch
//! has not delivered that write, the app as the write returned it is the copy to build on:
//! kept here until the watch delivers it, then only its version is (so at rest this holds a
//! version per app, as a read-free check needs). When apps are created by the thousand, the
//! children's events start passes before the watch delivers the status just written; this
//! saves the read each of those passes made.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hellostateful_api::HelloStateful;
use kube::ResourceExt;

use crate::kept;

/// Per app uid, what this replica last knew of the app.
#[derive(Default)]
pub struct KnownApps {
    apps: Mutex<HashMap<String, Known>>,
}

enum Known {
    /// The app's resourceVersion after this replica's last status write, or as a pass found it.
    Version(String),
    /// The app as this replica's last status write returned it, not yet delivered by the watch.
    Written(Arc<HelloStateful>),
    /// A write built on what was known was refused: someone wrote the app since, at a
    /// version not known here.
    Refused,
}

impl Known {
    fn version(&self) -> Option<&str> {
        match self {
            Known::Version(version) => Some(version),
            Known::Written(app) => app.metadata.resource_version.as_deref(),
            Known::Refused => None,
        }
    }
}

/// What a pass builds on, given the cached copy of its app.
#[derive(Debug, PartialEq)]
pub enum Basis {
    /// The cached copy: at the version last known (or no version is known).
    Cached,
    /// The app as this replica last wrote it: the cached copy differs from it in status and
    /// version alone, so it is the cache that lags.
    Written(Arc<HelloStateful>),
    /// Neither: read the app.
    Read,
}

impl KnownApps {
    /// What a pass on `cached` should build on.
    pub fn basis(&self, cached: &HelloStateful) -> Basis {
        let Some(uid) = cached.metadata.uid.as_deref() else {
            return Basis::Cached;
        };
        let Ok(apps) = self.apps.lock() else {
            return Basis::Read;
        };
        match apps.get(uid) {
            None => Basis::Cached,
            Some(known) if known.version() == cached.metadata.resource_version.as_deref() => {
                Basis::Cached
            }
            Some(Known::Written(written)) if same_but_status(written, cached) => {
                Basis::Written(written.clone())
            }
            Some(_) => Basis::Read,
        }
    }

    /// A pass's status write returned `written`.
    pub fn written(&self, mut written: HelloStateful) {
        // Kept as the cache keeps apps, so that the two compare and read alike.
        kept::keep_app(&mut written.metadata);
        if let (Some(uid), Ok(mut apps)) = (written.uid(), self.apps.lock()) {
            apps.insert(uid, Known::Written(Arc::new(written)));
        }
    }

    /// A pass built on `app` and wrote no status.
    pub fn seen(&self, app: &HelloStateful) {
        let (Some(uid), Some(version), Ok(mut apps)) =
            (app.uid(), app.resource_version(), self.apps.lock())
        else {
            return;
        };
        // Built on the copy written earlier: keep it until the watch delivers it.
        if apps.get(&uid).and_then(Known::version) != Some(version.as_str()) {
            apps.insert(uid, Known::Version(version));
        }
    }

    /// The watch delivered `app`: a copy kept until now is the cache's now.
    pub fn delivered(&self, app: &HelloStateful) {
        let (Some(uid), Some(version), Ok(mut apps)) = (
            app.metadata.uid.as_deref(),
            app.metadata.resource_version.as_deref(),
            self.apps.lock(),
        ) else {
            return;
        };
        if let Some(known @ Known::Written(_)) = apps.get_mut(uid)
            && known.version() == Some(version)
        {
            *known = Known::Version(version.to_string());
        }
    }

    /// A status write built on what was known of app `uid` was refused: the next pass reads
    /// it (the cached copy may still be older than this replica's earlier writes).
    pub fn refused(&self, uid: &str) {
        if let Ok(mut apps) = self.apps.lock() {
            apps.insert(uid.to_string(), Known::Refused);
        }
    }

    /// Forgets app `uid`, deleted.
    pub fn forget(&self, uid: &str) {
        if let Ok(mut apps) = self.apps.lock() {
            apps.remove(uid);
        }
    }
}

/// Whether two copies of an app differ in status and version alone: everything a pass reads
/// besides status (spec through the generation, the annotations that ask for actions, the
/// finalizers, a deletion) is the same.
fn same_but_status(a: &HelloStateful, b: &HelloStateful) -> bool {
    let (a, b) = (&a.metadata, &b.metadata);
    a.uid == b.uid
        && a.generation == b.generation
        && a.deletion_timestamp == b.deletion_timestamp
        && a.finalizers == b.finalizers
        && a.annotations == b.annotations
        && a.labels == b.labels
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(version: &str, generation: i64, ready: &str) -> HelloStateful {
        serde_json::from_value(json!({
            "apiVersion": "hello-stateful.example.com/v1alpha1", "kind": "HelloStateful",
            "metadata": {"name": "web", "namespace": "ns1", "uid": "u1", "generation": generation,
                         "resourceVersion": version, "finalizers": ["f"],
                         "managedFields": [{"manager": "kubectl"}]},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "R",
                        "message": "", "lastTransitionTime": "2026-12-07T00:00:00Z"}]}
        }))
        .expect("an app")
    }

    #[test]
    fn a_cache_that_has_not_delivered_a_write_is_built_on_as_written() {
        let known = KnownApps::default();
        assert_eq!(known.basis(&app("1", 1, "False")), Basis::Cached);
        known.written(app("2", 1, "True"));
        // The cache still has version 1: the pass builds on the written copy, unread.
        let Basis::Written(written) = known.basis(&app("1", 1, "False")) else {
            panic!("expected the written copy");
        };
        assert_eq!(written.resource_version().as_deref(), Some("2"));
        assert!(
            written.metadata.managed_fields.is_none(),
            "kept as the cache keeps apps"
        );
        // A pass built on it that writes nothing keeps it until the watch delivers it.
        known.seen(&written);
        assert!(matches!(
            known.basis(&app("1", 1, "False")),
            Basis::Written(_)
        ));
        known.delivered(&app("2", 1, "True"));
        assert_eq!(known.basis(&app("2", 1, "True")), Basis::Cached);
        // Delivered, only the version is kept: an older copy is read again.
        assert_eq!(known.basis(&app("1", 1, "False")), Basis::Read);
    }

    #[test]
    fn a_cached_copy_that_differs_in_more_than_status_is_read() {
        let known = KnownApps::default();
        known.written(app("2", 1, "True"));
        // A new spec (or a newer copy than the written one): neither copy can be trusted.
        assert_eq!(known.basis(&app("3", 2, "True")), Basis::Read);
        let mut annotated = app("3", 1, "True");
        annotated.annotations_mut().insert(
            "hello-stateful.example.com/backup-requested".into(),
            "t".into(),
        );
        kept::keep_app(&mut annotated.metadata);
        assert_eq!(known.basis(&annotated), Basis::Read);
        // After a refused write, whatever the cache holds is read again, until a pass wrote
        // or found a version.
        known.refused("u1");
        assert_eq!(known.basis(&app("2", 1, "True")), Basis::Read);
        assert_eq!(known.basis(&app("3", 2, "True")), Basis::Read);
        known.seen(&app("3", 2, "True"));
        assert_eq!(known.basis(&app("3", 2, "True")), Basis::Cached);
        // A deleted app is forgotten.
        known.forget("u1");
        assert_eq!(known.basis(&app("1", 1, "True")), Basis::Cached);
    }

    #[test]
    fn a_pass_that_writes_nothing_remembers_the_version_it_built_on() {
        let known = KnownApps::default();
        known.seen(&app("5", 1, "True"));
        assert_eq!(known.basis(&app("5", 1, "True")), Basis::Cached);
        assert_eq!(known.basis(&app("4", 1, "True")), Basis::Read);
    }
}
