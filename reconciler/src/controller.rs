//! The controller: one reconcile pass per HelloStateful brings its children, its on-demand
//! actions and its status in line with the spec and the annotations.
//!
//! Every decision is derived from what is in the cluster (children, Jobs, pods, status), never
//! from memory, so a reconciler restarted at any moment finishes what was started.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use hellostateful_api::names::{self, Component};
use hellostateful_api::summary::{self, BackupSummary, RestoreSummary};
use hellostateful_api::{
    HelloStateful, HelloStatefulStatus, LastBackup, RequestPhase, RequestStatus, validate,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Config as WatcherConfig;
use kube::runtime::{Predicate, WatchStreamExt, predicates, reflector, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::{debug, info, warn};

use crate::Error;
use crate::cache::{Cache, Writers};
use crate::children::{self, AppRef, MoverTask, Settings};
use crate::conditions::{self, Conditions};
use crate::drift;
use crate::jobs::{self, JobState};
use crate::kept::{self, AppOf, Kept, View, VolumeView};
use crate::leader::Leadership;
use crate::location::{self, BackupLocation};
use crate::metrics::Metrics;
use crate::placement;
use crate::progress;
use crate::watch;

/// How often an app that needs nothing is looked at again: a safety net should a watch
/// event be missed (watches resume on their own within seconds, see `watch`).
pub(crate) const RESYNC: Duration = Duration::from_secs(120);
/// How soon an app that waits on something (pods stopping, a Job) is looked at again, in
/// case no watch event arrives.
pub(crate) const WAIT: Duration = Duration::from_secs(3);
/// How long one API response may take before the request fails and is retried.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Watches end on the server's side before the read timeout, and are renewed.
const WATCH_TIMEOUT_SECS: u32 = 25;
/// Objects per page of a watch's list: a page is held whole while it is read, and the
/// default (500 objects) makes the peak memory of a restart with many apps.
const LIST_PAGE: u32 = 100;
/// The longest a reconcile pass may take: a safety net so that no pass, however stuck,
/// blocks its app for good.
const PASS_TIMEOUT: Duration = Duration::from_secs(150);
/// How soon a replica that does not hold the Lease (now) looks at an app again.
const LEADERSHIP_RECHECK: Duration = Duration::from_secs(2);
/// Reconcile passes that run at once.
const CONCURRENCY: u16 = 32;
/// How long deletion waits for the app's pods before it tries again later.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// The action label of initial restore Jobs (on-demand ones say "requested").
const INITIAL_RESTORE_ACTION: &str = "created";
/// How long a mover Job's pod may fail to start (an image that cannot be pulled, no node
/// for it, a refused pod) before the Job is stopped and its request fails with the reason.
const START_PATIENCE: Duration = Duration::from_secs(60);
/// How long deletion waits for its wipe or purge Job in one pass before it tries again.
const CLEANUP_JOB_TIMEOUT: Duration = Duration::from_secs(40);

/// What every reconcile pass shares.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub settings: Settings,
    /// Consecutive failures per app, for exponential backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// With leader election: whether this replica holds the Lease now.
    leadership: Option<Leadership>,
    /// The children as the watches last saw them.
    pub cache: Cache,
    /// Per app uid, the resourceVersion of the app as this replica last knew it (after its
    /// own status write, or as read): a cached app at another version may predate a status
    /// write of ours, and is read again before status is built on it.
    known_versions: Mutex<HashMap<String, String>>,
    /// Per StatefulSet and CronJob ("Kind/namespace/name"): the prints of what was last
    /// desired and of the object's version then, when it held all that was desired.
    in_line: Mutex<HashMap<String, (u64, u64)>>,
}

impl Context {
    pub fn new(client: Client, metrics: Arc<Metrics>, settings: Settings, cache: Cache) -> Self {
        let reporter = Reporter {
            controller: names::FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics,
            settings,
            failures: Mutex::default(),
            leadership: None,
            cache,
            known_versions: Mutex::default(),
            in_line: Mutex::default(),
        }
    }

    /// Passes run only while `leadership` is held (the client refuses writes otherwise).
    pub fn with_leadership(self, leadership: Leadership) -> Self {
        Self {
            leadership: Some(leadership),
            ..self
        }
    }

    /// Records the version of `app` a pass ended with (`None`: forget the app).
    fn remember_version(&self, app: &HelloStateful, version: Option<String>) {
        let (Some(uid), Ok(mut versions)) = (app.uid(), self.known_versions.lock()) else {
            return;
        };
        match version {
            Some(version) => versions.insert(uid, version),
            None => versions.remove(&uid),
        };
    }

    /// Whether this replica may act: always without leader election.
    fn leads(&self) -> bool {
        self.leadership.as_ref().is_none_or(Leadership::is_held)
    }
}

/// Runs the controller until a shutdown signal, filling `ctx.cache` through `writers`.
pub async fn run(ctx: Arc<Context>, writers: Writers) {
    let client = ctx.client.clone();
    let apps = Api::<HelloStateful>::all(client.clone());
    let managed = WatcherConfig::default()
        .timeout(WATCH_TIMEOUT_SECS)
        .page_size(LIST_PAGE)
        .labels(&format!(
            "app.kubernetes.io/managed-by={}",
            names::FIELD_MANAGER
        ));
    // Generation alone would miss the on-demand annotations and the finalizer the first pass
    // adds (neither changes the generation); status writes must not trigger a pass.
    let (reader, writer) = reflector::store();
    // Consistent lists (not "any" resourceVersion): after an API server restart a list
    // served from a cold watch cache can hand out a resourceVersion that the same server
    // then refuses to watch from as too old, over and over.
    let apps_config = WatcherConfig::default()
        .timeout(WATCH_TIMEOUT_SECS)
        .page_size(LIST_PAGE);
    let trigger = watcher(apps, apps_config)
        // Never read: managedFields, and kubectl's copy of the spec in an annotation.
        .modify(|app: &mut HelloStateful| {
            app.metadata.managed_fields = None;
            app.annotations_mut()
                .remove("kubectl.kubernetes.io/last-applied-configuration");
        })
        .reflect(writer)
        .applied_objects();
    let trigger = watch::resilient(trigger, "HelloStateful".into()).predicate_filter(
        predicates::generation::<HelloStateful>
            .combine(predicates::annotations::<HelloStateful>)
            .combine(predicates::finalizers::<HelloStateful>),
        Default::default(),
    );
    let watches = writers.watch(&client, &managed);
    Controller::for_stream(trigger, reader)
        // A bounded number of passes at once keeps memory flat when every app is due at
        // the same moment (start-up, resync) without slowing a steady trickle.
        .with_config(ControllerConfig::default().concurrency(CONCURRENCY))
        // Children are mapped to their app by label: what the cache keeps of most kinds
        // has no owner references, and Jobs made by the CronJob are owned by it.
        .watches_stream(watches.statefulsets, app_of_kept)
        .owns_stream(watches.services)
        .watches_stream(watches.claims, app_of_kept)
        .watches_stream(watches.cronjobs, app_of_kept)
        .watches_stream(watches.jobs, |job| app_ref(AppOf::of(&job.metadata)))
        .watches_stream(watches.volumes, app_of_kept)
        // Namespaces and nodes only fill their stores (a namespace's uid guards its
        // node-directory backups; nodes are where data may go).
        .watches_stream(watches.namespaces, |_| None)
        .watches_stream(watches.nodes, |_| None)
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                // A child's event after its app is gone (deleted with it): nothing to do.
                Err(error @ kube::runtime::controller::Error::ObjectNotFound(_)) => {
                    debug!(%error, "no app for this event");
                }
                Err(error) => warn!(%error, "reconcile failed"),
                Ok(_) => {}
            }
        })
        .await;
}

fn app_of_kept<V: View>(child: Kept<V>) -> Option<ObjectRef<HelloStateful>> {
    app_ref(child.app)
}

fn app_ref(app: Option<AppOf>) -> Option<ObjectRef<HelloStateful>> {
    app.map(|app| ObjectRef::new(&app.name).within(&app.namespace))
}

/// One reconcile pass, with metrics and the finalizer that releases volumes.
pub async fn reconcile(app: Arc<HelloStateful>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !ctx.leads() {
        // Not a failure of the app: look again once the Lease may be renewed.
        return Ok(Action::requeue(LEADERSHIP_RECHECK));
    }
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    let namespace = app
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let api = Api::<HelloStateful>::namespaced(ctx.client.clone(), &namespace);
    let pass = async {
        ctx.cache
            .ready()
            .await
            .map_err(|_| Error::Waiting("the reconciler's watches stopped".into()))?;
        finalizer(&api, names::FINALIZER, app.clone(), |event| async {
            match event {
                Finalizer::Apply(app) => apply(app, ctx.clone()).await,
                Finalizer::Cleanup(app) => cleanup(app, ctx.clone()).await,
            }
        })
        .await
        .map_err(|error| Error::Finalizer(Box::new(error)))
    };
    let result = match tokio::time::timeout(PASS_TIMEOUT, pass).await {
        Ok(result) => result,
        Err(_) => Err(Error::Waiting(format!(
            "the reconcile pass took longer than {}s",
            PASS_TIMEOUT.as_secs()
        ))),
    };
    ctx.metrics
        .duration
        .observe(started.elapsed().as_secs_f64());
    let key = format!("{namespace}/{}", app.name_any());
    match result {
        Ok(action) => {
            if let Ok(mut failures) = ctx.failures.lock() {
                failures.remove(&key);
            }
            Ok(action)
        }
        Err(error) if error.is_permanent() => {
            // Retrying cannot help: say so on the app and wait for the spec to change.
            report_refusal(&app, &ctx, &error).await?;
            Ok(Action::await_change())
        }
        Err(error) => Err(error),
    }
}

/// Retries transient failures with exponential backoff, up to five minutes.
pub fn error_policy(app: Arc<HelloStateful>, error: &Error, ctx: Arc<Context>) -> Action {
    if !ctx.leads() {
        // The Lease lapsed during the pass, so its writes were refused: no backoff for that.
        debug!(app = %app.name_any(), %error, "pass cut short: not the leader now");
        return Action::requeue(LEADERSHIP_RECHECK);
    }
    ctx.metrics
        .failures
        .get_or_create(&crate::metrics::ErrorLabel {
            error: error.metric_label(),
        })
        .inc();
    let key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
    let attempt = match ctx.failures.lock() {
        Ok(mut failures) => {
            let count = failures.entry(key).or_insert(0);
            *count = count.saturating_add(1);
            *count
        }
        Err(_) => 1,
    };
    let delay = Duration::from_secs(2u64.saturating_pow(attempt.min(9)).min(300));
    warn!(app = %app.name_any(), %error, ?delay, "reconcile failed; retrying");
    Action::requeue(delay)
}

/// Records that the API server refused a child the spec asks for.
async fn report_refusal(app: &HelloStateful, ctx: &Context, error: &Error) -> Result<(), Error> {
    let old = app.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let message = format!(
        "the API server refused a child object: {}",
        error.user_message()
    );
    let mut conditions = Conditions::new(&mut status.conditions, app.metadata.generation);
    let changed = conditions.set(conditions::READY, false, "ChildRefused", &message);
    if changed {
        publish(
            ctx,
            app,
            EventType::Warning,
            "ChildRefused",
            "Apply",
            &message,
        )
        .await;
    }
    let version = write_status(ctx, app, &old, status).await?;
    ctx.remember_version(app, version);
    Ok(())
}

/// Deletion: stop the app, wipe its live data (so that nothing of it survives for the next
/// app of this name), delete its backups if asked, then release what owner references
/// cannot: the cluster-scoped volumes. Backups stay unless the app carries the
/// delete-backups annotation.
async fn cleanup(app: Arc<HelloStateful>, ctx: Arc<Context>) -> Result<Action, Error> {
    let app_ref = AppRef::new(&app)?;
    stop_app(&ctx, &app_ref).await?;
    // A namespace being deleted accepts no new Job: the data then stays on the node, under
    // a directory named by this app's uid that no later app is given.
    let terminating = Api::<Namespace>::all(ctx.client.clone())
        .get_opt(&app_ref.namespace)
        .await?
        .is_none_or(|ns| {
            ns.metadata.deletion_timestamp.is_some()
                || ns.status.and_then(|s| s.phase).as_deref() == Some("Terminating")
        });
    let volumes = app_volumes(&ctx, &app_ref).await?;
    let mut notes = Vec::new();
    if app.spec.storage_class().is_none() && !volumes.is_empty() {
        notes.push(wipe_live_data(&ctx, &app_ref, terminating, &volumes).await?);
    }
    let location = location::resolve(
        &app.spec,
        &ctx.settings.backup_roots,
        &ctx.settings.object_store_endpoints,
    )
    .unwrap_or_else(|_| BackupLocation::NodeRoot(String::new()));
    let delete_backups = app
        .annotations()
        .get(names::DELETE_BACKUPS)
        .is_some_and(|v| v == "true");
    notes.push(if delete_backups {
        purge_backups(&ctx, &app_ref, terminating, &location).await?
    } else {
        format!(
            "backups are kept in {}",
            describe_location(&app_ref, &location)
        )
    });
    let volume_api = Api::<PersistentVolume>::all(ctx.client.clone());
    for volume in volumes {
        if volume.metadata.deletion_timestamp.is_none() {
            volume_api
                .delete(&volume.name_any(), &DeleteParams::default())
                .await?;
        }
    }
    let note = format!("volumes released; {}", notes.join("; "));
    info!(app = %app_ref.name, namespace = %app_ref.namespace, "{note}");
    publish(&ctx, &app, EventType::Normal, "Deleted", "Delete", &note).await;
    ctx.remember_version(&app, None);
    Ok(Action::await_change())
}

/// Where the app's backups live, in words.
fn describe_location(app: &AppRef<'_>, location: &BackupLocation) -> String {
    match location {
        BackupLocation::NodeRoot(root) => format!(
            "node directory {} (claim {})",
            names::backup_host_path(root, &app.namespace, &app.name),
            names::backup_claim(&app.name)
        ),
        BackupLocation::Claim(claim) => {
            format!("claim {claim} under {}/{}", app.namespace, app.name)
        }
        BackupLocation::ObjectStore(store) => store.describe(&app.namespace, &app.name),
    }
}

/// Empties the app's static volumes with a Job that mounts its claims. Returns what
/// happened, for the Deleted event; a failed wipe does not block deletion (the directory is
/// named by the app's uid, so no later app gets it) but is reported.
async fn wipe_live_data(
    ctx: &Context,
    app: &AppRef<'_>,
    terminating: bool,
    volumes: &[PersistentVolume],
) -> Result<String, Error> {
    let paths = volumes
        .iter()
        .filter_map(|v| Some(v.spec.as_ref()?.host_path.as_ref()?.path.clone()))
        .collect::<Vec<_>>()
        .join(", ");
    if terminating {
        let message = format!(
            "live data not wiped: namespace {} is being deleted and accepts no Job; it stays in {paths}, which no later app is given",
            app.namespace
        );
        warn!(app = %app.name, namespace = %app.namespace, "{message}");
        return Ok(message);
    }
    let job_name = names::wipe_job(&app.name, &app.uid);
    let placeholder = BackupLocation::NodeRoot(String::new());
    match run_cleanup_job(ctx, app, &job_name, &MoverTask::Wipe, &placeholder).await? {
        JobState::Succeeded => Ok(format!("live data wiped ({paths})")),
        state => {
            let message = format!(
                "live data in {paths} could not be wiped by Job {job_name} ({state:?}); no later app is given it"
            );
            publish(
                ctx,
                app.app,
                EventType::Warning,
                "WipeFailed",
                "Delete",
                &message,
            )
            .await;
            Ok(message)
        }
    }
}

/// Deletes every snapshot of the app, then its backup claim and volume. If the purge
/// fails, the backups and the claim stay, and the event says so.
async fn purge_backups(
    ctx: &Context,
    app: &AppRef<'_>,
    terminating: bool,
    location: &BackupLocation,
) -> Result<String, Error> {
    let place = describe_location(app, location);
    let claim = match location {
        BackupLocation::NodeRoot(_) => Some(names::backup_claim(&app.name)),
        BackupLocation::Claim(claim) => Some(claim.clone()),
        BackupLocation::ObjectStore(_) => None,
    };
    let claims = Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), &app.namespace);
    let claim_missing = match &claim {
        Some(claim) => claims.get_opt(claim).await?.is_none(),
        None => false,
    };
    if terminating || claim_missing {
        return Ok(format!(
            "backups not deleted: no Job can reach {place} now; they stay"
        ));
    }
    let job_name = names::purge_job(&app.name, &app.uid);
    match run_cleanup_job(ctx, app, &job_name, &MoverTask::Purge, location).await? {
        JobState::Succeeded => {}
        state => {
            let message =
                format!("backups in {place} were not deleted: Job {job_name} ended {state:?}");
            publish(
                ctx,
                app.app,
                EventType::Warning,
                "PurgeFailed",
                "Delete",
                &message,
            )
            .await;
            return Ok(message);
        }
    }
    if matches!(location, BackupLocation::NodeRoot(_)) {
        let backup_claim = names::backup_claim(&app.name);
        if let Some(found) = claims.get_opt(&backup_claim).await?
            && found.metadata.deletion_timestamp.is_none()
        {
            claims
                .delete(&backup_claim, &DeleteParams::default())
                .await?;
        }
        let volume = names::backup_volume(&app.namespace, &app.name);
        let volumes = Api::<PersistentVolume>::all(ctx.client.clone());
        if let Some(found) = volumes.get_opt(&volume).await?
            && found.metadata.deletion_timestamp.is_none()
        {
            volumes.delete(&volume, &DeleteParams::default()).await?;
        }
    }
    Ok(format!("backups in {place} deleted"))
}

/// Runs a wipe or purge Job of an app being deleted, and waits a while for its end.
async fn run_cleanup_job(
    ctx: &Context,
    app: &AppRef<'_>,
    job_name: &str,
    task: &MoverTask,
    location: &BackupLocation,
) -> Result<JobState, Error> {
    let jobs = Api::<Job>::namespaced(ctx.client.clone(), &app.namespace);
    if jobs.get_opt(job_name).await?.is_none() {
        let job = children::mover_job(app, job_name, task, "deleted", location, &ctx.settings)?;
        match jobs.create(&PostParams::default(), &job).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => return Err(error.into()),
        }
    }
    let deadline = Instant::now() + CLEANUP_JOB_TIMEOUT;
    loop {
        if let Some(job) = jobs.get_opt(job_name).await? {
            match jobs::state(&job) {
                JobState::Running => {}
                finished => return Ok(finished),
            }
        }
        if Instant::now() > deadline {
            return Err(Error::Waiting(format!(
                "Job {job_name} of the app's deletion is still running"
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Deletes the StatefulSet and waits for its pods to be gone. The garbage collector
/// deletes the claims once the app is gone; a StatefulSet still running would make them
/// again, without an owner, and they would never go.
async fn stop_app(ctx: &Context, app: &AppRef<'_>) -> Result<(), Error> {
    let statefulsets = Api::<StatefulSet>::namespaced(ctx.client.clone(), &app.namespace);
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), &app.namespace);
    let name = names::statefulset(&app.name);
    let deadline = Instant::now() + STOP_TIMEOUT;
    loop {
        let statefulset = statefulsets.get_opt(&name).await?;
        if let Some(sts) = &statefulset
            && sts.metadata.deletion_timestamp.is_none()
        {
            statefulsets
                .delete(&name, &DeleteParams::foreground())
                .await?;
        }
        let running = pods
            .list(&ListParams::default().labels(&names::selector_string(&app.name)))
            .await?
            .items
            .len();
        if statefulset.is_none() && running == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Waiting(format!(
                "the app's StatefulSet {name} or its {running} pod(s) are still there"
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn app_volumes(ctx: &Context, app: &AppRef<'_>) -> Result<Vec<PersistentVolume>, Error> {
    // The data volumes only: the backup volume carries the same app labels, and outlives
    // the app.
    let selector = format!(
        "app.kubernetes.io/instance={},{}={},app.kubernetes.io/component={}",
        app.name,
        names::NAMESPACE_LABEL,
        app.namespace,
        Component::Storage.as_str()
    );
    Ok(Api::<PersistentVolume>::all(ctx.client.clone())
        .list(&ListParams::default().labels(&selector))
        .await?
        .items)
}

/// An event to publish once the pass has written status.
struct Note {
    kind: EventType,
    reason: &'static str,
    action: &'static str,
    message: String,
}

/// The state of one pass: the status being built and the events it will publish.
struct Pass<'a> {
    ctx: &'a Context,
    app: &'a AppRef<'a>,
    status: HelloStatefulStatus,
    notes: Vec<Note>,
    /// Where backups go, once the spec's choice has been checked against the settings.
    location: Option<BackupLocation>,
}

impl Pass<'_> {
    fn note(
        &mut self,
        kind: EventType,
        reason: &'static str,
        action: &'static str,
        message: String,
    ) {
        self.notes.push(Note {
            kind,
            reason,
            action,
            message,
        });
    }

    fn conditions(&mut self) -> Conditions<'_> {
        Conditions::new(
            &mut self.status.conditions,
            self.app.app.metadata.generation,
        )
    }

    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.ctx.client.clone(), &self.app.namespace)
    }

    /// Applies `desired` unless the cluster already has every field of it.
    async fn apply<K>(&self, desired: &K, observed: Option<&K>) -> Result<(), Error>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Serialize
            + DeserializeOwned
            + Clone
            + std::fmt::Debug,
    {
        apply_to(&self.api::<K>(), desired, observed, self.ctx).await?;
        Ok(())
    }

    /// Applies a StatefulSet or CronJob, whose cached copy keeps no whole spec, only its
    /// version (`cached`, a `kept::version_print`). It is in line when this replica last
    /// found it (or made it) at that version, desiring the same; otherwise (after a restart,
    /// a hand edit, a new spec) a fresh read of the whole object decides.
    async fn apply_unless_in_line<K>(&self, desired: &K, cached: Option<u64>) -> Result<(), Error>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Serialize
            + DeserializeOwned
            + Clone
            + std::fmt::Debug,
    {
        let name = desired.meta().name.clone().unwrap_or_default();
        let key = format!("{}/{}/{name}", K::kind(&()), self.app.namespace);
        let wanted = kept::applied_print(desired);
        let remember = |object: &K| {
            if let Ok(mut in_line) = self.ctx.in_line.lock() {
                in_line.insert(key.clone(), (wanted, kept::version_print(object.meta())));
            }
        };
        let api = self.api::<K>();
        if let Some(seen) = cached {
            let known = self
                .ctx
                .in_line
                .lock()
                .ok()
                .and_then(|in_line| in_line.get(&key).cloned());
            if let Some((desired_then, seen_then)) = known
                && desired_then == wanted
                && seen == seen_then
            {
                return Ok(());
            }
            debug!(
                child = %key,
                cached = %seen,
                known = ?known,
                desired = %wanted,
                "reading the whole object: its version is not known to be in line"
            );
            if let Some(full) = api.get_opt(&name).await?
                && holds(&full, desired)?
            {
                remember(&full);
                return Ok(());
            }
        }
        if let Some(written) = apply_to(&api, desired, None, self.ctx).await? {
            remember(&written);
        }
        Ok(())
    }

    /// Creates a mover Job.
    async fn start_job(&mut self, name: &str, task: &MoverTask, reason: &str) -> Result<(), Error> {
        let location = self
            .location
            .as_ref()
            .ok_or(Error::MissingField("an allowed backup location"))?;
        let job = children::mover_job(self.app, name, task, reason, location, &self.ctx.settings)?;
        match self.api::<Job>().create(&PostParams::default(), &job).await {
            Ok(_) => Ok(()),
            // Made by an earlier pass whose status write was lost: the Job is the truth.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// The mover's termination message of a finished Job.
    async fn job_message(&self, job: &str) -> Result<Option<String>, Error> {
        let pods = self
            .api::<Pod>()
            .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
            .await?;
        Ok(jobs::termination_message(&pods.items))
    }

    async fn failure_message(&self, job: &str, reason: String) -> Result<String, Error> {
        Ok(match self.job_message(job).await? {
            Some(message) if !message.is_empty() => jobs::failure_summary(&message),
            _ => reason,
        })
    }
}

/// Applies `desired` by server-side apply unless `observed` already has every field of it;
/// returns the object as the API server wrote it, if it was written.
async fn apply_to<K>(
    api: &Api<K>,
    desired: &K,
    observed: Option<&K>,
    ctx: &Context,
) -> Result<Option<K>, Error>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + std::fmt::Debug,
{
    if let Some(observed) = observed
        && holds(observed, desired)?
    {
        return Ok(None);
    }
    let name = desired.meta().name.clone().unwrap_or_default();
    info!(child = %children::describe(desired), "applying");
    let written = api
        .patch(
            &name,
            &PatchParams::apply(names::FIELD_MANAGER).force(),
            &Patch::Apply(desired),
        )
        .await?;
    ctx.metrics.writes.inc();
    Ok(Some(written))
}

/// Whether `observed` has every field of `desired`, with the same values.
fn holds<K: Serialize>(observed: &K, desired: &K) -> Result<bool, Error> {
    let want = serde_json::to_value(desired).map_err(Error::Build)?;
    let have = serde_json::to_value(observed).map_err(Error::Build)?;
    Ok(drift::is_subset(&want, &have))
}

/// The newest token of an on-demand annotation that status has not yet acknowledged as
/// finished.
/// The token under `annotation` that still needs acting on. A token that is a time before
/// the app was created was not made for this app (it came with a copy of an older app's
/// YAML): it is never acted on, and `Err` holds its acknowledgement as Failed.
fn pending_token<'a>(
    app: &'a HelloStateful,
    annotation: &str,
    acknowledged: Option<&RequestStatus>,
) -> Result<Option<&'a str>, RequestStatus> {
    let Some(token) = app.annotations().get(annotation).map(String::as_str) else {
        return Ok(None);
    };
    let done = acknowledged.is_some_and(|ack| ack.token == token && ack.phase.is_final());
    if token.is_empty() || done {
        return Ok(None);
    }
    let made = token.parse::<k8s_openapi::jiff::Timestamp>().ok();
    let created = app.metadata.creation_timestamp.as_ref().map(|t| t.0);
    match (made, created) {
        // Creation times have whole seconds: only a token from an earlier second is older.
        (Some(made), Some(created)) if made.as_second() < created.as_second() => Err(request(
            token,
            RequestPhase::Failed,
            None,
            format!(
                "ignored: this request ({token}) is older than the app (created {created}), so it came with a copy of an earlier app's YAML; request it again to act on this app"
            ),
        )),
        _ => Ok(Some(token)),
    }
}

fn request(
    token: &str,
    phase: RequestPhase,
    job: Option<&str>,
    message: impl Into<String>,
) -> RequestStatus {
    RequestStatus {
        token: token.to_string(),
        phase,
        job: job.map(str::to_string),
        backup_id: None,
        message: Some(message.into()),
    }
}

/// What the pass decided about restores.
#[derive(Default)]
struct RestoreGate {
    /// A restore is under way: the app must not run and backups must wait.
    in_progress: bool,
}

async fn apply(app: Arc<HelloStateful>, ctx: Arc<Context>) -> Result<Action, Error> {
    let app = current(&app, &ctx).await?;
    let app_ref = AppRef::new(&app)?;
    let old = app.status.clone().unwrap_or_default();
    let mut pass = Pass {
        ctx: &ctx,
        app: &app_ref,
        status: old.clone(),
        notes: Vec::new(),
        location: None,
    };
    pass.status.observed_generation = app.metadata.generation;
    let action = converge(&mut pass).await;
    let Pass { status, notes, .. } = pass;
    // Status first: an event must never claim what status does not yet say.
    let version = write_status(&ctx, &app, &old, status).await?;
    ctx.remember_version(&app, version);
    for note in notes {
        publish(
            &ctx,
            &app,
            note.kind,
            note.reason,
            note.action,
            &note.message,
        )
        .await;
    }
    action
}

/// The app to build this pass on. The cached copy lags a moment behind the API server, and
/// building status on a copy older than this replica's own last status write would write
/// old conditions back: a copy at any other version than the one last known is read again.
/// At rest the versions agree and nothing is read.
async fn current(app: &HelloStateful, ctx: &Context) -> Result<HelloStateful, Error> {
    let uid = app.uid().unwrap_or_default();
    let known = ctx
        .known_versions
        .lock()
        .ok()
        .and_then(|versions| versions.get(&uid).cloned());
    if known.is_none() || known == app.resource_version() {
        return Ok(app.clone());
    }
    let api =
        Api::<HelloStateful>::namespaced(ctx.client.clone(), &app.namespace().unwrap_or_default());
    Ok(api.get(&app.name_any()).await?)
}

async fn converge(pass: &mut Pass<'_>) -> Result<Action, Error> {
    let app = pass.app;
    let spec = &app.app.spec;
    if let Err(error) = validate::spec(spec) {
        let message = error.to_string();
        if pass
            .conditions()
            .set(conditions::READY, false, "InvalidSpec", &message)
        {
            pass.note(EventType::Warning, "InvalidSpec", "Validate", message);
        }
        return Ok(Action::await_change());
    }

    let location = match location::resolve(
        spec,
        &pass.ctx.settings.backup_roots,
        &pass.ctx.settings.object_store_endpoints,
    ) {
        Ok(location) => location,
        Err(error) => {
            let message = error.to_string();
            if pass
                .conditions()
                .set(conditions::READY, false, "BackupTargetRefused", &message)
            {
                pass.note(
                    EventType::Warning,
                    "BackupTargetRefused",
                    "Validate",
                    message,
                );
            }
            return Ok(Action::await_change());
        }
    };
    pass.location = Some(location.clone());

    // Storage: static volumes pinned to the node that holds the data, then the claims.
    let cache = &pass.ctx.cache;
    let observed_claims: Vec<_> = app
        .ordinals()
        .map(|ordinal| cache.claim(&app.namespace, &names::claim(&app.name, ordinal)))
        .collect();
    let node = if spec.storage_class().is_none() {
        let volumes = cache.data_volumes(&app.namespace, &app.name);
        let node = match data_node(pass, &volumes).await? {
            Ok(node) => node,
            Err(why) => return no_node(pass, why),
        };
        let volume_api = Api::<PersistentVolume>::all(pass.ctx.client.clone());
        for (ordinal, claim) in app.ordinals().zip(&observed_claims) {
            // A claim made by 0.1.0 is bound to a volume of the old name: keep using it.
            let bound_to = claim.as_ref().and_then(|c| c.view.volume_name.clone());
            let name = bound_to
                .filter(|bound| volumes.iter().any(|v| v.name() == bound))
                .unwrap_or_else(|| names::volume(&app.namespace, &app.name, ordinal));
            match volumes.iter().find(|v| v.name() == name) {
                Some(old) if old.deleting => {
                    return waiting(
                        pass,
                        "OldVolumeReleasing",
                        format!(
                            "waiting for PersistentVolume {name} of an earlier app of this name to be released"
                        ),
                    );
                }
                Some(_) => {}
                None => {
                    apply_to(
                        &volume_api,
                        &children::volume(app, ordinal, &node)?,
                        None,
                        pass.ctx,
                    )
                    .await?;
                }
            }
        }
        Some(node)
    } else {
        None
    };
    for (ordinal, claim) in app.ordinals().zip(&observed_claims) {
        match claim {
            Some(old) if old.deleting => {
                return waiting(
                    pass,
                    "OldClaimReleasing",
                    format!(
                        "waiting for PersistentVolumeClaim {} of an earlier app of this name to be deleted",
                        names::claim(&app.name, ordinal)
                    ),
                );
            }
            // Claims are immutable once made: never rewritten.
            Some(_) => {}
            None => {
                pass.apply(&children::claim(app, ordinal)?, None).await?;
            }
        }
    }
    match &node {
        Some(_) => pass.status.node_name = node.clone(),
        None if !matches!(location, BackupLocation::NodeRoot(_)) => pass.status.node_name = None,
        // Dynamic volumes with node-directory backups: status keeps the backups' node.
        None => {}
    }
    if let BackupLocation::NodeRoot(root) = &location {
        // Dynamic volumes with node-directory backups: the backups still need one node.
        let node = match node {
            Some(node) => node,
            None => match data_node(pass, &[]).await? {
                Ok(node) => node,
                Err(why) => return no_node(pass, why),
            },
        };
        pass.status.node_name = Some(node.clone());
        if let Some(action) = backup_storage(pass, root, &node).await? {
            return Ok(action);
        }
    }
    pass.status.backend_volumes = app.claims();

    let name = names::statefulset(&app.name);
    let service = cache.service(&app.namespace, &name);
    let statefulset = cache.statefulset(&app.namespace, &name);
    let jobs = mover_jobs(pass, statefulset.is_some()).await?;
    pass.apply(&children::service(app)?, service.as_deref())
        .await?;
    stop_stuck_jobs(pass, &jobs).await?;

    let initialized = statefulset.is_some() || pass.conditions().is_true(conditions::INITIALIZED);
    let mut gate = RestoreGate::default();
    let mut initial_outcome = statefulset
        .as_ref()
        .and_then(|sts| sts.view.initial_restore.as_deref())
        .and_then(InitialOutcome::parse);
    // An initial restore that started runs to its end even if restoreFromExisting was
    // turned off meanwhile: the app must not start while the mover writes. A failed one
    // holds nothing: turning the restore off then starts the app on its empty volumes.
    let initial_started = jobs.iter().any(|job| {
        is_initial_attempt(job, &app.uid) && !matches!(jobs::state(job), JobState::Failed(_))
    });
    let wants_restore = spec.restore_from_existing || spec.restore_from.is_some();
    if !initialized && (wants_restore || initial_started) {
        match initial_restore(pass, &jobs).await? {
            InitialRestore::Wait(action) => return Ok(action),
            InitialRestore::Done(outcome) => initial_outcome = Some(outcome),
        }
    }
    if !initialized
        && initial_outcome.is_none()
        && matches!(
            pass.conditions().reason(conditions::RESTORING),
            Some("RestoreFailed" | "RestoreSourceMissing")
        )
    {
        // The restore that could not run was turned off: say why the app starts empty.
        pass.conditions().set(
            conditions::RESTORING,
            false,
            "NotRestored",
            "no restore is asked for any more (spec.restoreFrom and restoreFromExisting): the app starts with empty volumes",
        );
    }
    let replicas = on_demand_restore(pass, &jobs, initialized, &mut gate).await?;

    let claim_templates = statefulset
        .as_ref()
        .and_then(|sts| sts.view.claim_templates());
    if let Some(templates) = &claim_templates {
        report_storage_drift(pass, templates);
    }
    let record = initial_outcome.as_ref().map(InitialOutcome::record);
    let desired =
        children::statefulset(app, replicas, claim_templates.as_deref(), record.as_deref())?;
    pass.apply_unless_in_line(&desired, statefulset.as_ref().map(|s| s.view.version))
        .await?;
    let recorded = statefulset
        .as_ref()
        .is_some_and(|sts| sts.view.initial_restore.is_some());
    if recorded && spec.restore_from.is_some() {
        release_source_claim(pass, &jobs).await?;
    }
    if let Some(outcome) = &initial_outcome
        && !gate.in_progress
    {
        finish_initial_restore(pass, outcome);
    }
    if !initialized {
        pass.conditions().set(
            conditions::INITIALIZED,
            true,
            "Created",
            "the app's volumes and StatefulSet exist",
        );
    }

    apply_schedule(pass, gate.in_progress).await?;
    on_demand_backup(pass, &jobs, gate.in_progress).await?;
    record_backups(pass, &jobs).await?;

    let observed = progress::Observed {
        ready: statefulset
            .as_ref()
            .map_or(0, |sts| sts.view.ready_replicas),
        jobs: &jobs,
        restoring: gate.in_progress,
        wanted: spec.replicas,
        asked: replicas,
    };
    Ok(progress::report(
        &mut pass.status,
        app.app.metadata.generation,
        &observed,
    ))
}

/// The app's mover Jobs. From the cache, except while a restore may be starting or running
/// (a first restore before the StatefulSet exists, a request, or status says so): a Job
/// created a moment ago may not be cached yet, and missing it would start the app while the
/// mover writes its volumes.
async fn mover_jobs(pass: &mut Pass<'_>, has_statefulset: bool) -> Result<Vec<Arc<Job>>, Error> {
    let app = pass.app;
    let spec = &app.app.spec;
    let first_restore =
        !has_statefulset && (spec.restore_from_existing || spec.restore_from.is_some());
    let restore_requested = pass
        .status
        .restore_request
        .as_ref()
        .is_some_and(|request| !request.phase.is_final());
    let new_request = matches!(
        pending_token(
            app.app,
            names::RESTORE_REQUESTED,
            pass.status.restore_request.as_ref()
        ),
        Ok(Some(_))
    );
    let may_restore = first_restore
        || new_request
        || restore_requested
        || pass.conditions().is_true(conditions::RESTORING);
    if !may_restore {
        return Ok(pass.ctx.cache.jobs(&app.namespace, &app.name));
    }
    let selector = format!(
        "app.kubernetes.io/instance={},app.kubernetes.io/managed-by={}",
        app.name,
        names::FIELD_MANAGER
    );
    let jobs = pass
        .api::<Job>()
        .list(&ListParams::default().labels(&selector))
        .await?;
    Ok(jobs.items.into_iter().map(Arc::new).collect())
}

fn no_node(pass: &mut Pass<'_>, message: String) -> Result<Action, Error> {
    pass.conditions()
        .set(conditions::READY, false, "NoNode", &message);
    Ok(Action::requeue(WAIT * 5))
}

/// The app's backup directory under a node root: a static volume pre-bound to a claim in
/// the app's namespace. Returns an action when the app must wait or is refused.
async fn backup_storage(
    pass: &mut Pass<'_>,
    root: &str,
    node: &str,
) -> Result<Option<Action>, Error> {
    let app = pass.app;
    let client = pass.ctx.client.clone();
    let volume_api = Api::<PersistentVolume>::all(client.clone());
    let claim_api = pass.api::<PersistentVolumeClaim>();
    let volume_name = names::backup_volume(&app.namespace, &app.name);
    let claim_name = names::backup_claim(&app.name);
    let path = names::backup_host_path(root, &app.namespace, &app.name);
    let namespace_uid = match pass.ctx.cache.namespace_uid(&app.namespace) {
        Some(uid) => uid,
        // A namespace made a moment ago may not be cached yet.
        None => Api::<Namespace>::all(client)
            .get(&app.namespace)
            .await?
            .uid()
            .unwrap_or_default(),
    };
    let volume = pass.ctx.cache.volume(&volume_name);
    let claim = pass.ctx.cache.claim(&app.namespace, &claim_name);
    match volume {
        None => {
            let desired = children::backup_volume(app, root, node, &namespace_uid)?;
            apply_to(&volume_api, &desired, None, pass.ctx).await?;
        }
        Some(volume) => {
            if volume.deleting {
                return waiting(
                    pass,
                    "BackupVolumeReleasing",
                    format!("waiting for the old PersistentVolume {volume_name} to be deleted"),
                )
                .map(Some);
            }
            if volume.view.namespace_uid.as_ref() != Some(&namespace_uid) {
                let message = format!(
                    "the backup directory {path} belongs to an earlier namespace named {} (PersistentVolume {volume_name}); a cluster admin must remove that volume and move or delete the directory before this app may back up there",
                    app.namespace
                );
                if pass.conditions().set(
                    conditions::READY,
                    false,
                    "BackupsOfAnotherNamespace",
                    &message,
                ) {
                    pass.note(
                        EventType::Warning,
                        "BackupsOfAnotherNamespace",
                        "Validate",
                        message,
                    );
                }
                return Ok(Some(Action::requeue(RESYNC)));
            }
            let current = volume.view.host_path.as_ref();
            if current != Some(&path) {
                // The spec moved to another allowed root: the volume's path is immutable, so
                // it is made anew once its claim is gone. The old snapshots stay on the node.
                match &claim {
                    Some(claim) if !claim.deleting => {
                        claim_api
                            .delete(&claim_name, &DeleteParams::default())
                            .await?;
                    }
                    Some(_) => {}
                    None => {
                        volume_api
                            .delete(&volume_name, &DeleteParams::default())
                            .await?;
                    }
                }
                return waiting(
                    pass,
                    "BackupRootChanging",
                    format!(
                        "moving backups to {path}: earlier snapshots stay in {}",
                        current.map(String::as_str).unwrap_or("?")
                    ),
                )
                .map(Some);
            }
            if volume.view.released {
                // Its claim was deleted (by hand, or with its namespace, which is the same
                // namespace: the uid matched): let a new claim of the same name bind.
                let patch = json!({"spec": {"claimRef": {"uid": null, "resourceVersion": null}}});
                volume_api
                    .patch(&volume_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                pass.ctx.metrics.writes.inc();
            }
        }
    }
    match claim {
        None => {
            pass.apply(&children::backup_claim(app)?, None).await?;
        }
        Some(claim) if claim.deleting => {
            return waiting(
                pass,
                "BackupClaimReleasing",
                format!("waiting for the old PersistentVolumeClaim {claim_name} to be deleted"),
            )
            .map(Some);
        }
        Some(_) => {}
    }
    Ok(None)
}

/// Stops every mover Job whose pod cannot start, so that nothing waits on it forever (a
/// restore holding the app at 0 replicas, backups piling up): the Job fails with the pod's
/// own reason, which the next pass reports as the request's outcome.
async fn stop_stuck_jobs(pass: &mut Pass<'_>, jobs: &[Arc<Job>]) -> Result<(), Error> {
    let now = k8s_openapi::jiff::Timestamp::now();
    let patience = k8s_openapi::jiff::SignedDuration::try_from(START_PATIENCE)
        .unwrap_or(k8s_openapi::jiff::SignedDuration::from_secs(60));
    for job in jobs {
        let stopped = job.annotations().contains_key(names::STOPPED_BECAUSE);
        if !jobs::is_active(job) || stopped || !jobs::older_than(job, now, patience) {
            continue;
        }
        let name = job.name_any();
        let pods = pass
            .api::<Pod>()
            .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}")))
            .await?
            .items;
        // Only for a Job with no pod: the Job controller's own account of why.
        let refusal = match pods.is_empty() {
            true => creation_refusal(pass, &name).await?,
            false => None,
        };
        let Some(reason) = jobs::stuck(job, &pods, refusal.as_deref(), now, patience) else {
            continue;
        };
        // A deadline already past makes the Job controller fail the Job and remove its
        // pods; the annotation keeps the real reason for status.
        let patch = json!({
            "metadata": {"annotations": {names::STOPPED_BECAUSE: reason}},
            "spec": {"activeDeadlineSeconds": 1},
        });
        pass.api::<Job>()
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        pass.ctx.metrics.writes.inc();
        pass.note(
            EventType::Warning,
            "JobStopped",
            "Stop",
            format!("stopped Job {name}: {reason}"),
        );
    }
    Ok(())
}

/// Says whether the volumes are as the spec asks: a size or class changed after they were
/// made, and the volumes of replicas the spec no longer has (kept with their data, as the
/// StatefulSet keeps them), are reported (condition StorageApplied and an event), not
/// silently taken as applied.
fn report_storage_drift(pass: &mut Pass<'_>, claim_templates: &[PersistentVolumeClaim]) {
    let app = pass.app;
    let mut kept: Vec<(i32, String)> = pass
        .ctx
        .cache
        .data_claims(&app.namespace, &app.name)
        .into_iter()
        .filter_map(|claim| Some((names::claim_ordinal(&app.name, &claim)?, claim)))
        .filter(|(ordinal, _)| *ordinal >= app.app.spec.replicas)
        .collect();
    kept.sort();
    let kept = (!kept.is_empty()).then(|| {
        let claims: Vec<_> = kept.into_iter().map(|(_, claim)| claim).collect();
        format!(
            "spec.replicas is {}: the volumes of the removed replicas are kept with their data (PersistentVolumeClaims {}); scaling up again brings those replicas back on them, and deleting the app releases them",
            app.app.spec.replicas,
            claims.join(", ")
        )
    });
    let (reason, message) = match (children::storage_drift(app, claim_templates), kept) {
        (Some(drift), kept) => (
            "StorageImmutable",
            [Some(drift), kept]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join("; "),
        ),
        (None, Some(kept)) => ("RemovedReplicasVolumesKept", kept),
        (None, None) => {
            pass.conditions().set(
                conditions::STORAGE_APPLIED,
                true,
                "Applied",
                "the volumes have the size and class the spec asks for",
            );
            return;
        }
    };
    if pass
        .conditions()
        .set(conditions::STORAGE_APPLIED, false, reason, &message)
    {
        // Kept volumes are how StatefulSets work, not a mistake in the spec.
        let kind = match reason {
            "StorageImmutable" => EventType::Warning,
            _ => EventType::Normal,
        };
        pass.note(kind, reason, "Apply", message);
    }
}

/// The message of the Job controller's newest FailedCreate event for Job `name`, if any.
async fn creation_refusal(pass: &Pass<'_>, name: &str) -> Result<Option<String>, Error> {
    let selector =
        format!("involvedObject.kind=Job,involvedObject.name={name},reason=FailedCreate");
    let events = pass
        .api::<k8s_openapi::api::core::v1::Event>()
        .list(&ListParams::default().fields(&selector))
        .await?;
    Ok(events
        .items
        .into_iter()
        .max_by_key(|event| event.last_timestamp.as_ref().map(|t| t.0))
        .and_then(|event| event.message))
}

/// Says what the app waits for, and looks again soon.
fn waiting(pass: &mut Pass<'_>, reason: &str, message: String) -> Result<Action, Error> {
    pass.conditions()
        .set(conditions::READY, false, reason, &message);
    Ok(Action::requeue(WAIT))
}

/// The node of the app's static volumes: where existing volumes are pinned, else where the
/// status says, else one the app's pods can run on (see `placement`). The inner `Err` says
/// why no node can.
async fn data_node(
    pass: &Pass<'_>,
    volumes: &[Arc<Kept<VolumeView>>],
) -> Result<Result<String, String>, Error> {
    if let Some(node) = volumes.iter().find_map(|volume| volume.view.node.clone()) {
        return Ok(Ok(node));
    }
    if let Some(node) = &pass.status.node_name {
        return Ok(Ok(node.clone()));
    }
    if let Some(node) = restore_node(pass) {
        return Ok(Ok(node));
    }
    let spec = &pass.app.app.spec;
    Ok(placement::choose(
        &pass.ctx.cache.nodes(),
        &spec.node_selector.clone().unwrap_or_default(),
        spec.tolerations.as_deref().unwrap_or_default(),
    ))
}

/// The node that holds the backups a new app restores (its own, or `spec.restoreFrom`'s),
/// when they are in a node directory: the data must be made there for the restore Job to
/// mount both. Found through the backup claim, which binds only that app's directory.
fn restore_node(pass: &Pass<'_>) -> Option<String> {
    let spec = &pass.app.app.spec;
    let owner = match &spec.restore_from {
        Some(from) => &from.name,
        None if spec.restore_from_existing => &pass.app.name,
        None => return None,
    };
    if !matches!(pass.location, Some(BackupLocation::NodeRoot(_))) {
        return None;
    }
    let cache = &pass.ctx.cache;
    let claim = cache.claim(&pass.app.namespace, &names::backup_claim(owner));
    // Only a Bound claim's volumeName is the volume's: a tenant may write any name there.
    let bound = claim.filter(|c| c.view.bound);
    let volume = bound.and_then(|c| c.view.volume_name.clone())?;
    cache.volume(&volume)?.view.node.clone()
}

/// How the restore before the app's first start ended, as recorded on its StatefulSet.
#[derive(Debug, Clone, PartialEq)]
enum InitialOutcome {
    /// Backup `id`, of another app when `of` is set (`spec.restoreFrom`).
    Restored {
        id: String,
        of: Option<String>,
    },
    NoBackup,
}

impl InitialOutcome {
    fn record(&self) -> String {
        match self {
            InitialOutcome::Restored { id, of: None } => format!("restored {id}"),
            InitialOutcome::Restored { id, of: Some(app) } => format!("restored {id} of {app}"),
            InitialOutcome::NoBackup => "no-backup".to_string(),
        }
    }

    /// What status says of it (the Restoring condition, a retry's acknowledgement).
    fn message(&self) -> String {
        match self {
            InitialOutcome::Restored { id, of: None } => {
                format!("restored backup {id} before the app started")
            }
            InitialOutcome::Restored { id, of: Some(app) } => {
                format!("restored backup {id} of app {app} before the app started")
            }
            InitialOutcome::NoBackup => {
                "no backup of this app exists: it starts with empty volumes".to_string()
            }
        }
    }

    fn parse(record: &str) -> Option<Self> {
        match record {
            "no-backup" => Some(InitialOutcome::NoBackup),
            _ => record.strip_prefix("restored ").map(|rest| {
                let (id, of) = match rest.split_once(" of ") {
                    Some((id, app)) => (id, Some(app.to_string())),
                    None => (rest, None),
                };
                InitialOutcome::Restored {
                    id: id.to_string(),
                    of,
                }
            }),
        }
    }
}

/// What the restore before the app's first start needs from the pass.
enum InitialRestore {
    /// The app must not start yet.
    Wait(Action),
    /// The restore ended: the app starts, and the outcome is recorded.
    Done(InitialOutcome),
}

/// Whether `job` is an attempt of this app's initial restore.
fn is_initial_attempt(job: &Job, uid: &str) -> bool {
    let labels = job.labels();
    jobs::component(job) == Some(Component::Restore)
        && labels.get(names::ACTION_LABEL).map(String::as_str) == Some(INITIAL_RESTORE_ACTION)
        && job.owner_references().iter().any(|owner| owner.uid == uid)
}

/// `restoreFromExisting` on creation: the restore Job runs to completion before the
/// StatefulSet exists. After a failed attempt, a new restore-requested token (`kubectl
/// hellostateful restore NAME`) starts another attempt in a Job of its own.
async fn initial_restore(pass: &mut Pass<'_>, jobs: &[Arc<Job>]) -> Result<InitialRestore, Error> {
    let app = pass.app;
    // `spec.restoreFrom`: another app's backup, which must exist (the user asked for it).
    let requested = app.app.spec.restore_from.as_ref();
    let source = requested
        .map(|from| from.name.clone())
        .filter(|name| *name != app.name);
    let first = names::initial_restore_job(&app.name, &app.uid, None);
    let old = pass.status.restore_request.clone();
    let retry = match pending_token(app.app, names::RESTORE_REQUESTED, old.as_ref()) {
        Ok(token) => token,
        Err(ignored) => {
            pass.status.restore_request = Some(ignored);
            None
        }
    };
    let find = |name: &str| jobs.iter().find(|job| job.name_any() == name);
    let already_failed = pass.conditions().reason(conditions::RESTORING) == Some("RestoreFailed");
    let first_failed = match find(&first) {
        Some(job) => matches!(jobs::state(job), JobState::Failed(_)),
        // Removed by its TTL after it failed: status still says so.
        None => already_failed,
    };
    let (job_name, retrying) = match retry {
        Some(token) => {
            let name = names::initial_restore_job(&app.name, &app.uid, Some(token));
            if find(&name).is_some() || first_failed {
                (name, Some(token))
            } else {
                (first, None)
            }
        }
        None => (first, None),
    };
    let acknowledge = |pass: &mut Pass<'_>, phase, message: &str| {
        if let Some(token) = retrying {
            pass.status.restore_request = Some(request(token, phase, Some(&job_name), message));
        }
    };
    let state = find(&job_name).map(|job| jobs::state(job));
    match state {
        // A failure is reported once; only a new token starts another attempt.
        None | Some(JobState::Failed(_))
            if retrying.is_none() && first_failed && already_failed =>
        {
            if requested.is_some() {
                // Reported by an earlier pass: the source's claim is released.
                release_source_claim(pass, jobs).await?;
            }
            Ok(InitialRestore::Wait(Action::await_change()))
        }
        None => {
            if let Some(source) = &source
                && let Some(missing) = missing_source_backups(pass, source).await?
            {
                acknowledge(pass, RequestPhase::Failed, &missing);
                if pass.conditions().set(
                    conditions::RESTORING,
                    false,
                    "RestoreSourceMissing",
                    &missing,
                ) {
                    pass.note(
                        EventType::Warning,
                        "RestoreSourceMissing",
                        "Restore",
                        missing.clone(),
                    );
                }
                pass.conditions()
                    .set(conditions::READY, false, "RestoreSourceMissing", &missing);
                // The claim may yet be made or bound: look again now and then.
                return Ok(InitialRestore::Wait(Action::requeue(RESYNC)));
            }
            let task = MoverTask::initial_restore(app);
            pass.start_job(&job_name, &task, INITIAL_RESTORE_ACTION)
                .await?;
            let message = initial_restore_running(pass, &job_name);
            acknowledge(pass, RequestPhase::Running, &message);
            let what = requested.map_or("the newest backup".to_string(), |from| from.describe());
            pass.note(
                EventType::Normal,
                "RestoreStarted",
                "Restore",
                format!("restoring {what} with Job {job_name} before the app starts"),
            );
            Ok(InitialRestore::Wait(Action::requeue(WAIT)))
        }
        Some(JobState::Running) => {
            let message = initial_restore_running(pass, &job_name);
            acknowledge(pass, RequestPhase::Running, &message);
            Ok(InitialRestore::Wait(Action::requeue(WAIT)))
        }
        Some(JobState::Succeeded) => {
            let outcome = pass
                .job_message(&job_name)
                .await?
                .and_then(|m| summary::parse_last_line::<RestoreSummary>(&m));
            let outcome = match outcome {
                Some(RestoreSummary {
                    restored: true, id, ..
                }) => InitialOutcome::Restored {
                    id: id.unwrap_or_default(),
                    of: source,
                },
                _ => InitialOutcome::NoBackup,
            };
            acknowledge(pass, RequestPhase::Succeeded, &outcome.message());
            Ok(InitialRestore::Done(outcome))
        }
        Some(JobState::Failed(_)) if already_failed && requested.is_some() => {
            // Reported by an earlier pass: the source's claim is released.
            release_source_claim(pass, jobs).await?;
            Ok(InitialRestore::Wait(Action::await_change()))
        }
        Some(JobState::Failed(reason)) => {
            let message = pass.failure_message(&job_name, reason).await?;
            let instead = match requested {
                Some(from) => format!(
                    "correct spec.restoreFrom if it names the wrong backup (`kubectl hellostateful backups {}` lists them) and retry, or remove spec.restoreFrom and set spec.restoreFromExisting to false to start without a restore",
                    from.name
                ),
                None => "or set spec.restoreFromExisting to false to start without a restore"
                    .to_string(),
            };
            let full = format!(
                "restore Job {job_name} failed: {message}. The app is not started, so nothing is overwritten. Fix the cause, then retry with `kubectl hellostateful restore {name}` (a new {annotation} token), {instead}",
                name = app.name,
                annotation = names::RESTORE_REQUESTED,
            );
            acknowledge(pass, RequestPhase::Failed, &full);
            if pass
                .conditions()
                .set(conditions::RESTORING, false, "RestoreFailed", &full)
            {
                Metrics::finished(&pass.ctx.metrics.restores, false);
                pass.note(EventType::Warning, "RestoreFailed", "Restore", full.clone());
            }
            pass.conditions()
                .set(conditions::READY, false, "RestoreFailed", &full);
            Ok(InitialRestore::Wait(Action::await_change()))
        }
    }
}

/// Ends the finished Jobs of a restore from another app's backups once their outcome is
/// recorded (on the StatefulSet, or as a reported failure): their pods mount that app's
/// backup claim, and a claim used by any pod, even a completed one, cannot be deleted, so
/// `delete --delete-backups` of that app would hang until their TTL. Their TTL is set to
/// zero, so that the TTL controller deletes them and their pods now (the reconciler may
/// patch Jobs, never delete them). Best effort: the app runs whether or not this works.
async fn release_source_claim(pass: &mut Pass<'_>, jobs: &[Arc<Job>]) -> Result<(), Error> {
    let api = pass.api::<Job>();
    let now = json!({"spec": {"ttlSecondsAfterFinished": 0}});
    for job in jobs.iter().filter(|job| {
        is_initial_attempt(job, &pass.app.uid)
            && job.metadata.deletion_timestamp.is_none()
            && job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished) != Some(0)
            && matches!(jobs::state(job), JobState::Succeeded | JobState::Failed(_))
    }) {
        let name = job.name_any();
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&now))
            .await
        {
            Ok(_) => {
                pass.ctx.metrics.writes.inc();
            }
            Err(error) => warn!(
                app = %pass.app.name,
                "cannot end the finished restore Job {name}: {}; it holds the source app's backup claim until its TTL",
                Error::Kube(error).user_message()
            ),
        }
    }
    Ok(())
}

/// Why the backups of app `source` (`spec.restoreFrom`) cannot be read, if they cannot:
/// in a node directory they are reached only through that app's backup claim, which
/// outlives the app and exists once it has backed up.
async fn missing_source_backups(pass: &Pass<'_>, source: &str) -> Result<Option<String>, Error> {
    if !matches!(pass.location, Some(BackupLocation::NodeRoot(_))) {
        // A claim of the namespace holds every app's backups: the mover says if there is none.
        return Ok(None);
    }
    let app = pass.app;
    let claim_name = names::backup_claim(source);
    let phase = pass
        .api::<PersistentVolumeClaim>()
        .get_opt(&claim_name)
        .await?
        .map(|claim| {
            claim
                .status
                .and_then(|s| s.phase)
                .unwrap_or_else(|| "Pending".into())
        });
    let why = match phase.as_deref() {
        Some("Bound") => return Ok(None),
        Some(phase) => format!("its backup claim {claim_name} is {phase}, not Bound"),
        None => format!(
            "its backup claim {claim_name} does not exist, so it never backed up in this namespace"
        ),
    };
    Ok(Some(format!(
        "spec.restoreFrom: the backups of app {source} cannot be read: {why}. The app is not started; name an app with backups (`kubectl hellostateful backups {source}` lists them), or remove spec.restoreFrom to start with empty volumes (status: `kubectl hellostateful status {name}`)",
        name = app.name
    )))
}

/// The status of an ended initial restore, from its durable record: `isRestored`, and a
/// Restoring condition still True from it is finished (with its event). Runs on every pass
/// that is not restoring, so that a lost status write is made good by the next pass.
fn finish_initial_restore(pass: &mut Pass<'_>, outcome: &InitialOutcome) {
    if matches!(outcome, InitialOutcome::Restored { .. }) {
        pass.status.is_restored = true;
    }
    if !pass.conditions().is_true(conditions::RESTORING) {
        return;
    }
    let app = pass.app;
    let message = outcome.message();
    let (reason, event) = match outcome {
        InitialOutcome::Restored { id, of } => (
            "Restored",
            match of {
                Some(app) => format!("restored backup {id} of app {app}; starting the app"),
                None => format!("restored backup {id}; starting the app"),
            },
        ),
        InitialOutcome::NoBackup => (
            "NoBackup",
            format!(
                "restoreFromExisting: no backup of {}/{} exists; starting with empty volumes",
                app.namespace, app.name
            ),
        ),
    };
    if pass
        .conditions()
        .set(conditions::RESTORING, false, reason, &message)
    {
        if matches!(outcome, InitialOutcome::Restored { .. }) {
            Metrics::finished(&pass.ctx.metrics.restores, true);
        }
        pass.note(EventType::Normal, reason, "Restore", event);
    }
}

/// Conditions while the restore of a newly created app runs; returns what it says.
fn initial_restore_running(pass: &mut Pass<'_>, job_name: &str) -> String {
    let message = format!("Job {job_name} restores the newest backup before the app starts");
    let mut conditions = pass.conditions();
    conditions.set(conditions::RESTORING, true, "RestoreRunning", &message);
    conditions.set(
        conditions::READY,
        false,
        "Restoring",
        "the app starts once its data is restored",
    );
    message
}

/// An on-demand restore: stop the app, wait for its pods and any backup to finish, run the
/// restore Job, start the app again. Returns the replicas the StatefulSet must have.
/// Whether a restore request failed after its Job began replacing the live data.
fn interrupted_mid_swap(request: &RequestStatus) -> bool {
    request.phase == RequestPhase::Failed
        && request
            .message
            .as_deref()
            .is_some_and(|m| m.contains(hellostateful_mover::SWAP_INTERRUPTED))
}

async fn on_demand_restore(
    pass: &mut Pass<'_>,
    jobs: &[Arc<Job>],
    initialized: bool,
    gate: &mut RestoreGate,
) -> Result<i32, Error> {
    let app = pass.app;
    let replicas = app.app.spec.replicas;
    let old = pass.status.restore_request.clone();
    // One restore per app at a time, whatever the tokens: a restore Job that runs keeps the
    // app stopped even when its request was withdrawn or replaced.
    let running_restore = jobs::running(jobs, Component::Restore).map(|job| job.name_any());
    let token = match pending_token(app.app, names::RESTORE_REQUESTED, old.as_ref()) {
        Ok(token) => token,
        Err(ignored) => {
            pass.status.restore_request = Some(ignored);
            None
        }
    };
    let Some(token) = token else {
        if let Some(job) = running_restore {
            gate.in_progress = true;
            pass.conditions().set(
                conditions::RESTORING,
                true,
                "RestoreRunning",
                &format!("Job {job} still restores (its request was withdrawn); the app starts once it ends"),
            );
            return Ok(0);
        }
        if old.as_ref().is_some_and(interrupted_mid_swap) {
            // Until a new request finishes the swap, some volumes may hold the restored
            // data and others the old: the app must not run on that.
            return Ok(0);
        }
        return Ok(replicas);
    };
    let from = app
        .app
        .annotations()
        .get(names::RESTORE_FROM)
        .map(String::as_str)
        .unwrap_or("latest");
    if let Err(error) = validate::restore_from(from) {
        let message = error.to_string();
        pass.status.restore_request = Some(request(token, RequestPhase::Failed, None, &message));
        pass.note(EventType::Warning, "RestoreRefused", "Restore", message);
        return Ok(replicas);
    }
    if !initialized {
        pass.status.restore_request = Some(request(
            token,
            RequestPhase::Pending,
            None,
            "waiting for the app to be created",
        ));
        return Ok(replicas);
    }
    let job_name = names::restore_job(&app.name, &app.uid, token);
    let set = |pass: &mut Pass<'_>, phase, message: String, backup_id: Option<String>| {
        let mut status = request(token, phase, Some(&job_name), message);
        status.backup_id = backup_id;
        pass.status.restore_request = Some(status);
    };
    match jobs
        .iter()
        .find(|job| job.name_any() == job_name)
        .map(|job| jobs::state(job))
    {
        Some(JobState::Running) => {
            gate.in_progress = true;
            set(
                pass,
                RequestPhase::Running,
                format!("Job {job_name} restores {from}"),
                None,
            );
            pass.conditions().set(
                conditions::RESTORING,
                true,
                "RestoreRunning",
                &format!("Job {job_name} restores {from}"),
            );
            Ok(0)
        }
        Some(JobState::Succeeded) => {
            let outcome = pass
                .job_message(&job_name)
                .await?
                .and_then(|m| summary::parse_last_line::<RestoreSummary>(&m));
            let id = outcome
                .and_then(|o| o.id)
                .unwrap_or_else(|| from.to_string());
            let message = format!("restored backup {id}; the app runs {replicas} replica(s) again");
            set(pass, RequestPhase::Succeeded, message.clone(), Some(id));
            pass.status.is_restored = true;
            Metrics::finished(&pass.ctx.metrics.restores, true);
            pass.conditions()
                .set(conditions::RESTORING, false, "Restored", &message);
            pass.note(EventType::Normal, "Restored", "Restore", message);
            Ok(replicas)
        }
        Some(JobState::Failed(reason)) => {
            let cause = pass.failure_message(&job_name, reason).await?;
            let (message, run) = if cause.contains(hellostateful_mover::SWAP_INTERRUPTED) {
                (
                    format!(
                        "restore of {from} failed: {cause}. The app stays stopped so that it \
                         never runs on a mix of old and restored volumes: request the restore \
                         again (kubectl hellostateful restore {}), which finishes the swap first",
                        app.name
                    ),
                    0,
                )
            } else {
                (
                    format!("restore of {from} failed: {cause}; the live data was not replaced"),
                    replicas,
                )
            };
            set(pass, RequestPhase::Failed, message.clone(), None);
            Metrics::finished(&pass.ctx.metrics.restores, false);
            pass.conditions()
                .set(conditions::RESTORING, false, "RestoreFailed", &message);
            pass.note(EventType::Warning, "RestoreFailed", "Restore", message);
            Ok(run)
        }
        None => {
            gate.in_progress = true;
            let backup = jobs::running(jobs, Component::Backup);
            let pods = pass
                .api::<Pod>()
                .list(&ListParams::default().labels(&names::selector_string(&app.name)))
                .await?
                .items;
            let (phase, message) = if let Some(other) = &running_restore {
                (
                    RequestPhase::Pending,
                    format!("waiting for restore Job {other} to finish: one restore at a time"),
                )
            } else if let Some(backup) = backup {
                (
                    RequestPhase::Pending,
                    format!("waiting for backup Job {} to finish", backup.name_any()),
                )
            } else if !pods.is_empty() {
                (
                    RequestPhase::Pending,
                    format!(
                        "stopping the app: waiting for {} pod(s) to exit",
                        pods.len()
                    ),
                )
            } else {
                let task = MoverTask::Restore {
                    from: from.to_string(),
                    if_exists: false,
                    source: None,
                };
                // Its Job ran once already (status says so) and is gone: its TTL removed it
                // before its outcome could be recorded (the reconciler was down that long).
                // The app has stayed stopped; restoring the same backup again is safe and
                // gives the one outcome that can be reported.
                let lost = old.as_ref().is_some_and(|request| {
                    request.token == token
                        && request.phase == RequestPhase::Running
                        && request.job.as_deref() == Some(job_name.as_str())
                });
                pass.start_job(&job_name, &task, "requested").await?;
                let started = if lost {
                    format!(
                        "restoring {from} again with Job {job_name}: the first run's Job was removed before its outcome was recorded; the app stays stopped meanwhile"
                    )
                } else {
                    format!("restoring {from} with Job {job_name}; the app is stopped meanwhile")
                };
                pass.note(EventType::Normal, "RestoreStarted", "Restore", started);
                (
                    RequestPhase::Running,
                    format!("Job {job_name} restores {from}"),
                )
            };
            pass.conditions()
                .set(conditions::RESTORING, true, "RestoreRunning", &message);
            set(pass, phase, message, None);
            Ok(0)
        }
    }
}

/// The backup CronJob: applied while a schedule is set (suspended during restores), deleted
/// when the schedule is removed.
async fn apply_schedule(pass: &mut Pass<'_>, restoring: bool) -> Result<(), Error> {
    let app = pass.app;
    let name = names::cronjob(&app.name);
    let existing = pass.ctx.cache.cronjob(&app.namespace, &name);
    match &app.app.spec.backup_schedule {
        Some(schedule) => {
            let location = pass
                .location
                .as_ref()
                .ok_or(Error::MissingField("an allowed backup location"))?;
            let mut desired = children::cronjob(app, schedule, location, &pass.ctx.settings)?;
            if restoring && let Some(spec) = desired.spec.as_mut() {
                spec.suspend = Some(true);
            }
            pass.apply_unless_in_line(&desired, existing.as_ref().map(|c| c.view.version))
                .await?;
        }
        None => {
            if existing.is_some_and(|c| !c.deleting) {
                pass.api::<CronJob>()
                    .delete(&name, &DeleteParams::background())
                    .await?;
                pass.ctx.metrics.writes.inc();
            }
        }
    }
    Ok(())
}

/// An on-demand backup: one Job per token, acknowledged with the snapshot id.
async fn on_demand_backup(
    pass: &mut Pass<'_>,
    jobs: &[Arc<Job>],
    restoring: bool,
) -> Result<(), Error> {
    let app = pass.app;
    let old = pass.status.backup_request.clone();
    let token = match pending_token(app.app, names::BACKUP_REQUESTED, old.as_ref()) {
        Ok(Some(token)) => token,
        Ok(None) => return Ok(()),
        Err(ignored) => {
            pass.status.backup_request = Some(ignored);
            return Ok(());
        }
    };
    let job_name = names::backup_job(&app.name, &app.uid, token);
    let status = match jobs
        .iter()
        .find(|job| job.name_any() == job_name)
        .map(|job| jobs::state(job))
    {
        None if restoring => request(
            token,
            RequestPhase::Pending,
            None,
            "waiting for the restore to finish",
        ),
        None => {
            pass.start_job(&job_name, &MoverTask::Backup, "requested")
                .await?;
            pass.note(
                EventType::Normal,
                "BackupStarted",
                "Backup",
                format!("backing up with Job {job_name}"),
            );
            request(
                token,
                RequestPhase::Running,
                Some(&job_name),
                format!("Job {job_name} copies the app's data"),
            )
        }
        Some(JobState::Running) => request(
            token,
            RequestPhase::Running,
            Some(&job_name),
            format!("Job {job_name} copies the app's data"),
        ),
        Some(JobState::Succeeded) => {
            let outcome = pass
                .job_message(&job_name)
                .await?
                .and_then(|m| summary::parse_last_line::<BackupSummary>(&m));
            let mut status = request(
                token,
                RequestPhase::Succeeded,
                Some(&job_name),
                "backup finished",
            );
            if let Some(outcome) = outcome {
                status.message = Some(format!(
                    "backup {} finished: {} files, {} bytes",
                    outcome.id, outcome.files, outcome.bytes
                ));
                status.backup_id = Some(outcome.id);
            }
            status
        }
        Some(JobState::Failed(reason)) => {
            let message = pass.failure_message(&job_name, reason).await?;
            request(
                token,
                RequestPhase::Failed,
                Some(&job_name),
                format!("backup failed: {message}; earlier backups are intact"),
            )
        }
    };
    pass.status.backup_request = Some(status);
    Ok(())
}

/// lastBackup and the BackupSucceeded / BackupFailed conditions, from the newest finished
/// backup Job (scheduled or on demand), with an event and metrics once per Job.
async fn record_backups(pass: &mut Pass<'_>, jobs: &[Arc<Job>]) -> Result<(), Error> {
    let newest = jobs
        .iter()
        .filter(|job| jobs::component(job) == Some(Component::Backup))
        .filter(|job| jobs::state(job) != JobState::Running)
        .max_by_key(|job| jobs::finished_at(job));
    let Some(job) = newest else {
        return Ok(());
    };
    let job_name = job.name_any();
    match jobs::state(job) {
        JobState::Succeeded => {
            if pass
                .status
                .last_backup
                .as_ref()
                .and_then(|b| b.job.as_deref())
                == Some(job_name.as_str())
            {
                return Ok(());
            }
            let Some(outcome) = pass
                .job_message(&job_name)
                .await?
                .and_then(|m| summary::parse_last_line::<BackupSummary>(&m))
            else {
                return Ok(());
            };
            let mut message = format!(
                "backup {} by Job {job_name}: {} files, {} bytes ({} new) in {} ms",
                outcome.id, outcome.files, outcome.bytes, outcome.new_bytes, outcome.duration_ms
            );
            let inconsistent = inconsistent_files_warning(&outcome);
            if let Some(warning) = &inconsistent {
                message.push_str("; ");
                message.push_str(warning);
            }
            Metrics::finished(&pass.ctx.metrics.backups, true);
            pass.ctx.metrics.backup_bytes.inc_by(outcome.bytes);
            pass.status.last_backup = Some(LastBackup {
                id: outcome.id,
                time: outcome.time,
                bytes: outcome.bytes,
                files: outcome.files,
                new_bytes: outcome.new_bytes,
                duration_ms: outcome.duration_ms,
                inconsistent_files: outcome.inconsistent,
                job: Some(job_name),
            });
            pass.conditions().set(
                conditions::BACKUP_SUCCEEDED,
                true,
                "BackupSucceeded",
                &message,
            );
            pass.conditions().set(
                conditions::BACKUP_FAILED,
                false,
                "BackupSucceeded",
                &message,
            );
            match inconsistent {
                Some(_) => pass.note(EventType::Warning, "BackupInconsistent", "Backup", message),
                None => pass.note(EventType::Normal, "BackupSucceeded", "Backup", message),
            }
        }
        JobState::Failed(reason) => {
            let prefix = format!("backup Job {job_name} failed: ");
            let conditions = pass.conditions();
            let reported = conditions.is_true(conditions::BACKUP_FAILED)
                && conditions
                    .message(conditions::BACKUP_FAILED)
                    .is_some_and(|message| message.starts_with(&prefix));
            if reported {
                // Its pods' account is in status already: not read again on every pass.
                return Ok(());
            }
            let message = pass.failure_message(&job_name, reason).await?;
            let message = format!("{prefix}{message}; earlier backups are intact");
            pass.conditions().set(
                conditions::BACKUP_SUCCEEDED,
                false,
                "BackupFailed",
                &message,
            );
            if pass
                .conditions()
                .set(conditions::BACKUP_FAILED, true, "BackupFailed", &message)
            {
                Metrics::finished(&pass.ctx.metrics.backups, false);
                pass.note(EventType::Warning, "BackupFailed", "Backup", message);
            }
        }
        JobState::Running => {}
    }
    Ok(())
}

/// What the user must know about files the mover kept as read while the app wrote them.
fn inconsistent_files_warning(outcome: &BackupSummary) -> Option<String> {
    if outcome.inconsistent == 0 {
        return None;
    }
    let mut named = outcome.inconsistent_files.join(", ");
    let unnamed = outcome.inconsistent - outcome.inconsistent_files.len() as u64;
    if unnamed > 0 {
        named.push_str(&format!(" and {unnamed} more"));
    }
    Some(format!(
        "{} file(s) kept changing while being copied and may mix old and new contents: \
         {named} (back up while the app is idle, or have it write by renaming new files \
         into place)",
        outcome.inconsistent
    ))
}

/// Writes status by server-side apply, only when it changed; returns the app's
/// resourceVersion after the pass.
async fn write_status(
    ctx: &Context,
    app: &HelloStateful,
    old: &HelloStatefulStatus,
    status: HelloStatefulStatus,
) -> Result<Option<String>, Error> {
    if &status == old {
        return Ok(app.resource_version());
    }
    let api =
        Api::<HelloStateful>::namespaced(ctx.client.clone(), &app.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": HelloStateful::api_version(&()),
        "kind": HelloStateful::kind(&()),
        "status": status,
    });
    let written = api
        .patch_status(
            &app.name_any(),
            &PatchParams::apply(names::FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    Ok(written.resource_version())
}

async fn publish(
    ctx: &Context,
    app: &HelloStateful,
    kind: EventType,
    reason: &str,
    action: &str,
    message: &str,
) {
    let event = Event {
        type_: kind,
        reason: reason.to_string(),
        note: Some(message.chars().take(1000).collect()),
        action: action.to_string(),
        secondary: None,
    };
    if let Err(error) = ctx.recorder.publish(&event, &app.object_ref(&())).await {
        warn!(%error, reason, "could not publish an event");
    }
}

#[cfg(test)]
#[path = "controller_tests.rs"]
mod tests;
