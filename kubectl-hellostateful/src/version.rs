//! `version`: the plugin's version and the reconciler's found in the cluster.

use serde_json::json;

use crate::cli::OutputFormat;
use crate::context::{Ctx, RECONCILER, ReconcilerState, SYSTEM_NAMESPACE};
use crate::error::CliError;
use crate::output::{to_json, to_yaml};

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

/// `version`.
pub async fn version(ctx: &Ctx) -> Result<String, CliError> {
    let (reconciler, image, error) = match ctx.connect().await {
        Ok(kube) => {
            let state = kube.reconciler().await;
            let error = match &state {
                ReconcilerState::Unknown(e) => Some(e.clone()),
                _ => None,
            };
            (reconciler_version(&state), state.image(), error)
        }
        Err(e) => (None, None, Some(e.to_string())),
    };
    match ctx.output() {
        OutputFormat::Json | OutputFormat::Yaml => {
            let value = json!({
                "plugin": PLUGIN_VERSION,
                "reconciler": reconciler,
                "reconcilerImage": image,
                "error": error,
            });
            if ctx.output() == OutputFormat::Json {
                to_json(&value)
            } else {
                to_yaml(&value)
            }
        }
        _ => {
            let cluster = match (&reconciler, &error) {
                (Some(version), _) => format!(
                    "{version} (image {})",
                    image.unwrap_or_else(|| "<unknown>".into())
                ),
                (None, Some(error)) => format!("unknown: {error}"),
                (None, None) => format!(
                    "not installed (no Deployment {SYSTEM_NAMESPACE}/{RECONCILER}; see `kubectl hellostateful install`)"
                ),
            };
            Ok(format!(
                "Plugin:     kubectl-hellostateful {PLUGIN_VERSION}\nReconciler: {cluster}\n"
            ))
        }
    }
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
