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
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Service,
};
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
    cronjobs: Store<CronJob>,
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
    pub cronjobs: Writer<CronJob>,
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

    pub fn cronjob(&self, namespace: &str, name: &str) -> Option<Arc<CronJob>> {
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

/// The annotation of a cached StatefulSet or CronJob that holds the fingerprint of the
/// object as the API server had it (`fingerprint`), in place of the spec parts dropped.
/// Only ever on the cached copy: the API server never sees it.
pub const FINGERPRINT: &str = "hellostateful.cache/fingerprint";

/// How objects of a kind are kept in the cache: without managedFields (which passes never
/// read, and which are most of an object's size), and without whatever `trim` drops.
pub trait Cached:
    Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Serialize + Send + Sync + 'static
{
    /// Drops the parts of the object that passes never read.
    fn trim(&mut self) {}

    /// The object as the cache keeps it.
    fn keep(&mut self) {
        self.meta_mut().managed_fields = None;
        self.trim();
    }
}

impl Cached for Service {}
impl Cached for PersistentVolumeClaim {}
impl Cached for PersistentVolume {}

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
    // The pod template is compared only through the fingerprint; the claim templates,
    // replicas and status are read.
    fn trim(&mut self) {
        let print = fingerprint(self);
        self.annotations_mut().insert(FINGERPRINT.into(), print);
        if let Some(spec) = self.spec.as_mut() {
            spec.template = Default::default();
        }
    }
}

impl Cached for CronJob {
    // Only compared, through the fingerprint.
    fn trim(&mut self) {
        let print = fingerprint(self);
        self.annotations_mut().insert(FINGERPRINT.into(), print);
        if let Some(spec) = self.spec.as_mut() {
            spec.job_template = Default::default();
        }
    }
}

/// A digest of everything of `object` that the reconciler applies (labels, annotations,
/// owners, spec), and of nothing that others change on their own (status, versions): it
/// changes when the object is edited, by the reconciler or by hand.
pub fn fingerprint<K: Resource + Serialize>(object: &K) -> String {
    let meta = object.meta();
    let mut annotations = meta.annotations.clone().unwrap_or_default();
    annotations.remove(FINGERPRINT);
    let spec = serde_json::to_value(object)
        .ok()
        .and_then(|mut value| value.get_mut("spec").map(serde_json::Value::take));
    let parts = (&meta.labels, annotations, &meta.owner_references, spec);
    let mut hasher = DefaultHasher::new();
    serde_json::to_string(&parts)
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
    pub cronjobs: Objects<CronJob>,
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
