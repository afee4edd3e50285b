//! The controller: one reconcile pass per HelloStateful brings its children, its on-demand
//! actions and its status in line with the spec and the annotations.
//!
//! Every decision is derived from what is in the cluster (children, Jobs, pods, status), never
//! from memory, so a reconciler restarted at any moment finishes what was started.

use std::any::Any;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt, TryStreamExt};
use hellostateful_api::names::{self, Component};
use hellostateful_api::{HelloStateful, HelloStatefulStatus, validate};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
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
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::Error;
use crate::backups;
use crate::cache::{Cache, Writers, is_apps_job};
use crate::children::{self, AppRef, MoverTask, Settings};
use crate::conditions::{self, Conditions};
use crate::deletion;
use crate::drift;
use crate::fence::Fence;
use crate::initial;
use crate::jobs::{self, JobState};
use crate::kept::{self, AppOf, Kept, View};
use crate::known::{Basis, KnownApps};
use crate::leader::Leadership;
use crate::location::{self, BackupLocation};
use crate::metrics::{self, Metrics};
use crate::overdue;
use crate::parts;
use crate::placement;
use crate::prepare;
use crate::progress;
use crate::reads::{self, AppPods, Decision, Read, Reads, decided};
use crate::record::{self, Record, Tally};
use crate::restores;
use crate::stops;
use crate::storage;
use crate::tenancy;
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
/// How often one running Job's pods are read to tell whether it is stuck: an app whose
/// restore runs is looked at every few seconds, and a Job stuck for a minute is no worse
/// for being found a few seconds later.
const STUCK_CHECK_EVERY: Duration = Duration::from_secs(15);
/// Reconcile passes that run at once.
const CONCURRENCY: u16 = 32;
/// How long a mover Job's pod may fail to start (an image that cannot be pulled, no node
/// for it, a refused pod) before the Job is stopped and its request fails with the reason,
/// unless the settings say otherwise (`with_start_patience`).
pub const START_PATIENCE: Duration = Duration::from_secs(60);

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
    /// Who this replica's writes say made them, for the API server's fence.
    fence: Fence,
    /// How long a mover pod may fail to start before its request fails.
    start_patience: Duration,
    /// The children as the watches last saw them.
    pub cache: Cache,
    /// What this replica last knew of each app (see `known`): a cached app at another
    /// version may predate a status write of ours.
    known: KnownApps,
    /// Per StatefulSet and CronJob ("Kind/namespace/name"): the prints of what was last
    /// desired and of the object's version then, when it held all that was desired.
    in_line: Mutex<HashMap<String, (u64, u64)>>,
    /// Per running Job's uid: when its pods were last read for `stop_stuck_jobs`.
    stuck_checked: Mutex<HashMap<String, Instant>>,
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
            fence: Fence::default(),
            start_patience: START_PATIENCE,
            cache,
            known: KnownApps::default(),
            in_line: Mutex::default(),
            stuck_checked: Mutex::default(),
        }
    }

    /// Passes run only while `leadership` is held (the client refuses writes otherwise),
    /// and writes name `identity`, the Lease's holder, so that the API server refuses them
    /// once another replica holds it.
    pub fn with_leadership(self, leadership: Leadership, identity: &str) -> Self {
        Self {
            leadership: Some(leadership),
            fence: Fence::leader(identity),
            ..self
        }
    }

    /// Mover pods that cannot start are given `patience` before their request fails.
    pub fn with_start_patience(self, patience: Duration) -> Self {
        Self {
            start_patience: patience,
            ..self
        }
    }

    /// Records what a pass built on `app` left: the app as its status write returned it, or
    /// (`None`) `app` itself, unwritten. After a refused write the next pass reads the app.
    fn remember(
        &self,
        app: &HelloStateful,
        written: Result<Option<HelloStateful>, Error>,
    ) -> Result<(), Error> {
        match written {
            Ok(Some(written)) => self.known.written(written),
            Ok(None) => self.known.seen(app),
            Err(error) => {
                self.known.refused(&app.uid().unwrap_or_default());
                return Err(error);
            }
        }
        Ok(())
    }

    /// Forgets everything kept of a deleted app, so that the maps do not grow with churn.
    fn forget(&self, app: &AppRef<'_>) {
        self.known.forget(&app.uid);
        self.metrics.forget(&metrics::AppLabel {
            namespace: app.namespace.clone(),
            name: app.name.clone(),
        });
        if let Ok(mut failures) = self.failures.lock() {
            failures.remove(&format!("{}/{}", app.namespace, app.name));
        }
        if let Ok(mut in_line) = self.in_line.lock() {
            for key in [
                in_line_key::<StatefulSet>(&app.namespace, &names::statefulset(&app.name)),
                in_line_key::<CronJob>(&app.namespace, &names::cronjob(&app.name)),
            ] {
                in_line.remove(&key);
            }
        }
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
    let watch_ctx = ctx.clone();
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
        // The cache keeps every app: only what passes read of its metadata (`keep_app`),
        // and an annotation that is not read must not start a pass either.
        .modify(|app: &mut HelloStateful| kept::keep_app(&mut app.metadata))
        .reflect(writer)
        .inspect_ok(move |event| {
            if let watcher::Event::Apply(app) | watcher::Event::InitApply(app) = event {
                watch_ctx.known.delivered(app);
            }
        })
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
                // Said by `error_policy` already.
                Err(kube::runtime::controller::Error::ReconcilerFailed(error, _))
                    if error.is_waiting() => {}
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
        if app.metadata.deletion_timestamp.is_some() && !still_there(&api, &app).await? {
            // A pass already finished this deletion; the watch has not told the store yet.
            // Cleaning up again would start a Job for claims that are gone (or by now a new
            // app's of the same name) and hold that new app up while waiting for it.
            return Ok(Action::await_change());
        }
        finalizer(&api, names::FINALIZER, app.clone(), |event| async {
            match event {
                Finalizer::Apply(app) => apply(app, ctx.clone()).await,
                Finalizer::Cleanup(app) => cleanup(app, ctx.clone()).await,
            }
        })
        .await
        .map_err(|error| Error::Finalizer(Box::new(error)))
    };
    let result = match tokio::time::timeout(PASS_TIMEOUT, guarded(pass)).await {
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
        Err(error) if error.is_refusal() => {
            // A pass of `apply` said so in the status it wrote; a deletion's is said here.
            if error.is_cleanup()
                && let Err(failed) = report_refusal(&app, &ctx, &error).await
            {
                warn!(app = %app.name_any(), error = %failed, "cannot say in status what was refused");
            }
            if error.is_permanent() {
                // Retrying cannot help: wait for the spec to change.
                Ok(Action::await_change())
            } else {
                Err(error)
            }
        }
        Err(error @ Error::Panicked(_)) => {
            let message = error.to_string();
            warn!(app = %app.name_any(), namespace = %namespace, "{message}");
            publish(
                &ctx,
                &app,
                EventType::Warning,
                "PassPanicked",
                "Reconcile",
                &message,
            )
            .await;
            Err(error)
        }
        Err(error) => Err(error),
    }
}

/// Runs one pass. A panic in it (a bug that some input reached) fails this pass alone, as
/// an error retried with backoff and reported on the app, instead of ending the process and
/// with it every other app's reconciliation: the reconciler serves every tenant, and one
/// tenant's objects must never stop the others'. (The release build unwinds for this.)
async fn guarded<T>(pass: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
    match AssertUnwindSafe(pass).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => Err(Error::Panicked(panic_message(panic.as_ref()))),
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(message) = panic.downcast_ref::<&str>() {
        (*message).to_string()
    } else if let Some(message) = panic.downcast_ref::<String>() {
        message.clone()
    } else {
        "no message".to_string()
    }
}

/// Whether the API server still holds this very app (a fresh read: the store may lag).
async fn still_there(api: &Api<HelloStateful>, app: &HelloStateful) -> Result<bool, Error> {
    let fresh = api.get_opt(&app.name_any()).await?;
    Ok(fresh.is_some_and(|fresh| fresh.metadata.uid == app.metadata.uid))
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
    // A wait (deletion waiting for pods or its Jobs) is looked at again within half a
    // minute: it ends by itself, and no pass sits waiting for it in place.
    let longest = if error.is_waiting() { 30 } else { 300 };
    let delay = Duration::from_secs(2u64.saturating_pow(attempt.min(9)).min(longest));
    if error.is_waiting() {
        info!(app = %app.name_any(), %error, ?delay, "waiting; looking again");
    } else {
        warn!(app = %app.name_any(), %error, ?delay, "reconcile failed; retrying");
    }
    Action::requeue(delay)
}

/// Records that the API server refused a write of a deletion.
async fn report_refusal(app: &HelloStateful, ctx: &Context, error: &Error) -> Result<(), Error> {
    let old = app.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let message = record::refusal_message(error);
    let mut conditions = Conditions::new(&mut status.conditions, app.metadata.generation);
    let changed = conditions.set(conditions::READY, false, "ChildRefused", &message);
    if changed {
        publish(
            ctx,
            app,
            EventType::Warning,
            "ChildRefused",
            "Delete",
            &message,
        )
        .await;
    }
    let written = write_status(ctx, app, &old, status).await;
    ctx.remember(app, written)
}

/// Deletion: stop the app and everything that reads or writes its volumes, wipe its live
/// data (so that nothing of it survives for the next app of this name), delete its backups
/// if asked, then release what owner references cannot: the cluster-scoped volumes. Backups
/// stay unless the app carries the delete-backups annotation. No pass waits in place: what
/// deletion waits for is said in status and an event, and the app is looked at again soon.
async fn cleanup(app: Arc<HelloStateful>, ctx: Arc<Context>) -> Result<Action, Error> {
    let app_ref = AppRef::new(&app)?;
    match delete_app(&ctx, &app_ref).await {
        Err(Error::Waiting(what)) => Err(deletion_waits(&ctx, &app, what).await),
        Err(error) => Err(error),
        Ok(note) => {
            info!(app = %app_ref.name, namespace = %app_ref.namespace, "{note}");
            publish(&ctx, &app, EventType::Normal, "Deleted", "Delete", &note).await;
            ctx.forget(&app_ref);
            Ok(Action::await_change())
        }
    }
}

/// One pass of a deletion: what it sees, the step `deletion::decide` takes from there, and
/// that step's writes. Returns what was done, or `Error::Waiting` with what it waits for.
/// Every read is fresh (not from the watch caches): a write of deletion must never rest on
/// a stale view of what still runs.
async fn delete_app(ctx: &Context, app_ref: &AppRef<'_>) -> Result<String, Error> {
    let location = location::resolve(
        &app_ref.app.spec,
        &ctx.settings.backup_roots,
        &ctx.settings.object_store_endpoints,
    )
    .unwrap_or_else(|_| BackupLocation::NodeRoot(String::new()));
    let seen = observe_deletion(ctx, app_ref, &location).await?;
    let plan = deletion::decide(&seen);
    for write in &plan.writes {
        act_deletion(ctx, app_ref, &location, write).await?;
    }
    for (reason, message) in &plan.warnings {
        publish(
            ctx,
            app_ref.app,
            EventType::Warning,
            reason,
            "Delete",
            message,
        )
        .await;
    }
    match plan.outcome {
        deletion::Outcome::Waiting(what) => Err(Error::Waiting(what)),
        deletion::Outcome::Done(note) => Ok(note),
    }
}

/// Says in status (condition Ready, reason `Deleting`) and in an event what deletion waits
/// for, when that changed; returns the error that has the app looked at again.
async fn deletion_waits(ctx: &Context, app: &HelloStateful, what: String) -> Error {
    let message = format!("deletion waits for {what}");
    let old = app.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let mut conditions = Conditions::new(&mut status.conditions, app.metadata.generation);
    if conditions.set(conditions::READY, false, "Deleting", &message) {
        publish(ctx, app, EventType::Normal, "Deleting", "Delete", &message).await;
        if let Err(error) = write_status(ctx, app, &old, status).await {
            warn!(app = %app.name_any(), %error, "cannot say what deletion waits for in status");
        }
    }
    Error::Waiting(message)
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

/// What a deletion's pass sees. Only what the app controls counts (look-alikes are not its),
/// and any pod of its labels that mounts its volumes, whoever controls it.
async fn observe_deletion(
    ctx: &Context,
    app: &AppRef<'_>,
    location: &BackupLocation,
) -> Result<deletion::Observed, Error> {
    let owned = |meta: &ObjectMeta| kept::controller_uid(meta) == Some(app.uid.as_str());
    let statefulset = Api::<StatefulSet>::namespaced(ctx.client.clone(), &app.namespace)
        .get_opt(&names::statefulset(&app.name))
        .await?
        .filter(|sts| owned(&sts.metadata));
    let schedule = Api::<CronJob>::namespaced(ctx.client.clone(), &app.namespace)
        .get_opt(&names::cronjob(&app.name))
        .await?
        .filter(|cronjob| owned(&cronjob.metadata));
    let child = |meta: &ObjectMeta| deletion::Child {
        name: meta.name.clone().unwrap_or_default(),
        deleting: meta.deletion_timestamp.is_some(),
    };
    let schedule_uid = schedule.as_ref().and_then(|c| c.metadata.uid.clone());
    let wipe_job = names::wipe_job(&app.name, &app.uid);
    let purge_job = names::purge_job(&app.name, &app.uid);
    let selector = format!(
        "app.kubernetes.io/instance={},app.kubernetes.io/managed-by={}",
        app.name,
        names::FIELD_MANAGER
    );
    let job_api = Api::<Job>::namespaced(ctx.client.clone(), &app.namespace);
    let app_jobs: Vec<Job> = job_api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter(|job| {
            is_apps_job(&job.metadata, &app.uid, schedule_uid.as_deref())
                && job.metadata.name.as_ref() != Some(&wipe_job)
                && job.metadata.name.as_ref() != Some(&purge_job)
        })
        .collect();
    let running_jobs = app_jobs
        .iter()
        .filter(|job| jobs::state(job) == JobState::Running)
        .map(|job| deletion::RunningJob {
            name: job.name_any(),
            stopping: job.spec.as_ref().and_then(|s| s.active_deadline_seconds) == Some(1),
        })
        .collect();
    let (wipe, wipe_uid) = cleanup_job(&job_api, &wipe_job, app).await?;
    let purge_found = match app.app.annotations().get(names::DELETE_BACKUPS) {
        Some(asked) if asked == "true" => {
            Some(observe_purge(ctx, app, location, &job_api, purge_job).await?)
        }
        _ => None,
    };
    // The pods themselves: a Job failed or a StatefulSet deleted may still have pods
    // stopping, and those may still write. So may a pod whose Job or StatefulSet was
    // deleted by hand (orphaned, or not yet collected): any pod that mounts the app's
    // volumes counts, but the wipe's and the purge's own, which their steps wait for.
    let writers: Vec<&str> = statefulset
        .iter()
        .map(|sts| &sts.metadata)
        .chain(app_jobs.iter().map(|job| &job.metadata))
        .filter_map(|meta| meta.uid.as_deref())
        .collect();
    let cleaners = [
        wipe_uid.as_deref(),
        purge_found.as_ref().and_then(|(_, uid)| uid.as_deref()),
    ];
    let backup_target = match location {
        BackupLocation::Claim(claim) => Some(claim.as_str()),
        _ => None,
    };
    let live_pods = Api::<Pod>::namespaced(ctx.client.clone(), &app.namespace)
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .iter()
        .filter(|pod| {
            let owner = kept::controller_uid(&pod.metadata);
            let ours = owner.is_some_and(|owner| writers.contains(&owner))
                || mounts_the_apps_volumes(pod, app, backup_target);
            ours && (owner.is_none() || !cleaners.contains(&owner))
                && !matches!(
                    pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                )
        })
        .map(ResourceExt::name_any)
        .collect();
    // A namespace being deleted accepts no new Job: the data then stays on the node, under
    // a directory named by this app's uid that no later app is given.
    let namespace_terminating = Api::<Namespace>::all(ctx.client.clone())
        .get_opt(&app.namespace)
        .await?
        .is_none_or(|ns| {
            ns.metadata.deletion_timestamp.is_some()
                || ns.status.and_then(|s| s.phase).as_deref() == Some("Terminating")
        });
    let volumes = app_volumes(ctx, app)
        .await?
        .iter()
        .map(|volume| {
            let node = children::volume_node(volume);
            deletion::DataVolume {
                name: volume.name_any(),
                deleting: volume.metadata.deletion_timestamp.is_some(),
                path: volume
                    .spec
                    .as_ref()
                    .and_then(|s| Some(s.host_path.as_ref()?.path.clone())),
                ordinal: volume
                    .spec
                    .as_ref()
                    .and_then(|s| s.claim_ref.as_ref()?.name.as_deref())
                    .and_then(|claim| names::claim_ordinal(&app.name, claim)),
                // A node gone for good is one whose object is deleted.
                node_gone: node.as_ref().is_some_and(|n| ctx.cache.node(n).is_none()),
                node,
            }
        })
        .collect();
    Ok(deletion::Observed {
        namespace: app.namespace.clone(),
        statefulset: statefulset.as_ref().map(|sts| child(&sts.metadata)),
        schedule: schedule.as_ref().map(|cronjob| child(&cronjob.metadata)),
        running_jobs,
        live_pods,
        namespace_terminating,
        static_volumes: app.app.spec.storage_class().is_none(),
        volumes,
        replicas: app.app.spec.replicas,
        wipe,
        wipe_job,
        purge: purge_found.map(|(purge, _)| purge),
        backups_place: describe_location(app, location),
    })
}

/// Whether `pod` mounts a volume of the app: a data claim, its backup claim, or the claim
/// its backups go to (`backup_target`).
fn mounts_the_apps_volumes(pod: &Pod, app: &AppRef<'_>, backup_target: Option<&str>) -> bool {
    let backup_claim = names::backup_claim(&app.name);
    pod.spec
        .iter()
        .flat_map(|spec| spec.volumes.iter().flatten())
        .filter_map(|volume| volume.persistent_volume_claim.as_ref())
        .any(|source| {
            let claim = source.claim_name.as_str();
            names::claim_ordinal(&app.name, claim).is_some()
                || claim == backup_claim
                || Some(claim) == backup_target
        })
}

/// The state of a wipe or purge Job, and its uid if it is the app's. A Job of that name
/// that the app does not control (a tenant's look-alike, made to have its volumes released
/// unwiped) is never taken for it.
async fn cleanup_job(
    jobs: &Api<Job>,
    name: &str,
    app: &AppRef<'_>,
) -> Result<(deletion::Cleanup, Option<String>), Error> {
    Ok(match jobs.get_opt(name).await? {
        None => (deletion::Cleanup::Absent, None),
        Some(job) if kept::controller_uid(&job.metadata) != Some(app.uid.as_str()) => {
            (deletion::Cleanup::NotOurs, None)
        }
        Some(job) => {
            let state = match jobs::state(&job) {
                JobState::Running => deletion::Cleanup::Running,
                ended => deletion::Cleanup::Ended(ended),
            };
            (state, job.metadata.uid)
        }
    })
}

/// What a deletion's pass sees of the backups it is to delete: whether a Job can reach
/// them, its purge Job (and that Job's uid), and what holds them that goes once they are
/// deleted.
async fn observe_purge(
    ctx: &Context,
    app: &AppRef<'_>,
    location: &BackupLocation,
    jobs: &Api<Job>,
    job_name: String,
) -> Result<(deletion::Purge, Option<String>), Error> {
    let claims = Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), &app.namespace);
    let reachable = match location {
        BackupLocation::NodeRoot(_) => claims.get_opt(&names::backup_claim(&app.name)).await?,
        BackupLocation::Claim(claim) => claims.get_opt(claim).await?,
        BackupLocation::ObjectStore(_) => None,
    };
    let (job, job_uid) = cleanup_job(jobs, &job_name, app).await?;
    let mut purge = deletion::Purge {
        reachable: reachable.is_some() || matches!(location, BackupLocation::ObjectStore(_)),
        job,
        job_name,
        claim: None,
        volumes: Vec::new(),
        gone_node: None,
    };
    if let BackupLocation::NodeRoot(root) = location {
        purge.claim = reachable
            .filter(|claim| claim.metadata.deletion_timestamp.is_none())
            .map(|claim| claim.name_any());
        // Only the volume of the directory emptied: those of roots the app used before
        // still hold their snapshots, and record whose they are.
        let path = names::backup_host_path(root, &app.namespace, &app.name);
        let mut labels = names::labels(&app.name, Component::Backup);
        labels.insert(names::NAMESPACE_LABEL.to_string(), app.namespace.clone());
        let selector = labels
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect::<Vec<_>>()
            .join(",");
        let of_this_root: Vec<PersistentVolume> = Api::<PersistentVolume>::all(ctx.client.clone())
            .list(&ListParams::default().labels(&selector))
            .await?
            .into_iter()
            .filter(|found| {
                let its_path = found.spec.as_ref().and_then(|spec| spec.host_path.as_ref());
                its_path.is_some_and(|host| host.path == path)
            })
            .collect();
        purge.gone_node = of_this_root
            .iter()
            .filter_map(children::volume_node)
            .find(|node| ctx.cache.node(node).is_none());
        purge.volumes = of_this_root
            .iter()
            .filter(|found| found.metadata.deletion_timestamp.is_none())
            .map(ResourceExt::name_any)
            .collect();
    } else if let Some(volume) = reachable
        .as_ref()
        .and_then(|claim| claim.spec.as_ref()?.volume_name.clone())
    {
        // The app's own claim (`backup.target.persistentVolumeClaim`): on a node-local
        // volume, the purge can run only on that volume's node.
        purge.gone_node = Api::<PersistentVolume>::all(ctx.client.clone())
            .get_opt(&volume)
            .await?
            .as_ref()
            .and_then(children::volume_node)
            .filter(|node| ctx.cache.node(node).is_none());
    }
    Ok((purge, job_uid))
}

/// Makes one write of a deletion's plan. A delete that finds nothing to delete is done.
async fn act_deletion(
    ctx: &Context,
    app: &AppRef<'_>,
    location: &BackupLocation,
    write: &deletion::Write,
) -> Result<(), Error> {
    use deletion::Write;
    let deleted = match write {
        Write::DeleteStatefulSet => in_namespace::<StatefulSet>(ctx, app)
            .delete(&names::statefulset(&app.name), &DeleteParams::foreground())
            .await
            .map(drop),
        Write::DeleteSchedule => in_namespace::<CronJob>(ctx, app)
            .delete(&names::cronjob(&app.name), &DeleteParams::foreground())
            .await
            .map(drop),
        Write::StopJob(job_name) => {
            // As for a stuck Job: a deadline already past makes the Job controller fail
            // it and remove its pods; a backup cut short leaves only its temporary
            // directory, never a snapshot.
            let patch = json!({
                "metadata": {"annotations": {names::STOPPED_BECAUSE: "the app is being deleted"}},
                "spec": {"activeDeadlineSeconds": 1},
            });
            in_namespace::<Job>(ctx, app)
                .patch(
                    job_name,
                    &PatchParams::default(),
                    &Patch::Merge(&ctx.fence.merge_patch(patch)),
                )
                .await
                .map(drop)
        }
        Write::MakeWipe { replicas } => {
            let task = MoverTask::Wipe {
                replicas: *replicas,
            };
            let name = names::wipe_job(&app.name, &app.uid);
            let placeholder = BackupLocation::NodeRoot(String::new());
            return make_cleanup_job(ctx, app, &name, &task, &placeholder).await;
        }
        Write::MakePurge => {
            let name = names::purge_job(&app.name, &app.uid);
            return make_cleanup_job(ctx, app, &name, &MoverTask::Purge, location).await;
        }
        Write::DeleteBackupClaim(claim) => in_namespace::<PersistentVolumeClaim>(ctx, app)
            .delete(claim, &DeleteParams::default())
            .await
            .map(drop),
        Write::DeleteBackupVolume(volume) | Write::ReleaseVolume(volume) => {
            Api::<PersistentVolume>::all(ctx.client.clone())
                .delete(volume, &DeleteParams::default())
                .await
                .map(drop)
        }
    };
    match deleted {
        Ok(()) => {
            ctx.metrics.writes.inc();
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

fn in_namespace<K>(ctx: &Context, app: &AppRef<'_>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    Api::namespaced(ctx.client.clone(), &app.namespace)
}

/// Makes a wipe or purge Job of an app being deleted; one already made (409) is left.
async fn make_cleanup_job(
    ctx: &Context,
    app: &AppRef<'_>,
    job_name: &str,
    task: &MoverTask,
    location: &BackupLocation,
) -> Result<(), Error> {
    let job = children::mover_job(app, job_name, task, "deleted", location, &ctx.settings)?;
    match Api::<Job>::namespaced(ctx.client.clone(), &app.namespace)
        .create(&PostParams::default(), &ctx.fence.mark(&job))
        .await
    {
        Ok(_) => {
            ctx.metrics.writes.inc();
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(error.into()),
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
/// The state of one pass: the status being built and the events it will publish.
struct Pass<'a> {
    ctx: &'a Context,
    app: &'a AppRef<'a>,
    /// The status, events and tallies decided so far.
    record: Record,
    /// Where backups go, once the spec's choice has been checked against the settings.
    location: Option<BackupLocation>,
    /// The uids of the app's mover Jobs, by name, once read.
    job_uids: HashMap<String, String>,
}

impl Pass<'_> {
    fn note(
        &mut self,
        kind: EventType,
        reason: &'static str,
        action: &'static str,
        message: String,
    ) {
        self.record.note(kind, reason, action, message);
    }

    fn conditions(&mut self) -> Conditions<'_> {
        self.record.conditions()
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
    /// a hand edit, a new spec) a fresh read of the whole object decides. With no cached
    /// copy, `apply_to` reads it.
    async fn apply_unless_in_line<K>(&self, desired: &K, cached: Option<u64>) -> Result<(), Error>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Serialize
            + DeserializeOwned
            + Clone
            + std::fmt::Debug,
    {
        let name = desired.meta().name.clone().unwrap_or_default();
        let key = in_line_key::<K>(&self.app.namespace, &name);
        let wanted = kept::applied_print(desired);
        let remember = |object: &K| {
            if let Ok(mut in_line) = self.ctx.in_line.lock() {
                in_line.insert(key.clone(), (wanted, kept::version_print(object.meta())));
            }
        };
        let api = self.api::<K>();
        let mut found = None;
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
            found = api.get_opt(&name).await?;
            if let Some(full) = &found
                && holds(full, desired)?
            {
                remember(full);
                return Ok(());
            }
        }
        if let Some(written) = apply_to(&api, desired, found.as_ref(), self.ctx).await? {
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
        let job = self.ctx.fence.mark(&job);
        match self.api::<Job>().create(&PostParams::default(), &job).await {
            Ok(_) => Ok(()),
            // Made by an earlier pass whose status write was lost, or a look-alike's name.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let existing = self.api::<Job>().get_opt(name).await?;
                jobs::made_already(existing.as_ref(), &self.app.uid, name, &self.app.namespace)
            }
            Err(error) => Err(error.into()),
        }
    }

    /// The pods of the app's mover Job `job`: only those the Job controls. Anyone may label
    /// a pod with a Job's name and have it end with any message; a mover's message decides
    /// what status says.
    async fn job_pods(&self, job: &str) -> Result<Vec<Pod>, Error> {
        let Some(uid) = self.job_uids.get(job) else {
            return Ok(Vec::new());
        };
        let selector = format!("batch.kubernetes.io/job-name={job}");
        let pods = self
            .api::<Pod>()
            .list(&ListParams::default().labels(&selector))
            .await?;
        Ok(pods
            .items
            .into_iter()
            .filter(|pod| kept::controller_uid(&pod.metadata) == Some(uid.as_str()))
            .collect())
    }
}

/// The key of a StatefulSet or CronJob in `Context::in_line`.
fn in_line_key<K: Resource<DynamicType = ()>>(namespace: &str, name: &str) -> String {
    format!("{}/{namespace}/{name}", K::kind(&()))
}

/// Applies `desired` by server-side apply unless `observed` already has every field of it;
/// returns the object as the API server wrote it, if it was written. With nothing observed
/// (no cached copy) it reads the object first: one made a moment ago may not be cached yet,
/// its watch event still on its way, and is not written again.
async fn apply_to<K>(
    api: &Api<K>,
    desired: &K,
    observed: Option<&K>,
    ctx: &Context,
) -> Result<Option<K>, Error>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + std::fmt::Debug,
{
    let name = desired.meta().name.clone().unwrap_or_default();
    let read;
    let observed = match observed {
        Some(observed) => Some(observed),
        None => {
            read = api.get_opt(&name).await?;
            read.as_ref()
        }
    };
    if let Some(observed) = observed
        && holds(observed, desired)?
    {
        return Ok(None);
    }
    info!(child = %children::describe(desired), "applying");
    let written = api
        .patch(
            &name,
            &PatchParams::apply(names::FIELD_MANAGER).force(),
            &Patch::Apply(ctx.fence.mark(desired)),
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

async fn apply(app: Arc<HelloStateful>, ctx: Arc<Context>) -> Result<Action, Error> {
    let app = current(&app, &ctx).await?;
    let app_ref = AppRef::new(&app)?;
    let old = app.status.clone().unwrap_or_default();
    let mut pass = Pass {
        ctx: &ctx,
        app: &app_ref,
        record: Record::new(old.clone(), app.metadata.generation),
        location: None,
        job_uids: HashMap::new(),
    };
    pass.record.status.observed_generation = app.metadata.generation;
    let action = converge(&mut pass).await;
    // The status written is the record as it stood before the refused write (a decision's
    // record is kept only once its writes are made), and the next pass carries on from it:
    // soon, for a refusal that can pass (a quota, a webhook, a look-alike deleted); on a
    // change of the spec, for an invalid object.
    if let Err(error) = &action
        && error.is_refusal()
    {
        pass.record.refused(error);
    }
    let Record {
        status,
        notes,
        tallies,
        ..
    } = pass.record;
    let label = metrics::AppLabel {
        namespace: app_ref.namespace.clone(),
        name: app_ref.name.clone(),
    };
    ctx.metrics.observe(&label, &status);
    // Status first: an event must never claim what status does not yet say, and an action
    // is counted once its end is on record.
    let written = write_status(&ctx, &app, &old, status).await;
    ctx.remember(&app, written)?;
    let metrics = &ctx.metrics;
    for tally in tallies {
        match tally {
            Tally::BackupSucceeded { bytes } => {
                Metrics::finished(&metrics.backups, &label, true);
                metrics.backup_bytes.inc_by(bytes);
            }
            Tally::BackupFailed => Metrics::finished(&metrics.backups, &label, false),
            Tally::RestoreSucceeded => Metrics::finished(&metrics.restores, &label, true),
            Tally::RestoreFailed => Metrics::finished(&metrics.restores, &label, false),
        }
    }
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

/// The app to build this pass on: the cached copy, unless it may predate this replica's own
/// last status write (`known`). At rest the versions agree and nothing is read.
async fn current(app: &HelloStateful, ctx: &Context) -> Result<HelloStateful, Error> {
    match ctx.known.basis(app) {
        Basis::Cached => Ok(app.clone()),
        Basis::Written(written) => Ok(written.as_ref().clone()),
        Basis::Read => {
            let api = Api::<HelloStateful>::namespaced(
                ctx.client.clone(),
                &app.namespace().unwrap_or_default(),
            );
            Ok(api.get(&app.name_any()).await?)
        }
    }
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
    if let Err(refusal) = tenancy::check(spec, &pass.ctx.settings.allowed) {
        let message = refusal.to_string();
        if pass
            .conditions()
            .set(conditions::READY, false, refusal.reason(), &message)
        {
            pass.note(EventType::Warning, refusal.reason(), "Validate", message);
        }
        return Ok(Action::await_change());
    }

    // A StatefulSet of this name that another object controls: an earlier app of this name
    // still being deleted (its pods may still write its volumes), or someone else's. Its
    // initial-restore record and its pods are not this app's, so nothing starts until it
    // is gone.
    let name = names::statefulset(&app.name);
    if let Some(other) = pass.ctx.cache.statefulset_named(&app.namespace, &name)
        && !other.is_controlled_by(&app.uid)
    {
        let message = format!(
            "StatefulSet {name} is not this app's ({}): the app starts once it is gone",
            if other.deleting {
                "an earlier app's, being deleted"
            } else {
                "delete it if nothing needs it"
            }
        );
        return waiting(pass, "StatefulSetTaken", message);
    }

    // Storage: static volumes pinned to the node that holds the data, then the claims.
    let namespace_uid = match &location {
        BackupLocation::NodeRoot(_) => Some(namespace_uid(pass).await?),
        _ => None,
    };
    let observed = storage::Observed::from_cache(
        &pass.ctx.cache,
        app,
        &location,
        pass.record.status.node_name.clone(),
        namespace_uid,
    );
    if let Some(action) = make_storage(
        pass,
        storage::plan(app, &location, &observed, &pass.ctx.settings.mover_image)?,
    )
    .await?
    {
        return Ok(action);
    }
    pass.record.status.backend_volumes = app.claims();

    let cache = &pass.ctx.cache;
    let name = names::statefulset(&app.name);
    let service = cache.service(&app.namespace, &name);
    let statefulset = cache.statefulset(&app.namespace, &name, &app.uid);
    let jobs = mover_jobs(pass, statefulset.is_some()).await?;
    pass.job_uids = jobs
        .iter()
        .filter_map(|job| Some((job.name_any(), job.uid()?)))
        .collect();
    pass.apply(&children::service(app)?, service.as_deref())
        .await?;
    stop_stuck_jobs(pass, &jobs).await?;
    let stops = stop_for_backups(pass, &jobs).await?;
    run_parts(pass, &jobs, stops.stopped).await?;

    let initialized = statefulset.is_some() || pass.conditions().is_true(conditions::INITIALIZED);
    let mut initial_outcome = statefulset
        .as_ref()
        .and_then(|sts| sts.view.initial_restore.as_deref())
        .and_then(initial::Outcome::parse);
    if !initialized && initial::wanted(app, &jobs, &pass.record.status) {
        match restore_first(pass, &jobs).await? {
            initial::Step::Wait(action) => return Ok(action),
            initial::Step::Done(outcome) => initial_outcome = Some(outcome),
        }
    }
    if !initialized && initial_outcome.is_none() {
        initial::turned_off(&mut pass.record);
    }
    let (replicas, restoring) = restore_on_demand(pass, &jobs, initialized).await?;
    let replicas = if stops.holding.is_some() { 0 } else { replicas };
    // Also while a restore is left unfinished (the app held stopped on volumes that may hold
    // a mix): a backup then would seal that mix, and its swap decides the volumes' owners.
    let restore_unfinished = restoring || restores::under_way(&jobs, &pass.record.status);

    let claim_templates = statefulset
        .as_ref()
        .and_then(|sts| sts.view.claim_templates());
    // The volumes the StatefulSet was made with: its claim templates are immutable.
    let static_volumes = match &claim_templates {
        Some(templates) => templates
            .first()
            .and_then(|claim| claim.spec.as_ref())
            .and_then(|claim| claim.storage_class_name.as_deref())
            .is_none_or(str::is_empty),
        None => spec.storage_class().is_none(),
    };
    let prepared = prepare::plan(
        app,
        prepare::Owner::wanted(spec, static_volumes),
        spec.replicas,
        statefulset
            .as_ref()
            .and_then(|sts| sts.view.prepared.as_deref()),
        restore_unfinished,
        &jobs,
    );
    if let Some((job_name, task)) = &prepared.start {
        pass.start_job(job_name, task, prepare::ACTION).await?;
    }
    let replicas = prepared
        .runs_at_most
        .map_or(replicas, |most| replicas.min(most));
    let record = initial_outcome.as_ref().map(initial::Outcome::record);
    let pinned = storage::pods_node(
        app,
        &location,
        pass.record.status.node_name.as_deref(),
        statefulset
            .as_ref()
            .map(|sts| sts.view.pods_node.as_deref()),
    );
    let mut desired = children::statefulset(
        app,
        replicas,
        claim_templates.as_deref(),
        record.as_deref(),
        pinned.as_deref(),
    )?;
    if let Some(prepared) = &prepared.record {
        desired
            .annotations_mut()
            .insert(names::PREPARED.to_string(), prepared.clone());
    }
    pass.apply_unless_in_line(&desired, statefulset.as_ref().map(|s| s.view.version))
        .await?;
    // The volumes it makes, from the templates it was made with (said in the pass that
    // makes it, so that a new app's status is written once, not again a pass later).
    if let Some(templates) = desired
        .spec
        .as_ref()
        .and_then(|spec| spec.volume_claim_templates.as_deref())
    {
        let claims = cache.data_claims(&app.namespace, &app.name);
        storage::report_drift(app, templates, claims, &mut pass.record);
    }
    // Their outcome is in the StatefulSet now.
    end_jobs(pass, prepared.end, "it ends at its TTL").await;
    let recorded = statefulset
        .as_ref()
        .is_some_and(|sts| sts.view.initial_restore.is_some());
    if recorded && spec.restore_from.is_some() {
        release_source_claim(pass, &jobs).await?;
    }
    if let Some(outcome) = &initial_outcome
        && !restoring
    {
        initial::finish(app, outcome, &mut pass.record);
    }
    if !initialized {
        pass.conditions().set(
            conditions::INITIALIZED,
            true,
            "Created",
            "the app's volumes and StatefulSet exist",
        );
    }

    back_up(pass, &jobs, restore_unfinished).await?;
    report_overdue(pass);

    let observed = progress::Observed {
        ready: statefulset
            .as_ref()
            .map_or(0, |sts| sts.view.ready_replicas),
        jobs: &jobs,
        restoring,
        stopped_for_backup: stops.message.as_deref(),
        preparing_volumes: prepared.message.as_deref(),
        wanted: spec.replicas,
        asked: replicas,
    };
    Ok(progress::report(
        &mut pass.record.status,
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
        .record
        .status
        .restore_request
        .as_ref()
        .is_some_and(|request| !request.phase.is_final());
    let new_request = matches!(
        record::pending_token(
            app.app,
            names::RESTORE_REQUESTED,
            pass.record.status.restore_request.as_ref()
        ),
        Ok(Some(_))
    );
    let may_restore = first_restore
        || new_request
        || restore_requested
        || pass.conditions().is_true(conditions::RESTORING);
    let cache = &pass.ctx.cache;
    if !may_restore {
        return Ok(cache.jobs(&app.namespace, &app.name, &app.uid));
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
    let schedule = cache.schedule_uid(&app.namespace, &app.name, &app.uid);
    Ok(jobs
        .items
        .into_iter()
        .filter(|job| is_apps_job(&job.metadata, &app.uid, schedule.as_deref()))
        .map(Arc::new)
        .collect())
}

fn no_node(pass: &mut Pass<'_>, message: String) -> Result<Action, Error> {
    pass.conditions()
        .set(conditions::READY, false, "NoNode", &message);
    Ok(Action::requeue(WAIT * 5))
}

/// The uid of the app's namespace, recorded on its node-directory backup volume.
async fn namespace_uid(pass: &Pass<'_>) -> Result<String, Error> {
    let namespace = &pass.app.namespace;
    if let Some(uid) = pass.ctx.cache.namespace_uid(namespace) {
        return Ok(uid);
    }
    // A namespace made a moment ago may not be cached yet.
    let fresh = Api::<Namespace>::all(pass.ctx.client.clone())
        .get(namespace)
        .await?;
    Ok(fresh.uid().unwrap_or_default())
}

/// Performs a storage plan's writes, in order, and reports its verdict. Returns an action
/// when the app must wait or is refused.
async fn make_storage(pass: &mut Pass<'_>, plan: storage::Plan) -> Result<Option<Action>, Error> {
    let volume_api = Api::<PersistentVolume>::all(pass.ctx.client.clone());
    let claim_api = pass.api::<PersistentVolumeClaim>();
    for write in &plan.writes {
        match write {
            storage::Write::Volume(volume) => {
                apply_to(&volume_api, volume.as_ref(), None, pass.ctx).await?;
            }
            storage::Write::Claim(claim) => pass.apply(claim.as_ref(), None).await?,
            storage::Write::DeleteClaim(name) => {
                claim_api.delete(name, &DeleteParams::default()).await?;
                pass.ctx.metrics.writes.inc();
            }
            storage::Write::Reopen(name) => {
                let patch = json!({"spec": {"claimRef": {"uid": null, "resourceVersion": null}}});
                volume_api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                pass.ctx.metrics.writes.inc();
            }
        }
    }
    match plan.node_name {
        storage::NodeName::Keep => {}
        storage::NodeName::Set(node) => pass.record.status.node_name = Some(node),
        storage::NodeName::Clear => pass.record.status.node_name = None,
    }
    match plan.verdict {
        storage::Verdict::Ready => Ok(None),
        storage::Verdict::Wait { reason, message } => {
            if matches!(reason, "BackupRootChanging" | "BackupClaimReleasing") {
                end_finished_jobs(pass).await;
            }
            waiting(pass, reason, message).map(Some)
        }
        storage::Verdict::NoNode(message) => no_node(pass, message).map(Some),
        storage::Verdict::Refused { reason, message } => {
            if pass
                .conditions()
                .set(conditions::READY, false, reason, &message)
            {
                pass.note(EventType::Warning, reason, "Validate", message);
            }
            Ok(Some(Action::requeue(RESYNC)))
        }
    }
}

/// Stops every mover Job whose pod cannot start, so that nothing waits on it forever (a
/// restore holding the app at 0 replicas, backups piling up): the Job fails with the pod's
/// own reason, which the next pass reports as the request's outcome.
async fn stop_stuck_jobs(pass: &mut Pass<'_>, jobs: &[Arc<Job>]) -> Result<(), Error> {
    let now = k8s_openapi::jiff::Timestamp::now();
    let patience = k8s_openapi::jiff::SignedDuration::try_from(pass.ctx.start_patience)
        .unwrap_or(k8s_openapi::jiff::SignedDuration::from_secs(60));
    let due = checks_due(&pass.ctx.stuck_checked, jobs, |job| {
        jobs::older_than(job, now, patience)
    });
    let (stuck, _) = decide(pass, |reads, _| {
        let nodes = |name: &str| pass.ctx.cache.node(name);
        Ok(reads::decided(jobs::stuck_ones(
            &due, reads, &nodes, now, patience,
        )))
    })
    .await?;
    for (name, reason) in stuck {
        // A deadline already past makes the Job controller fail the Job and remove its
        // pods; the annotation keeps the real reason for status.
        let patch = json!({
            "metadata": {"annotations": {names::STOPPED_BECAUSE: reason}},
            "spec": {"activeDeadlineSeconds": 1},
        });
        pass.api::<Job>()
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&pass.ctx.fence.merge_patch(patch)),
            )
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

/// The Jobs among `jobs` whose pods are due to be read (see `STUCK_CHECK_EVERY`), each of
/// which `read` says will be read now marked so in `checked`; what is long gone is forgotten.
fn checks_due(
    checked: &Mutex<HashMap<String, Instant>>,
    jobs: &[Arc<Job>],
    read: impl Fn(&Job) -> bool,
) -> Vec<Arc<Job>> {
    let Ok(mut checked) = checked.lock() else {
        return jobs.to_vec();
    };
    let now = Instant::now();
    checked.retain(|_, at| now.duration_since(*at) < STUCK_CHECK_EVERY * 40);
    jobs.iter()
        .filter(|job| {
            let Some(uid) = job.uid() else {
                return true;
            };
            if checked
                .get(&uid)
                .is_some_and(|at| now.duration_since(*at) < STUCK_CHECK_EVERY)
            {
                return false;
            }
            if read(job) {
                checked.insert(uid, now);
            }
            true
        })
        .cloned()
        .collect()
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

/// The restore before the app's first start (see `initial`): decided, with the reads it
/// asks for, then its Job started.
async fn restore_first(pass: &mut Pass<'_>, jobs: &[Arc<Job>]) -> Result<initial::Step, Error> {
    let app = pass.app;
    let location = pass
        .location
        .clone()
        .ok_or(Error::MissingField("an allowed backup location"))?;
    let (plan, record) = decide(pass, |reads, record| {
        Ok(initial::plan(app, &location, jobs, reads, record))
    })
    .await?;
    if let Some((job_name, task)) = &plan.start {
        pass.start_job(job_name, task, initial::ACTION).await?;
    }
    for (job_name, task) in &plan.swaps {
        pass.start_job(job_name, task, initial::ACTION).await?;
    }
    pass.record = record;
    if plan.release_source {
        release_source_claim(pass, jobs).await?;
    }
    Ok(plan.step)
}

/// Ends the app's finished Jobs while its backup claim is deleted (the spec moved to another
/// root): their pods mount it, and a claim used by any pod, even a completed one, is not
/// deleted until they are, which would otherwise take their TTL (a day). They are ended
/// (`end_jobs`), except the Job of a request whose outcome is not yet recorded.
async fn end_finished_jobs(pass: &mut Pass<'_>) {
    let status = &pass.record.status;
    let unrecorded: Vec<&str> = [&status.backup_request, &status.restore_request]
        .into_iter()
        .flatten()
        .filter(|request| !request.phase.is_final())
        .filter_map(|request| request.job.as_deref())
        .collect();
    let finished: Vec<String> = pass
        .ctx
        .cache
        .jobs(&pass.app.namespace, &pass.app.name, &pass.app.uid)
        .iter()
        .filter(|job| {
            jobs::is_finished_and_kept(job) && !unrecorded.contains(&job.name_any().as_str())
        })
        .map(|job| job.name_any())
        .collect();
    end_jobs(pass, finished, "it holds the backup claim until its TTL").await;
}

/// Sets the TTL of the finished Jobs `names` to zero, so that the TTL controller deletes
/// them and their pods now (the reconciler may patch Jobs, never delete them). Best effort:
/// a refusal is logged, with `consequence`.
async fn end_jobs(pass: &mut Pass<'_>, names: Vec<String>, consequence: &str) {
    let api = pass.api::<Job>();
    let now = pass
        .ctx
        .fence
        .merge_patch(json!({"spec": {"ttlSecondsAfterFinished": 0}}));
    for name in names {
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&now))
            .await
        {
            Ok(_) => {
                pass.ctx.metrics.writes.inc();
            }
            Err(error) => warn!(
                app = %pass.app.name,
                "cannot end the finished Job {name}: {}; {consequence}",
                Error::Kube(error).user_message()
            ),
        }
    }
}

/// Ends the finished Jobs of a restore from another app's backups once their outcome is
/// recorded (on the StatefulSet, or as a reported failure): their pods mount that app's
/// backup claim, and a claim used by any pod, even a completed one, cannot be deleted, so
/// `delete --delete-backups` of that app would hang until their TTL. Their TTL is set to
/// zero (`end_jobs`). Best effort: the app runs whether or not this works.
/// Only backups in a node directory are read through the source's claim: other Jobs stay
/// for their TTL, with their logs, as any restore's.
async fn release_source_claim(pass: &mut Pass<'_>, jobs: &[Arc<Job>]) -> Result<(), Error> {
    if !matches!(pass.location, Some(BackupLocation::NodeRoot(_))) {
        return Ok(());
    }
    let finished = jobs
        .iter()
        .filter(|job| initial::is_attempt(job, &pass.app.uid) && jobs::is_finished_and_kept(job))
        .map(|job| job.name_any())
        .collect();
    end_jobs(
        pass,
        finished,
        "it holds the source app's backup claim until its TTL",
    )
    .await;
    Ok(())
}

/// An on-demand restore (see `restores`): decided, with the reads it asks for, then its Job
/// started. Returns the replicas the app may run, and whether a restore is under way (the
/// app must not run, and backups wait).
async fn restore_on_demand(
    pass: &mut Pass<'_>,
    jobs: &[Arc<Job>],
    initialized: bool,
) -> Result<(i32, bool), Error> {
    let app = pass.app;
    let node_unfit = pods_node_unfit(pass);
    let location = pass
        .location
        .clone()
        .ok_or(Error::MissingField("an allowed backup location"))?;
    let (plan, record) = decide(pass, |reads, record| {
        Ok(restores::on_demand(
            app,
            &location,
            jobs,
            initialized,
            node_unfit.as_deref(),
            reads,
            record,
        ))
    })
    .await?;
    if let Some((job_name, task)) = &plan.start {
        pass.start_job(job_name, task, "requested").await?;
    }
    for (job_name, task) in &plan.swaps {
        pass.start_job(job_name, task, "requested").await?;
    }
    pass.record = record;
    Ok((plan.replicas, plan.in_progress))
}

/// Why the node the app's pods are pinned to (status `nodeName`) takes no pods now, if so.
fn pods_node_unfit(pass: &Pass<'_>) -> Option<String> {
    let name = pass.record.status.node_name.as_deref()?;
    let node = pass.ctx.cache.node(name)?;
    let spec = &pass.app.app.spec;
    let why = placement::why_not(
        &node,
        &spec.node_selector.clone().unwrap_or_default(),
        spec.tolerations.as_deref().unwrap_or_default(),
    )?;
    Some(format!("{name}, {why}"))
}

/// Runs a decision (see `reads`) on a copy of the pass's record, making the reads it asks
/// for and running it again, until it is decided. Returns its plan and the record to keep
/// once the plan's writes are made.
async fn decide<P>(
    pass: &Pass<'_>,
    decision: impl Fn(&Reads, &mut Record) -> Result<Decision<P>, Error>,
) -> Result<(P, Record), Error> {
    let mut reads = Reads::default();
    loop {
        let mut record = pass.record.clone();
        match decision(&reads, &mut record)? {
            Decision::Done(plan) => return Ok((plan, record)),
            Decision::Read(Read::Message(job)) => {
                let message = jobs::termination_message(&pass.job_pods(&job).await?);
                reads.add_message(job, message);
            }
            Decision::Read(Read::JobPods(job)) => {
                let pods = pass.job_pods(&job).await?;
                reads.add_job_pods(job, pods);
            }
            Decision::Read(Read::Refusal(job)) => {
                let refusal = creation_refusal(pass, &job).await?;
                reads.add_refusal(job, refusal);
            }
            Decision::Read(Read::ClaimPhase(name)) => {
                let claim = pass.api::<PersistentVolumeClaim>().get_opt(&name).await?;
                let phase = claim.map(|claim| {
                    let phase = claim.status.and_then(|status| status.phase);
                    phase.unwrap_or_else(|| "Pending".into())
                });
                reads.add_claim_phase(name, phase);
            }
            Decision::Read(Read::JobExists(name)) => {
                let job = pass.api::<Job>().get_opt(&name).await?;
                let own = job.is_some_and(|job| {
                    kept::controller_uid(&job.metadata) == Some(pass.app.uid.as_str())
                });
                reads.add_job_exists(name, own);
            }
            Decision::Read(Read::AppPods) => {
                let selector = names::selector_string(&pass.app.name);
                let pods = pass
                    .api::<Pod>()
                    .list(&ListParams::default().labels(&selector))
                    .await?;
                // Fresh: a mover that writes the volumes starts only once the StatefulSet,
                // as the API server holds it, makes no pod either, and its controller has
                // seen that (else pods deleted by someone else are made again from the spec
                // it knew).
                let statefulset = pass
                    .api::<StatefulSet>()
                    .get_opt(&names::statefulset(&pass.app.name))
                    .await?
                    .filter(|sts| kept::controller_uid(&sts.metadata) == Some(&pass.app.uid));
                let asked = statefulset
                    .as_ref()
                    .and_then(|sts| sts.spec.as_ref()?.replicas)
                    .unwrap_or(0);
                let seen = statefulset.as_ref().is_none_or(|sts| {
                    let observed = sts.status.as_ref().and_then(|s| s.observed_generation);
                    observed.is_some() && observed >= sts.metadata.generation
                });
                reads.add_app_pods(AppPods {
                    pods: pods.items.len(),
                    asked,
                    seen,
                });
            }
        }
    }
}

/// The BackupOverdue condition (an event when it turns True or back) and its metric, from
/// the newest successful backup in status.
fn report_overdue(pass: &mut Pass<'_>) {
    let app = pass.app;
    let utc = |time: &k8s_openapi::jiff::Timestamp| {
        chrono::DateTime::from_timestamp(time.as_second(), time.subsec_nanosecond().unsigned_abs())
    };
    let Some(created) = app
        .app
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| utc(&t.0))
    else {
        return;
    };
    let last_success = pass
        .record
        .status
        .last_backup
        .as_ref()
        .and_then(|backup| chrono::DateTime::parse_from_rfc3339(&backup.time).ok())
        .map(|time| time.with_timezone(&chrono::Utc));
    let label = metrics::AppLabel {
        namespace: app.namespace.clone(),
        name: app.name.clone(),
    };
    let verdict = overdue::check(&app.app.spec, created, last_success, chrono::Utc::now());
    let was_overdue = pass.conditions().is_true(conditions::BACKUP_OVERDUE);
    let (overdue, reason, message) = match verdict {
        overdue::Verdict::Overdue(message) => (true, "BackupOverdue", message),
        overdue::Verdict::OnTime => (
            false,
            "BackupsOnTime",
            "the newest successful backup is within the schedule".to_string(),
        ),
        overdue::Verdict::NotScheduled(why) => (false, "NotScheduled", why.to_string()),
    };
    pass.ctx
        .metrics
        .backup_overdue
        .get_or_create(&label)
        .set(i64::from(overdue));
    let changed = pass
        .conditions()
        .set(conditions::BACKUP_OVERDUE, overdue, reason, &message);
    if changed && overdue != was_overdue && (overdue || was_overdue) {
        let kind = if overdue {
            EventType::Warning
        } else {
            EventType::Normal
        };
        pass.note(kind, reason, "Backup", message);
    }
}

/// The schedule, on-demand backups and what status says of them (see `backups`): decided,
/// reading the termination messages the decision asks for, then written.
async fn back_up(pass: &mut Pass<'_>, jobs: &[Arc<Job>], restoring: bool) -> Result<(), Error> {
    let app = pass.app;
    let location = pass
        .location
        .clone()
        .ok_or(Error::MissingField("an allowed backup location"))?;
    let cronjob_name = names::cronjob(&app.name);
    let claim_name = names::backup_claim(&app.name);
    let unbound = matches!(location, BackupLocation::NodeRoot(_))
        && pass
            .ctx
            .cache
            .claim(&app.namespace, &claim_name)
            .is_none_or(|claim| !claim.view.bound);
    let observed = backups::Observed {
        cronjob: pass.ctx.cache.cronjob(&app.namespace, &cronjob_name),
        jobs,
        restoring,
        full_read_due: backups::full_read_due(
            &app.app.spec,
            pass.record.status.last_full_read.as_deref(),
            chrono::Utc::now(),
        ),
        unbound_claim: unbound.then_some(claim_name),
    };
    let settings = &pass.ctx.settings;
    let (plan, record) = decide(pass, |reads, record| {
        backups::plan(app, &location, settings, &observed, reads, record)
    })
    .await?;
    match plan.schedule {
        backups::Schedule::Apply { desired, cached } => {
            pass.apply_unless_in_line(desired.as_ref(), cached).await?;
        }
        backups::Schedule::Delete => {
            pass.api::<CronJob>()
                .delete(&cronjob_name, &DeleteParams::background())
                .await?;
            pass.ctx.metrics.writes.inc();
        }
        backups::Schedule::Keep => {}
    }
    if let Some((job_name, task)) = &plan.start {
        pass.start_job(job_name, task, "requested").await?;
    }
    pass.record = record;
    Ok(())
}

/// The parts of backups and restores made in parts (see `parts`): made, and their set's
/// Job let run once they ended.
async fn run_parts(pass: &mut Pass<'_>, jobs: &[Arc<Job>], app_stopped: bool) -> Result<(), Error> {
    let restoring = restores::under_way(jobs, &pass.record.status);
    let plan = parts::plan(jobs, restoring, app_stopped);
    let mark = json!({"metadata": {"annotations": {names::PARTS_BEGUN: "true"}}});
    for job_name in &plan.mark {
        merge_into_job(pass, job_name, mark.clone()).await?;
    }
    for (job_name, task, action) in &plan.start {
        pass.start_job(job_name, task, action).await?;
    }
    for job_name in &plan.release {
        merge_into_job(pass, job_name, json!({"spec": {"suspend": false}})).await?;
    }
    Ok(())
}

/// Backups in stop mode (see `stops`): decided, reading afresh whether the app's pods are
/// gone, then the Jobs the stopped app waited for let run.
async fn stop_for_backups(pass: &mut Pass<'_>, jobs: &[Arc<Job>]) -> Result<stops::Plan, Error> {
    let restoring = restores::under_way(jobs, &pass.record.status);
    let (plan, _) = decide(pass, |reads, _| {
        Ok(decided(stops::plan(jobs, restoring, reads)))
    })
    .await?;
    for job_name in &plan.release {
        merge_into_job(pass, job_name, json!({"spec": {"suspend": false}})).await?;
    }
    // Said once per backup: only a backup not begun finds the app stopped (a set in parts
    // is begun by the parts made right after, in this pass).
    if plan.stopped
        && let Some(message) = &plan.message
    {
        pass.note(
            EventType::Normal,
            "StoppedForBackup",
            "Backup",
            message.clone(),
        );
    }
    Ok(plan)
}

/// Merges `patch` into Job `job_name`, fenced (see `fence`).
async fn merge_into_job(pass: &Pass<'_>, job_name: &str, patch: Value) -> Result<(), Error> {
    pass.api::<Job>()
        .patch(
            job_name,
            &PatchParams::default(),
            &Patch::Merge(&pass.ctx.fence.merge_patch(patch)),
        )
        .await?;
    pass.ctx.metrics.writes.inc();
    Ok(())
}

/// Writes `status` by server-side apply unless it is `old`; returns the app as written, if
/// it was.
async fn write_status(
    ctx: &Context,
    app: &HelloStateful,
    old: &HelloStatefulStatus,
    status: HelloStatefulStatus,
) -> Result<Option<HelloStateful>, Error> {
    if &status == old {
        return Ok(None);
    }
    let api =
        Api::<HelloStateful>::namespaced(ctx.client.clone(), &app.namespace().unwrap_or_default());
    // The app's version this pass decided on, as a precondition: if anyone wrote the app
    // since (a new leader acknowledging a request, a user's new token), the API server
    // refuses this write and the next pass decides again on the new version. So a deposed
    // leader's late write, or a status built on a stale copy, never lands.
    let patch = json!({
        "apiVersion": HelloStateful::api_version(&()),
        "kind": HelloStateful::kind(&()),
        "metadata": {"resourceVersion": app.resource_version()},
        "status": status,
    });
    let written = api
        .patch_status(
            &app.name_any(),
            &PatchParams::apply(names::FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    Ok(Some(written))
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
