//! Deletion as a decision (issue #33): what one pass over an app being deleted observes,
//! and the step it takes from there. The controller reads (`controller::observe_deletion`),
//! calls `decide`, and makes the writes the plan names; the model in `deletion_model.rs`
//! drives the same `decide` under the faults of real clusters.
//!
//! The steps, each taken only once the one before is done: stop everything that reads or
//! writes the volumes (the StatefulSet and the backup CronJob deleted in the foreground, the
//! app's running mover Jobs failed by a deadline already past) and wait until none of their
//! pods runs; wipe the static volumes; delete the backups, if asked; release the volumes.
//! The order is the plan's type: `Plan::stop` carries no write of a later step, and a plan
//! that makes the wipe or purge Job or releases a volume is only built once nothing runs.

use crate::jobs::JobState;

/// What a pass saw of an app being deleted. Only what the app controls is in it: a
/// look-alike StatefulSet, CronJob or Job is not the app's and is neither waited for nor
/// stopped (a look-alike of the wipe or purge Job's name is `Cleanup::NotOurs`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    /// The app's namespace.
    pub namespace: String,
    /// The app's StatefulSet, if it exists.
    pub statefulset: Option<Child>,
    /// The app's backup CronJob, if it exists.
    pub schedule: Option<Child>,
    /// The app's mover Jobs that have not ended, but for the wipe and purge Jobs.
    pub running_jobs: Vec<RunningJob>,
    /// The pods of the StatefulSet and of the app's mover Jobs that have not ended: they
    /// may still read or write the volumes.
    pub live_pods: Vec<String>,
    /// The namespace is being deleted (or gone): it accepts no new Job.
    pub namespace_terminating: bool,
    /// The app's data volumes live on its node's disk (no StorageClass): wiped on delete.
    pub static_volumes: bool,
    /// The app's data volumes (its removed replicas' too).
    pub volumes: Vec<DataVolume>,
    /// The app's spec's replicas.
    pub replicas: i32,
    /// The wipe Job, by its name.
    pub wipe: Cleanup,
    pub wipe_job: String,
    /// The backups, if the app asks for them to be deleted with it (None: they are kept).
    pub purge: Option<Purge>,
    /// Where the backups are, in words.
    pub backups_place: String,
}

/// A StatefulSet or CronJob of the app.
#[derive(Clone, Debug, PartialEq)]
pub struct Child {
    pub name: String,
    /// Its deletion began.
    pub deleting: bool,
}

/// A mover Job of the app that has not ended.
#[derive(Clone, Debug, PartialEq)]
pub struct RunningJob {
    pub name: String,
    /// Its deadline is already cut to make it fail.
    pub stopping: bool,
}

/// A data volume of the app.
#[derive(Clone, Debug, PartialEq)]
pub struct DataVolume {
    pub name: String,
    /// Its deletion began.
    pub deleting: bool,
    /// Its directory on the node, if a node directory.
    pub path: Option<String>,
    /// The ordinal of the claim it is bound to.
    pub ordinal: Option<i32>,
    /// The node it is pinned to, and whether that node's object is gone (for good).
    pub node: Option<String>,
    pub node_gone: bool,
}

/// The state of a wipe or purge Job.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Cleanup {
    /// No Job of its name.
    #[default]
    Absent,
    /// A Job of its name the app does not control.
    NotOurs,
    /// The app's Job, not ended.
    Running,
    /// The app's Job, ended.
    Ended(JobState),
}

impl Cleanup {
    /// The app's own Job, running or ended.
    fn is_ours(&self) -> bool {
        matches!(self, Cleanup::Running | Cleanup::Ended(_))
    }
}

/// The backups to delete with the app.
#[derive(Clone, Debug, PartialEq)]
pub struct Purge {
    /// A Job can reach them (their claim exists, or they are in an object store).
    pub reachable: bool,
    pub job: Cleanup,
    pub job_name: String,
    /// Once they are deleted: the backup claim (if it exists and is not being deleted) and
    /// the volume of the directory emptied, to delete.
    pub claim: Option<String>,
    pub volumes: Vec<String>,
    /// The node their directory is on, if it is gone for good (its Node object deleted).
    pub gone_node: Option<String>,
}

/// A write a plan asks for.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Write {
    /// Delete the StatefulSet in the foreground.
    DeleteStatefulSet,
    /// Delete the backup CronJob in the foreground.
    DeleteSchedule,
    /// Fail this running mover Job by a deadline already past.
    StopJob(String),
    /// Make the wipe Job, for volumes of ordinals below `replicas`.
    MakeWipe { replicas: i32 },
    /// Make the purge Job.
    MakePurge,
    /// Delete the backup claim of this name.
    DeleteBackupClaim(String),
    /// Delete this backup volume.
    DeleteBackupVolume(String),
    /// Release this data volume (delete it).
    ReleaseVolume(String),
}

/// Where the deletion stands after the plan's writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It waits for this (said in status and an event).
    Waiting(String),
    /// It is done: what it did, for the Deleted event.
    Done(String),
}

/// A Warning event: its reason and message.
pub type Warning = (&'static str, String);

/// A pass's writes, warnings and outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub writes: Vec<Write>,
    pub warnings: Vec<Warning>,
    pub outcome: Outcome,
}

impl Plan {
    /// Stopping what still reads or writes the volumes: no write of a later step.
    fn stop(writes: Vec<Write>, running: Vec<String>) -> Self {
        debug_assert!(writes.iter().all(|write| matches!(
            write,
            Write::DeleteStatefulSet | Write::DeleteSchedule | Write::StopJob(_)
        )));
        Plan {
            writes,
            warnings: Vec::new(),
            outcome: Outcome::Waiting(format!(
                "{} to stop (a pod on a node that is gone for good stays until it is deleted with --force)",
                running.join(", ")
            )),
        }
    }

    /// A cleanup step that cannot end yet, after the steps that `ended` (their warnings are
    /// said now; their writes wait for the deletion's last pass).
    fn waiting((write, what): Waits, ended: Vec<Ended>) -> Self {
        Plan {
            writes: write.into_iter().collect(),
            warnings: ended.into_iter().filter_map(|step| step.warning).collect(),
            outcome: Outcome::Waiting(what),
        }
    }
}

/// The step a pass takes.
pub fn decide(seen: &Observed) -> Plan {
    if let Some(stopping) = stop(seen) {
        return stopping;
    }
    // Nothing reads or writes the volumes any more: the wipe, then the purge, each once the
    // one before ended.
    let mut ended = Vec::new();
    if seen.static_volumes && !seen.volumes.is_empty() {
        match wipe(seen) {
            Ok(step) => ended.push(step),
            Err(waits) => return Plan::waiting(waits, ended),
        }
    }
    match &seen.purge {
        Some(purge) => match backups(seen, purge) {
            Ok(step) => ended.push(step),
            Err(waits) => return Plan::waiting(waits, ended),
        },
        None => ended.push(Ended::note(format!(
            "backups are kept in {}",
            seen.backups_place
        ))),
    }
    let mut plan = Plan {
        writes: Vec::new(),
        warnings: Vec::new(),
        outcome: Outcome::Done(String::new()),
    };
    let mut notes = Vec::new();
    for step in ended {
        notes.push(step.note);
        plan.warnings.extend(step.warning);
        plan.writes.extend(step.writes);
    }
    // Last, once the wipe and the purge ended: the volumes.
    plan.writes.extend(
        seen.volumes
            .iter()
            .filter(|volume| !volume.deleting)
            .map(|volume| Write::ReleaseVolume(volume.name.clone())),
    );
    plan.outcome = Outcome::Done(format!("volumes released; {}", notes.join("; ")));
    plan
}

/// Stops what reads or writes the volumes: None once nothing does.
fn stop(seen: &Observed) -> Option<Plan> {
    let mut writes = Vec::new();
    let mut running = Vec::new();
    if let Some(statefulset) = &seen.statefulset {
        if !statefulset.deleting {
            writes.push(Write::DeleteStatefulSet);
        }
        running.push(format!("StatefulSet {}", statefulset.name));
    }
    if let Some(schedule) = &seen.schedule {
        if !schedule.deleting {
            writes.push(Write::DeleteSchedule);
        }
        running.push(format!("CronJob {}", schedule.name));
    }
    for job in &seen.running_jobs {
        if !job.stopping {
            writes.push(Write::StopJob(job.name.clone()));
        }
        running.push(format!("Job {}", job.name));
    }
    running.extend(seen.live_pods.iter().map(|pod| format!("pod {pod}")));
    (!running.is_empty()).then(|| Plan::stop(writes, running))
}

/// A cleanup step that cannot end yet: the write it makes, if any, and what it waits for.
type Waits = (Option<Write>, String);

/// A cleanup step that ended: what came of it, a warning, and the writes that follow.
struct Ended {
    note: String,
    warning: Option<Warning>,
    writes: Vec<Write>,
}

impl Ended {
    fn note(note: String) -> Self {
        Ended {
            note,
            warning: None,
            writes: Vec::new(),
        }
    }

    /// Said in the note and in a Warning event.
    fn warned(reason: &'static str, message: String) -> Self {
        Ended {
            note: message.clone(),
            warning: Some((reason, message)),
            writes: Vec::new(),
        }
    }
}

/// The wipe of the static volumes: what came of it, or what it waits for.
fn wipe(seen: &Observed) -> Result<Ended, Waits> {
    let paths = seen
        .volumes
        .iter()
        .filter_map(|volume| volume.path.as_deref())
        .collect::<Vec<_>>()
        .join(", ");
    // A namespace being deleted accepts no new Job, but a wipe made before may still be
    // wiping: that one is waited for, and said as it ended.
    if seen.namespace_terminating && !seen.wipe.is_ours() {
        return Ok(Ended::note(format!(
            "live data not wiped: namespace {} is being deleted and accepts no Job; it stays in {paths}, which no later app is given",
            seen.namespace
        )));
    }
    // A node gone for good (its Node object deleted) took the data with it, and no Job
    // could run there: waiting for one would hold the deletion forever.
    if let Some(gone) = seen
        .volumes
        .iter()
        .find(|volume| volume.node_gone)
        .and_then(|volume| volume.node.as_deref())
    {
        return Ok(Ended::warned(
            "WipeSkipped",
            format!(
                "live data not wiped: its node {gone} is gone, and the data in {paths} with it"
            ),
        ));
    }
    // Every volume the app has: a StatefulSet scaled down keeps its removed replicas'.
    let replicas = seen
        .volumes
        .iter()
        .filter_map(|volume| volume.ordinal)
        .max()
        .map_or(0, |highest| highest.saturating_add(1))
        .max(seen.replicas);
    let job = &seen.wipe_job;
    match cleanup_state(seen, &seen.wipe, job, Write::MakeWipe { replicas })? {
        JobState::Succeeded => Ok(Ended::note(format!("live data wiped ({paths})"))),
        state => Ok(Ended::warned(
            "WipeFailed",
            format!(
                "live data in {paths} could not be wiped by Job {job} ({state:?}); no later app is given it"
            ),
        )),
    }
}

/// The purge of the backups: what came of it (with the writes that release what held
/// them), or what it waits for.
fn backups(seen: &Observed, purge: &Purge) -> Result<Ended, Waits> {
    let place = &seen.backups_place;
    if seen.namespace_terminating && !purge.job.is_ours() || !purge.reachable {
        return Ok(Ended::note(format!(
            "backups not deleted: no Job can reach {place} now; they stay"
        )));
    }
    // As for the wipe: no Job can run on a node that is gone, and the backups went with it.
    // Their claim and volume stay, the record of whose they are should the node come back.
    if let Some(gone) = &purge.gone_node {
        return Ok(Ended::warned(
            "PurgeSkipped",
            format!("backups not deleted: their node {gone} is gone, and {place} with it"),
        ));
    }
    let job = &purge.job_name;
    match cleanup_state(seen, &purge.job, job, Write::MakePurge)? {
        JobState::Succeeded => Ok(Ended {
            note: format!("backups in {place} deleted"),
            warning: None,
            writes: purge
                .claim
                .iter()
                .map(|claim| Write::DeleteBackupClaim(claim.clone()))
                .chain(purge.volumes.iter().cloned().map(Write::DeleteBackupVolume))
                .collect(),
        }),
        state => Ok(Ended::warned(
            "PurgeFailed",
            format!("backups in {place} were not deleted: Job {job} ended {state:?}"),
        )),
    }
}

/// How a wipe or purge Job ended; else the write that makes it, if missing, and what the
/// deletion waits for.
fn cleanup_state(
    seen: &Observed,
    state: &Cleanup,
    job: &str,
    make: Write,
) -> Result<JobState, Waits> {
    match state {
        Cleanup::Absent => Err((Some(make), format!("Job {job}, just made"))),
        Cleanup::NotOurs => Err((
            None,
            format!("Job {job}, which is not this app's: delete it, and this app's own is made"),
        )),
        Cleanup::Running => Err((
            None,
            format!(
                "Job {job} to end (kubectl -n {} describe job {job}; if the node that holds \
                 the app's data or backups is gone for good, delete its Node object and \
                 deletion goes on without this Job)",
                seen.namespace
            ),
        )),
        Cleanup::Ended(state) => Ok(state.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(ordinal: i32) -> DataVolume {
        DataVolume {
            name: format!("pv-{ordinal}"),
            deleting: false,
            path: Some(format!("/data/{ordinal}")),
            ordinal: Some(ordinal),
            node: Some("node-a".into()),
            node_gone: false,
        }
    }

    fn deleted_app() -> Observed {
        Observed {
            static_volumes: true,
            volumes: vec![volume(0)],
            replicas: 1,
            wipe_job: "wipe-hello".into(),
            backups_place: "node directory /b".into(),
            ..Observed::default()
        }
    }

    #[test]
    fn nothing_is_wiped_or_released_while_anything_may_use_the_volumes() {
        let mut seen = deleted_app();
        seen.statefulset = Some(Child {
            name: "hello".into(),
            deleting: false,
        });
        seen.schedule = Some(Child {
            name: "backup-hello".into(),
            deleting: true,
        });
        seen.running_jobs = vec![
            RunningJob {
                name: "backup-1".into(),
                stopping: false,
            },
            RunningJob {
                name: "backup-0".into(),
                stopping: true,
            },
        ];
        seen.live_pods = vec!["hello-0".into()];
        let plan = decide(&seen);
        assert_eq!(
            plan.writes,
            [Write::DeleteStatefulSet, Write::StopJob("backup-1".into())],
            "what is stopping already is left to stop"
        );
        let Outcome::Waiting(what) = plan.outcome else {
            panic!("waits")
        };
        assert!(what.starts_with("StatefulSet hello, CronJob backup-hello, Job backup-1, Job backup-0, pod hello-0 to stop"));

        // A pod left alone still holds the wipe off.
        let mut seen = deleted_app();
        seen.live_pods = vec!["backup-0-x".into()];
        assert!(decide(&seen).writes.is_empty());
    }

    #[test]
    fn the_wipe_is_made_waited_for_and_then_the_volumes_released() {
        let mut seen = deleted_app();
        seen.volumes.push(volume(2));
        let plan = decide(&seen);
        assert_eq!(plan.writes, [Write::MakeWipe { replicas: 3 }]);
        seen.wipe = Cleanup::Running;
        let plan = decide(&seen);
        assert!(plan.writes.is_empty());
        assert!(
            matches!(plan.outcome, Outcome::Waiting(w) if w.starts_with("Job wipe-hello to end"))
        );
        seen.wipe = Cleanup::Ended(JobState::Succeeded);
        let plan = decide(&seen);
        assert_eq!(
            plan.writes,
            [
                Write::ReleaseVolume("pv-0".into()),
                Write::ReleaseVolume("pv-2".into())
            ]
        );
        assert_eq!(
            plan.outcome,
            Outcome::Done(
                "volumes released; live data wiped (/data/0, /data/2); backups are kept in node directory /b"
                    .into()
            )
        );
    }

    #[test]
    fn a_failed_wipe_is_warned_of_and_a_look_alike_never_taken_for_it() {
        let mut seen = deleted_app();
        seen.wipe = Cleanup::NotOurs;
        let plan = decide(&seen);
        assert!(plan.writes.is_empty());
        assert!(matches!(plan.outcome, Outcome::Waiting(w) if w.contains("not this app's")));
        seen.wipe = Cleanup::Ended(JobState::Failed("BackoffLimitExceeded".into()));
        let plan = decide(&seen);
        assert_eq!(plan.warnings.len(), 1);
        assert_eq!(plan.warnings[0].0, "WipeFailed");
        assert_eq!(plan.writes, [Write::ReleaseVolume("pv-0".into())]);
    }

    #[test]
    fn no_wipe_waits_on_a_gone_node_or_a_terminating_namespace() {
        let mut seen = deleted_app();
        seen.volumes[0].node_gone = true;
        let plan = decide(&seen);
        assert_eq!(plan.warnings[0].0, "WipeSkipped");
        assert_eq!(plan.writes, [Write::ReleaseVolume("pv-0".into())]);
        let mut seen = deleted_app();
        seen.namespace_terminating = true;
        seen.purge = Some(Purge {
            reachable: true,
            job: Cleanup::Absent,
            job_name: "purge-hello".into(),
            claim: None,
            volumes: Vec::new(),
            gone_node: None,
        });
        let plan = decide(&seen);
        assert_eq!(plan.writes, [Write::ReleaseVolume("pv-0".into())]);
        assert!(matches!(plan.outcome, Outcome::Done(d) if d.contains("backups not deleted")));
        // A wipe made before the namespace's deletion may still be wiping: waited for.
        seen.wipe = Cleanup::Running;
        let plan = decide(&seen);
        assert!(plan.writes.is_empty(), "{plan:?}");
        assert!(matches!(plan.outcome, Outcome::Waiting(w) if w.contains("Job wipe-hello to end")));
        seen.wipe = Cleanup::Ended(JobState::Succeeded);
        let plan = decide(&seen);
        assert!(matches!(plan.outcome, Outcome::Done(d) if d.contains("live data wiped")));
    }

    #[test]
    fn backups_asked_gone_are_purged_after_the_wipe_then_their_claim_and_volume() {
        let mut seen = deleted_app();
        seen.wipe = Cleanup::Ended(JobState::Succeeded);
        seen.purge = Some(Purge {
            reachable: true,
            job: Cleanup::Absent,
            job_name: "purge-hello".into(),
            claim: Some("backups-hello".into()),
            volumes: vec!["backup-pv".into()],
            gone_node: None,
        });
        assert_eq!(decide(&seen).writes, [Write::MakePurge]);
        if let Some(purge) = &mut seen.purge {
            purge.job = Cleanup::Ended(JobState::Succeeded);
        }
        assert_eq!(
            decide(&seen).writes,
            [
                Write::DeleteBackupClaim("backups-hello".into()),
                Write::DeleteBackupVolume("backup-pv".into()),
                Write::ReleaseVolume("pv-0".into())
            ]
        );
        // Backups on a node that is gone for good went with it: no Job can delete them,
        // and deletion does not wait for one.
        if let Some(purge) = &mut seen.purge {
            purge.job = Cleanup::Running;
            purge.gone_node = Some("node-b".into());
        }
        let plan = decide(&seen);
        assert_eq!(plan.writes, [Write::ReleaseVolume("pv-0".into())]);
        assert_eq!(plan.warnings[0].0, "PurgeSkipped");
    }
}
