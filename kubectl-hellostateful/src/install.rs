//! `install` and `uninstall`: the CRD, RBAC and reconciler from manifests embedded in the
//! binary, by server-side apply.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::discovery::{Scope, pinned_kind};
use kube::{Api, Client};
use serde_json::Value;

use crate::cli::{DryRun, InstallArgs, OutputFormat, UninstallArgs};
use crate::context::{Ctx, FIELD_MANAGER, RECONCILER, SYSTEM_NAMESPACE};
use crate::error::{Action, CliError, explain};
use crate::output::{to_json, to_yaml};
use crate::prompt;

/// Name of the CRD.
pub const CRD_NAME: &str = "hellostatefuls.hello-stateful.example.com";

/// The manifests, in the order they are applied (as manifests/kustomization.yaml lists them).
pub const MANIFESTS: &[(&str, &str)] = &[
    (
        "namespace.yaml",
        include_str!("../../manifests/namespace.yaml"),
    ),
    ("crd.yaml", include_str!("../../manifests/crd.yaml")),
    ("rbac.yaml", include_str!("../../manifests/rbac.yaml")),
    (
        "deployment.yaml",
        include_str!("../../manifests/deployment.yaml"),
    ),
];

/// Splits multi-document YAML on `---` lines and parses each non-empty document.
pub fn parse_documents(text: &str) -> Result<Vec<Value>, CliError> {
    let mut documents = Vec::new();
    let mut current = String::new();
    let mut flush = |current: &mut String| -> Result<(), CliError> {
        let has_content = current
            .lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        if has_content {
            let value: Value = serde_saphyr::from_str(current)
                .map_err(|e| CliError::Failed(format!("embedded manifest does not parse: {e}")))?;
            if !value.is_null() {
                documents.push(value);
            }
        }
        current.clear();
        Ok(())
    };
    for line in text.lines() {
        if line.trim_end() == "---" || line.starts_with("--- ") {
            flush(&mut current)?;
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    flush(&mut current)?;
    Ok(documents)
}

/// Every embedded object, with the reconciler image replaced when `image` is given.
pub fn documents(image: Option<&str>) -> Result<Vec<Value>, CliError> {
    let mut all = Vec::new();
    for (_, text) in MANIFESTS {
        all.extend(parse_documents(text)?);
    }
    if let Some(image) = image {
        for doc in &mut all {
            if doc["kind"] == "Deployment" {
                set_image(doc, image);
            }
        }
    }
    Ok(all)
}

/// Sets every container's image and its HELLOSTATEFUL_IMAGE env to `image`.
pub fn set_image(deployment: &mut Value, image: &str) {
    let Some(containers) = deployment
        .pointer_mut("/spec/template/spec/containers")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for container in containers {
        container["image"] = Value::from(image);
        if let Some(env) = container.get_mut("env").and_then(Value::as_array_mut) {
            for var in env {
                if var["name"] == "HELLOSTATEFUL_IMAGE" {
                    var["value"] = Value::from(image);
                }
            }
        }
    }
}

/// `kind.group/name`, as kubectl names what it applied.
pub fn display_name(doc: &Value) -> String {
    let kind = doc["kind"].as_str().unwrap_or("object").to_lowercase();
    let group = doc["apiVersion"]
        .as_str()
        .and_then(|v| v.rsplit_once('/'))
        .map(|(g, _)| format!(".{g}"))
        .unwrap_or_default();
    let name = doc["metadata"]["name"].as_str().unwrap_or("");
    format!("{kind}{group}/{name}")
}

async fn api_for(client: &Client, doc: &Value) -> Result<Api<DynamicObject>, CliError> {
    let api_version = doc["apiVersion"].as_str().unwrap_or("v1");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = doc["kind"].as_str().unwrap_or_default();
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = pinned_kind(client, &gvk).await.map_err(|e| {
        explain(
            e,
            &Action::new("discover", format!("kind {kind} ({api_version})")),
        )
    })?;
    Ok(match caps.scope {
        Scope::Cluster => Api::all_with(client.clone(), &resource),
        Scope::Namespaced => {
            let namespace = doc["metadata"]["namespace"]
                .as_str()
                .unwrap_or(SYSTEM_NAMESPACE);
            Api::namespaced_with(client.clone(), namespace, &resource)
        }
    })
}

/// `install`.
pub async fn install(ctx: &Ctx, args: &InstallArgs) -> Result<String, CliError> {
    let docs = documents(args.image.as_deref())?;
    if args.dry_run == DryRun::Client {
        return match ctx.output() {
            OutputFormat::Json => to_json(&crate::output::list_of(docs)),
            OutputFormat::Name => Ok(docs
                .iter()
                .map(|d| format!("{}\n", display_name(d)))
                .collect()),
            _ => {
                let mut out = String::new();
                for doc in &docs {
                    out.push_str("---\n");
                    out.push_str(&to_yaml(doc)?);
                }
                Ok(out)
            }
        };
    }
    let kube = ctx.connect().await?;
    let mut params = PatchParams::apply(FIELD_MANAGER).force();
    params.dry_run = args.dry_run == DryRun::Server;
    let suffix = if params.dry_run {
        " (server dry run)"
    } else {
        ""
    };
    for doc in &docs {
        let api = api_for(&kube.client, doc).await?;
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        let object: DynamicObject = serde_json::from_value(doc.clone())
            .map_err(|e| CliError::Failed(format!("embedded manifest {name}: {e}")))?;
        match api.patch(name, &params, &Patch::Apply(&object)).await {
            Ok(_) => println!("{} serverside-applied{suffix}", display_name(doc)),
            // A server dry run cannot put objects into the namespace it has not made.
            Err(e)
                if params.dry_run
                    && crate::error::code(&e) == Some(404)
                    && doc["metadata"]["namespace"].is_string() =>
            {
                println!(
                    "{} skipped{suffix}: its namespace {} does not exist yet",
                    display_name(doc),
                    doc["metadata"]["namespace"].as_str().unwrap_or_default()
                );
            }
            Err(e) => return Err(explain(e, &Action::new("apply", display_name(doc)))),
        }
        if doc["kind"] == "CustomResourceDefinition" && !params.dry_run {
            wait_established(&kube.client, name, args.timeout).await?;
        }
    }
    if args.wait && !params.dry_run {
        wait_available(ctx, &kube.client, args.timeout).await?;
        eprintln!("{}", ctx.style.good("reconciler is available"));
    }
    Ok(String::new())
}

async fn wait_established(client: &Client, name: &str, timeout: Duration) -> Result<(), CliError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let started = Instant::now();
    loop {
        if let Ok(crd) = api.get(name).await {
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                return Ok(());
            }
        }
        if started.elapsed() > timeout {
            return Err(CliError::Failed(format!(
                "timed out waiting for the CRD {name} to be established"
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn wait_available(ctx: &Ctx, client: &Client, timeout: Duration) -> Result<(), CliError> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let started = Instant::now();
    ctx.debug(
        0,
        format!("waiting for deployment {SYSTEM_NAMESPACE}/{RECONCILER} to be available..."),
    );
    loop {
        let available = api
            .get(RECONCILER)
            .await
            .ok()
            .and_then(|d| d.status)
            .and_then(|s| s.available_replicas)
            .unwrap_or(0);
        if available > 0 {
            return Ok(());
        }
        if started.elapsed() > timeout {
            return Err(CliError::Failed(format!(
                "timed out after {}s waiting for deployment {SYSTEM_NAMESPACE}/{RECONCILER} to be available: see `kubectl -n {SYSTEM_NAMESPACE} get pods` and `kubectl -n {SYSTEM_NAMESPACE} describe deployment {RECONCILER}`",
                timeout.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `uninstall`.
pub async fn uninstall(ctx: &Ctx, args: &UninstallArgs) -> Result<String, CliError> {
    let docs = documents(None)?;
    if args.include_crd && !args.yes {
        return Err(CliError::Usage(format!(
            "--include-crd deletes the CRD {CRD_NAME} and with it every HelloStateful app in the cluster (their StatefulSets, volumes and data; backups are kept): pass --yes as well if that is what you want"
        )));
    }
    if !args.yes && !ctx.terminal.can_prompt() {
        return Err(CliError::Usage(
            "refusing to uninstall without confirmation: stdin is not a terminal; pass --yes"
                .to_string(),
        ));
    }
    let kube = ctx.connect().await?;
    if !args.yes {
        let question = format!(
            "Remove the reconciler (namespace {SYSTEM_NAMESPACE}, its RBAC and Deployment)?\n  Apps stay but are no longer reconciled, backed up or restored until it is installed again.\n  Continue?"
        );
        if !prompt::confirm(&question)? {
            return Err(CliError::Failed(
                "uninstall cancelled: nothing was changed".to_string(),
            ));
        }
    }
    let mut out = String::new();
    // The CRD goes first, while the reconciler still runs to release the apps' finalizers.
    if args.include_crd {
        let apps = kube::Api::<hellostateful_api::HelloStateful>::all(kube.client.clone())
            .list_metadata(&ListParams::default())
            .await
            .map(|l| l.items.len())
            .unwrap_or(0);
        eprintln!("deleting the CRD and {apps} HelloStateful app(s)...");
        for doc in docs
            .iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
        {
            out.push_str(&delete_one(&kube.client, doc).await?);
            let api: Api<CustomResourceDefinition> = Api::all(kube.client.clone());
            let started = Instant::now();
            while api.get_opt(CRD_NAME).await.ok().flatten().is_some() {
                if started.elapsed() > Duration::from_secs(120) {
                    eprintln!(
                        "{} the CRD is still being deleted (apps' finalizers): going on",
                        ctx.style.warn("Warning:")
                    );
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    for doc in docs.iter().rev() {
        if doc["kind"] == "CustomResourceDefinition" {
            continue;
        }
        out.push_str(&delete_one(&kube.client, doc).await?);
    }
    if !args.include_crd {
        out.push_str(&format!(
            "The CRD {CRD_NAME} and the apps were kept (remove them with --include-crd --yes).\n"
        ));
    }
    Ok(out)
}

async fn delete_one(client: &Client, doc: &Value) -> Result<String, CliError> {
    let api = api_for(client, doc).await?;
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(format!("{} deleted\n", display_name(doc))),
        Err(e) if crate::error::code(&e) == Some(404) => {
            Ok(format!("{} not found\n", display_name(doc)))
        }
        Err(e) => Err(explain(e, &Action::new("delete", display_name(doc)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_and_parses_documents() {
        let text = "# comment\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n  namespace: a\nspec:\n  template:\n    spec:\n      containers:\n      - name: r\n        image: old:1\n        env:\n        - name: HELLOSTATEFUL_IMAGE\n          value: old:1\n        - name: OTHER\n          value: x\n";
        let mut docs = parse_documents(text).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(display_name(&docs[0]), "namespace/a");
        assert_eq!(display_name(&docs[1]), "deployment.apps/d");
        set_image(&mut docs[1], "new:2");
        let container = &docs[1]["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], "new:2");
        assert_eq!(container["env"][0]["value"], "new:2");
        assert_eq!(container["env"][1]["value"], "x");
    }

    #[test]
    fn the_embedded_manifests_hold_what_install_needs() {
        let docs = documents(Some("img:9")).unwrap();
        let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        for kind in [
            "Namespace",
            "CustomResourceDefinition",
            "ServiceAccount",
            "Deployment",
        ] {
            assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
        }
        assert_eq!(kinds[0], "Namespace");
        let crd = docs
            .iter()
            .find(|d| d["kind"] == "CustomResourceDefinition")
            .unwrap();
        assert_eq!(crd["metadata"]["name"], CRD_NAME);
        let deployment = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
        assert_eq!(deployment["metadata"]["name"], RECONCILER);
        assert_eq!(deployment["metadata"]["namespace"], SYSTEM_NAMESPACE);
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"][0]["image"],
            "img:9"
        );
    }
}
