//! What the cache keeps of each kind it watches. A reflector store holds every object of its
//! kind for as long as it exists, so with a thousand apps every kilobyte kept per object is
//! megabytes of the reconciler's memory.
//!
//! StatefulSets, PersistentVolumes, their claims and CronJobs (one or more per app) are kept
//! as `Kept` views of what passes read of them, a fraction of the full object's size: the
//! k8s-openapi types carry every field of the kind inline, set or not, and a B-tree node per
//! label or annotation map. Services (compared field by field with the desired one), Jobs and
//! Nodes (few) are kept whole, less what nothing reads.

use std::borrow::Cow;
use std::fmt::Debug;
use std::hash::{DefaultHasher, Hash, Hasher};

use hellostateful_api::names::{self, Component};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::children;

const INSTANCE: &str = "app.kubernetes.io/instance";
const COMPONENT: &str = "app.kubernetes.io/component";

/// How objects of a kind are kept in the cache.
pub trait Cached:
    Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static
{
    /// What the cache holds of one object.
    type Kept: Resource<DynamicType = ()>
        + Clone
        + Debug
        + DeserializeOwned
        + PartialEq
        + Send
        + Sync
        + 'static;

    /// The object as the cache keeps it.
    fn keep(self) -> Self::Kept;
}

/// What a kind kept whole never needs: managedFields (most of an object's size), its
/// resourceVersion and its creation time.
fn strip(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.resource_version = None;
    meta.creation_timestamp = None;
}

/// The labels the reconciler reads of its Jobs and Services.
const OUR_LABELS: [&str; 7] = [
    "app.kubernetes.io/name",
    INSTANCE,
    "app.kubernetes.io/managed-by",
    COMPONENT,
    names::ACTION_LABEL,
    names::PARTS_LABEL,
    names::PART_OF_LABEL,
];

/// Only the labels and annotations the reconciler reads, its own keys: what else anyone put
/// on an object (up to a megabyte of it) is never kept, so that a tenant's objects cost the
/// reconciler's memory little whatever their size in the cluster.
pub fn keep_ours(meta: &mut ObjectMeta) {
    if let Some(labels) = meta.labels.as_mut() {
        labels.retain(|key, _| OUR_LABELS.contains(&key.as_str()));
    }
    let ours = format!("{}/", names::GROUP);
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|key, _| key.starts_with(&ours));
    }
}

/// The annotations of an app that passes read: the on-demand requests and the delete option.
const APP_ANNOTATIONS: [&str; 5] = [
    names::BACKUP_REQUESTED,
    names::BACKUP_REREAD,
    names::RESTORE_REQUESTED,
    names::RESTORE_FROM,
    names::DELETE_BACKUPS,
];

/// The longest value of those kept as it is: tokens are times, snapshots are ids or
/// `latest`, the delete option is `true`.
pub const LONGEST_KEPT_VALUE: usize = 253;

/// What a longer value is kept as (followed by its length): never a valid token, snapshot or
/// option, and a few bytes whatever a tenant wrote.
pub const OVERSIZED: &str = "an oversized value of ";

/// The longest image reference kept as it is (a registry, a path, a tag and a digest).
const LONGEST_IMAGE: usize = 1024;

/// `value`, or when longer than `longest` bytes, what it is kept as instead.
fn bounded(value: &str, longest: usize) -> String {
    if value.len() > longest {
        format!("{OVERSIZED}{} bytes", value.len())
    } else {
        value.to_owned()
    }
}

/// What the cache keeps of an app's metadata, apart from its name, namespace, uid, owners
/// and finalizers: no labels, no managedFields (kubectl's copy of the spec), and only the
/// annotations passes read, each bounded. The spec is bounded by the CRD's schema; the
/// metadata is not, and a tenant's apps are as many as its quota allows.
pub fn keep_app(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.labels = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|key, _| APP_ANNOTATIONS.contains(&key.as_str()));
        for value in annotations.values_mut() {
            *value = bounded(value, LONGEST_KEPT_VALUE);
        }
    }
}

impl Cached for Service {
    type Kept = Self;

    // Its spec is compared with the desired one; its status (load balancers) never is.
    fn keep(mut self) -> Self {
        strip(&mut self.metadata);
        keep_ours(&mut self.metadata);
        self.status = None;
        self
    }
}

impl Cached for Job {
    type Kept = Self;

    // A Job's labels, annotations, TTL and status are read; it is never applied again.
    fn keep(mut self) -> Self {
        strip(&mut self.metadata);
        keep_ours(&mut self.metadata);
        if let Some(spec) = self.spec.as_mut() {
            spec.template = Default::default();
        }
        self
    }
}

impl Cached for Node {
    type Kept = Self;

    // The images a node holds: long lists that placement never reads.
    fn keep(mut self) -> Self {
        strip(&mut self.metadata);
        if let Some(status) = self.status.as_mut() {
            status.images = None;
        }
        self
    }
}

/// The part of a kind that a `Kept` holds.
pub trait View: Clone + Debug + DeserializeOwned + Send + Sync + 'static {
    /// The kind this is a view of.
    type Of: Resource<DynamicType = ()>;

    fn of(object: &Self::Of) -> Self;
}

/// A child as the cache keeps it: its name, namespace (the store's key) and uid, the app it
/// belongs to, whether it is being deleted, and `view`, what passes read of its kind.
/// (Deserialize only because `Controller::watches_stream` asks it of what it maps.)
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Kept<V> {
    metadata: ObjectMeta,
    /// From the child's labels: which app's events it wakes. Labels can be forged; whose it
    /// is, is `controller`.
    pub app: Option<AppOf>,
    /// The uid of its controller owner, if it has one.
    pub controller: Option<String>,
    pub deleting: bool,
    pub view: V,
}

/// The app a child belongs to, by its `app.kubernetes.io/instance` label; PersistentVolumes
/// carry the app's namespace as a label.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct AppOf {
    pub namespace: String,
    pub name: String,
}

impl AppOf {
    pub fn of(meta: &ObjectMeta) -> Option<Self> {
        let (namespace, name) = Self::labelled(meta)?;
        Some(Self {
            namespace: namespace.clone(),
            name: name.clone(),
        })
    }

    /// Whether `meta` belongs to app `name` in `namespace`, read in place.
    pub fn is(meta: &ObjectMeta, namespace: &str, name: &str) -> bool {
        Self::labelled(meta).is_some_and(|(ns, app)| ns == namespace && app == name)
    }

    fn labelled(meta: &ObjectMeta) -> Option<(&String, &String)> {
        let labels = meta.labels.as_ref()?;
        let namespace = meta
            .namespace
            .as_ref()
            .or_else(|| labels.get(names::NAMESPACE_LABEL))?;
        Some((namespace, labels.get(INSTANCE)?))
    }
}

impl<V: View> Kept<V> {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// Whether it belongs to app `name` in `namespace`.
    pub fn is_of(&self, namespace: &str, name: &str) -> bool {
        self.app
            .as_ref()
            .is_some_and(|app| app.namespace == namespace && app.name == name)
    }

    /// Whether its controller is the object with uid `owner`.
    pub fn is_controlled_by(&self, owner: &str) -> bool {
        self.controller.as_deref() == Some(owner)
    }
}

/// The uid of `meta`'s controller owner: the one object that may act on it. Anyone who can
/// create an object can give it any labels, but not an owner it cannot name by uid (and an
/// app's uid is new with every app, so an earlier app's children are never taken for a new
/// one's of the same name).
pub fn controller_uid(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|owner| owner.controller == Some(true))
        .map(|owner| owner.uid.as_str())
}

impl<V: View> Resource for Kept<V> {
    type DynamicType = ();
    type Scope = <V::Of as Resource>::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        V::Of::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        V::Of::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        V::Of::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        V::Of::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

fn kept<V: View>(object: &V::Of) -> Kept<V> {
    let meta = object.meta();
    Kept {
        metadata: ObjectMeta {
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
            ..Default::default()
        },
        app: AppOf::of(meta),
        controller: controller_uid(meta).map(str::to_string),
        deleting: meta.deletion_timestamp.is_some(),
        view: V::of(object),
    }
}

macro_rules! kept_as {
    ($kind:ty, $view:ty) => {
        impl Cached for $kind {
            type Kept = Kept<$view>;

            fn keep(self) -> Kept<$view> {
                kept(&self)
            }
        }
    };
}

kept_as!(StatefulSet, StatefulSetView);
kept_as!(PersistentVolumeClaim, ClaimView);
kept_as!(PersistentVolume, VolumeView);
kept_as!(PartialObjectMeta<CronJob>, CronJobView);

fn is_storage(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|labels| labels.get(COMPONENT))
        .is_some_and(|component| component == Component::Storage.as_str())
}

/// What passes read of a StatefulSet; the rest is compared through its version.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct StatefulSetView {
    /// `version_print` of the object.
    pub version: u64,
    pub ready_replicas: i32,
    /// The record of how the restore before the app's first start ended.
    pub initial_restore: Option<String>,
    /// The record of the volumes prepared for a non-root app (see `prepare`).
    pub prepared: Option<String>,
    /// The node its pods are pinned to, if they are.
    pub pods_node: Option<String>,
    /// The volume claim templates, as JSON: immutable, so carried into what is applied.
    /// Kept as text, a tenth of their size as k8s-openapi objects; parsed only when read.
    claim_templates: Option<String>,
}

impl View for StatefulSetView {
    type Of = StatefulSet;

    fn of(sts: &StatefulSet) -> Self {
        Self {
            version: version_print(&sts.metadata),
            ready_replicas: sts
                .status
                .as_ref()
                .and_then(|status| status.ready_replicas)
                .unwrap_or(0),
            initial_restore: sts.annotations().get(names::INITIAL_RESTORE).cloned(),
            prepared: sts.annotations().get(names::PREPARED).cloned(),
            pods_node: children::pods_node(sts),
            // Without the status the API server gives each template, so that what is carried
            // into the next apply is what was applied (and is found in line, unread).
            claim_templates: sts
                .spec
                .as_ref()
                .and_then(|spec| spec.volume_claim_templates.as_ref())
                .and_then(|templates| {
                    let templates: Vec<_> = templates
                        .iter()
                        .map(|template| PersistentVolumeClaim {
                            status: None,
                            ..template.clone()
                        })
                        .collect();
                    serde_json::to_string(&templates).ok()
                }),
        }
    }
}

impl StatefulSetView {
    pub fn claim_templates(&self) -> Option<Vec<PersistentVolumeClaim>> {
        serde_json::from_str(self.claim_templates.as_deref()?).ok()
    }
}

/// What passes read of a PersistentVolumeClaim.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ClaimView {
    /// A claim of the app's data (not of its backups).
    pub storage: bool,
    pub volume_name: Option<String>,
    pub bound: bool,
    /// The mover image its annotation names (a backup claim's; see `children::backup_claim`).
    pub mover_image: Option<String>,
}

impl View for ClaimView {
    type Of = PersistentVolumeClaim;

    fn of(claim: &PersistentVolumeClaim) -> Self {
        Self {
            storage: is_storage(&claim.metadata),
            volume_name: claim.spec.as_ref().and_then(|s| s.volume_name.clone()),
            bound: claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"),
            mover_image: claim
                .annotations()
                .get(names::MOVER_IMAGE_ANNOTATION)
                .map(|image| bounded(image, LONGEST_IMAGE)),
        }
    }
}

/// What passes read of a PersistentVolume.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct VolumeView {
    /// A volume of the app's data (not of its backups).
    pub storage: bool,
    /// The node it is pinned to.
    pub node: Option<String>,
    /// Its node directory.
    pub host_path: Option<String>,
    pub released: bool,
    /// The uid of the namespace whose backups it holds (backup volumes).
    pub namespace_uid: Option<String>,
}

impl View for VolumeView {
    type Of = PersistentVolume;

    fn of(volume: &PersistentVolume) -> Self {
        Self {
            storage: is_storage(&volume.metadata),
            node: children::volume_node(volume),
            host_path: volume
                .spec
                .as_ref()
                .and_then(|s| Some(s.host_path.as_ref()?.path.clone())),
            released: volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released"),
            namespace_uid: volume
                .annotations()
                .get(names::NAMESPACE_UID_ANNOTATION)
                .cloned(),
        }
    }
}

/// A CronJob is only compared through its version (and watched as metadata alone).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct CronJobView {
    /// `version_print` of the object.
    pub version: u64,
}

impl View for CronJobView {
    type Of = PartialObjectMeta<CronJob>;

    fn of(cronjob: &PartialObjectMeta<CronJob>) -> Self {
        Self {
            version: version_print(&cronjob.metadata),
        }
    }
}

/// A digest of everything of `desired` that the reconciler applies (labels, annotations,
/// owners, spec): it changes when what the reconciler wants changes.
pub fn applied_print<K: Resource + Serialize>(desired: &K) -> u64 {
    let meta = desired.meta();
    let spec = serde_json::to_value(desired)
        .ok()
        .and_then(|mut value| value.get_mut("spec").map(serde_json::Value::take));
    digest(&(
        &meta.labels,
        &meta.annotations,
        &meta.owner_references,
        spec,
    ))
}

/// A digest of an object's version as far as the reconciler's part of it goes: its uid (a
/// re-creation), its generation (which StatefulSets and CronJobs raise on every change of
/// their spec, by anyone), and its labels, annotations and owners. Computed from metadata
/// alone, so the cache needs no spec to tell an object that is in line from one edited
/// since.
pub fn version_print(meta: &ObjectMeta) -> u64 {
    digest(&(
        &meta.uid,
        meta.generation,
        &meta.labels,
        &meta.annotations,
        &meta.owner_references,
    ))
}

fn digest(parts: &impl Serialize) -> u64 {
    let mut hasher = DefaultHasher::new();
    serde_json::to_string(parts)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statefulset(generation: i64) -> StatefulSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "hello", "namespace": "ns1", "uid": "u1", "generation": generation,
                         "resourceVersion": "7",
                         "labels": {"app.kubernetes.io/instance": "hello"},
                         "annotations": {(names::INITIAL_RESTORE): "no-backup"}},
            "spec": {"replicas": 2, "serviceName": "hello",
                     "selector": {"matchLabels": {"app.kubernetes.io/instance": "hello"}},
                     "template": {"spec": {"containers": [{"name": "app", "image": "busybox"}]}},
                     "volumeClaimTemplates": [{"metadata": {"name": "data"},
                         "spec": {"resources": {"requests": {"storage": "1Gi"}}}}]},
            "status": {"replicas": 2, "readyReplicas": 1, "currentRevision": "hello-1"}
        }))
        .expect("a StatefulSet")
    }

    #[test]
    fn a_cached_statefulset_keeps_what_passes_read_and_its_version() {
        let full = statefulset(3);
        let kept = full.clone().keep();
        assert_eq!(kept.name(), "hello");
        assert_eq!(kept.meta().namespace.as_deref(), Some("ns1"));
        assert!(kept.is_of("ns1", "hello") && !kept.is_of("ns2", "hello"));
        assert!(!kept.deleting);
        assert_eq!(kept.view.ready_replicas, 1);
        assert_eq!(kept.view.initial_restore.as_deref(), Some("no-backup"));
        assert_eq!(
            kept.view.claim_templates(),
            full.spec.as_ref().expect("spec").volume_claim_templates,
            "claim templates are carried into what is applied"
        );
        assert_eq!(
            kept.view.version,
            version_print(&full.metadata),
            "the cached copy is at the version the API server's is"
        );
    }

    #[test]
    fn a_cached_job_keeps_only_the_labels_and_annotations_the_reconciler_reads() {
        let padding = "x".repeat(64 * 1024);
        let job: Job = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "backup-hello-1",
                "labels": {"app.kubernetes.io/instance": "hello", "app.kubernetes.io/component": "backup",
                           (names::PART_OF_LABEL): "backup-hello-2", "padding": "y"},
                "annotations": {(names::STOPPED_BECAUSE): "why", "padding-1": padding.clone(),
                                "padding-2": padding}},
        }))
        .expect("a Job");
        let kept = job.keep();
        let labels: Vec<&String> = kept.labels().keys().collect();
        assert_eq!(
            labels,
            [
                "app.kubernetes.io/component",
                "app.kubernetes.io/instance",
                names::PART_OF_LABEL
            ]
        );
        let annotations: Vec<&String> = kept.annotations().keys().collect();
        assert_eq!(annotations, [names::STOPPED_BECAUSE]);
    }

    #[test]
    fn a_cached_app_keeps_only_the_annotations_passes_read_each_bounded() {
        let megabyte = "x".repeat(1024 * 1024);
        let mut meta: ObjectMeta = serde_json::from_value(serde_json::json!({
            "name": "hello",
            "labels": {"padding": megabyte.clone()},
            "annotations": {(names::BACKUP_REQUESTED): "2026-12-02T20:00:00Z",
                            (names::RESTORE_REQUESTED): megabyte.clone(),
                            "hello-stateful.example.com/padding": megabyte.clone(),
                            "padding": megabyte},
        }))
        .expect("metadata");
        keep_app(&mut meta);
        assert_eq!(meta.labels, None);
        let annotations = meta.annotations.expect("annotations");
        assert_eq!(
            annotations.keys().collect::<Vec<_>>(),
            [names::BACKUP_REQUESTED, names::RESTORE_REQUESTED]
        );
        assert_eq!(annotations[names::BACKUP_REQUESTED], "2026-12-02T20:00:00Z");
        assert_eq!(
            annotations[names::RESTORE_REQUESTED],
            format!("{OVERSIZED}1048576 bytes")
        );
    }

    #[test]
    fn a_cached_volume_keeps_its_node_path_phase_and_namespace() {
        let volume: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "hs-ns1-hello-backup",
                         "labels": {"app.kubernetes.io/instance": "hello",
                                    "app.kubernetes.io/component": "backup",
                                    (names::NAMESPACE_LABEL): "ns1"},
                         "annotations": {(names::NAMESPACE_UID_ANNOTATION): "n1"},
                         "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"hostPath": {"path": "/srv/backups/ns1/hello"},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}},
            "status": {"phase": "Released"}
        }))
        .expect("a PersistentVolume");
        let kept = volume.keep();
        assert!(kept.is_of("ns1", "hello"), "the app's namespace is a label");
        assert_eq!(kept.meta().namespace, None, "a volume has no namespace");
        assert!(kept.deleting && kept.view.released && !kept.view.storage);
        assert_eq!(kept.view.node.as_deref(), Some("n1"));
        assert_eq!(
            kept.view.host_path.as_deref(),
            Some("/srv/backups/ns1/hello")
        );
        assert_eq!(kept.view.namespace_uid.as_deref(), Some("n1"));
    }

    #[test]
    fn the_version_print_moves_with_the_generation_uid_labels_annotations_and_owners() {
        let base = statefulset(3).metadata;
        let print = version_print(&base);
        let mut changes: Vec<(&str, ObjectMeta)> = Vec::new();
        let mut edited = base.clone();
        edited.generation = Some(4);
        changes.push(("a spec edit (generation)", edited));
        let mut recreated = base.clone();
        recreated.uid = Some("u2".into());
        changes.push(("a re-creation (uid)", recreated));
        let mut relabelled = base.clone();
        relabelled.labels = None;
        changes.push(("labels", relabelled));
        let mut annotated = base.clone();
        annotated.annotations = Some([("a".to_string(), "b".to_string())].into());
        changes.push(("annotations", annotated));
        let mut adopted = base.clone();
        adopted.owner_references = Some(vec![Default::default()]);
        changes.push(("owners", adopted));
        for (what, meta) in changes {
            assert_ne!(version_print(&meta), print, "{what} must change the print");
        }
        let mut rewritten = base.clone();
        rewritten.resource_version = Some("8".into());
        assert_eq!(
            version_print(&rewritten),
            print,
            "a status write (resourceVersion only) is no change of ours"
        );
    }
}
