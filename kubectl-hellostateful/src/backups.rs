//! `backups NAME`: reads the catalog of snapshots through a short-lived read-only pod that
//! runs the data mover (`hellostateful-reconciler backups --json`) on a claim that holds
//! them. It mounts claims only, so it passes Pod Security baseline.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use hellostateful_api::summary::{CatalogEntry, parse_last_line};
use hellostateful_api::{ResolvedTarget, names};
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, LogParams, PostParams};
use serde_json::json;

use crate::cli::OutputFormat;
use crate::context::{Ctx, DEFAULT_IMAGE, Kube};
use crate::error::{Action, CliError, explain};
use crate::output::{age_of, human_bytes, table, to_json, to_yaml};

/// How long the catalog pod may take, from creation to exit.
const DEADLINE: Duration = Duration::from_secs(120);
/// Where the target is mounted in the pod.
const MOUNT: &str = "/backup";

/// Which claim holds the backups the pod reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The app's backup claim (`backups-<name>`), bound to its own directory
    /// `<root>/<ns>/<name>` on a node root: it holds only this app's backups.
    NodeDirectory,
    /// A claim of the namespace that holds `<ns>/<name>/...` for any number of apps.
    Claim(String),
}

impl Source {
    /// The source of an app's backup target.
    pub fn of(target: ResolvedTarget) -> Self {
        match target {
            ResolvedTarget::HostPath(_) => Source::NodeDirectory,
            ResolvedTarget::Claim(claim) => Source::Claim(claim),
        }
    }
}

/// The catalog pod for app `name` in `namespace`, run with `image`.
pub fn catalog_pod(
    name: &str,
    namespace: &str,
    source: &Source,
    image: &str,
    pod_name: &str,
) -> Pod {
    // The mover reads `<target>/<ns>/<name>`: the app's own backup claim holds only that
    // directory, so it is mounted right there.
    let (claim, mount_path) = match source {
        Source::NodeDirectory => (
            names::backup_claim(name),
            format!("{MOUNT}/{namespace}/{name}"),
        ),
        Source::Claim(claim) => (claim.clone(), MOUNT.to_string()),
    };
    let mut labels = names::labels(name, names::Component::Backup);
    labels.insert(
        "app.kubernetes.io/managed-by".to_string(),
        crate::context::FIELD_MANAGER.to_string(),
    );
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
                // so reading them needs uid 0, but no capability at all.
                "runAsUser": 0,
                "runAsNonRoot": false,
                "seccompProfile": {"type": "RuntimeDefault"}
            },
            "containers": [{
                "name": "catalog",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "args": ["backups", "--json", "--target", MOUNT, "--namespace", namespace, "--name", name],
                "volumeMounts": [{"name": "backup", "mountPath": mount_path, "readOnly": true}],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "128Mi"}},
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]}
                }
            }],
            "volumes": [{"name": "backup", "persistentVolumeClaim": {"claimName": claim, "readOnly": true}}]
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

/// `backups NAME`: also for a deleted app whose backups were on a node root (its backup
/// claim outlives it).
pub async fn backups(ctx: &Ctx, name: &str) -> Result<String, CliError> {
    let kube = ctx.connect().await?;
    let claim_name = names::backup_claim(name);
    let (source, claim) = match kube.get_app(name).await {
        Ok(app) => match Source::of(app.spec.backup_target()) {
            Source::NodeDirectory => (Source::NodeDirectory, backup_claim(&kube, name).await?),
            other => (other, None),
        },
        Err(not_found @ CliError::NotFound { .. }) => match backup_claim(&kube, name).await? {
            Some(claim) => (Source::NodeDirectory, Some(claim)),
            None => return Err(not_found),
        },
        Err(other) => return Err(other),
    };
    if source == Source::NodeDirectory
        && !backup_claim_readable(&kube.namespace, name, claim.as_ref())?
    {
        eprintln!(
            "No backups of {}/{name}: its backup claim {claim_name} does not exist, so no backup was ever made.",
            kube.namespace
        );
        return print_catalog(ctx, &kube.namespace, name, Vec::new(), true);
    }
    let entries = read_catalog(ctx, &kube, name, &source).await?;
    print_catalog(ctx, &kube.namespace, name, entries, false)
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

/// Runs the catalog pod to its end, then deletes it.
async fn read_catalog(
    ctx: &Ctx,
    kube: &Kube,
    name: &str,
    source: &Source,
) -> Result<Vec<CatalogEntry>, CliError> {
    let image = kube
        .reconciler()
        .await
        .image()
        .unwrap_or_else(|| DEFAULT_IMAGE.to_string());
    let pod_name = format!(
        "hellostateful-catalog-{}",
        names::short_hash(&format!(
            "{name}/{}",
            Utc::now().timestamp_nanos_opt().unwrap_or_default()
        ))
    );
    let pod = catalog_pod(name, &kube.namespace, source, &image, &pod_name);
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &kube.namespace);
    ctx.debug(
        1,
        format!("reading the catalog with pod {pod_name} (image {image})"),
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
    )
    .await;
    if let Err(error) = pods
        .delete(&pod_name, &DeleteParams::default().grace_period(0))
        .await
    {
        eprintln!(
            "{} could not delete pod {pod_name}: {error}",
            ctx.style.warn("Warning:")
        );
    }
    let mut entries = result?;
    entries.sort_by(|a, b| b.time.cmp(&a.time));
    Ok(entries)
}

/// The catalog in the format asked for; `explained` when stderr already said why it is empty.
fn print_catalog(
    ctx: &Ctx,
    namespace: &str,
    name: &str,
    entries: Vec<CatalogEntry>,
    explained: bool,
) -> Result<String, CliError> {
    match ctx.output() {
        OutputFormat::Json => to_json(&entries),
        OutputFormat::Yaml => to_yaml(&entries),
        OutputFormat::Name => Ok(entries.iter().map(|e| format!("{}\n", e.id)).collect()),
        _ if entries.is_empty() => {
            if !explained {
                eprintln!("No backups of {namespace}/{name} yet.");
            }
            Ok(String::new())
        }
        _ => Ok(catalog_table(&entries, Utc::now())),
    }
}

/// Waits for the pod to end and parses its output.
async fn run_to_end(
    pods: &Api<Pod>,
    client: &kube::Client,
    namespace: &str,
    pod_name: &str,
    node_directory: bool,
) -> Result<Vec<CatalogEntry>, CliError> {
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
        match phase.as_str() {
            "Succeeded" | "Failed" => {
                let log = pods
                    .logs(pod_name, &LogParams::default())
                    .await
                    .map_err(|e| {
                        explain(
                            e,
                            &Action::new("read the log of", format!("pod {pod_name:?}")),
                        )
                    })?;
                if phase == "Failed" {
                    return Err(CliError::Failed(format!(
                        "reading the backups failed: {}",
                        last_lines(&log, 5)
                    )));
                }
                return parse_last_line::<Vec<CatalogEntry>>(&log).ok_or_else(|| {
                    CliError::Failed(format!(
                        "the backup catalog printed no JSON: {}",
                        last_lines(&log, 5)
                    ))
                });
            }
            _ => {}
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
                            return Ok(Vec::new());
                        }
                        return Err(CliError::Failed(format!(
                            "cannot mount the backup target: {message}"
                        )));
                    }
                    if matches!(event.reason.as_deref(), Some("ErrImagePull" | "Failed"))
                        || message.contains("ErrImageNeverPull")
                    {
                        return Err(CliError::Failed(format!(
                            "the catalog pod cannot start: {message}"
                        )));
                    }
                }
            }
        }
        if started.elapsed() > DEADLINE {
            return Err(CliError::Failed(format!(
                "timed out after {}s waiting for pod {pod_name} to read the backups (it was {phase})",
                DEADLINE.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    let tail = lines[start..].join("\n");
    if tail.trim().is_empty() {
        "(no output)".to_string()
    } else {
        tail
    }
}

/// The catalog as a table: ID, TIME, AGE, SIZE, FILES, NEW.
pub fn catalog_table(entries: &[CatalogEntry], now: DateTime<Utc>) -> String {
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            vec![
                e.id.clone(),
                e.time.clone(),
                age_of(now, &e.time),
                human_bytes(e.bytes),
                e.files.to_string(),
                human_bytes(e.new_bytes),
            ]
        })
        .collect();
    table(&["ID", "TIME", "AGE", "SIZE", "FILES", "NEW"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::get::tests::{app, now};

    #[test]
    fn catalog_table_snapshot() {
        let entries = vec![
            CatalogEntry {
                id: "20261129T145500Z".into(),
                time: "2026-11-29T14:55:00Z".into(),
                bytes: 2048,
                files: 2,
                new_bytes: 300,
                duration_ms: 40,
                ordinals: vec![0],
            },
            CatalogEntry {
                id: "20261129T145000Z".into(),
                time: "2026-11-29T14:50:00Z".into(),
                bytes: 1_800_000,
                files: 120,
                new_bytes: 1_800_000,
                duration_ms: 900,
                ordinals: vec![0],
            },
        ];
        assert_eq!(
            catalog_table(&entries, now()),
            "\
ID                 TIME                   AGE   SIZE     FILES   NEW
20261129T145500Z   2026-11-29T14:55:00Z   5m    2KiB     2       300B
20261129T145000Z   2026-11-29T14:50:00Z   10m   1.7MiB   120     1.7MiB
"
        );
    }

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
                "--target",
                "/backup",
                "--namespace",
                "default",
                "--name",
                "hello"
            ])
        );
    }

    #[test]
    fn a_node_directory_is_read_through_the_apps_backup_claim() {
        let hello = app("default", "hello", 1, 1);
        let source = Source::of(hello.spec.backup_target());
        assert_eq!(source, Source::NodeDirectory);
        let pod =
            serde_json::to_value(catalog_pod("hello", "default", &source, "img:1", "p")).unwrap();
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
            }),
            ..Default::default()
        });
        let source = Source::of(hello.spec.backup_target());
        let pod =
            serde_json::to_value(catalog_pod("hello", "default", &source, "img:1", "p")).unwrap();
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
}
