//! Reconcile decisions against a mocked API server: each test serves canned objects,
//! records every request the pass makes, and asserts the exact writes.

use std::collections::HashMap;
use std::sync::Arc;

use hellostateful_api::{HelloStateful, HelloStatefulSpec, names};
use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

use super::{Context, reconcile};
use crate::children::{self, AppRef, Settings};
use crate::metrics::Metrics;

/// One request the reconciler made.
#[derive(Debug)]
struct Seen {
    method: String,
    path: String,
    body: Value,
}

impl Seen {
    fn is_write(&self) -> bool {
        self.method != "GET"
    }
}

/// Canned answers by "METHOD /path" (query ignored); anything else is a 404.
struct Api {
    routes: HashMap<String, Value>,
}

impl Api {
    fn new() -> Self {
        Self {
            routes: HashMap::new(),
        }
    }

    fn on(mut self, method: &str, path: &str, body: Value) -> Self {
        self.routes.insert(format!("{method} {path}"), body);
        self
    }

    /// Runs one reconcile pass of `app` against the canned answers.
    async fn reconcile(mut self, app: HelloStateful) -> (Result<(), String>, Vec<Seen>) {
        self = self.on("GET", APP, value(&app));
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let server = tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some((request, respond)) = handle.next_request().await {
                let method = request.method().to_string();
                let path = request.uri().path().to_string();
                let bytes = request
                    .into_body()
                    .collect_bytes()
                    .await
                    .unwrap_or_default();
                let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let answer = self.routes.get(&format!("{method} {path}")).cloned();
                let (code, reply) = match answer {
                    Some(reply) => (200, reply),
                    // Writes echo their body, as the API server returns the object written.
                    None if method != "GET" => {
                        let mut echo = body.clone();
                        if echo.get("metadata").is_none() {
                            echo["metadata"] = json!({"name": "echo"});
                        }
                        if path.ends_with("/status") {
                            echo["spec"] = json!({});
                        }
                        (201, echo)
                    }
                    None => (
                        404,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                               "reason": "NotFound", "code": 404, "message": "not found"}),
                    ),
                };
                let response = Response::builder()
                    .status(code)
                    .body(Body::from(serde_json::to_vec(&reply).unwrap_or_default()))
                    .expect("response");
                respond.send_response(response);
                seen.push(Seen { method, path, body });
            }
            seen
        });
        let client = Client::new(service, "default");
        let metrics = Arc::new(Metrics::register(&mut Registry::default()));
        let ctx = Arc::new(Context::new(
            client,
            metrics,
            Settings {
                mover_image: "mover:test".into(),
            },
        ));
        let result = reconcile(Arc::new(app), ctx)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string());
        let seen = server.await.expect("mock server");
        (result, seen)
    }
}

fn app(spec: Value, annotations: Value, status: Value) -> HelloStateful {
    let spec: HelloStatefulSpec = serde_json::from_value(spec).expect("spec");
    let mut app = HelloStateful::new("hello", spec);
    app.metadata.namespace = Some("ns1".into());
    app.metadata.uid = Some("uid-1".into());
    app.metadata.generation = Some(1);
    app.metadata.finalizers = Some(vec![names::FINALIZER.into()]);
    app.metadata.annotations = serde_json::from_value(annotations).expect("annotations");
    app.status = serde_json::from_value(status).expect("status");
    app
}

fn seed() -> Value {
    json!({"replicas": 1, "restoreFromExisting": true, "backupSchedule": "*/5 * * * *"})
}

fn list(items: Vec<Value>) -> Value {
    json!({"metadata": {}, "items": items})
}

fn value<T: serde::Serialize>(object: &T) -> Value {
    serde_json::to_value(object).expect("serializes")
}

const PVS: &str = "/api/v1/persistentvolumes";
const PVC: &str = "/api/v1/namespaces/ns1/persistentvolumeclaims/data-hello-0";
const SERVICE: &str = "/api/v1/namespaces/ns1/services/hello";
const JOBS: &str = "/apis/batch/v1/namespaces/ns1/jobs";
const STS: &str = "/apis/apps/v1/namespaces/ns1/statefulsets/hello";
const CRONJOB: &str = "/apis/batch/v1/namespaces/ns1/cronjobs/backup-hello";
const PODS: &str = "/api/v1/namespaces/ns1/pods";
const APP: &str = "/apis/hello-stateful.example.com/v1alpha1/namespaces/ns1/hellostatefuls/hello";
const STATUS: &str =
    "/apis/hello-stateful.example.com/v1alpha1/namespaces/ns1/hellostatefuls/hello/status";

/// The children of a running app, as the cluster would hold them.
fn running(app: &HelloStateful, replicas_in_sts: i32) -> Api {
    let app_ref = AppRef::new(app).expect("app");
    let settings = Settings {
        mover_image: "mover:test".into(),
    };
    let mut sts = value(&children::statefulset(&app_ref, replicas_in_sts, None).expect("sts"));
    sts["status"] = json!({"replicas": replicas_in_sts, "readyReplicas": replicas_in_sts});
    Api::new()
        .on(
            "GET",
            PVS,
            list(vec![value(
                &children::volume(&app_ref, 0, "node-a").expect("pv"),
            )]),
        )
        .on(
            "GET",
            PVC,
            value(&children::claim(&app_ref, 0).expect("pvc")),
        )
        .on(
            "GET",
            SERVICE,
            value(&children::service(&app_ref).expect("svc")),
        )
        .on("GET", STS, sts)
        .on(
            "GET",
            CRONJOB,
            value(&children::cronjob(&app_ref, "*/5 * * * *", &settings).expect("cron")),
        )
        .on("GET", JOBS, list(vec![]))
        .on("GET", PODS, list(vec![]))
}

fn writes(seen: &[Seen]) -> Vec<String> {
    seen.iter()
        .filter(|s| s.is_write())
        .filter(|s| !s.path.contains("/events"))
        .map(|s| format!("{} {}", s.method, s.path))
        .collect()
}

fn status_written(seen: &[Seen]) -> Value {
    seen.iter()
        .find(|s| s.method == "PATCH" && s.path == STATUS)
        .map(|s| s.body["status"].clone())
        .unwrap_or(Value::Null)
}

fn condition<'a>(status: &'a Value, kind: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|list| list.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

#[tokio::test]
async fn a_running_app_in_sync_causes_no_child_write() {
    let app = app(seed(), json!({}), json!({}));
    let (result, seen) = running(&app, 1).reconcile(app).await;
    assert_eq!(result, Ok(()));
    // Only its first status; no child is written.
    assert_eq!(writes(&seen), [format!("PATCH {STATUS}")]);
    let status = status_written(&seen);
    assert_eq!(condition(&status, "Ready")["status"], "True");
    assert_eq!(status["backendVolumes"], json!(["data-hello-0"]));
    assert_eq!(status["nodeName"], "node-a");
    assert_eq!(status["isRestored"], false);
}

#[tokio::test]
async fn a_second_pass_over_an_unchanged_app_writes_nothing_at_all() {
    let first = app(seed(), json!({}), json!({}));
    let (_, seen) = running(&first, 1).reconcile(first.clone()).await;
    let settled = app(seed(), json!({}), status_written(&seen));
    let (result, seen) = running(&settled, 1).reconcile(settled).await;
    assert_eq!(result, Ok(()));
    assert_eq!(writes(&seen), Vec::<String>::new());
}

#[tokio::test]
async fn a_new_app_restores_before_its_statefulset_exists() {
    let app = app(seed(), json!({}), json!({}));
    let node = json!({"metadata": {"name": "node-a"}, "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let api = Api::new()
        .on("GET", PVS, list(vec![]))
        .on("GET", "/api/v1/nodes", list(vec![node]))
        .on("GET", JOBS, list(vec![]));
    let (result, seen) = api.reconcile(app).await;
    assert_eq!(result, Ok(()));
    let job = names::initial_restore_job("hello", "uid-1");
    assert_eq!(
        writes(&seen),
        [
            format!("PATCH {PVS}/hellostateful-ns1-hello-0"),
            format!("PATCH {PVC}"),
            format!("PATCH {SERVICE}"),
            format!("POST {JOBS}"),
            format!("PATCH {STATUS}"),
        ],
        "volume, claim, service, restore Job — and no StatefulSet"
    );
    let created = seen
        .iter()
        .find(|s| s.method == "POST" && s.path == JOBS)
        .expect("job");
    assert_eq!(created.body["metadata"]["name"], job.as_str());
    let args = created.body["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(
        args.contains("\"--from\",\"latest\",\"--if-exists\""),
        "{args}"
    );
    let status = status_written(&seen);
    assert_eq!(condition(&status, "Restoring")["status"], "True");
    assert_eq!(condition(&status, "Ready")["status"], "False");
    assert_eq!(
        status["isRestored"], false,
        "restored only once the Job succeeded"
    );
}

#[tokio::test]
async fn a_restore_request_stops_the_app_and_waits_for_its_pods() {
    let annotations =
        json!({names::RESTORE_REQUESTED: "t1", names::RESTORE_FROM: "20261129T150102Z"});
    let app = app(seed(), annotations, json!({}));
    let pod = json!({"metadata": {"name": "hello-0"}});
    let (result, seen) = running(&app, 1)
        .on("GET", PODS, list(vec![pod]))
        .reconcile(app)
        .await;
    assert_eq!(result, Ok(()));
    assert_eq!(
        writes(&seen),
        [
            format!("PATCH {STS}"),
            format!("PATCH {CRONJOB}"),
            format!("PATCH {STATUS}")
        ]
    );
    let sts = seen
        .iter()
        .find(|s| s.method == "PATCH" && s.path == STS)
        .expect("sts");
    assert_eq!(sts.body["spec"]["replicas"], 0);
    let cron = seen
        .iter()
        .find(|s| s.method == "PATCH" && s.path == CRONJOB)
        .expect("cron");
    assert_eq!(
        cron.body["spec"]["suspend"], true,
        "no scheduled backup during a restore"
    );
    let request = &status_written(&seen)["restoreRequest"];
    assert_eq!(request["token"], "t1");
    assert_eq!(request["phase"], "Pending");
    assert!(
        request["message"]
            .as_str()
            .is_some_and(|m| m.contains("1 pod(s)")),
        "{request}"
    );
}

#[tokio::test]
async fn a_restore_runs_once_the_pods_are_gone() {
    let annotations = json!({names::RESTORE_REQUESTED: "t1"});
    let app = app(seed(), annotations, json!({}));
    let (result, seen) = running(&app, 0).reconcile(app).await;
    assert_eq!(result, Ok(()));
    let created = seen
        .iter()
        .find(|s| s.method == "POST" && s.path == JOBS)
        .expect("job");
    assert_eq!(
        created.body["metadata"]["name"],
        names::restore_job("hello", "t1").as_str()
    );
    let args = created.body["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(
        args.contains("\"restore\",\"--dest\",\"/data\",\"--from\",\"latest\""),
        "{args}"
    );
    assert_eq!(status_written(&seen)["restoreRequest"]["phase"], "Running");
}

#[tokio::test]
async fn a_finished_backup_is_acknowledged_with_its_id() {
    let annotations = json!({names::BACKUP_REQUESTED: "2026-11-29T15:00:00Z"});
    let app = app(seed(), annotations, json!({}));
    let job_name = names::backup_job("hello", "2026-11-29T15:00:00Z");
    let job = json!({"metadata": {"name": job_name, "labels": names::labels("hello", names::Component::Backup)},
        "status": {"completionTime": "2026-11-29T15:00:05Z",
                   "conditions": [{"type": "Complete", "status": "True"}]}});
    let summary = r#"{"id":"20261129T150001Z","time":"2026-11-29T15:00:04Z","bytes":120,"files":1,"newBytes":120,"linkedFiles":0,"durationMs":9,"ordinals":[0],"pruned":[]}"#;
    let pod = json!({"metadata": {"name": "p"}, "status": {"containerStatuses": [{
        "name": "mover", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "finishedAt": "2026-11-29T15:00:05Z", "message": summary}}}]}});
    let (result, seen) = running(&app, 1)
        .on("GET", JOBS, list(vec![job]))
        .on("GET", PODS, list(vec![pod]))
        .reconcile(app)
        .await;
    assert_eq!(result, Ok(()));
    assert_eq!(
        writes(&seen),
        [format!("PATCH {STATUS}")],
        "no second Job for the same token"
    );
    let status = status_written(&seen);
    assert_eq!(status["backupRequest"]["phase"], "Succeeded");
    assert_eq!(status["backupRequest"]["backupId"], "20261129T150001Z");
    assert_eq!(status["lastBackup"]["id"], "20261129T150001Z");
    assert_eq!(status["lastBackup"]["job"], job_name.as_str());
    assert_eq!(condition(&status, "BackupSucceeded")["status"], "True");
}

#[tokio::test]
async fn an_invalid_schedule_is_reported_not_retried() {
    let app = app(
        json!({"backupSchedule": "61 * * * *"}),
        json!({}),
        json!({}),
    );
    let (result, seen) = Api::new().reconcile(app).await;
    assert_eq!(result, Ok(()));
    assert_eq!(
        writes(&seen),
        [format!("PATCH {STATUS}")],
        "no child is made for an invalid spec"
    );
    let ready = condition(&status_written(&seen), "Ready").clone();
    assert_eq!(ready["reason"], "InvalidSpec");
    assert!(
        ready["message"]
            .as_str()
            .is_some_and(|m| m.contains("61 * * * *"))
    );
    let event = seen
        .iter()
        .find(|s| s.path.contains("/events"))
        .expect("an event");
    assert_eq!(event.body["reason"], "InvalidSpec");
}

#[tokio::test]
async fn a_restore_waits_for_a_running_backup() {
    let annotations = json!({names::RESTORE_REQUESTED: "t1"});
    let app = app(seed(), annotations, json!({}));
    let backup = json!({"metadata": {"name": "backup-hello-29400000",
        "labels": names::labels("hello", names::Component::Backup)}, "status": {"active": 1}});
    let (result, seen) = running(&app, 0)
        .on("GET", JOBS, list(vec![backup]))
        .reconcile(app)
        .await;
    assert_eq!(result, Ok(()));
    assert!(
        !seen.iter().any(|s| s.method == "POST" && s.path == JOBS),
        "no restore Job while a backup copies the data"
    );
    let request = &status_written(&seen)["restoreRequest"];
    assert_eq!(request["phase"], "Pending");
    assert!(
        request["message"]
            .as_str()
            .is_some_and(|m| m.contains("backup-hello-29400000")),
        "{request}"
    );
}

#[tokio::test]
async fn a_backup_asked_for_during_a_restore_waits_and_says_so() {
    let annotations = json!({names::RESTORE_REQUESTED: "t1", names::BACKUP_REQUESTED: "b1"});
    let app = app(seed(), annotations, json!({}));
    let restore = json!({"metadata": {"name": names::restore_job("hello", "t1"),
        "labels": names::labels("hello", names::Component::Restore)}, "status": {"active": 1}});
    let (result, seen) = running(&app, 0)
        .on("GET", JOBS, list(vec![restore]))
        .reconcile(app)
        .await;
    assert_eq!(result, Ok(()));
    assert!(
        !seen.iter().any(|s| s.method == "POST" && s.path == JOBS),
        "no backup Job yet"
    );
    let status = status_written(&seen);
    assert_eq!(status["restoreRequest"]["phase"], "Running");
    assert_eq!(status["backupRequest"]["phase"], "Pending");
    assert_eq!(
        status["backupRequest"]["message"],
        "waiting for the restore to finish"
    );
}
