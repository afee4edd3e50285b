//! Backups in stop mode (`backup.consistency.mode: stop`): the app is stopped for the copy,
//! so that every file holds still while it is read.
//!
//! A backup Job made in that mode carries `names::STOPS_APP` and is made suspended (see
//! `children`). While it is unfinished the app is held at 0 replicas. It is let run (or,
//! made in parts, its parts are made) only once no pod of the app is left and its
//! StatefulSet asks for none, as read afresh from the API server: never on what a cache
//! or an earlier pass believed. When it ends, however it ends, the app starts again; its
//! deadline (`maxStopSeconds`, counted from when it was let run) bounds the outage.
//!
//! The Job is the record: it exists before anything is stopped, it says it stops the app,
//! and it is begun (let run, or its parts marked) before anything copies. A reconciler
//! restarted at any point reads the same from it.
//!
//! Deciding is pure: `plan` returns what to do.

use std::sync::Arc;

use hellostateful_api::names::{self, Component};
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;

use crate::jobs;
use crate::parts;
use crate::reads::{Reads, Unread};

#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// The unfinished backup Job the app is stopped for, if any: the app runs no replica.
    pub holding: Option<String>,
    /// The app is stopped, as read afresh: the parts of a set held for it may be made.
    pub stopped: bool,
    /// Backup Jobs (made whole, not in parts) to let run: the app is stopped.
    pub release: Vec<String>,
    /// What status says while the app is stopped for a backup.
    pub message: Option<String>,
}

/// Whether backup Job `job` stops the app (made in stop mode).
pub fn stops_app(job: &Job) -> bool {
    job.annotations().get(names::STOPS_APP).map(String::as_str) == Some("true")
}

/// What the app's unfinished stop-mode backup Jobs ask for. While `restoring` (see
/// `restores::under_way`) one not begun waits, as any backup not begun does (`parts::plan`):
/// the restore holds the app stopped already, and a copy now would seal a volume mid-swap.
pub fn plan(jobs: &[Arc<Job>], restoring: bool, reads: &Reads) -> Result<Plan, Unread> {
    let holding: Vec<&Arc<Job>> = jobs
        .iter()
        .filter(|job| jobs::component(job) == Some(Component::Backup))
        .filter(|job| !job.labels().contains_key(names::PART_OF_LABEL))
        .filter(|job| jobs::is_active(job) && stops_app(job))
        .collect();
    let Some(first) = holding.first() else {
        return Ok(Plan::default());
    };
    let holding_name = first.name_any();
    let waiting: Vec<&&Arc<Job>> = holding
        .iter()
        .filter(|job| !parts::begun(job, jobs))
        .collect();
    let Some(next) = waiting.first() else {
        return Ok(Plan {
            holding: Some(holding_name.clone()),
            message: Some(format!(
                "the app is stopped while backup Job {holding_name} copies its data \
                 (backup.consistency.mode stop); it starts again when the Job ends"
            )),
            ..Plan::default()
        });
    };
    let next_name = next.name_any();
    let waits = |why: String| Plan {
        holding: Some(holding_name.clone()),
        message: Some(format!(
            "stopping the app for backup Job {next_name} (backup.consistency.mode stop): {why}"
        )),
        ..Plan::default()
    };
    if restoring {
        return Ok(waits("it waits for the restore to finish".into()));
    }
    let app_pods = reads.app_pods()?;
    Ok(match app_pods.waiting_for() {
        Some(why) => waits(why),
        // Stopped, as observed: no pod, and a StatefulSet that makes none.
        None => Plan {
            holding: Some(holding_name),
            stopped: true,
            release: waiting
                .iter()
                .filter(|job| parts::count(job).is_none())
                .map(|job| job.name_any())
                .collect(),
            message: Some(format!(
                "the app is stopped: backup Job {next_name} copies its data \
                 (backup.consistency.mode stop); it starts again when the Job ends"
            )),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reads::{AppPods, Read};
    use serde_json::json;

    fn backup_job(name: &str, stops: bool, suspended: bool, extra: serde_json::Value) -> Arc<Job> {
        let mut job = json!({
            "metadata": {
                "name": name,
                "labels": names::labels("hello", Component::Backup),
                "annotations": {},
            },
            "spec": {"suspend": suspended, "template": {}},
            "status": {},
        });
        if stops {
            job["metadata"]["annotations"][names::STOPS_APP] = json!("true");
        }
        if let serde_json::Value::Object(extra) = extra {
            for (key, value) in extra {
                job["metadata"]["labels"][key] = value;
            }
        }
        Arc::new(serde_json::from_value(job).expect("job"))
    }

    fn finished(job: &Arc<Job>) -> Arc<Job> {
        let mut job = (**job).clone();
        job.status =
            serde_json::from_value(json!({"conditions": [{"type": "Complete", "status": "True"}]}))
                .expect("status");
        Arc::new(job)
    }

    fn pods(count: usize, asked: i32) -> Reads {
        let mut reads = Reads::default();
        reads.add_app_pods(AppPods {
            pods: count,
            asked,
            seen: true,
        });
        reads
    }

    #[test]
    fn a_live_backup_neither_stops_the_app_nor_reads_its_pods() {
        let jobs = [backup_job("backup-1", false, false, json!({}))];
        let plan = plan(&jobs, false, &Reads::default()).expect("no read");
        assert_eq!(plan, Plan::default());
    }

    #[test]
    fn a_stop_backup_holds_the_app_and_runs_only_once_no_pod_is_left_as_read_afresh() {
        let jobs = [backup_job("backup-1", true, true, json!({}))];
        let unread = plan(&jobs, false, &Reads::default()).expect_err("reads the pods");
        assert_eq!(unread.0, Read::AppPods);

        let waiting = plan(&jobs, false, &pods(1, 0)).expect("read");
        assert_eq!(waiting.holding.as_deref(), Some("backup-1"));
        assert!(waiting.release.is_empty() && !waiting.stopped);
        assert!(waiting.message.expect("said").contains("1 pod(s) to exit"));

        let asked = plan(&jobs, false, &pods(0, 2)).expect("read");
        assert!(
            asked.release.is_empty(),
            "a StatefulSet asking for 2 may start a pod"
        );
        assert!(asked.message.expect("said").contains("it asks for 2"));

        let stopped = plan(&jobs, false, &pods(0, 0)).expect("read");
        assert_eq!(stopped.release, ["backup-1"]);
        assert!(stopped.stopped);
    }

    #[test]
    fn a_running_stop_backup_keeps_the_app_stopped_without_reading_pods_until_it_ends() {
        let running = backup_job("backup-1", true, false, json!({}));
        let plan_running = plan(std::slice::from_ref(&running), false, &Reads::default())
            .expect("no read: it runs already");
        assert_eq!(plan_running.holding.as_deref(), Some("backup-1"));
        assert!(plan_running.release.is_empty());

        let ended = plan(&[finished(&running)], false, &Reads::default()).expect("no read");
        assert_eq!(
            ended,
            Plan::default(),
            "the app starts again, however it ended"
        );
    }

    #[test]
    fn a_stop_backup_not_begun_waits_for_a_restore_under_way_without_reading_pods() {
        let jobs = [backup_job("backup-1", true, true, json!({}))];
        let plan = plan(&jobs, true, &Reads::default()).expect("no read");
        assert_eq!(plan.holding.as_deref(), Some("backup-1"));
        assert!(plan.release.is_empty() && !plan.stopped);
        assert!(plan.message.expect("said").contains("restore"));
    }

    #[test]
    fn a_set_in_stop_mode_is_not_let_run_here_its_parts_are_made_once_the_app_is_stopped() {
        let set = backup_job("backup-1", true, true, json!({names::PARTS_LABEL: "2"}));
        let plan = plan(&[set], false, &pods(0, 0)).expect("read");
        assert!(plan.stopped, "parts::plan makes its parts");
        assert!(plan.release.is_empty(), "the set runs once its parts ended");
    }
}
