//! Jobs made in parts, for an app whose replicas' volumes may be on different nodes (see
//! `children::in_parts`): a backup or restore Job that no one pod could run is made
//! suspended, labelled with the number of replicas, and named as the set; this module
//! makes one part Job per replica (each mounting only its own volume, so it runs where that
//! volume is), and lets the set's Job run once every part has ended. A backup's Job then
//! seals the parts into one snapshot; a restore's commits what the parts staged, after
//! which `restores` makes the Jobs that swap it in.
//!
//! Deciding is pure: `plan` returns the writes to make.

use std::sync::Arc;

use hellostateful_api::MAX_REPLICAS;
use hellostateful_api::names::{self, Component};
use hellostateful_api::summary::{self, RestoreSummary};
use hellostateful_api::validate;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;

use crate::children::{MoverTask, RestoreStep};
use crate::jobs::{self, JobState};
use crate::reads::{Reads, Unread};
use crate::stops;

#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Part Jobs to start: name, task, and the action of the set they are part of.
    pub start: Vec<(String, MoverTask, String)>,
    /// Jobs of sets whose parts have all ended, to let run.
    pub release: Vec<String>,
    /// Backup sets whose first parts are in `start`: each is marked begun
    /// (`names::PARTS_BEGUN`) before any of them is made (see `begun`).
    pub mark: Vec<String>,
}

/// How many parts set Job `job` has, from its label; None for a Job not made in parts. The
/// label could have been edited: no more parts than an app can have replicas are made.
pub fn count(job: &Job) -> Option<i32> {
    job.labels()
        .get(names::PARTS_LABEL)
        .and_then(|n| n.parse::<i32>().ok())
        .filter(|n| (1..=MAX_REPLICAS).contains(n))
}

/// For each set Job still suspended: its part Jobs not made yet, or, once every one has
/// ended (succeeded or not: the set's Job says which are missing), the Job itself to let
/// run. While `restoring` (see `restores::under_way`), a backup's set not `begun` gets
/// neither: its parts would read some volumes before their swap and others after, and seal
/// that mix as one snapshot. It waits, suspended, until the restore ended. (One begun goes
/// on, and a restore waits for it: so neither ever waits for the other.) A backup's set
/// made in stop mode not `begun` waits until the app is stopped (`app_stopped`, see `stops`).
pub fn plan(jobs: &[Arc<Job>], restoring: bool, app_stopped: bool) -> Plan {
    let mut plan = Plan::default();
    let waits = |job: &Job| {
        let backup = jobs::component(job) == Some(Component::Backup);
        let held = restoring || (stops::stops_app(job) && !app_stopped);
        backup && held && !begun(job, jobs)
    };
    for set_job in jobs
        .iter()
        .filter(|job| suspended(job) && jobs::is_active(job) && !waits(job))
    {
        let Some(replicas) = count(set_job) else {
            continue;
        };
        let set = set_job.name_any();
        let Some(task) = part_task(set_job) else {
            continue;
        };
        let action = set_job
            .labels()
            .get(names::ACTION_LABEL)
            .cloned()
            .unwrap_or_default();
        let mut all_ended = true;
        let made_before = plan.start.len();
        for ordinal in 0..replicas {
            let name = names::part(&set, ordinal);
            match jobs.iter().find(|job| job.name_any() == name) {
                Some(part) if !jobs::is_active(part) => {}
                Some(_) => all_ended = false,
                None => {
                    all_ended = false;
                    plan.start.push((name, task(ordinal), action.clone()));
                }
            }
        }
        let first_parts = plan.start.len() > made_before && !marked(set_job);
        if first_parts && jobs::component(set_job) == Some(Component::Backup) {
            plan.mark.push(set.clone());
        }
        if all_ended {
            plan.release.push(set);
        }
    }
    plan
}

/// Whether set Job `set_job` has begun: let run, marked so, or a part of it made. The mark
/// outlives the parts: a backup's parts that ended and expired (their TTL is a day) before
/// a pass let the set run read the volumes as they were then, and the parts made again in
/// their place must read the same, as the seal takes what the store holds of each part.
pub fn begun(set_job: &Job, jobs: &[Arc<Job>]) -> bool {
    let set = set_job.name_any();
    !suspended(set_job)
        || marked(set_job)
        || jobs.iter().any(|job| {
            job.labels()
                .get(names::PART_OF_LABEL)
                .is_some_and(|of| *of == set)
        })
}

fn marked(job: &Job) -> bool {
    job.annotations().contains_key(names::PARTS_BEGUN)
}

fn suspended(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.suspend) == Some(true)
}

/// What the parts of set Job `job` do, by ordinal: back up their volume, or stage the
/// backup its annotations name (checked again: a Job's annotations can be edited).
fn part_task(job: &Job) -> Option<impl Fn(i32) -> MoverTask> {
    let set = job.name_any();
    let reread = job.annotations().get(names::REREAD).map(String::as_str) == Some("true");
    let step = match jobs::component(job)? {
        Component::Backup => None,
        Component::Restore => {
            let annotations = job.annotations();
            let from = annotations.get(names::RESTORE_FROM)?;
            validate::restore_from(from).ok()?;
            let source = match annotations.get(names::RESTORE_SOURCE) {
                Some(source) if validate::is_app_name(source) => Some(source.clone()),
                Some(_) => return None,
                None => None,
            };
            Some(RestoreStep::Stage {
                from: from.clone(),
                if_exists: annotations
                    .get(names::RESTORE_IF_EXISTS)
                    .map(String::as_str)
                    == Some("true"),
                source,
            })
        }
        _ => return None,
    };
    Some(move |ordinal| match &step {
        None => MoverTask::BackupPart {
            set: set.clone(),
            ordinal,
            reread,
        },
        Some(step) => MoverTask::RestorePart {
            set: set.clone(),
            ordinal,
            step: step.clone(),
        },
    })
}

/// Why set Job `job` failed, in its pod's or the reconciler's words; those of a part that
/// failed, if one did (the set's Job then fails for want of that part).
pub fn failure(
    job: &Job,
    reason: String,
    jobs: &[Arc<Job>],
    reads: &Reads,
) -> Result<String, Unread> {
    let name = job.name_any();
    let failed_part = jobs
        .iter()
        .filter(|part| part.labels().get(names::PART_OF_LABEL) == Some(&name))
        .find_map(|part| match jobs::state(part) {
            JobState::Failed(reason) => Some((part.name_any(), reason)),
            _ => None,
        });
    match failed_part {
        Some((part, reason)) => Ok(format!(
            "its part Job {part} failed: {}",
            reads.failure(&part, reason)?
        )),
        None => reads.failure(&name, reason),
    }
}

/// What the Jobs of restore `set` in parts do, for status: `what` is the backup they restore.
pub fn restore_steps(set: &str, replicas: i32, what: &str) -> String {
    format!(
        "Jobs {} to {} stage {what} on each replica's node, beside its live data; then Job \
         {set} commits the restore, and Jobs {} to {} swap it in",
        names::part(set, 0),
        names::part(set, replicas - 1),
        names::swap_part(set, 0),
        names::swap_part(set, replicas - 1),
    )
}

/// Where restore Job `job` stands, with the Jobs that end a restore made in parts (returned,
/// to start). Once its Job committed the set, the restore runs on until each part swapped
/// it in, and fails if one could not: then some volumes may hold the restored data and
/// others the old, as the message says (see [`restore_failure`]). When its Job failed (the
/// commit was refused, or never ran), it fails once each volume that staged the backup is
/// rid of the staging (see [`undone`]).
pub fn restore_state(
    job: &Job,
    jobs: &[Arc<Job>],
    reads: &Reads,
) -> Result<(JobState, Vec<(String, MoverTask)>), Unread> {
    let state = jobs::state(job);
    let set = job.name_any();
    let replicas = match (count(job), &state) {
        (Some(replicas), JobState::Succeeded) => replicas,
        (Some(replicas), JobState::Failed(_)) => return undone(&set, replicas, jobs, state, reads),
        _ => return Ok((state, Vec::new())),
    };
    let interrupted = hellostateful_mover::SWAP_INTERRUPTED;
    let swapping =
        (0..replicas).any(|ordinal| state_of(jobs, &names::swap_part(&set, ordinal)).is_some());
    let committed = match reads
        .message(&set)?
        .and_then(summary::parse_last_line::<RestoreSummary>)
    {
        Some(outcome) => outcome.restored,
        // Its pod, which said whether the set was committed, is gone (collected, or lost
        // with its node). A swap part is made only once it was; without one nothing here
        // says, and either guess could start the app on a mix of swapped and unswapped
        // volumes. The store knows: the next restore finishes or undoes the set first.
        None if swapping => true,
        None => {
            return Ok((
                JobState::Failed(format!(
                    "{interrupted}: whether Job {set} committed the restore is unknown (its pod, which said so, is gone)"
                )),
                Vec::new(),
            ));
        }
    };
    if !committed {
        return Ok((state, Vec::new())); // no backup to restore: nothing to swap in
    }
    let mut start = Vec::new();
    let mut running = false;
    for ordinal in 0..replicas {
        let name = names::swap_part(&set, ordinal);
        match state_of(jobs, &name) {
            None => {
                let (set, step) = (set.clone(), RestoreStep::Swap);
                start.push((name, MoverTask::RestorePart { set, ordinal, step }));
            }
            Some(JobState::Running) => running = true,
            Some(JobState::Failed(reason)) => {
                let cause = reads.failure(&name, reason)?;
                return Ok((
                    JobState::Failed(if cause.contains(interrupted) {
                        format!("its part Job {name} failed: {cause}")
                    } else {
                        format!("{interrupted}: its part Job {name} failed: {cause}")
                    }),
                    Vec::new(),
                ));
            }
            Some(JobState::Succeeded) => {}
        }
    }
    if running || !start.is_empty() {
        Ok((JobState::Running, start))
    } else {
        Ok((JobState::Succeeded, Vec::new()))
    }
}

/// A set whose Job failed: each volume is rid of what its part staged (as large as the
/// backup) by a Job on its node, before the failure is reported and the app runs again. An
/// undo part is made on every volume, whatever its stage part did (succeeded, failed midway
/// with its staging left, or is gone): each first asks the store whether the set was
/// committed after all (its Job failing after its last write). Only an undo part that
/// succeeded says it was not: if none did (each failed, on a node lost, say), whether the
/// set was committed is unknown, and the restore fails as interrupted (the app held). An
/// undo that fails leaves its volume's staging to the volume's next restore, which drops it
/// first.
fn undone(
    set: &str,
    replicas: i32,
    jobs: &[Arc<Job>],
    failed: JobState,
    reads: &Reads,
) -> Result<(JobState, Vec<(String, MoverTask)>), Unread> {
    let interrupted = hellostateful_mover::SWAP_INTERRUPTED;
    let mut start = Vec::new();
    let mut running = false;
    let mut not_committed = false;
    for ordinal in 0..replicas {
        let name = names::undo_part(set, ordinal);
        match state_of(jobs, &name) {
            Some(JobState::Running) => running = true,
            // The set was committed after all (its Job failed after its last write): only
            // its swaps finish it, which the next restore makes first.
            Some(JobState::Failed(reason))
                if reads
                    .failure(&name, reason.clone())?
                    .contains(COMMITTED_AFTER_ALL) =>
            {
                return Ok((
                    JobState::Failed(format!(
                        "{interrupted}: Job {set} failed, yet it committed the restore, as its undo part {name} found"
                    )),
                    Vec::new(),
                ));
            }
            Some(JobState::Succeeded) => not_committed = true,
            Some(JobState::Failed(_)) => {}
            None => {
                let (set, step) = (set.to_owned(), RestoreStep::Undo);
                start.push((name, MoverTask::RestorePart { set, ordinal, step }));
            }
        }
    }
    Ok(if running || !start.is_empty() {
        (JobState::Running, start)
    } else if not_committed {
        (failed, Vec::new())
    } else {
        (
            JobState::Failed(format!(
                "{interrupted}: Job {set} failed, and none of its undo parts could ask the store whether it committed the restore (each failed)"
            )),
            Vec::new(),
        )
    })
}

/// What the mover's undo says of a set that was committed (mover `undo_part`).
const COMMITTED_AFTER_ALL: &str = "was committed: its swap (--swap) finishes it";

/// Whether restore Job `job`, made in parts, began swapping its set in and has not finished
/// on every volume: some volumes may hold the restored data and others not.
pub fn mid_swap(job: &Job, jobs: &[Arc<Job>]) -> bool {
    let Some(replicas) = count(job) else {
        return false;
    };
    let set = job.name_any();
    let swaps: Vec<Option<JobState>> = (0..replicas)
        .map(|ordinal| state_of(jobs, &names::swap_part(&set, ordinal)))
        .collect();
    swaps.iter().any(Option::is_some) && !swaps.iter().all(|s| *s == Some(JobState::Succeeded))
}

/// The state of the Job named `name`, if it exists.
fn state_of(jobs: &[Arc<Job>], name: &str) -> Option<JobState> {
    jobs.iter()
        .find(|job| job.name_any() == name)
        .map(|job| jobs::state(job))
}

/// Why restore Job `job` failed, as [`restore_state`] said: in the mover's words when the
/// Job itself failed (see [`failure`]), else (a swap of its parts failed) as it said.
pub fn restore_failure(
    job: &Job,
    reason: String,
    jobs: &[Arc<Job>],
    reads: &Reads,
) -> Result<String, Unread> {
    match jobs::state(job) {
        // Unless its parts found it committed after all (see `undone`).
        JobState::Failed(own) if !reason.contains(hellostateful_mover::SWAP_INTERRUPTED) => {
            failure(job, own, jobs, reads)
        }
        _ => Ok(reason),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::fixtures;

    /// A set Job of two parts, suspended until they end, or let run (`released`).
    pub fn set_job(
        name: &str,
        component: Component,
        released: bool,
        condition: Option<&str>,
    ) -> Arc<Job> {
        let mut job = fixtures::job(
            name,
            component,
            condition,
            &[
                (names::PARTS_LABEL, "2"),
                (names::ACTION_LABEL, "requested"),
            ],
        );
        let job_mut = Arc::make_mut(&mut job);
        job_mut.spec = Some(k8s_openapi::api::batch::v1::JobSpec {
            suspend: Some(!released),
            ..Default::default()
        });
        if component == Component::Restore {
            job_mut
                .metadata
                .annotations
                .get_or_insert_default()
                .insert(names::RESTORE_FROM.into(), "latest".into());
        }
        job
    }

    pub fn part_job(
        set: &str,
        component: Component,
        ordinal: i32,
        condition: Option<&str>,
    ) -> Arc<Job> {
        fixtures::job(
            &names::part(set, ordinal),
            component,
            condition,
            &[(names::PART_OF_LABEL, set)],
        )
    }

    #[test]
    fn each_replicas_part_is_made_then_the_set_job_runs_once_they_ended() {
        let set = "backup-hello-1a2b3c4d";
        let backup = |released, condition| set_job(set, Component::Backup, released, condition);
        let part = |ordinal, condition| part_job(set, Component::Backup, ordinal, condition);
        let plan = plan(&[backup(false, None)], false, false);
        let task = |ordinal| MoverTask::BackupPart {
            set: set.into(),
            ordinal,
            reread: false,
        };
        assert_eq!(
            plan.start,
            [
                (format!("{set}-0"), task(0), "requested".into()),
                (format!("{set}-1"), task(1), "requested".into()),
            ]
        );
        assert!(plan.release.is_empty());

        // One part runs: nothing more to do. Both ended: the set's Job runs, once.
        let running = [
            backup(false, None),
            part(0, Some("Complete")),
            part(1, None),
        ];
        assert_eq!(super::plan(&running, false, false), Plan::default());
        let ended = [
            backup(false, None),
            part(0, Some("Complete")),
            part(1, Some("Failed")),
        ];
        assert_eq!(super::plan(&ended, false, false).release, [set]);
        let released = [backup(true, None), part(0, Some("Complete"))];
        assert_eq!(super::plan(&released, false, false), Plan::default());
    }

    /// Found by the restore model: a backup Job made while a restore in parts swapped in
    /// (the CronJob's, or one asked for then) sealed one volume restored and the other not.
    /// Its parts wait for the restore; a restore's go on. A backup begun before (a part of it
    /// made) goes on: a restore not begun waits for it, and would wait for ever.
    #[test]
    fn a_backups_parts_wait_while_a_restore_is_under_way() {
        let backup = set_job("backup-hello-29000000", Component::Backup, false, None);
        let restore = set_job("restore-hello-1a2b3c4d", Component::Restore, false, None);
        let both = [backup.clone(), restore];
        let made = |jobs: &[Arc<Job>], restoring| {
            plan(jobs, restoring, false)
                .start
                .into_iter()
                .map(|(name, _, _)| name)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            made(&both, true),
            ["restore-hello-1a2b3c4d-0", "restore-hello-1a2b3c4d-1"]
        );
        assert_eq!(made(&both, false).len(), 4);
        assert!(!begun(&backup, &both));
        let part = |ordinal| {
            part_job(
                "backup-hello-29000000",
                Component::Backup,
                ordinal,
                Some("Complete"),
            )
        };
        let one_made = [backup.clone(), part(0)];
        assert!(begun(&backup, &one_made));
        assert_eq!(made(&one_made, true), ["backup-hello-29000000-1"]);
        let ended = [backup, part(0), part(1)];
        assert_eq!(plan(&ended, true, false).release, ["backup-hello-29000000"]);
    }

    /// A backup's set is marked begun in the pass that makes its first parts, so that a
    /// restore waits for it even once they are gone; a restore's set, and a set marked
    /// already, is not marked.
    #[test]
    fn a_backup_is_marked_begun_before_its_first_parts_are_made() {
        let backup = set_job("backup-hello-29000000", Component::Backup, false, None);
        let restore = set_job("restore-hello-1a2b3c4d", Component::Restore, false, None);
        let plan_of_both = plan(&[backup.clone(), restore], false, false);
        assert_eq!(plan_of_both.mark, ["backup-hello-29000000"]);
        assert_eq!(plan_of_both.start.len(), 4);
        let mut marked = backup;
        Arc::make_mut(&mut marked)
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(names::PARTS_BEGUN.into(), "true".into());
        assert!(begun(&marked, &[]), "no part left, and begun");
        let again = plan(&[marked.clone()], true, false);
        assert_eq!((again.mark.len(), again.start.len()), (0, 2), "made again");
    }

    #[test]
    fn a_restores_parts_stage_the_backup_its_job_names_and_an_edited_one_makes_none() {
        let set = "restore-hello-1a2b3c4d";
        let annotated = |key: &str, value: &str| {
            let mut job = set_job(set, Component::Restore, false, None);
            Arc::make_mut(&mut job)
                .metadata
                .annotations
                .get_or_insert_default()
                .insert(key.into(), value.into());
            job
        };
        let stage = |ordinal, source: Option<&str>| MoverTask::RestorePart {
            set: set.into(),
            ordinal,
            step: RestoreStep::Stage {
                from: "latest".into(),
                if_exists: false,
                source: source.map(Into::into),
            },
        };
        let staged = |job: Arc<Job>| {
            plan(&[job], false, false)
                .start
                .into_iter()
                .map(|(_, task, _)| task)
                .collect::<Vec<_>>()
        };
        let own = set_job(set, Component::Restore, false, None);
        assert_eq!(staged(own), [stage(0, None), stage(1, None)]);
        let another_apps = annotated(names::RESTORE_SOURCE, "old");
        assert_eq!(
            staged(another_apps),
            [stage(0, Some("old")), stage(1, Some("old"))]
        );

        for (key, edited) in [
            (names::RESTORE_FROM, "--target=/"),
            (names::RESTORE_SOURCE, "../other-namespace"),
        ] {
            let edited = annotated(key, edited);
            assert_eq!(plan(&[edited], false, false), Plan::default());
        }
    }

    #[test]
    fn an_edited_parts_label_makes_no_more_parts_than_an_app_can_have() {
        let mut backup = set_job("backup-hello-29000000", Component::Backup, false, None);
        Arc::make_mut(&mut backup)
            .metadata
            .labels
            .get_or_insert_default()
            .insert(names::PARTS_LABEL.into(), "100000".into());
        assert_eq!(plan(&[backup], false, false), Plan::default());
    }

    #[test]
    fn the_parts_of_a_full_backup_read_every_file_again() {
        let set = "backup-hello-1a2b3c4d";
        let mut full = set_job(set, Component::Backup, false, None);
        Arc::make_mut(&mut full)
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(names::REREAD.into(), "true".into());
        let plan = plan(&[full], false, false);
        let tasks: Vec<_> = plan.start.iter().map(|(_, task, _)| task.clone()).collect();
        assert_eq!(
            tasks,
            [0, 1].map(|ordinal| MoverTask::BackupPart {
                set: set.into(),
                ordinal,
                reread: true,
            })
        );
    }

    #[test]
    fn a_stop_mode_sets_parts_are_made_only_once_the_app_is_stopped() {
        let set = "backup-hello-1a2b3c4d";
        let mut held = set_job(set, Component::Backup, false, None);
        Arc::make_mut(&mut held)
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(names::STOPS_APP.into(), "true".into());
        assert_eq!(
            plan(std::slice::from_ref(&held), false, false),
            Plan::default()
        );
        let stopped = plan(std::slice::from_ref(&held), false, true);
        assert_eq!(stopped.mark, [set], "marked begun before its first parts");
        assert_eq!(stopped.start.len(), 2);
        // Once a part is made it goes on: the app stays stopped until the set ends.
        let part = part_job(set, Component::Backup, 0, None);
        let begun = plan(&[held, part], false, false);
        assert_eq!(begun.start.len(), 1, "the other part");
    }
}
