//! Objects for the unit tests of the decisions: an app `hello` in `ns1`, its settings, and
//! mover Jobs, as the API server would serve them.

use std::sync::Arc;

use hellostateful_api::names::{self, Component};
use hellostateful_api::{HelloStateful, HelloStatefulSpec};
use k8s_openapi::api::batch::v1::Job;
use serde_json::{Value, json};

use crate::children::Settings;
use crate::reads::{Decision, Reads};
use crate::record::Record;

pub fn app(spec: Value, annotations: Value) -> HelloStateful {
    let spec: HelloStatefulSpec = serde_json::from_value(spec).expect("spec");
    let mut app = HelloStateful::new("hello", spec);
    app.metadata.namespace = Some("ns1".into());
    app.metadata.uid = Some("uid-1".into());
    app.metadata.generation = Some(1);
    app.metadata.annotations = serde_json::from_value(annotations).expect("annotations");
    app
}

/// Two replicas on a StorageClass, backed up to an object store: backed up and restored
/// in parts.
pub fn spread_app(annotations: Value) -> HelloStateful {
    let store = json!({"objectStore": {"endpoint": "http://s3.test:8333",
        "bucket": "backups", "credentialsSecret": "keys", "insecure": true}});
    app(
        json!({"replicas": 2, "storage": {"storageClassName": "local"},
            "backup": {"target": store}}),
        annotations,
    )
}

pub fn settings() -> Settings {
    Settings {
        mover_image: "hellostateful-reconciler:test".into(),
        backup_roots: vec!["/tmp/backup".into()],
        object_store_endpoints: Vec::new(),
        allowed: Default::default(),
    }
}

/// A mover Job of the app, owned by it, with `labels` beside its own; ended as `condition`
/// says (`Complete`, `Failed`), or running.
pub fn job(
    name: &str,
    component: Component,
    condition: Option<&str>,
    labels: &[(&str, &str)],
) -> Arc<Job> {
    let mut all = names::labels("hello", component);
    all.extend(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let status = match condition {
        Some(kind) => {
            let mut condition = json!({"type": kind, "status": "True"});
            if kind == "Failed" {
                condition["reason"] = json!("BackoffLimitExceeded");
            }
            json!({"completionTime": "2026-11-29T15:00:05Z", "conditions": [condition]})
        }
        None => json!({"active": 1}),
    };
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": all,
                "ownerReferences": [{
                "apiVersion": "hello-stateful.example.com/v1alpha1", "kind": "HelloStateful",
                "name": "hello", "uid": "uid-1", "controller": true}]},
            "status": status,
        }))
        .expect("a Job"),
    )
}

impl<P> Decision<P> {
    /// The plan of a decision that must need no read.
    pub fn done(self) -> P {
        match self {
            Decision::Done(plan) => plan,
            Decision::Read(read) => panic!("asked to read {read:?}"),
        }
    }
}

/// The reasons of the events a decision noted, in order.
pub fn reasons(record: &Record) -> Vec<&str> {
    record.notes.iter().map(|note| note.reason).collect()
}

/// Reads holding one Job's termination message.
pub fn message(job: &str, text: &str) -> Reads {
    let mut reads = Reads::default();
    reads.add_message(job.to_string(), Some(text.to_string()));
    reads
}
