//! `backups NAME`: reads the catalog of snapshots through a short-lived read-only pod that
//! runs the data mover (`hellostateful-reconciler backups --json`) next to the backups.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use hellostateful_api::summary::{CatalogEntry, parse_last_line};
use hellostateful_api::{HelloStateful, ResolvedTarget, names};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{DeleteParams, ListParams, LogParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::cli::OutputFormat;
use crate::context::{Ctx, DEFAULT_IMAGE};
use crate::error::{Action, CliError, explain};
use crate::output::{age_of, human_bytes, table, to_json, to_yaml};

/// How long the catalog pod may take, from creation to exit.
const DEADLINE: Duration = Duration::from_secs(120);
/// Where the target is mounted in the pod.
const MOUNT: &str = "/backup";

/// The catalog pod for `app` in `namespace`, run with `image`.
pub fn catalog_pod(app: &HelloStateful, namespace: &str, image: &str, pod_name: &str) -> Pod {
    let name = app.name_any();
    let status = app.status.clone().unwrap_or_default();
    let (volume, node_name) = match app.spec.backup_target() {
        ResolvedTarget::HostPath(path) => (
            json!({"name": "backup", "hostPath": {"path": path, "type": "Directory"}}),
            status.node_name.clone(),
        ),
        ResolvedTarget::Claim(claim) => (
            json!({"name": "backup", "persistentVolumeClaim": {"claimName": claim, "readOnly": true}}),
            None,
        ),
    };
    let mut labels = names::labels(&name, names::Component::Backup);
    labels.insert(
        "app.kubernetes.io/managed-by".to_string(),
        crate::context::FIELD_MANAGER.to_string(),
    );
    let mut pod = json!({
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
                "volumeMounts": [{"name": "backup", "mountPath": MOUNT, "readOnly": true}],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "128Mi"}},
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]}
                }
            }],
            "volumes": [volume]
        }
    });
    if let Some(node) = node_name {
        pod["spec"]["nodeName"] = json!(node);
    }
    serde_json::from_value(pod).unwrap_or_default()
}

/// `backups NAME`.
pub async fn backups(ctx: &Ctx, name: &str) -> Result<String, CliError> {
    let kube = ctx.connect().await?;
    let app = kube.get_app(name).await?;
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
    let pod = catalog_pod(&app, &kube.namespace, &image, &pod_name);
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
    let result = run_to_end(&pods, &kube.client, &kube.namespace, &pod_name, &app).await;
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
    match ctx.output() {
        OutputFormat::Json => to_json(&entries),
        OutputFormat::Yaml => to_yaml(&entries),
        OutputFormat::Name => Ok(entries.iter().map(|e| format!("{}\n", e.id)).collect()),
        _ if entries.is_empty() => {
            eprintln!("No backups of {}/{name} yet.", kube.namespace);
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
    app: &HelloStateful,
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
            // A node directory that does not exist yet means there are no backups at all.
            let events: Api<Event> = Api::namespaced(client.clone(), namespace);
            let selector = format!("involvedObject.name={pod_name}");
            if let Ok(list) = events.list(&ListParams::default().fields(&selector)).await {
                for event in list.items {
                    let message = event.message.unwrap_or_default();
                    if event.reason.as_deref() == Some("FailedMount") {
                        if matches!(app.spec.backup_target(), ResolvedTarget::HostPath(_))
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

    #[test]
    fn the_pod_is_read_only_and_pinned_to_the_data_node() {
        let hello = app("default", "hello", 1, 1);
        let pod = serde_json::to_value(catalog_pod(&hello, "default", "img:1", "p")).unwrap();
        let spec = &pod["spec"];
        assert_eq!(spec["nodeName"], "node-1");
        assert_eq!(spec["restartPolicy"], "Never");
        assert_eq!(spec["volumes"][0]["hostPath"]["path"], "/tmp/backup");
        assert_eq!(spec["volumes"][0]["hostPath"]["type"], "Directory");
        let container = &spec["containers"][0];
        assert_eq!(container["volumeMounts"][0]["readOnly"], true);
        assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(
            container["securityContext"]["capabilities"]["drop"][0],
            "ALL"
        );
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
        let mut with_claim = hello.clone();
        with_claim.spec.backup = Some(hellostateful_api::BackupSpec {
            target: Some(hellostateful_api::BackupTarget {
                host_path: None,
                persistent_volume_claim: Some("vault".into()),
            }),
            ..Default::default()
        });
        let pod = serde_json::to_value(catalog_pod(&with_claim, "default", "img:1", "p")).unwrap();
        assert_eq!(
            pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
            "vault"
        );
        assert!(pod["spec"].get("nodeName").is_none());
    }
}
