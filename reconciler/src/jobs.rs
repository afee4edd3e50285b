//! Reading a mover Job's outcome from the Job and its pod, so that a restarted reconciler
//! learns where every action stands from the cluster alone.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;

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
    match is_true("Failed") {
        Some(failed) => JobState::Failed(
            failed
                .message
                .clone()
                .or_else(|| failed.reason.clone())
                .unwrap_or_else(|| "the Job failed".to_string()),
        ),
        None => JobState::Running,
    }
}

/// Whether `job` still runs.
pub fn is_active(job: &Job) -> bool {
    state(job) == JobState::Running && job.metadata.deletion_timestamp.is_none()
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

    #[test]
    fn failure_summary_is_the_error_line() {
        assert_eq!(
            failure_summary("copying a\nerror: no space left on device: /backup/x\n\n"),
            "error: no space left on device: /backup/x"
        );
    }
}
