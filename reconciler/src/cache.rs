//! What a reconcile pass reads: the app's children as the controller's watches last saw
//! them, kept in reflector stores, so that a pass over an app at rest sends no request.
//!
//! Every child the reconciler makes carries the `managed-by` label, and only those are
//! watched. A store may lag a moment behind the API server; where a stale read could do harm
//! (a restore that may be running, the status a pass builds on) the controller reads fresh
//! and says why beside that read.

use std::sync::Arc;

use futures::{Stream, TryStreamExt};
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
use tokio::sync::OnceCell;

use crate::kept::{
    AppOf, Cached, ClaimView, CronJobView, Kept, StatefulSetView, VolumeView, controller_uid,
};
use crate::watch;
use hellostateful_api::names;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

type KeptOf<K> = <K as Cached>::Kept;

/// The reconciler's view of its children and of the namespaces they live in.
#[derive(Clone)]
pub struct Cache {
    statefulsets: Store<KeptOf<StatefulSet>>,
    services: Store<Service>,
    claims: Store<KeptOf<PersistentVolumeClaim>>,
    /// Watched as metadata only: a CronJob is compared through its version.
    cronjobs: Store<KeptOf<PartialObjectMeta<CronJob>>>,
    jobs: Store<Job>,
    volumes: Store<KeptOf<PersistentVolume>>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    nodes: Store<Node>,
    /// Set once every store holds its first list. A store's own readiness wakes only the
    /// last of several tasks waiting on it (kube-runtime's `DelayedInit` keeps one waker),
    /// so one task waits on the stores and the others wait on this.
    ready: Arc<OnceCell<()>>,
}

/// The write sides of a `Cache`: fed by `Writers::watch` (or by hand in tests).
pub struct Writers {
    pub statefulsets: Writer<KeptOf<StatefulSet>>,
    pub services: Writer<Service>,
    pub claims: Writer<KeptOf<PersistentVolumeClaim>>,
    pub cronjobs: Writer<KeptOf<PartialObjectMeta<CronJob>>>,
    pub jobs: Writer<Job>,
    pub volumes: Writer<KeptOf<PersistentVolume>>,
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

    /// The StatefulSet `name` in `namespace` if the object with uid `owner` controls it.
    pub fn statefulset(
        &self,
        namespace: &str,
        name: &str,
        owner: &str,
    ) -> Option<Arc<Kept<StatefulSetView>>> {
        self.statefulset_named(namespace, name)
            .filter(|sts| sts.is_controlled_by(owner))
    }

    pub fn service(&self, namespace: &str, name: &str) -> Option<Arc<Service>> {
        self.services.get(&ObjectRef::new(name).within(namespace))
    }

    pub fn claim(&self, namespace: &str, name: &str) -> Option<Arc<Kept<ClaimView>>> {
        self.claims.get(&ObjectRef::new(name).within(namespace))
    }

    pub fn cronjob(&self, namespace: &str, name: &str) -> Option<Arc<Kept<CronJobView>>> {
        self.cronjobs.get(&ObjectRef::new(name).within(namespace))
    }

    pub fn volume(&self, name: &str) -> Option<Arc<Kept<VolumeView>>> {
        self.volumes.get(&ObjectRef::new(name))
    }

    /// The node `name`, if it exists.
    pub fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(&ObjectRef::new(name))
    }

    /// Every node of the cluster.
    pub fn nodes(&self) -> Vec<Arc<Node>> {
        self.nodes.state()
    }

    /// The uid of the namespace `name`, if it exists.
    pub fn namespace_uid(&self, name: &str) -> Option<String> {
        self.namespaces.get(&ObjectRef::new(name))?.uid()
    }

    /// The StatefulSet of app `name` in `namespace` as cached, whoever controls it: see
    /// [`Kept::is_controlled_by`] before acting on it.
    pub fn statefulset_named(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<Kept<StatefulSetView>>> {
        self.statefulsets
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// The mover Jobs of the app with uid `uid`, `name` in `namespace` (on demand, initial
    /// and scheduled): only those it controls, or its own CronJob does. A look-alike
    /// carrying its labels (a tenant's, or an earlier app's of the same name) is not one.
    pub fn jobs(&self, namespace: &str, name: &str, uid: &str) -> Vec<Arc<Job>> {
        let schedule = self.schedule_uid(namespace, name, uid);
        self.jobs.state_filter(|job| {
            AppOf::is(&job.metadata, namespace, name)
                && is_apps_job(&job.metadata, uid, schedule.as_deref())
        })
    }

    /// The uid of the app's backup CronJob, if the app controls it.
    pub fn schedule_uid(&self, namespace: &str, name: &str, uid: &str) -> Option<String> {
        self.cronjob(namespace, &names::cronjob(name))
            .filter(|cronjob| cronjob.is_controlled_by(uid))
            .and_then(|cronjob| cronjob.meta().uid.clone())
    }

    /// The names of the data claims of app `name` in `namespace`, of every ordinal that
    /// ever ran (a StatefulSet scaled down keeps the claims of the replicas it removed).
    pub fn data_claims(&self, namespace: &str, name: &str) -> Vec<String> {
        self.claims
            .state_filter(|claim| claim.is_of(namespace, name) && claim.view.storage)
            .iter()
            .map(|claim| claim.name().to_string())
            .collect()
    }

    /// The data volumes of app `name` in `namespace`: the backup volume carries the same
    /// app labels, and outlives the app.
    /// The backup volume of app `namespace/name` whose directory is `path`, whatever its
    /// name (it carries the root's hash, or none if an earlier version made it). Should two
    /// name the path, one of another namespace (`namespace_uid` is this one's) comes first:
    /// it must refuse the directory.
    pub fn backup_volume_at(
        &self,
        namespace: &str,
        name: &str,
        path: &str,
        namespace_uid: &str,
    ) -> Option<Arc<Kept<VolumeView>>> {
        let mut found = self.volumes.state_filter(|volume| {
            volume.is_of(namespace, name)
                && !volume.view.storage
                && volume.view.host_path.as_deref() == Some(path)
        });
        found.sort_by_key(|volume| volume.view.namespace_uid.as_deref() == Some(namespace_uid));
        found.into_iter().next()
    }

    pub fn data_volumes(&self, namespace: &str, name: &str) -> Vec<Arc<Kept<VolumeView>>> {
        self.volumes
            .state_filter(|volume| volume.is_of(namespace, name) && volume.view.storage)
    }
}

/// Whether a Job is the app's (uid `app`): controlled by the app, or by its CronJob (uid
/// `schedule`, which the app controls).
pub fn is_apps_job(job: &ObjectMeta, app: &str, schedule: Option<&str>) -> bool {
    controller_uid(job).is_some_and(|owner| owner == app || Some(owner) == schedule)
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
            statefulsets: Box::pin(cached::<StatefulSet>(client, managed, self.statefulsets)),
            services: Box::pin(cached::<Service>(client, managed, self.services)),
            claims: Box::pin(cached::<PersistentVolumeClaim>(
                client,
                managed,
                self.claims,
            )),
            cronjobs: Box::pin(cached::<PartialObjectMeta<CronJob>>(
                client,
                managed,
                self.cronjobs,
            )),
            jobs: Box::pin(cached::<Job>(client, managed, self.jobs)),
            volumes: Box::pin(cached::<PersistentVolume>(client, managed, self.volumes)),
            namespaces: Box::pin(watch::resilient(namespaces, "Namespace".into())),
            // Every node: the app's data may go to any that its pods can run on.
            nodes: Box::pin(cached::<Node>(client, &renewed, self.nodes)),
        }
    }
}

type Objects<K> = std::pin::Pin<Box<dyn Stream<Item = Result<K, watcher::Error>> + Send>>;

/// The streams of `Writers::watch`: each must be polled for its store to fill.
pub struct Watches {
    pub statefulsets: Objects<KeptOf<StatefulSet>>,
    pub services: Objects<Service>,
    pub claims: Objects<KeptOf<PersistentVolumeClaim>>,
    pub cronjobs: Objects<KeptOf<PartialObjectMeta<CronJob>>>,
    pub jobs: Objects<Job>,
    pub volumes: Objects<KeptOf<PersistentVolume>>,
    pub namespaces: Objects<PartialObjectMeta<Namespace>>,
    pub nodes: Objects<Node>,
}

/// Every object of kind `K` that `config` selects, cluster-wide, reflected into `writer`
/// as `Cached::keep` says.
fn cached<K: Cached>(
    client: &Client,
    config: &watcher::Config,
    writer: Writer<K::Kept>,
) -> impl Stream<Item = Result<K::Kept, watcher::Error>> + Send + use<K> {
    let store = writer.as_reader();
    let objects = watcher(Api::<K>::all(client.clone()), config.clone())
        .map_ok(kept_event::<K>)
        .try_filter(move |event| std::future::ready(is_news(&store, event)))
        .reflect(writer)
        .touched_objects();
    watch::resilient(objects, K::kind(&()).into_owned())
}

/// Whether `event` may change what a pass reads, and so must wake the object's app: not an
/// update that leaves what the cache keeps of the object (`store` holds that) as it is, such
/// as a new volume going from Pending to Available to Bound, or a StatefulSet's status
/// written by its controller with no replica ready. Creating apps by the thousand then wakes
/// each about once per child, not once per write of each child's own controller. (What the
/// store already holds needs no store update either, so such an event goes no further.)
fn is_news<T>(store: &Store<T>, event: &watcher::Event<T>) -> bool
where
    T: Resource<DynamicType = ()> + Clone + PartialEq,
{
    match event {
        watcher::Event::Apply(object) => store
            .get(&ObjectRef::from_obj(object))
            .is_none_or(|kept| *kept != *object),
        // Deletions, and lists after a lost watch: as before, every one wakes its app.
        _ => true,
    }
}

fn kept_event<K: Cached>(event: watcher::Event<K>) -> watcher::Event<K::Kept> {
    use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
    match event {
        Apply(object) => Apply(object.keep()),
        Delete(object) => Delete(object.keep()),
        Init => Init,
        InitApply(object) => InitApply(object.keep()),
        InitDone => InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kept::Cached;
    use std::time::Duration;

    fn fill<K: kube::Resource<DynamicType = ()> + Clone>(writer: &mut Writer<K>) {
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
    }

    fn job(name: &str, owner: Option<(&str, &str)>) -> Job {
        let mut job = serde_json::json!({"metadata": {"name": name, "namespace": "ns1",
            "uid": format!("uid-{name}"),
            "labels": names::labels("hello", names::Component::Backup)}});
        if let Some((kind, uid)) = owner {
            job["metadata"]["ownerReferences"] = serde_json::json!([{"apiVersion": "v1",
                "kind": kind, "name": "x", "uid": uid, "controller": true}]);
        }
        serde_json::from_value(job).expect("a Job")
    }

    fn volume(phase: &str) -> KeptOf<PersistentVolume> {
        let volume: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pv1", "uid": "u1", "resourceVersion": phase.len().to_string(),
                         "labels": names::labels("hello", names::Component::Backup)},
            "spec": {"hostPath": {"path": "/backups/a"}},
            "status": {"phase": phase}}))
        .expect("a volume");
        volume.keep()
    }

    #[test]
    fn only_a_change_of_what_passes_read_wakes_an_app() {
        use watcher::Event::{Apply, Delete, InitApply};
        let (store, mut writer) = reflector::store::<KeptOf<PersistentVolume>>();
        fill(&mut writer);
        let mut seen = |event: watcher::Event<KeptOf<PersistentVolume>>| {
            let news = is_news(&store, &event);
            if news {
                writer.apply_watcher_event(&event);
            }
            news
        };
        assert!(seen(Apply(volume("Pending"))), "a new volume");
        // Its phase changes, not what the cache keeps of it.
        assert!(!seen(Apply(volume("Available"))));
        assert!(!seen(Apply(volume("Bound"))));
        assert!(seen(Apply(volume("Released"))), "released is read");
        assert!(seen(Delete(volume("Released"))));
        assert!(seen(Apply(volume("Released"))), "deleted, then seen again");
        assert!(
            seen(InitApply(volume("Released"))),
            "a list after a lost watch"
        );
    }

    #[test]
    fn only_jobs_the_app_or_its_own_schedule_controls_are_the_apps() {
        let (cache, mut writers) = Cache::new();
        let cronjob: PartialObjectMeta<CronJob> = serde_json::from_value(serde_json::json!({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "backup-hello", "namespace": "ns1", "uid": "uid-cron",
                "labels": names::labels("hello", names::Component::Backup),
                "ownerReferences": [{"apiVersion": "v1", "kind": "HelloStateful",
                    "name": "hello", "uid": "uid-app", "controller": true}]}}))
        .expect("a CronJob");
        writers
            .cronjobs
            .apply_watcher_event(&watcher::Event::Apply(cronjob.keep()));
        for job in [
            job("mine", Some(("HelloStateful", "uid-app"))),
            job("scheduled", Some(("CronJob", "uid-cron"))),
            job("look-alike", None),
            job("earlier-apps", Some(("HelloStateful", "uid-earlier"))),
            job("other-cronjobs", Some(("CronJob", "uid-other-cron"))),
        ] {
            writers
                .jobs
                .apply_watcher_event(&watcher::Event::Apply(job));
        }
        let mut found: Vec<String> = cache
            .jobs("ns1", "hello", "uid-app")
            .iter()
            .map(|job| job.name_any())
            .collect();
        found.sort();
        assert_eq!(found, ["mine", "scheduled"]);
        assert!(
            cache.jobs("ns1", "hello", "uid-earlier").len() == 1,
            "an earlier app of the name has only its own, and not the new one's schedule"
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
