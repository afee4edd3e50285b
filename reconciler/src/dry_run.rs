//! `check-children FILE`: whatever the CRD accepts, the API server must accept for the
//! children the reconciler makes of it. Each HelloStateful in FILE is created with a
//! server-side dry run (the CRD's schema and rules judge it); for one the CRD accepts,
//! every child (Service, StatefulSet, claims, volumes, the backup volume and claim, the
//! CronJob and each kind of mover Job) is dry-run created too, so that the API server's
//! validation of Pods, Jobs and volumes judges exactly what the reconciler would send.
//! Nothing is stored. A spec the reconciler reports in status instead (a cron expression
//! croner refuses, a backup root the admin does not allow) is not an app to make children
//! of, and is listed as such.

use hellostateful_api::{HelloStateful, names, validate};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Service};
use kube::api::PostParams;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::children::{self, AppRef, MoverTask, RestoreStep, Settings};
use crate::error::Error;
use crate::location::{self, BackupLocation};

/// The node the static volumes are pinned to in the dry run.
const NODE: &str = "dry-run-node";

/// What became of one HelloStateful.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The CRD refused it, with the API server's message.
    RefusedByCrd(String),
    /// The CRD accepted it; the reconciler reports it in status instead of making children.
    ReportedInStatus(String),
    /// The CRD and the API server accepted it and all of its children.
    Accepted { children: usize },
    /// The CRD accepted it, but the API server refuses a child: the rules disagree.
    ChildRefused { child: String, message: String },
}

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        field_manager: Some(names::FIELD_MANAGER.to_string()),
    }
}

/// Dry-runs one app and its children in `namespace`.
pub async fn check(
    client: &Client,
    namespace: &str,
    mut app: HelloStateful,
    settings: &Settings,
) -> Result<Verdict, Error> {
    app.metadata.namespace = Some(namespace.to_string());
    let apps: Api<HelloStateful> = Api::namespaced(client.clone(), namespace);
    let app = match apps.create(&dry_run(), &app).await {
        Ok(created) => created,
        Err(kube::Error::Api(status)) if matches!(status.code, 400 | 422) => {
            return Ok(Verdict::RefusedByCrd(status.message));
        }
        Err(other) => return Err(other.into()),
    };
    if let Err(invalid) = validate::spec(&app.spec) {
        return Ok(Verdict::ReportedInStatus(invalid.to_string()));
    }
    let location = match location::resolve(
        &app.spec,
        &settings.backup_roots,
        &settings.object_store_endpoints,
    ) {
        Ok(location) => location,
        Err(refused) => return Ok(Verdict::ReportedInStatus(refused.to_string())),
    };
    let app_ref = AppRef::new(&app)?;
    let mut sent = Children {
        client,
        namespace,
        count: 0,
    };
    let verdict = sent.all(&app_ref, &location, settings).await?;
    Ok(verdict.unwrap_or(Verdict::Accepted {
        children: sent.count,
    }))
}

/// Sends children with a dry run, counting them, until one is refused.
struct Children<'a> {
    client: &'a Client,
    namespace: &'a str,
    count: usize,
}

impl Children<'_> {
    async fn all(
        &mut self,
        app: &AppRef<'_>,
        location: &BackupLocation,
        settings: &Settings,
    ) -> Result<Option<Verdict>, Error> {
        let spec = &app.app.spec;
        let (client, ns) = (self.client.clone(), self.namespace.to_string());
        macro_rules! send {
            ($api:expr, $object:expr) => {
                if let Some(refused) = self.send(&$api, &$object?).await? {
                    return Ok(Some(refused));
                }
            };
        }
        send!(
            Api::<Service>::namespaced(client.clone(), &ns),
            children::service(app)
        );
        send!(
            Api::<StatefulSet>::namespaced(client.clone(), &ns),
            children::statefulset(app, spec.replicas, None, None, None)
        );
        for ordinal in app.ordinals() {
            send!(
                Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns),
                children::claim(app, ordinal)
            );
            if spec.storage_class().is_none() {
                send!(
                    Api::<PersistentVolume>::all(client.clone()),
                    children::volume(app, ordinal, NODE)
                );
            }
        }
        if let BackupLocation::NodeRoot(root) = location {
            send!(
                Api::<PersistentVolume>::all(client.clone()),
                children::backup_volume(app, root, NODE, "dry-run-namespace-uid")
            );
            send!(
                Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns),
                children::backup_claim(
                    app,
                    &names::backup_volume(root, &ns, &app.name),
                    &settings.mover_image
                )
            );
        }
        if let Some(schedule) = &spec.backup_schedule {
            send!(
                Api::<CronJob>::namespaced(client.clone(), &ns),
                // Its longest arguments: a full read's.
                children::cronjob(app, schedule, location, settings, true)
            );
        }
        let restore = MoverTask::initial_restore(app, location);
        let source = spec.restore_from.as_ref().map(|from| from.name.clone());
        let tasks = [
            // Reading everything again: the longest arguments and annotations.
            ("backup", MoverTask::Backup { reread: true }),
            ("restore", restore),
            ("wipe", MoverTask::Wipe { replicas: 1 }),
            (
                "prepare",
                MoverTask::Prepare {
                    replicas: 1,
                    owner: crate::prepare::Owner {
                        uid: 2147483647,
                        gid: 2147483647,
                        mode: 0o2770,
                    },
                },
            ),
            ("purge", MoverTask::Purge),
            (
                "seal",
                MoverTask::Seal {
                    replicas: spec.replicas.max(1),
                    reread: true,
                },
            ),
            (
                "part",
                MoverTask::BackupPart {
                    set: format!("seal-{}", app.name),
                    ordinal: 0,
                    reread: true,
                },
            ),
            (
                "commit",
                MoverTask::RestoreCommit {
                    replicas: spec.replicas.max(1),
                    from: "latest".into(),
                    if_exists: true,
                    source: source.clone(),
                },
            ),
            (
                "stage",
                MoverTask::RestorePart {
                    set: format!("commit-{}", app.name),
                    ordinal: 0,
                    step: RestoreStep::Stage {
                        from: "latest".into(),
                        if_exists: true,
                        source,
                    },
                },
            ),
            (
                "swap",
                MoverTask::RestorePart {
                    set: format!("commit-{}", app.name),
                    ordinal: 0,
                    step: RestoreStep::Swap,
                },
            ),
            (
                "undo",
                MoverTask::RestorePart {
                    set: format!("commit-{}", app.name),
                    ordinal: 0,
                    step: RestoreStep::Undo,
                },
            ),
        ];
        for (kind, task) in tasks {
            let name = format!("{kind}-{}", app.name);
            send!(
                Api::<Job>::namespaced(client.clone(), &ns),
                children::mover_job(app, &name, &task, "dry-run", location, settings)
            );
        }
        Ok(None)
    }

    /// Dry-run creates `object`; a refusal is the verdict.
    async fn send<K>(&mut self, api: &Api<K>, object: &K) -> Result<Option<Verdict>, Error>
    where
        K: Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
    {
        match api.create(&dry_run(), object).await {
            Ok(_) => {
                self.count += 1;
                Ok(None)
            }
            Err(kube::Error::Api(status)) if matches!(status.code, 400 | 422 | 403) => {
                Ok(Some(Verdict::ChildRefused {
                    child: format!("{} {}", K::kind(&()), object.name_any()),
                    message: status.message,
                }))
            }
            Err(other) => Err(Error::Kube(other)),
        }
    }
}

/// Parses the HelloStatefuls of a multi-document YAML file.
pub fn parse(text: &str) -> Result<Vec<HelloStateful>, String> {
    serde_saphyr::from_multiple::<HelloStateful>(text).map_err(|e| e.to_string())
}

/// One line of output for a verdict.
pub fn line(name: &str, verdict: &Verdict) -> String {
    match verdict {
        Verdict::RefusedByCrd(message) => format!("{name}: refused by the CRD: {message}"),
        Verdict::ReportedInStatus(message) => format!("{name}: reported in status: {message}"),
        Verdict::Accepted { children } => {
            format!("{name}: accepted with its {children} children")
        }
        Verdict::ChildRefused { child, message } => {
            format!("{name}: the CRD accepts it, but the API server refuses {child}: {message}")
        }
    }
}
