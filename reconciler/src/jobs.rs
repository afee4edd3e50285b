//! Reading a mover Job's outcome from the Job and its pod, so that a restarted reconciler
//! learns where every action stands from the cluster alone.

use std::sync::Arc;

use hellostateful_api::names::{self, Component};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use crate::error::Error;
use crate::kept;
use crate::reads::{Reads, Unread};

/// Container waiting reasons that do not go away by waiting.
const HOPELESS_WAITS: [&str; 5] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// Where a Job stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Not finished yet.
    Running,
    /// Finished: its pod completed.
    Succeeded,
    /// Finished: it gave up, with the reason.
    Failed(String),
}

/// Whether `job` finished and still has a TTL to wait out.
pub fn is_finished_and_kept(job: &Job) -> bool {
    job.metadata.deletion_timestamp.is_none()
        && job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished) != Some(0)
        && matches!(state(job), JobState::Succeeded | JobState::Failed(_))
}

/// What a mover Job does, from its component label.
pub fn component(job: &Job) -> Option<Component> {
    match job.labels().get("app.kubernetes.io/component")?.as_str() {
        "backup" => Some(Component::Backup),
        "restore" => Some(Component::Restore),
        // Wiping a deleted app's volumes, preparing a non-root app's.
        "storage" => Some(Component::Storage),
        _ => None,
    }
}

/// The Job of `component` among `jobs` that is still running, if any. Parts of a backup
/// are not counted: the Job that seals them runs from before the first to after the last.
pub fn running(jobs: &[Arc<Job>], component: Component) -> Option<&Arc<Job>> {
    jobs.iter()
        .filter(|job| self::component(job) == Some(component))
        .filter(|job| !job.labels().contains_key(names::PART_OF_LABEL))
        .find(|job| is_active(job))
}

/// The state of `job` from its conditions.
pub fn state(job: &Job) -> JobState {
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let is_true = |kind: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == kind && c.status == "True")
    };
    if is_true("Complete").is_some() {
        return JobState::Succeeded;
    }
    // A Job the reconciler stopped says why its pod never ran better than its deadline does.
    let stopped = job
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::STOPPED_BECAUSE));
    match is_true("Failed") {
        Some(failed) => JobState::Failed(
            stopped
                .cloned()
                .or_else(|| failed.message.clone())
                .or_else(|| failed.reason.clone())
                .unwrap_or_else(|| "the Job failed".to_string()),
        ),
        None => JobState::Running,
    }
}

/// Whether the Job controller started `job` more than `patience` ago. A Job it has not
/// taken up yet (no start time: the controller itself may be slow, as after an API server
/// restart) is never old.
pub fn older_than(job: &Job, now: Timestamp, patience: SignedDuration) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .is_some_and(|started| now.duration_since(started.0) >= patience)
}

/// How many times `patience` a started Job may have no pod at all, and no refusal on record,
/// before it is given up: a Job controller that recovers from an API server restart can take
/// minutes to make pods.
const NO_POD_PATIENCE_FACTOR: i32 = 5;

/// The nodes of the cluster by name, as the cache holds them.
pub type Nodes<'a> = dyn Fn(&str) -> Option<Arc<Node>> + 'a;

/// Why a running Job's pod cannot start or cannot go on, once the Job is older than
/// `patience`: its container's waiting reason (`ErrImagePull: …`), the scheduler's
/// (`Unschedulable: …`), the Job controller's refusal to create it (`refusal`, from its
/// FailedCreate event: an admission policy, a quota), or its node, gone or not ready for
/// longer than `patience` (its kubelet no longer runs it, whatever its status still says).
/// A pod held only until its claims are bound is given five times `patience`. None while a
/// pod runs or may still start.
pub fn stuck(
    job: &Job,
    pods: &[Pod],
    refusal: Option<&str>,
    nodes: &Nodes,
    now: Timestamp,
    patience: SignedDuration,
) -> Option<String> {
    if !older_than(job, now, patience) {
        return None;
    }
    let name = job.metadata.name.as_deref().unwrap_or("?");
    if pods.is_empty() {
        if let Some(refusal) = refusal {
            return Some(format!("its pod could not be created: {refusal}"));
        }
        let longer = patience * NO_POD_PATIENCE_FACTOR;
        return older_than(job, now, longer).then(|| {
            format!(
                "no pod was created in {}s: `kubectl describe job {name}` shows why",
                longer.as_secs()
            )
        });
    }
    // Pods that ended are the Job's retries; of the others, every one must be stuck: one
    // that runs, or may still start, keeps the Job alive.
    let mut live = pods.iter().filter(|pod| {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        !matches!(phase, Some("Failed" | "Succeeded"))
    });
    let lost = |pod: &Pod| lost_node(pod, nodes, now, patience);
    let first = live.next()?;
    if let Some(why) = lost(first) {
        return live
            .all(|pod| lost(pod).is_some())
            .then(|| format!("its pod cannot go on: {why}"));
    }
    // Claims the PV controller has yet to bind (a claim made with its volume named, or a
    // class the scheduler has not seen yet) are bound by its own retries, every 15 s by
    // default: a pod held for them is given the longer patience.
    let waited = if waits_for_binding(first) {
        patience * NO_POD_PATIENCE_FACTOR
    } else {
        patience
    };
    if !older_than(job, now, waited) {
        return None;
    }
    let first = hopeless_wait(first)?;
    live.all(|pod| hopeless_wait(pod).is_some())
        .then(|| format!("its pod cannot start after {}s: {first}", waited.as_secs()))
}

/// What the scheduler says of a pod whose claims are not bound yet, while it binds none of
/// them itself (not `WaitForFirstConsumer`).
const UNBOUND_CLAIMS: &str = "pod has unbound immediate PersistentVolumeClaims";

/// Whether `pod` is held by the scheduler only until its claims are bound.
fn waits_for_binding(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.message
                    .as_deref()
                    .is_some_and(|m| m.contains(UNBOUND_CLAIMS))
        })
}

/// Why the node `pod` runs on no longer runs it: gone, or not ready for longer than
/// `patience`.
fn lost_node(pod: &Pod, nodes: &Nodes, now: Timestamp, patience: SignedDuration) -> Option<String> {
    let name = pod.spec.as_ref()?.node_name.as_deref()?;
    let Some(node) = nodes(name) else {
        return Some(format!("its node {name} is gone"));
    };
    let ready = node
        .status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|condition| condition.type_ == "Ready")?;
    let since = ready.last_transition_time.as_ref()?.0;
    (ready.status != "True" && now.duration_since(since) >= patience).then(|| {
        format!(
            "its node {name} has not been ready since {since} ({})",
            ready.reason.as_deref().unwrap_or("NotReady")
        )
    })
}

/// `reason: message` of a Pending pod that cannot start by waiting.
fn hopeless_wait(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    if status.phase.as_deref() != Some("Pending") {
        return None;
    }
    let waiting = status.container_statuses.iter().flatten().find_map(|c| {
        let waiting = c.state.as_ref()?.waiting.as_ref()?;
        let reason = waiting.reason.as_deref()?;
        HOPELESS_WAITS
            .contains(&reason)
            .then(|| (reason.to_string(), waiting.message.clone()))
    });
    let unschedulable = status.conditions.iter().flatten().find_map(|c| {
        (c.type_ == "PodScheduled" && c.status == "False").then(|| {
            (
                c.reason.clone().unwrap_or_else(|| "Unschedulable".into()),
                c.message.clone(),
            )
        })
    });
    let (reason, message) = waiting.or(unschedulable)?;
    Some(match message {
        Some(message) => format!("{reason}: {message}"),
        None => reason,
    })
}

/// The running Jobs among `jobs` whose pod cannot start or go on (see `stuck`), each with
/// why.
pub fn stuck_ones(
    jobs: &[Arc<Job>],
    reads: &Reads,
    nodes: &Nodes,
    now: Timestamp,
    patience: SignedDuration,
) -> Result<Vec<(String, String)>, Unread> {
    let mut found = Vec::new();
    for job in jobs {
        let stopped = job.annotations().contains_key(names::STOPPED_BECAUSE);
        if !is_active(job) || stopped || !older_than(job, now, patience) {
            continue;
        }
        let name = job.name_any();
        let pods = reads.job_pods(&name)?;
        // Only for a Job with no pod: the Job controller's own account of why.
        let refusal = match pods.is_empty() {
            true => reads.refusal(&name)?,
            false => None,
        };
        if let Some(reason) = stuck(job, pods, refusal, nodes, now, patience) {
            found.push((name, reason));
        }
    }
    Ok(found)
}

/// Whether `job` still runs.
pub fn is_active(job: &Job) -> bool {
    state(job) == JobState::Running && job.metadata.deletion_timestamp.is_none()
}

/// What the API server's 409 on making the app's Job `name` in `namespace` means, given
/// `existing`, the Job it holds under that name (None: deleted since). The app's own, made
/// by an earlier pass whose status write was lost, is the truth: the pass goes on. Any other
/// holds the name for good (a tenant can make a Job of any name the app's will take, and
/// its pods stay unread), so the pass stops, and says so, until the user deletes it.
pub fn made_already(
    existing: Option<&Job>,
    uid: &str,
    name: &str,
    namespace: &str,
) -> Result<(), Error> {
    match existing {
        Some(job) if kept::controller_uid(&job.metadata) != Some(uid) => Err(Error::NameTaken {
            name: name.to_owned(),
            namespace: namespace.to_owned(),
        }),
        _ => Ok(()),
    }
}

/// When `job` finished, for ordering finished Jobs.
pub fn finished_at(job: &Job) -> Option<k8s_openapi::jiff::Timestamp> {
    let status = job.status.as_ref()?;
    status.completion_time.as_ref().map(|t| t.0).or_else(|| {
        status
            .conditions
            .iter()
            .flatten()
            .filter(|c| c.status == "True")
            .filter_map(|c| c.last_transition_time.as_ref().map(|t| t.0))
            .max()
    })
}

/// The termination message of the newest terminated mover container among `pods`: the
/// mover's JSON summary on success, the tail of its log on failure.
pub fn termination_message(pods: &[Pod]) -> Option<String> {
    pods.iter()
        .filter_map(|pod| {
            let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
            statuses.iter().find_map(|status| {
                let terminated = status.state.as_ref()?.terminated.as_ref()?;
                Some((
                    terminated.finished_at.as_ref().map(|t| t.0),
                    terminated.message.clone()?,
                ))
            })
        })
        .max_by_key(|(finished, _)| *finished)
        .map(|(_, message)| message.trim().to_string())
}

/// The last non-empty line of a failure message: the mover's `error: ...` line.
pub fn failure_summary(message: &str) -> String {
    let line = message
        .lines()
        .rev()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or(message);
    const MAX: usize = 512;
    if line.len() > MAX {
        let mut end = MAX;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &line[..end])
    } else {
        line.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(conditions: serde_json::Value) -> Job {
        serde_json::from_value(
            json!({"metadata": {"name": "j"}, "status": {"conditions": conditions}}),
        )
        .expect("job")
    }

    #[test]
    fn a_name_held_by_a_job_the_app_does_not_control_is_refused_and_named() {
        let own = crate::fixtures::job("restore-hello-t1", Component::Restore, None, &[]);
        assert!(made_already(Some(&own), "uid-1", "restore-hello-t1", "ns1").is_ok());
        assert!(made_already(None, "uid-1", "restore-hello-t1", "ns1").is_ok());
        // Same name and labels, with no owner or with another app's (or an earlier app's).
        let mut look_alike = (*own).clone();
        for owners in [
            None,
            Some(json!([{"apiVersion": "hello-stateful.example.com/v1alpha1",
            "kind": "HelloStateful", "name": "hello", "uid": "uid-0", "controller": true}])),
        ] {
            look_alike.metadata.owner_references =
                owners.map(|o| serde_json::from_value(o).expect("owner references"));
            let refused = made_already(Some(&look_alike), "uid-1", "restore-hello-t1", "ns1")
                .expect_err("a look-alike is refused");
            assert!(refused.is_refusal() && !refused.is_permanent());
            let said = refused.user_message();
            assert!(
                said.contains(r#""restore-hello-t1" is not this app's"#)
                    && said.contains("kubectl delete job restore-hello-t1 -n ns1"),
                "{said}"
            );
        }
    }

    #[test]
    fn job_state_follows_final_conditions_only() {
        assert_eq!(state(&job(json!([]))), JobState::Running);
        assert_eq!(
            state(&job(
                json!([{"type": "SuccessCriteriaMet", "status": "True"}])
            )),
            JobState::Running
        );
        assert_eq!(
            state(&job(json!([{"type": "Complete", "status": "True"}]))),
            JobState::Succeeded
        );
        assert_eq!(
            state(&job(
                json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                "message": "Job has reached the specified backoff limit"}])
            )),
            JobState::Failed("Job has reached the specified backoff limit".into())
        );
    }

    #[test]
    fn termination_message_of_the_newest_pod_wins() {
        let pod = |at: &str, message: &str| -> Pod {
            serde_json::from_value(json!({"status": {"containerStatuses": [{
                "name": "mover", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "finishedAt": at, "message": message}}}]}}))
            .expect("pod")
        };
        let pods = [
            pod("2026-11-29T10:00:00Z", "old"),
            pod("2026-11-29T11:00:00Z", "new\n"),
        ];
        assert_eq!(termination_message(&pods).as_deref(), Some("new"));
        assert_eq!(termination_message(&[]), None);
    }

    fn job_started(secs_ago: i64) -> Job {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "restore-x"},
            "status": {"active": 1, "startTime": now().checked_sub(SignedDuration::from_secs(secs_ago)).expect("time").to_string()},
        }))
        .expect("job")
    }

    fn now() -> Timestamp {
        Timestamp::from_second(2_000_000_000).expect("time")
    }

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "status": status}))
            .expect("pod")
    }

    #[test]
    fn a_pod_that_cannot_start_stops_its_job_after_a_minute_with_its_own_reason() {
        let minute = SignedDuration::from_secs(60);
        let pulling = pod(
            serde_json::json!({"phase": "Pending", "containerStatuses": [{
            "name": "mover", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ErrImagePull", "message": "image not found"}}}]}),
        );
        let unschedulable = pod(serde_json::json!({"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/1 nodes are available"}]}));
        let binding = pod(serde_json::json!({"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims."}]}));
        let creating = pod(serde_json::json!({"phase": "Pending"}));
        let running = pod(serde_json::json!({"phase": "Running"}));
        let failed = pod(serde_json::json!({"phase": "Failed"}));
        let cases: [(&str, i64, Vec<Pod>, Option<&str>); 10] = [
            ("too early", 30, vec![pulling.clone()], None),
            (
                "image",
                61,
                vec![pulling.clone()],
                Some("ErrImagePull: image not found"),
            ),
            (
                "scheduler",
                61,
                vec![unschedulable.clone()],
                Some("Unschedulable: 0/1 nodes"),
            ),
            (
                "retry after a failure",
                61,
                vec![failed, pulling.clone()],
                Some("ErrImagePull"),
            ),
            ("claims still binding", 61, vec![binding.clone()], None),
            (
                "claims never bound",
                301,
                vec![binding],
                Some(
                    "cannot start after 300s: Unschedulable: 0/2 nodes are available: pod has unbound",
                ),
            ),
            ("may still start", 61, vec![creating], None),
            ("runs", 61, vec![running, pulling], None),
            ("no pod yet, nothing refused", 61, vec![], None),
            (
                "no pod for long",
                301,
                vec![],
                Some("no pod was created in 300s"),
            ),
        ];
        for (case, age, pods, want) in cases {
            let got = stuck(&job_started(age), &pods, None, &|_| None, now(), minute);
            match want {
                None => assert_eq!(got, None, "{case}"),
                Some(want) => assert!(
                    got.as_deref().is_some_and(|g| g.contains(want)),
                    "{case}: {got:?}"
                ),
            }
        }
    }

    #[test]
    fn a_pod_on_a_node_gone_or_not_ready_past_patience_stops_its_job() {
        let minute = SignedDuration::from_secs(60);
        let running: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"}, "spec": {"nodeName": "node-b", "containers": []},
            "status": {"phase": "Running"}}))
        .expect("pod");
        let node = |ready: &str, secs_ago: i64| {
            let since = now()
                .checked_sub(SignedDuration::from_secs(secs_ago))
                .expect("time");
            let node: Node = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "node-b"},
                "status": {"conditions": [{"type": "Ready", "status": ready,
                    "reason": "NodeStatusUnknown", "lastTransitionTime": since.to_string()}]}}))
            .expect("node");
            Arc::new(node)
        };
        let job = job_started(600);
        let verdict = |nodes: &Nodes| {
            stuck(
                &job,
                std::slice::from_ref(&running),
                None,
                nodes,
                now(),
                minute,
            )
        };
        let gone = verdict(&|_| None).expect("its node is gone");
        assert!(gone.contains("node-b is gone"), "{gone}");
        let unready = node("Unknown", 120);
        let long = verdict(&|_| Some(unready.clone())).expect("not ready for two minutes");
        assert!(
            long.contains("node-b has not been ready") && long.contains("NodeStatusUnknown"),
            "{long}"
        );
        let briefly = node("False", 10);
        assert_eq!(
            verdict(&|_| Some(briefly.clone())),
            None,
            "a blip is waited out"
        );
        let ready = node("True", 3600);
        assert_eq!(verdict(&|_| Some(ready.clone())), None, "it runs");
    }

    #[test]
    fn a_refused_pod_stops_its_job_after_a_minute_and_an_untaken_job_never() {
        let minute = SignedDuration::from_secs(60);
        let refused = "pods \"x\" is forbidden: violates PodSecurity \"restricted:latest\"";
        assert_eq!(
            stuck(
                &job_started(61),
                &[],
                Some(refused),
                &|_| None,
                now(),
                minute
            )
            .as_deref(),
            Some(format!("its pod could not be created: {refused}").as_str())
        );
        assert_eq!(
            stuck(
                &job_started(30),
                &[],
                Some(refused),
                &|_| None,
                now(),
                minute
            ),
            None
        );
        // Made long ago but not taken up by the Job controller yet: no start time.
        let untaken: Job = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "j", "creationTimestamp": "2000-01-01T00:00:00Z"}}))
        .expect("job");
        assert_eq!(stuck(&untaken, &[], None, &|_| None, now(), minute), None);
    }

    #[test]
    fn a_job_stopped_by_the_reconciler_fails_with_the_reason_it_recorded() {
        let job: Job = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "j", "annotations": {names::STOPPED_BECAUSE: "ErrImagePull: gone"}},
            "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]},
        }))
        .expect("job");
        assert_eq!(state(&job), JobState::Failed("ErrImagePull: gone".into()));
    }

    #[test]
    fn a_running_backup_is_the_job_sealing_its_parts_never_a_part() {
        let part = crate::fixtures::job(
            "backup-hello-1-0",
            Component::Backup,
            None,
            &[(names::PART_OF_LABEL, "backup-hello-1")],
        );
        let seal = crate::fixtures::job("backup-hello-1", Component::Backup, None, &[]);
        let found = running(&[part.clone(), seal], Component::Backup).map(|j| j.name_any());
        assert_eq!(found.as_deref(), Some("backup-hello-1"));
        assert!(running(&[part], Component::Backup).is_none());
    }

    #[test]
    fn failure_summary_is_the_error_line() {
        assert_eq!(
            failure_summary("copying a\nerror: no space left on device: /backup/x\n\n"),
            "error: no space left on device: /backup/x"
        );
    }

    #[test]
    fn stuck_jobs_are_found_asking_only_for_the_pods_and_refusals_they_need() {
        use crate::reads::Read;
        let minute = SignedDuration::from_secs(60);
        let old = Arc::new(job_started(120));
        let young = Arc::new(
            serde_json::from_value::<Job>(json!({
                "metadata": {"name": "young"},
                "status": {"active": 1, "startTime": now().to_string()},
            }))
            .expect("job"),
        );
        let mut reads = Reads::default();
        let asked = |reads: &Reads| match stuck_ones(
            &[young.clone(), old.clone()],
            reads,
            &|_| None,
            now(),
            minute,
        ) {
            Err(Unread(read)) => Some(read),
            Ok(_) => None,
        };
        assert_eq!(asked(&reads), Some(Read::JobPods("restore-x".into())));
        reads.add_job_pods("restore-x".into(), Vec::new());
        assert_eq!(asked(&reads), Some(Read::Refusal("restore-x".into())));
        reads.add_refusal(
            "restore-x".into(),
            Some("exceeded quota: mover-pods".into()),
        );
        let found = stuck_ones(&[young, old], &reads, &|_| None, now(), minute).expect("all read");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, "restore-x");
        assert!(found[0].1.contains("exceeded quota"), "{:?}", found[0]);
    }
}
