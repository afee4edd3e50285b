//! What a reconcile pass reads: the app's children as the controller's watches last saw
//! them, kept in reflector stores, so that a pass over an app at rest sends no request.
//!
//! Every child the reconciler makes carries the `managed-by` label, and only those are
//! watched. A store may lag a moment behind the API server; where a stale read could do harm
//! (a restore that may be running, the status a pass builds on) the controller reads fresh
//! and says why beside that read.

use std::fmt::Debug;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use futures::Stream;
use hellostateful_api::names::{self, Component};
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetStatus};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimStatus, PersistentVolumeSpec, PersistentVolumeStatus, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::watcher::{self, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::OnceCell;

use crate::watch;

const INSTANCE: &str = "app.kubernetes.io/instance";
const COMPONENT: &str = "app.kubernetes.io/component";

/// The reconciler's view of its children and of the namespaces they live in.
#[derive(Clone)]
pub struct Cache {
    statefulsets: Store<StatefulSet>,
    services: Store<Service>,
    claims: Store<PersistentVolumeClaim>,
    /// Metadata only: a CronJob is compared through its version (see `version_print`).
    cronjobs: Store<PartialObjectMeta<CronJob>>,
    jobs: Store<Job>,
    volumes: Store<PersistentVolume>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    nodes: Store<Node>,
    /// Set once every store holds its first list. A store's own readiness wakes only the
    /// last of several tasks waiting on it (kube-runtime's `DelayedInit` keeps one waker),
    /// so one task waits on the stores and the others wait on this.
    ready: Arc<OnceCell<()>>,
}

/// The write sides of a `Cache`: fed by `Writers::watch` (or by hand in tests).
pub struct Writers {
    pub statefulsets: Writer<StatefulSet>,
    pub services: Writer<Service>,
    pub claims: Writer<PersistentVolumeClaim>,
    pub cronjobs: Writer<PartialObjectMeta<CronJob>>,
    pub jobs: Writer<Job>,
    pub volumes: Writer<PersistentVolume>,
    pub namespaces: Writer<PartialObjectMeta<Namespace>>,
    pub nodes: Writer<Node>,
}

impl Cache {
    /// An empty cache and the writers that fill it.
    pub fn new() -> (Self, Writers) {
        let (statefulsets, statefulsets_writer) = reflector::store();
        let (services, services_writer) = reflector::store();
        let (claims, claims_writer) = reflector::store();
        let (cronjobs, cronjobs_writer) = reflector::store();
        let (jobs, jobs_writer) = reflector::store();
        let (volumes, volumes_writer) = reflector::store();
        let (namespaces, namespaces_writer) = reflector::store();
        let (nodes, nodes_writer) = reflector::store();
        let cache = Self {
            statefulsets,
            services,
            claims,
            cronjobs,
            jobs,
            volumes,
            namespaces,
            nodes,
            ready: Arc::default(),
        };
        let writers = Writers {
            statefulsets: statefulsets_writer,
            services: services_writer,
            claims: claims_writer,
            cronjobs: cronjobs_writer,
            jobs: jobs_writer,
            volumes: volumes_writer,
            namespaces: namespaces_writer,
            nodes: nodes_writer,
        };
        (cache, writers)
    }

    /// Waits until every store holds its first full list: a pass that ran before would take
    /// existing children for missing ones and write them again.
    pub async fn ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.ready
            .get_or_try_init(|| async {
                tokio::try_join!(
                    self.statefulsets.wait_until_ready(),
                    self.services.wait_until_ready(),
                    self.claims.wait_until_ready(),
                    self.cronjobs.wait_until_ready(),
                    self.jobs.wait_until_ready(),
                    self.volumes.wait_until_ready(),
                    self.namespaces.wait_until_ready(),
                    self.nodes.wait_until_ready(),
                )
                .map(|_| ())
            })
            .await
            .copied()
    }

    pub fn statefulset(&self, namespace: &str, name: &str) -> Option<Arc<StatefulSet>> {
        self.statefulsets
            .get(&ObjectRef::new(name).within(namespace))
    }

    pub fn service(&self, namespace: &str, name: &str) -> Option<Arc<Service>> {
        self.services.get(&ObjectRef::new(name).within(namespace))
    }

    pub fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims.get(&ObjectRef::new(name).within(namespace))
    }

    pub fn cronjob(&self, namespace: &str, name: &str) -> Option<Arc<PartialObjectMeta<CronJob>>> {
        self.cronjobs.get(&ObjectRef::new(name).within(namespace))
    }

    pub fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.volumes.get(&ObjectRef::new(name))
    }

    /// Every node of the cluster.
    pub fn nodes(&self) -> Vec<Arc<Node>> {
        self.nodes.state()
    }

    /// The uid of the namespace `name`, if it exists.
    pub fn namespace_uid(&self, name: &str) -> Option<String> {
        self.namespaces.get(&ObjectRef::new(name))?.uid()
    }

    /// The mover Jobs of app `name` in `namespace` (on demand, initial and scheduled).
    pub fn jobs(&self, namespace: &str, name: &str) -> Vec<Arc<Job>> {
        self.jobs
            .state_filter(|job| job.namespace().as_deref() == Some(namespace) && is_of(job, name))
    }

    /// The names of the data claims of app `name` in `namespace`, of every ordinal that
    /// ever ran (a StatefulSet scaled down keeps the claims of the replicas it removed).
    pub fn data_claims(&self, namespace: &str, name: &str) -> Vec<String> {
        self.claims
            .state_filter(|claim| {
                claim.namespace().as_deref() == Some(namespace)
                    && is_of(claim, name)
                    && claim.labels().get(COMPONENT).map(String::as_str)
                        == Some(Component::Storage.as_str())
            })
            .iter()
            .map(|claim| claim.name_any())
            .collect()
    }

    /// The data volumes of app `name` in `namespace`: the backup volume carries the same
    /// app labels, and outlives the app.
    pub fn data_volumes(&self, namespace: &str, name: &str) -> Vec<Arc<PersistentVolume>> {
        self.volumes.state_filter(|volume| {
            let labels = volume.labels();
            is_of(volume, name)
                && labels.get(names::NAMESPACE_LABEL).map(String::as_str) == Some(namespace)
                && labels.get(COMPONENT).map(String::as_str) == Some(Component::Storage.as_str())
        })
    }
}

fn is_of(object: &impl ResourceExt, app: &str) -> bool {
    object.labels().get(INSTANCE).map(String::as_str) == Some(app)
}

impl Writers {
    /// The watch streams that fill the stores, one per kind, each yielding the objects it
    /// saw (for the controller to map to their apps), kept as `Cached::keep` says.
    pub fn watch(self, client: &Client, managed: &watcher::Config) -> Watches {
        let namespaces = Api::<PartialObjectMeta<Namespace>>::all(client.clone());
        // Renewed before the client's read timeout, as every other watch.
        let renewed = watcher::Config::default().timeout(managed.timeout.unwrap_or(290));
        let namespaces = watcher(namespaces, renewed.clone())
            .reflect(self.namespaces)
            .touched_objects();
        Watches {
            statefulsets: Box::pin(cached(client, managed, self.statefulsets)),
            services: Box::pin(cached(client, managed, self.services)),
            claims: Box::pin(cached(client, managed, self.claims)),
            cronjobs: Box::pin(cached(client, managed, self.cronjobs)),
            jobs: Box::pin(cached(client, managed, self.jobs)),
            volumes: Box::pin(cached(client, managed, self.volumes)),
            namespaces: Box::pin(watch::resilient(namespaces, "Namespace".into())),
            // Every node: the app's data may go to any that its pods can run on.
            nodes: Box::pin(cached(client, &renewed, self.nodes)),
        }
    }
}

/// How objects of a kind are kept in the cache: without what passes never read. Every kind
/// loses managedFields (most of an object's size), its resourceVersion and its creation
/// time; `trim` drops what else a kind's readers never look at.
pub trait Cached:
    Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Serialize + Send + Sync + 'static
{
    /// Drops the parts of the object that passes never read.
    fn trim(&mut self) {}

    /// The object as the cache keeps it.
    fn keep(&mut self) {
        let meta = self.meta_mut();
        meta.managed_fields = None;
        meta.resource_version = None;
        meta.creation_timestamp = None;
        self.trim();
    }
}

impl Cached for Service {
    // Its spec is compared with the desired one; its status (load balancers) never is.
    fn trim(&mut self) {
        self.status = None;
    }
}

impl Cached for PartialObjectMeta<CronJob> {}

impl Cached for PersistentVolumeClaim {
    // Read: which volume it is bound to, and whether it is Bound.
    fn trim(&mut self) {
        self.spec = self.spec.take().map(|spec| PersistentVolumeClaimSpec {
            volume_name: spec.volume_name,
            ..Default::default()
        });
        self.status = self
            .status
            .take()
            .map(|status| PersistentVolumeClaimStatus {
                phase: status.phase,
                ..Default::default()
            });
    }
}

impl Cached for PersistentVolume {
    // Read: the node it is pinned to, its node directory, and whether it is Released.
    fn trim(&mut self) {
        self.spec = self.spec.take().map(|spec| PersistentVolumeSpec {
            host_path: spec.host_path,
            node_affinity: spec.node_affinity,
            ..Default::default()
        });
        self.status = self.status.take().map(|status| PersistentVolumeStatus {
            phase: status.phase,
            ..Default::default()
        });
    }
}

impl Cached for Job {
    // A Job's labels, annotations, TTL and status are read; it is never applied again.
    fn trim(&mut self) {
        if let Some(spec) = self.spec.as_mut() {
            spec.template = Default::default();
        }
    }
}

impl Cached for Node {
    // The images a node holds: long lists that placement never reads.
    fn trim(&mut self) {
        if let Some(status) = self.status.as_mut() {
            status.images = None;
        }
    }
}

impl Cached for StatefulSet {
    // Read: the replicas asked and ready, and the claim templates (immutable, so carried
    // into what is applied); the rest is compared through its version (`version_print`).
    fn trim(&mut self) {
        self.spec = self.spec.take().map(|spec| StatefulSetSpec {
            replicas: spec.replicas,
            volume_claim_templates: spec.volume_claim_templates,
            ..Default::default()
        });
        self.status = self.status.take().map(|status| StatefulSetStatus {
            replicas: status.replicas,
            ready_replicas: status.ready_replicas,
            ..Default::default()
        });
    }
}

/// A digest of everything of `desired` that the reconciler applies (labels, annotations,
/// owners, spec): it changes when what the reconciler wants changes.
pub fn applied_print<K: Resource + Serialize>(desired: &K) -> String {
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
pub fn version_print(meta: &ObjectMeta) -> String {
    digest(&(
        &meta.uid,
        meta.generation,
        &meta.labels,
        &meta.annotations,
        &meta.owner_references,
    ))
}

fn digest(parts: &impl Serialize) -> String {
    let mut hasher = DefaultHasher::new();
    serde_json::to_string(parts)
        .unwrap_or_default()
        .hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

type Objects<K> = std::pin::Pin<Box<dyn Stream<Item = Result<K, watcher::Error>> + Send>>;

/// The streams of `Writers::watch`: each must be polled for its store to fill.
pub struct Watches {
    pub statefulsets: Objects<StatefulSet>,
    pub services: Objects<Service>,
    pub claims: Objects<PersistentVolumeClaim>,
    pub cronjobs: Objects<PartialObjectMeta<CronJob>>,
    pub jobs: Objects<Job>,
    pub volumes: Objects<PersistentVolume>,
    pub namespaces: Objects<PartialObjectMeta<Namespace>>,
    pub nodes: Objects<Node>,
}

/// Every object of kind `K` that `config` selects, cluster-wide, reflected into `writer`
/// as `Cached::keep` says.
fn cached<K: Cached>(
    client: &Client,
    config: &watcher::Config,
    writer: Writer<K>,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + use<K> {
    let objects = watcher(Api::<K>::all(client.clone()), config.clone())
        .modify(K::keep)
        .reflect(writer)
        .touched_objects();
    watch::resilient(objects, K::kind(&()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn fill<K: Resource<DynamicType = ()> + Clone>(writer: &mut Writer<K>) {
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
    }

    fn statefulset(generation: i64) -> StatefulSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "hello", "namespace": "ns1", "uid": "u1", "generation": generation,
                         "resourceVersion": "7", "labels": {"app.kubernetes.io/instance": "hello"}},
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
        let mut kept = full.clone();
        kept.keep();
        let spec = kept.spec.as_ref().expect("spec");
        assert_eq!(spec.replicas, Some(2));
        assert_eq!(
            spec.volume_claim_templates,
            full.spec.as_ref().expect("spec").volume_claim_templates,
            "claim templates are carried into what is applied"
        );
        assert_eq!(spec.template, Default::default(), "no pod template");
        assert_eq!(spec.selector, Default::default(), "no selector");
        let status = kept.status.as_ref().expect("status");
        assert_eq!((status.replicas, status.ready_replicas), (2, Some(1)));
        assert_eq!(status.current_revision, None);
        assert_eq!(kept.metadata.resource_version, None);
        assert_eq!(
            version_print(&kept.metadata),
            version_print(&full.metadata),
            "the cached copy is at the version the API server's is"
        );
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

    #[tokio::test]
    async fn every_pass_waiting_for_the_first_lists_goes_on_once_they_are_in() {
        let (cache, mut writers) = Cache::new();
        let waiting: Vec<_> = (0..5)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move { cache.ready().await.is_ok() })
            })
            .collect();
        tokio::task::yield_now().await;
        fill(&mut writers.statefulsets);
        fill(&mut writers.services);
        fill(&mut writers.claims);
        fill(&mut writers.cronjobs);
        fill(&mut writers.jobs);
        fill(&mut writers.volumes);
        fill(&mut writers.nodes);
        fill(&mut writers.namespaces);
        for pass in waiting {
            let ready = tokio::time::timeout(Duration::from_secs(5), pass).await;
            assert!(
                matches!(ready, Ok(Ok(true))),
                "a waiting pass was never woken"
            );
        }
    }
}
