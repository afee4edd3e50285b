//! A tiny fake Kubernetes API server on 127.0.0.1: answers the few requests the plugin makes
//! with canned objects, records every request, and acknowledges backup/restore annotations.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

pub const APPS: &str =
    "/apis/hello-stateful.example.com/v1alpha1/namespaces/default/hellostatefuls";
pub const RECONCILER: &str =
    "/apis/apps/v1/namespaces/hellostateful-system/deployments/hellostateful-reconciler";
const SETTINGS: &str = "/api/v1/namespaces/hellostateful-system/configmaps/hellostateful-settings";
/// The one object store endpoint the fake cluster's admin allows.
const ALLOWED_STORE: &str = "https://s3.example.com";
/// Apps that are not listed but can be read: their backups are in an object store, one the
/// admin allows (`onsite`) and a look-alike of it (`offsite`).
const STORE_APPS: [(&str, &str); 2] = [
    ("onsite", ALLOWED_STORE),
    ("offsite", "https://s3.example.com.evil.io"),
];

/// How the fake cluster behaves.
#[derive(Clone)]
pub struct Behaviour {
    /// The CRD is installed.
    pub crd: bool,
    /// Phase the reconciler reports for a new request (None: it never acknowledges).
    pub ack_phase: Option<&'static str>,
}

#[derive(Default)]
pub struct State {
    pub requests: Vec<(String, String, String)>,
    pub annotations: BTreeMap<String, String>,
    /// Apps deleted: gone at once, as if the reconciler's cleanup were instant.
    pub deleted: Vec<String>,
}

pub struct FakeApi {
    pub state: Arc<Mutex<State>>,
    pub kubeconfig: PathBuf,
}

impl FakeApi {
    pub fn start(behaviour: Behaviour) -> FakeApi {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let state = shared.clone();
                let behaviour = behaviour.clone();
                std::thread::spawn(move || serve(stream, state, behaviour));
            }
        });
        let kubeconfig =
            std::env::temp_dir().join(format!("hs-fake-{port}-{}.yaml", std::process::id()));
        std::fs::write(
            &kubeconfig,
            kubeconfig_text(&format!("http://127.0.0.1:{port}")),
        )
        .expect("kubeconfig");
        FakeApi { state, kubeconfig }
    }

    pub fn requests(&self) -> Vec<(String, String, String)> {
        self.state.lock().unwrap().requests.clone()
    }
}

/// A kubeconfig for `server`, namespace default.
pub fn kubeconfig_text(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {server}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\ncurrent-context: fake\nusers:\n- name: fake\n  user:\n    token: fake\n"
    )
}

/// A kubeconfig whose server refuses connections.
#[allow(dead_code)]
pub fn refusing_kubeconfig() -> PathBuf {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let path = std::env::temp_dir().join(format!("hs-refusing-{port}-{}.yaml", std::process::id()));
    std::fs::write(&path, kubeconfig_text(&format!("http://127.0.0.1:{port}"))).expect("write");
    path
}

fn app(name: &str, state: &State, behaviour: &Behaviour) -> Value {
    let mut status = json!({
        "observedGeneration": 1,
        "backendVolumes": [format!("data-{name}-0")],
        "isRestored": false,
        "readyReplicas": 1,
        "nodeName": "node-1",
        "lastBackup": {"id": "20261129T145500Z", "time": "2026-11-29T14:55:02Z", "bytes": 2048,
                       "files": 1, "newBytes": 100, "durationMs": 120}
    });
    if let Some(phase) = behaviour.ack_phase {
        if let Some(token) = state
            .annotations
            .get("hello-stateful.example.com/backup-requested")
        {
            status["backupRequest"] = json!({"token": token, "phase": phase,
                "job": format!("backup-{name}-1234abcd"), "backupId": "20261129T150000Z",
                "message": if phase == "Failed" { "disk full" } else { "1 files" }});
        }
        if let Some(token) = state
            .annotations
            .get("hello-stateful.example.com/restore-requested")
        {
            status["restoreRequest"] =
                json!({"token": token, "phase": phase, "backupId": "20261129T145500Z"});
        }
    }
    let mut spec =
        json!({"replicas": 1, "restoreFromExisting": true, "backupSchedule": "*/5 * * * *"});
    if let Some((_, endpoint)) = STORE_APPS.iter().find(|(app, _)| *app == name) {
        spec["backup"] = json!({"target": {"objectStore": {"endpoint": endpoint,
            "bucket": "backups", "credentialsSecret": "s3"}}});
    }
    json!({
        "apiVersion": "hello-stateful.example.com/v1alpha1",
        "kind": "HelloStateful",
        "metadata": {"name": name, "namespace": "default", "generation": 1, "uid": "u1",
                     "creationTimestamp": "2026-11-29T12:00:00Z", "annotations": state.annotations},
        "spec": spec,
        "status": status
    })
}

fn not_found(name: &str) -> (u16, Value) {
    (
        404,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": format!("hellostatefuls.hello-stateful.example.com \"{name}\" not found"),
        "reason": "NotFound", "details": {"name": name, "group": "hello-stateful.example.com",
        "kind": "hellostatefuls"}, "code": 404}),
    )
}

fn no_resource() -> (u16, Value) {
    (
        404,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "the server could not find the requested resource", "reason": "NotFound",
        "details": {}, "code": 404}),
    )
}

fn route(
    method: &str,
    path: &str,
    body: &str,
    state: &mut State,
    behaviour: &Behaviour,
) -> (u16, Value) {
    let path = path.split('?').next().unwrap_or(path);
    if path == "/version" {
        return (
            200,
            json!({"major": "1", "minor": "34", "gitVersion": "v1.34.4", "gitCommit": "x",
            "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.26",
            "compiler": "gc", "platform": "linux/amd64"}),
        );
    }
    if path == "/api/v1/namespaces/hellostateful-system/pods" {
        return (
            200,
            json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [
                {"metadata": {"name": "hellostateful-reconciler-1"},
                 "status": {"containerStatuses": [{"name": "reconciler", "ready": true,
                    "restartCount": 0, "image": "docker.io/library/hellostateful-reconciler:0.1.0",
                    "imageID": "docker.io/library/hellostateful-reconciler@sha256:ab12"}]}}]}),
        );
    }
    if path == RECONCILER {
        return (
            200,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "hellostateful-reconciler", "namespace": "hellostateful-system"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [
                {"name": "reconciler", "image": "hellostateful-reconciler:0.1.0"}]}}},
            "status": {"availableReplicas": 1, "replicas": 1}}),
        );
    }
    if path == SETTINGS {
        return (
            200,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "hellostateful-settings", "namespace": "hellostateful-system"},
            "data": {"backupRoots": "/tmp/backup", "objectStoreEndpoints": ALLOWED_STORE}}),
        );
    }
    if let Some(rest) = path.strip_prefix(APPS) {
        if !behaviour.crd {
            return no_resource();
        }
        let name = rest.trim_start_matches('/');
        if name.is_empty() {
            let items: Vec<Value> = ["hello", "web"]
                .iter()
                .map(|n| app(n, state, behaviour))
                .collect();
            return (
                200,
                json!({"apiVersion": "hello-stateful.example.com/v1alpha1",
                "kind": "HelloStatefulList", "metadata": {"resourceVersion": "1"}, "items": items}),
            );
        }
        let known =
            ["hello", "web"].contains(&name) || STORE_APPS.iter().any(|(app, _)| *app == name);
        if !known || state.deleted.iter().any(|d| d == name) {
            return not_found(name);
        }
        if method == "DELETE" {
            state.deleted.push(name.to_string());
        }
        if method == "PATCH"
            && let Ok(patch) = serde_json::from_str::<Value>(body)
            && let Some(annotations) = patch["metadata"]["annotations"].as_object()
        {
            for (k, v) in annotations {
                state
                    .annotations
                    .insert(k.clone(), v.as_str().unwrap_or_default().to_string());
            }
        }
        return (200, app(name, state, behaviour));
    }
    (
        404,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": format!("{path} not found"), "reason": "NotFound", "code": 404}),
    )
}

fn serve(stream: TcpStream, state: Arc<Mutex<State>>, behaviour: Behaviour) {
    let Ok(clone) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(clone);
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = request_line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let path = parts.next().unwrap_or_default().to_string();
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((k, v)) = header.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let body = String::from_utf8_lossy(&body).into_owned();
        let (code, value) = {
            let mut state = state.lock().unwrap();
            state
                .requests
                .push((method.clone(), path.clone(), body.clone()));
            route(&method, &path, &body, &mut state, &behaviour)
        };
        let text = value.to_string();
        let response = format!(
            "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        );
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}
