//! Fencing a deposed leader's late writes at the API server.
//!
//! The Lease alone keeps two replicas from acting at once only by timing: a leader stops
//! writing before its Lease may be taken, but a write it sent just before (delayed in the
//! network, a retried connection) can still land after another replica took over and acted,
//! scaling an app up under a running mover or starting a mover beside a running app. So
//! every write that starts or stops something (StatefulSets, CronJobs, Jobs: creates,
//! applies and patches) names the leader that made it, and the admission policy
//! `hellostateful-reconciler-fence` (manifests/admission-policy.yaml) refuses it unless that
//! is the Lease's holder when the write arrives. Status writes are fenced otherwise: each
//! carries the app's resourceVersion as a precondition.

use hellostateful_api::names;
use kube::Resource;
use serde_json::{Value, json};

/// The identity this replica writes with: its Lease holder identity when leader election is
/// on, none otherwise (no Lease, nothing to compare with).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fence(Option<String>);

impl Fence {
    pub fn leader(identity: impl Into<String>) -> Self {
        Self(Some(identity.into()))
    }

    /// `object` as this replica writes it: named as written by this leader.
    pub fn mark<K: Resource + Clone>(&self, object: &K) -> K {
        let mut marked = object.clone();
        if let Some(identity) = &self.0 {
            marked
                .meta_mut()
                .annotations
                .get_or_insert_with(Default::default)
                .insert(names::WRITTEN_BY_LEADER.to_string(), identity.clone());
        }
        marked
    }

    /// A JSON merge patch of `patch`'s changes that also names this leader.
    pub fn merge_patch(&self, mut patch: Value) -> Value {
        if let (Some(identity), Some(fields)) = (&self.0, patch.as_object_mut()) {
            let metadata = fields.entry("metadata").or_insert_with(|| json!({}));
            if let Some(metadata) = metadata.as_object_mut() {
                let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
                if let Some(annotations) = annotations.as_object_mut() {
                    annotations.insert(names::WRITTEN_BY_LEADER.into(), json!(identity));
                }
            }
        }
        patch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::Job;
    use kube::api::ObjectMeta;

    #[test]
    fn a_leaders_writes_name_it_and_keep_what_they_change() {
        let fence = Fence::leader("reconciler-7d9f-abcde");
        let job = Job {
            metadata: ObjectMeta {
                name: Some("backup-x".into()),
                annotations: Some([("a".to_string(), "b".to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let marked = fence.mark(&job);
        let annotations = marked.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations
                .get(names::WRITTEN_BY_LEADER)
                .map(String::as_str),
            Some("reconciler-7d9f-abcde")
        );
        assert_eq!(annotations.get("a").map(String::as_str), Some("b"));
        assert!(
            job.metadata.annotations.unwrap_or_default().len() == 1,
            "what is compared with the cluster stays unmarked"
        );

        let patch = fence.merge_patch(json!({
            "metadata": {"annotations": {names::STOPPED_BECAUSE: "stuck"}},
            "spec": {"activeDeadlineSeconds": 1},
        }));
        assert_eq!(
            patch,
            json!({
                "metadata": {"annotations": {
                    names::STOPPED_BECAUSE: "stuck",
                    names::WRITTEN_BY_LEADER: "reconciler-7d9f-abcde",
                }},
                "spec": {"activeDeadlineSeconds": 1},
            })
        );
        assert_eq!(
            fence.merge_patch(json!({"spec": {"suspend": false}}))["metadata"]["annotations"]
                [names::WRITTEN_BY_LEADER],
            json!("reconciler-7d9f-abcde")
        );
    }

    #[test]
    fn without_leader_election_nothing_is_marked() {
        let fence = Fence::default();
        let patch = json!({"spec": {"suspend": false}});
        assert_eq!(fence.merge_patch(patch.clone()), patch);
        assert_eq!(fence.mark(&Job::default()), Job::default());
    }
}
