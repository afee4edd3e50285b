//! `report NAME`: one archive with everything a bug report about an app needs (as
//! `kubectl cnpg report` and `velero debug` make): the app with its status and conditions,
//! its children, its events, the logs of its pods and mover Jobs, and the reconciler's log.
//! No Secret is read. What the user may not read is listed in the archive's README, not
//! fatal: a tenant gets the report of their namespace without the reconciler's log.

use std::fs::File;
use std::path::{Path, PathBuf};

use chrono::Utc;
use flate2::Compression;
use flate2::write::GzEncoder;
use hellostateful_api::{HelloStateful, names};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod, Service};
use kube::api::{ListParams, LogParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::cli::{OutputFormat, ReportArgs};
use crate::context::{Ctx, Kube, SYSTEM_NAMESPACE};
use crate::error::CliError;
use crate::output::{printable, to_json, to_yaml};

/// Lines of each log kept (the newest).
const LOG_LINES: i64 = 2000;

/// The reconciler's pods, as manifests/deployment.yaml labels them.
const RECONCILER_PODS: &str =
    "app.kubernetes.io/name=hellostateful,app.kubernetes.io/component=reconciler";

/// What the archive holds and what could not be read.
#[derive(Debug, Default, Serialize)]
pub struct Contents {
    /// The archive written.
    pub file: String,
    /// Paths inside it.
    pub entries: Vec<String>,
    /// What could not be read, and why.
    pub missing: Vec<String>,
}

/// The files of the archive, gathered before anything is written.
#[derive(Default)]
struct Gathered {
    files: Vec<(String, Vec<u8>)>,
    missing: Vec<String>,
}

impl Gathered {
    fn add(&mut self, path: String, content: impl Into<Vec<u8>>) {
        self.files.push((path, content.into()));
    }

    /// Adds each object of a list as `dir/<kind>-<name>.yaml`, or notes why it failed.
    fn objects<K>(&mut self, what: &str, result: Result<Vec<K>, kube::Error>)
    where
        K: Resource<DynamicType = ()> + Serialize,
    {
        match result {
            Ok(items) => {
                for item in items {
                    let kind = K::kind(&()).to_lowercase();
                    let name = item.meta().name.clone().unwrap_or_default();
                    match serde_saphyr::to_string(&item) {
                        Ok(yaml) => self.add(format!("children/{kind}-{name}.yaml"), yaml),
                        Err(e) => self.missing.push(format!("{kind} {name}: {e}")),
                    }
                }
            }
            Err(e) => self
                .missing
                .push(format!("{what}: {}", crate::error::explain_briefly(&e))),
        }
    }
}

async fn list<K>(api: Api<K>, labels: &str) -> Result<Vec<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    Ok(api.list(&ListParams::default().labels(labels)).await?.items)
}

/// `report NAME`.
pub async fn report(ctx: &Ctx, args: &ReportArgs) -> Result<String, CliError> {
    let kube = ctx.connect().await?;
    let app = kube.apps().get_opt(&args.name).await.map_err(|e| {
        crate::error::explain(
            e,
            &crate::error::Action::app("get", &kube.namespace, &args.name),
        )
    })?;
    let mut gathered = gather(&kube, &args.name, app.as_ref()).await;
    // A deleted app may have left Jobs, claims or volumes worth reporting; nothing at all
    // means a wrong name.
    let found = gathered
        .files
        .iter()
        .any(|(path, _)| path == "app.yaml" || path.starts_with("children/"));
    if !found {
        return Err(CliError::NotFound {
            namespace: kube.namespace.clone(),
            name: args.name.clone(),
            existing: Vec::new(),
        });
    }
    let now = Utc::now();
    let file = args.file.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "hellostateful-report-{}-{}-{}.tar.gz",
            kube.namespace,
            args.name,
            now.format("%Y%m%dT%H%M%SZ")
        ))
    });
    gathered.add(
        "README.txt".into(),
        readme(&kube.namespace, &args.name, &now.to_rfc3339(), &gathered),
    );
    write_archive(&file, &gathered.files, now.timestamp()).map_err(|e| {
        CliError::Failed(format!("cannot write the report {}: {e}", file.display()))
    })?;
    let contents = Contents {
        file: file.display().to_string(),
        entries: gathered
            .files
            .iter()
            .map(|(path, _)| path.clone())
            .collect(),
        missing: gathered.missing,
    };
    match ctx.output() {
        OutputFormat::Json => to_json(&contents),
        OutputFormat::Yaml => to_yaml(&contents),
        _ => Ok(summary(&contents)),
    }
}

/// Everything about app `name` the user can read.
async fn gather(kube: &Kube, name: &str, app: Option<&HelloStateful>) -> Gathered {
    let mut out = Gathered::default();
    let client = &kube.client;
    let ns = &kube.namespace;
    if let Some(app) = app {
        match serde_saphyr::to_string(app) {
            Ok(yaml) => out.add("app.yaml".into(), yaml),
            Err(e) => out.missing.push(format!("the app: {e}")),
        }
    }
    let instance = format!("app.kubernetes.io/instance={name}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let (statefulsets, services, cronjobs, jobs, claims, pod_list) = futures::join!(
        list(
            Api::<StatefulSet>::namespaced(client.clone(), ns),
            &instance
        ),
        list(Api::<Service>::namespaced(client.clone(), ns), &instance),
        list(Api::<CronJob>::namespaced(client.clone(), ns), &instance),
        list(Api::<Job>::namespaced(client.clone(), ns), &instance),
        list(
            Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns),
            &instance
        ),
        list(pods.clone(), &instance),
    );
    let volumes = list(
        Api::<PersistentVolume>::all(client.clone()),
        &format!("{instance},{}={ns}", names::NAMESPACE_LABEL),
    )
    .await;
    let job_names: Vec<String> = jobs
        .as_ref()
        .map(|jobs| jobs.iter().map(ResourceExt::name_any).collect())
        .unwrap_or_default();
    let pod_list = pod_list.map(|mut pods| {
        pods.sort_by_key(ResourceExt::name_any);
        pods
    });
    let pod_names: Vec<String> = pod_list
        .as_ref()
        .map(|pods| pods.iter().map(ResourceExt::name_any).collect())
        .unwrap_or_default();
    out.objects("the StatefulSet", statefulsets);
    out.objects("the Service", services);
    out.objects("the CronJob", cronjobs);
    out.objects("the Jobs", jobs);
    out.objects("the claims", claims);
    out.objects("the pods", pod_list);
    out.objects("the PersistentVolumes (cluster-scoped)", volumes);

    // The events of the app and of every child, by the names they carry.
    let mut objects: Vec<String> = vec![name.to_string(), names::statefulset(name)];
    objects.extend(job_names);
    objects.extend(pod_names.iter().cloned());
    match Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => {
            let mut events: Vec<Event> =
                list.items
                    .into_iter()
                    .filter(|e| {
                        e.involved_object.name.as_ref().is_some_and(|n| {
                            objects.contains(n) || n.starts_with(&format!("{name}-"))
                        })
                    })
                    .collect();
            events.sort_by_key(crate::status::event_time);
            out.add("events.txt".into(), events_text(&events));
        }
        Err(e) => out
            .missing
            .push(format!("the events: {}", crate::error::explain_briefly(&e))),
    }

    for pod in &pod_names {
        let params = LogParams {
            tail_lines: Some(LOG_LINES),
            ..LogParams::default()
        };
        match pods.logs(pod, &params).await {
            Ok(log) => out.add(format!("logs/{pod}.log"), log),
            Err(e) => out.missing.push(format!(
                "the log of pod {pod}: {}",
                crate::error::explain_briefly(&e)
            )),
        }
    }
    let system: Api<Pod> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    match list(system.clone(), RECONCILER_PODS).await {
        Ok(reconcilers) => {
            for pod in reconcilers {
                let pod = pod.name_any();
                let params = LogParams {
                    tail_lines: Some(LOG_LINES),
                    ..LogParams::default()
                };
                match system.logs(&pod, &params).await {
                    Ok(log) => out.add(format!("logs/reconciler/{pod}.log"), log),
                    Err(e) => out.missing.push(format!(
                        "the log of reconciler pod {pod}: {}",
                        crate::error::explain_briefly(&e)
                    )),
                }
            }
        }
        Err(e) => out.missing.push(format!(
            "the reconciler's pods in {SYSTEM_NAMESPACE}: {}",
            crate::error::explain_briefly(&e)
        )),
    }
    let version = match client.apiserver_version().await {
        Ok(info) => format!("API server: {}\n", info.git_version),
        Err(e) => format!(
            "API server: unknown ({})\n",
            crate::error::explain_briefly(&e)
        ),
    };
    out.add(
        "version.txt".into(),
        format!("plugin: {}\n{version}", env!("CARGO_PKG_VERSION")),
    );
    out
}

/// One line per event, oldest first: TIME TYPE REASON KIND/NAME MESSAGE.
fn events_text(events: &[Event]) -> String {
    events
        .iter()
        .map(|e| {
            let time = crate::status::event_time(e)
                .map(|t| t.to_string())
                .unwrap_or_else(|| "-".into());
            format!(
                "{time} {} {} {}/{} {}\n",
                e.type_.as_deref().unwrap_or("-"),
                e.reason.as_deref().unwrap_or("-"),
                e.involved_object.kind.as_deref().unwrap_or("-"),
                e.involved_object.name.as_deref().unwrap_or("-"),
                e.message.as_deref().unwrap_or("").replace('\n', " ")
            )
        })
        .collect()
}

fn readme(namespace: &str, name: &str, time: &str, gathered: &Gathered) -> String {
    let mut text = format!(
        "hellostateful report of app {namespace}/{name}, made {time} by kubectl-hellostateful {}.\n\
         It holds the app (app.yaml: spec, status, conditions), its children (children/), the\n\
         events of the app and its children (events.txt), the logs of its pods and mover Jobs\n\
         and of the reconciler (logs/, the last {LOG_LINES} lines each), and versions. No\n\
         Secret is read. The reconciler's log covers every app it manages: read it before\n\
         sharing.\n",
        env!("CARGO_PKG_VERSION")
    );
    if gathered.missing.is_empty() {
        text.push_str("\nEverything could be read.\n");
    } else {
        text.push_str("\nNot included (could not be read):\n");
        for missing in &gathered.missing {
            text.push_str(&format!("- {missing}\n"));
        }
    }
    text
}

/// Writes `files` as a gzip-compressed tar, each file 0644 with the report's time.
fn write_archive(path: &Path, files: &[(String, Vec<u8>)], mtime: i64) -> std::io::Result<()> {
    let encoder = GzEncoder::new(File::create(path)?, Compression::default());
    let mut archive = tar::Builder::new(encoder);
    for (name, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(u64::try_from(mtime).unwrap_or_default());
        header.set_cksum();
        archive.append_data(&mut header, name, content.as_slice())?;
    }
    archive.into_inner()?.finish()?;
    Ok(())
}

/// What a person reads after the archive is written.
fn summary(contents: &Contents) -> String {
    let mut text = format!(
        "Wrote {} ({} files). Read it before sharing: it holds the reconciler's log, which covers every app it manages.\n",
        contents.file,
        contents.entries.len()
    );
    for missing in &contents.missing {
        text.push_str(&format!("  not included: {}\n", printable(missing)));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_archive_holds_every_file_with_its_content() {
        let dir = tempfile_dir();
        let path = dir.join("r.tar.gz");
        let files = vec![
            ("app.yaml".to_string(), b"kind: HelloStateful\n".to_vec()),
            ("logs/hello-0.log".to_string(), b"line\n".to_vec()),
        ];
        write_archive(&path, &files, 1_764_000_000).unwrap();
        let mut archive =
            tar::Archive::new(flate2::read::GzDecoder::new(File::open(&path).unwrap()));
        let mut seen = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let mut content = String::new();
            std::io::Read::read_to_string(&mut entry, &mut content).unwrap();
            seen.push((
                entry.path().unwrap().display().to_string(),
                content,
                entry.header().mode().unwrap(),
            ));
        }
        assert_eq!(
            seen,
            vec![
                (
                    "app.yaml".to_string(),
                    "kind: HelloStateful\n".to_string(),
                    0o644
                ),
                ("logs/hello-0.log".to_string(), "line\n".to_string(), 0o644),
            ]
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_readme_lists_what_could_not_be_read() {
        let gathered = Gathered {
            files: Vec::new(),
            missing: vec!["the reconciler's pods in hellostateful-system: forbidden".into()],
        };
        let text = readme("ns", "hello", "2026-11-30T12:00:00Z", &gathered);
        assert!(
            text.contains("app hello") || text.contains("ns/hello"),
            "{text}"
        );
        assert!(
            text.contains("- the reconciler's pods in hellostateful-system: forbidden"),
            "{text}"
        );
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("hs-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
