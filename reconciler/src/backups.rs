//! Backups: the schedule's CronJob, on-demand requests (one Job per token), and what status
//! says of the newest finished backup Job.
//!
//! An app whose replicas' volumes may be on different nodes is backed up in parts (see
//! `children::backup_task`): its backup Job, scheduled or on demand, seals the parts and is
//! made suspended, and `parts` makes one part Job per replica.
//!
//! Deciding is pure. `plan` writes the status, events and tallies it decides on into a
//! `Record`, and returns the writes to make; a finished Job's summary, which no cache holds,
//! it asks for (see `reads`).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use hellostateful_api::names::{self, Component};
use hellostateful_api::summary::{self, BackupSummary};
use hellostateful_api::{HelloStatefulSpec, LastBackup, RequestPhase};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::ResourceExt;
use kube::runtime::events::EventType;

use crate::Error;
use crate::children::{self, AppRef, MoverTask, Settings};
use crate::conditions;
use crate::jobs::{self, JobState};
use crate::kept::{CronJobView, Kept};
use crate::location::BackupLocation;
use crate::parts;
use crate::reads::{Decision, Reads, Unread, decided};
use crate::record::{Record, Tally, request};

/// What the cache holds of the app's backups.
pub struct Observed<'a> {
    pub cronjob: Option<Arc<Kept<CronJobView>>>,
    pub jobs: &'a [Arc<Job>],
    /// A restore is under way: backups wait, and the schedule is suspended.
    pub restoring: bool,
    /// The next backup reads every file again (see `full_read_due`).
    pub full_read_due: bool,
    /// The app's backup claim (node directory target), made with the app, not yet bound to
    /// its volume as cached: a Job that mounts it now is unschedulable until it is, and the
    /// scheduler may try it again only after the mover's patience ran out. No Job is made
    /// (nor the schedule's CronJob, which would make one) until it is bound.
    pub unbound_claim: Option<String>,
}

/// Whether the next backup of an app with `spec` must read every file again, at `now`: the
/// newest that did (`last_full_read`, status) is `spec.backup.fullReadEverySeconds` old,
/// or none is known.
pub fn full_read_due(
    spec: &HelloStatefulSpec,
    last_full_read: Option<&str>,
    now: DateTime<Utc>,
) -> bool {
    let Some(every) = spec.full_read_every() else {
        return false;
    };
    let Some(last) = last_full_read.and_then(|t| DateTime::parse_from_rfc3339(t).ok()) else {
        return true;
    };
    let age = now.signed_duration_since(last.with_timezone(&Utc));
    age.to_std().is_ok_and(|age| age >= every)
}

/// What to do with the schedule's CronJob.
#[derive(Debug)]
pub enum Schedule {
    /// Apply it, unless the cached one (at version `cached`) is known to be in line.
    Apply {
        desired: Box<CronJob>,
        cached: Option<u64>,
    },
    Delete,
    Keep,
}

#[derive(Debug)]
pub struct Plan {
    pub schedule: Schedule,
    /// The on-demand backup Job to start, by name, and what it does.
    pub start: Option<(String, MoverTask)>,
}

pub fn plan(
    app: &AppRef,
    location: &BackupLocation,
    settings: &Settings,
    observed: &Observed,
    reads: &Reads,
    record: &mut Record,
) -> Result<Decision<Plan>, Error> {
    let schedule = schedule(app, location, settings, observed)?;
    let requests = on_demand(app, location, observed, reads, record)
        .and_then(|start| newest_finished(observed.jobs, reads, record).map(|()| start));
    Ok(decided(requests.map(|start| Plan { schedule, start })))
}

fn schedule(
    app: &AppRef,
    location: &BackupLocation,
    settings: &Settings,
    observed: &Observed,
) -> Result<Schedule, Error> {
    let Some(schedule) = &app.app.spec.backup_schedule else {
        let live = observed.cronjob.as_ref().is_some_and(|c| !c.deleting);
        return Ok(if live {
            Schedule::Delete
        } else {
            Schedule::Keep
        });
    };
    if observed.cronjob.is_none() && observed.unbound_claim.is_some() {
        return Ok(Schedule::Keep);
    }
    let mut desired = children::cronjob(app, schedule, location, settings, observed.full_read_due)?;
    if observed.restoring
        && let Some(spec) = desired.spec.as_mut()
    {
        spec.suspend = Some(true);
    }
    Ok(Schedule::Apply {
        desired: Box::new(desired),
        cached: observed.cronjob.as_ref().map(|c| c.view.version),
    })
}

/// An on-demand backup: one Job per token, acknowledged with the snapshot id. Returns the
/// Job to start, if any.
fn on_demand(
    app: &AppRef,
    location: &BackupLocation,
    observed: &Observed,
    reads: &Reads,
    record: &mut Record,
) -> Result<Option<(String, MoverTask)>, Unread> {
    let Some(token) = record.backup_token(app.app) else {
        return Ok(None);
    };
    // `backup --full` names its own request, so a later plain request reads as usual.
    let reread = observed.full_read_due
        || app
            .app
            .annotations()
            .get(names::BACKUP_REREAD)
            .map(String::as_str)
            == Some(token);
    let task = children::backup_task(app, location, reread);
    let job_name = names::backup_job(&app.name, &app.uid, token);
    // Made by an earlier pass: status says its Job copies.
    let made = record.status.backup_request.as_ref().is_some_and(|ack| {
        ack.token == token
            && ack.phase == RequestPhase::Running
            && ack.job.as_deref() == Some(job_name.as_str())
    });
    let copying = request(
        token,
        RequestPhase::Running,
        Some(&job_name),
        match task {
            MoverTask::Seal { replicas, .. } => format!(
                "Jobs {} to {} copy each replica's data on its node, then Job {job_name} seals them into one backup",
                names::part(&job_name, 0),
                names::part(&job_name, replicas - 1),
            ),
            _ => format!("Job {job_name} copies the app's data"),
        },
    );
    let job = observed.jobs.iter().find(|job| job.name_any() == job_name);
    let mut start = None;
    let status = match job.map(|job| (job, jobs::state(job))) {
        // Not in the cache, which may lag behind the pass that made it: read afresh.
        None if made && reads.job_exists(&job_name)? => copying,
        // Gone (deleted, or expired while the reconciler was down) before its outcome was
        // recorded. Made again, a second mover would copy beside an orphaned pod of the
        // first, which may still run.
        None if made => {
            let message = format!(
                "backup failed: its Job {job_name} is gone (deleted, or expired) before its \
                 outcome was recorded; whether it stored a snapshot is unknown (kubectl \
                 hellostateful backups {name} lists the stored ones); earlier backups are \
                 intact; ask for another (kubectl hellostateful backup {name})",
                name = app.name
            );
            record.note(
                EventType::Warning,
                "BackupFailed",
                "Backup",
                message.clone(),
            );
            request(token, RequestPhase::Failed, Some(&job_name), message)
        }
        None if observed.restoring => request(
            token,
            RequestPhase::Pending,
            None,
            "waiting for the restore to finish",
        ),
        None if observed.unbound_claim.is_some() => request(
            token,
            RequestPhase::Pending,
            None,
            format!(
                "waiting for backup claim {} to be bound to its volume",
                observed.unbound_claim.as_deref().unwrap_or_default()
            ),
        ),
        None => {
            record.note(
                EventType::Normal,
                "BackupStarted",
                "Backup",
                format!("backing up with Job {job_name}"),
            );
            start = Some((job_name.clone(), task));
            copying
        }
        Some((_, JobState::Running)) => copying,
        Some((_, JobState::Succeeded)) => {
            let outcome = reads
                .message(&job_name)?
                .and_then(summary::parse_last_line::<BackupSummary>);
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
        Some((job, JobState::Failed(reason))) => {
            let message = parts::failure(job, reason, observed.jobs, reads)?;
            request(
                token,
                RequestPhase::Failed,
                Some(&job_name),
                format!("backup failed: {message}; earlier backups are intact"),
            )
        }
    };
    record.status.backup_request = Some(status);
    Ok(start)
}

/// lastBackup and the BackupSucceeded / BackupFailed conditions, from the newest finished
/// backup Job (scheduled or on demand), with an event and a tally once per Job.
fn newest_finished(jobs: &[Arc<Job>], reads: &Reads, record: &mut Record) -> Result<(), Unread> {
    let newest = jobs
        .iter()
        .filter(|job| jobs::component(job) == Some(Component::Backup))
        // A part's outcome is its sealing Job's.
        .filter(|job| !job.labels().contains_key(names::PART_OF_LABEL))
        .filter(|job| jobs::state(job) != JobState::Running)
        .max_by_key(|job| jobs::finished_at(job));
    let Some(job) = newest else {
        return Ok(());
    };
    let job_name = job.name_any();
    match jobs::state(job) {
        JobState::Succeeded => {
            let recorded = record.status.last_backup.as_ref();
            if recorded.and_then(|b| b.job.as_deref()) == Some(job_name.as_str()) {
                return Ok(());
            }
            let Some(outcome) = reads
                .message(&job_name)?
                .and_then(summary::parse_last_line::<BackupSummary>)
            else {
                return Ok(());
            };
            succeeded(record, job_name, children::reads_every_file(job), outcome);
        }
        JobState::Failed(reason) => {
            let prefix = format!("backup Job {job_name} failed: ");
            let conditions = record.conditions();
            let reported = conditions.is_true(conditions::BACKUP_FAILED)
                && conditions
                    .message(conditions::BACKUP_FAILED)
                    .is_some_and(|message| message.starts_with(&prefix));
            if reported {
                // Its pods' account is in status already: not read again on every pass.
                return Ok(());
            }
            let message = parts::failure(job, reason, jobs, reads)?;
            let message = format!("{prefix}{message}; earlier backups are intact");
            let mut conditions = record.conditions();
            conditions.set(
                conditions::BACKUP_SUCCEEDED,
                false,
                "BackupFailed",
                &message,
            );
            if conditions.set(conditions::BACKUP_FAILED, true, "BackupFailed", &message) {
                record.tallies.push(Tally::BackupFailed);
                record.note(EventType::Warning, "BackupFailed", "Backup", message);
            }
        }
        JobState::Running => {}
    }
    Ok(())
}

fn succeeded(record: &mut Record, job_name: String, full_read: bool, outcome: BackupSummary) {
    let mut message = format!(
        "backup {} by Job {job_name}: {} files, {} bytes ({} new) in {} ms",
        outcome.id, outcome.files, outcome.bytes, outcome.new_bytes, outcome.duration_ms
    );
    let inconsistent = inconsistent_files_warning(&outcome);
    if let Some(warning) = &inconsistent {
        message.push_str("; ");
        message.push_str(warning);
    }
    record.tallies.push(Tally::BackupSucceeded {
        bytes: outcome.bytes,
    });
    if full_read {
        record.status.last_full_read = Some(outcome.time.clone());
    }
    record.status.last_backup = Some(LastBackup {
        id: outcome.id,
        time: outcome.time,
        bytes: outcome.bytes,
        files: outcome.files,
        new_bytes: outcome.new_bytes,
        duration_ms: outcome.duration_ms,
        inconsistent_files: outcome.inconsistent,
        job: Some(job_name),
        snapshots: outcome.snapshots,
        oldest_snapshot: outcome.oldest,
    });
    let mut conditions = record.conditions();
    conditions.set(
        conditions::BACKUP_SUCCEEDED,
        true,
        "BackupSucceeded",
        &message,
    );
    conditions.set(
        conditions::BACKUP_FAILED,
        false,
        "BackupSucceeded",
        &message,
    );
    match inconsistent {
        Some(_) => record.note(EventType::Warning, "BackupInconsistent", "Backup", message),
        None => record.note(EventType::Normal, "BackupSucceeded", "Backup", message),
    }
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
         {named} (set backup.consistency.mode to stop to copy it while the app is \
         stopped, or have the app write by renaming new files into place)",
        outcome.inconsistent
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{self, app, reasons, settings};
    use crate::kept::{self, Cached};
    use crate::reads::Read;
    use hellostateful_api::HelloStateful;
    use kube::core::PartialObjectMeta;
    use serde_json::json;

    const TOKEN: &str = "2026-11-29T15:00:00Z";
    const SUMMARY: &str = r#"{"id":"20261129T150001Z","time":"2026-11-29T15:00:04Z","bytes":120,"files":1,"newBytes":120,"durationMs":9}"#;

    /// Decides for `app` with `jobs`, given what was read, no full read due.
    fn decide(
        app: &HelloStateful,
        jobs: &[Arc<Job>],
        restoring: bool,
        reads: &Reads,
        record: &mut Record,
    ) -> Decision<Plan> {
        decide_with(app, jobs, restoring, false, reads, record)
    }

    fn decide_with(
        app: &HelloStateful,
        jobs: &[Arc<Job>],
        restoring: bool,
        full_read_due: bool,
        reads: &Reads,
        record: &mut Record,
    ) -> Decision<Plan> {
        let app_ref = AppRef::new(app).expect("app");
        let observed = Observed {
            cronjob: None,
            jobs,
            restoring,
            full_read_due,
            unbound_claim: None,
        };
        let location =
            crate::location::resolve(&app.spec, &["/tmp/backup".into()], &[]).expect("location");
        plan(&app_ref, &location, &settings(), &observed, reads, record).expect("a plan")
    }

    fn seal_job(name: &str, released: bool, condition: Option<&str>) -> Arc<Job> {
        crate::parts::tests::set_job(name, Component::Backup, released, condition)
    }

    fn part_job(set: &str, ordinal: i32, condition: Option<&str>) -> Arc<Job> {
        crate::parts::tests::part_job(set, Component::Backup, ordinal, condition)
    }

    #[test]
    fn a_backup_in_parts_starts_its_seal_and_says_which_jobs_copy_the_replicas() {
        let app = fixtures::spread_app(json!({names::BACKUP_REQUESTED: TOKEN}));
        let set = names::backup_job("hello", "uid-1", TOKEN);
        let mut record = Record::new(Default::default(), Some(1));
        let plan = decide(&app, &[], false, &Reads::default(), &mut record).done();
        assert_eq!(
            plan.start,
            Some((
                set.clone(),
                MoverTask::Seal {
                    replicas: 2,
                    reread: false
                }
            ))
        );
        let message = record
            .status
            .backup_request
            .as_ref()
            .and_then(|r| r.message.clone());
        assert!(
            message
                .as_deref()
                .is_some_and(|m| m.contains(&format!("{set}-0 to {set}-1"))),
            "{message:?}"
        );

        // Made: it runs, suspended, until its parts (see `parts`) ended.
        let seal = seal_job(&set, false, None);
        let plan = decide(&app, &[seal], false, &Reads::default(), &mut record).done();
        assert_eq!(plan.start, None);
    }

    #[test]
    fn a_failed_part_is_why_its_backup_failed_and_a_finished_part_is_no_backup() {
        let app = fixtures::spread_app(json!({names::BACKUP_REQUESTED: TOKEN}));
        let set = names::backup_job("hello", "uid-1", TOKEN);
        let part = names::part(&set, 1);
        let jobs = [
            part_job(&set, 0, Some("Complete")),
            part_job(&set, 1, Some("Failed")),
            seal_job(&set, true, Some("Failed")),
        ];
        let mut reads = fixtures::message(&part, "error: no space left on device");
        reads.add_message(
            set.clone(),
            Some("error: no part for ordinal(s) [1]".into()),
        );
        let mut record = Record::new(Default::default(), Some(1));
        decide(&app, &jobs, false, &reads, &mut record).done();
        let request = record.status.backup_request.as_ref().expect("acknowledged");
        assert_eq!(request.phase, RequestPhase::Failed);
        let expected = format!("its part Job {part} failed: error: no space left on device");
        let message = request.message.as_deref().unwrap_or_default();
        assert!(message.contains(&expected), "{message}");
        let condition = record
            .conditions()
            .message(conditions::BACKUP_FAILED)
            .map(str::to_string);
        assert!(
            condition
                .as_deref()
                .is_some_and(|m| m.starts_with(&format!("backup Job {set} failed: {expected}"))),
            "{condition:?}"
        );

        // A succeeded part alone (its seal not done yet) is no finished backup.
        let app = fixtures::spread_app(json!({}));
        let mut record = Record::new(Default::default(), Some(1));
        let jobs = [
            part_job(&set, 0, Some("Complete")),
            seal_job(&set, false, None),
        ];
        decide(&app, &jobs, false, &Reads::default(), &mut record).done();
        assert!(record.status.last_backup.is_none() && record.notes.is_empty());
    }

    #[test]
    fn a_new_token_starts_one_job_and_says_so() {
        let app = app(json!({}), json!({names::BACKUP_REQUESTED: TOKEN}));
        let mut record = Record::new(Default::default(), Some(1));
        let plan = decide(&app, &[], false, &Reads::default(), &mut record).done();
        let job_name = names::backup_job("hello", "uid-1", TOKEN);
        assert_eq!(
            plan.start,
            Some((job_name.clone(), MoverTask::Backup { reread: false }))
        );
        let request = record.status.backup_request.as_ref().expect("acknowledged");
        assert_eq!(request.phase, RequestPhase::Running);
        assert_eq!(request.job.as_deref(), Some(job_name.as_str()));
        assert_eq!(reasons(&record), ["BackupStarted"]);

        // Once the Job is there (cached or not), it is followed, never started again.
        let running = [fixtures::job(&job_name, Component::Backup, None, &[])];
        let mut again = Record::new(record.status.clone(), Some(1));
        let plan = decide(&app, &running, false, &Reads::default(), &mut again).done();
        assert_eq!(plan.start, None);
        assert!(again.notes.is_empty());
    }

    #[test]
    fn only_the_request_backup_full_names_reads_every_file_again() {
        let start = |app: &HelloStateful| {
            let mut record = Record::new(Default::default(), Some(1));
            decide(app, &[], false, &Reads::default(), &mut record)
                .done()
                .start
                .map(|(_, task)| task)
        };
        let full = json!({names::BACKUP_REQUESTED: TOKEN, names::BACKUP_REREAD: TOKEN});
        assert_eq!(
            start(&app(json!({}), full.clone())),
            Some(MoverTask::Backup { reread: true })
        );
        assert_eq!(
            start(&fixtures::spread_app(full)),
            Some(MoverTask::Seal {
                replicas: 2,
                reread: true
            })
        );
        // A later plain request, the earlier full one's token still there: read as usual.
        let later = json!({names::BACKUP_REQUESTED: "later", names::BACKUP_REREAD: TOKEN});
        assert_eq!(
            start(&app(json!({}), later)),
            Some(MoverTask::Backup { reread: false })
        );
    }

    #[test]
    fn a_full_read_is_due_a_period_after_the_last_and_at_once_when_none_is_known() {
        let spec = |backup| app(json!({"backup": backup}), json!({})).spec;
        let now = DateTime::parse_from_rfc3339("2026-12-07T12:00:00Z")
            .expect("a time")
            .with_timezone(&Utc);
        let weekly = spec(json!({}));
        assert!(full_read_due(&weekly, None, now), "none known");
        assert!(
            full_read_due(&weekly, Some("not a time"), now),
            "none readable"
        );
        assert!(!full_read_due(&weekly, Some("2026-11-30T12:00:01Z"), now));
        assert!(full_read_due(&weekly, Some("2026-11-30T12:00:00Z"), now));
        // A clock behind the time recorded: not due.
        assert!(!full_read_due(&weekly, Some("2026-12-07T12:05:00Z"), now));
        let hourly = spec(json!({"fullReadEverySeconds": 3600}));
        assert!(!full_read_due(&hourly, Some("2026-12-07T11:00:01Z"), now));
        assert!(full_read_due(
            &hourly,
            Some("2026-12-07T11:00:00+00:00"),
            now
        ));
        let never = spec(json!({"fullReadEverySeconds": 0}));
        assert!(!full_read_due(&never, None, now));
    }

    #[test]
    fn a_due_full_read_reads_every_file_in_the_next_backup_and_its_success_is_recorded() {
        let args = |job: &CronJob| -> Vec<String> {
            let template = job.spec.as_ref().expect("spec").job_template.clone();
            let pod = template.spec.expect("job spec").template.spec.expect("pod");
            pod.containers[0].args.clone().unwrap_or_default()
        };
        let scheduled = |app: &HelloStateful, due| {
            let mut record = Record::new(Default::default(), Some(1));
            let plan = decide_with(app, &[], false, due, &Reads::default(), &mut record).done();
            match plan.schedule {
                Schedule::Apply { desired, .. } => *desired,
                other => panic!("applied, not {other:?}"),
            }
        };
        // Scheduled, in one Job: `--reread` while due.
        let one = app(json!({"backupSchedule": "@hourly"}), json!({}));
        assert!(args(&scheduled(&one, true)).contains(&"--reread".to_string()));
        assert!(!args(&scheduled(&one, false)).contains(&"--reread".to_string()));
        // In parts: the set's Job says so to its parts.
        let mut spread = fixtures::spread_app(json!({}));
        spread.spec.backup_schedule = Some("@hourly".into());
        let template = |due| {
            scheduled(&spread, due)
                .spec
                .expect("spec")
                .job_template
                .metadata
                .and_then(|m| m.annotations)
                .and_then(|a| a.get(names::REREAD).cloned())
        };
        assert_eq!(template(true).as_deref(), Some("true"));
        assert_eq!(template(false), None);

        // On demand: a plain request reads every file while due.
        let asked = app(json!({}), json!({names::BACKUP_REQUESTED: TOKEN}));
        let mut record = Record::new(Default::default(), Some(1));
        let plan = decide_with(&asked, &[], false, true, &Reads::default(), &mut record).done();
        let (job_name, task) = plan.start.expect("a Job");
        assert_eq!(task, MoverTask::Backup { reread: true });

        // Its success is the newest full read; a plain one's is not.
        let app_ref = AppRef::new(&asked).expect("app");
        let location = BackupLocation::NodeRoot("/tmp/backup".into());
        let finished = |reread| {
            let task = MoverTask::Backup { reread };
            let mut job = children::mover_job(
                &app_ref,
                &job_name,
                &task,
                "requested",
                &location,
                &settings(),
            )
            .expect("a Job");
            job.status = fixtures::job(&job_name, Component::Backup, Some("Complete"), &[])
                .status
                .clone();
            let mut record = Record::new(Default::default(), Some(1));
            let reads = fixtures::message(&job_name, SUMMARY);
            // As the cache keeps it: no pod template.
            let cached = Arc::new(job.keep());
            decide(&asked, &[cached], false, &reads, &mut record).done();
            record.status.last_full_read
        };
        assert_eq!(finished(true).as_deref(), Some("2026-11-29T15:00:04Z"));
        assert_eq!(finished(false), None);
    }

    #[test]
    fn a_requests_job_gone_before_its_outcome_fails_the_request_and_is_not_made_again() {
        let app = app(json!({}), json!({names::BACKUP_REQUESTED: TOKEN}));
        let mut record = Record::new(Default::default(), Some(1));
        decide(&app, &[], false, &Reads::default(), &mut record).done();
        let job_name = names::backup_job("hello", "uid-1", TOKEN);
        let made = record.status.clone();

        // Status names the Job; the cache lacks it. It asks the API server.
        let mut again = Record::new(made.clone(), Some(1));
        let asked = decide(&app, &[], false, &Reads::default(), &mut again);
        assert!(
            matches!(&asked, Decision::Read(Read::JobExists(name)) if *name == job_name),
            "{asked:?}"
        );

        // There: the cache lags behind the pass that made it; it copies, and is not made again.
        let mut there = Reads::default();
        there.add_job_exists(job_name.clone(), true);
        let mut lagging = Record::new(made.clone(), Some(1));
        let plan = decide(&app, &[], false, &there, &mut lagging).done();
        assert_eq!(plan.start, None);
        assert_eq!(lagging.status.backup_request, made.backup_request);
        assert!(lagging.notes.is_empty());

        // Gone (deleted, or expired): the request failed, said once, also while a restore
        // is under way; never made again.
        let mut gone = Reads::default();
        gone.add_job_exists(job_name.clone(), false);
        for restoring in [false, true] {
            let mut lost = Record::new(made.clone(), Some(1));
            let plan = decide(&app, &[], restoring, &gone, &mut lost).done();
            assert_eq!(plan.start, None);
            let request = lost.status.backup_request.clone().expect("acknowledged");
            assert_eq!(request.phase, RequestPhase::Failed);
            let message = request.message.unwrap_or_default();
            assert!(
                message.contains(&format!("its Job {job_name} is gone"))
                    && message.contains("kubectl hellostateful backup hello"),
                "{message}"
            );
            assert_eq!(reasons(&lost), ["BackupFailed"]);
            let mut after = Record::new(lost.status.clone(), Some(1));
            let plan = decide(&app, &[], restoring, &Reads::default(), &mut after).done();
            assert_eq!(plan.start, None);
            assert!(after.notes.is_empty());
        }
    }

    #[test]
    fn an_oversized_token_is_refused_once_and_never_copied_whole() {
        let mut app = app(
            json!({}),
            json!({names::BACKUP_REQUESTED: "t".repeat(4096)}),
        );
        kept::keep_app(&mut app.metadata);
        let mut record = Record::new(Default::default(), Some(1));
        let plan = decide(&app, &[], false, &Reads::default(), &mut record).done();
        assert_eq!(plan.start, None);
        let request = record.status.backup_request.clone().expect("acknowledged");
        assert_eq!(request.phase, RequestPhase::Failed);
        assert!(request.token.len() <= kept::LONGEST_KEPT_VALUE);
        assert!(request.message.is_some_and(|m| m.contains("4096 bytes")));

        // Acknowledged: the next pass writes nothing.
        let mut again = Record::new(record.status.clone(), Some(1));
        decide(&app, &[], false, &Reads::default(), &mut again).done();
        assert_eq!(again.status.backup_request, record.status.backup_request);
    }

    #[test]
    fn a_token_waits_for_a_running_restore() {
        let app = app(json!({}), json!({names::BACKUP_REQUESTED: TOKEN}));
        let mut record = Record::new(Default::default(), Some(1));
        let plan = decide(&app, &[], true, &Reads::default(), &mut record).done();
        assert_eq!(plan.start, None);
        let request = record.status.backup_request.as_ref().expect("acknowledged");
        assert_eq!(request.phase, RequestPhase::Pending);
        assert!(record.notes.is_empty());
    }

    #[test]
    fn a_finished_job_is_read_once_then_acknowledged_with_its_snapshot() {
        let app = app(json!({}), json!({names::BACKUP_REQUESTED: TOKEN}));
        let job_name = names::backup_job("hello", "uid-1", TOKEN);
        let jobs = [fixtures::job(
            &job_name,
            Component::Backup,
            Some("Complete"),
            &[],
        )];
        let mut record = Record::new(Default::default(), Some(1));
        let Decision::Read(asked) = decide(&app, &jobs, false, &Reads::default(), &mut record)
        else {
            panic!("the summary is read first");
        };
        assert_eq!(asked, Read::Message(job_name.clone()));

        let reads = fixtures::message(&job_name, SUMMARY);
        let mut record = Record::new(Default::default(), Some(1));
        let plan = decide(&app, &jobs, false, &reads, &mut record).done();
        assert_eq!(plan.start, None);
        let request = record.status.backup_request.as_ref().expect("acknowledged");
        assert_eq!(request.phase, RequestPhase::Succeeded);
        assert_eq!(request.backup_id.as_deref(), Some("20261129T150001Z"));
        let last = record.status.last_backup.as_ref().expect("lastBackup");
        assert_eq!(last.job.as_deref(), Some(job_name.as_str()));
        assert_eq!(record.tallies, [Tally::BackupSucceeded { bytes: 120 }]);
        assert_eq!(reasons(&record), ["BackupSucceeded"]);

        // Recorded: a later pass reads nothing and says nothing again.
        let mut later = Record::new(record.status.clone(), Some(1));
        decide(&app, &jobs, false, &Reads::default(), &mut later).done();
        assert!(later.notes.is_empty() && later.tallies.is_empty());
    }

    #[test]
    fn a_failed_scheduled_backup_is_reported_from_its_pod_once() {
        let app = app(json!({}), json!({}));
        let jobs = [fixtures::job(
            "backup-hello-29000000",
            Component::Backup,
            Some("Failed"),
            &[],
        )];
        let reads = fixtures::message("backup-hello-29000000", "error: no space left on device");
        let mut record = Record::new(Default::default(), Some(1));
        decide(&app, &jobs, false, &reads, &mut record).done();
        let failed = record
            .conditions()
            .message(conditions::BACKUP_FAILED)
            .map(str::to_string);
        assert!(
            failed
                .as_deref()
                .is_some_and(|m| m.contains("backup-hello-29000000")
                    && m.contains("no space left on device")
                    && m.ends_with("earlier backups are intact")),
            "{failed:?}"
        );
        assert_eq!(record.tallies, [Tally::BackupFailed]);
        assert_eq!(reasons(&record), ["BackupFailed"]);

        let mut later = Record::new(record.status.clone(), Some(1));
        decide(&app, &jobs, false, &Reads::default(), &mut later).done();
        assert!(later.notes.is_empty() && later.tallies.is_empty());
    }

    /// The app's backup claim is made with it, bound a moment later: a Job made before
    /// would wait unschedulable, and fail once the mover's patience ran out.
    #[test]
    fn no_backup_job_nor_schedule_is_made_before_the_backup_claim_is_bound() {
        let asked = app(
            json!({"backupSchedule": "*/5 * * * *"}),
            json!({names::BACKUP_REQUESTED: TOKEN}),
        );
        let app_ref = AppRef::new(&asked).expect("app");
        let location = BackupLocation::NodeRoot("/tmp/backup".into());
        let mut observed = Observed {
            cronjob: None,
            jobs: &[],
            restoring: false,
            full_read_due: false,
            unbound_claim: Some(names::backup_claim("hello")),
        };
        let decide = |observed: &Observed, record: &mut Record| {
            let reads = Reads::default();
            plan(&app_ref, &location, &settings(), observed, &reads, record)
                .expect("a plan")
                .done()
        };
        let mut record = Record::new(Default::default(), Some(1));
        let waiting = decide(&observed, &mut record);
        assert!(waiting.start.is_none() && matches!(waiting.schedule, Schedule::Keep));
        let request = record.status.backup_request.clone().expect("acknowledged");
        assert_eq!(request.phase, RequestPhase::Pending);
        assert_eq!(
            request.message.as_deref(),
            Some("waiting for backup claim backups-hello to be bound to its volume")
        );
        assert!(record.notes.is_empty(), "no BackupStarted yet");

        observed.unbound_claim = None;
        let bound = decide(&observed, &mut record);
        let job = names::backup_job("hello", "uid-1", TOKEN);
        assert_eq!(bound.start.map(|(name, _)| name), Some(job));
        assert!(matches!(bound.schedule, Schedule::Apply { .. }));
    }

    #[test]
    fn the_schedule_is_suspended_during_a_restore_and_removed_with_the_spec() {
        let app_with = app(json!({"backupSchedule": "*/5 * * * *"}), json!({}));
        let app_ref = AppRef::new(&app_with).expect("app");
        let location = BackupLocation::NodeRoot("/tmp/backup".into());
        let mut observed = Observed {
            cronjob: None,
            jobs: &[],
            restoring: true,
            full_read_due: false,
            unbound_claim: None,
        };
        let suspended = |schedule: &Schedule| match schedule {
            Schedule::Apply { desired, .. } => desired.spec.as_ref().and_then(|s| s.suspend),
            other => panic!("applied, not {other:?}"),
        };
        assert_eq!(
            suspended(&schedule(&app_ref, &location, &settings(), &observed).expect("schedule")),
            Some(true)
        );
        observed.restoring = false;
        assert_eq!(
            suspended(&schedule(&app_ref, &location, &settings(), &observed).expect("schedule")),
            Some(false)
        );

        let without = app(json!({}), json!({}));
        let without_ref = AppRef::new(&without).expect("app");
        let made = children::cronjob(&app_ref, "*/5 * * * *", &location, &settings(), false)
            .expect("cronjob");
        let meta = PartialObjectMeta::<CronJob> {
            metadata: made.metadata,
            ..Default::default()
        };
        observed.cronjob = Some(Arc::new(meta.keep()));
        assert!(matches!(
            schedule(&without_ref, &location, &settings(), &observed).expect("schedule"),
            Schedule::Delete
        ));
        observed.cronjob = None;
        assert!(matches!(
            schedule(&without_ref, &location, &settings(), &observed).expect("schedule"),
            Schedule::Keep
        ));
    }
}
