//! The short-lived pod that runs the data mover (the reconciler's image) on an app's
//! backups for `backups`, `backups describe|delete` and `verify`, then is deleted. It mounts
//! claims only, so it passes Pod Security baseline, and runs as the user who asked: it can
//! reach nothing of the namespace that the user cannot. Against an object store it carries
//! the app's keys, so it runs only for an endpoint the cluster admin allows.

use std::time::{Duration, Instant};

use chrono::Utc;
use hellostateful_api::{ObjectStoreTarget, ResolvedTarget, endpoints, names};
use k8s_openapi::api::core::v1::{ConfigMap, Event, PersistentVolumeClaim, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, LogParams, PostParams};
use serde_json::json;

use crate::context::{Ctx, Kube, SYSTEM_NAMESPACE};
use crate::error::{Action, CliError, explain};
use crate::install::{OBJECT_STORE_ENDPOINTS, SETTINGS};
use crate::output::printable;

/// How long the pod may take, from creation to exit (a verify hashes every byte).
const DEADLINE: Duration = Duration::from_secs(600);
/// Where the target is mounted in the pod.
const MOUNT: &str = "/backup";

/// Where the backups the pod reads are.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// The app's backup claim (`backups-<name>`), bound to its own directory
    /// `<root>/<ns>/<name>` on a node root: it holds only this app's backups, and its
    /// volume's node affinity places the pod on the node that has them.
    NodeDirectory,
    /// A claim of the namespace that holds `<ns>/<name>/...` for any number of apps.
    Claim(String),
    /// An object store, reached with the keys of the app's Secret; nothing is mounted.
    ObjectStore(ObjectStoreTarget),
}

impl Source {
    /// The source of an app's backup target.
    pub fn of(target: ResolvedTarget) -> Self {
        match target {
            ResolvedTarget::HostPath(_) => Source::NodeDirectory,
            ResolvedTarget::Claim(claim) => Source::Claim(claim),
            ResolvedTarget::ObjectStore(store) => Source::ObjectStore(store),
        }
    }
}

/// What the pod runs: one of the mover's commands on the app's backups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Task {
    List,
    Describe(String),
    Verify(String),
    Delete { id: String, force: bool },
}

impl Task {
    /// The mover's command line. Values go in `--flag=value` form or after `--`, so that
    /// none is taken for an option.
    fn args(&self, namespace: &str, name: &str, source: &Source) -> Vec<String> {
        let mut args: Vec<String> = match self {
            Task::List => vec!["backups".into(), "--json".into()],
            Task::Describe(_) => vec!["describe".into()],
            Task::Verify(_) => vec!["verify".into(), "--json".into()],
            Task::Delete { force, .. } => {
                let mut args = vec!["delete".to_string()];
                if *force {
                    args.push("--force".into());
                }
                args
            }
        };
        args.extend([
            format!("--target={MOUNT}"),
            format!("--namespace={namespace}"),
            format!("--name={name}"),
        ]);
        if let Source::ObjectStore(store) = source {
            args.extend([
                format!("--store-endpoint={}", store.endpoint),
                format!("--store-bucket={}", store.bucket),
                format!(
                    "--store-prefix={}",
                    store.prefix.as_deref().unwrap_or_default()
                ),
                format!(
                    "--store-region={}",
                    store.region.as_deref().unwrap_or("us-east-1")
                ),
            ]);
            if store.insecure {
                args.push("--store-insecure".into());
            }
        }
        match self {
            Task::List => {}
            Task::Describe(id) | Task::Verify(id) | Task::Delete { id, .. } => {
                args.extend(["--".to_string(), id.clone()]);
            }
        }
        args
    }

    /// Whether it changes the backups.
    fn writes(&self) -> bool {
        matches!(self, Task::Delete { .. })
    }

    /// The file capabilities it needs, all within Pod Security baseline: reading every
    /// file whatever its owner and mode, and deleting them.
    fn capabilities(&self) -> &'static [&'static str] {
        match self {
            Task::List | Task::Describe(_) => &[],
            Task::Verify(_) => &["DAC_OVERRIDE"],
            Task::Delete { .. } => &["DAC_OVERRIDE", "FOWNER"],
        }
    }

    /// What it does, for messages.
    fn doing(&self) -> &'static str {
        match self {
            Task::List => "reading the backups",
            Task::Describe(_) => "describing the backup",
            Task::Verify(_) => "verifying the backup",
            Task::Delete { .. } => "deleting the backup",
        }
    }
}

/// The pod that runs `task` on the backups of app `name` in `namespace`, with `image`.
pub fn build_pod(
    name: &str,
    namespace: &str,
    source: &Source,
    task: &Task,
    image: &str,
    pod_name: &str,
) -> Pod {
    // The mover reads `<target>/<ns>/<name>`: the app's own backup claim holds only that
    // directory, so it is mounted right there. An object store's keys come from the app's
    // Secret, through the environment.
    let read_only = !task.writes();
    let (mut volumes, mut mounts, mut env) = (Vec::new(), Vec::new(), Vec::new());
    let claim = match source {
        Source::NodeDirectory => Some((
            names::backup_claim(name),
            format!("{MOUNT}/{namespace}/{name}"),
        )),
        Source::Claim(claim) => Some((claim.clone(), MOUNT.to_string())),
        Source::ObjectStore(store) => {
            env = store.mover_env();
            None
        }
    };
    if let Some((claim, mount_path)) = claim {
        volumes.push(json!({"name": "backup", "persistentVolumeClaim": {"claimName": claim, "readOnly": read_only}}));
        mounts.push(json!({"name": "backup", "mountPath": mount_path, "readOnly": read_only}));
    }
    let mut labels = names::labels(name, names::Component::Backup);
    labels.insert(
        "app.kubernetes.io/managed-by".to_string(),
        crate::context::FIELD_MANAGER.to_string(),
    );
    let mut capabilities = json!({"drop": ["ALL"]});
    if !task.capabilities().is_empty() {
        capabilities["add"] = json!(task.capabilities());
    }
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name, "namespace": namespace, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": DEADLINE.as_secs(),
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {
                // Snapshots keep their files' owners and modes; the mover wrote them as root,
                // so reading them needs uid 0.
                "runAsUser": 0,
                "runAsNonRoot": false,
                "seccompProfile": {"type": "RuntimeDefault"}
            },
            "containers": [{
                "name": "mover",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "args": task.args(namespace, name, source),
                "env": env,
                "volumeMounts": mounts,
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "128Mi"}},
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": capabilities
                }
            }],
            "volumes": volumes
        }
    });
    serde_json::from_value(pod).unwrap_or_default()
}

/// Whether the app's backup claim can be read: false when it does not exist (then no
/// backup was ever made), an error when it is not bound (a pod on it would never start).
pub fn backup_claim_readable(
    namespace: &str,
    name: &str,
    claim: Option<&PersistentVolumeClaim>,
) -> Result<bool, CliError> {
    let Some(claim) = claim else {
        return Ok(false);
    };
    let phase = claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending");
    if phase == "Bound" {
        Ok(true)
    } else {
        let claim_name = names::backup_claim(name);
        Err(CliError::Failed(format!(
            "the backup claim {namespace}/{claim_name} is {phase}, not Bound, so the backups of {namespace}/{name} cannot be read: see `kubectl -n {namespace} describe pvc {claim_name}`"
        )))
    }
}

/// App `name`'s backup claim (node-directory backups), if it exists.
pub async fn backup_claim(
    kube: &Kube,
    name: &str,
) -> Result<Option<PersistentVolumeClaim>, CliError> {
    let claim_name = names::backup_claim(name);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), &kube.namespace);
    claims.get_opt(&claim_name).await.map_err(|e| {
        explain(
            e,
            &Action::new(
                "get",
                format!(
                    "persistentvolumeclaim {claim_name:?} in namespace {:?}",
                    kube.namespace
                ),
            ),
        )
    })
}

/// Where app `name`'s backups are: from the app, or for a deleted app from its backup
/// claim, which outlives it. None when no backup was ever made (a node directory without a
/// backup claim); NotFound when neither the app nor a backup claim exists.
pub async fn locate(kube: &Kube, name: &str) -> Result<Option<Source>, CliError> {
    let (source, claim) = match kube.get_app(name).await {
        Ok(app) => match Source::of(app.spec.backup_target()) {
            Source::NodeDirectory => (Source::NodeDirectory, backup_claim(kube, name).await?),
            other => return Ok(Some(other)),
        },
        Err(not_found @ CliError::NotFound { .. }) => match backup_claim(kube, name).await? {
            Some(claim) => (Source::NodeDirectory, Some(claim)),
            None => return Err(not_found),
        },
        Err(other) => return Err(other),
    };
    Ok(backup_claim_readable(&kube.namespace, name, claim.as_ref())?.then_some(source))
}

/// The cluster admin's settings ConfigMap, None when it does not exist.
async fn admin_settings(kube: &Kube) -> Result<Option<ConfigMap>, CliError> {
    let api: Api<ConfigMap> = Api::namespaced(kube.client.clone(), SYSTEM_NAMESPACE);
    api.get_opt(SETTINGS).await.map_err(|e| {
        explain(
            e,
            &Action::new("get", format!("configmap {SYSTEM_NAMESPACE}/{SETTINGS}")),
        )
    })
}

/// Refuses a store the cluster admin does not allow, before a pod sends the keys of `app`
/// (`namespace/name`) to it: the reconciler's rule, on the settings' objectStoreEndpoints
/// (absent or empty: any). `settings` is the ConfigMap as read; when it does not exist or
/// could not be read, what is allowed is unknown and nothing runs (fail closed).
pub fn check_endpoint(
    app: &str,
    store: &ObjectStoreTarget,
    settings: Result<Option<ConfigMap>, CliError>,
) -> Result<(), CliError> {
    let unknown = |why: String| {
        CliError::Failed(format!(
            "cannot tell which object store endpoints the cluster admin allows: {why}; refusing to run a pod that would send the keys of {app} to {:?}",
            store.endpoint
        ))
    };
    let settings = match settings {
        Ok(Some(settings)) => settings,
        Ok(None) => {
            return Err(unknown(format!(
                "configmap {SYSTEM_NAMESPACE}/{SETTINGS} does not exist (is the reconciler installed? `kubectl hellostateful install`)"
            )));
        }
        Err(forbidden @ CliError::Forbidden { .. }) => {
            return Err(unknown(format!(
                "{forbidden} (ask the cluster admin for `get` on configmap {SETTINGS} in namespace {SYSTEM_NAMESPACE})"
            )));
        }
        Err(other) => return Err(unknown(other.to_string())),
    };
    let allowed = endpoints::parse(
        settings
            .data
            .as_ref()
            .and_then(|data| data.get(OBJECT_STORE_ENDPOINTS))
            .map_or("", String::as_str),
    );
    if endpoints::allows(&allowed, &store.endpoint) {
        Ok(())
    } else {
        Err(CliError::Failed(format!(
            "the object store endpoint {:?} of {app} (spec.backup.target.objectStore.endpoint) is not one the cluster admin allows ({}): no pod was run and its keys were sent nowhere",
            store.endpoint,
            allowed.join(", ")
        )))
    }
}

/// For a task that writes a node directory's backups: the mover image the app's backup claim
/// names (the settings' moverImage, which a tenant may not read there), the only one the
/// admission policy `hellostateful-backup-claims` lets a tenant's pod mount that claim for
/// writing with.
async fn claim_mover_image(
    kube: &Kube,
    name: &str,
    source: &Source,
    task: &Task,
) -> Result<Option<String>, CliError> {
    if !task.writes() || *source != Source::NodeDirectory {
        return Ok(None);
    }
    Ok(backup_claim(kube, name).await?.and_then(|claim| {
        claim
            .metadata
            .annotations?
            .remove(names::MOVER_IMAGE_ANNOTATION)
    }))
}

/// How the pod ended.
pub enum Ended {
    /// It ran: whether it succeeded, and its log (the mover's JSON is the last line).
    Ran { succeeded: bool, log: String },
    /// The node directory under the backup claim does not exist yet: no backups at all.
    NoDirectory,
}

/// Runs `task` in a pod to its end, then deletes the pod.
pub async fn run(
    ctx: &Ctx,
    kube: &Kube,
    name: &str,
    source: &Source,
    task: &Task,
    image: Option<&str>,
) -> Result<Ended, CliError> {
    if let Source::ObjectStore(store) = source {
        let app = format!("{}/{name}", kube.namespace);
        check_endpoint(&app, store, admin_settings(kube).await)?;
    }
    let image = match image {
        Some(image) => image.to_string(),
        None => match claim_mover_image(kube, name, source, task).await? {
            Some(image) => image,
            None => kube
                .reconciler()
                .await
                .image()
                .unwrap_or_else(crate::install::default_image),
        },
    };
    let pod_name = format!(
        "hellostateful-catalog-{}",
        names::short_hash(&format!(
            "{name}/{}",
            Utc::now().timestamp_nanos_opt().unwrap_or_default()
        ))
    );
    let pod = build_pod(name, &kube.namespace, source, task, &image, &pod_name);
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &kube.namespace);
    ctx.debug(
        1,
        format!("{} with pod {pod_name} (image {image})", task.doing()),
    );
    pods.create(&PostParams::default(), &pod)
        .await
        .map_err(|e| {
            explain(
                e,
                &Action::new(
                    "create",
                    format!("pod {pod_name:?} in namespace {:?}", kube.namespace),
                ),
            )
        })?;
    let result = run_to_end(
        &pods,
        &kube.client,
        &kube.namespace,
        &pod_name,
        source == &Source::NodeDirectory,
        task,
    )
    .await;
    if let Err(error) = pods
        .delete(&pod_name, &DeleteParams::default().grace_period(0))
        .await
    {
        eprintln!(
            "{} could not delete pod {pod_name}: {}",
            ctx.style.warn("Warning:"),
            printable(&error.to_string())
        );
    }
    result
}

/// Waits for the pod to end and reads its log.
async fn run_to_end(
    pods: &Api<Pod>,
    client: &kube::Client,
    namespace: &str,
    pod_name: &str,
    node_directory: bool,
    task: &Task,
) -> Result<Ended, CliError> {
    let started = Instant::now();
    loop {
        let pod = pods
            .get(pod_name)
            .await
            .map_err(|e| explain(e, &Action::new("get", format!("pod {pod_name:?}"))))?;
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        if phase == "Succeeded" || phase == "Failed" {
            let log = pods
                .logs(pod_name, &LogParams::default())
                .await
                .map_err(|e| {
                    explain(
                        e,
                        &Action::new("read the log of", format!("pod {pod_name:?}")),
                    )
                })?;
            return Ok(Ended::Ran {
                succeeded: phase == "Succeeded",
                log,
            });
        }
        if phase == "Pending" && started.elapsed() > Duration::from_secs(3) {
            // A node directory that does not exist yet (under the backup claim's volume)
            // means there are no backups at all.
            let events: Api<Event> = Api::namespaced(client.clone(), namespace);
            let selector = format!("involvedObject.name={pod_name}");
            if let Ok(list) = events.list(&ListParams::default().fields(&selector)).await {
                for event in list.items {
                    let message = event.message.unwrap_or_default();
                    if event.reason.as_deref() == Some("FailedMount") {
                        if node_directory
                            && (message.contains("not a directory")
                                || message.contains("does not exist")
                                || message.contains("type check failed"))
                        {
                            return Ok(Ended::NoDirectory);
                        }
                        return Err(CliError::Failed(format!(
                            "cannot mount the backup target: {message}"
                        )));
                    }
                    if matches!(event.reason.as_deref(), Some("ErrImagePull" | "Failed"))
                        || message.contains("ErrImageNeverPull")
                    {
                        return Err(CliError::Failed(format!(
                            "the pod {} cannot start: {message} (pass --image to use another)",
                            task.doing()
                        )));
                    }
                }
            }
        }
        if started.elapsed() > DEADLINE {
            return Err(CliError::Failed(format!(
                "timed out after {}s waiting for pod {pod_name} ({}; it was {phase})",
                DEADLINE.as_secs(),
                task.doing()
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The last `n` lines of a log, for an error message.
pub fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    let tail = lines[start..].join("\n");
    if tail.trim().is_empty() {
        "(no output)".to_string()
    } else {
        tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::get::tests::app;

    /// What Pod Security baseline (and the admission policy) require of the catalog pod.
    fn assert_baseline(pod: &serde_json::Value) {
        let spec = &pod["spec"];
        assert!(
            spec["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .all(|v| v.get("hostPath").is_none()),
            "no hostPath volume: {spec}"
        );
        assert!(spec.get("hostNetwork").is_none() && spec.get("hostPID").is_none());
        assert_eq!(spec["securityContext"]["runAsUser"], 0);
        assert_eq!(
            spec["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        let container = &spec["containers"][0];
        let security = &container["securityContext"];
        assert_eq!(security["allowPrivilegeEscalation"], false);
        assert_eq!(security["readOnlyRootFilesystem"], true);
        assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
        assert!(security["capabilities"].get("add").is_none());
        assert!(security.get("privileged").is_none());
        assert!(container["resources"]["limits"]["memory"].is_string());
        assert_eq!(container["volumeMounts"][0]["readOnly"], true);
        assert_eq!(
            spec["volumes"][0]["persistentVolumeClaim"]["readOnly"],
            true
        );
        assert_eq!(spec["restartPolicy"], "Never");
        assert_eq!(
            container["args"],
            json!([
                "backups",
                "--json",
                "--target=/backup",
                "--namespace=default",
                "--name=hello"
            ])
        );
    }

    #[test]
    fn a_node_directory_is_read_through_the_apps_backup_claim() {
        let hello = app("default", "hello", 1, 1);
        let source = Source::of(hello.spec.backup_target());
        assert_eq!(source, Source::NodeDirectory);
        let pod = serde_json::to_value(build_pod(
            "hello",
            "default",
            &source,
            &Task::List,
            "img:1",
            "p",
        ))
        .unwrap();
        assert_baseline(&pod);
        let spec = &pod["spec"];
        assert_eq!(
            spec["volumes"][0]["persistentVolumeClaim"]["claimName"],
            "backups-hello"
        );
        assert_eq!(
            spec["containers"][0]["volumeMounts"][0]["mountPath"], "/backup/default/hello",
            "the claim holds <root>/<ns>/<name>, where the mover looks"
        );
        assert!(
            spec.get("nodeName").is_none(),
            "the volume's node affinity places it"
        );
    }

    #[test]
    fn a_tenant_claim_is_mounted_whole() {
        let mut hello = app("default", "hello", 1, 1);
        hello.spec.backup = Some(hellostateful_api::BackupSpec {
            target: Some(hellostateful_api::BackupTarget {
                host_path: None,
                persistent_volume_claim: Some("vault".into()),
                object_store: None,
            }),
            ..Default::default()
        });
        let source = Source::of(hello.spec.backup_target());
        let pod = serde_json::to_value(build_pod(
            "hello",
            "default",
            &source,
            &Task::List,
            "img:1",
            "p",
        ))
        .unwrap();
        assert_baseline(&pod);
        assert_eq!(
            pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
            "vault"
        );
        assert_eq!(
            pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"],
            "/backup"
        );
        assert!(pod["spec"].get("nodeName").is_none());
    }

    #[test]
    fn a_missing_backup_claim_means_no_backups_and_an_unbound_one_is_an_error() {
        assert!(!backup_claim_readable("default", "hello", None).unwrap());
        let mut claim = PersistentVolumeClaim {
            status: Some(k8s_openapi::api::core::v1::PersistentVolumeClaimStatus {
                phase: Some("Bound".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(backup_claim_readable("default", "hello", Some(&claim)).unwrap());
        claim.status = None;
        let error = backup_claim_readable("default", "hello", Some(&claim))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("the backup claim default/backups-hello is Pending, not Bound"),
            "{error}"
        );
    }

    fn store(endpoint: &str) -> ObjectStoreTarget {
        ObjectStoreTarget {
            endpoint: endpoint.into(),
            bucket: "backups".into(),
            credentials_secret: "s3".into(),
            ..Default::default()
        }
    }

    /// The admin's settings ConfigMap, with `objectStoreEndpoints` when given.
    fn settings(endpoints: Option<&str>) -> Result<Option<ConfigMap>, CliError> {
        let mut data = std::collections::BTreeMap::from([(
            "backupRoots".to_string(),
            "/tmp/backup".to_string(),
        )]);
        if let Some(endpoints) = endpoints {
            data.insert(OBJECT_STORE_ENDPOINTS.to_string(), endpoints.to_string());
        }
        Ok(Some(ConfigMap {
            data: Some(data),
            ..Default::default()
        }))
    }

    #[test]
    fn a_pod_runs_against_an_object_store_only_when_the_admin_allows_its_endpoint() {
        let allowed = || settings(Some("https://s3.example.com, http://minio:9000"));
        for endpoint in [
            "https://s3.example.com",
            "https://s3.example.com/",
            "http://minio:9000",
        ] {
            assert!(
                check_endpoint("default/hello", &store(endpoint), allowed()).is_ok(),
                "{endpoint}"
            );
        }
        for endpoint in [
            "https://s3.example.com.evil.io",
            "http://s3.example.com",
            "https://minio:9000",
        ] {
            let error = check_endpoint("default/hello", &store(endpoint), allowed())
                .expect_err(endpoint)
                .to_string();
            assert!(
                error.contains(&format!("{endpoint:?} of default/hello"))
                    && error.contains("(https://s3.example.com, http://minio:9000)")
                    && error.contains("no pod was run"),
                "{error}"
            );
        }
        // No list, or an empty one: any endpoint, as the reconciler allows.
        for any in [settings(None), settings(Some(" "))] {
            assert!(
                check_endpoint("default/hello", &store("https://anywhere.example"), any).is_ok()
            );
        }
    }

    #[test]
    fn without_the_admins_settings_no_pod_runs_against_an_object_store() {
        let refused = |settings| {
            check_endpoint("default/hello", &store("https://s3.example.com"), settings)
                .expect_err("unknown settings")
                .to_string()
        };
        let missing = refused(Ok(None));
        assert!(
            missing.contains("configmap hellostateful-system/hellostateful-settings does not exist")
                && missing.contains(
                    "refusing to run a pod that would send the keys of default/hello to \"https://s3.example.com\""
                ),
            "{missing}"
        );
        let forbidden = refused(Err(CliError::Forbidden {
            verb: "get".into(),
            resource: "configmap hellostateful-system/hellostateful-settings".into(),
            message: "configmaps \"hellostateful-settings\" is forbidden".into(),
        }));
        assert!(
            forbidden.contains("is forbidden")
                && forbidden.contains("ask the cluster admin for `get` on configmap")
                && forbidden.contains("refusing to run a pod"),
            "{forbidden}"
        );
        let unreachable = refused(Err(CliError::Failed("connection refused".into())));
        assert!(
            unreachable.contains("connection refused")
                && unreachable.contains("refusing to run a pod"),
            "{unreachable}"
        );
    }

    #[test]
    fn only_a_delete_writes_and_each_task_has_only_the_capabilities_it_needs() {
        let source = Source::NodeDirectory;
        let delete = Task::Delete {
            id: "--target=/".into(),
            force: true,
        };
        let pod = serde_json::to_value(build_pod(
            "hello", "default", &source, &delete, "img:1", "p",
        ))
        .unwrap();
        let container = &pod["spec"]["containers"][0];
        assert_eq!(container["volumeMounts"][0]["readOnly"], false);
        assert_eq!(
            container["securityContext"]["capabilities"]["add"],
            json!(["DAC_OVERRIDE", "FOWNER"])
        );
        let args: Vec<String> = serde_json::from_value(container["args"].clone()).unwrap();
        assert_eq!(
            args,
            [
                "delete",
                "--force",
                "--target=/backup",
                "--namespace=default",
                "--name=hello",
                "--",
                "--target=/"
            ],
            "an id is never taken for an option"
        );
        let verify = Task::Verify("latest".into());
        let pod = serde_json::to_value(build_pod(
            "hello", "default", &source, &verify, "img:1", "p",
        ))
        .unwrap();
        let container = &pod["spec"]["containers"][0];
        assert_eq!(container["volumeMounts"][0]["readOnly"], true);
        assert_eq!(
            container["securityContext"]["capabilities"]["add"],
            json!(["DAC_OVERRIDE"])
        );
    }
}
