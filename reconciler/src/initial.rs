//! The restore before the app's first start (`restoreFromExisting`, or `spec.restoreFrom`
//! another app's backup): its Job runs to completion before the StatefulSet exists. After a
//! failed attempt, a new restore-requested token (`kubectl hellostateful restore NAME`)
//! starts another attempt in a Job of its own. The outcome is recorded on the StatefulSet,
//! so that a lost status write is made good by any later pass.
//!
//! Deciding is pure: `plan` writes status, events and tallies into a `Record`; what no cache
//! holds (the Job's summary, the phase of the source app's backup claim) it asks for (see
//! `reads`).

use std::sync::Arc;

use hellostateful_api::names::{self, Component};
use hellostateful_api::summary::{self, RestoreSummary};
use hellostateful_api::{HelloStatefulStatus, RequestPhase};
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;

use crate::children::{AppRef, MoverTask};
use crate::conditions;
use crate::controller::{RESYNC, WAIT};
use crate::jobs::{self, JobState};
use crate::location::BackupLocation;
use crate::parts;
use crate::reads::{Decision, Reads, Unread, decided};
use crate::record::{Record, Tally, request};
use crate::restores;

/// The action label of initial restore Jobs (on-demand ones say "requested").
pub const ACTION: &str = "created";

/// How the restore before the app's first start ended, as recorded on its StatefulSet.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Backup `id`, of another app when `of` is set (`spec.restoreFrom`).
    Restored {
        id: String,
        of: Option<String>,
    },
    NoBackup,
    /// The restore Job of one pod succeeded, but its pod, whose termination message said
    /// whether a backup was found, was gone before it was read (its node lost, the pod
    /// collected). The volumes hold the newest backup if there was one, else nothing: either
    /// way not a mix, so the app starts, and status says what is not known rather than guess.
    Unknown,
}

impl Outcome {
    /// The record kept on the StatefulSet.
    pub fn record(&self) -> String {
        match self {
            Outcome::Restored { id, of: None } => format!("restored {id}"),
            Outcome::Restored { id, of: Some(app) } => format!("restored {id} of {app}"),
            Outcome::NoBackup => "no-backup".to_string(),
            Outcome::Unknown => "outcome-unknown".to_string(),
        }
    }

    /// What status says of it (the Restoring condition, a retry's acknowledgement).
    fn message(&self) -> String {
        match self {
            Outcome::Restored { id, of: None } => {
                format!("restored backup {id} before the app started")
            }
            Outcome::Restored { id, of: Some(app) } => {
                format!("restored backup {id} of app {app} before the app started")
            }
            Outcome::NoBackup => {
                "no backup of this app exists: it starts with empty volumes".to_string()
            }
            Outcome::Unknown => "the restore Job succeeded, but its pod, which said whether it \
                found a backup, was gone before it was read: the app starts on the newest \
                backup if there was one, else on empty volumes (kubectl hellostateful backups \
                list shows what exists)"
                .to_string(),
        }
    }

    pub fn parse(record: &str) -> Option<Self> {
        match record {
            "no-backup" => Some(Outcome::NoBackup),
            "outcome-unknown" => Some(Outcome::Unknown),
            _ => record.strip_prefix("restored ").map(|rest| {
                let (id, of) = match rest.split_once(" of ") {
                    Some((id, app)) => (id, Some(app.to_string())),
                    None => (rest, None),
                };
                Outcome::Restored {
                    id: id.to_string(),
                    of,
                }
            }),
        }
    }
}

/// Where the initial restore stands.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// The app must not start yet: look again as the action says.
    Wait(Action),
    /// The restore ended: the app starts, and the outcome is recorded.
    Done(Outcome),
}

#[derive(Debug, PartialEq)]
pub struct Plan {
    pub step: Step,
    /// The restore Job to start: its name and task.
    pub start: Option<(String, MoverTask)>,
    /// The part Jobs that end a restore in parts, to start: name and task (see
    /// `parts::restore_state`).
    pub swaps: Vec<(String, MoverTask)>,
    /// End the finished restore Jobs that hold the source app's backup claim (see
    /// `controller::release_source_claim`): their failure is on record.
    pub release_source: bool,
}

impl Plan {
    fn waiting(action: Action) -> Self {
        Self {
            step: Step::Wait(action),
            start: None,
            swaps: Vec::new(),
            release_source: false,
        }
    }
}

/// Whether `job` is an attempt of this app's initial restore.
pub fn is_attempt(job: &Job, uid: &str) -> bool {
    let labels = job.labels();
    jobs::component(job) == Some(Component::Restore)
        && labels.get(names::ACTION_LABEL).map(String::as_str) == Some(ACTION)
        && job.owner_references().iter().any(|owner| owner.uid == uid)
}

/// Whether the app, not yet made, has an initial restore to run or to follow: one is asked
/// for, or one is under way. An initial restore under way (a Job of it running, or a set
/// made in parts swapped in on some volumes and not yet all) runs to its end even if
/// restoreFromExisting was turned off meanwhile: the app must not start while the mover
/// writes, nor on a mix of volumes. An attempt that ended holds nothing, whatever Jobs of
/// it stay for their TTL (a failed set's stage and undo parts, which succeeded): turning
/// the restore off then starts the app on its empty volumes.
///
/// Jobs go (their TTL ends, someone deletes them), so the app's status holds it too: an
/// attempt whose end no pass recorded yet (Restoring still True), or one that failed
/// after it began replacing the live data (or without saying whether it did; recorded in
/// `status.unfinishedRestore` until an attempt succeeds), runs on until a retry finishes
/// it, turned off or not: the volumes may hold a mix.
pub fn wanted(app: &AppRef, jobs: &[Arc<Job>], status: &HelloStatefulStatus) -> bool {
    let spec = &app.app.spec;
    let under_way = jobs.iter().any(|job| {
        is_attempt(job, &app.uid) && (jobs::is_active(job) || parts::mid_swap(job, jobs))
    });
    let restoring = status
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::RESTORING);
    let unrecorded = restoring.is_some_and(|c| c.status == "True");
    let interrupted = restoring.is_some_and(|c| {
        c.reason == "RestoreFailed" && c.message.contains(hellostateful_mover::SWAP_INTERRUPTED)
    });
    spec.restore_from_existing
        || spec.restore_from.is_some()
        || under_way
        || unrecorded
        || interrupted
        || status.unfinished_restore.is_some()
}

/// For an app about to be made without a restore: if one could not run and was then turned
/// off, status says why the app starts empty.
pub fn turned_off(record: &mut Record) {
    let reason = record
        .conditions()
        .reason(conditions::RESTORING)
        .map(str::to_string);
    if matches!(
        reason.as_deref(),
        Some("RestoreFailed" | "RestoreSourceMissing")
    ) {
        record.conditions().set(
            conditions::RESTORING,
            false,
            "NotRestored",
            "no restore is asked for any more (spec.restoreFrom and restoreFromExisting): the app starts with empty volumes",
        );
    }
}

pub fn plan(
    app: &AppRef,
    location: &BackupLocation,
    jobs: &[Arc<Job>],
    reads: &Reads,
    record: &mut Record,
) -> Decision<Plan> {
    decided(decide(app, location, jobs, reads, record))
}

fn decide(
    app: &AppRef,
    location: &BackupLocation,
    jobs: &[Arc<Job>],
    reads: &Reads,
    record: &mut Record,
) -> Result<Plan, Unread> {
    // `spec.restoreFrom`: another app's backup, which must exist (the user asked for it).
    let requested = app.app.spec.restore_from.as_ref();
    let source = requested
        .map(|from| from.name.clone())
        .filter(|name| *name != app.name);
    let first = names::initial_restore_job(&app.name, &app.uid, None);
    let retry = record.restore_token(app.app);
    let find = |name: &str| jobs.iter().find(|job| job.name_any() == name);
    let already_failed = record.conditions().reason(conditions::RESTORING) == Some("RestoreFailed");
    // Status says an attempt failed (whatever its Job's own state: a set whose commit is
    // unknown failed though its Job succeeded), or the first attempt's Job failed and no
    // pass said so yet: a new token retries.
    let first_failed = already_failed
        || find(&first).is_some_and(|job| matches!(jobs::state(job), JobState::Failed(_)));
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
    let acknowledge = |record: &mut Record, phase, message: &str| {
        if let Some(token) = retrying {
            record.status.restore_request = Some(request(token, phase, Some(&job_name), message));
        }
    };
    let what = requested.map_or("the newest backup".to_string(), |from| from.describe());
    let task = MoverTask::initial_restore(app, location);
    let (state, swaps) = match find(&job_name) {
        Some(job) => {
            let (state, swaps) = parts::restore_state(job, jobs, reads)?;
            (Some(state), swaps)
        }
        // Made before (its parts are here), and gone (its TTL ended, or someone deleted
        // it) before a pass recorded its end: its name is not made again beside its parts,
        // and whether it committed is unknown. Once no part runs, it failed; a retry (a new
        // token, a set of its own) finishes or undoes it first.
        None if restores::has_parts(jobs, &job_name) => {
            if restores::running(jobs).is_some() {
                return Ok(Plan::waiting(Action::requeue(WAIT)));
            }
            let failed = format!(
                "{}: Job {job_name} is gone (its TTL ended, or it was deleted) before its end was recorded, so whether it committed the restore is unknown",
                hellostateful_mover::SWAP_INTERRUPTED
            );
            (Some(JobState::Failed(failed)), Vec::new())
        }
        None => (None, Vec::new()),
    };
    match state {
        // A failure is reported once; only a new token starts another attempt.
        None | Some(JobState::Failed(_))
            if retrying.is_none() && first_failed && already_failed =>
        {
            // Ready may have said something else since (a retry's Job refused, its token
            // then withdrawn): it says again why the app waits.
            if let Some(failure) = record.conditions().message(conditions::RESTORING) {
                let failure = failure.to_owned();
                record
                    .conditions()
                    .set(conditions::READY, false, "RestoreFailed", &failure);
            }
            Ok(Plan {
                // Reported by an earlier pass: the source's claim is released.
                release_source: requested.is_some(),
                ..Plan::waiting(Action::await_change())
            })
        }
        // Another attempt's Job or part still runs (made by a pass whose status write was
        // lost, before the token that replaced its own): one attempt at a time, each
        // starting from what the one before left on the volumes.
        None if restores::running(jobs).is_some() => Ok(Plan::waiting(Action::requeue(WAIT))),
        None => {
            if let Some(source) = &source
                && let Some(missing) = missing_source_backups(app, location, source, reads)?
            {
                acknowledge(record, RequestPhase::Failed, &missing);
                if record.conditions().set(
                    conditions::RESTORING,
                    false,
                    "RestoreSourceMissing",
                    &missing,
                ) {
                    record.note(
                        EventType::Warning,
                        "RestoreSourceMissing",
                        "Restore",
                        missing.clone(),
                    );
                }
                record
                    .conditions()
                    .set(conditions::READY, false, "RestoreSourceMissing", &missing);
                // The claim may yet be made or bound: look again now and then.
                return Ok(Plan::waiting(Action::requeue(RESYNC)));
            }
            let message = running(record, &job_name, &what, &task);
            acknowledge(record, RequestPhase::Running, &message);
            record.note(
                EventType::Normal,
                "RestoreStarted",
                "Restore",
                format!("restoring {what} with Job {job_name} before the app starts"),
            );
            Ok(Plan {
                start: Some((job_name.clone(), task)),
                ..Plan::waiting(Action::requeue(WAIT))
            })
        }
        Some(JobState::Running) => {
            let message = running(record, &job_name, &what, &task);
            acknowledge(record, RequestPhase::Running, &message);
            Ok(Plan {
                swaps,
                ..Plan::waiting(Action::requeue(WAIT))
            })
        }
        // Another attempt's part still runs (an undo, say): the app starts once no mover
        // writes its volumes.
        Some(JobState::Succeeded) if restores::running(jobs).is_some() => {
            Ok(Plan::waiting(Action::requeue(WAIT)))
        }
        Some(JobState::Succeeded) => {
            let summary = match reads
                .message(&job_name)?
                .and_then(summary::parse_last_line::<RestoreSummary>)
            {
                Some(summary) => Some(summary),
                None => swapped_in(&job_name, jobs, reads)?,
            };
            let outcome = match summary {
                Some(RestoreSummary {
                    restored: true, id, ..
                }) => Outcome::Restored {
                    id: id.unwrap_or_default(),
                    of: source,
                },
                Some(_) => Outcome::NoBackup,
                // Never taken for "no backup": only the mover's own words say that.
                None => Outcome::Unknown,
            };
            acknowledge(record, RequestPhase::Succeeded, &outcome.message());
            if let (Some(request), Outcome::Restored { id, .. }) =
                (record.status.restore_request.as_mut(), &outcome)
                && retrying.is_some()
            {
                request.backup_id = Some(id.clone());
            }
            record.status.unfinished_restore = None;
            Ok(Plan {
                step: Step::Done(outcome),
                ..Plan::waiting(Action::await_change())
            })
        }
        Some(JobState::Failed(_)) if already_failed && requested.is_some() => Ok(Plan {
            // Reported by an earlier pass: the source's claim is released.
            release_source: true,
            ..Plan::waiting(Action::await_change())
        }),
        Some(JobState::Failed(reason)) => {
            let interrupted = hellostateful_mover::SWAP_INTERRUPTED;
            let mut message = match find(&job_name) {
                Some(job) => parts::restore_failure(job, reason, jobs, reads)?,
                None => reason,
            };
            // Recorded until an attempt succeeds: a later attempt that fails otherwise (its
            // part on a lost node, say) leaves the earlier one unfinished all the same.
            match &record.status.unfinished_restore {
                Some(earlier) if *earlier != job_name && !message.contains(interrupted) => {
                    message = format!(
                        "{message}; and {interrupted} by the earlier restore Job {earlier}, which no attempt has finished since"
                    );
                }
                None if message.contains(interrupted) => {
                    record.status.unfinished_restore = Some(job_name.clone());
                }
                _ => {}
            }
            let instead = if message.contains(interrupted) {
                format!(
                    "as that restore must finish first: the volumes may hold the backup on some and not on others, and the app never starts on such a mix, even with the restore turned off. To start over instead, delete the app (`kubectl hellostateful delete {}`: its volumes go with it) and create it again",
                    app.name
                )
            } else {
                match requested {
                    Some(from) => format!(
                        "correct spec.restoreFrom if it names the wrong backup (`kubectl hellostateful backups {}` lists them) and retry, or remove spec.restoreFrom and set spec.restoreFromExisting to false to start without a restore",
                        from.name
                    ),
                    None => "or set spec.restoreFromExisting to false to start without a restore"
                        .to_string(),
                }
            };
            let full = format!(
                "restore Job {job_name} failed: {message}. The app is not started, so nothing is overwritten. Fix the cause, then retry with `kubectl hellostateful restore {name}` (a new {annotation} token), {instead}",
                name = app.name,
                annotation = names::RESTORE_REQUESTED,
            );
            acknowledge(record, RequestPhase::Failed, &full);
            if record
                .conditions()
                .set(conditions::RESTORING, false, "RestoreFailed", &full)
            {
                record.tallies.push(Tally::RestoreFailed);
                record.note(EventType::Warning, "RestoreFailed", "Restore", full.clone());
            }
            record
                .conditions()
                .set(conditions::READY, false, "RestoreFailed", &full);
            Ok(Plan::waiting(Action::await_change()))
        }
    }
}

/// For a restore made in parts whose Job's pod, which said what was restored, is gone
/// (collected): it ended only once every volume swapped the set in (`parts::restore_state`),
/// so it restored, and a swap part's pod, if one is left, says which backup. Else the id is
/// unknown, and said so: never taken for "no backup", which would say the volumes are empty.
fn swapped_in(
    set: &str,
    jobs: &[Arc<Job>],
    reads: &Reads,
) -> Result<Option<RestoreSummary>, Unread> {
    let Some(replicas) = jobs
        .iter()
        .find(|job| job.name_any() == set)
        .and_then(|job| parts::count(job))
    else {
        return Ok(None);
    };
    for ordinal in 0..replicas {
        let said = reads
            .message(&names::swap_part(set, ordinal))?
            .and_then(summary::parse_last_line::<RestoreSummary>);
        if let Some(summary) = said.filter(|s| s.restored && s.id.is_some()) {
            return Ok(Some(summary));
        }
    }
    Ok(Some(RestoreSummary {
        restored: true,
        id: Some(UNKNOWN_ID.to_string()),
        ..RestoreSummary::default()
    }))
}

/// The id recorded for a restore whose pods, which named its backup, are all gone.
const UNKNOWN_ID: &str = "(id unknown: the pods that named it are gone)";

/// Why the backups of app `source` (`spec.restoreFrom`) cannot be read, if they cannot:
/// in a node directory they are reached only through that app's backup claim, which
/// outlives the app and exists once it has backed up.
fn missing_source_backups(
    app: &AppRef,
    location: &BackupLocation,
    source: &str,
    reads: &Reads,
) -> Result<Option<String>, Unread> {
    if !matches!(location, BackupLocation::NodeRoot(_)) {
        // A claim of the namespace holds every app's backups: the mover says if there is none.
        return Ok(None);
    }
    let claim_name = names::backup_claim(source);
    let why = match reads.claim_phase(&claim_name)? {
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
pub fn finish(app: &AppRef, outcome: &Outcome, record: &mut Record) {
    if matches!(outcome, Outcome::Restored { .. }) {
        record.status.is_restored = true;
    }
    if !record.conditions().is_true(conditions::RESTORING) {
        return;
    }
    let message = outcome.message();
    let (reason, event) = match outcome {
        Outcome::Restored { id, of } => (
            "Restored",
            match of {
                Some(app) => format!("restored backup {id} of app {app}; starting the app"),
                None => format!("restored backup {id}; starting the app"),
            },
        ),
        Outcome::NoBackup => (
            "NoBackup",
            format!(
                "restoreFromExisting: no backup of {}/{} exists; starting with empty volumes",
                app.namespace, app.name
            ),
        ),
        Outcome::Unknown => ("RestoreOutcomeUnknown", message.clone()),
    };
    if record
        .conditions()
        .set(conditions::RESTORING, false, reason, &message)
    {
        if matches!(outcome, Outcome::Restored { .. }) {
            record.tallies.push(Tally::RestoreSucceeded);
        }
        let kind = if *outcome == Outcome::Unknown {
            EventType::Warning
        } else {
            EventType::Normal
        };
        record.note(kind, reason, "Restore", event);
    }
}

/// Conditions while the restore of a newly created app runs; returns what it says.
fn running(record: &mut Record, job_name: &str, what: &str, task: &MoverTask) -> String {
    let message = match task {
        MoverTask::RestoreCommit { replicas, .. } => format!(
            "{}, before the app starts",
            parts::restore_steps(job_name, *replicas, what)
        ),
        _ => format!("Job {job_name} restores {what} before the app starts"),
    };
    let mut conditions = record.conditions();
    conditions.set(conditions::RESTORING, true, "RestoreRunning", &message);
    conditions.set(
        conditions::READY,
        false,
        "Restoring",
        "the app starts once its data is restored",
    );
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{self, app, reasons};
    use crate::reads::Read;
    use hellostateful_api::{HelloStateful, HelloStatefulStatus};
    use serde_json::json;

    /// A Job of this app's initial restore, ended as `condition` says (None: runs).
    fn attempt(name: &str, condition: Option<&str>) -> Arc<Job> {
        fixtures::job(
            name,
            Component::Restore,
            condition,
            &[(names::ACTION_LABEL, ACTION)],
        )
    }

    fn run(
        app: &HelloStateful,
        location: &BackupLocation,
        jobs: &[Arc<Job>],
        reads: &Reads,
        status: HelloStatefulStatus,
    ) -> (Decision<Plan>, Record) {
        let app_ref = AppRef::new(app).expect("app");
        let mut record = Record::new(status, Some(1));
        (plan(&app_ref, location, jobs, reads, &mut record), record)
    }

    fn claim() -> BackupLocation {
        BackupLocation::Claim("backups".into())
    }

    #[test]
    fn a_new_app_starts_its_restore_job_and_stays_stopped() {
        let app = app(json!({"restoreFromExisting": true}), json!({}));
        let (decision, mut record) =
            run(&app, &claim(), &[], &Reads::default(), Default::default());
        let plan = decision.done();
        assert_eq!(plan.step, Step::Wait(Action::requeue(WAIT)));
        let first = names::initial_restore_job("hello", "uid-1", None);
        assert_eq!(
            plan.start.as_ref().map(|(name, _)| name.as_str()),
            Some(first.as_str())
        );
        assert!(record.conditions().is_true(conditions::RESTORING));
        assert_eq!(reasons(&record), ["RestoreStarted"]);
        assert!(wanted(
            &AppRef::new(&app).expect("app"),
            &[],
            &HelloStatefulStatus::default()
        ));
    }

    #[test]
    fn a_restore_whose_pod_is_gone_before_it_was_read_is_never_taken_for_no_backup() {
        let app = app(json!({"restoreFromExisting": true}), json!({}));
        let first = names::initial_restore_job("hello", "uid-1", None);
        let succeeded = fixtures::job(
            &first,
            Component::Restore,
            Some("Complete"),
            &[(names::ACTION_LABEL, ACTION)],
        );
        let mut pod_gone = Reads::default();
        pod_gone.add_message(first.clone(), None);
        let (decision, mut record) =
            run(&app, &claim(), &[succeeded], &pod_gone, Default::default());
        let outcome = decision.done().step;
        assert_eq!(outcome, Step::Done(Outcome::Unknown));
        assert_eq!(
            Outcome::parse(&Outcome::Unknown.record()),
            Some(Outcome::Unknown)
        );
        record
            .conditions()
            .set(conditions::RESTORING, true, "RestoreRunning", "");
        finish(
            &AppRef::new(&app).expect("app"),
            &Outcome::Unknown,
            &mut record,
        );
        assert!(!record.status.is_restored, "not known to be restored");
        assert_eq!(reasons(&record), ["RestoreOutcomeUnknown"]);
        let restoring = record
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::RESTORING)
            .expect("Restoring");
        assert!(restoring.message.contains("was gone before it was read"));
    }

    #[test]
    fn turned_off_the_restore_holds_the_app_only_while_an_attempt_is_under_way() {
        let app = app(json!({"restoreFromExisting": false}), json!({}));
        let app = AppRef::new(&app).expect("app");
        let wanted = |jobs: &[Arc<Job>]| wanted(&app, jobs, &HelloStatefulStatus::default());
        let set = names::initial_restore_job("hello", "uid-1", None);
        fn labelled(name: &str, condition: Option<&str>, extra: (&str, &str)) -> Arc<Job> {
            fixtures::job(
                name,
                Component::Restore,
                condition,
                &[(names::ACTION_LABEL, ACTION), extra],
            )
        }
        let parts = |condition| labelled(&set, condition, (names::PARTS_LABEL, "2"));
        let part =
            |name: String, condition| labelled(&name, condition, (names::PART_OF_LABEL, &set));
        // A failed set: its stage parts and their undos succeeded, and stay for their TTL.
        let failed = [
            parts(Some("Failed")),
            part(names::part(&set, 0), Some("Complete")),
            part(names::part(&set, 1), Some("Complete")),
            part(names::undo_part(&set, 0), Some("Complete")),
            part(names::undo_part(&set, 1), Some("Complete")),
        ];
        assert!(!wanted(&failed), "an attempt that ended holds nothing");
        // A stage part still running: the mover writes a volume.
        let staging = [parts(None), part(names::part(&set, 0), None)];
        assert!(wanted(&staging));
        // Committed and swapped in on volume 0 only: volume 1 must get it before the app runs.
        let half = [
            parts(Some("Complete")),
            part(names::swap_part(&set, 0), Some("Complete")),
        ];
        assert!(wanted(&half));
        let whole = [
            parts(Some("Complete")),
            part(names::swap_part(&set, 0), Some("Complete")),
            part(names::swap_part(&set, 1), Some("Complete")),
        ];
        assert!(!wanted(&whole), "swapped in everywhere: done");
    }

    /// Jobs go; status holds the app too: an attempt whose end no pass recorded, or one
    /// that failed midway through replacing the live data, keeps the app from starting with
    /// the restore turned off and none of its Jobs left. One that failed before that does
    /// not.
    #[test]
    fn turned_off_the_restore_holds_the_app_while_status_says_an_attempt_may_have_begun_swapping() {
        let app = app(json!({"restoreFromExisting": false}), json!({}));
        let app = AppRef::new(&app).expect("app");
        let holds = |status, reason, message: &str| {
            let mut record = Record::new(HelloStatefulStatus::default(), Some(1));
            record
                .conditions()
                .set(conditions::RESTORING, status, reason, message);
            wanted(&app, &[], &record.status)
        };
        assert!(holds(true, "RestoreRunning", "Job x restores"));
        let interrupted = format!(
            "restore Job x failed: {}: its part Job x-swap-1 failed",
            hellostateful_mover::SWAP_INTERRUPTED
        );
        assert!(holds(false, "RestoreFailed", &interrupted));
        assert!(!holds(
            false,
            "RestoreFailed",
            "restore Job x failed: no space left"
        ));
        assert!(!holds(
            false,
            "NotRestored",
            "no restore is asked for any more"
        ));
    }

    #[test]
    fn a_new_app_on_several_nodes_restores_in_parts_or_starts_empty() {
        use crate::children::RestoreStep;
        let mut app = fixtures::spread_app(json!({}));
        app.spec.restore_from_existing = true;
        let location =
            crate::location::resolve(&app.spec, &[], &[]).expect("object store location");
        let first = names::initial_restore_job("hello", "uid-1", None);
        let (decision, _) = run(&app, &location, &[], &Reads::default(), Default::default());
        let commit = MoverTask::RestoreCommit {
            replicas: 2,
            from: "latest".into(),
            if_exists: true,
            source: None,
        };
        assert_eq!(decision.done().start, Some((first.clone(), commit)));

        let committed =
            crate::parts::tests::set_job(&first, Component::Restore, true, Some("Complete"));
        let restored = fixtures::message(&first, r#"{"restored":true,"id":"20261129T150001Z"}"#);
        let (decision, _) = run(
            &app,
            &location,
            std::slice::from_ref(&committed),
            &restored,
            Default::default(),
        );
        let plan = decision.done();
        assert_eq!(plan.step, Step::Wait(Action::requeue(WAIT)));
        let swap = |ordinal| MoverTask::RestorePart {
            set: first.clone(),
            ordinal,
            step: RestoreStep::Swap,
        };
        assert_eq!(
            plan.swaps,
            [
                (names::swap_part(&first, 0), swap(0)),
                (names::swap_part(&first, 1), swap(1)),
            ]
        );

        // No backup at all: nothing was committed, nothing to swap; the app starts empty.
        let none = fixtures::message(&first, r#"{"restored":false,"reason":"NoBackup"}"#);
        let (decision, _) = run(&app, &location, &[committed], &none, Default::default());
        let plan = decision.done();
        assert_eq!(plan.step, Step::Done(Outcome::NoBackup));
        assert!(plan.swaps.is_empty());

        // Another app's backups: in parts too, the Job naming whose.
        app.spec.restore_from = serde_json::from_value(json!({"name": "old"})).expect("from");
        let (decision, _) = run(&app, &location, &[], &Reads::default(), Default::default());
        let start = decision.done().start.map(|(_, task)| task);
        let from_old = MoverTask::RestoreCommit {
            replicas: 2,
            from: "latest".into(),
            if_exists: false,
            source: Some("old".into()),
        };
        assert_eq!(start, Some(from_old));
    }

    #[test]
    fn another_apps_backups_out_of_reach_keep_the_app_stopped_and_say_why() {
        let app = app(json!({"restoreFrom": {"name": "old"}}), json!({}));
        let node_root = BackupLocation::NodeRoot("/tmp/backup".into());
        let (decision, _) = run(&app, &node_root, &[], &Reads::default(), Default::default());
        let Decision::Read(read) = decision else {
            panic!("the source's backup claim is read first");
        };
        assert_eq!(read, Read::ClaimPhase(names::backup_claim("old")));

        let mut reads = Reads::default();
        reads.add_claim_phase(names::backup_claim("old"), None);
        let (decision, mut record) = run(&app, &node_root, &[], &reads, Default::default());
        let plan = decision.done();
        assert_eq!(plan.step, Step::Wait(Action::requeue(RESYNC)));
        assert_eq!(plan.start, None);
        assert_eq!(
            record.conditions().reason(conditions::READY),
            Some("RestoreSourceMissing")
        );
        assert_eq!(reasons(&record), ["RestoreSourceMissing"]);

        reads.add_claim_phase(names::backup_claim("old"), Some("Bound".into()));
        let (decision, _) = run(&app, &node_root, &[], &reads, Default::default());
        assert!(decision.done().start.is_some());
    }

    #[test]
    fn a_failed_attempt_is_reported_once_and_only_a_new_token_retries_it() {
        let app = app(json!({"restoreFromExisting": true}), json!({}));
        let first = names::initial_restore_job("hello", "uid-1", None);
        let failed = [attempt(&first, Some("Failed"))];
        let reads = fixtures::message(&first, "error: backup 20261129T150001Z is damaged");
        let (decision, record) = run(&app, &claim(), &failed, &reads, Default::default());
        assert_eq!(decision.done(), Plan::waiting(Action::await_change()));
        assert_eq!(record.tallies, [Tally::RestoreFailed]);
        assert_eq!(reasons(&record), ["RestoreFailed"]);
        let reported = record.status;

        // Reported: a later pass, with the Job or after its TTL removed it, reads and says nothing.
        for jobs in [&failed[..], &[]] {
            let (decision, record) = run(&app, &claim(), jobs, &Reads::default(), reported.clone());
            assert_eq!(decision.done(), Plan::waiting(Action::await_change()));
            assert!(record.notes.is_empty() && record.tallies.is_empty());
        }

        let retried = fixtures::app(
            json!({"restoreFromExisting": true}),
            json!({names::RESTORE_REQUESTED: "t2"}),
        );
        let (decision, record) = run(&retried, &claim(), &[], &Reads::default(), reported);
        let retry = names::initial_restore_job("hello", "uid-1", Some("t2"));
        assert_eq!(
            decision.done().start.map(|(name, _)| name),
            Some(retry.clone())
        );
        let request = record
            .status
            .restore_request
            .as_ref()
            .expect("acknowledged");
        assert_eq!(
            (request.phase, request.job.as_deref()),
            (RequestPhase::Running, Some(retry.as_str()))
        );

        // Its outcome acknowledges the request, naming the backup restored.
        let finished = [
            attempt(&first, Some("Failed")),
            attempt(&retry, Some("Complete")),
        ];
        let reads = fixtures::message(&retry, r#"{"restored":true,"id":"20261129T150001Z"}"#);
        let (_, record) = run(&retried, &claim(), &finished, &reads, record.status);
        let request = record.status.restore_request.expect("acknowledged");
        assert_eq!(
            (request.phase, request.backup_id.as_deref()),
            (RequestPhase::Succeeded, Some("20261129T150001Z"))
        );
    }

    #[test]
    fn a_finished_restore_of_another_app_is_done_with_its_backup_and_recorded() {
        let app = app(json!({"restoreFrom": {"name": "old"}}), json!({}));
        let first = names::initial_restore_job("hello", "uid-1", None);
        let finished = [attempt(&first, Some("Complete"))];
        let reads = fixtures::message(&first, r#"{"restored":true,"id":"20261129T150001Z"}"#);
        let (decision, mut record) = run(&app, &claim(), &finished, &reads, Default::default());
        let outcome = Outcome::Restored {
            id: "20261129T150001Z".into(),
            of: Some("old".into()),
        };
        assert_eq!(decision.done().step, Step::Done(outcome.clone()));
        assert_eq!(Outcome::parse(&outcome.record()), Some(outcome.clone()));

        record
            .conditions()
            .set(conditions::RESTORING, true, "RestoreRunning", "");
        finish(&AppRef::new(&app).expect("app"), &outcome, &mut record);
        assert!(record.status.is_restored);
        assert_eq!(
            record.conditions().reason(conditions::RESTORING),
            Some("Restored")
        );
        assert_eq!(record.tallies, [Tally::RestoreSucceeded]);
    }
}
