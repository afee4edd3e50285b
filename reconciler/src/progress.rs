//! What a pass reports once the app's children are in place: replicas ready, whether a
//! backup or restore runs, Ready, and when to look again. A pure decision from what the
//! pass observed, so each case is tested without an API server.

use std::sync::Arc;

use hellostateful_api::HelloStatefulStatus;
use hellostateful_api::names::Component;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::runtime::controller::Action;

use crate::conditions::{self, Conditions};
use crate::controller::{RESYNC, WAIT};
use crate::jobs;

/// What the pass observed and decided, as far as progress is concerned.
pub struct Observed<'a> {
    /// The StatefulSet's ready replicas, as cached (0 when it does not exist).
    pub ready: i32,
    /// The app's mover Jobs.
    pub jobs: &'a [Arc<Job>],
    /// A restore is under way: the app is stopped for it.
    pub restoring: bool,
    /// The app is stopped for a backup in stop mode: what status says of it (see `stops`).
    pub stopped_for_backup: Option<&'a str>,
    /// Pods wait for their volumes to be given to the app's user: what status says of it
    /// (see `prepare`).
    pub preparing_volumes: Option<&'a str>,
    /// The replicas the spec asks for.
    pub wanted: i32,
    /// The replicas this pass asked of the StatefulSet (fewer while the app is held stopped).
    pub asked: i32,
}

/// Sets `readyReplicas` and the BackingUp, Restoring and Ready conditions; returns when to
/// look again: soon while anything is under way, at the resync otherwise.
pub fn report(
    status: &mut HelloStatefulStatus,
    generation: Option<i64>,
    seen: &Observed,
) -> Action {
    let ready = seen.ready;
    status.ready_replicas = ready;
    let backing_up = jobs::running(seen.jobs, Component::Backup).map(|job| job.name_any());
    let pending_request = [&status.backup_request, &status.restore_request]
        .into_iter()
        .flatten()
        .any(|r| !r.phase.is_final());
    let mut conditions = Conditions::new(&mut status.conditions, generation);
    match &backing_up {
        Some(job) => conditions.set(
            conditions::BACKING_UP,
            true,
            "JobRunning",
            &format!("Job {job} is copying the app's data"),
        ),
        None => conditions.set(
            conditions::BACKING_UP,
            false,
            "Idle",
            "no backup is running",
        ),
    };
    // A finished restore's outcome stays as the reason until the next one.
    if !seen.restoring && !conditions.has(conditions::RESTORING) {
        conditions.set(
            conditions::RESTORING,
            false,
            "Idle",
            "no restore is running",
        );
    }
    let wanted = seen.wanted;
    if seen.restoring {
        conditions.set(
            conditions::READY,
            false,
            "Restoring",
            "the app is stopped while its data is restored",
        );
    } else if let Some(message) = seen.stopped_for_backup {
        conditions.set(conditions::READY, false, "StoppedForBackup", message);
    } else if let Some(message) = seen.preparing_volumes {
        conditions.set(conditions::READY, false, "PreparingVolumes", message);
    } else if ready >= wanted {
        conditions.set(
            conditions::READY,
            true,
            "AllReplicasReady",
            &format!("{ready}/{wanted} replicas ready"),
        );
    } else {
        conditions.set(
            conditions::READY,
            false,
            "ReplicasNotReady",
            &format!("{ready}/{wanted} replicas ready"),
        );
    }
    // An app held stopped (a restore that failed mid-swap) has nothing to wait for: only
    // replicas asked of the StatefulSet and not yet ready are.
    let busy = seen.restoring
        || seen.stopped_for_backup.is_some()
        || seen.preparing_volumes.is_some()
        || backing_up.is_some()
        || ready != seen.asked
        || pending_request;
    Action::requeue(if busy { WAIT } else { RESYNC })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hellostateful_api::names;
    use hellostateful_api::{RequestPhase, RequestStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use serde_json::json;

    fn running_job(component: Component) -> Arc<Job> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "backup-hello-1", "labels": names::labels("hello", component)},
                "status": {"active": 1},
            }))
            .expect("job"),
        )
    }

    fn condition<'a>(status: &'a HelloStatefulStatus, kind: &str) -> &'a Condition {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == kind)
            .unwrap_or_else(|| panic!("no {kind} condition"))
    }

    fn observed(ready: i32, jobs: &[Arc<Job>]) -> Observed<'_> {
        Observed {
            ready,
            jobs,
            restoring: false,
            stopped_for_backup: None,
            preparing_volumes: None,
            wanted: 2,
            asked: 2,
        }
    }

    #[test]
    fn an_app_with_every_replica_ready_is_ready_and_looked_at_again_at_the_resync() {
        let mut status = HelloStatefulStatus::default();
        let action = report(&mut status, Some(3), &observed(2, &[]));
        assert_eq!(action, Action::requeue(RESYNC));
        assert_eq!(status.ready_replicas, 2);
        let ready = condition(&status, conditions::READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "AllReplicasReady")
        );
        assert_eq!(ready.observed_generation, Some(3));
        assert_eq!(condition(&status, conditions::BACKING_UP).status, "False");
        assert_eq!(condition(&status, conditions::RESTORING).reason, "Idle");
    }

    #[test]
    fn replicas_not_yet_ready_are_waited_for() {
        let mut status = HelloStatefulStatus::default();
        let action = report(&mut status, None, &observed(1, &[]));
        assert_eq!(action, Action::requeue(WAIT));
        let ready = condition(&status, conditions::READY);
        assert_eq!(
            (ready.status.as_str(), ready.message.as_str()),
            ("False", "1/2 replicas ready")
        );
    }

    #[test]
    fn an_app_held_stopped_is_not_ready_and_not_polled() {
        let mut status = HelloStatefulStatus::default();
        let held = Observed {
            asked: 0,
            ..observed(0, &[])
        };
        assert_eq!(report(&mut status, None, &held), Action::requeue(RESYNC));
        assert_eq!(
            condition(&status, conditions::READY).reason,
            "ReplicasNotReady"
        );
    }

    #[test]
    fn a_running_backup_is_reported_and_watched() {
        let mut status = HelloStatefulStatus::default();
        let jobs = [running_job(Component::Backup)];
        let action = report(&mut status, None, &observed(2, &jobs));
        assert_eq!(action, Action::requeue(WAIT));
        let backing_up = condition(&status, conditions::BACKING_UP);
        assert_eq!(backing_up.status, "True");
        assert!(
            backing_up.message.contains("backup-hello-1"),
            "{}",
            backing_up.message
        );
        // A running restore Job is not a backup.
        let mut status = HelloStatefulStatus::default();
        let jobs = [running_job(Component::Restore)];
        report(&mut status, None, &observed(2, &jobs));
        assert_eq!(condition(&status, conditions::BACKING_UP).status, "False");
    }

    #[test]
    fn a_restore_under_way_keeps_the_app_unready_and_keeps_its_own_reason() {
        let mut status = HelloStatefulStatus::default();
        Conditions::new(&mut status.conditions, None).set(
            conditions::RESTORING,
            true,
            "JobRunning",
            "Job restore-hello-1 restores",
        );
        let restoring = Observed {
            restoring: true,
            asked: 0,
            ..observed(0, &[])
        };
        assert_eq!(report(&mut status, None, &restoring), Action::requeue(WAIT));
        assert_eq!(condition(&status, conditions::READY).reason, "Restoring");
        assert_eq!(
            condition(&status, conditions::RESTORING).reason,
            "JobRunning"
        );
        // Once it is over, the outcome it left stays the reason.
        report(&mut status, None, &observed(2, &[]));
        assert_eq!(
            condition(&status, conditions::RESTORING).reason,
            "JobRunning"
        );
        assert_eq!(condition(&status, conditions::READY).status, "True");
    }

    #[test]
    fn a_backup_request_not_yet_final_is_waited_for() {
        let mut status = HelloStatefulStatus {
            backup_request: Some(RequestStatus {
                token: "t1".into(),
                phase: RequestPhase::Pending,
                job: None,
                backup_id: None,
                message: None,
            }),
            ..Default::default()
        };
        assert_eq!(
            report(&mut status, None, &observed(2, &[])),
            Action::requeue(WAIT)
        );
    }
}
