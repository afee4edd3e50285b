//! `version`: the plugin's version, the API server's, and the reconciler's found in the
//! cluster: its availability and the image its pods really run.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use serde::Serialize;
use serde_json::{Value, json};

use crate::cli::OutputFormat;
use crate::context::{Ctx, Kube, RECONCILER, ReconcilerState, SYSTEM_NAMESPACE};
use crate::error::{CliError, explain_briefly};
use crate::output::{printable, to_json, to_yaml};

/// The plugin's version.
pub const PLUGIN_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The version of a reconciler Deployment: its app.kubernetes.io/version label, else the
/// image's tag.
pub fn reconciler_version(state: &ReconcilerState) -> Option<String> {
    let ReconcilerState::Found(deployment) = state else {
        return None;
    };
    if let Some(version) = deployment
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("app.kubernetes.io/version"))
    {
        return Some(version.clone());
    }
    let image = state.image()?;
    let without_digest = image.split('@').next().unwrap_or(&image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    Some(
        last.split_once(':')
            .map_or("latest", |(_, tag)| tag)
            .to_string(),
    )
}

/// One pod of the reconciler, as the kubelet reports it.
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RunningPod {
    pub name: String,
    /// The image the container runs, as resolved by the runtime.
    pub image: String,
    /// Its digest (`imageID`), when the runtime reports one.
    #[serde(rename = "imageID")]
    pub image_id: String,
    pub ready: bool,
}

/// The pods of the reconciler's Deployment and what their reconciler container runs.
fn running_pods(pods: &[Pod]) -> Vec<RunningPod> {
    pods.iter()
        .filter_map(|pod| {
            let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
            let status = statuses
                .iter()
                .find(|s| s.name == RECONCILER || s.name == "reconciler")
                .or(statuses.first())?;
            Some(RunningPod {
                name: pod.metadata.name.clone().unwrap_or_default(),
                image: status.image.clone(),
                image_id: status.image_id.clone(),
                ready: status.ready,
            })
        })
        .collect()
}

/// `version`: like `kubectl version`, it prints what it knows and exits non-zero when the
/// cluster cannot be reached.
pub async fn version(ctx: &Ctx) -> Result<String, CliError> {
    let mut report = json!({"plugin": PLUGIN_VERSION});
    let unreachable = match ctx.connect().await {
        Err(error) => Some(error),
        Ok(kube) => match kube.client.apiserver_version().await {
            Err(error) => Some(CliError::Failed(format!(
                "cannot reach the cluster's API server: {}",
                explain_briefly(&error)
            ))),
            Ok(server) => {
                report["server"] = json!(server.git_version);
                report["reconciler"] = reconciler_report(&kube).await;
                None
            }
        },
    };
    if let Some(error) = &unreachable {
        report["error"] = json!(error.to_string());
    }
    let output = match ctx.output() {
        OutputFormat::Json => to_json(&report)?,
        OutputFormat::Yaml => to_yaml(&report)?,
        _ => text(&report),
    };
    match unreachable {
        None => Ok(output),
        Some(error) => Err(CliError::AfterOutput {
            output,
            error: Box::new(error),
        }),
    }
}

/// The reconciler's version, availability and running image, as JSON.
async fn reconciler_report(kube: &Kube) -> Value {
    let state = kube.reconciler().await;
    let deployment = match &state {
        ReconcilerState::Absent => return json!({"installed": false}),
        ReconcilerState::Unknown(error) => return json!({"error": error}),
        ReconcilerState::Found(deployment) => deployment,
    };
    let desired = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let selector = deployment
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.as_ref())
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), SYSTEM_NAMESPACE);
    let running = match pods.list(&ListParams::default().labels(&selector)).await {
        Ok(list) => json!(running_pods(&list.items)),
        Err(error) => json!({"error": explain_briefly(&error)}),
    };
    json!({
        "installed": true,
        "version": reconciler_version(&state),
        "image": state.image(),
        "desiredReplicas": desired,
        "availableReplicas": state.available().unwrap_or(0),
        "pods": running,
    })
}

/// The report as lines for a person.
fn text(report: &Value) -> String {
    let mut out = format!("Plugin:     kubectl-hellostateful {PLUGIN_VERSION}\n");
    if let Some(server) = report["server"].as_str() {
        out += &format!("Server:     Kubernetes {}\n", printable(server));
    }
    if report.get("error").is_some() {
        // Nothing more is known; the error itself goes to stderr.
        return out;
    }
    let reconciler = &report["reconciler"];
    let line = if let Some(error) = reconciler["error"].as_str() {
        format!("unknown: {}", printable(error))
    } else if reconciler["installed"] == false {
        format!(
            "not installed (no Deployment {SYSTEM_NAMESPACE}/{RECONCILER}; see `kubectl hellostateful install`)"
        )
    } else {
        let (available, desired) = (
            &reconciler["availableReplicas"],
            &reconciler["desiredReplicas"],
        );
        let health = if available.as_i64().unwrap_or(0) > 0 {
            format!("available ({available}/{desired} pods)")
        } else {
            format!(
                "NOT available (0/{desired} pods; see `kubectl -n {SYSTEM_NAMESPACE} get pods`)"
            )
        };
        format!(
            "{} (image {}), {health}",
            printable(reconciler["version"].as_str().unwrap_or("<unknown>")),
            printable(reconciler["image"].as_str().unwrap_or("<unknown>")),
        )
    };
    out += &format!("Reconciler: {line}\n");
    for pod in reconciler["pods"].as_array().into_iter().flatten() {
        let image_id = pod["imageID"].as_str().unwrap_or_default();
        let digest = image_id.rsplit_once('@').map_or(image_id, |(_, d)| d);
        out += &format!(
            "  pod {}: runs {}{}{}\n",
            printable(pod["name"].as_str().unwrap_or_default()),
            printable(pod["image"].as_str().unwrap_or_default()),
            if digest.is_empty() {
                String::new()
            } else {
                format!(" ({})", printable(digest))
            },
            if pod["ready"] == true {
                ""
            } else {
                ", not ready"
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;

    fn deployment(image: &str, label: Option<&str>) -> ReconcilerState {
        let mut value = serde_json::json!({
            "metadata": {"name": "hellostateful-reconciler"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "reconciler", "image": image}]}}}
        });
        if let Some(label) = label {
            value["metadata"]["labels"] = serde_json::json!({"app.kubernetes.io/version": label});
        }
        ReconcilerState::Found(Box::new(
            serde_json::from_value::<Deployment>(value).unwrap(),
        ))
    }

    #[test]
    fn versions_from_label_or_tag() {
        assert_eq!(
            reconciler_version(&deployment("x:1", Some("0.1.0"))).as_deref(),
            Some("0.1.0")
        );
        assert_eq!(
            reconciler_version(&deployment("hellostateful-reconciler:0.1.0", None)).as_deref(),
            Some("0.1.0")
        );
        assert_eq!(
            reconciler_version(&deployment("localhost:5000/r:0.2.0@sha256:ab", None)).as_deref(),
            Some("0.2.0")
        );
        assert_eq!(
            reconciler_version(&deployment("localhost:5000/r", None)).as_deref(),
            Some("latest")
        );
        assert_eq!(reconciler_version(&ReconcilerState::Absent), None);
    }
}
