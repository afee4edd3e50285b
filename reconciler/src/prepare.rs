//! Volumes for an app that runs as a non-root user (`spec.securityContext.runAsUser`).
//!
//! A static hostPath volume's directory is made by the kubelet, root's and 0755, and the
//! kubelet applies no fsGroup to that volume type: a non-root app could not write into it.
//! So before such an app's pods start, a mover Job gives each volume's root directory to
//! the app's user (the mover's `prepare`). The StatefulSet records what was prepared
//! (`names::PREPARED`); until the record covers the replicas asked for, the app runs only
//! as many as it covers (none at first).
//!
//! Preparing is idempotent: a record lost or forged, a Job gone or run twice, only makes
//! it run again (a forged record harms only the app of whoever forged it). A restore drops
//! the record, since its swap sets each volume root's owner as its snapshot recorded: the
//! volumes are prepared again before the app starts after it.
//!
//! Deciding is pure: `plan` returns what to do.

use std::sync::Arc;

use hellostateful_api::HelloStatefulSpec;
use hellostateful_api::names::{self, Component};
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;

use crate::children::{AppRef, MoverTask};
use crate::jobs::{self, JobState};

/// The `action` label of a preparing Job.
pub const ACTION: &str = "prepare";

/// Whose the app's volumes must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub uid: i64,
    pub gid: i64,
    /// The volume roots' permission bits: with an fsGroup, setgid and group-writable (as
    /// kubelet makes volumes that take one).
    pub mode: u32,
}

impl Owner {
    /// Whose the app's volumes must be: nobody's in particular (nothing to prepare) for an
    /// app that runs as root or whose user the spec does not say, or on volumes of a
    /// StorageClass (the kubelet applies fsGroup to those).
    pub fn wanted(spec: &HelloStatefulSpec, static_volumes: bool) -> Option<Self> {
        if !static_volumes {
            return None;
        }
        let context = spec.security_context.as_ref()?;
        let uid = context.run_as_user.filter(|uid| *uid != 0)?;
        Some(match context.fs_group {
            Some(gid) => Owner {
                uid,
                gid,
                mode: 0o2770,
            },
            None => Owner {
                uid,
                gid: context.run_as_group.unwrap_or(uid),
                mode: 0o770,
            },
        })
    }

    /// `<uid>:<gid>:<mode>`, as the record names it.
    fn key(&self) -> String {
        format!("{}:{}:{:o}", self.uid, self.gid, self.mode)
    }
}

#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// At most this many replicas may run: those whose volumes are prepared.
    pub runs_at_most: Option<i32>,
    /// The record the StatefulSet carries.
    pub record: Option<String>,
    /// The Job to make, if any.
    pub start: Option<(String, MoverTask)>,
    /// Finished preparing Jobs to end: the record holds their outcome.
    pub end: Vec<String>,
    /// What status says while the app waits for its volumes.
    pub message: Option<String>,
}

/// What the app's volumes need before `replicas` pods may run on them, given the
/// StatefulSet's record (`recorded`) and the app's mover Jobs. While `restoring`, nothing
/// is prepared and the record is dropped (the restore keeps the app stopped anyway).
pub fn plan(
    app: &AppRef,
    owner: Option<Owner>,
    replicas: i32,
    recorded: Option<&str>,
    restoring: bool,
    jobs: &[Arc<Job>],
) -> Plan {
    let preparing: Vec<&Arc<Job>> = jobs
        .iter()
        .filter(|job| jobs::component(job) == Some(Component::Storage))
        .filter(|job| job.labels().get(names::ACTION_LABEL).map(String::as_str) == Some(ACTION))
        .collect();
    let finished = |keep: Option<&str>| -> Vec<String> {
        preparing
            .iter()
            .filter(|job| Some(job.name_any().as_str()) != keep)
            .filter(|job| jobs::is_finished_and_kept(job))
            .map(|job| job.name_any())
            .collect()
    };
    let Some(owner) = owner.filter(|_| !restoring) else {
        return Plan {
            end: finished(None),
            ..Plan::default()
        };
    };
    let covered = recorded
        .and_then(|record| record.split_once('/'))
        .filter(|(whose, _)| *whose == owner.key())
        .and_then(|(_, count)| count.parse::<i32>().ok())
        .unwrap_or(0)
        .max(0);
    if covered >= replicas {
        return Plan {
            record: recorded.map(str::to_string),
            end: finished(None),
            ..Plan::default()
        };
    }
    let wanted = format!("{}/{replicas}", owner.key());
    let job_name = names::prepare_job(&app.name, &app.uid, &wanted);
    let job = preparing.iter().find(|job| job.name_any() == job_name);
    let waiting = |why: String| Plan {
        runs_at_most: Some(covered),
        record: recorded.map(str::to_string),
        end: finished(Some(&job_name)),
        message: Some(why),
        ..Plan::default()
    };
    let whose = format!(
        "user {} and group {} (mode {:o})",
        owner.uid, owner.gid, owner.mode
    );
    let giving = || {
        waiting(format!(
            "giving the app's volumes to {whose} (Job {job_name}) before its pods start"
        ))
    };
    match job.map(|job| jobs::state(job)) {
        None => Plan {
            start: Some((job_name.clone(), MoverTask::Prepare { replicas, owner })),
            ..giving()
        },
        Some(JobState::Running) => giving(),
        Some(JobState::Failed(reason)) => waiting(format!(
            "could not give the app's volumes to {whose}: Job {job_name} failed: {reason} \
             (delete the Job to try again)"
        )),
        Some(JobState::Succeeded) => Plan {
            record: Some(wanted),
            end: finished(None),
            ..Plan::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::app;
    use hellostateful_api::HelloStateful;
    use serde_json::json;

    fn non_root(extra: serde_json::Value) -> HelloStateful {
        let mut spec = json!({"replicas": 2, "securityContext":
            {"runAsUser": 1000, "runAsNonRoot": true}});
        if let serde_json::Value::Object(extra) = extra {
            for (key, value) in extra {
                spec["securityContext"][key] = value;
            }
        }
        app(spec, json!({}))
    }

    fn job(name: &str, status: serde_json::Value) -> Arc<Job> {
        let mut labels = names::labels("hello", Component::Storage);
        labels.insert(names::ACTION_LABEL.into(), ACTION.into());
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels},
                "status": status}))
            .expect("job"),
        )
    }

    fn ended(kind: &str) -> serde_json::Value {
        json!({"conditions": [{"type": kind, "status": "True", "reason": "BackoffLimitExceeded",
            "message": "it failed"}]})
    }

    #[test]
    fn only_a_non_root_app_on_node_directory_volumes_has_volumes_to_prepare() {
        let spec =
            |context: serde_json::Value| app(json!({"securityContext": context}), json!({})).spec;
        let with_group = spec(json!({"runAsUser": 1000, "fsGroup": 2000}));
        assert_eq!(
            Owner::wanted(&with_group, true),
            Some(Owner {
                uid: 1000,
                gid: 2000,
                mode: 0o2770
            })
        );
        assert_eq!(Owner::wanted(&with_group, false), None, "fsGroup applies");
        let own_group = spec(json!({"runAsUser": 1000, "runAsGroup": 3000}));
        assert_eq!(
            Owner::wanted(&own_group, true),
            Some(Owner {
                uid: 1000,
                gid: 3000,
                mode: 0o770
            })
        );
        assert_eq!(Owner::wanted(&spec(json!({"runAsUser": 0})), true), None);
        assert_eq!(
            Owner::wanted(&spec(json!({"runAsNonRoot": true})), true),
            None
        );
        assert_eq!(Owner::wanted(&app(json!({}), json!({})).spec, true), None);
    }

    #[test]
    fn a_new_app_runs_no_pod_until_its_volumes_are_prepared_then_records_it() {
        let app = non_root(json!({"fsGroup": 2000}));
        let app = AppRef::new(&app).expect("app");
        let owner = Owner::wanted(&app.app.spec, true);
        let first = plan(&app, owner, 2, None, false, &[]);
        assert_eq!(first.runs_at_most, Some(0));
        let (name, task) = first.start.expect("a Job");
        assert_eq!(
            task,
            MoverTask::Prepare {
                replicas: 2,
                owner: owner.expect("owner")
            }
        );
        assert!(
            first
                .message
                .expect("said")
                .contains("user 1000 and group 2000")
        );

        let running = plan(
            &app,
            owner,
            2,
            None,
            false,
            &[job(&name, json!({"active": 1}))],
        );
        assert_eq!((running.runs_at_most, running.start), (Some(0), None));

        let done = plan(
            &app,
            owner,
            2,
            None,
            false,
            &[job(&name, ended("Complete"))],
        );
        assert_eq!(done.runs_at_most, None);
        assert_eq!(done.record.as_deref(), Some("1000:2000:2770/2"));
        // Ended once the StatefulSet holds the record (the controller ends it after that
        // write, in the same pass).
        assert_eq!(done.end, [name]);

        let recorded = plan(&app, owner, 2, done.record.as_deref(), false, &[]);
        assert_eq!(recorded.runs_at_most, None);
        assert_eq!(recorded.record, done.record);
        assert_eq!(recorded.start, None, "a Job gone is not made again");
    }

    #[test]
    fn a_scale_up_or_a_new_owner_prepares_again_keeping_what_is_covered_running() {
        let app = non_root(json!({}));
        let app = AppRef::new(&app).expect("app");
        let owner = Owner::wanted(&app.app.spec, true);
        let more = plan(&app, owner, 3, Some("1000:1000:770/2"), false, &[]);
        assert_eq!(more.runs_at_most, Some(2), "the prepared two run on");
        assert!(matches!(
            more.start,
            Some((_, MoverTask::Prepare { replicas: 3, .. }))
        ));
        assert_eq!(more.record.as_deref(), Some("1000:1000:770/2"));

        let fewer = plan(&app, owner, 1, Some("1000:1000:770/2"), false, &[]);
        assert_eq!((fewer.runs_at_most, fewer.start), (None, None));

        let other = plan(&app, owner, 2, Some("1001:1000:770/2"), false, &[]);
        assert_eq!(other.runs_at_most, Some(0), "another user's volumes");
        for forged in ["1000:1000:770", "1000:1000:770/x", "1000:1000:770/-1"] {
            let forged = plan(&app, owner, 2, Some(forged), false, &[]);
            assert_eq!(forged.runs_at_most, Some(0), "{forged:?}");
        }
    }

    #[test]
    fn a_failed_preparation_holds_the_app_and_says_how_to_retry() {
        let app = non_root(json!({}));
        let app = AppRef::new(&app).expect("app");
        let owner = Owner::wanted(&app.app.spec, true);
        let name = plan(&app, owner, 2, None, false, &[]).start.expect("job").0;
        let failed = plan(&app, owner, 2, None, false, &[job(&name, ended("Failed"))]);
        assert_eq!((failed.runs_at_most, &failed.start), (Some(0), &None));
        let message = failed.message.expect("said");
        assert!(
            message.contains("it failed") && message.contains("delete the Job"),
            "{message}"
        );
        assert!(failed.end.is_empty(), "kept to tell why");
    }

    #[test]
    fn a_restore_drops_the_record_and_prepares_nothing() {
        let app = non_root(json!({}));
        let app = AppRef::new(&app).expect("app");
        let owner = Owner::wanted(&app.app.spec, true);
        let restoring = plan(&app, owner, 2, Some("1000:1000:770/2"), true, &[]);
        assert_eq!(restoring, Plan::default());
        let root = plan(&app, None, 2, Some("1000:1000:770/2"), false, &[]);
        assert_eq!(
            root,
            Plan::default(),
            "nothing to prepare, nothing to record"
        );
    }
}
