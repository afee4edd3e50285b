//! The desired children of an app: pure functions from the HelloStateful to the objects the
//! reconciler applies. Nothing here talks to the API server, so every decision is unit-tested.

use hellostateful_api::names::{self, Component};
use hellostateful_api::{HelloStateful, quantity, validate};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job, JobSpec};
use k8s_openapi::api::core::v1::{
    EnvVar, EnvVarSource, NodeSelector, ObjectFieldSelector, PersistentVolume,
    PersistentVolumeClaim, Service, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::Error;
use crate::location::BackupLocation;

/// Where the mover finds the app's volumes (one subdirectory per ordinal) in its Jobs.
pub const MOVER_DATA_DIR: &str = "/data";
/// Where the mover finds the backup target in its Jobs.
pub const MOVER_TARGET_DIR: &str = "/backup";
/// Finished Jobs are removed after a day; their result is in status by then.
const JOB_TTL_SECONDS: i32 = 86_400;
/// The longest a mover Job may run: twelve hours, far above any backup this mover makes
/// (about 300 MB/s), yet bounded.
const JOB_DEADLINE_SECONDS: i64 = 43_200;
/// Capacity recorded on backup volumes and requested by their claims. A node directory has
/// no size of its own; the two only have to match for the claim to bind.
const BACKUP_VOLUME_CAPACITY: &str = "1Gi";

/// What the builders need besides the app itself: the cluster admin's settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Image of the data mover (the reconciler's own image).
    pub mover_image: String,
    /// Node directories that may hold backups; the first is the default.
    pub backup_roots: Vec<String>,
    /// Object store endpoints a spec may name; empty: any.
    pub object_store_endpoints: Vec<String>,
    /// What else of the nodes a spec may ask for.
    pub allowed: crate::tenancy::Allowed,
}

/// The app's identity, checked once: namespace, name, uid and owner reference.
pub struct AppRef<'a> {
    pub app: &'a HelloStateful,
    pub namespace: String,
    pub name: String,
    pub uid: String,
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
            uid: owner.uid.clone(),
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

/// The headless Service that gives the StatefulSet's pods stable names and exposes the
/// app's ports (each under its own name, or `<protocol>-<port>`).
pub fn service(app: &AppRef) -> Result<Service, Error> {
    let ports: Vec<Value> = match app.app.spec.ports.as_deref() {
        Some(ports) if !ports.is_empty() => ports
            .iter()
            .map(|port| {
                let protocol = port.protocol.as_deref().unwrap_or("TCP");
                let name = port.name.clone().unwrap_or_else(|| {
                    format!("{}-{}", protocol.to_ascii_lowercase(), port.container_port)
                });
                json!({"name": name, "port": port.container_port, "targetPort": port.container_port, "protocol": protocol})
            })
            .collect(),
        _ => vec![json!({"name": "placeholder", "port": 80, "protocol": "TCP"})],
    };
    build(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": app.metadata(&names::statefulset(&app.name), Component::App),
        "spec": {
            "clusterIP": "None",
            "selector": names::selector(&app.name),
            "ports": ports,
        },
    }))
}

/// The spec's environment as the API server stores it: an empty value is no value (a
/// `value: ""` sent would read back absent, and be drift on every pass).
fn without_empty_values(env: &[EnvVar]) -> Vec<EnvVar> {
    env.iter()
        .map(|var| EnvVar {
            value: var.value.clone().filter(|value| !value.is_empty()),
            ..var.clone()
        })
        .collect()
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
                "path": names::volume_host_path(&app.namespace, &app.name, &app.uid, ordinal),
                "type": "DirectoryOrCreate",
            },
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": app.namespace,
                "name": names::claim(&app.name, ordinal),
            },
            "nodeAffinity": {"required": only_on(node)},
        },
    }))
}

/// The static volume of the app's backup directory `<root>/<namespace>/<name>`, pinned to
/// `node` and pre-bound to the app's backup claim: the only way a mover pod reaches the node
/// root, and it reaches this app's directory only. It records the namespace's uid, so that a
/// namespace deleted and created again under the same name never inherits it.
pub fn backup_volume(
    app: &AppRef,
    root: &str,
    node: &str,
    namespace_uid: &str,
) -> Result<PersistentVolume, Error> {
    let mut labels = names::labels(&app.name, Component::Backup);
    labels.insert(names::NAMESPACE_LABEL.to_string(), app.namespace.clone());
    build(json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": names::backup_volume(root, &app.namespace, &app.name),
            "labels": labels,
            "annotations": {names::NAMESPACE_UID_ANNOTATION: namespace_uid},
        },
        "spec": {
            "capacity": {"storage": BACKUP_VOLUME_CAPACITY},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {
                "path": names::backup_host_path(root, &app.namespace, &app.name),
                "type": "DirectoryOrCreate",
            },
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": app.namespace,
                "name": names::backup_claim(&app.name),
            },
            "nodeAffinity": {"required": only_on(node)},
        },
    }))
}

/// The claim of the app's backup directory, bound to its `volume`. No owner reference: backups outlive the app
/// (restore on re-creation, the catalog of a deleted app) until `delete --delete-backups`.
/// It names the `mover_image`, the one image the tenant's own pods may run with this claim
/// mounted for writing (admission policy `hellostateful-backup-claims`).
pub fn backup_claim(
    app: &AppRef,
    volume: &str,
    mover_image: &str,
) -> Result<PersistentVolumeClaim, Error> {
    build(json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": names::backup_claim(&app.name),
            "namespace": app.namespace,
            "labels": names::labels(&app.name, Component::Backup),
            "annotations": {(names::MOVER_IMAGE_ANNOTATION): mover_image},
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": volume,
            "resources": {"requests": {"storage": BACKUP_VOLUME_CAPACITY}},
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

/// What of the spec's storage the app's volumes do not have, since a volume's size and
/// class are fixed when it is made (None when they match).
pub fn storage_drift(app: &AppRef, claim_templates: &[PersistentVolumeClaim]) -> Option<String> {
    let template = claim_templates.first()?.spec.as_ref()?;
    let spec = &app.app.spec;
    let mut drift = Vec::new();
    let made_size = template
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_default();
    let same_size = match (
        quantity::bytes(&made_size),
        quantity::bytes(spec.storage_size()),
    ) {
        (Some(made), Some(wanted)) => made == wanted,
        _ => made_size == spec.storage_size(),
    };
    if !same_size {
        drift.push(format!(
            "storage.size {} (the volumes were made with {made_size})",
            spec.storage_size()
        ));
    }
    let made_class = template
        .storage_class_name
        .as_deref()
        .filter(|c| !c.is_empty());
    if made_class != spec.storage_class() {
        drift.push(format!(
            "storage.storageClassName {:?} (the volumes were made with {:?})",
            spec.storage_class().unwrap_or(""),
            made_class.unwrap_or("")
        ));
    }
    (!drift.is_empty()).then(|| {
        format!(
            "not applied: {}. A volume's size and class are fixed when it is made; to change them, back up, delete the app and create it again with restoreFromExisting",
            drift.join(", ")
        )
    })
}

/// The app's StatefulSet with `replicas` pods (0 while a restore runs); `initial_restore`
/// is the record of how the restore before its first start ended (see
/// `names::INITIAL_RESTORE`).
///
/// `claim_templates` are those of the StatefulSet in the cluster: immutable, so they are
/// kept as they are rather than re-derived from a changed spec.
pub fn statefulset(
    app: &AppRef,
    replicas: i32,
    claim_templates: Option<&[PersistentVolumeClaim]>,
    initial_restore: Option<&str>,
    pinned_to: Option<&str>,
) -> Result<StatefulSet, Error> {
    let spec = &app.app.spec;
    let affinity = pinned_to.map(|node| {
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": only_on(node)}})
    });
    let templates = match claim_templates {
        Some(templates) => serde_json::to_value(templates).map_err(Error::Build)?,
        None => json!([{
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": names::DATA_VOLUME},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": spec.storage_class().unwrap_or(""),
                "resources": {"requests": {"storage": spec.storage_size()}},
                // The API server's default, said: the next pass carries the templates on
                // as the API server returns them, and finds them the same.
                "volumeMode": "Filesystem",
            },
        }]),
    };
    let mut metadata = app.metadata(&names::statefulset(&app.name), Component::App);
    if let Some(record) = initial_restore {
        metadata["annotations"] = json!({names::INITIAL_RESTORE: record});
    }
    build(json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            "serviceName": names::statefulset(&app.name),
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": names::selector(&app.name)},
            "template": {
                "metadata": {"labels": names::labels(&app.name, Component::App)},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "nodeSelector": spec.node_selector,
                    "tolerations": spec.tolerations,
                    "affinity": affinity,
                    "automountServiceAccountToken": false,
                    "enableServiceLinks": false,
                    "securityContext": app_pod_security(app),
                    "containers": [{
                        "name": "app",
                        "image": spec.image(),
                        "imagePullPolicy": "IfNotPresent",
                        "command": spec.command(),
                        "args": spec.args,
                        "env": spec.env.as_deref().map(without_empty_values),
                        "envFrom": spec.env_from,
                        "ports": spec.ports,
                        "resources": spec.resources,
                        "readinessProbe": spec.readiness_probe,
                        "livenessProbe": spec.liveness_probe,
                        "startupProbe": spec.startup_probe,
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

/// The app pod's identity: the spec's choice, always with seccomp RuntimeDefault.
fn app_pod_security(app: &AppRef) -> Value {
    let mut context = json!({"seccompProfile": {"type": "RuntimeDefault"}});
    if let Some(chosen) = &app.app.spec.security_context {
        let fields = [
            ("runAsUser", chosen.run_as_user.map(Value::from)),
            ("runAsGroup", chosen.run_as_group.map(Value::from)),
            ("fsGroup", chosen.fs_group.map(Value::from)),
            ("runAsNonRoot", chosen.run_as_non_root.map(Value::from)),
        ];
        for (key, value) in fields {
            if let Some(value) = value {
                context[key] = value;
            }
        }
    }
    context
}

/// What a mover Job does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MoverTask {
    /// Snapshot every replica's volume, then apply retention; with `reread`, every file is
    /// read again (no unchanged-file check).
    Backup { reread: bool },
    /// Back up replica `ordinal`'s volume alone, as a part of the backup the Job `set`
    /// seals: on its own node, where the volume can be mounted (see [`backup_task`]).
    BackupPart {
        set: String,
        ordinal: i32,
        reread: bool,
    },
    /// Seal the parts of a backup of `replicas` replicas into one snapshot, then apply
    /// retention. The set is the Job's own name (a CronJob names its Jobs); the Job is
    /// made suspended, and let run once its parts ended. With `reread`, its parts read
    /// every file again.
    Seal { replicas: i32, reread: bool },
    /// Restore the snapshot `from` (`latest` or an id) of the app `source` (another app of
    /// the namespace, for `spec.restoreFrom`; None: this app). With `if_exists`, a missing
    /// backup is not an error (a newly created app starts fresh).
    Restore {
        from: String,
        if_exists: bool,
        source: Option<String>,
    },
    /// Restore the snapshot `from` into an app whose replicas' volumes may be on different
    /// nodes, in parts (see [`restore_task`]): each replica's part stages it, then this
    /// Job, made suspended and let run once every part ended, commits the set; then each
    /// part swaps it in. The set is the Job's own name. `source` as for `Restore`.
    RestoreCommit {
        replicas: i32,
        from: String,
        if_exists: bool,
        source: Option<String>,
    },
    /// Replica `ordinal`'s part of the restore the Job `set` commits: on its own node.
    RestorePart {
        set: String,
        ordinal: i32,
        step: RestoreStep,
    },
    /// Empty the volumes of ordinals `0..replicas`: the app is being deleted, and this is
    /// every volume it has, those of replicas scaled away too (their claims are kept).
    Wipe { replicas: i32 },
    /// Give the root directories of the volumes of ordinals `0..replicas` to `owner`: the
    /// app runs as a non-root user on volumes that take no fsGroup (see `prepare`).
    Prepare {
        replicas: i32,
        owner: crate::prepare::Owner,
    },
    /// Delete every snapshot of the app: it is being deleted with its backups.
    Purge,
}

/// What a part of a restore in parts does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreStep {
    /// Stage snapshot `from` of app `source` (None: this app) beside the live data, which
    /// it leaves as it is (with `if_exists`, nothing when the app has no backup at all).
    Stage {
        from: String,
        if_exists: bool,
        source: Option<String>,
    },
    /// Swap the committed set's staged data in.
    Swap,
    /// Remove what a set whose commit was refused staged (the live data stays).
    Undo,
}

impl MoverTask {
    /// Whether this backup reads every file again (a set's, by its parts).
    pub fn rereads(&self) -> bool {
        matches!(
            self,
            MoverTask::Backup { reread: true }
                | MoverTask::BackupPart { reread: true, .. }
                | MoverTask::Seal { reread: true, .. }
        )
    }

    /// The restore before the app's first start: `spec.restoreFrom`'s backup (which must
    /// exist), else the newest of the app's own, if any (restoreFromExisting); in parts when
    /// its volumes may be on different nodes (see [`in_parts`]).
    pub fn initial_restore(app: &AppRef, location: &BackupLocation) -> Self {
        let requested = app.app.spec.restore_from.as_ref();
        let from = requested
            .map_or("latest", |from| from.snapshot())
            .to_owned();
        let if_exists = requested.is_none();
        let source = requested
            .map(|from| from.name.clone())
            .filter(|name| *name != app.name);
        match in_parts(app, location) {
            Some(replicas) => MoverTask::RestoreCommit {
                replicas,
                from,
                if_exists,
                source,
            },
            None => MoverTask::Restore {
                from,
                if_exists,
                source,
            },
        }
    }

    fn component(&self) -> Component {
        match self {
            MoverTask::Backup { .. } | MoverTask::BackupPart { .. } | MoverTask::Seal { .. } => {
                Component::Backup
            }
            MoverTask::Restore { .. }
            | MoverTask::RestoreCommit { .. }
            | MoverTask::RestorePart { .. } => Component::Restore,
            // Cleanup of a deleted app: neither a backup nor a restore to report.
            MoverTask::Wipe { .. } | MoverTask::Prepare { .. } | MoverTask::Purge => {
                Component::Storage
            }
        }
    }

    /// Whether the Job mounts the app's volumes, and whether it writes to them.
    fn data_access(&self) -> Option<bool> {
        match self {
            MoverTask::Backup { .. } | MoverTask::BackupPart { .. } => Some(false),
            MoverTask::Restore { .. }
            | MoverTask::RestorePart { .. }
            | MoverTask::Wipe { .. }
            | MoverTask::Prepare { .. } => Some(true),
            MoverTask::Seal { .. } | MoverTask::RestoreCommit { .. } | MoverTask::Purge => None,
        }
    }

    /// The ordinals whose volumes the Job mounts, if it mounts any.
    fn ordinals(&self, app: &AppRef) -> std::ops::Range<i32> {
        match self {
            MoverTask::BackupPart { ordinal, .. } | MoverTask::RestorePart { ordinal, .. } => {
                *ordinal..*ordinal + 1
            }
            MoverTask::Wipe { replicas } | MoverTask::Prepare { replicas, .. } => 0..*replicas,
            _ => app.ordinals(),
        }
    }

    /// The set a part belongs to, or how many parts the set's Job has.
    fn parts(&self) -> Option<(&'static str, String)> {
        match self {
            MoverTask::BackupPart { set, .. } | MoverTask::RestorePart { set, .. } => {
                Some((names::PART_OF_LABEL, set.clone()))
            }
            MoverTask::Seal { replicas, .. } | MoverTask::RestoreCommit { replicas, .. } => {
                Some((names::PARTS_LABEL, replicas.to_string()))
            }
            _ => None,
        }
    }

    /// Whether the Job is a set's, made suspended, which finds its name (the set's) in its
    /// environment: a CronJob names its Jobs.
    fn is_set(&self) -> bool {
        matches!(
            self,
            MoverTask::Seal { .. } | MoverTask::RestoreCommit { .. }
        )
    }

    /// With backup.consistency.mode stop, for a Job that backs the app up as a whole (not
    /// a part): the most seconds it may copy while the app is stopped for it.
    fn stops_app(&self, app: &AppRef) -> Option<i32> {
        match self {
            MoverTask::Backup { .. } | MoverTask::Seal { .. } => app.app.spec.stop_for_backup(),
            _ => None,
        }
    }

    /// The app whose backups the Job reads or writes. (A restore's commit and swaps read
    /// and write only the records of the app restored into: its own.)
    fn backups_of<'a>(&'a self, app: &'a AppRef) -> &'a str {
        match self {
            MoverTask::Restore {
                source: Some(source),
                ..
            }
            | MoverTask::RestorePart {
                step:
                    RestoreStep::Stage {
                        source: Some(source),
                        ..
                    },
                ..
            } => source,
            _ => &app.name,
        }
    }

    /// The mover's command line. Values go in `--flag=value` form, so that none of them,
    /// whatever a tenant wrote, can be taken for an option.
    /// `node_limit` is the admin's bound on an app's backups in a node directory.
    fn args(
        &self,
        app: &AppRef,
        location: &BackupLocation,
        node_limit: Option<u64>,
    ) -> Vec<String> {
        let mut args: Vec<String> = match self {
            MoverTask::Backup { reread } => {
                let mut args = vec![
                    "backup".into(),
                    format!("--source={MOVER_DATA_DIR}"),
                    format!("--keep-last={}", app.app.spec.keep_last()),
                ];
                if let (BackupLocation::NodeRoot(_), Some(limit)) = (location, node_limit) {
                    args.push(format!("--max-bytes={limit}"));
                }
                args.extend(reread.then(|| "--reread".into()));
                args
            }
            MoverTask::BackupPart { set, reread, .. } => [
                "backup".into(),
                format!("--source={MOVER_DATA_DIR}"),
                format!("--part-of={set}"),
            ]
            .into_iter()
            .chain(reread.then(|| "--reread".into()))
            .collect(),
            MoverTask::Seal { replicas, .. } => vec![
                "seal".into(),
                format!("--part-of=$({JOB_NAME_ENV})"),
                format!("--replicas={replicas}"),
                format!("--keep-last={}", app.app.spec.keep_last()),
            ],
            MoverTask::Restore {
                from, if_exists, ..
            } => {
                let mut args = vec![
                    "restore".into(),
                    format!("--dest={MOVER_DATA_DIR}"),
                    format!("--from={from}"),
                ];
                if *if_exists {
                    args.push("--if-exists".into());
                }
                args
            }
            MoverTask::RestoreCommit { replicas, .. } => vec![
                "commit-restore".into(),
                format!("--part-of=$({JOB_NAME_ENV})"),
                format!("--replicas={replicas}"),
            ],
            MoverTask::RestorePart { set, step, .. } => {
                let mut args = vec![
                    "restore".into(),
                    format!("--dest={MOVER_DATA_DIR}"),
                    format!("--part-of={set}"),
                ];
                match step {
                    RestoreStep::Stage {
                        from, if_exists, ..
                    } => {
                        args.push(format!("--from={from}"));
                        if *if_exists {
                            args.push("--if-exists".into());
                        }
                    }
                    RestoreStep::Swap => args.push("--swap".into()),
                    RestoreStep::Undo => args.push("--undo".into()),
                }
                args
            }
            MoverTask::Wipe { .. } => vec!["wipe".into(), format!("--dest={MOVER_DATA_DIR}")],
            MoverTask::Prepare { owner, .. } => vec![
                "prepare".into(),
                format!("--dest={MOVER_DATA_DIR}"),
                format!("--uid={}", owner.uid),
                format!("--gid={}", owner.gid),
                format!("--mode={:o}", owner.mode),
            ],
            MoverTask::Purge => vec!["purge".into()],
        };
        // Only the volumes: no backups are read or written.
        if !matches!(self, MoverTask::Wipe { .. } | MoverTask::Prepare { .. }) {
            let backups_of = self.backups_of(app);
            args.extend([
                format!("--target={MOVER_TARGET_DIR}"),
                format!("--namespace={}", app.namespace),
                format!("--name={backups_of}"),
            ]);
            if let BackupLocation::ObjectStore(store) = location {
                args.extend(store.mover_args());
                // Another app's backups: the records of this app's restores (in parts, or
                // interrupted) stay with its own, where its next restore looks for them.
                if backups_of != app.name {
                    args.push(format!("--into-app={}", app.name));
                }
            }
        }
        args.push("--termination-log=/dev/termination-log".into());
        args
    }
}

/// The spec of a mover Job: the app's claims at /data/<ordinal>, and the backup location:
/// the app's own backup claim at /backup/<namespace>/<name> (so the mover finds its usual
/// layout and sees nothing else of the node root), or the tenant's claim at /backup.
fn mover_job_spec(
    app: &AppRef,
    task: &MoverTask,
    location: &BackupLocation,
    settings: &Settings,
) -> Value {
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    let mut env = Vec::new();
    if let Some(writes) = task.data_access() {
        for ordinal in task.ordinals(app) {
            volumes.push(json!({
                "name": format!("data-{ordinal}"),
                "persistentVolumeClaim": {"claimName": names::claim(&app.name, ordinal), "readOnly": !writes},
            }));
            mounts.push(json!({
                "name": format!("data-{ordinal}"),
                "mountPath": format!("{MOVER_DATA_DIR}/{ordinal}"),
                "readOnly": !writes,
            }));
        }
    }
    let owner = task.backups_of(app);
    let target = match (task, location) {
        (MoverTask::Wipe { .. } | MoverTask::Prepare { .. }, _) => None,
        (_, BackupLocation::ObjectStore(store)) => {
            // The keys reach the mover through its environment, from a Secret of the app's
            // own namespace; nothing is mounted.
            env = store.mover_env();
            None
        }
        // Parts are made only for object stores (see `in_parts`).
        (_, _) if task.parts().is_some() => None,
        (_, BackupLocation::NodeRoot(_)) => Some((
            names::backup_claim(owner),
            format!("{MOVER_TARGET_DIR}/{}/{owner}", app.namespace),
        )),
        (_, BackupLocation::Claim(claim)) => Some((claim.clone(), MOVER_TARGET_DIR.to_string())),
    };
    if let Some((claim, mount_path)) = target {
        let mut volume = json!({"name": "target", "persistentVolumeClaim": {"claimName": claim}});
        let mut mount = json!({"name": "target", "mountPath": mount_path});
        // Another app's backups are only read. (`readOnly: false` is left out: the API
        // server drops it, and the CronJob would then differ from its stored self.)
        if owner != app.name {
            volume["persistentVolumeClaim"]["readOnly"] = json!(true);
            mount["readOnly"] = json!(true);
        }
        volumes.push(volume);
        mounts.push(mount);
    }
    if task.is_set() {
        // The Job's own name, set by whoever made it (the CronJob controller, or the
        // reconciler): the name its parts were told to share.
        env.push(EnvVar {
            name: JOB_NAME_ENV.into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.labels['batch.kubernetes.io/job-name']".into(),
                    ..ObjectFieldSelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        });
    }
    let component = task.component();
    let retried = component == Component::Restore;
    let mut spec = json!({
        // A restore is retried so that an interrupted swap is rolled forward; a failure the
        // mover calls permanent (bad input, a missing or damaged backup) fails at once.
        "backoffLimit": if retried { 3 } else { 1 },
        "podFailurePolicy": {"rules": [{
            "action": "FailJob",
            "onExitCodes": {
                "containerName": "mover",
                "operator": "In",
                "values": [hellostateful_mover::cli::PERMANENT_FAILURE],
            },
        }]},
        "ttlSecondsAfterFinished": JOB_TTL_SECONDS,
        // A backstop for a mover that hangs: no Job, however stuck, holds its app forever.
        "activeDeadlineSeconds": JOB_DEADLINE_SECONDS,
        "template": {
            "metadata": {"labels": names::labels(&app.name, component)},
            "spec": {
                "restartPolicy": "Never",
                // Where the app may run, so may its Jobs (its volumes are there), cordoned
                // or not: a cordoned node still runs the app, and node-local data can be
                // backed up, restored or wiped nowhere else.
                "nodeSelector": app.app.spec.node_selector,
                "tolerations": mover_tolerations(app),
                "automountServiceAccountToken": false,
                "enableServiceLinks": false,
                "terminationGracePeriodSeconds": 30,
                "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "mover",
                    "image": settings.mover_image,
                    "imagePullPolicy": "IfNotPresent",
                    "args": task.args(app, location, settings.allowed.node_backup_limit),
                    // Left out when empty: the API server would drop `[]`, and the CronJob
                    // would then differ from its stored self.
                    "env": (!env.is_empty()).then_some(&env),
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "volumeMounts": mounts,
                    "resources": {
                        "requests": {"cpu": "50m", "memory": "64Mi"},
                        "limits": {"memory": "1Gi"},
                    },
                    // Root, to read and restore files of any owner, with only the file
                    // capabilities that needs, all within Pod Security baseline
                    // (DAC_OVERRIDE already reads and searches every directory).
                    "securityContext": {
                        "runAsUser": 0,
                        "allowPrivilegeEscalation": false,
                        "readOnlyRootFilesystem": true,
                        "capabilities": {
                            "drop": ["ALL"],
                            "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"],
                        },
                    },
                }],
                "volumes": volumes,
            },
        },
    });
    if task.is_set() {
        spec["suspend"] = json!(true);
    }
    if let Some(max_stop) = task.stops_app(app) {
        // Let run once the app is stopped (see `stops`); its deadline counts from then.
        spec["suspend"] = json!(true);
        spec["activeDeadlineSeconds"] = json!(max_stop);
    }
    if let (MoverTask::BackupPart { .. }, Some(max_stop)) = (task, app.app.spec.stop_for_backup()) {
        // A part copies while its set's app is stopped: the outage's bound holds for it too.
        spec["activeDeadlineSeconds"] = json!(max_stop);
    }
    spec
}

/// The environment variable a sealing Job's pod finds its Job's name in.
const JOB_NAME_ENV: &str = "HELLOSTATEFUL_JOB";

/// How many parts the app's backups and restores are made in, if in parts: when its
/// volumes may be on different nodes (ReadWriteOnce claims of a StorageClass, more than one
/// replica), each is backed up or restored by a Job on its own node. Parts need an object
/// store: a node directory or a claim is reached from one node only.
fn in_parts(app: &AppRef, location: &BackupLocation) -> Option<i32> {
    let replicas = app.app.spec.replicas;
    let spread = app.app.spec.storage_class().is_some() && replicas > 1;
    (spread && matches!(location, BackupLocation::ObjectStore(_))).then_some(replicas)
}

/// Whether backup Job `job` read every file again, itself or by its parts: its annotation
/// (a cached Job keeps no spec).
pub fn reads_every_file(job: &Job) -> bool {
    job.annotations().get(names::REREAD).map(String::as_str) == Some("true")
}

/// How the app is backed up: in one Job that mounts every replica's volume, or in parts
/// (see [`in_parts`]), sealed by one more Job.
pub fn backup_task(app: &AppRef, location: &BackupLocation, reread: bool) -> MoverTask {
    match in_parts(app, location) {
        Some(replicas) => MoverTask::Seal { replicas, reread },
        None => MoverTask::Backup { reread },
    }
}

/// How an on-demand restore of snapshot `from` runs: in one Job that mounts every
/// replica's volume, or in parts (see [`in_parts`]), committed by one more Job.
pub fn restore_task(app: &AppRef, location: &BackupLocation, from: &str) -> MoverTask {
    match in_parts(app, location) {
        Some(replicas) => MoverTask::RestoreCommit {
            replicas,
            from: from.to_owned(),
            if_exists: false,
            source: None,
        },
        None => MoverTask::Restore {
            from: from.to_owned(),
            if_exists: false,
            source: None,
        },
    }
}

/// The app's tolerations, and one of a cordoned node's taint.
fn mover_tolerations(app: &AppRef) -> Vec<Toleration> {
    let mut tolerations = app.app.spec.tolerations.clone().unwrap_or_default();
    tolerations.push(Toleration {
        key: Some("node.kubernetes.io/unschedulable".into()),
        operator: Some("Exists".into()),
        effect: Some("NoSchedule".into()),
        ..Toleration::default()
    });
    tolerations
}

/// A mover Job for one on-demand action (or the restore of a newly created app).
pub fn mover_job(
    app: &AppRef,
    job_name: &str,
    task: &MoverTask,
    reason: &str,
    location: &BackupLocation,
    settings: &Settings,
) -> Result<Job, Error> {
    let mut metadata = app.metadata(job_name, task.component());
    metadata["labels"][names::ACTION_LABEL] = json!(reason);
    if let Some((label, value)) = task.parts() {
        metadata["labels"][label] = json!(value);
    }
    if task.rereads() {
        // What it or its parts do (see `parts`), and what status records of it.
        metadata["annotations"][names::REREAD] = json!("true");
    }
    if task.stops_app(app).is_some() {
        metadata["annotations"][names::STOPS_APP] = json!("true");
    }
    if let MoverTask::RestoreCommit {
        from,
        if_exists,
        source,
        ..
    } = task
    {
        // What its parts stage (see `parts`).
        metadata["annotations"][names::RESTORE_FROM] = json!(from);
        if *if_exists {
            metadata["annotations"][names::RESTORE_IF_EXISTS] = json!("true");
        }
        if let Some(source) = source {
            metadata["annotations"][names::RESTORE_SOURCE] = json!(source);
        }
    }
    let spec: JobSpec = build(mover_job_spec(app, task, location, settings))?;
    let mut job: Job =
        build(json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata}))?;
    job.spec = Some(spec);
    Ok(job)
}

/// The CronJob of scheduled backups.
pub fn cronjob(
    app: &AppRef,
    schedule: &str,
    location: &BackupLocation,
    settings: &Settings,
    reread: bool,
) -> Result<CronJob, Error> {
    let mut job_labels = names::labels(&app.name, Component::Backup);
    job_labels.insert(names::ACTION_LABEL.to_string(), "scheduled".to_string());
    // Scheduled backups trust the unchanged-file check, save when a full read is due.
    let task = backup_task(app, location, reread);
    if let Some((label, value)) = task.parts() {
        job_labels.insert(label.to_string(), value);
    }
    let mut job_annotations = serde_json::Map::new();
    if task.stops_app(app).is_some() {
        job_annotations.insert(names::STOPS_APP.into(), json!("true"));
    }
    if task.rereads() {
        job_annotations.insert(names::REREAD.into(), json!("true"));
    }
    let (time_zone, schedule) = validate::split_time_zone(schedule);
    build(json!({
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": app.metadata(&names::cronjob(&app.name), Component::Backup),
        "spec": {
            "schedule": schedule,
            "timeZone": time_zone,
            "suspend": app.app.spec.backups_suspended(),
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 120,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {
                    "labels": job_labels,
                    "annotations": (!job_annotations.is_empty()).then_some(job_annotations),
                },
                "spec": mover_job_spec(app, &task, location, settings),
            },
        },
    }))
}

/// A node selector that matches `node` only.
fn only_on(node: &str) -> Value {
    json!({"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]},
    ]}]})
}

/// The one node a selector made by `only_on` matches.
fn only_node(selector: &NodeSelector) -> Option<String> {
    selector
        .node_selector_terms
        .iter()
        .flat_map(|term| term.match_expressions.iter().flatten())
        .find(|expr| expr.key == "kubernetes.io/hostname")
        .and_then(|expr| expr.values.as_ref()?.first().cloned())
}

/// The node a static volume is pinned to, read from its node affinity.
pub fn volume_node(volume: &PersistentVolume) -> Option<String> {
    only_node(
        volume
            .spec
            .as_ref()?
            .node_affinity
            .as_ref()?
            .required
            .as_ref()?,
    )
}

/// The node a StatefulSet's pods are pinned to, read from their required node affinity.
pub fn pods_node(statefulset: &StatefulSet) -> Option<String> {
    let pod = statefulset.spec.as_ref()?.template.spec.as_ref()?;
    only_node(
        pod.affinity
            .as_ref()?
            .node_affinity
            .as_ref()?
            .required_during_scheduling_ignored_during_execution
            .as_ref()?,
    )
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

    fn app(spec: serde_json::Value) -> HelloStateful {
        let spec: HelloStatefulSpec = serde_json::from_value(spec).expect("spec");
        let mut app = HelloStateful::new("hello", spec);
        app.metadata.namespace = Some("ns1".into());
        app.metadata.uid = Some("uid-1".into());
        app
    }

    fn settings() -> Settings {
        Settings {
            mover_image: "hellostateful-reconciler:test".into(),
            backup_roots: vec!["/tmp/backup".into()],
            object_store_endpoints: Vec::new(),
            allowed: Default::default(),
        }
    }

    fn node_root() -> BackupLocation {
        BackupLocation::NodeRoot("/tmp/backup".into())
    }

    /// The claims a pod mounts, in order (every volume of a mover pod is one).
    fn claim_names(pod: &k8s_openapi::api::core::v1::PodSpec) -> Vec<&str> {
        pod.volumes
            .iter()
            .flatten()
            .map(|v| {
                v.persistent_volume_claim
                    .as_ref()
                    .expect("claim")
                    .claim_name
                    .as_str()
            })
            .collect()
    }

    /// Every volume of a pod is a claim, and every container stays within Pod Security
    /// baseline: no hostPath, no privilege, capabilities from baseline's list only.
    fn assert_baseline(pod: &k8s_openapi::api::core::v1::PodSpec) {
        const BASELINE_CAPS: [&str; 13] = [
            "AUDIT_WRITE",
            "CHOWN",
            "DAC_OVERRIDE",
            "FOWNER",
            "FSETID",
            "KILL",
            "MKNOD",
            "NET_BIND_SERVICE",
            "SETFCAP",
            "SETGID",
            "SETPCAP",
            "SETUID",
            "SYS_CHROOT",
        ];
        for volume in pod.volumes.iter().flatten() {
            assert!(
                volume.host_path.is_none(),
                "hostPath volume {}",
                volume.name
            );
        }
        assert_eq!(pod.host_network, None);
        assert_eq!(pod.host_pid, None);
        let seccomp = pod
            .security_context
            .as_ref()
            .and_then(|c| c.seccomp_profile.as_ref())
            .map(|p| p.type_.as_str());
        assert_eq!(seccomp, Some("RuntimeDefault"));
        for container in &pod.containers {
            let context = container
                .security_context
                .as_ref()
                .expect("securityContext");
            assert_eq!(context.privileged, None);
            assert_eq!(context.allow_privilege_escalation, Some(false));
            let caps = context.capabilities.as_ref().expect("capabilities");
            assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_string()][..]));
            for added in caps.add.iter().flatten() {
                assert!(BASELINE_CAPS.contains(&added.as_str()), "{added}");
            }
        }
    }

    #[test]
    fn statefulset_runs_the_2018_app_with_one_claim_per_replica() {
        let app = app(json!({"replicas": 2}));
        let app = AppRef::new(&app).expect("app");
        let sts = statefulset(&app, 2, None, None, None).expect("sts");
        let spec = sts.spec.expect("spec");
        assert_eq!(spec.replicas, Some(2));
        let pod = spec.template.spec.expect("pod");
        let container = &pod.containers[0];
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
        assert_baseline(&pod);
    }

    #[test]
    fn the_app_container_takes_the_pod_fields_the_spec_sets_and_its_service_their_ports() {
        let app = app(json!({
            "args": ["--port", "8080"],
            "env": [{"name": "GREETING", "value": "hello"}, {"name": "EMPTY", "value": ""},
                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "envFrom": [{"configMapRef": {"name": "settings"}}],
            "ports": [{"name": "http", "containerPort": 8080}, {"containerPort": 5353, "protocol": "UDP"}],
            "resources": {"requests": {"cpu": "0.05", "memory": "16Mi"}},
            "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
            "livenessProbe": {"tcpSocket": {"port": 8080}},
            "startupProbe": {"exec": {"command": ["true"]}},
        }));
        let app = AppRef::new(&app).expect("app");
        let sts = statefulset(&app, 1, None, None, None).expect("sts");
        let pod = sts.spec.expect("spec").template.spec.expect("pod");
        assert_baseline(&pod);
        let container = &pod.containers[0];
        assert_eq!(container.image.as_deref(), Some("busybox:1.36"));
        assert_eq!(
            container.args.as_deref(),
            Some(&["--port".to_string(), "8080".to_string()][..])
        );
        let env = container.env.as_deref().expect("env");
        assert_eq!(env[0].value.as_deref(), Some("hello"));
        assert_eq!(env[1].value, None, "an empty value is sent as none");
        assert!(env[2].value_from.is_some());
        assert_eq!(container.env_from.as_deref().map(<[_]>::len), Some(1));
        assert_eq!(container.ports.as_deref().map(<[_]>::len), Some(2));
        assert!(container.readiness_probe.is_some());
        assert!(container.liveness_probe.is_some());
        assert!(container.startup_probe.is_some());
        let requests = container
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref());
        assert_eq!(requests.map(|r| r["cpu"].0.as_str()), Some("0.05"));

        let service = service(&app).expect("service");
        let ports: Vec<_> = service
            .spec
            .expect("spec")
            .ports
            .expect("ports")
            .into_iter()
            .map(|p| {
                (
                    p.name.unwrap_or_default(),
                    p.port,
                    p.protocol.unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            ports,
            [
                ("http".to_string(), 8080, "TCP".to_string()),
                ("udp-5353".to_string(), 5353, "UDP".to_string())
            ]
        );
    }

    #[test]
    fn an_app_without_ports_keeps_the_services_placeholder_port() {
        let app = app(json!({}));
        let service = service(&AppRef::new(&app).expect("app")).expect("service");
        let ports = service.spec.expect("spec").ports.expect("ports");
        assert_eq!(ports.len(), 1);
        assert_eq!(ports[0].name.as_deref(), Some("placeholder"));
    }

    #[test]
    fn the_app_and_its_jobs_run_where_the_spec_places_them() {
        let app = app(json!({
            "nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        }));
        let app = AppRef::new(&app).expect("app");
        let sts = statefulset(&app, 1, None, None, None).expect("sts");
        let backup = mover_job(
            &app,
            "backup-x",
            &MoverTask::Backup { reread: false },
            "test",
            &node_root(),
            &settings(),
        )
        .expect("job");
        let pods = [
            sts.spec.expect("spec").template.spec.expect("pod"),
            backup.spec.expect("spec").template.spec.expect("pod"),
        ];
        let mut cordon_tolerated = Vec::new();
        for pod in pods {
            let selector = pod.node_selector.expect("nodeSelector");
            assert_eq!(selector.get("disk").map(String::as_str), Some("ssd"));
            let tolerations = pod.tolerations.expect("tolerations");
            assert_eq!(tolerations[0].key.as_deref(), Some("dedicated"));
            cordon_tolerated.push(tolerations.iter().any(|t| {
                t.key.as_deref() == Some("node.kubernetes.io/unschedulable")
                    && t.effect.as_deref() == Some("NoSchedule")
            }));
        }
        // The app's pods leave a cordoned node be; its movers go where its data is.
        assert_eq!(cordon_tolerated, [false, true]);
    }

    #[test]
    fn the_app_runs_as_the_spec_says_and_passes_restricted_when_asked() {
        let app = app(
            json!({"securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000, "runAsNonRoot": true}}),
        );
        let app = AppRef::new(&app).expect("app");
        let sts = statefulset(&app, 1, None, None, None).expect("sts");
        let pod = sts.spec.expect("spec").template.spec.expect("pod");
        let context = pod.security_context.as_ref().expect("context");
        assert_eq!(context.run_as_user, Some(1000));
        assert_eq!(context.run_as_group, Some(1000));
        assert_eq!(context.fs_group, Some(1000));
        assert_eq!(context.run_as_non_root, Some(true));
        let container = pod.containers[0].security_context.as_ref().expect("c");
        assert_eq!(container.capabilities.as_ref().expect("caps").add, None);
    }

    #[test]
    fn storage_the_volumes_cannot_take_is_named_and_equal_sizes_are_not() {
        let made = app(json!({"storage": {"size": "1Gi"}}));
        let existing =
            statefulset(&AppRef::new(&made).expect("app"), 1, None, None, None).expect("sts");
        let existing = existing
            .spec
            .and_then(|s| s.volume_claim_templates)
            .expect("templates");
        let same = app(json!({"storage": {"size": "1024Mi"}}));
        assert_eq!(
            storage_drift(&AppRef::new(&same).expect("app"), &existing),
            None
        );
        let bigger = app(json!({"storage": {"size": "5Gi", "storageClassName": "fast"}}));
        let drift = storage_drift(&AppRef::new(&bigger).expect("app"), &existing).expect("drift");
        assert!(
            drift.contains("storage.size 5Gi (the volumes were made with 1Gi)"),
            "{drift}"
        );
        assert!(
            drift.contains("storage.storageClassName \"fast\""),
            "{drift}"
        );
    }

    #[test]
    fn statefulset_pods_are_pinned_to_the_node_asked_for_and_read_back() {
        let app = app(json!({"storage": {"storageClassName": "fast"}}));
        let app = AppRef::new(&app).expect("app");
        let pinned = statefulset(&app, 1, None, None, Some("node-b")).expect("sts");
        assert_eq!(pods_node(&pinned).as_deref(), Some("node-b"));
        let free = statefulset(&app, 1, None, None, None).expect("sts");
        let pod = free.spec.as_ref().and_then(|s| s.template.spec.as_ref());
        assert_eq!(pod.expect("pod").affinity, None);
        assert_eq!(pods_node(&free), None);
    }

    #[test]
    fn statefulset_keeps_the_immutable_claim_templates_of_the_existing_one() {
        let old = app(json!({"storage": {"size": "1Gi"}}));
        let old = AppRef::new(&old).expect("app");
        let existing = statefulset(&old, 1, None, None, None).expect("sts");
        let templates = existing.spec.and_then(|s| s.volume_claim_templates);
        let new = app(json!({"storage": {"size": "5Gi"}}));
        let new = AppRef::new(&new).expect("app");
        let sts = statefulset(&new, 1, templates.as_deref(), None, None).expect("sts");
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
            Some("hellostateful.ns1.hello.0")
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
            "/tmp/hostpath-provisioner/ns1/hello/uid-1/0"
        );
        let claim_ref = spec.claim_ref.expect("claimRef");
        assert_eq!(claim_ref.name.as_deref(), Some("data-hello-0"));
        assert_eq!(claim_ref.namespace.as_deref(), Some("ns1"));
        let pvc = claim(&app, 0).expect("pvc");
        let pvc_spec = pvc.spec.expect("spec");
        assert_eq!(
            pvc_spec.volume_name.as_deref(),
            Some("hellostateful.ns1.hello.0")
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
    fn backup_volume_is_the_apps_own_directory_prebound_to_its_claim() {
        let app = app(json!({}));
        let app = AppRef::new(&app).expect("app");
        let pv = backup_volume(&app, "/tmp/backup", "node-a", "ns-uid").expect("pv");
        let name = format!(
            "hellostateful-backups.ns1.hello.{}",
            names::short_hash("/tmp/backup")
        );
        assert_eq!(pv.metadata.name.as_ref(), Some(&name));
        assert_eq!(
            pv.metadata.annotations.as_ref().expect("annotations")[names::NAMESPACE_UID_ANNOTATION],
            "ns-uid"
        );
        assert_eq!(volume_node(&pv).as_deref(), Some("node-a"));
        let spec = pv.spec.expect("spec");
        assert_eq!(
            spec.host_path.expect("hostPath").path,
            "/tmp/backup/ns1/hello"
        );
        let claim_ref = spec.claim_ref.expect("claimRef");
        assert_eq!(claim_ref.name.as_deref(), Some("backups-hello"));
        let claim = backup_claim(&app, &name, "mover:1").expect("claim");
        assert!(
            claim.metadata.owner_references.is_none(),
            "backups outlive the app"
        );
        assert_eq!(
            claim.annotations().get(names::MOVER_IMAGE_ANNOTATION),
            Some(&"mover:1".to_string())
        );
        assert_eq!(claim.spec.expect("spec").volume_name, Some(name));
    }

    #[test]
    fn a_node_backup_limit_bounds_backups_into_node_directories_only() {
        let app = app(json!({}));
        let app = AppRef::new(&app).expect("app");
        let bounded = Settings {
            allowed: crate::tenancy::Allowed {
                node_backup_limit: Some(10 << 30),
                ..Default::default()
            },
            ..settings()
        };
        let args_of = |location: &BackupLocation, reread: bool| {
            let job = mover_job(
                &app,
                "backup-hello-1",
                &MoverTask::Backup { reread },
                "requested",
                location,
                &bounded,
            )
            .expect("job");
            job.spec
                .expect("spec")
                .template
                .spec
                .expect("pod")
                .containers[0]
                .args
                .clone()
                .unwrap_or_default()
        };
        let args = |location: &BackupLocation| args_of(location, false);
        assert!(args(&node_root()).contains(&"--max-bytes=10737418240".to_string()));
        let full_args = args_of(&node_root(), true);
        assert!(full_args.contains(&"--reread".to_string()), "{full_args:?}");
        assert!(!args(&node_root()).contains(&"--reread".to_string()));
        assert!(
            !args(&BackupLocation::Claim("mine".into()))
                .iter()
                .any(|a| a.starts_with("--max-bytes"))
        );
    }

    #[test]
    fn backup_job_mounts_every_replica_read_only_and_only_its_own_backup_claim() {
        let app = app(json!({"replicas": 2, "backup": {"retention": {"keepLast": 3}}}));
        let app = AppRef::new(&app).expect("app");
        let job = mover_job(
            &app,
            "backup-hello-1",
            &MoverTask::Backup { reread: false },
            "requested",
            &node_root(),
            &settings(),
        )
        .expect("job");
        let pod = job.spec.expect("spec").template.spec.expect("pod");
        assert_baseline(&pod);
        let container = &pod.containers[0];
        let args = container.args.as_ref().expect("args").join(" ");
        assert_eq!(
            args,
            "backup --source=/data --keep-last=3 --target=/backup --namespace=ns1 --name=hello --termination-log=/dev/termination-log"
        );
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
                ("/backup/ns1/hello", None)
            ]
        );
        let target = &pod.volumes.as_ref().expect("volumes")[2];
        assert_eq!(
            target
                .persistent_volume_claim
                .as_ref()
                .expect("claim")
                .claim_name,
            "backups-hello"
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
            source: None,
        };
        let location = BackupLocation::Claim("backups".into());
        let job = mover_job(
            &app,
            "restore-hello-1",
            &task,
            "created",
            &location,
            &settings(),
        )
        .expect("job");
        let spec = job.spec.expect("spec");
        assert_eq!(spec.backoff_limit, Some(3));
        let rule = &spec.pod_failure_policy.as_ref().expect("policy").rules[0];
        assert_eq!(rule.action, "FailJob");
        assert_eq!(rule.on_exit_codes.as_ref().expect("codes").values, [3]);
        let pod = spec.template.spec.expect("pod");
        assert_baseline(&pod);
        let args = pod.containers[0].args.as_ref().expect("args").join(" ");
        assert!(
            args.starts_with("restore --dest=/data --from=latest --if-exists"),
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
    fn replicas_on_a_storage_class_are_backed_up_in_parts_each_mounting_its_own_claim() {
        let spread = crate::fixtures::spread_app(json!({}));
        let location =
            crate::location::resolve(&spread.spec, &[], &[]).expect("object store location");
        let spread = AppRef::new(&spread).expect("app");
        assert_eq!(
            backup_task(&spread, &location, false),
            MoverTask::Seal {
                replicas: 2,
                reread: false
            }
        );
        for (spec, location) in [
            // One replica, static volumes, or a node-reached target: one Job does it all.
            (
                json!({"replicas": 1, "storage": {"storageClassName": "local"}}),
                &location,
            ),
            (json!({"replicas": 2}), &location),
            (
                json!({"replicas": 2, "storage": {"storageClassName": "local"}}),
                &node_root(),
            ),
        ] {
            let whole = app(spec);
            let whole = AppRef::new(&whole).expect("app");
            assert_eq!(
                backup_task(&whole, location, false),
                MoverTask::Backup { reread: false }
            );
        }

        let part = MoverTask::BackupPart {
            set: "backup-hello-1".into(),
            ordinal: 1,
            reread: false,
        };
        let job = mover_job(
            &spread,
            "backup-hello-1-1",
            &part,
            "requested",
            &location,
            &settings(),
        )
        .expect("part");
        assert_eq!(job.labels()[names::PART_OF_LABEL], "backup-hello-1");
        let spec = job.spec.expect("spec");
        assert_eq!(spec.suspend, None, "a part runs at once");
        let pod = spec.template.spec.expect("pod");
        assert_baseline(&pod);
        assert_eq!(
            claim_names(&pod),
            ["data-hello-1"],
            "its own replica's claim only"
        );
        let args = pod.containers[0].args.clone().unwrap_or_default();
        assert_eq!(
            args[..3],
            ["backup", "--source=/data", "--part-of=backup-hello-1"]
        );
        assert!(
            !args.iter().any(|a| a.starts_with("--keep-last")),
            "{args:?}"
        );

        let seal = MoverTask::Seal {
            replicas: 2,
            reread: false,
        };
        let job = mover_job(
            &spread,
            "backup-hello-1",
            &seal,
            "requested",
            &location,
            &settings(),
        )
        .expect("seal");
        assert_eq!(job.labels()[names::PARTS_LABEL], "2");
        let spec = job.spec.expect("spec");
        assert_eq!(spec.suspend, Some(true), "let run once its parts ended");
        let pod = spec.template.spec.expect("pod");
        assert!(claim_names(&pod).is_empty(), "a seal reads the store only");
        let container = &pod.containers[0];
        let args = container.args.clone().unwrap_or_default();
        assert_eq!(
            args[..4],
            [
                "seal",
                "--part-of=$(HELLOSTATEFUL_JOB)",
                "--replicas=2",
                "--keep-last=10"
            ]
        );
        let job_name = container
            .env
            .iter()
            .flatten()
            .find(|e| e.name == JOB_NAME_ENV)
            .and_then(|e| e.value_from.as_ref()?.field_ref.as_ref())
            .map(|f| f.field_path.as_str());
        assert_eq!(
            job_name,
            Some("metadata.labels['batch.kubernetes.io/job-name']")
        );

        let cronjob =
            cronjob(&spread, "0 * * * *", &location, &settings(), false).expect("cronjob");
        let template = cronjob.spec.expect("spec").job_template;
        let labels = template.metadata.and_then(|m| m.labels).unwrap_or_default();
        assert_eq!(labels[names::PARTS_LABEL], "2");
        assert_eq!(template.spec.and_then(|s| s.suspend), Some(true));
    }

    #[test]
    fn replicas_on_a_storage_class_are_restored_in_parts_each_mounting_its_own_claim() {
        let spread = crate::fixtures::spread_app(json!({}));
        let location =
            crate::location::resolve(&spread.spec, &[], &[]).expect("object store location");
        let spread = AppRef::new(&spread).expect("app");
        let commit = restore_task(&spread, &location, "20261129T150001Z");
        let job = mover_job(
            &spread,
            "restore-hello-1",
            &commit,
            "requested",
            &location,
            &settings(),
        )
        .expect("commit");
        assert_eq!(job.labels()[names::PARTS_LABEL], "2");
        assert_eq!(job.annotations()[names::RESTORE_FROM], "20261129T150001Z");
        let spec = job.spec.expect("spec");
        assert_eq!(spec.suspend, Some(true), "let run once its parts staged");
        let pod = spec.template.spec.expect("pod");
        assert!(
            claim_names(&pod).is_empty(),
            "a commit reads the store only"
        );
        let args = pod.containers[0].args.clone().unwrap_or_default();
        assert_eq!(
            args[..3],
            [
                "commit-restore",
                "--part-of=$(HELLOSTATEFUL_JOB)",
                "--replicas=2"
            ]
        );

        for (step, last) in [
            (
                RestoreStep::Stage {
                    from: "latest".into(),
                    if_exists: false,
                    source: None,
                },
                "--from=latest",
            ),
            (RestoreStep::Swap, "--swap"),
            (RestoreStep::Undo, "--undo"),
        ] {
            let part = MoverTask::RestorePart {
                set: "restore-hello-1".into(),
                ordinal: 1,
                step,
            };
            let job = mover_job(
                &spread,
                "restore-hello-1-1",
                &part,
                "requested",
                &location,
                &settings(),
            )
            .expect("part");
            assert_eq!(job.labels()[names::PART_OF_LABEL], "restore-hello-1");
            let spec = job.spec.expect("spec");
            assert_eq!((spec.suspend, spec.backoff_limit), (None, Some(3)));
            let pod = spec.template.spec.expect("pod");
            assert_baseline(&pod);
            assert_eq!(
                claim_names(&pod),
                ["data-hello-1"],
                "its own replica's claim only"
            );
            let writable = pod
                .volumes
                .iter()
                .flatten()
                .filter_map(|v| v.persistent_volume_claim.as_ref());
            assert!(writable.into_iter().all(|c| c.read_only == Some(false)));
            let args = pod.containers[0].args.clone().unwrap_or_default();
            assert_eq!(
                args[..4],
                ["restore", "--dest=/data", "--part-of=restore-hello-1", last]
            );
        }

        let whole = app(json!({"replicas": 2}));
        let whole = AppRef::new(&whole).expect("app");
        assert!(matches!(
            restore_task(&whole, &location, "latest"),
            MoverTask::Restore { .. }
        ));
    }

    #[test]
    fn another_apps_backups_are_staged_in_parts_and_recorded_with_the_app_restored_into() {
        let mut spread = crate::fixtures::spread_app(json!({}));
        spread.spec.restore_from = serde_json::from_value(json!({"name": "old"})).expect("from");
        let location =
            crate::location::resolve(&spread.spec, &[], &[]).expect("object store location");
        let spread = AppRef::new(&spread).expect("app");
        // Whose backups (--name) and whose records (--into-app, when not the same app).
        let whose = |task: &MoverTask| {
            let job = mover_job(
                &spread,
                "restore-hello-1",
                task,
                "created",
                &location,
                &settings(),
            )
            .expect("job");
            let pod = job.spec.and_then(|s| s.template.spec).expect("pod");
            let args = pod.containers[0].args.clone().unwrap_or_default();
            let whose: Vec<String> = args
                .into_iter()
                .filter(|a| a.starts_with("--name=") || a.starts_with("--into-app="))
                .collect();
            (whose, job.metadata.annotations.unwrap_or_default())
        };
        let (commit, annotations) = whose(&MoverTask::initial_restore(&spread, &location));
        assert_eq!(commit, ["--name=hello"]);
        assert_eq!(annotations[names::RESTORE_SOURCE], "old");
        let part = |step| MoverTask::RestorePart {
            set: "restore-hello-1".into(),
            ordinal: 0,
            step,
        };
        let stage = part(RestoreStep::Stage {
            from: "latest".into(),
            if_exists: false,
            source: Some("old".into()),
        });
        assert_eq!(whose(&stage).0, ["--name=old", "--into-app=hello"]);
        assert_eq!(whose(&part(RestoreStep::Swap)).0, ["--name=hello"]);

        // One Job restoring another app's backups keeps its records with this app's too.
        let one = MoverTask::Restore {
            from: "latest".into(),
            if_exists: false,
            source: Some("old".into()),
        };
        assert_eq!(whose(&one).0, ["--name=old", "--into-app=hello"]);
    }

    #[test]
    fn an_option_like_restore_source_stays_a_value() {
        let app = app(json!({}));
        let app = AppRef::new(&app).expect("app");
        let task = MoverTask::Restore {
            from: "--target=/".into(),
            if_exists: false,
            source: None,
        };
        let args = task.args(&app, &node_root(), None);
        assert!(args.contains(&"--from=--target=/".to_string()), "{args:?}");
        assert!(!args.iter().any(|a| a == "--target=/"), "{args:?}");
    }

    #[test]
    fn an_object_store_job_mounts_no_target_and_reads_its_keys_from_the_apps_secret() {
        let spec = json!({"backup": {"target": {"objectStore": {
            "endpoint": "http://s3.test:8333", "bucket": "backups", "prefix": "team",
            "credentialsSecret": "s3-keys", "insecure": true,
            "endpointCA": {"name": "s3-ca", "key": "ca.crt"}
        }}}});
        let hello = app(spec);
        let location =
            crate::location::resolve(&hello.spec, &["/tmp/backup".into()], &[]).expect("location");
        let app = AppRef::new(&hello).expect("app");
        let job = mover_job(
            &app,
            "j",
            &MoverTask::Backup { reread: false },
            "requested",
            &location,
            &settings(),
        )
        .expect("job");
        let pod = job.spec.expect("spec").template.spec.expect("pod");
        let volumes: Vec<String> = pod
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.clone())
            .collect();
        assert_eq!(volumes, ["data-0"], "only the app's own claim is mounted");
        let container = &pod.containers[0];
        let args = container.args.clone().unwrap_or_default();
        for expected in [
            "--store-endpoint=http://s3.test:8333",
            "--store-bucket=backups",
            "--store-prefix=team",
            "--store-region=us-east-1",
            "--store-insecure",
            "--namespace=ns1",
            "--name=hello",
        ] {
            assert!(
                args.iter().any(|a| a == expected),
                "{expected} missing: {args:?}"
            );
        }
        let env = container.env.clone().unwrap_or_default();
        let from_secret: Vec<(String, String, String)> = env
            .iter()
            .filter_map(|e| {
                let key = e.value_from.as_ref()?.secret_key_ref.as_ref()?;
                Some((e.name.clone(), key.name.clone(), key.key.clone()))
            })
            .collect();
        assert_eq!(
            from_secret,
            [
                (
                    "AWS_ACCESS_KEY_ID".into(),
                    "s3-keys".into(),
                    "AWS_ACCESS_KEY_ID".into()
                ),
                (
                    "AWS_SECRET_ACCESS_KEY".into(),
                    "s3-keys".into(),
                    "AWS_SECRET_ACCESS_KEY".into()
                ),
                (
                    "HELLOSTATEFUL_STORE_CA".into(),
                    "s3-ca".into(),
                    "ca.crt".into()
                ),
            ]
        );
        assert_eq!(
            hellostateful_api::ObjectStoreTarget::KEY_ENV,
            [
                hellostateful_mover::objstore::ACCESS_KEY_ENV,
                hellostateful_mover::objstore::SECRET_KEY_ENV
            ],
            "the names the mover reads"
        );
        assert_eq!(
            hellostateful_api::ObjectStoreTarget::CA_ENV,
            hellostateful_mover::objstore::CA_ENV
        );
        // No key is ever on the command line.
        assert!(!args.iter().any(|a| a.contains("AWS_")), "{args:?}");
    }

    #[test]
    fn wipe_mounts_only_the_apps_volumes_and_purge_only_its_backups() {
        let app = app(json!({"replicas": 2}));
        let app = AppRef::new(&app).expect("app");
        let pod_of = |task: &MoverTask| {
            mover_job(&app, "j", task, "deleted", &node_root(), &settings())
                .expect("job")
                .spec
                .expect("spec")
                .template
                .spec
                .expect("pod")
        };
        let wipe = pod_of(&MoverTask::Wipe { replicas: 3 });
        assert_baseline(&wipe);
        let claims = claim_names(&wipe);
        assert_eq!(
            claims,
            ["data-hello-0", "data-hello-1", "data-hello-2"],
            "a replica scaled away has its volume wiped too"
        );
        assert_eq!(
            wipe.containers[0].args.as_ref().expect("args")[..2],
            ["wipe".to_string(), "--dest=/data".to_string()]
        );
        let purge = pod_of(&MoverTask::Purge);
        assert_baseline(&purge);
        let claims = claim_names(&purge);
        assert_eq!(claims, ["backups-hello"]);
    }

    #[test]
    fn cronjob_forbids_overlap_and_follows_suspend() {
        let app = app(json!({"backup": {"suspend": true}}));
        let app = AppRef::new(&app).expect("app");
        let cron = cronjob(&app, "*/5 * * * *", &node_root(), &settings(), false).expect("cron");
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

    #[test]
    fn a_stop_mode_backup_is_made_suspended_marked_and_bounded_scheduled_or_not() {
        let app = app(json!({"backup": {"consistency": {"mode": "stop", "maxStopSeconds": 120}}}));
        let app = AppRef::new(&app).expect("app");
        let requested = |app: &AppRef, name: &str, task: &MoverTask| {
            mover_job(app, name, task, "requested", &node_root(), &settings()).expect("job")
        };
        let task = MoverTask::Backup { reread: false };
        let job = requested(&app, "backup-hello-1", &task);
        assert_eq!(job.annotations()[names::STOPS_APP], "true");
        let spec = job.spec.expect("spec");
        assert_eq!(spec.suspend, Some(true), "let run once the app is stopped");
        assert_eq!(spec.active_deadline_seconds, Some(120));

        let cron = cronjob(&app, "*/5 * * * *", &node_root(), &settings(), false).expect("cron");
        let template = cron.spec.expect("spec").job_template;
        let annotations = template
            .metadata
            .expect("meta")
            .annotations
            .expect("marked");
        assert_eq!(annotations[names::STOPS_APP], "true");
        let spec = template.spec.expect("spec");
        assert_eq!(
            (spec.suspend, spec.active_deadline_seconds),
            (Some(true), Some(120))
        );

        let part = MoverTask::BackupPart {
            set: "backup-hello-1".into(),
            ordinal: 0,
            reread: false,
        };
        let job = requested(&app, "backup-hello-1-0", &part);
        assert!(
            !job.annotations().contains_key(names::STOPS_APP),
            "its set is"
        );
        let spec = job.spec.expect("spec");
        assert_eq!(
            (spec.suspend, spec.active_deadline_seconds),
            (None, Some(120))
        );

        let live = self::app(json!({}));
        let live = AppRef::new(&live).expect("app");
        let job = requested(&live, "backup-hello-1", &task);
        assert!(job.metadata.annotations.is_none());
        assert_eq!(
            job.spec.expect("spec").suspend,
            None,
            "a live backup runs at once"
        );
    }

    #[test]
    fn a_time_zone_goes_into_the_cronjobs_time_zone_field() {
        let app = app(json!({}));
        let app = AppRef::new(&app).expect("app");
        let cron = cronjob(
            &app,
            "TZ=Europe/Paris 0 3 * * 1-5",
            &node_root(),
            &settings(),
            false,
        )
        .expect("cron");
        let spec = cron.spec.expect("spec");
        assert_eq!(spec.schedule, "0 3 * * 1-5");
        assert_eq!(spec.time_zone.as_deref(), Some("Europe/Paris"));
        let plain = cronjob(&app, "@hourly", &node_root(), &settings(), false).expect("cron");
        assert_eq!(plain.spec.expect("spec").time_zone, None);
    }
}
