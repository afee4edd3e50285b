//! On-demand restores (the `restore-requested` token): one restore per app at a time, the
//! app stopped while its Job runs, and the outcome acknowledged in status.
//!
//! Deciding is pure: `on_demand` writes status, events and tallies into a `Record` and
//! returns how many replicas may run and which Job to start; what no cache holds (a Job's
//! summary, whether the app's pods are gone) it asks for (see `reads`).

use std::sync::Arc;

use hellostateful_api::names::{self, Component};
use hellostateful_api::summary::{self, RestoreSummary};
use hellostateful_api::{HelloStatefulStatus, RequestPhase, RequestStatus, validate};
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::runtime::events::EventType;

use crate::children::{self, AppRef, MoverTask};
use crate::conditions;
use crate::jobs::{self, JobState};
use crate::location::BackupLocation;
use crate::parts;
use crate::reads::{Decision, Reads, Unread, decided};
use crate::record::{Record, Tally, request};

/// Jobs to start, each with its task.
type Steps = Vec<(String, MoverTask)>;

#[derive(Debug, PartialEq)]
pub struct Plan {
    /// The replicas the app may run.
    pub replicas: i32,
    /// A restore runs or waits to start: the app must not run, and backups wait.
    pub in_progress: bool,
    /// The restore Job to start: its name and task.
    pub start: Option<(String, MoverTask)>,
    /// The part Jobs that end a restore in parts, to start: name and task (see
    /// `parts::restore_state`).
    pub swaps: Vec<(String, MoverTask)>,
}

impl Plan {
    fn runs(replicas: i32) -> Self {
        Self {
            replicas,
            in_progress: false,
            start: None,
            swaps: Vec::new(),
        }
    }

    /// The pass that records a restore's outcome: the app stays stopped until that record is
    /// written, and the next pass, which reads it, starts the app once no restore Job of
    /// the app runs (see `on_demand`). Were the app started by this pass and its status
    /// write lost, the next pass would follow the restore from its Jobs again (a swap or
    /// undo part deleted meanwhile is made again) beside the running app; and a restore
    /// Job of another token made meanwhile would run beside it too.
    fn recording() -> Self {
        Self::restoring(None)
    }

    fn restoring(start: Option<(String, MoverTask)>) -> Self {
        Self {
            replicas: 0,
            in_progress: true,
            start,
            swaps: Vec::new(),
        }
    }
}

/// The restore Job still running, if any, or a part of one: a part that swaps in runs
/// after the restore's own Job ended.
pub fn running(jobs: &[Arc<Job>]) -> Option<String> {
    let part = || {
        jobs.iter().find(|job| {
            jobs::component(job) == Some(Component::Restore)
                && job.labels().contains_key(names::PART_OF_LABEL)
                && jobs::is_active(job)
        })
    };
    jobs::running(jobs, Component::Restore)
        .or_else(part)
        .map(|job| job.name_any())
}

/// Whether a restore of the app is under way: a Job of it runs, or status says it runs,
/// names its Job (made only once named, and perhaps made by a pass whose status write was
/// lost; a restore in parts has moments between its Jobs: its commit ended, its swaps not
/// yet made), or was left unfinished. A backup in parts not begun waits meanwhile
/// (`parts::plan`), and the restore not for it (`on_demand`); any other backup holds a
/// restore not begun yet, and is held by nothing, so neither ever waits for the other.
pub fn under_way(jobs: &[Arc<Job>], status: &HelloStatefulStatus) -> bool {
    running(jobs).is_some()
        || status.unfinished_restore.is_some()
        || status.restore_request.as_ref().is_some_and(|request| {
            request.phase == RequestPhase::Running
                || (request.job.is_some() && !request.phase.is_final())
        })
}

/// Whether a part Job of restore set `set` is there: the set's Job was made.
pub fn has_parts(jobs: &[Arc<Job>], set: &str) -> bool {
    jobs.iter().any(|job| {
        job.labels()
            .get(names::PART_OF_LABEL)
            .is_some_and(|of| of == set)
    })
}

/// Whether a restore request failed after its Job began replacing the live data.
pub fn interrupted_mid_swap(request: &RequestStatus) -> bool {
    request.phase == RequestPhase::Failed
        && request
            .message
            .as_deref()
            .is_some_and(|m| m.contains(hellostateful_mover::SWAP_INTERRUPTED))
}

/// An on-demand restore: stop the app, wait for its pods and any backup to finish, run the
/// restore Job, start the app again. Before the app is `initialized` (its initial restore,
/// if any, is over), a request waits.
///
/// `node_unfit` says why the node the app's pods are pinned to takes no pods now (cordoned,
/// say): a restore not yet begun then waits, since the app, once stopped, could not start
/// again there.
pub fn on_demand(
    app: &AppRef,
    location: &BackupLocation,
    jobs: &[Arc<Job>],
    initialized: bool,
    node_unfit: Option<&str>,
    reads: &Reads,
    record: &mut Record,
) -> Decision<Plan> {
    let in_parts = matches!(
        children::restore_task(app, location, "latest"),
        MoverTask::RestoreCommit { .. }
    );
    let recorded = record.status.unfinished_restore.clone();
    let restoring = under_way(jobs, &record.status);
    let plan = follow_unfinished(app, jobs, in_parts, reads, record).and_then(|following| {
        // What is recorded as unfinished changed in this pass: no restore Job is made before
        // that record is written (a Job made now, its write lost, could be a second restore
        // the one place that names unfinished ones never records).
        let settled = record.status.unfinished_restore == recorded;
        let mut plan = decide(
            app,
            location,
            jobs,
            initialized,
            node_unfit,
            reads,
            record,
            following.as_ref().map(|(set, _)| set.clone()),
            settled,
            restoring,
        )?;
        if let Some((_, steps)) = following {
            plan.swaps.extend(steps);
        }
        Ok(plan)
    });
    let plan = plan.map(|plan| match &record.status.unfinished_restore {
        // Whatever this pass decided of the newest request, an earlier restore that stopped
        // midway, or is still to finish, keeps the app from running on its mix of volumes.
        Some(_) => Plan {
            replicas: 0,
            ..plan
        },
        // One that ended in this pass: as for a restore's outcome (see `Plan::recording`),
        // the app starts only once that is written, by the next pass.
        None if recorded.is_some() => Plan {
            replicas: 0,
            in_progress: true,
            ..plan
        },
        None => plan,
    });
    decided(plan)
}

/// The restore recorded as unfinished (`status.unfinishedRestore`), followed to its end
/// whatever became of its request: a new token, or none, never abandons a set that may be
/// committed, or is being undone, with some volumes swapped in and others not. Returns its
/// Job's name and the parts to start while it still runs; once it ended it is forgotten if
/// it replaced nothing or everything, and kept (the app held) if it stopped midway.
fn follow_unfinished(
    app: &AppRef,
    jobs: &[Arc<Job>],
    in_parts: bool,
    reads: &Reads,
    record: &mut Record,
) -> Result<Option<(String, Steps)>, Unread> {
    let old = record.status.restore_request.clone();
    let newest = record.restore_token(app.app);
    // A request replaced by a new token while its Job exists, or (a restore in parts) once
    // its Job was made and is gone (expired, deleted: what it committed and swapped in is
    // unknown): recorded before the new token's acknowledgement replaces the old one, the
    // only other place that names it.
    let replaced = old
        .filter(|request| !request.phase.is_final())
        .filter(|request| newest.is_some_and(|token| token != request.token))
        .and_then(|request| {
            request.job.clone().filter(|name| {
                jobs.iter().any(|j| j.name_any() == *name)
                    || (in_parts
                        && (request.phase == RequestPhase::Running || has_parts(jobs, name)))
            })
        });
    if record.status.unfinished_restore.is_none() {
        record.status.unfinished_restore.clone_from(&replaced);
    }
    let Some(set) = record.status.unfinished_restore.clone() else {
        return Ok(None);
    };
    // Gone (expired): what it left is unknown, and it stays recorded until a restore succeeds.
    let Some(job) = jobs.iter().find(|job| job.name_any() == set) else {
        return Ok(None);
    };
    match parts::restore_state(job, jobs, reads)? {
        (JobState::Running, steps) => return Ok(Some((set, steps))),
        (JobState::Succeeded, _) => record.status.unfinished_restore = None,
        (JobState::Failed(reason), _) => {
            let cause = parts::restore_failure(job, reason, jobs, reads)?;
            if !cause.contains(hellostateful_mover::SWAP_INTERRUPTED) {
                // It ended before anything was swapped in: the live data is as it was.
                record.status.unfinished_restore = None;
            }
        }
    }
    // Ended: a request replaced meanwhile (its Job made while this one was recorded) is
    // recorded in its place, and followed, before the new token's acknowledgement replaces it.
    if record.status.unfinished_restore.is_none() && replaced.as_ref().is_some_and(|r| *r != set) {
        return follow_unfinished(app, jobs, in_parts, reads, record);
    }
    Ok(None)
}

#[allow(clippy::too_many_arguments)]
fn decide(
    app: &AppRef,
    location: &BackupLocation,
    jobs: &[Arc<Job>],
    initialized: bool,
    node_unfit: Option<&str>,
    reads: &Reads,
    record: &mut Record,
    unfinished: Option<String>,
    settled: bool,
    restoring: bool,
) -> Result<Plan, Unread> {
    let replicas = app.app.spec.replicas;
    let old = record.status.restore_request.clone();
    if let Some(interrupted) = old.as_ref().filter(|request| interrupted_mid_swap(request))
        && record.status.unfinished_restore.is_none()
    {
        // Recorded by a reconciler that kept it in the request alone, which a new token
        // replaces.
        record.status.unfinished_restore = interrupted.job.clone().or(Some(String::new()));
    }
    // One restore per app at a time, whatever the tokens: a restore Job that runs, or an
    // unfinished one still to swap in, keeps the app stopped even when its request was
    // withdrawn or replaced.
    let running_restore = running(jobs).or(unfinished);
    // A request withdrawn once its Job was made is still followed to its end: a restore in
    // parts swaps its volumes in after its Job ended, and a swap that fails must be
    // recorded, else the app would start on a mix of old and restored volumes.
    let withdrawn = old
        .as_ref()
        .filter(|request| !request.phase.is_final())
        .filter(|request| {
            request
                .job
                .as_deref()
                .is_some_and(|name| jobs.iter().any(|job| job.name_any() == name))
        })
        .map(|request| request.token.clone());
    let token = record.restore_token(app.app).or(withdrawn.as_deref());
    let Some(token) = token else {
        if let Some(job) = running_restore {
            record.conditions().set(
                conditions::RESTORING,
                true,
                "RestoreRunning",
                &format!("Job {job} still restores (its request was withdrawn); the app starts once it ends"),
            );
            return Ok(Plan::restoring(None));
        }
        if old.as_ref().is_some_and(interrupted_mid_swap) {
            // Until a new request finishes the swap, some volumes may hold the restored
            // data and others the old: the app must not run on that.
            return Ok(Plan::runs(0));
        }
        // Begun: acknowledged Running, or (a lost status write can leave it Pending) a part
        // Job of its set is still there.
        if let Some(begun) = old
            .as_ref()
            .filter(|request| !request.phase.is_final())
            .and_then(|request| {
                let job = request.job.clone()?;
                (request.phase == RequestPhase::Running || has_parts(jobs, &job)).then_some(job)
            })
        {
            // Its Job ran, and is gone (expired while nothing followed it): what it swapped
            // in is unknown. Held until a restore succeeds, which finishes or undoes it first.
            let message = format!(
                "withdrawn after its Job {begun} ran, and that Job is gone: whether every volume \
                 was swapped in is unknown, so the app stays stopped: request a restore \
                 (kubectl hellostateful restore {})",
                app.name
            );
            if let Some(old) = &old {
                record.status.restore_request = Some(request(
                    &old.token,
                    RequestPhase::Failed,
                    Some(&begun),
                    &message,
                ));
            }
            record.status.unfinished_restore = Some(begun);
            record
                .conditions()
                .set(conditions::RESTORING, false, "RestoreWithdrawn", &message);
            return Ok(Plan::runs(0));
        }
        if let Some(unbegun) = old.filter(|request| !request.phase.is_final()) {
            let message = format!(
                "withdrawn before it began (the {} annotation was removed): nothing was restored",
                names::RESTORE_REQUESTED
            );
            record.status.restore_request = Some(request(
                &unbegun.token,
                RequestPhase::Failed,
                None,
                &message,
            ));
            record
                .conditions()
                .set(conditions::RESTORING, false, "RestoreWithdrawn", &message);
        }
        return Ok(Plan::runs(replicas));
    };
    let from = app
        .app
        .annotations()
        .get(names::RESTORE_FROM)
        .map(String::as_str)
        .unwrap_or("latest");
    if let Err(error) = validate::restore_from(from) {
        let message = error.to_string();
        record.status.restore_request = Some(request(token, RequestPhase::Failed, None, &message));
        record.note(EventType::Warning, "RestoreRefused", "Restore", message);
        return Ok(Plan::runs(replicas));
    }
    if !initialized {
        record.status.restore_request = Some(request(
            token,
            RequestPhase::Pending,
            None,
            "waiting for the app to be created",
        ));
        return Ok(Plan::runs(replicas));
    }
    let job_name = names::restore_job(&app.name, &app.uid, token);
    let acknowledge = |record: &mut Record, phase, message: &str, backup_id: Option<String>| {
        let mut status = request(token, phase, Some(&job_name), message);
        status.backup_id = backup_id;
        record.status.restore_request = Some(status);
    };
    // The request failed: acknowledged, counted, and said in a condition and an event.
    let fail = |record: &mut Record, message: String| {
        acknowledge(record, RequestPhase::Failed, &message, None);
        record.tallies.push(Tally::RestoreFailed);
        record
            .conditions()
            .set(conditions::RESTORING, false, "RestoreFailed", &message);
        record.note(EventType::Warning, "RestoreFailed", "Restore", message);
    };
    let task = children::restore_task(app, location, from);
    let running_message = match &task {
        MoverTask::RestoreCommit { replicas, .. } => {
            parts::restore_steps(&job_name, *replicas, from)
        }
        _ => format!("Job {job_name} restores {from}"),
    };
    let job = jobs.iter().find(|job| job.name_any() == job_name);
    let (state, swaps) = match job {
        Some(job) => {
            let (state, swaps) = parts::restore_state(job, jobs, reads)?;
            (Some(state), swaps)
        }
        None => (None, Vec::new()),
    };
    match state {
        Some(JobState::Running) => {
            acknowledge(record, RequestPhase::Running, &running_message, None);
            record.conditions().set(
                conditions::RESTORING,
                true,
                "RestoreRunning",
                &running_message,
            );
            let mut plan = Plan::restoring(None);
            plan.swaps = swaps;
            Ok(plan)
        }
        Some(JobState::Succeeded) => {
            let outcome = reads
                .message(&job_name)?
                .and_then(summary::parse_last_line::<RestoreSummary>);
            let id = outcome
                .and_then(|o| o.id)
                .unwrap_or_else(|| from.to_string());
            let message = format!("restored backup {id}; the app runs {replicas} replica(s) again");
            acknowledge(record, RequestPhase::Succeeded, &message, Some(id));
            record.status.is_restored = true;
            // Every volume holds this backup now, whatever an earlier restore left.
            record.status.unfinished_restore = None;
            record.tallies.push(Tally::RestoreSucceeded);
            record
                .conditions()
                .set(conditions::RESTORING, false, "Restored", &message);
            record.note(EventType::Normal, "Restored", "Restore", message);
            Ok(Plan::recording())
        }
        Some(JobState::Failed(reason)) => {
            let cause = match job {
                Some(job) => parts::restore_failure(job, reason, jobs, reads)?,
                None => reason,
            };
            let again = format!(
                "request the restore again (kubectl hellostateful restore {}), which finishes the swap first",
                app.name
            );
            let (message, run) = if cause.contains(hellostateful_mover::SWAP_INTERRUPTED) {
                record.status.unfinished_restore = Some(job_name.clone());
                (
                    format!(
                        "restore of {from} failed: {cause}. The app stays stopped so that it \
                         never runs on a mix of old and restored volumes: {again}"
                    ),
                    0,
                )
            } else if let Some(unfinished) = &record.status.unfinished_restore {
                (
                    format!(
                        "restore of {from} failed: {cause}; this restore replaced nothing, but \
                         the earlier restore {unfinished} stopped midway, so the app stays \
                         stopped: {again}"
                    ),
                    0,
                )
            } else {
                (
                    format!("restore of {from} failed: {cause}; the live data was not replaced"),
                    replicas,
                )
            };
            fail(record, message);
            Ok(if run > 0 {
                Plan::recording()
            } else {
                Plan::runs(0)
            })
        }
        None => {
            // Begun: this token's Job is named in status (the app is being stopped for it).
            let begun = old
                .as_ref()
                .is_some_and(|r| r.token == token && r.job.is_some());
            if let Some(why) = node_unfit.filter(|_| !begun && running_restore.is_none()) {
                let message = format!(
                    "waiting: the app's node {why}, takes no pods, so the app, once stopped \
                     for the restore, could not start again; the restore begins when the node \
                     takes pods again (kubectl uncordon, for a cordoned node)"
                );
                record.status.restore_request =
                    Some(request(token, RequestPhase::Pending, None, &message));
                return Ok(Plan::runs(replicas));
            }
            let in_parts = matches!(task, MoverTask::RestoreCommit { .. });
            // Its Job was made (status says it runs, or a part Job of its set is there) and is
            // gone: its TTL removed it before its outcome was recorded (the reconciler was
            // down that long), or someone deleted it.
            let lost = old.as_ref().is_some_and(|request| {
                request.token == token
                    && request.job.as_deref() == Some(job_name.as_str())
                    && (request.phase == RequestPhase::Running || has_parts(jobs, &job_name))
            });
            if lost && in_parts {
                // A set may have been committed, and some volumes swapped in: run again as
                // new, its stages would roll that set forward on some volumes, and its
                // failure would run the app on a mix. Kept as unfinished instead: the app
                // stays stopped until a restore succeeds, which finishes this one first.
                let message = format!(
                    "restore of {from} failed: {}: its Job {job_name} is gone (expired or \
                     deleted) before its outcome was recorded, so whether it committed the \
                     restore, and which volumes it swapped in, is unknown. The app stays \
                     stopped so that it never runs on a mix of old and restored volumes: \
                     request the restore again (kubectl hellostateful restore {}), which \
                     finishes the swap first",
                    hellostateful_mover::SWAP_INTERRUPTED,
                    app.name
                );
                record.status.unfinished_restore = Some(job_name.clone());
                fail(record, message);
                return Ok(Plan {
                    in_progress: running_restore.is_some(),
                    ..Plan::runs(0)
                });
            }
            // A restore in parts is made only once status names its Job (see `follow_unfinished`
            // and the `lost` case above, which rely on that record): when the app is stopped
            // already, this pass writes it, and the next one makes the Job.
            let named = old
                .as_ref()
                .is_some_and(|r| r.token == token && r.job.as_deref() == Some(job_name.as_str()));
            // A backup in parts not begun while a restore is under way waits for it
            // (`parts::plan`): waiting for it in turn would hold both for ever.
            let backup = jobs::running(jobs, Component::Backup)
                .filter(|backup| !restoring || parts::begun(backup, jobs));
            let mut start = None;
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
            } else {
                let app_pods = reads.app_pods()?;
                match app_pods.waiting_for() {
                    // Not stopped as observed: a pod left, or a StatefulSet that may still
                    // start one beside the mover.
                    Some(why) => (RequestPhase::Pending, format!("stopping the app: {why}")),
                    None if in_parts && !(named && settled) => (
                        RequestPhase::Pending,
                        format!(
                            "the app is stopped: Job {job_name} is made once this status is written"
                        ),
                    ),
                    None => {
                        // Its Job ran once already and is gone (see `lost`), a restore in one
                        // Job: the app has stayed stopped; restoring the same backup again is
                        // safe and gives the one outcome that can be reported.
                        let started = if lost {
                            format!(
                                "restoring {from} again with Job {job_name}: the first run's Job was removed before its outcome was recorded; the app stays stopped meanwhile"
                            )
                        } else {
                            format!(
                                "restoring {from} with Job {job_name}; the app is stopped meanwhile"
                            )
                        };
                        record.note(EventType::Normal, "RestoreStarted", "Restore", started);
                        start = Some((job_name.clone(), task));
                        (RequestPhase::Running, running_message)
                    }
                }
            };
            record
                .conditions()
                .set(conditions::RESTORING, true, "RestoreRunning", &message);
            acknowledge(record, phase, &message, None);
            Ok(Plan::restoring(start))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{self, reasons};
    use crate::reads::{AppPods, Read};
    use hellostateful_api::{HelloStateful, HelloStatefulStatus};
    use serde_json::{Value, json};

    const TOKEN: &str = "2026-11-29T16:00:00Z";

    fn app(annotations: Value) -> HelloStateful {
        fixtures::app(json!({"replicas": 2}), annotations)
    }

    fn job(name: &str, component: Component, condition: Option<&str>) -> Arc<Job> {
        fixtures::job(name, component, condition, &[])
    }

    fn run(
        app: &HelloStateful,
        jobs: &[Arc<Job>],
        reads: &Reads,
        status: HelloStatefulStatus,
    ) -> (Decision<Plan>, Record) {
        run_unfit(app, jobs, reads, status, None)
    }

    /// As `run`, the app's node taking no pods for the reason `node_unfit` gives.
    fn run_unfit(
        app: &HelloStateful,
        jobs: &[Arc<Job>],
        reads: &Reads,
        status: HelloStatefulStatus,
        node_unfit: Option<&str>,
    ) -> (Decision<Plan>, Record) {
        let app_ref = AppRef::new(app).expect("app");
        let mut record = Record::new(status, Some(1));
        let location = location(app);
        let decision = on_demand(
            &app_ref,
            &location,
            jobs,
            true,
            node_unfit,
            reads,
            &mut record,
        );
        (decision, record)
    }

    fn location(app: &HelloStateful) -> BackupLocation {
        crate::location::resolve(&app.spec, &["/tmp/backup".into()], &[]).expect("location")
    }

    fn pods(count: usize) -> Reads {
        let mut reads = Reads::default();
        reads.add_app_pods(AppPods {
            pods: count,
            asked: 0,
            seen: true,
        });
        reads
    }

    #[test]
    fn a_restore_not_begun_waits_while_the_apps_node_takes_no_pods() {
        let app = app(json!({names::RESTORE_REQUESTED: TOKEN}));
        let cordoned = Some("node-a, cordoned (unschedulable)");
        let (decision, record) = run_unfit(&app, &[], &pods(2), Default::default(), cordoned);
        assert_eq!(decision.done(), Plan::runs(2), "the app keeps running");
        let waiting = record.status.restore_request.clone().expect("acknowledged");
        assert_eq!(
            (waiting.phase, waiting.job.as_deref()),
            (RequestPhase::Pending, None)
        );
        let message = waiting.message.unwrap_or_default();
        assert!(
            message.contains("node node-a, cordoned") && message.contains("uncordon"),
            "{message}"
        );

        // Begun (the app is being stopped for it): the restore goes on, on the cordoned node.
        let job_name = names::restore_job("hello", "uid-1", TOKEN);
        let stopping = HelloStatefulStatus {
            restore_request: Some(request(
                TOKEN,
                RequestPhase::Pending,
                Some(&job_name),
                "stopping",
            )),
            ..Default::default()
        };
        let (decision, _) = run_unfit(&app, &[], &pods(0), stopping, cordoned);
        let plan = decision.done();
        assert_eq!(plan.start.map(|(name, _)| name), Some(job_name));
    }

    #[test]
    fn a_request_stops_the_app_and_starts_its_job_only_once_the_pods_are_gone() {
        let app = app(json!({names::RESTORE_REQUESTED: TOKEN}));
        let (decision, _) = run(&app, &[], &Reads::default(), Default::default());
        assert!(matches!(decision, Decision::Read(Read::AppPods)));

        let (decision, record) = run(&app, &[], &pods(2), Default::default());
        let plan = decision.done();
        assert_eq!(plan, Plan::restoring(None));
        let request = record
            .status
            .restore_request
            .as_ref()
            .expect("acknowledged");
        assert_eq!(request.phase, RequestPhase::Pending);
        assert!(
            request
                .message
                .as_deref()
                .is_some_and(|m| m.contains("2 pod(s)"))
        );

        // No pod left, but the StatefulSet still asks for one: it could start it beside the
        // mover, so the Job waits until the StatefulSet asks for none.
        let mut between = Reads::default();
        between.add_app_pods(AppPods {
            pods: 0,
            asked: 2,
            seen: true,
        });
        let (decision, record) = run(&app, &[], &between, Default::default());
        let plan = decision.done();
        assert_eq!((plan.replicas, plan.start), (0, None));
        let request = record.status.restore_request.expect("acknowledged");
        assert_eq!(request.phase, RequestPhase::Pending);
        assert!(
            request
                .message
                .is_some_and(|m| m.contains("ask for 0 replicas (it asks for 2)"))
        );

        let (decision, record) = run(&app, &[], &pods(0), Default::default());
        let plan = decision.done();
        let job_name = names::restore_job("hello", "uid-1", TOKEN);
        assert_eq!(plan.replicas, 0);
        assert_eq!(
            plan.start.as_ref().map(|(name, _)| name.as_str()),
            Some(job_name.as_str())
        );
        assert_eq!(reasons(&record), ["RestoreStarted"]);
    }

    #[test]
    fn a_second_token_waits_for_the_restore_that_runs_without_asking_about_pods() {
        let app = app(json!({names::RESTORE_REQUESTED: "t2"}));
        let first = job(
            &names::restore_job("hello", "uid-1", "t1"),
            Component::Restore,
            None,
        );
        let (decision, record) = run(&app, &[first], &Reads::default(), Default::default());
        let plan = decision.done();
        assert_eq!(plan, Plan::restoring(None));
        let request = record
            .status
            .restore_request
            .as_ref()
            .expect("acknowledged");
        assert!(
            request
                .message
                .as_deref()
                .is_some_and(|m| m.contains("one restore at a time"))
        );
    }

    #[test]
    fn a_withdrawn_request_keeps_the_app_stopped_while_its_job_runs() {
        let app = app(json!({}));
        let first = job(
            &names::restore_job("hello", "uid-1", "t1"),
            Component::Restore,
            None,
        );
        let (decision, mut record) = run(&app, &[first], &Reads::default(), Default::default());
        assert_eq!(decision.done(), Plan::restoring(None));
        assert!(record.conditions().is_true(conditions::RESTORING));

        let (decision, _) = run(&app, &[], &Reads::default(), Default::default());
        assert_eq!(decision.done(), Plan::runs(2));
    }

    #[test]
    fn a_request_withdrawn_before_its_job_was_made_ends_and_says_so() {
        let requested = app(json!({names::RESTORE_REQUESTED: TOKEN}));
        let (decision, stopping) = run(&requested, &[], &pods(2), Default::default());
        assert_eq!(decision.done(), Plan::restoring(None), "stopping the app");
        let (decision, mut record) = run(&app(json!({})), &[], &pods(2), stopping.status);
        assert_eq!(decision.done(), Plan::runs(2));
        let request = record.status.restore_request.clone().expect("ended");
        assert_eq!(request.phase, RequestPhase::Failed);
        assert!(request.message.is_some_and(|m| m.contains("withdrawn")));
        assert_eq!(
            record.conditions().reason(conditions::RESTORING),
            Some("RestoreWithdrawn")
        );
    }

    #[test]
    fn a_restore_that_failed_mid_swap_keeps_the_app_stopped_until_asked_again() {
        let app = app(json!({names::RESTORE_REQUESTED: TOKEN}));
        let job_name = names::restore_job("hello", "uid-1", TOKEN);
        let failed = job(&job_name, Component::Restore, Some("Failed"));
        let cause = format!("error: {}: volume 1", hellostateful_mover::SWAP_INTERRUPTED);
        let reads = fixtures::message(&job_name, &cause);
        let (decision, record) = run(&app, &[failed], &reads, Default::default());
        assert_eq!(decision.done(), Plan::runs(0));
        assert_eq!(record.tallies, [Tally::RestoreFailed]);

        // Acknowledged: the token is done, and the app still does not run.
        let (decision, _) = run(&app, &[], &Reads::default(), record.status.clone());
        assert_eq!(decision.done(), Plan::runs(0));
    }

    #[test]
    fn a_finished_restore_names_its_backup_and_starts_the_app_once_that_is_recorded() {
        let app = app(json!({names::RESTORE_REQUESTED: TOKEN}));
        let job_name = names::restore_job("hello", "uid-1", TOKEN);
        let finished = job(&job_name, Component::Restore, Some("Complete"));
        let (decision, _) = run(
            &app,
            std::slice::from_ref(&finished),
            &Reads::default(),
            Default::default(),
        );
        assert!(matches!(decision, Decision::Read(Read::Message(name)) if name == job_name));

        let reads = fixtures::message(&job_name, r#"{"restored":true,"id":"20261129T150001Z"}"#);
        let (decision, record) = run(
            &app,
            std::slice::from_ref(&finished),
            &reads,
            Default::default(),
        );
        // The pass that acknowledges it keeps the app stopped: were its status write lost,
        // the next pass would follow the restore from its Jobs again beside the app.
        assert_eq!(decision.done(), Plan::recording());
        let request = record
            .status
            .restore_request
            .as_ref()
            .expect("acknowledged");
        assert_eq!(request.backup_id.as_deref(), Some("20261129T150001Z"));
        assert!(record.status.is_restored);
        assert_eq!(record.tallies, [Tally::RestoreSucceeded]);

        // The next pass reads the acknowledgement and starts the app, no restore Job running.
        let (decision, _) = run(&app, &[finished], &Reads::default(), record.status.clone());
        assert_eq!(decision.done(), Plan::runs(2));
        let running = job(
            &names::restore_job("hello", "uid-1", "t2"),
            Component::Restore,
            None,
        );
        let (decision, _) = run(&app, &[running], &Reads::default(), record.status);
        assert_eq!(
            decision.done().replicas,
            0,
            "not while another restore Job runs"
        );
    }

    #[test]
    fn a_retry_after_an_interrupted_swap_that_fails_before_swapping_keeps_the_app_stopped() {
        // t1 committed, and its swap on volume 1 was interrupted (its node lost).
        let first = app(json!({names::RESTORE_REQUESTED: TOKEN}));
        let first_job = names::restore_job("hello", "uid-1", TOKEN);
        let failed = job(&first_job, Component::Restore, Some("Failed"));
        let cause = format!("error: {}: volume 1", hellostateful_mover::SWAP_INTERRUPTED);
        let reads = fixtures::message(&first_job, &cause);
        let (decision, record) = run(&first, &[failed], &reads, Default::default());
        assert_eq!(decision.done(), Plan::runs(0));
        assert_eq!(
            record.status.unfinished_restore.as_deref(),
            Some(first_job.as_str())
        );

        // As status says, the user asks again: t2's stage on the lost node fails, so its
        // commit is refused and it replaces nothing. The app must still not run: volume 0
        // holds t1's backup, volume 1 the old data.
        let retry = app(json!({names::RESTORE_REQUESTED: "t2"}));
        let retry_job = names::restore_job("hello", "uid-1", "t2");
        let refused = job(&retry_job, Component::Restore, Some("Failed"));
        let reads = fixtures::message(&retry_job, "error: volume 1: node gone");
        let (decision, record) = run(&retry, &[refused], &reads, record.status);
        assert_eq!(decision.done(), Plan::runs(0));
        let request = record.status.restore_request.clone().expect("acknowledged");
        assert_eq!(request.phase, RequestPhase::Failed);
        assert!(
            request
                .message
                .is_some_and(|m| m.contains(&format!("earlier restore {first_job} stopped midway"))),
            "the message says why the app stays stopped"
        );
        let (decision, still) = run(&retry, &[], &Reads::default(), record.status.clone());
        assert_eq!(decision.done(), Plan::runs(0), "and on every later pass");

        // t3 succeeds: every volume holds its backup, and the app runs.
        let third = app(json!({names::RESTORE_REQUESTED: "t3"}));
        let third_job = names::restore_job("hello", "uid-1", "t3");
        let done = job(&third_job, Component::Restore, Some("Complete"));
        let reads = fixtures::message(&third_job, r#"{"restored":true,"id":"20261129T150001Z"}"#);
        let (decision, record) = run(&third, std::slice::from_ref(&done), &reads, still.status);
        assert_eq!(decision.done(), Plan::recording());
        assert_eq!(record.status.unfinished_restore, None);
        let (decision, _) = run(&third, &[done], &Reads::default(), record.status);
        assert_eq!(decision.done(), Plan::runs(2));
    }

    #[test]
    fn a_new_token_between_a_commit_and_its_swaps_waits_for_them_to_be_swapped_in() {
        let first = app(json!({names::RESTORE_REQUESTED: TOKEN}));
        let set = names::restore_job("hello", "uid-1", TOKEN);
        let committed =
            crate::parts::tests::set_job(&set, Component::Restore, true, Some("Complete"));
        let reads = fixtures::message(&set, r#"{"restored":true,"id":"20261129T150001Z"}"#);
        let (decision, record) = run(
            &first,
            std::slice::from_ref(&committed),
            &reads,
            Default::default(),
        );
        let plan = decision.done();
        assert_eq!(plan.swaps.len(), 2, "the swaps are due");

        // Before they are made, the user asks again: the committed set is not abandoned.
        let second = app(json!({names::RESTORE_REQUESTED: "t2"}));
        let (decision, record) = run(&second, &[committed], &reads, record.status);
        let plan = decision.done();
        assert_eq!((plan.replicas, plan.start.is_none()), (0, true));
        assert_eq!(
            plan.swaps
                .iter()
                .map(|(name, _)| name.clone())
                .collect::<Vec<_>>(),
            [names::swap_part(&set, 0), names::swap_part(&set, 1)],
            "the first set's swaps are made before anything of t2"
        );
        t2_waits_behind(&record, &set);
    }

    /// Restore set `set` is recorded as unfinished, and token t2 acknowledged as Pending.
    fn t2_waits_behind(record: &Record, set: &str) {
        assert_eq!(record.status.unfinished_restore.as_deref(), Some(set));
        let request = record
            .status
            .restore_request
            .clone()
            .expect("t2 acknowledged");
        assert_eq!(
            (request.token.as_str(), request.phase),
            ("t2", RequestPhase::Pending)
        );
    }

    #[test]
    fn a_committed_set_whose_commit_pod_is_gone_is_neither_taken_as_restored_nor_started() {
        let app = app(json!({names::RESTORE_REQUESTED: TOKEN}));
        let set = names::restore_job("hello", "uid-1", TOKEN);
        let committed =
            crate::parts::tests::set_job(&set, Component::Restore, true, Some("Complete"));
        // Its pod collected: no message. No swap part was made yet.
        let mut gone = Reads::default();
        gone.add_message(set.clone(), None);
        let (decision, record) = run(
            &app,
            std::slice::from_ref(&committed),
            &gone,
            Default::default(),
        );
        assert_eq!(decision.done(), Plan::runs(0), "the app does not start");
        assert!(!record.status.is_restored);
        let request = record.status.restore_request.clone().expect("acknowledged");
        assert_eq!(request.phase, RequestPhase::Failed);
        assert!(
            request.message.is_some_and(|m| m.contains("unknown")),
            "it says what is not known"
        );
        assert!(record.status.unfinished_restore.is_some());

        // A swap part exists: the set was committed, and its swaps go on.
        let labels = [(names::PART_OF_LABEL, set.as_str())];
        let swap = fixtures::job(
            &names::swap_part(&set, 0),
            Component::Restore,
            None,
            &labels,
        );
        let (decision, _) = run(&app, &[committed, swap], &gone, Default::default());
        let plan = decision.done();
        assert_eq!(plan.replicas, 0);
        assert!(plan.in_progress);
        assert_eq!(
            plan.swaps
                .iter()
                .map(|(name, _)| name.clone())
                .collect::<Vec<_>>(),
            [names::swap_part(&set, 1)],
            "the other volume's swap is made"
        );
    }

    #[test]
    fn a_restore_in_parts_whose_jobs_are_gone_is_kept_unfinished_not_run_again() {
        let app = fixtures::spread_app(json!({names::RESTORE_REQUESTED: TOKEN}));
        let set = names::restore_job("hello", "uid-1", TOKEN);
        // Status says it runs; its Jobs expired before its outcome was recorded (the set
        // may have been committed, and some volumes swapped in).
        let running = HelloStatefulStatus {
            restore_request: Some(request(TOKEN, RequestPhase::Running, Some(&set), "runs")),
            ..Default::default()
        };
        let (decision, record) = run(&app, &[], &pods(0), running.clone());
        assert_eq!(
            decision.done(),
            Plan::runs(0),
            "neither run again nor started"
        );
        let failed = record.status.restore_request.clone().expect("acknowledged");
        assert!(interrupted_mid_swap(&failed), "{failed:?}");
        assert!(
            failed.message.as_deref().is_some_and(
                |m| m.contains("is gone") && m.contains("kubectl hellostateful restore hello")
            ),
            "{failed:?}"
        );
        assert_eq!(
            record.status.unfinished_restore.as_deref(),
            Some(set.as_str())
        );
        let (decision, _) = run(&app, &[], &pods(0), record.status);
        assert_eq!(decision.done(), Plan::runs(0), "and on every later pass");

        // A new token instead: the gone set is recorded as unfinished before its request is
        // replaced, so the new restore's failure cannot start the app on a mix either.
        let again = fixtures::spread_app(json!({names::RESTORE_REQUESTED: "t2"}));
        let (decision, record) = run(&again, &[], &pods(0), running);
        assert_eq!(decision.done().replicas, 0);
        t2_waits_behind(&record, &set);
    }

    #[test]
    fn a_request_replaced_while_another_restore_is_recorded_is_recorded_once_that_ends() {
        use crate::parts::tests::set_job;
        let first = names::restore_job("hello", "uid-1", TOKEN);
        let second = names::restore_job("hello", "uid-1", "t2");
        // t1, recorded as unfinished, has swapped in; t2's Job was made meanwhile (a pass
        // whose status write was lost); then the user asks again (t3).
        let (mut jobs, reads) = committed_then_swapping(&first, Some("Complete"));
        jobs.push(set_job(&second, Component::Restore, false, None));
        let status = HelloStatefulStatus {
            restore_request: Some(request("t2", RequestPhase::Pending, Some(&second), "waits")),
            unfinished_restore: Some(first),
            ..Default::default()
        };
        let third = fixtures::spread_app(json!({names::RESTORE_REQUESTED: "t3"}));
        let (decision, record) = run(&third, &jobs, &reads, status);
        let plan = decision.done();
        assert_eq!((plan.replicas, plan.start), (0, None));
        assert_eq!(
            record.status.unfinished_restore.as_deref(),
            Some(second.as_str()),
            "t2 is followed to its end, not forgotten"
        );
        let request = record.status.restore_request.expect("t3 acknowledged");
        assert_eq!(
            (request.token.as_str(), request.phase),
            ("t3", RequestPhase::Pending)
        );
    }

    /// Restore set `set` committed (its summary read), replica 0 swapped in, and replica 1's
    /// swap Job in condition `last` (a failed one says why).
    fn committed_then_swapping(set: &str, last: Option<&str>) -> (Vec<Arc<Job>>, Reads) {
        let labels = [(names::PART_OF_LABEL, set)];
        let swap = |ordinal, condition| {
            let name = names::swap_part(set, ordinal);
            fixtures::job(&name, Component::Restore, condition, &labels)
        };
        let jobs = vec![
            crate::parts::tests::set_job(set, Component::Restore, true, Some("Complete")),
            swap(0, Some("Complete")),
            swap(1, last),
        ];
        let mut reads = fixtures::message(set, r#"{"restored":true,"id":"20261129T150001Z"}"#);
        reads.add_message(names::swap_part(set, 1), Some("error: node gone".into()));
        (jobs, reads)
    }

    #[test]
    fn a_restore_in_parts_is_committed_then_swapped_in_by_a_job_per_replica() {
        use crate::parts::tests::set_job;
        let app = fixtures::spread_app(json!({names::RESTORE_REQUESTED: TOKEN}));
        let set = names::restore_job("hello", "uid-1", TOKEN);
        // The app is stopped: its Job is named in status first, and made by the next pass,
        // which reads that record.
        let (decision, record) = run(&app, &[], &pods(0), Default::default());
        assert_eq!(decision.done(), Plan::restoring(None));
        let named = record.status.restore_request.clone().expect("acknowledged");
        assert_eq!(
            (named.phase, named.job.as_deref()),
            (RequestPhase::Pending, Some(set.as_str()))
        );
        let (decision, record) = run(&app, &[], &pods(0), record.status);
        let plan = decision.done();
        let commit = MoverTask::RestoreCommit {
            replicas: 2,
            from: "latest".into(),
            if_exists: false,
            source: None,
        };
        assert_eq!(plan.start, Some((set.clone(), commit)));
        let message = record.status.restore_request.and_then(|r| r.message);
        assert!(
            message
                .as_deref()
                .is_some_and(|m| m.contains(&format!("{set}-0 to {set}-1"))
                    && m.contains(&format!("{set}-swap-0 to {set}-swap-1"))),
            "{message:?}"
        );

        // Committed: each replica's swap Job is made; the app stays stopped meanwhile.
        let committed = set_job(&set, Component::Restore, true, Some("Complete"));
        let reads = fixtures::message(&set, r#"{"restored":true,"id":"20261129T150001Z"}"#);
        let (decision, _) = run(
            &app,
            std::slice::from_ref(&committed),
            &reads,
            Default::default(),
        );
        let plan = decision.done();
        assert_eq!((plan.replicas, plan.in_progress), (0, true));
        let swap = |ordinal| MoverTask::RestorePart {
            set: set.clone(),
            ordinal,
            step: crate::children::RestoreStep::Swap,
        };
        assert_eq!(
            plan.swaps,
            [
                (format!("{set}-swap-0"), swap(0)),
                (format!("{set}-swap-1"), swap(1)),
            ]
        );
        let swapping = |last| committed_then_swapping(&set, last).0;
        let (decision, _) = run(&app, &swapping(None), &reads, Default::default());
        assert_eq!(decision.done(), Plan::restoring(None), "one still swaps");

        // Withdrawn meanwhile: the app still waits for the swap.
        let (decision, _) = run(
            &fixtures::spread_app(json!({})),
            &swapping(None),
            &reads,
            Default::default(),
        );
        assert_eq!(decision.done(), Plan::restoring(None));

        let (decision, record) = run(
            &app,
            &swapping(Some("Complete")),
            &reads,
            Default::default(),
        );
        assert_eq!(decision.done(), Plan::recording());
        let request = record.status.restore_request.clone().expect("acknowledged");
        assert_eq!(
            (request.phase, request.backup_id.as_deref()),
            (RequestPhase::Succeeded, Some("20261129T150001Z"))
        );
        let (decision, _) = run(&app, &swapping(Some("Complete")), &reads, record.status);
        assert_eq!(decision.done(), Plan::runs(2));
    }

    #[test]
    fn a_request_withdrawn_after_its_commit_is_swapped_in_and_a_failed_swap_recorded() {
        let requested = fixtures::spread_app(json!({names::RESTORE_REQUESTED: TOKEN}));
        let withdrawn = fixtures::spread_app(json!({}));
        let set = names::restore_job("hello", "uid-1", TOKEN);
        let (_, begun) = run(&requested, &[], &pods(0), Default::default());
        let (jobs, reads) = committed_then_swapping(&set, Some("Failed"));

        // Its Job ended, committed, before any swap began: the swaps are still made.
        let (decision, _) = run(&withdrawn, &jobs[..1], &reads, begun.status.clone());
        let plan = decision.done();
        assert_eq!((plan.replicas, plan.swaps.len()), (0, 2));

        // A swap failed: recorded, so that the app stays stopped after the Jobs are gone.
        let (decision, failed) = run(&withdrawn, &jobs, &reads, begun.status);
        assert_eq!(decision.done(), Plan::runs(0));
        let request = failed.status.restore_request.clone().expect("recorded");
        assert!(interrupted_mid_swap(&request), "{request:?}");
        let (decision, _) = run(&withdrawn, &[], &Reads::default(), failed.status);
        assert_eq!(decision.done(), Plan::runs(0));
    }

    #[test]
    fn a_part_that_failed_to_stage_fails_the_restore_on_the_old_data_and_a_failed_swap_keeps_the_app_stopped()
     {
        use crate::parts::tests::{part_job, set_job};
        let app = fixtures::spread_app(json!({names::RESTORE_REQUESTED: TOKEN}));
        let set = names::restore_job("hello", "uid-1", TOKEN);
        let stage = names::part(&set, 1);
        let mut jobs = vec![
            set_job(&set, Component::Restore, true, Some("Failed")),
            part_job(&set, Component::Restore, 0, Some("Complete")),
            part_job(&set, Component::Restore, 1, Some("Failed")),
        ];
        let reads = fixtures::message(&stage, "error: no space left on device");
        // First, each volume is rid of what its part staged, by an undo part on every volume
        // (replica 1's stage part failed, but may have left its staging), each of which asks
        // the store whether the set was committed after all.
        let undo = names::undo_part(&set, 0);
        let other_undo = names::undo_part(&set, 1);
        let (decision, _) = run(&app, &jobs, &reads, Default::default());
        let plan = decision.done();
        let task = |ordinal| MoverTask::RestorePart {
            set: set.clone(),
            ordinal,
            step: crate::children::RestoreStep::Undo,
        };
        assert_eq!(
            plan.swaps,
            [(undo.clone(), task(0)), (other_undo.clone(), task(1))]
        );
        assert_eq!((plan.replicas, plan.in_progress), (0, true));
        let labels = [(names::PART_OF_LABEL, set.as_str())];
        let undo_job =
            |name: &str, condition| fixtures::job(name, Component::Restore, condition, &labels);
        jobs.push(undo_job(&undo, None));
        jobs.push(undo_job(&other_undo, Some("Complete")));
        let (decision, _) = run(&app, &jobs, &reads, Default::default());
        assert_eq!(decision.done(), Plan::restoring(None), "while one runs");

        // Then the failure is reported, once an undo part said (from the store) that the set
        // was not committed: undone or not, the old data was never replaced.
        jobs.remove(jobs.len() - 2);
        jobs.push(undo_job(&undo, Some("Failed")));
        let mut undo_failed = fixtures::message(&stage, "error: no space left on device");
        undo_failed.add_message(undo.clone(), Some("error: node gone".into()));
        let (decision, record) = run(&app, &jobs, &undo_failed, Default::default());
        assert_eq!(
            decision.done(),
            Plan::recording(),
            "the live data was not replaced: the app starts once that is recorded"
        );
        let (decision, _) = run(&app, &jobs, &undo_failed, record.status.clone());
        assert_eq!(decision.done(), Plan::runs(2));

        // No undo part could ask the store (each failed): whether the set was committed is
        // unknown, and the app must not run on what may be half of it.
        let mut none_asked = jobs.clone();
        none_asked.pop();
        none_asked.pop();
        none_asked.push(undo_job(&undo, Some("Failed")));
        none_asked.push(undo_job(&other_undo, Some("Failed")));
        let mut both_failed = fixtures::message(&stage, "error: no space left on device");
        both_failed.add_message(undo.clone(), Some("error: node gone".into()));
        both_failed.add_message(other_undo.clone(), Some("error: node gone".into()));
        let (decision, unknown) = run(&app, &none_asked, &both_failed, Default::default());
        assert_eq!(decision.done(), Plan::runs(0));
        assert!(unknown.status.unfinished_restore.is_some());

        // An undo that found the set committed after all (its Job failed after its last
        // write): the set is to be swapped in, and the app must not run meanwhile.
        let mut committed = fixtures::message(&stage, "error: no space left on device");
        committed.add_message(
            undo.clone(),
            Some(format!(
                "error: usage: app ns1/hello: restore {set} was committed: its swap (--swap) finishes it, not an undo"
            )),
        );
        let (decision, held) = run(&app, &jobs, &committed, Default::default());
        assert_eq!(decision.done(), Plan::runs(0));
        assert_eq!(
            held.status.unfinished_restore.as_deref(),
            Some(set.as_str())
        );
        let message = record
            .status
            .restore_request
            .and_then(|r| r.message)
            .unwrap_or_default();
        assert!(
            message.contains(&format!(
                "its part Job {stage} failed: error: no space left"
            )) && message.contains("the live data was not replaced"),
            "{message}"
        );

        let swap = names::swap_part(&set, 1);
        let (jobs, reads) = committed_then_swapping(&set, Some("Failed"));
        let (decision, record) = run(&app, &jobs, &reads, Default::default());
        assert_eq!(
            decision.done(),
            Plan::runs(0),
            "never on a mix of old and new"
        );
        let request = record.status.restore_request.expect("acknowledged");
        assert!(interrupted_mid_swap(&request), "{request:?}");
        let message = request.message.unwrap_or_default();
        assert!(
            message.contains(&format!("{swap} failed: error: node gone")),
            "{message}"
        );
    }
}
