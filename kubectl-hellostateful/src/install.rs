//! `install` and `uninstall`: the CRD, RBAC, the admin's settings, the admission policy
//! and the reconciler, from manifests embedded in the binary, by server-side apply.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use hellostateful_api::defaults::HOSTPATH_ROOT;
use hellostateful_api::names::short_hash;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::discovery::{Scope, pinned_kind};
use kube::error::DiscoveryError;
use kube::{Api, Client};
use serde_json::Value;

use crate::cli::{DryRun, InstallArgs, OutputFormat, UninstallArgs};
use crate::context::{Ctx, FIELD_MANAGER, RECONCILER, SYSTEM_NAMESPACE};
use crate::error::{Action, CliError, explain};
use crate::output::{printable, to_json, to_yaml};
use crate::prompt;

/// Name of the CRD.
pub const CRD_NAME: &str = "hellostatefuls.hello-stateful.example.com";
/// The cluster admin's settings (backup roots, mover image), read by the reconciler and by
/// the admission policy.
pub const SETTINGS: &str = "hellostateful-settings";
/// Pod template annotation of the reconciler: a hash of the settings it reads.
pub const SETTINGS_HASH: &str = "hello-stateful.example.com/settings-hash";

/// The oldest Kubernetes minor (of 1.x) the manifests need: ValidatingAdmissionPolicy v1
/// (with parameters and match conditions) is served from 1.30.
pub const MINIMUM_MINOR: u32 = 30;

/// Refuses a cluster older than 1.[`MINIMUM_MINOR`], by the version its API server reports.
/// A version it cannot read (a distribution's own scheme) passes: the kinds themselves are
/// looked up before anything is applied.
pub fn check_minimum_version(major: &str, minor: &str) -> Result<(), String> {
    // Distributions append to the minor ("31+", "30-gke.100").
    let number = |text: &str| {
        let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u32>().ok()
    };
    match (number(major), number(minor)) {
        (Some(1), Some(minor)) if minor < MINIMUM_MINOR => Err(format!(
            "hellostateful needs Kubernetes 1.{MINIMUM_MINOR} or later (ValidatingAdmissionPolicy v1), \
             and this cluster runs {major}.{minor}: nothing was applied"
        )),
        _ => Ok(()),
    }
}

/// The manifests, in the order they are applied (as manifests/kustomization.yaml lists them).
pub const MANIFESTS: &[(&str, &str)] = &[
    (
        "namespace.yaml",
        include_str!("../../manifests/namespace.yaml"),
    ),
    ("crd.yaml", include_str!("../../manifests/crd.yaml")),
    ("rbac.yaml", include_str!("../../manifests/rbac.yaml")),
    (
        "settings.yaml",
        include_str!("../../manifests/settings.yaml"),
    ),
    (
        "admission-policy.yaml",
        include_str!("../../manifests/admission-policy.yaml"),
    ),
    (
        "deployment.yaml",
        include_str!("../../manifests/deployment.yaml"),
    ),
    (
        "admission-webhook.yaml",
        include_str!("../../manifests/admission-webhook.yaml"),
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

/// The node directories where backups may live, as `install --backup-roots` takes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupRoots(Vec<String>);

impl fmt::Display for BackupRoots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(","))
    }
}

/// Parses `DIR[,DIR...]`: each a clean absolute path, none the static volume root or
/// inside another root (the app directory `<root>/<ns>/<name>` of one root would
/// otherwise lie inside another app's directory under the other).
pub fn parse_backup_roots(text: &str) -> Result<BackupRoots, String> {
    let roots: Vec<String> = text.split(',').map(|r| r.trim().to_string()).collect();
    for root in &roots {
        if root == "/" {
            return Err("/ is the whole node: name a directory like /tmp/backup".to_string());
        }
        if !hellostateful_api::validate::is_clean_absolute_path(root) {
            return Err(format!(
                "{root:?} is not a clean absolute path like /tmp/backup (no empty, '.' or '..' components, no '//', no trailing '/')"
            ));
        }
        if nested(root, HOSTPATH_ROOT) {
            return Err(format!(
                "{root} overlaps {HOSTPATH_ROOT}, where the apps' live data lives"
            ));
        }
    }
    for (i, a) in roots.iter().enumerate() {
        if let Some(b) = roots[i + 1..].iter().find(|b| nested(a, b)) {
            return Err(format!(
                "{a} and {b} overlap: one app's backups would lie inside another's"
            ));
        }
    }
    Ok(BackupRoots(roots))
}

/// The object store endpoints a spec may name, as `install --object-store-endpoints` takes
/// them; none: any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectStoreEndpoints(Vec<String>);

impl fmt::Display for ObjectStoreEndpoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(","))
    }
}

/// Checks a `--node-backup-limit` (a size like 10Gi, or empty for none) as the reconciler
/// will read it, so that a typo fails here rather than stop the reconciler starting.
pub fn parse_node_backup_limit(text: &str) -> Result<String, String> {
    hellostateful_api::quantity::node_backup_limit(text).map(|_| text.trim().to_string())
}

/// Parses `URL[,URL...]`, each `http(s)://host[:port]` as a spec's endpoint must be (a typo
/// would otherwise refuse every store, silently); an empty value allows any endpoint.
pub fn parse_object_store_endpoints(text: &str) -> Result<ObjectStoreEndpoints, String> {
    if text.trim().is_empty() {
        return Ok(ObjectStoreEndpoints(Vec::new()));
    }
    match text
        .split(',')
        .map(str::trim)
        .find(|endpoint| !hellostateful_api::endpoints::is_endpoint(endpoint))
    {
        Some(bad) => Err(format!(
            "{bad:?} is not an object store endpoint like https://s3.example.com or http://minio:9000 (scheme, host and maybe a port; no path)"
        )),
        None => Ok(ObjectStoreEndpoints(hellostateful_api::endpoints::parse(
            text,
        ))),
    }
}

/// Whether one of two clean paths is the other or lies under it.
fn nested(a: &str, b: &str) -> bool {
    let under = |inner: &str, outer: &str| {
        inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    under(a, b) || under(b, a)
}

/// Every embedded object. `image` replaces the reconciler's image, which is also the only
/// image backup and restore Jobs may run (`moverImage`); `settings` replace those keys of
/// the settings ConfigMap (`backupRoots`, the node directories the admin allows,
/// `objectStoreEndpoints`, and the others the admin may have changed: see
/// [`KEPT_SETTINGS`]).
pub fn documents(
    image: Option<&str>,
    settings: &BTreeMap<String, String>,
) -> Result<Vec<Value>, CliError> {
    let mut all = Vec::new();
    for (_, text) in MANIFESTS {
        all.extend(parse_documents(text)?);
    }
    for doc in &mut all {
        if let Some(image) = image
            && doc["kind"] == "Deployment"
        {
            set_image(doc, image);
        }
        if is_settings(doc) {
            if let Some(image) = image {
                doc["data"]["moverImage"] = Value::from(image);
            }
            for (key, value) in settings {
                doc["data"][key] = Value::from(value.as_str());
            }
        }
    }
    // The reconciler reads the settings into its environment once, at start: a change of
    // them must change its pod template, so that the Deployment rolls it.
    let data = all.iter().find(|d| is_settings(d)).map(|d| &d["data"]);
    let hash = short_hash(&data.map(Value::to_string).unwrap_or_default());
    for doc in all.iter_mut().filter(|d| d["kind"] == "Deployment") {
        if let Some(template) = doc.pointer_mut("/spec/template")
            && template.is_object()
        {
            template["metadata"]["annotations"][SETTINGS_HASH] = Value::from(hash.clone());
        }
    }
    Ok(all)
}

/// The image this plugin installs (its embedded settings' moverImage; a release pins it
/// by digest): what a backups pod runs when the reconciler's Deployment cannot be read.
pub fn default_image() -> String {
    documents(None, &BTreeMap::new())
        .ok()
        .and_then(|docs| setting(&docs, "moverImage").map(str::to_string))
        .unwrap_or_else(|| RECONCILER.to_string())
}

fn is_settings(doc: &Value) -> bool {
    doc["kind"] == "ConfigMap" && doc["metadata"]["name"] == SETTINGS
}

/// A value of the settings ConfigMap among `docs`.
pub fn setting<'a>(docs: &'a [Value], key: &str) -> Option<&'a str> {
    docs.iter().find(|d| is_settings(d))?["data"][key].as_str()
}

/// Sets every container's image (the reconciler reads the mover image from the settings).
pub fn set_image(deployment: &mut Value, image: &str) {
    let Some(containers) = deployment
        .pointer_mut("/spec/template/spec/containers")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for container in containers {
        container["image"] = Value::from(image);
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

/// The API of `doc`'s kind (cluster-scoped ones, like the CRD and the admission policy, or
/// namespaced), or None when the cluster does not serve that kind.
async fn api_for(client: &Client, doc: &Value) -> Result<Option<Api<DynamicObject>>, CliError> {
    let api_version = doc["apiVersion"].as_str().unwrap_or("v1");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = doc["kind"].as_str().unwrap_or_default();
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = match pinned_kind(client, &gvk).await {
        Ok(found) => found,
        Err(kube::Error::Discovery(DiscoveryError::MissingKind(_))) => return Ok(None),
        Err(e) if crate::error::code(&e) == Some(404) => return Ok(None),
        Err(e) => {
            return Err(explain(
                e,
                &Action::new("discover", format!("kind {kind} ({api_version})")),
            ));
        }
    };
    Ok(Some(match caps.scope {
        Scope::Cluster => Api::all_with(client.clone(), &resource),
        Scope::Namespaced => {
            let namespace = doc["metadata"]["namespace"]
                .as_str()
                .unwrap_or(SYSTEM_NAMESPACE);
            Api::namespaced_with(client.clone(), namespace, &resource)
        }
    }))
}

/// The settings key of the object store endpoints a spec may name (empty: any), which the
/// reconciler and the plugin's own pods obey.
pub const OBJECT_STORE_ENDPOINTS: &str = "objectStoreEndpoints";

/// The settings key that says whether apps without a StorageClass get static volumes.
pub const STATIC_DATA_VOLUMES: &str = "staticDataVolumes";

/// The settings key of the taint keys a spec may tolerate ("*": any; empty: none, a choice
/// kept like any other).
pub const TOLERABLE_TAINTS: &str = "tolerableTaints";

/// The settings key of the bound on an app's backups in a node directory (empty: none).
pub const NODE_BACKUP_LIMIT: &str = "nodeBackupLimit";

/// Settings an upgrade keeps as the cluster has them (the admin may have changed them), when
/// no flag sets them: the node directories backups may go to, how long a mover pod may take
/// to start, the object stores a spec may name, and what of the nodes it may ask for.
pub const KEPT_SETTINGS: [&str; 6] = [
    "backupRoots",
    "moverStartSeconds",
    OBJECT_STORE_ENDPOINTS,
    STATIC_DATA_VOLUMES,
    TOLERABLE_TAINTS,
    NODE_BACKUP_LIMIT,
];

/// The settings the flags of `install` set.
fn flag_settings(args: &InstallArgs) -> BTreeMap<String, String> {
    let mut settings = BTreeMap::new();
    if let Some(roots) = &args.backup_roots {
        settings.insert("backupRoots".to_string(), roots.to_string());
    }
    if let Some(endpoints) = &args.object_store_endpoints {
        settings.insert(OBJECT_STORE_ENDPOINTS.to_string(), endpoints.to_string());
    }
    if let Some(choice) = args.static_data_volumes {
        settings.insert(STATIC_DATA_VOLUMES.to_string(), choice.as_str().to_string());
    }
    if let Some(keys) = &args.tolerable_taints {
        settings.insert(TOLERABLE_TAINTS.to_string(), keys.clone());
    }
    if let Some(limit) = &args.node_backup_limit {
        settings.insert(NODE_BACKUP_LIMIT.to_string(), limit.clone());
    }
    settings
}

/// The settings ConfigMap's data the cluster has now (none before the first install).
async fn cluster_settings(client: &Client) -> Result<BTreeMap<String, String>, CliError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let settings = api.get_opt(SETTINGS).await.map_err(|e| {
        explain(
            e,
            &Action::new("get", format!("configmap {SYSTEM_NAMESPACE}/{SETTINGS}")),
        )
    })?;
    Ok(settings.and_then(|c| c.data).unwrap_or_default())
}

/// What an install writes into the settings: those of [`KEPT_SETTINGS`] the cluster has
/// (not empty), each replaced by its flag when one is given; and the keys kept from the
/// cluster, to say so.
pub fn settings_to_apply(
    mut cluster: BTreeMap<String, String>,
    mut flags: BTreeMap<String, String>,
) -> (BTreeMap<String, String>, Vec<String>) {
    // An empty value means "none" only for the taints; elsewhere it is the default's.
    cluster.retain(|key, value| {
        KEPT_SETTINGS.contains(&key.as_str())
            && (key == TOLERABLE_TAINTS || !value.trim().is_empty())
    });
    let kept = cluster
        .keys()
        .filter(|key| !flags.contains_key(*key))
        .cloned()
        .collect();
    // A flag wins over what the cluster has.
    cluster.append(&mut flags);
    (cluster, kept)
}

/// What `install` prints: the settings that decide where backups may go, and the image.
pub fn summary(docs: &[Value], kept: &[String]) -> String {
    let note = |key: &str, flag: &str| {
        if kept.iter().any(|k| k == key) {
            format!(" (kept from the cluster; change with {flag})")
        } else {
            String::new()
        }
    };
    let endpoints = setting(docs, OBJECT_STORE_ENDPOINTS).unwrap_or_default();
    let endpoints = if hellostateful_api::endpoints::parse(endpoints).is_empty() {
        "any (restrict them with --object-store-endpoints on a cluster shared with untrusted tenants)".to_string()
    } else {
        printable(endpoints).into_owned()
    };
    format!(
        "backup roots allowed on nodes: {}{}\nobject store endpoints allowed: {endpoints}{}\nreconciler and backup/restore image: {}\n",
        printable(setting(docs, "backupRoots").unwrap_or_default()),
        note("backupRoots", "--backup-roots"),
        note(OBJECT_STORE_ENDPOINTS, "--object-store-endpoints"),
        printable(setting(docs, "moverImage").unwrap_or_default())
    )
}

/// `install`.
pub async fn install(ctx: &Ctx, args: &InstallArgs) -> Result<String, CliError> {
    let flags = flag_settings(args);
    if args.dry_run == DryRun::Client {
        let docs = documents(args.image.as_deref(), &flags)?;
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
    let version = kube
        .client
        .apiserver_version()
        .await
        .map_err(|e| explain(e, &Action::new("read", "the cluster's version")))?;
    check_minimum_version(&version.major, &version.minor).map_err(CliError::Failed)?;
    if !args.allow_downgrade
        && let Some(installed) = installed_version(&kube.client).await
    {
        refuse_downgrade(&installed, env!("CARGO_PKG_VERSION")).map_err(CliError::Failed)?;
    }
    let (settings, kept) = settings_to_apply(cluster_settings(&kube.client).await?, flags);
    let docs = documents(args.image.as_deref(), &settings)?;
    // Every kind is looked up before anything is applied: a cluster that lacks one (the
    // admission policy needs Kubernetes 1.30) gets nothing half-installed.
    let mut apis = Vec::with_capacity(docs.len());
    for doc in &docs {
        match api_for(&kube.client, doc).await? {
            Some(api) => apis.push(api),
            None => {
                return Err(CliError::Failed(format!(
                    "this cluster does not serve {} ({}), which {} needs (Kubernetes 1.{MINIMUM_MINOR} or later): nothing was applied",
                    doc["kind"].as_str().unwrap_or_default(),
                    doc["apiVersion"].as_str().unwrap_or_default(),
                    display_name(doc)
                )));
            }
        }
    }
    let mut params = PatchParams::apply(FIELD_MANAGER).force();
    params.dry_run = args.dry_run == DryRun::Server;
    let running_images = if params.dry_run {
        Vec::new()
    } else {
        deployment_images(&kube.client).await
    };
    let suffix = if params.dry_run {
        " (server dry run)"
    } else {
        ""
    };
    for (doc, api) in docs.iter().zip(&apis) {
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
    if !params.dry_run {
        restart_tagged(&kube.client, &docs, &running_images).await?;
    }
    if args.wait && !params.dry_run {
        for deployment in DEPLOYMENTS {
            wait_available(ctx, &kube.client, deployment, args.timeout).await?;
        }
        eprintln!(
            "{}",
            ctx.style
                .good("reconciler and its admission webhook are available")
        );
    }
    Ok(summary(&docs, &kept))
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

/// The version of the installed reconciler, its Deployment's `app.kubernetes.io/version`.
async fn installed_version(client: &Client) -> Option<String> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    api.get_opt(RECONCILER)
        .await
        .ok()
        .flatten()?
        .metadata
        .labels?
        .remove("app.kubernetes.io/version")
}

/// Refuses to install `ours` over the newer version `installed`. A version that is not
/// semver (an admin's own label) is no reason to refuse.
fn refuse_downgrade(installed: &str, ours: &str) -> Result<(), String> {
    match (
        semver::Version::parse(installed),
        semver::Version::parse(ours),
    ) {
        (Ok(newer), Ok(older)) if newer > older => Err(format!(
            "the installed reconciler is version {installed}, newer than this plugin's {ours}: going back is not supported, as {ours} may not read what {installed} wrote (CHANGELOG.md). Install the plugin of {installed} or later, or pass --allow-downgrade (then restore from backups what {ours} cannot read)"
        )),
        _ => Ok(()),
    }
}

/// The image each of our Deployments runs now (None: no such Deployment yet).
async fn deployment_images(client: &Client) -> Vec<(String, Option<String>)> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let mut images = Vec::new();
    for (name, _, _) in DEPLOYMENTS {
        let image = api
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .and_then(|deployment| {
                deployment
                    .spec?
                    .template
                    .spec?
                    .containers
                    .into_iter()
                    .next()?
                    .image
            });
        images.push((name.to_string(), image));
    }
    images
}

/// Whether a Deployment must be restarted for its pods to run `image`: when it ran that
/// same image before, named by a tag. A tag may now name a rebuilt image (loaded into the
/// nodes under the same name), which the unchanged spec would never roll out; a changed
/// image rolls out by itself, and a digest always names the same image.
fn needs_restart(running: Option<&str>, applied: &str) -> bool {
    running == Some(applied) && !applied.contains('@')
}

/// Restarts (as `kubectl rollout restart` does) each Deployment whose unchanged image is
/// named by a tag, saying so.
async fn restart_tagged(
    client: &Client,
    docs: &[Value],
    running: &[(String, Option<String>)],
) -> Result<(), CliError> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    for doc in docs.iter().filter(|doc| doc["kind"] == "Deployment") {
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        let applied = doc["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap_or_default();
        let before = running
            .iter()
            .find(|(deployment, _)| deployment == name)
            .and_then(|(_, image)| image.as_deref());
        if !needs_restart(before, applied) {
            continue;
        }
        let restart = serde_json::json!({"spec": {"template": {"metadata": {"annotations": {
            "kubectl.kubernetes.io/restartedAt": chrono::Utc::now().to_rfc3339(),
        }}}}});
        api.patch(name, &PatchParams::default(), &Patch::Strategic(&restart))
            .await
            .map_err(|e| explain(e, &Action::new("restart", format!("deployment {name}"))))?;
        println!(
            "deployment.apps/{name} restarted: its image {applied} is named by a tag, which may name a rebuilt image (pin a digest, image@sha256:..., to roll out only changes)"
        );
    }
    Ok(())
}

/// The Deployments `install --wait` waits for: name, the component their pods are
/// labelled with (manifests/deployment.yaml, manifests/admission-webhook.yaml), and what
/// they run.
const DEPLOYMENTS: [(&str, &str, &str); 2] = [
    (RECONCILER, "reconciler", "the reconciler"),
    (
        "hellostateful-admission",
        "admission",
        "the admission webhook",
    ),
];

async fn wait_available(
    ctx: &Ctx,
    client: &Client,
    (name, component, what): (&str, &str, &str),
    timeout: Duration,
) -> Result<(), CliError> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let pod_selector = ListParams::default().labels(&format!(
        "app.kubernetes.io/name=hellostateful,app.kubernetes.io/component={component}"
    ));
    let started = Instant::now();
    ctx.debug(
        0,
        format!("waiting for deployment {SYSTEM_NAMESPACE}/{name} to be available..."),
    );
    loop {
        let deployment = api.get(name).await.ok();
        if deployment.as_ref().is_some_and(rollout_complete) {
            return Ok(());
        }
        // Only pods of the image being rolled out: an old pod that could not pull the image
        // this install replaces says nothing about the new one.
        let image = deployment.as_ref().and_then(template_image);
        let pods: Vec<Pod> = pods
            .list(&pod_selector)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
            .filter(|pod| image.is_some() && pod_image(pod) == image)
            .collect();
        if let Some(why) = pods.iter().find_map(cannot_start) {
            return Err(CliError::Failed(format!(
                "{what} cannot start: {why}. Make the image available to the cluster's nodes (kind: `kind load docker-image IMAGE`; minikube: `minikube image load IMAGE`) or install with --image pointing at one they can pull"
            )));
        }
        if started.elapsed() > timeout {
            let last = pods
                .iter()
                .find_map(waiting_reason)
                .map(|why| format!(" (its pod: {why})"))
                .unwrap_or_default();
            return Err(CliError::Failed(format!(
                "timed out after {}s waiting for deployment {SYSTEM_NAMESPACE}/{name} to be available{last}: see `kubectl -n {SYSTEM_NAMESPACE} get pods` and `kubectl -n {SYSTEM_NAMESPACE} describe deployment {name}`",
                timeout.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// As `kubectl rollout status` decides: the controller has seen the newest spec, every
/// replica runs it, no old one is left, and they are available. (Available replicas alone
/// would count the old pod of an upgrade whose new image cannot be pulled.)
fn rollout_complete(deployment: &Deployment) -> bool {
    let wanted = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let Some(status) = &deployment.status else {
        return false;
    };
    let seen =
        status.observed_generation.unwrap_or(0) >= deployment.metadata.generation.unwrap_or(0);
    let updated = status.updated_replicas.unwrap_or(0);
    seen && updated >= wanted
        && status.replicas.unwrap_or(0) <= updated
        && status.available_replicas.unwrap_or(0) >= updated
}

/// The image of the reconciler's pod template, and of a pod.
fn template_image(deployment: &Deployment) -> Option<String> {
    let template = deployment.spec.as_ref()?.template.spec.as_ref()?;
    template.containers.first()?.image.clone()
}

fn pod_image(pod: &Pod) -> Option<String> {
    pod.spec.as_ref()?.containers.first()?.image.clone()
}

/// Why a container of `pod` waits, with the image: `ErrImagePull (image X): message`.
fn waiting_reason(pod: &Pod) -> Option<String> {
    let spec_images = pod.spec.as_ref().map(|s| &s.containers);
    pod.status
        .as_ref()?
        .container_statuses
        .iter()
        .flatten()
        .find_map(|status| {
            let waiting = status.state.as_ref()?.waiting.as_ref()?;
            let reason = waiting.reason.as_deref().filter(|r| !r.is_empty())?;
            let image = spec_images
                .and_then(|c| c.iter().find(|c| c.name == status.name))
                .and_then(|c| c.image.clone())
                .unwrap_or_else(|| status.image.clone());
            let message = waiting.message.as_deref().unwrap_or_default();
            Some(if message.is_empty() {
                format!("{reason} (image {image})")
            } else {
                format!("{reason} (image {image}): {message}")
            })
        })
}

/// A waiting reason that will not go away by itself: the kubelet has already retried the
/// pull (ImagePullBackOff), or the image name or pull policy cannot work.
fn cannot_start(pod: &Pod) -> Option<String> {
    const HOPELESS: [&str; 3] = ["ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"];
    waiting_reason(pod).filter(|why| HOPELESS.iter().any(|reason| why.starts_with(reason)))
}

/// `uninstall`.
pub async fn uninstall(ctx: &Ctx, args: &UninstallArgs) -> Result<String, CliError> {
    let docs = documents(None, &BTreeMap::new())?;
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
            "Remove the reconciler (namespace {SYSTEM_NAMESPACE} with its settings and Deployment, its RBAC and admission policy)?\n  Apps stay but are no longer reconciled, backed up or restored until it is installed again.\n  Continue?"
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
    let Some(api) = api_for(client, doc).await? else {
        return Ok(format!("{} not found\n", display_name(doc)));
    };
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
    fn only_a_newer_installed_version_is_refused() {
        let refused = refuse_downgrade("0.3.0", "0.2.1").expect_err("0.3.0 is newer");
        assert!(
            refused.contains("version 0.3.0, newer than this plugin's 0.2.1")
                && refused.contains("--allow-downgrade"),
            "{refused}"
        );
        assert!(
            refuse_downgrade("0.2.1", "0.2.1").is_ok(),
            "the same version"
        );
        assert!(refuse_downgrade("0.2.0", "0.2.1").is_ok(), "an upgrade");
        assert!(
            refuse_downgrade("0.2.1", "0.2.1-rc.1").is_err(),
            "a pre-release comes before its release"
        );
        assert!(refuse_downgrade("custom", "0.2.1").is_ok(), "not semver");
    }

    #[test]
    fn only_an_unchanged_image_named_by_a_tag_needs_a_restart() {
        let tag = "hellostateful-reconciler:0.1.0";
        let digest = "ghcr.io/hellostateful/hellostateful-reconciler@sha256:0123";
        assert!(
            needs_restart(Some(tag), tag),
            "a rebuilt image under the same tag"
        );
        assert!(
            !needs_restart(Some("other:1"), tag),
            "a changed image rolls out by itself"
        );
        assert!(
            !needs_restart(None, tag),
            "a first install starts fresh pods"
        );
        assert!(
            !needs_restart(Some(digest), digest),
            "a digest names one image"
        );
    }
    use serde_json::json;

    fn deployment(generation: i64, status: Value) -> Deployment {
        serde_json::from_value(json!({"metadata": {"name": "r", "generation": generation},
            "spec": {"replicas": 1, "selector": {}, "template": {}}, "status": status}))
        .expect("a Deployment")
    }

    #[test]
    fn a_rollout_is_complete_only_when_the_new_pod_is_the_available_one() {
        let done = json!({"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1});
        assert!(rollout_complete(&deployment(2, done.clone())));
        // Not yet seen by the controller: the old pod is still the available one.
        assert!(!rollout_complete(&deployment(3, done)));
        // The new pod cannot start; the old one is gone (Recreate) or still there.
        let stuck = json!({"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1, "unavailableReplicas": 1});
        assert!(!rollout_complete(&deployment(2, stuck)));
        let old_left = json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 1, "availableReplicas": 1});
        assert!(!rollout_complete(&deployment(2, old_left)));
    }

    fn pod_waiting(reason: &str, message: &str) -> Pod {
        serde_json::from_value(json!({
            "spec": {"containers": [{"name": "reconciler", "image": "example.invalid/r:1"}]},
            "status": {"containerStatuses": [{"name": "reconciler", "image": "example.invalid/r:1",
                "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": message}}}]},
        }))
        .expect("a Pod")
    }

    #[test]
    fn a_pull_that_kubelet_gave_up_on_is_reported_with_the_image_and_the_message() {
        let backoff = pod_waiting(
            "ImagePullBackOff",
            "Back-off pulling image \"example.invalid/r:1\"",
        );
        assert_eq!(
            cannot_start(&backoff).as_deref(),
            Some(
                "ImagePullBackOff (image example.invalid/r:1): Back-off pulling image \"example.invalid/r:1\""
            )
        );
        // The first failed pull may be transient: waited on, but said on a timeout.
        let first = pod_waiting(
            "ErrImagePull",
            "dial tcp: lookup example.invalid: no such host",
        );
        assert_eq!(cannot_start(&first), None);
        assert!(waiting_reason(&first).is_some_and(|why| why.contains("no such host")));
        assert_eq!(waiting_reason(&pod_waiting("", "")), None);
    }

    #[test]
    fn clusters_older_than_the_minimum_are_refused_with_both_versions() {
        let refused = check_minimum_version("1", "29").expect_err("too old");
        assert!(
            refused.contains("Kubernetes 1.30 or later") && refused.contains("runs 1.29"),
            "{refused}"
        );
        assert!(check_minimum_version("1", "30").is_ok());
        assert!(check_minimum_version("1", "34+").is_ok());
        assert!(
            check_minimum_version("1", "29+").is_err(),
            "a distribution's suffix"
        );
        assert!(
            check_minimum_version("", "").is_ok(),
            "unknown: the kinds decide"
        );
    }

    #[test]
    fn splits_and_parses_documents() {
        let text = "# comment\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n  namespace: a\nspec:\n  template:\n    spec:\n      containers:\n      - name: r\n        image: old:1\n        env:\n        - name: HELLOSTATEFUL_IMAGE\n          valueFrom:\n            configMapKeyRef: {name: s, key: moverImage}\n";
        let mut docs = parse_documents(text).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(display_name(&docs[0]), "namespace/a");
        assert_eq!(display_name(&docs[1]), "deployment.apps/d");
        set_image(&mut docs[1], "new:2");
        let container = &docs[1]["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], "new:2");
        assert!(
            container["env"][0].get("value").is_none(),
            "an env from a ConfigMap gets no literal value beside it"
        );
    }

    #[test]
    fn the_embedded_manifests_come_in_kustomization_order() {
        let docs = documents(None, &BTreeMap::new()).unwrap();
        let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        let position = |kind: &str| {
            kinds
                .iter()
                .position(|k| *k == kind)
                .unwrap_or_else(|| panic!("{kind} missing from {kinds:?}"))
        };
        let order = [
            "Namespace",
            "CustomResourceDefinition",
            "ServiceAccount",
            "ConfigMap",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "Deployment",
            "ValidatingWebhookConfiguration",
        ];
        for pair in order.windows(2) {
            assert!(
                position(pair[0]) < position(pair[1]),
                "{pair:?} in {kinds:?}"
            );
        }
        let kustomization = include_str!("../../manifests/kustomization.yaml");
        let listed: Vec<&str> = kustomization
            .lines()
            .filter_map(|l| l.trim().strip_prefix("- "))
            .collect();
        let embedded: Vec<&str> = MANIFESTS.iter().map(|(file, _)| *file).collect();
        assert_eq!(embedded, listed);
        for doc in docs
            .iter()
            .filter(|d| d["apiVersion"] == "admissionregistration.k8s.io/v1")
        {
            assert!(doc["metadata"].get("namespace").is_none(), "cluster-scoped");
        }
    }

    #[test]
    fn image_and_backup_roots_go_into_the_deployment_and_the_settings() {
        let settings = BTreeMap::from([("backupRoots".into(), "/tmp/backup,/srv/b".into())]);
        let docs = documents(Some("img:9"), &settings).unwrap();
        let crd = docs
            .iter()
            .find(|d| d["kind"] == "CustomResourceDefinition")
            .unwrap();
        assert_eq!(crd["metadata"]["name"], CRD_NAME);
        let deployment = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
        assert_eq!(deployment["metadata"]["name"], RECONCILER);
        assert_eq!(deployment["metadata"]["namespace"], SYSTEM_NAMESPACE);
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], "img:9");
        for var in container["env"].as_array().unwrap() {
            if var["name"] == "HELLOSTATEFUL_IMAGE" || var["name"] == "HELLOSTATEFUL_BACKUP_ROOTS" {
                assert_eq!(var["valueFrom"]["configMapKeyRef"]["name"], SETTINGS);
                assert!(var.get("value").is_none(), "{var}");
            }
        }
        assert_eq!(setting(&docs, "moverImage"), Some("img:9"));
        assert_eq!(setting(&docs, "backupRoots"), Some("/tmp/backup,/srv/b"));
        let settings = docs.iter().find(|d| is_settings(d)).unwrap();
        assert_eq!(settings["metadata"]["namespace"], SYSTEM_NAMESPACE);
    }

    #[test]
    fn a_change_of_settings_rolls_the_reconciler() {
        let hash = |docs: &[Value]| {
            docs.iter().find(|d| d["kind"] == "Deployment").unwrap()["spec"]["template"]["metadata"]
                ["annotations"][SETTINGS_HASH]
                .clone()
        };
        let default = hash(&documents(None, &BTreeMap::new()).unwrap());
        assert!(default.is_string());
        assert_eq!(default, hash(&documents(None, &BTreeMap::new()).unwrap()));
        for key in KEPT_SETTINGS {
            let changed = BTreeMap::from([(key.to_string(), "300".to_string())]);
            assert_ne!(default, hash(&documents(None, &changed).unwrap()), "{key}");
        }
        assert_ne!(
            default,
            hash(&documents(Some("img:9"), &BTreeMap::new()).unwrap())
        );
    }

    #[test]
    fn by_default_the_jobs_run_the_reconciler_image_and_backups_go_to_tmp_backup() {
        let docs = documents(None, &BTreeMap::new()).unwrap();
        let deployment = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
        assert_eq!(
            setting(&docs, "moverImage"),
            deployment["spec"]["template"]["spec"]["containers"][0]["image"].as_str()
        );
        assert_eq!(setting(&docs, "backupRoots"), Some("/tmp/backup"));
        assert_eq!(Some(default_image().as_str()), setting(&docs, "moverImage"));
    }

    #[test]
    fn an_install_keeps_what_the_admin_changed_unless_a_flag_sets_it() {
        let cluster = BTreeMap::from([
            ("backupRoots".to_string(), "/srv/b".to_string()),
            (
                OBJECT_STORE_ENDPOINTS.to_string(),
                "https://s3.example.com".to_string(),
            ),
            ("moverStartSeconds".to_string(), " ".to_string()),
            ("moverImage".to_string(), "old:1".to_string()),
        ]);
        let (settings, kept) = settings_to_apply(cluster.clone(), BTreeMap::new());
        assert_eq!(
            settings,
            BTreeMap::from([
                ("backupRoots".to_string(), "/srv/b".to_string()),
                (
                    OBJECT_STORE_ENDPOINTS.to_string(),
                    "https://s3.example.com".to_string()
                ),
            ]),
            "an empty value is not kept, and the image is the install's"
        );
        assert_eq!(kept, ["backupRoots", OBJECT_STORE_ENDPOINTS]);

        // No taint tolerable is kept, although empty: it is not the default (any).
        let mut refusing = cluster.clone();
        refusing.insert(TOLERABLE_TAINTS.to_string(), String::new());
        refusing.insert(STATIC_DATA_VOLUMES.to_string(), "refuse".to_string());
        let (settings, _) = settings_to_apply(refusing, BTreeMap::new());
        assert_eq!(settings[TOLERABLE_TAINTS], "");
        assert_eq!(settings[STATIC_DATA_VOLUMES], "refuse");
        let docs = documents(None, &settings).unwrap();
        assert_eq!(setting(&docs, TOLERABLE_TAINTS), Some(""));
        let docs = documents(None, &settings).unwrap();
        assert_eq!(
            setting(&docs, OBJECT_STORE_ENDPOINTS),
            Some("https://s3.example.com")
        );

        // An empty flag is a choice too: any endpoint again.
        let flags = BTreeMap::from([(OBJECT_STORE_ENDPOINTS.to_string(), String::new())]);
        let (settings, kept) = settings_to_apply(cluster, flags);
        assert_eq!(settings[OBJECT_STORE_ENDPOINTS], "");
        assert_eq!(kept, ["backupRoots"]);
        let docs = documents(None, &settings).unwrap();
        assert_eq!(setting(&docs, OBJECT_STORE_ENDPOINTS), Some(""));
    }

    #[test]
    fn the_reconciler_reads_the_endpoints_from_the_settings_which_by_default_allow_any() {
        let docs = documents(None, &BTreeMap::new()).unwrap();
        assert_eq!(setting(&docs, OBJECT_STORE_ENDPOINTS), Some(""));
        let deployment = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
        let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap();
        let var = env
            .iter()
            .find(|v| v["name"] == "HELLOSTATEFUL_OBJECT_STORE_ENDPOINTS")
            .expect("the reconciler's endpoints come from the settings");
        assert_eq!(
            var["valueFrom"]["configMapKeyRef"],
            json!({"name": SETTINGS, "key": OBJECT_STORE_ENDPOINTS, "optional": true})
        );
    }

    #[test]
    fn the_summary_says_which_endpoints_are_allowed_and_what_was_kept() {
        let default = summary(&documents(None, &BTreeMap::new()).unwrap(), &[]);
        assert!(
            default.contains(
                "object store endpoints allowed: any (restrict them with --object-store-endpoints"
            ),
            "{default}"
        );
        let listed = BTreeMap::from([(
            OBJECT_STORE_ENDPOINTS.to_string(),
            "https://s3.example.com".to_string(),
        )]);
        let docs = documents(None, &listed).unwrap();
        let kept = summary(&docs, &[OBJECT_STORE_ENDPOINTS.to_string()]);
        assert!(
            kept.contains(
                "object store endpoints allowed: https://s3.example.com (kept from the cluster; change with --object-store-endpoints)"
            ) && kept.starts_with("backup roots allowed on nodes: /tmp/backup\n"),
            "{kept}"
        );
    }

    #[test]
    fn object_store_endpoints_are_http_or_https_hosts_and_empty_allows_any() {
        assert_eq!(
            parse_object_store_endpoints(" https://s3.example.com/ , http://minio:9000")
                .map(|e| e.to_string()),
            Ok("https://s3.example.com,http://minio:9000".to_string())
        );
        assert_eq!(
            parse_object_store_endpoints(" ").map(|e| e.to_string()),
            Ok(String::new())
        );
        for bad in [
            "s3.example.com",
            "https://s3.example.com,",
            "https://s3.example.com/bucket",
            "ftp://s3.example.com",
            ",",
        ] {
            match parse_object_store_endpoints(bad) {
                Ok(endpoints) => panic!("{bad:?} accepted as {endpoints}"),
                Err(message) => assert!(
                    message.contains("is not an object store endpoint like https://"),
                    "{bad:?}: {message}"
                ),
            }
        }
    }

    #[test]
    fn backup_roots_are_clean_separate_directories() {
        assert_eq!(
            parse_backup_roots("/tmp/backup, /srv/backups").map(|r| r.to_string()),
            Ok("/tmp/backup,/srv/backups".to_string())
        );
        assert!(parse_backup_roots("/srv/backup,/srv/backups").is_ok());
        for (bad, why) in [
            ("/", "whole node"),
            ("", "not a clean absolute path"),
            ("/tmp/backup,", "not a clean absolute path"),
            ("tmp/backup", "not a clean absolute path"),
            ("/tmp/backup/", "not a clean absolute path"),
            ("/tmp/../etc", "not a clean absolute path"),
            ("/tmp", "overlaps /tmp/hostpath-provisioner"),
            ("/tmp/hostpath-provisioner", "overlaps"),
            ("/tmp/hostpath-provisioner/x", "overlaps"),
            ("/srv/b,/srv/b/team", "overlap"),
            ("/srv/b,/srv/b", "overlap"),
        ] {
            match parse_backup_roots(bad) {
                Ok(roots) => panic!("{bad:?} accepted as {roots}"),
                Err(message) => assert!(message.contains(why), "{bad:?}: {message}"),
            }
        }
    }
}
