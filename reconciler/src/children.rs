//! The desired children of an app: pure functions from the HelloStateful to the objects the
//! reconciler applies. Nothing here talks to the API server, so every decision is unit-tested.

use hellostateful_api::names::{self, Component};
use hellostateful_api::{HelloStateful, ResolvedTarget};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job, JobSpec};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::Error;

/// Where the mover finds the app's volumes (one subdirectory per ordinal) in its Jobs.
pub const MOVER_DATA_DIR: &str = "/data";
/// Where the mover finds the backup target in its Jobs.
pub const MOVER_TARGET_DIR: &str = "/backup";
/// Finished Jobs are removed after a day; their result is in status by then.
const JOB_TTL_SECONDS: i32 = 86_400;

/// What the builders need besides the app itself.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Image of the data mover (the reconciler's own image).
    pub mover_image: String,
}

/// The app's identity, checked once: namespace, name, uid and owner reference.
pub struct AppRef<'a> {
    pub app: &'a HelloStateful,
    pub namespace: String,
    pub name: String,
    owner: OwnerReference,
}

impl<'a> AppRef<'a> {
    /// Fails for an object the API server would never send (no namespace or uid).
    pub fn new(app: &'a HelloStateful) -> Result<Self, Error> {
        let namespace = app
            .namespace()
            .ok_or_else(|| Error::MissingField("metadata.namespace"))?;
        let owner = app
            .controller_owner_ref(&())
            .ok_or_else(|| Error::MissingField("metadata.uid"))?;
        Ok(Self {
            app,
            namespace,
            name: app.name_any(),
            owner,
        })
    }

    fn metadata(&self, name: &str, component: Component) -> Value {
        json!({
            "name": name,
            "namespace": self.namespace,
            "labels": names::labels(&self.name, component),
            "ownerReferences": [self.owner],
        })
    }

    /// Ordinals of the replicas the spec asks for.
    pub fn ordinals(&self) -> std::ops::Range<i32> {
        0..self.app.spec.replicas.max(0)
    }

    /// Claims of every replica, in ordinal order.
    pub fn claims(&self) -> Vec<String> {
        self.ordinals()
            .map(|ordinal| names::claim(&self.name, ordinal))
            .collect()
    }
}

fn build<K: DeserializeOwned>(value: Value) -> Result<K, Error> {
    serde_json::from_value(value).map_err(Error::Build)
}

/// The headless Service that gives the StatefulSet's pods stable names.
pub fn service(app: &AppRef) -> Result<Service, Error> {
    build(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": app.metadata(&names::statefulset(&app.name), Component::App),
        "spec": {
            "clusterIP": "None",
            "selector": names::selector(&app.name),
            "ports": [{"name": "placeholder", "port": 80, "protocol": "TCP"}],
        },
    }))
}

/// The static hostPath volume of replica `ordinal`, pinned to `node` and pre-bound to its
/// claim. Cluster-scoped, so no owner reference: the finalizer deletes it.
pub fn volume(app: &AppRef, ordinal: i32, node: &str) -> Result<PersistentVolume, Error> {
    let mut labels = names::labels(&app.name, Component::Storage);
    labels.insert(names::NAMESPACE_LABEL.to_string(), app.namespace.clone());
    build(json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": names::volume(&app.namespace, &app.name, ordinal),
            "labels": labels,
        },
        "spec": {
            "capacity": {"storage": app.app.spec.storage_size()},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {
                "path": names::volume_host_path(&app.namespace, &app.name, ordinal),
                "type": "DirectoryOrCreate",
            },
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": app.namespace,
                "name": names::claim(&app.name, ordinal),
            },
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]},
            ]}]}},
        },
    }))
}

/// The claim of replica `ordinal`, named as the StatefulSet controller would name it, made
/// before the StatefulSet so that a restore can fill it before the app starts.
pub fn claim(app: &AppRef, ordinal: i32) -> Result<PersistentVolumeClaim, Error> {
    let mut spec = json!({
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": app.app.spec.storage_size()}},
    });
    match app.app.spec.storage_class() {
        Some(class) => spec["storageClassName"] = json!(class),
        None => {
            spec["storageClassName"] = json!("");
            spec["volumeName"] = json!(names::volume(&app.namespace, &app.name, ordinal));
        }
    }
    build(json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": app.metadata(&names::claim(&app.name, ordinal), Component::Storage),
        "spec": spec,
    }))
}

/// The app's StatefulSet with `replicas` pods (0 while a restore runs).
///
/// `existing` is the StatefulSet in the cluster: its volume claim templates are immutable,
/// so they are kept as they are rather than re-derived from a changed spec.
pub fn statefulset(
    app: &AppRef,
    replicas: i32,
    existing: Option<&StatefulSet>,
) -> Result<StatefulSet, Error> {
    let spec = &app.app.spec;
    let templates = match existing
        .and_then(|sts| sts.spec.as_ref())
        .and_then(|s| s.volume_claim_templates.as_ref())
    {
        Some(templates) => serde_json::to_value(templates).map_err(Error::Build)?,
        None => json!([{
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": names::DATA_VOLUME},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": spec.storage_class().unwrap_or(""),
                "resources": {"requests": {"storage": spec.storage_size()}},
            },
        }]),
    };
    build(json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": app.metadata(&names::statefulset(&app.name), Component::App),
        "spec": {
            "replicas": replicas,
            "serviceName": names::statefulset(&app.name),
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": names::selector(&app.name)},
            "template": {
                "metadata": {"labels": names::labels(&app.name, Component::App)},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "automountServiceAccountToken": false,
                    "containers": [{
                        "name": "app",
                        "image": spec.image(),
                        "imagePullPolicy": "IfNotPresent",
                        "command": spec.command(),
                        "volumeMounts": [{"name": names::DATA_VOLUME, "mountPath": spec.mount_path()}],
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }],
                },
            },
            "volumeClaimTemplates": templates,
        },
    }))
}

/// What a mover Job does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MoverTask {
    /// Snapshot every replica's volume, then apply retention.
    Backup,
    /// Restore the snapshot `from` (`latest` or an id). With `if_exists`, a missing backup
    /// is not an error (a newly created app starts fresh).
    Restore { from: String, if_exists: bool },
}

impl MoverTask {
    fn component(&self) -> Component {
        match self {
            MoverTask::Backup => Component::Backup,
            MoverTask::Restore { .. } => Component::Restore,
        }
    }

    fn args(&self, app: &AppRef) -> Vec<String> {
        let mut args: Vec<String> = match self {
            MoverTask::Backup => vec![
                "backup".into(),
                "--source".into(),
                MOVER_DATA_DIR.into(),
                "--keep-last".into(),
                app.app.spec.keep_last().to_string(),
            ],
            MoverTask::Restore { from, if_exists } => {
                let mut args = vec![
                    "restore".into(),
                    "--dest".into(),
                    MOVER_DATA_DIR.into(),
                    "--from".into(),
                    from.clone(),
                ];
                if *if_exists {
                    args.push("--if-exists".into());
                }
                args
            }
        };
        args.extend([
            "--target".into(),
            MOVER_TARGET_DIR.into(),
            "--namespace".into(),
            app.namespace.clone(),
            "--name".into(),
            app.name.clone(),
            "--termination-log".into(),
            "/dev/termination-log".into(),
        ]);
        args
    }
}

/// The spec of a mover Job: the app's claims at /data/<ordinal>, the target at /backup.
fn mover_job_spec(app: &AppRef, task: &MoverTask, settings: &Settings) -> Value {
    let read_only = matches!(task, MoverTask::Backup);
    let mut volumes: Vec<Value> = app
        .ordinals()
        .map(|ordinal| {
            json!({
                "name": format!("data-{ordinal}"),
                "persistentVolumeClaim": {"claimName": names::claim(&app.name, ordinal), "readOnly": read_only},
            })
        })
        .collect();
    let mut mounts: Vec<Value> = app
        .ordinals()
        .map(|ordinal| {
            json!({
                "name": format!("data-{ordinal}"),
                "mountPath": format!("{MOVER_DATA_DIR}/{ordinal}"),
                "readOnly": read_only,
            })
        })
        .collect();
    volumes.push(match app.app.spec.backup_target() {
        ResolvedTarget::HostPath(path) => {
            json!({"name": "target", "hostPath": {"path": path, "type": "DirectoryOrCreate"}})
        }
        ResolvedTarget::Claim(claim) => {
            json!({"name": "target", "persistentVolumeClaim": {"claimName": claim}})
        }
    });
    mounts.push(json!({"name": "target", "mountPath": MOVER_TARGET_DIR}));
    let component = task.component();
    json!({
        // A restore is retried so that an interrupted swap is rolled forward; a failure the
        // mover calls permanent (bad input, a missing or damaged backup) fails at once.
        "backoffLimit": if read_only { 1 } else { 3 },
        "podFailurePolicy": {"rules": [{
            "action": "FailJob",
            "onExitCodes": {
                "containerName": "mover",
                "operator": "In",
                "values": [hellostateful_mover::cli::PERMANENT_FAILURE],
            },
        }]},
        "ttlSecondsAfterFinished": JOB_TTL_SECONDS,
        "template": {
            "metadata": {"labels": names::labels(&app.name, component)},
            "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": false,
                "terminationGracePeriodSeconds": 30,
                "containers": [{
                    "name": "mover",
                    "image": settings.mover_image,
                    "imagePullPolicy": "IfNotPresent",
                    "args": task.args(app),
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "volumeMounts": mounts,
                    // Root, to read and restore files of any owner, but only the file
                    // capabilities that needs.
                    "securityContext": {
                        "runAsUser": 0,
                        "allowPrivilegeEscalation": false,
                        "readOnlyRootFilesystem": true,
                        "capabilities": {
                            "drop": ["ALL"],
                            "add": ["CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID"],
                        },
                    },
                }],
                "volumes": volumes,
            },
        },
    })
}

/// A mover Job for one on-demand action (or the restore of a newly created app).
pub fn mover_job(
    app: &AppRef,
    job_name: &str,
    task: &MoverTask,
    reason: &str,
    settings: &Settings,
) -> Result<Job, Error> {
    let mut metadata = app.metadata(job_name, task.component());
    metadata["labels"][names::ACTION_LABEL] = json!(reason);
    let spec: JobSpec = build(mover_job_spec(app, task, settings))?;
    let mut job: Job =
        build(json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata}))?;
    job.spec = Some(spec);
    Ok(job)
}

/// The CronJob of scheduled backups.
pub fn cronjob(app: &AppRef, schedule: &str, settings: &Settings) -> Result<CronJob, Error> {
    let mut job_labels = names::labels(&app.name, Component::Backup);
    job_labels.insert(names::ACTION_LABEL.to_string(), "scheduled".to_string());
    build(json!({
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": app.metadata(&names::cronjob(&app.name), Component::Backup),
        "spec": {
            "schedule": schedule,
            "suspend": app.app.spec.backups_suspended(),
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 120,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": job_labels},
                "spec": mover_job_spec(app, &MoverTask::Backup, settings),
            },
        },
    }))
}

/// The node a static volume is pinned to, read from its node affinity.
pub fn volume_node(volume: &PersistentVolume) -> Option<String> {
    volume
        .spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?
        .node_selector_terms
        .iter()
        .flat_map(|term| term.match_expressions.iter().flatten())
        .find(|expr| expr.key == "kubernetes.io/hostname")
        .and_then(|expr| expr.values.as_ref()?.first().cloned())
}

/// The kind and name of a child, for messages.
pub fn describe<K: Resource<DynamicType = ()>>(object: &K) -> String {
    format!(
        "{} {}",
        K::kind(&()),
        object.meta().name.as_deref().unwrap_or("?")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use hellostateful_api::HelloStatefulSpec;

    pub(crate) fn app(spec: serde_json::Value) -> HelloStateful {
        let spec: HelloStatefulSpec = serde_json::from_value(spec).expect("spec");
        let mut app = HelloStateful::new("hello", spec);
        app.metadata.namespace = Some("ns1".into());
        app.metadata.uid = Some("uid-1".into());
        app
    }

    fn settings() -> Settings {
        Settings {
            mover_image: "hellostateful-reconciler:test".into(),
        }
    }

    #[test]
    fn statefulset_runs_the_2018_app_with_one_claim_per_replica() {
        let app = app(json!({"replicas": 2}));
        let app = AppRef::new(&app).expect("app");
        let sts = statefulset(&app, 2, None).expect("sts");
        let spec = sts.spec.expect("spec");
        assert_eq!(spec.replicas, Some(2));
        let container = &spec.template.spec.expect("pod").containers[0];
        assert_eq!(container.image.as_deref(), Some("busybox:1.36"));
        assert!(
            container.command.as_ref().expect("command")[2]
                .contains("date >> /usr/share/hello/stateful.log")
        );
        let templates = spec.volume_claim_templates.expect("templates");
        assert_eq!(templates.len(), 1, "one template: a claim per ordinal");
        assert_eq!(templates[0].metadata.name.as_deref(), Some("data"));
        let owner = &sts.metadata.owner_references.expect("owner")[0];
        assert_eq!(owner.uid, "uid-1");
        assert_eq!(owner.controller, Some(true));
    }

    #[test]
    fn statefulset_keeps_the_immutable_claim_templates_of_the_existing_one() {
        let old = app(json!({"storage": {"size": "1Gi"}}));
        let old = AppRef::new(&old).expect("app");
        let existing = statefulset(&old, 1, None).expect("sts");
        let new = app(json!({"storage": {"size": "5Gi"}}));
        let new = AppRef::new(&new).expect("app");
        let sts = statefulset(&new, 1, Some(&existing)).expect("sts");
        let template = &sts.spec.expect("spec").volume_claim_templates.expect("t")[0];
        let size = &template
            .spec
            .as_ref()
            .expect("spec")
            .resources
            .as_ref()
            .expect("r");
        assert_eq!(size.requests.as_ref().expect("req")["storage"].0, "1Gi");
    }

    #[test]
    fn static_volumes_are_namespaced_pinned_and_prebound() {
        let app = app(json!({}));
        let app = AppRef::new(&app).expect("app");
        let pv = volume(&app, 0, "node-a").expect("pv");
        assert_eq!(
            pv.metadata.name.as_deref(),
            Some("hellostateful-ns1-hello-0")
        );
        assert!(
            pv.metadata.owner_references.is_none(),
            "cluster-scoped: no namespaced owner"
        );
        assert_eq!(volume_node(&pv).as_deref(), Some("node-a"));
        let spec = pv.spec.expect("spec");
        assert_eq!(
            spec.persistent_volume_reclaim_policy.as_deref(),
            Some("Retain")
        );
        assert_eq!(
            spec.host_path.expect("hostPath").path,
            "/tmp/hostpath-provisioner/ns1/hello/0"
        );
        let claim_ref = spec.claim_ref.expect("claimRef");
        assert_eq!(claim_ref.name.as_deref(), Some("data-hello-0"));
        assert_eq!(claim_ref.namespace.as_deref(), Some("ns1"));
        let pvc = claim(&app, 0).expect("pvc");
        let pvc_spec = pvc.spec.expect("spec");
        assert_eq!(
            pvc_spec.volume_name.as_deref(),
            Some("hellostateful-ns1-hello-0")
        );
        assert_eq!(pvc_spec.storage_class_name.as_deref(), Some(""));
    }

    #[test]
    fn dynamic_claims_name_the_class_and_no_volume() {
        let app = app(json!({"storage": {"storageClassName": "fast"}}));
        let app = AppRef::new(&app).expect("app");
        let spec = claim(&app, 0).expect("pvc").spec.expect("spec");
        assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(spec.volume_name, None);
    }

    #[test]
    fn backup_job_mounts_every_replica_read_only_and_the_target() {
        let app = app(json!({"replicas": 2, "backup": {"retention": {"keepLast": 3}}}));
        let app = AppRef::new(&app).expect("app");
        let job = mover_job(
            &app,
            "backup-hello-1",
            &MoverTask::Backup,
            "requested",
            &settings(),
        )
        .expect("job");
        let pod = job.spec.expect("spec").template.spec.expect("pod");
        let container = &pod.containers[0];
        let args = container.args.as_ref().expect("args").join(" ");
        assert!(
            args.starts_with("backup --source /data --keep-last 3 --target /backup"),
            "{args}"
        );
        assert!(args.contains("--namespace ns1 --name hello"), "{args}");
        let mounts = container.volume_mounts.as_ref().expect("mounts");
        let paths: Vec<_> = mounts
            .iter()
            .map(|m| (m.mount_path.as_str(), m.read_only))
            .collect();
        assert_eq!(
            paths,
            [
                ("/data/0", Some(true)),
                ("/data/1", Some(true)),
                ("/backup", None)
            ]
        );
        let target = &pod.volumes.as_ref().expect("volumes")[2];
        assert_eq!(
            target.host_path.as_ref().expect("hostPath").path,
            "/tmp/backup"
        );
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    }

    #[test]
    fn restore_job_writes_and_can_tolerate_no_backup() {
        let app = app(json!({"backup": {"target": {"persistentVolumeClaim": "backups"}}}));
        let app = AppRef::new(&app).expect("app");
        let task = MoverTask::Restore {
            from: "latest".into(),
            if_exists: true,
        };
        let job = mover_job(&app, "restore-hello-1", &task, "created", &settings()).expect("job");
        let spec = job.spec.expect("spec");
        assert_eq!(spec.backoff_limit, Some(3));
        let rule = &spec.pod_failure_policy.as_ref().expect("policy").rules[0];
        assert_eq!(rule.action, "FailJob");
        assert_eq!(rule.on_exit_codes.as_ref().expect("codes").values, [3]);
        let pod = spec.template.spec.expect("pod");
        let args = pod.containers[0].args.as_ref().expect("args").join(" ");
        assert!(
            args.starts_with("restore --dest /data --from latest --if-exists"),
            "{args}"
        );
        let target = &pod.volumes.as_ref().expect("volumes")[1];
        assert_eq!(
            target
                .persistent_volume_claim
                .as_ref()
                .expect("pvc")
                .claim_name,
            "backups"
        );
    }

    #[test]
    fn cronjob_forbids_overlap_and_follows_suspend() {
        let app = app(json!({"backup": {"suspend": true}}));
        let app = AppRef::new(&app).expect("app");
        let cron = cronjob(&app, "*/5 * * * *", &settings()).expect("cron");
        assert_eq!(cron.metadata.name.as_deref(), Some("backup-hello"));
        let spec = cron.spec.expect("spec");
        assert_eq!(spec.schedule, "*/5 * * * *");
        assert_eq!(spec.suspend, Some(true));
        assert_eq!(spec.concurrency_policy.as_deref(), Some("Forbid"));
        let labels = spec
            .job_template
            .metadata
            .expect("meta")
            .labels
            .expect("labels");
        assert_eq!(labels["app.kubernetes.io/instance"], "hello");
    }
}
