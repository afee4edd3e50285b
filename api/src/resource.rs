//! The `HelloStateful` custom resource (`hello-stateful.example.com/v1alpha1`).
//!
//! The three seed fields (`replicas`, `restoreFromExisting`, `backupSchedule`) keep their
//! 2018 names and meaning, so the seed manifests apply unchanged; every newer field is
//! optional and defaults to what the seed did.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::defaults;

/// The most replicas an app can have (the CRD's bound); no more parts of a backup or
/// restore are ever made for one.
pub const MAX_REPLICAS: i32 = 20;

/// A probe reaches its own pod only: with a host, the kubelet would connect from the node
/// to any address the tenant names (Pod Security baseline refuses it too, from 1.34).
/// (`size` rather than a comparison: its cost does not grow with the unbounded string.)
const PROBE_ON_ITS_POD: &str = "(!has(self.httpGet) || !has(self.httpGet.host) || size(self.httpGet.host) == 0) && (!has(self.tcpSocket) || !has(self.tcpSocket.host) || size(self.tcpSocket.host) == 0)";
const PROBE_ON_ITS_POD_MESSAGE: &str = "a probe takes no host: it reaches its own pod only";

/// Desired state of a HelloStateful application: the app, its storage and its backups.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "hello-stateful.example.com",
    version = "v1alpha1",
    kind = "HelloStateful",
    plural = "hellostatefuls",
    singular = "hellostateful",
    shortname = "hs",
    category = "all",
    namespaced,
    status = "HelloStatefulStatus",
    derive = "PartialEq",
    doc = "A stateful application whose data hellostateful backs up on a schedule and on demand, and restores when asked or when the application is created again.",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status", description = "Whether all replicas are ready"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas", description = "Desired replicas"),
    printcolumn(name = "Schedule", type_ = "string", json_path = ".spec.backupSchedule", description = "Backup schedule (cron)"),
    printcolumn(name = "Last Backup", type_ = "date", json_path = ".status.lastBackup.time", description = "When the newest backup finished"),
    printcolumn(name = "Restored", type_ = "boolean", json_path = ".status.isRestored", description = "Whether data was restored from a backup"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("self.metadata.name.size() <= 45").message("metadata.name must be at most 45 characters: the backup CronJob is named backup-<name> and CronJob names are limited to 52"),
    validation = Rule::new("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')").message("metadata.name must be a DNS-1035 label (lower-case letters, digits and '-', starting with a letter): it names the app's Service"),
)]
#[serde(rename_all = "camelCase")]
pub struct HelloStatefulSpec {
    /// Number of app pods. Each replica has its own volume and its own part of every backup.
    #[serde(default = "defaults::replicas")]
    #[schemars(range(min = 0, max = MAX_REPLICAS))]
    pub replicas: i32,

    /// When the app is created and a backup of this namespace/name exists, restore the newest
    /// backup into the new volumes before the app starts. Without a backup the app starts
    /// empty (status and an event say so).
    #[serde(default)]
    pub restore_from_existing: bool,

    /// Restore a backup of another app of this namespace into this one before it first
    /// starts (`kubectl hellostateful create NAME --from-backup OTHER[/ID]`): the other app
    /// may have been deleted, its backups outlive it. It is read once, when the app is
    /// created; a source without that backup keeps the app stopped and says so, and
    /// removing the field then starts it as restoreFromExisting would.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_from: Option<RestoreSource>,

    /// Cron schedule of automatic backups, for example "*/5 * * * *" or "@hourly"; a
    /// "TZ=Europe/Paris " prefix sets its time zone (the CronJob's timeZone, default the
    /// controller manager's). Omit it for no scheduled backups (on-demand backups still work).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    #[x_kube(validation = Rule::new("self.matches('^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|(TZ=[^ ]+ +)?[^ ]+( +[^ ]+){4})$')").message("backupSchedule must be a cron schedule with five fields, like \"*/5 * * * *\", or one of @hourly, @daily, @weekly, @monthly, @yearly"))]
    pub backup_schedule: Option<String>,

    /// Container image of the app. Default: busybox:1.36 running the 2018 app, which appends
    /// the date to stateful.log every 10 seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,

    /// Command of the app container. Default: a shell loop appending `date` to
    /// <mountPath>/stateful.log every 10 seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // Bounded in all: the reconciler keeps every app in memory, a tenant's as many as its
    // quota allows.
    #[schemars(length(min = 1, max = 64), inner(length(max = 4096)))]
    #[x_kube(validation = Rule::new("self.map(arg, size(arg)).sum() <= 8192").message("the command is at most 8192 characters in all"))]
    pub command: Option<Vec<String>>,

    /// Where the app's volume is mounted in its container. Default: /usr/share/hello.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 512))]
    #[x_kube(validation = Rule::new("self.startsWith('/') && !self.contains('..')").message("mountPath must be an absolute path without '..'"))]
    pub mount_path: Option<String>,

    /// Arguments of the app container (its image's CMD when no command is set), as in a
    /// Pod's container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), inner(length(max = 4096)))]
    #[x_kube(validation = Rule::new("self.map(arg, size(arg)).sum() <= 8192").message("the args are at most 8192 characters in all"))]
    pub args: Option<Vec<String>>,

    /// Environment variables of the app container, as in a Pod's container: values, or
    /// references to Secrets and ConfigMaps of the app's namespace and to the pod's fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub env: Option<Vec<k8s_openapi::api::core::v1::EnvVar>>,

    /// Secrets and ConfigMaps of the app's namespace whose keys become environment
    /// variables of the app container, as in a Pod's container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub env_from: Option<Vec<k8s_openapi::api::core::v1::EnvFromSource>>,

    /// Ports the app container listens on, as in a Pod's container (no hostPort or hostIP:
    /// the app never takes a port of its node). The app's Service exposes each of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "ports_schema")]
    pub ports: Option<Vec<k8s_openapi::api::core::v1::ContainerPort>>,

    // Boxed, like the probes below: the reconciler holds every app in memory, and most set
    // none of them.
    /// CPU and memory the app container requests and is limited to, as in a Pod's
    /// container (the namespace's LimitRange and ResourceQuota apply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("!has(self.claims) || size(self.claims) == 0").message("resources take no claims: the app's pods have no resource claims"))]
    pub resources: Option<Box<k8s_openapi::api::core::v1::ResourceRequirements>>,

    /// When an app pod is ready to serve, as in a Pod's container (the probe runs against
    /// the pod itself: no host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(PROBE_ON_ITS_POD).message(PROBE_ON_ITS_POD_MESSAGE))]
    pub readiness_probe: Option<Box<k8s_openapi::api::core::v1::Probe>>,

    /// When an app container is restarted, as in a Pod's container (no host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(PROBE_ON_ITS_POD).message(PROBE_ON_ITS_POD_MESSAGE))]
    pub liveness_probe: Option<Box<k8s_openapi::api::core::v1::Probe>>,

    /// How long an app container may take to start, as in a Pod's container (no host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(PROBE_ON_ITS_POD).message(PROBE_ON_ITS_POD_MESSAGE))]
    pub startup_probe: Option<Box<k8s_openapi::api::core::v1::Probe>>,

    /// The app's volumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageSpec>,

    /// Where backups go, how many are kept, and whether scheduled backups are paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupSpec>,

    /// Who the app's container runs as. Default: root; the container still drops every
    /// capability, runs with seccomp RuntimeDefault and cannot escalate, so it passes Pod
    /// Security baseline. With runAsNonRoot and a runAsUser it also passes restricted. Its
    /// volumes are then writable by that user: on node-directory volumes (no
    /// storageClassName) the reconciler gives each volume's root directory to runAsUser and
    /// to fsGroup (else runAsGroup) before the pods start; on a StorageClass, fsGroup does
    /// it where the volume type supports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<AppSecurityContext>,

    /// Labels a node must have to run the app's pods and its backup and restore Jobs, as in
    /// a Pod's nodeSelector. With node-directory volumes (no storageClassName) the data node
    /// is chosen once, when the volumes are made, among Ready, uncordoned nodes that match
    /// and whose taints the app tolerates; `kubernetes.io/hostname: NODE` pins one node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "node_selector_schema")]
    pub node_selector: Option<std::collections::BTreeMap<String, String>>,

    /// Taints the app's pods and its backup and restore Jobs tolerate, as in a Pod's
    /// tolerations: to run on a tainted node (a control plane, dedicated nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new("self.all(t, !has(t.operator) || t.operator in ['Exists', 'Equal'])").message("a toleration's operator is Exists or Equal"))]
    #[x_kube(validation = Rule::new("self.all(t, !has(t.effect) || t.effect in ['', 'NoSchedule', 'PreferNoSchedule', 'NoExecute'])").message("a toleration's effect is NoSchedule, PreferNoSchedule or NoExecute (or empty for all)"))]
    #[x_kube(validation = Rule::new("self.all(t, !has(t.operator) || t.operator != 'Exists' || !has(t.value) || t.value == '')").message("a toleration with operator Exists has no value"))]
    #[x_kube(validation = Rule::new("self.all(t, (has(t.key) && t.key != '') || (has(t.operator) && t.operator == 'Exists'))").message("a toleration without a key must have operator Exists"))]
    #[x_kube(validation = Rule::new("self.all(t, (!has(t.key) || size(t.key) <= 316) && (!has(t.value) || size(t.value) <= 63))").message("a toleration's key is at most 316 characters (a qualified name) and its value at most 63 (a label value)"))]
    pub tolerations: Option<Vec<k8s_openapi::api::core::v1::Toleration>>,
}

/// The backup a new app starts from: an app of the same namespace and one of its backups.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSource {
    /// The app whose backups are read, in this namespace (its backups are found where its
    /// target says: its own node directory, or this app's backup claim).
    #[schemars(length(min = 1, max = 45))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')").message("restoreFrom.name must be the name of an app: a DNS-1035 label"))]
    pub name: String,

    /// The backup id, like 20261129T150102Z. Default: the newest complete backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9_][-A-Za-z0-9._]*$')").message("restoreFrom.backupId must be a backup id like 20261129T150102Z (letters, digits, '-', '.', '_')"))]
    pub backup_id: Option<String>,
}

impl RestoreSource {
    /// The snapshot to restore, as the mover takes it: an id or `latest`.
    pub fn snapshot(&self) -> &str {
        self.backup_id.as_deref().unwrap_or("latest")
    }

    /// What it names, for people: "backup ID of app OTHER" or "the newest backup of app OTHER".
    pub fn describe(&self) -> String {
        match &self.backup_id {
            Some(id) => format!("backup {id} of app {}", self.name),
            None => format!("the newest backup of app {}", self.name),
        }
    }
}

/// At most 16 labels, each value a label value (the API server's rule for a Pod's
/// nodeSelector). Keys cannot be bounded in a CRD schema cheaply enough for CEL: they are
/// checked by `validate::spec`, in the plugin and in the reconciler's status.
fn node_selector_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "nullable": true,
        "maxProperties": 16,
        "additionalProperties": {
            "type": "string",
            "maxLength": 63,
            "x-kubernetes-validations": [{
                "rule": "self.matches('^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$')",
                "message": "nodeSelector values must be label values: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
            }],
        },
    })
}

/// At most 16 of a Pod's container ports, each containerPort and protocol once (a list map
/// keyed as a Pod's is: the API server checks it without a CEL rule's cost), and never a
/// port of the node. Names are unique too, which the API server checks on the StatefulSet.
fn ports_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut port = generator
        .subschema_for::<k8s_openapi::api::core::v1::ContainerPort>()
        .to_value();
    // A list map's keys must be required or defaulted: TCP, as for a Pod.
    port["properties"]["protocol"]["default"] = "TCP".into();
    schemars::json_schema!({
        "type": "array",
        "nullable": true,
        "maxItems": 16,
        "items": port,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
        "x-kubernetes-validations": [{
            "rule": "self.all(p, (!has(p.hostPort) || p.hostPort == 0) && (!has(p.hostIP) || size(p.hostIP) == 0))",
            "message": "ports take no hostPort or hostIP: the app never takes a port of its node",
        }],
    })
}

/// The identity of the app's container.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AppSecurityContext {
    /// User id of the app's process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub run_as_user: Option<i64>,
    /// Group id of the app's process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub run_as_group: Option<i64>,
    /// Group that owns the volume's files, where the volume's type supports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub fs_group: Option<i64>,
    /// Refuse to start the container as uid 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_non_root: Option<bool>,
}

/// The volumes of the app: one per replica.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    /// Size of each replica's volume, as a Kubernetes quantity (for example 1Gi). Default: 1Gi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32))]
    #[x_kube(validation = Rule::new("isQuantity(self) && quantity(self).isGreaterThan(quantity('0')) && quantity(self).compareTo(quantity('64Ti')) <= 0").message("storage.size must be a quantity above 0 and at most 64Ti, like 1Gi"))]
    pub size: Option<String>,

    /// StorageClass for dynamically provisioned volumes. Empty (the default): the reconciler
    /// makes one static hostPath PersistentVolume per replica under
    /// /tmp/hostpath-provisioner/<namespace>/<name>/<ordinal> on one node, as in 2018.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("self == '' || self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("storageClassName must be the name of a StorageClass: lower-case letters, digits, '-' and '.'"))]
    pub storage_class_name: Option<String>,
}

/// Backups of the app's volumes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// Where snapshots are written. Default: the node directory /tmp/backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<BackupTarget>,

    /// How many snapshots are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,

    /// Pause scheduled backups (on-demand backups still run).
    #[serde(default)]
    pub suspend: bool,

    /// How a backup gets a copy of data the app may be writing. Default: live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<Consistency>,

    /// How old, in seconds, the newest backup that read every file may get before the next
    /// backup, scheduled or on demand, reads every file again (as `kubectl hellostateful
    /// backup --full` does). Other backups trust a file whose size and times did not
    /// change, and a file written through mmap can change without moving them: this bounds
    /// how long such a stale copy is kept. 0: only on request. Default: 604800 (7 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 31622400))]
    pub full_read_every_seconds: Option<i32>,

    /// How old, in seconds, the newest successful backup (or, before the first, the app)
    /// may get before backups count as overdue (the BackupOverdue condition, its event and
    /// metric), with or without a schedule. Default: once two scheduled runs have passed
    /// without a successful backup (no schedule: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 31622400))]
    pub max_age_seconds: Option<i32>,
}

/// How a backup gets a consistent copy of the app's volumes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Consistency {
    /// live: copy while the app runs; a file that changes while it is read is kept as read
    /// and counted in status (lastBackup.inconsistentFiles). Right for an app that writes
    /// by appending or by renaming new files into place, like the 2018 log writer.
    /// stop: stop the app (its StatefulSet asks for 0 replicas), copy once no pod of it
    /// is left, then start it again: every file holds still while it is read, so a
    /// database's files are copied as after a clean shutdown. The app is down for the
    /// copy, at most maxStopSeconds after its pods stopped.
    #[serde(default)]
    pub mode: ConsistencyMode,

    /// With mode stop: the longest the copy may take once the app is stopped; a backup
    /// still copying then fails and the app starts again. Default: 900 (15 minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30, max = 86400))]
    pub max_stop_seconds: Option<i32>,
}

/// See `Consistency.mode`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ConsistencyMode {
    #[default]
    Live,
    Stop,
}

/// Where snapshots are written: a directory on the node, a PersistentVolumeClaim, or an
/// S3-compatible object store.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("[has(self.hostPath), has(self.persistentVolumeClaim), has(self.objectStore)].filter(x, x).size() <= 1").message("backup.target takes one of hostPath, persistentVolumeClaim or objectStore"))]
pub struct BackupTarget {
    /// A node directory that holds backups: one of the backup roots the cluster admin
    /// allows (the reconciler's --backup-roots; default /tmp/backup, the first root when
    /// omitted). Any other path is refused, and nothing is mounted. The app's backups go to
    /// <root>/<namespace>/<name>, which only this app's Jobs can reach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 512))]
    #[x_kube(validation = Rule::new("self.matches('^(/[A-Za-z0-9_][-A-Za-z0-9._]*)+$')").message("backup.target.hostPath must be a clean absolute path like /tmp/backup: no '.' or '..' components, no '//', no trailing '/'"))]
    pub host_path: Option<String>,

    /// Name of a PersistentVolumeClaim in the app's namespace that holds the snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub persistent_volume_claim: Option<String>,

    /// An S3-compatible object store (off the node: losing the node loses no backup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_store: Option<ObjectStoreTarget>,
}

/// An S3-compatible object store as the backup target. The app's objects go below
/// <bucket>/<prefix>/<namespace>/<name>/: file contents named by their BLAKE3 and shared
/// between snapshots, and one manifest per snapshot, written last.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStoreTarget {
    /// The S3 endpoint, https://host[:port] (http:// only with insecure: true). The cluster
    /// admin may restrict endpoints (the reconciler's --object-store-endpoints).
    #[schemars(length(min = 8, max = 512))]
    #[x_kube(validation = Rule::new("self.matches('^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/?$')").message("objectStore.endpoint must be http(s)://host[:port], with no path, user or query"))]
    pub endpoint: String,

    /// The bucket (created beforehand).
    #[schemars(length(min = 3, max = 63))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9][a-z0-9.-]*[a-z0-9]$')").message("objectStore.bucket must be a bucket name: lower-case letters, digits, '.' and '-'"))]
    pub bucket: String,

    /// Key prefix inside the bucket. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    #[x_kube(validation = Rule::new("self == '' || self.matches('^[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)*$')").message("objectStore.prefix must be '/'-separated segments of letters, digits, '.', '_' and '-', not starting with '.', with no leading, trailing or doubled '/'"))]
    pub prefix: Option<String>,

    /// The region requests are signed for. Default: us-east-1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub region: Option<String>,

    /// A Secret in the app's namespace with the keys AWS_ACCESS_KEY_ID and
    /// AWS_SECRET_ACCESS_KEY. Only this app's backup and restore Jobs read it.
    #[schemars(length(min = 1, max = 253))]
    pub credentials_secret: String,

    /// Allow a plain-HTTP endpoint (test clusters only: keys and data travel unencrypted).
    #[serde(default)]
    pub insecure: bool,

    /// The CA that signed an https endpoint's certificate, when it is not one of the public
    /// CAs the image trusts: a key of a Secret in the app's namespace holding PEM
    /// certificates. Default: the public CAs only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "endpointCA")]
    pub endpoint_ca: Option<SecretKeyRef>,
}

/// A key of a Secret in the app's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct SecretKeyRef {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key in it.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[-._a-zA-Z0-9]+$')").message("a Secret key is letters, digits, '-', '_' and '.'"))]
    pub key: String,
}

/// Retention of snapshots. The newest good snapshot is never deleted.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Retention {
    /// Keep this many newest snapshots and delete older ones after each successful backup.
    /// Default: 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub keep_last: Option<i32>,
}

/// Observed state of a HelloStateful application.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelloStatefulStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Ready, Restoring, BackingUp, BackupSucceeded and BackupFailed, with reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// The PersistentVolumeClaims that hold the app's data, one per replica.
    #[serde(default)]
    pub backend_volumes: Vec<String>,

    /// True once a restore from a backup has really finished (never while it runs).
    #[serde(default)]
    pub is_restored: bool,

    /// Pods of the app that are ready.
    #[serde(default)]
    pub ready_replicas: i32,

    /// The node that holds the app's data in static hostPath mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,

    /// The newest successful backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<LastBackup>,

    /// When the newest successful backup that read every file again finished (RFC 3339);
    /// the next one is due backup.fullReadEverySeconds later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_full_read: Option<String>,

    /// Acknowledgement of the newest on-demand backup request (annotation
    /// hello-stateful.example.com/backup-requested).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_request: Option<RequestStatus>,

    /// Acknowledgement of the newest on-demand restore request (annotation
    /// hello-stateful.example.com/restore-requested).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_request: Option<RequestStatus>,

    /// The Job of a restore that began replacing the live data and did not finish: some
    /// volumes may hold the restored data and others the old, so the app does not run until
    /// a restore succeeds. Kept across requests: a later one that fails before it replaced
    /// anything leaves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unfinished_restore: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The newest successful backup.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastBackup {
    /// Snapshot id, usable with `restore --from`.
    pub id: String,
    /// When the backup finished (RFC 3339).
    pub time: String,
    /// Bytes in the snapshot.
    pub bytes: u64,
    /// Files in the snapshot.
    pub files: u64,
    /// Bytes copied (the rest are hard links to the previous snapshot).
    #[serde(default)]
    pub new_bytes: u64,
    /// How long the backup took, in milliseconds.
    pub duration_ms: u64,
    /// Files that kept changing while they were copied: kept as read, they may mix old
    /// and new contents (the BackupSucceeded condition names them).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub inconsistent_files: u64,
    /// The Job that made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// How many snapshots its retention left, itself included (as of this backup: a
    /// `backups delete` since is not counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<u64>,
    /// The oldest of them, usable with `restore --from`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_snapshot: Option<String>,
}

/// Where an on-demand request stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RequestPhase {
    /// Accepted, waiting for something else to finish first (the message says what).
    Pending,
    /// Its Job runs.
    Running,
    /// Finished successfully.
    Succeeded,
    /// Finished with an error (the message says why).
    Failed,
}

impl RequestPhase {
    /// Succeeded and Failed are final: the request's token has been acknowledged.
    pub fn is_final(self) -> bool {
        matches!(self, RequestPhase::Succeeded | RequestPhase::Failed)
    }
}

/// Acknowledgement of an on-demand action requested by an annotation token.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestStatus {
    /// The annotation value this status answers.
    pub token: String,
    /// Pending, Running, Succeeded or Failed.
    pub phase: RequestPhase,
    /// The Job that carries the action out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The snapshot written (backup) or read (restore).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_id: Option<String>,
    /// What happened, or what the request waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl HelloStatefulSpec {
    /// The app's image, defaulted.
    pub fn image(&self) -> &str {
        self.image.as_deref().unwrap_or(defaults::IMAGE)
    }

    /// Where the volume is mounted in the app container, defaulted.
    pub fn mount_path(&self) -> &str {
        self.mount_path.as_deref().unwrap_or(defaults::MOUNT_PATH)
    }

    /// The app's command, defaulted to the 2018 logging loop.
    pub fn command(&self) -> Vec<String> {
        match &self.command {
            Some(command) => command.clone(),
            None => defaults::command(self.mount_path()),
        }
    }

    /// Size of each replica's volume, defaulted.
    pub fn storage_size(&self) -> &str {
        self.storage
            .as_ref()
            .and_then(|s| s.size.as_deref())
            .unwrap_or(defaults::STORAGE_SIZE)
    }

    /// The StorageClass, or None for static hostPath volumes.
    pub fn storage_class(&self) -> Option<&str> {
        self.storage
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref())
            .filter(|class| !class.is_empty())
    }

    /// Where snapshots are written, defaulted to the node directory /tmp/backup.
    pub fn backup_target(&self) -> ResolvedTarget {
        let target = self.backup.as_ref().and_then(|b| b.target.as_ref());
        match target {
            Some(BackupTarget {
                object_store: Some(store),
                ..
            }) => ResolvedTarget::ObjectStore(store.clone()),
            Some(BackupTarget {
                persistent_volume_claim: Some(claim),
                ..
            }) => ResolvedTarget::Claim(claim.clone()),
            Some(BackupTarget {
                host_path: Some(path),
                ..
            }) => ResolvedTarget::HostPath(path.clone()),
            _ => ResolvedTarget::HostPath(defaults::BACKUP_HOST_PATH.to_string()),
        }
    }

    /// How many snapshots retention keeps, defaulted.
    pub fn keep_last(&self) -> i32 {
        self.backup
            .as_ref()
            .and_then(|b| b.retention.as_ref())
            .and_then(|r| r.keep_last)
            .unwrap_or(defaults::KEEP_LAST)
    }

    /// How old the newest successful backup may get before backups are overdue, if the
    /// spec says (else two scheduled runs decide).
    pub fn max_backup_age(&self) -> Option<chrono::TimeDelta> {
        let seconds = self.backup.as_ref()?.max_age_seconds?;
        chrono::TimeDelta::try_seconds(i64::from(seconds))
    }

    /// How old the newest backup that read every file may get, defaulted; None: only on
    /// request.
    pub fn full_read_every(&self) -> Option<std::time::Duration> {
        let seconds = self
            .backup
            .as_ref()
            .and_then(|b| b.full_read_every_seconds)
            .unwrap_or(defaults::FULL_READ_EVERY_SECONDS);
        u64::try_from(seconds)
            .ok()
            .filter(|s| *s > 0)
            .map(std::time::Duration::from_secs)
    }

    /// Whether scheduled backups are paused.
    pub fn backups_suspended(&self) -> bool {
        self.backup.as_ref().is_some_and(|b| b.suspend)
    }

    /// With backup.consistency.mode stop: the longest a backup may copy while the app is
    /// stopped for it, defaulted. None: backups copy while the app runs.
    pub fn stop_for_backup(&self) -> Option<i32> {
        let consistency = self.backup.as_ref()?.consistency.as_ref()?;
        (consistency.mode == ConsistencyMode::Stop).then(|| {
            consistency
                .max_stop_seconds
                .unwrap_or(defaults::MAX_STOP_SECONDS)
        })
    }
}

impl ObjectStoreTarget {
    /// The environment variables the mover reads the keys from, each filled from the key of
    /// the same name in `credentialsSecret`.
    pub const KEY_ENV: [&str; 2] = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"];
    /// The environment variable the mover reads `endpointCA`'s certificates from.
    pub const CA_ENV: &str = "HELLOSTATEFUL_STORE_CA";

    /// The mover's environment: the keys from `credentialsSecret`, and the CA from
    /// `endpointCA`, both Secrets of the app's namespace.
    pub fn mover_env(&self) -> Vec<k8s_openapi::api::core::v1::EnvVar> {
        use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, SecretKeySelector};
        let from_secret = |env: &str, secret: &str, key: &str| EnvVar {
            name: env.to_string(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.to_string(),
                    key: key.to_string(),
                    optional: None,
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        };
        let mut env: Vec<EnvVar> = Self::KEY_ENV
            .iter()
            .map(|key| from_secret(key, &self.credentials_secret, key))
            .collect();
        if let Some(ca) = &self.endpoint_ca {
            env.push(from_secret(Self::CA_ENV, &ca.name, &ca.key));
        }
        env
    }

    /// The mover's options naming this store, in `--flag=value` form (no value can be
    /// taken for an option). The keys are never among them.
    pub fn mover_args(&self) -> Vec<String> {
        let mut args = vec![
            format!("--store-endpoint={}", self.endpoint),
            format!("--store-bucket={}", self.bucket),
            format!(
                "--store-prefix={}",
                self.prefix.as_deref().unwrap_or_default()
            ),
            format!(
                "--store-region={}",
                self.region.as_deref().unwrap_or(defaults::STORE_REGION)
            ),
        ];
        if self.insecure {
            args.push("--store-insecure".into());
        }
        args
    }

    /// Where an app's objects are, in words: `object store https://s3.example.com, s3://bucket/prefix/ns/name`.
    pub fn describe(&self, namespace: &str, name: &str) -> String {
        let prefix = self
            .prefix
            .as_deref()
            .filter(|p| !p.is_empty())
            .map(|p| format!("{p}/"))
            .unwrap_or_default();
        format!(
            "object store {}, s3://{}/{prefix}{namespace}/{name}",
            self.endpoint, self.bucket
        )
    }
}

/// The backup target after defaults.
#[derive(Clone, Debug, PartialEq)]
pub enum ResolvedTarget {
    /// A directory on the node.
    HostPath(String),
    /// A PersistentVolumeClaim in the app's namespace.
    Claim(String),
    /// An S3-compatible object store.
    ObjectStore(ObjectStoreTarget),
}
