//! The command line: clap derive structures that mirror kubectl's flags and habits.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use clap_complete::Shell;
use hellostateful_api::{RestoreSource, SecretKeyRef, validate};

const ABOUT: &str = "Run a stateful app on Kubernetes and back up and restore its data";

const LONG_ABOUT: &str = "kubectl hellostateful runs a stateful app on Kubernetes (a \
HelloStateful resource: a StatefulSet with one volume per replica) and backs up and restores \
its data, on a schedule and on demand. An in-cluster reconciler does the work; this plugin \
creates apps, asks for backups and restores by annotation, and shows what happened.";

const MAIN_EXAMPLES: &str = "Examples:
  # Install the CRD and the reconciler, then create an app backed up every 5 minutes
  kubectl hellostateful install --wait
  kubectl hellostateful create hello --schedule '*/5 * * * *' --restore-from-existing

  # See apps and the health of one
  kubectl hellostateful list -A
  kubectl hellostateful status hello

  # Back up now, list the backups, restore the newest
  kubectl hellostateful backup hello
  kubectl hellostateful backups hello
  kubectl hellostateful restore hello --from latest";

/// `kubectl hellostateful`: the command line.
#[derive(Parser, Debug)]
#[command(
    name = "kubectl-hellostateful",
    bin_name = "kubectl hellostateful",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = MAIN_EXAMPLES,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every command takes, as kubectl spells them; help lists them apart from each
/// command's own, as `kubectl options` does.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Global options (as kubectl takes them)")]
pub struct GlobalArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, merged, else ~/.kube/config)
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: the current context)
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The kubeconfig cluster to use (default: the context's)
    #[arg(long, global = true, value_name = "NAME")]
    pub cluster: Option<String>,
    /// The kubeconfig user to use (default: the context's)
    #[arg(long, global = true, value_name = "NAME")]
    pub user: Option<String>,
    /// Bearer token for the API server (instead of the kubeconfig user's)
    #[arg(long, global = true, value_name = "TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Act as this user (impersonation: needs the `impersonate` verb)
    #[arg(long = "as", global = true, value_name = "USER")]
    pub as_user: Option<String>,
    /// Act as this group too (repeat for more; needs --as)
    #[arg(
        long = "as-group",
        global = true,
        value_name = "GROUP",
        requires = "as_user"
    )]
    pub as_group: Vec<String>,
    /// Longest wait for one answer of the API server, e.g. 30s or 1m (0: no limit)
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_duration)]
    pub request_timeout: Option<Duration>,
    /// Namespace of the app (default: the context's namespace, else "default")
    #[arg(short = 'n', long, global = true, value_name = "NS")]
    pub namespace: Option<String>,
    /// Output format: table, wide, json, yaml or name (not every command takes every one)
    #[arg(short = 'o', long, global = true, value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
    /// Never colour the output (colour is also off for NO_COLOR and when stdout is not a terminal)
    #[arg(long, global = true)]
    pub no_color: bool,
    /// Say more about what is done: -v 1 names the cluster and the requests, -v 2 more
    /// (-v N, -v=N, --v=N, as kubectl takes it)
    #[arg(
        short = 'v',
        long = "v",
        global = true,
        value_name = "LEVEL",
        default_value_t = 0
    )]
    pub verbose: u8,
}

/// `-o` values.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// Aligned columns (the default)
    Table,
    /// Aligned columns with more of them
    Wide,
    /// JSON
    Json,
    /// YAML
    Yaml,
    /// resource/name only
    Name,
}

impl Command {
    /// Whether the command honours `-o format`: `wide` only makes sense for tables of apps,
    /// and a few commands print no object at all. Anything else is refused before running.
    pub fn honours(&self, format: OutputFormat) -> bool {
        match self {
            Command::List(_) | Command::Get(_) | Command::Complete { .. } => true,
            Command::Logs(_) | Command::Uninstall(_) | Command::Completion { .. } => {
                format == OutputFormat::Table
            }
            _ => format != OutputFormat::Wide,
        }
    }
}

/// `--backup-consistency` values (spec.backup.consistency.mode).
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackupConsistency {
    Live,
    Stop,
}

/// `--dry-run` values, as kubectl.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DryRun {
    /// Really do it
    None,
    /// Print what would be sent, without contacting the cluster
    Client,
    /// Send it with dryRun=All: the API server validates it and persists nothing
    Server,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a HelloStateful app
    #[command(
        long_about = "Create a HelloStateful app: a StatefulSet running the app (by default \
busybox appending the date to stateful.log every 10 s), one volume per replica, and a backup \
CronJob when a schedule is given. Fails if the app already exists. When stdin is a terminal \
and no --schedule is given, asks for one (empty for none); never asks without a terminal.",
        after_help = "Examples:
  # The 2018 walkthrough: one replica, a backup every 5 minutes, restore on re-creation
  kubectl hellostateful create hello --schedule '*/5 * * * *' --restore-from-existing

  # A new app from a backup of app hello (hello may have been deleted)
  kubectl hellostateful create hello-copy --from-backup hello/20261129T150102Z

  # Three replicas on dynamically provisioned volumes, keep the last 3 backups
  kubectl hellostateful create web -n prod --replicas 3 --storage-class standard --size 5Gi --keep-last 3

  # Backups off the node, in an S3 bucket, with the keys of Secret s3-keys of the namespace
  kubectl hellostateful create hello --schedule @hourly --object-store-endpoint https://s3.example.com \\
    --object-store-bucket backups --object-store-secret s3-keys

  # Print the resource without creating it, or let the API server validate it
  kubectl hellostateful create hello --schedule @hourly --dry-run=client -o yaml
  kubectl hellostateful create hello --schedule @hourly --dry-run=server"
    )]
    Create(Box<CreateArgs>),

    /// List HelloStateful apps
    #[command(
        visible_alias = "ls",
        long_about = "List HelloStateful apps in the namespace (or all namespaces with -A): \
readiness, replicas, backup schedule, age of the last backup, whether data was restored.",
        after_help = "Examples:
  kubectl hellostateful list
  kubectl hellostateful list -A -o wide
  kubectl hellostateful list -o json"
    )]
    List(ListArgs),

    /// Show one HelloStateful app, or list them all
    #[command(
        long_about = "Show one HelloStateful app as a table row (or -o json|yaml|name), or \
every app of the namespace when no name is given.",
        after_help = "Examples:
  kubectl hellostateful get hello
  kubectl hellostateful get hello -o yaml
  kubectl hellostateful get -A -o name"
    )]
    Get(GetArgs),

    /// Describe an app: its children and their health, conditions, backups, events
    #[command(
        visible_alias = "describe",
        long_about = "Describe an app and everything it is made of: the StatefulSet and its \
pods, the volumes and what they are bound to, the backup CronJob and running Jobs, the \
conditions, the last backup, any backup or restore in flight, and recent events.",
        after_help = "Examples:
  kubectl hellostateful status hello
  kubectl hellostateful describe hello -n prod
  kubectl hellostateful status hello -o yaml"
    )]
    Status(NameArgs),

    /// Back up an app now
    #[command(
        long_about = "Ask the reconciler for one backup now (by a new token in the \
hello-stateful.example.com/backup-requested annotation), then wait (the default, with or \
without a terminal) until the reconciler reports the result: prints the backup id and exits \
0 on success, 1 on failure or timeout. A timeout rolls nothing back: the backup goes on and \
`status` shows how it ends. --wait=false prints the request (its token; -o json|yaml for \
all of it) and returns.",
        after_help = "Examples:
  kubectl hellostateful backup hello
  kubectl hellostateful backup hello --timeout 30m
  # Ask and return at once
  kubectl hellostateful backup hello --wait=false"
    )]
    Backup(BackupArgs),

    /// List an app's backups; describe or delete one
    #[command(
        long_about = "List the complete backups (snapshots) of an app, newest first: id, \
time, size, files, and bytes new in each; `backups describe NAME ID` shows one in full and \
`backups delete NAME ID` deletes one. Each reads the backups with a short-lived pod that \
runs the reconciler's image (or --image) in the app's namespace, then deletes it. The pod \
mounts only a claim: for a node directory the app's own backup claim backups-NAME (which \
outlives the app, so this works after the app is deleted too, on the node that holds the \
backups), else the backup PersistentVolumeClaim. Without a backup claim no backup was ever \
made, and nothing is run. For an object store the pod mounts nothing and gets the keys of the \
app's Secret: it runs only if the endpoint is one the cluster admin allows, read from the \
objectStoreEndpoints of ConfigMap hellostateful-system/hellostateful-settings (empty: any; \
else the same text, trailing '/' aside). When that ConfigMap cannot be read (it does not \
exist, or you may not get it), no pod is run against an object store: ask the admin for \
`get` on it.",
        after_help = "Examples:
  kubectl hellostateful backups hello
  kubectl hellostateful backups hello -o json
  kubectl hellostateful backups describe hello 20261129T150102Z
  kubectl hellostateful backups delete hello 20261129T150102Z --yes",
        args_conflicts_with_subcommands = true,
        subcommand_negates_reqs = true
    )]
    Backups(BackupsArgs),

    /// Check every checksum of a backup
    #[command(
        long_about = "Recompute the checksum of every file of one backup (default: the \
newest) and compare it with the backup's sealed manifest, in a short-lived pod in the app's \
namespace (as `backups` runs, and against an object store only one the cluster admin allows, \
checked as `backups` does). Prints each damaged, missing or unexpected file and exits 1 if \
there is any; exits 0 when every file matches. A restore runs the same check before it \
touches live data.",
        after_help = "Examples:
  kubectl hellostateful verify hello
  kubectl hellostateful verify hello 20261129T150102Z -o json"
    )]
    Verify(VerifyArgs),

    /// Restore an app's data from a backup
    #[command(
        long_about = "Restore an app's data from a backup: the reconciler scales the app to \
0, waits for its pods to be gone, overwrites every replica's volume with the snapshot, and \
starts the app again. Asks for confirmation on a terminal; without a terminal it refuses \
unless --yes is given. Waits until the reconciler reports the result (--wait=false to \
return once it is asked for).",
        after_help = "Examples:
  kubectl hellostateful restore hello
  kubectl hellostateful restore hello --from 20261129T150102Z
  # In a script
  kubectl hellostateful restore hello --from latest --yes"
    )]
    Restore(RestoreArgs),

    /// Delete an app and wipe its live data (its backups are kept unless --delete-backups)
    #[command(
        long_about = "Delete a HelloStateful app with its StatefulSet, Service, CronJob and \
Jobs, and wait until the reconciler has cleaned up (--wait=false to return at once). On \
static volumes the reconciler wipes the app's live data: what is on them is gone. Claims of \
a StorageClass are deleted with the app, and their data as the class's reclaim policy says \
(Delete, the usual one: gone for good). Its backups are kept \
(and, for a node directory, its backup claim backups-NAME): create the app again with \
--restore-from-existing to get its data back. With --delete-backups the reconciler deletes \
the backups as well, and nothing of the app can be recovered. Warns when the reconciler is \
not running (its finalizer keeps the app until it runs). Asks for confirmation on a \
terminal; without a terminal needs --yes.",
        after_help = "Examples:
  kubectl hellostateful delete hello
  kubectl hellostateful delete hello -n prod --yes
  # Delete the app and every backup of it, for good
  kubectl hellostateful delete hello --delete-backups --yes"
    )]
    Delete(DeleteArgs),

    /// Write one archive with everything a bug report about an app needs
    #[command(
        long_about = "Write a .tar.gz with everything a bug report about an app needs, as \
`kubectl cnpg report` and `velero debug` do: the app with its spec, status and conditions, \
its children (StatefulSet, Service, CronJob, Jobs, pods, claims, volumes), the events of \
the app and its children, the logs of its pods and mover Jobs, the reconciler's log, and \
the versions. No Secret is read. What you may not read (the reconciler's namespace, \
cluster-scoped volumes) is listed in the archive's README.txt and in the output, and the \
rest is still written. Works for a deleted app too, with what is left of it.",
        after_help = "Examples:
  kubectl hellostateful report hello
  kubectl hellostateful report hello -f /tmp/hello-report.tar.gz
  tar -tzf hellostateful-report-default-hello-*.tar.gz"
    )]
    Report(ReportArgs),

    /// Print the app's stateful.log
    #[command(
        long_about = "Print the app's log file (<mountPath>/stateful.log) from one replica, \
as `kubectl exec NAME-0 -c app -- tail` would.",
        after_help = "Examples:
  kubectl hellostateful logs hello
  kubectl hellostateful logs hello --tail 50 --replica 1
  kubectl hellostateful logs hello --tail=-1
  kubectl hellostateful logs hello -f"
    )]
    Logs(LogsArgs),

    /// Install the CRD, RBAC and reconciler into the cluster
    #[command(
        long_about = "Install (or upgrade) the HelloStateful CRD, the reconciler's namespace \
hellostateful-system, its RBAC, its settings (ConfigMap hellostateful-settings: the node \
directories where backups may live, the object store endpoints they may go to, and the image \
of backup and restore Jobs), a ValidatingAdmissionPolicy that holds the reconciler to those \
settings (Kubernetes 1.30 or later), and its Deployment, from manifests embedded in this \
binary, by server-side apply (field manager kubectl-hellostateful). Only the cluster admin \
chooses node paths: an app's backups go to <root>/<namespace>/<name> under one of the \
allowed roots. --object-store-endpoints lists the object stores an app's spec may name \
(each matches only as the same text, trailing '/' aside: scheme, host and port must all be \
the same); by default any, so a tenant may send its keys and data anywhere: on a cluster \
shared with untrusted tenants, list them. The reconciler refuses an app naming another store, \
and this plugin runs no pod against one. An upgrade without --backup-roots or \
--object-store-endpoints keeps what the cluster has, and every upgrade keeps the settings' \
moverStartSeconds; a change of the settings restarts the reconciler. Waits for the CRD to be \
established and for the reconciler to be available (--wait=false returns once applied); exits \
non-zero with the pod's own reason when it cannot start, such as an image the nodes cannot \
pull. Prints the allowed backup roots and object store endpoints, and the image.",
        after_help = "Examples:
  kubectl hellostateful install
  kubectl hellostateful install --image registry.example.com/hellostateful-reconciler:0.2.0
  # Allow backups under two node directories
  kubectl hellostateful install --backup-roots /tmp/backup,/srv/backups
  # Allow only these object stores (\"\" allows any again)
  kubectl hellostateful install --object-store-endpoints https://s3.example.com,http://minio.storage:9000
  # Print the manifests instead
  kubectl hellostateful install --dry-run -o yaml"
    )]
    Install(InstallArgs),

    /// Remove the reconciler (and with --include-crd the CRD and every app)
    #[command(
        long_about = "Remove the reconciler: its Deployment, settings, admission policy, RBAC \
and namespace. The CRD and \
the apps stay unless --include-crd is given: deleting the CRD deletes every HelloStateful \
app in the cluster (their backups are kept). Asks on a terminal; without one needs --yes; \
--include-crd always needs --yes.",
        after_help = "Examples:
  kubectl hellostateful uninstall
  kubectl hellostateful uninstall --include-crd --yes"
    )]
    Uninstall(UninstallArgs),

    /// Print the plugin's and the reconciler's versions
    #[command(after_help = "Examples:
  kubectl hellostateful version
  kubectl hellostateful version -o json")]
    Version,

    /// Print a shell completion script
    #[command(
        long_about = "Print a completion script for bash, zsh or fish. Completes the \
kubectl-hellostateful command.",
        after_help = "Examples:
  kubectl-hellostateful completion bash > /etc/bash_completion.d/kubectl-hellostateful
  kubectl-hellostateful completion zsh > \"${fpath[1]}/_kubectl-hellostateful\"
  kubectl-hellostateful completion fish > ~/.config/fish/completions/kubectl-hellostateful.fish"
    )]
    Completion {
        /// The shell
        #[arg(value_enum)]
        shell: Shell,
    },

    /// Completion candidates for kubectl (run by kubectl_complete-hellostateful)
    #[command(name = "__complete", hide = true)]
    Complete {
        /// The words after `kubectl hellostateful`; the last is being completed
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        words: Vec<String>,
    },
}

/// `create`.
#[derive(Args, Debug, Clone)]
pub struct CreateArgs {
    /// Name of the app (a DNS-1035 label of at most 45 characters)
    pub name: String,
    /// Number of app pods, each with its own volume
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(0..=20))]
    pub replicas: i32,
    /// Cron schedule of automatic backups, like "*/5 * * * *" or @hourly (empty: none)
    #[arg(long, value_name = "CRON")]
    pub schedule: Option<String>,
    /// Restore the newest backup of this namespace/name before the app first starts
    #[arg(long)]
    pub restore_from_existing: bool,
    /// Start from a backup of another app of the namespace, which may have been deleted:
    /// its newest backup (OTHER) or the one named (OTHER/ID), restored before the app first
    /// starts; `kubectl hellostateful backups OTHER` lists them
    #[arg(long, value_name = "OTHER[/ID]", value_parser = parse_backup_source,
          conflicts_with = "restore_from_existing")]
    pub from_backup: Option<RestoreSource>,
    /// Container image of the app (default busybox:1.36 running the logging loop)
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Size of each replica's volume, like 1Gi
    #[arg(long, value_name = "QUANTITY")]
    pub size: Option<String>,
    /// StorageClass for dynamic volumes (default: static hostPath volumes on one node)
    #[arg(long, value_name = "CLASS")]
    pub storage_class: Option<String>,
    /// Node label the app's pods and Jobs need, like kubernetes.io/hostname=node-1 (repeat
    /// for several); the data node is chosen among matching nodes
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_label)]
    pub node_selector: Vec<(String, String)>,
    /// Environment variable of the app's container, as `kubectl run --env` (repeat for
    /// several; spec.env takes references to Secrets and ConfigMaps too)
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Port the app's container listens on, exposed by its Service, as `kubectl run --port`
    /// (repeat for several)
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(i32).range(1..=65535))]
    pub port: Vec<i32>,
    /// How many backups retention keeps (default 10)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(1..=1000))]
    pub keep_last: Option<i32>,
    /// live: copy while the app runs (files that change meanwhile are counted in status);
    /// stop: stop the app for each backup and start it again after, so that a database's
    /// files are copied as after a clean shutdown (spec.backup.consistency.mode)
    #[arg(long, value_enum, value_name = "MODE")]
    pub backup_consistency: Option<BackupConsistency>,
    /// Read every file again in the next backup once the newest that did is this old (like
    /// 24h or 168h; 0: only on request, `backup --full`); default a week, as files written
    /// through mmap can change unseen (spec.backup.fullReadEverySeconds)
    #[arg(long, value_name = "DURATION", value_parser = parse_full_read_every)]
    pub full_read_every: Option<i32>,
    /// Count backups as overdue (BackupOverdue, its event, metric and alert) once the newest
    /// successful one is this old (like 26h; 1m to 366 days), with or without a schedule;
    /// default: two scheduled runs missed (spec.backup.maxAgeSeconds)
    #[arg(long, value_name = "DURATION", value_parser = parse_max_backup_age)]
    pub max_backup_age: Option<i32>,
    /// Node directory that holds backups: a clean absolute path that is one of the backup
    /// roots the cluster admin allows (default /tmp/backup); backups go to DIR/<namespace>/<name>
    #[arg(long, value_name = "DIR", conflicts_with = "backup_target_pvc")]
    pub backup_target_host_path: Option<String>,
    /// PersistentVolumeClaim in the namespace that holds backups instead of a node directory
    #[arg(long, value_name = "CLAIM")]
    pub backup_target_pvc: Option<String>,
    /// none: create; client: print without sending; server: let the API server validate only
    #[arg(long, value_enum, value_name = "MODE", num_args = 0..=1, require_equals = true,
          default_missing_value = "client", default_value = "none")]
    pub dry_run: DryRun,
    // Last: its heading holds for the flags after it.
    #[command(flatten)]
    pub object_store: ObjectStoreArgs,
}

/// `create`: an S3-compatible object store as the backup target (spec.backup.target.objectStore).
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Object store target (backups off the node)")]
pub struct ObjectStoreArgs {
    /// S3 endpoint that holds backups instead of a node directory, https://host[:port]
    #[arg(long, value_name = "URL", requires_all = ["object_store_bucket", "object_store_secret"],
          conflicts_with_all = ["backup_target_host_path", "backup_target_pvc"])]
    pub object_store_endpoint: Option<String>,
    /// Bucket of the object store (made beforehand)
    #[arg(long, value_name = "BUCKET", requires = "object_store_endpoint")]
    pub object_store_bucket: Option<String>,
    /// Key prefix in the bucket (backups go below PREFIX/<namespace>/<name>/)
    #[arg(long, value_name = "PREFIX", requires = "object_store_endpoint")]
    pub object_store_prefix: Option<String>,
    /// Region requests are signed for (default us-east-1)
    #[arg(long, value_name = "REGION", requires = "object_store_endpoint")]
    pub object_store_region: Option<String>,
    /// Secret of the namespace with the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY
    #[arg(long, value_name = "SECRET", requires = "object_store_endpoint")]
    pub object_store_secret: Option<String>,
    /// CA of an https endpoint whose certificate no public CA signed: a key of a Secret of
    /// the namespace holding PEM certificates
    #[arg(long, value_name = "SECRET/KEY", value_parser = parse_secret_key,
          requires = "object_store_endpoint")]
    pub object_store_ca: Option<SecretKeyRef>,
    /// Allow an http:// endpoint (test clusters only: keys and data travel unencrypted)
    #[arg(long, requires = "object_store_endpoint")]
    pub object_store_insecure: bool,
}

/// `list`.
#[derive(Args, Debug, Clone)]
pub struct ListArgs {
    /// List apps of every namespace
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only apps whose labels match this selector (like app=web,tier!=cache)
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
}

/// `get`.
#[derive(Args, Debug, Clone)]
pub struct GetArgs {
    /// The app (default: every app of the namespace)
    pub name: Option<String>,
    #[command(flatten)]
    pub list: ListArgs,
}

/// Commands that take only a name.
#[derive(Args, Debug, Clone)]
pub struct NameArgs {
    /// Name of the app
    pub name: String,
}

/// The image of the pod that reads or changes backups.
#[derive(Args, Debug, Clone, Default)]
pub struct ImageArgs {
    /// Image of the pod that reads the backups (default: the reconciler's, or the one
    /// `install` deploys when the reconciler cannot be read; to delete from a node
    /// directory, the one its backup claim names, the only one allowed to write there)
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
}

/// `backups`.
#[derive(Args, Debug, Clone)]
pub struct BackupsArgs {
    #[command(subcommand)]
    pub action: Option<BackupsAction>,
    /// Name of the app whose backups to list
    #[arg(required = true)]
    pub name: Option<String>,
    #[command(flatten)]
    pub image: ImageArgs,
}

/// What `backups` does besides listing.
#[derive(Subcommand, Debug, Clone)]
pub enum BackupsAction {
    /// Show one backup in full: files, sizes, new bytes, duration, replicas, manifest
    #[command(after_help = "Examples:
  kubectl hellostateful backups describe hello 20261129T150102Z
  kubectl hellostateful backups describe hello latest -o json")]
    Describe(BackupRef),
    /// Delete one backup (the newest good one only with --force)
    #[command(
        long_about = "Delete one backup of an app. The newest good backup is refused unless \
--force: a restore and the next incremental backup need it. Files it shares with other \
backups (hard links) stay in those. Asks on a terminal; without one needs --yes.",
        after_help = "Examples:
  kubectl hellostateful backups delete hello 20261129T150102Z
  kubectl hellostateful backups delete hello 20261129T150102Z --yes"
    )]
    Delete(DeleteBackupArgs),
}

/// One backup of one app.
#[derive(Args, Debug, Clone)]
pub struct BackupRef {
    /// Name of the app
    pub name: String,
    /// The backup id (from `kubectl hellostateful backups NAME`), or latest
    #[arg(value_name = "ID|latest")]
    pub id: String,
    #[command(flatten)]
    pub image: ImageArgs,
}

/// `backups delete`.
#[derive(Args, Debug, Clone)]
pub struct DeleteBackupArgs {
    #[command(flatten)]
    pub backup: BackupRef,
    /// Also delete the newest good backup
    #[arg(long)]
    pub force: bool,
    /// Do not ask for confirmation (needed without a terminal)
    #[arg(short = 'y', long)]
    pub yes: bool,
}

/// `verify`.
#[derive(Args, Debug, Clone)]
pub struct VerifyArgs {
    /// Name of the app
    pub name: String,
    /// The backup id, or latest (the default)
    #[arg(value_name = "ID|latest", default_value = "latest")]
    pub id: String,
    #[command(flatten)]
    pub image: ImageArgs,
}

/// How long to wait, and whether.
#[derive(Args, Debug, Clone)]
pub struct WaitArgs {
    /// Wait until it is done (the default, with or without a terminal); --wait=false returns once it is asked for
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true")]
    pub wait: Option<bool>,
    /// Give up waiting after this long (like 90s, 10m, 1h); nothing is rolled back
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// `backup`.
#[derive(Args, Debug, Clone)]
pub struct BackupArgs {
    /// Name of the app
    pub name: String,
    /// Read every file again instead of linking or reusing those whose size, times, owner
    /// and inode are unchanged since the previous backup: a file written through mmap (some
    /// databases) can change without its times moving, and its stale copy would be kept on;
    /// run it now and then for such apps (as restic's --force)
    #[arg(long)]
    pub full: bool,
    #[command(flatten)]
    pub wait: WaitArgs,
}

/// `restore`.
#[derive(Args, Debug, Clone)]
pub struct RestoreArgs {
    /// Name of the app
    pub name: String,
    /// The backup to restore: an id from `kubectl hellostateful backups NAME`, or latest
    #[arg(long, value_name = "ID|latest", default_value = "latest")]
    pub from: String,
    /// Do not ask for confirmation (needed without a terminal)
    #[arg(short = 'y', long)]
    pub yes: bool,
    #[command(flatten)]
    pub wait: WaitArgs,
}

/// `delete`.
#[derive(Args, Debug, Clone)]
pub struct DeleteArgs {
    /// Name of the app
    pub name: String,
    /// Also delete the app's backups: they cannot be recovered afterwards
    #[arg(long)]
    pub delete_backups: bool,
    /// Do not ask for confirmation (needed without a terminal)
    #[arg(short = 'y', long)]
    pub yes: bool,
    #[command(flatten)]
    pub wait: WaitArgs,
}

/// `report`.
#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// Name of the app
    pub name: String,
    /// Where to write the archive (default: hellostateful-report-<namespace>-<name>-<time>.tar.gz
    /// in the current directory)
    #[arg(short = 'f', long, value_name = "FILE")]
    pub file: Option<PathBuf>,
}

/// `logs`.
#[derive(Args, Debug, Clone)]
pub struct LogsArgs {
    /// Name of the app
    pub name: String,
    /// Keep printing new lines as they are written
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Lines from the end of the log to print first; -1 for the whole log (as kubectl logs)
    #[arg(long, value_name = "N", default_value_t = 10, allow_negative_numbers = true,
          value_parser = clap::value_parser!(i64).range(-1..))]
    pub tail: i64,
    /// Replica whose log to print (pod NAME-<N>)
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub replica: u32,
}

/// `install`.
#[derive(Args, Debug, Clone)]
pub struct InstallArgs {
    /// Reconciler image, also the only image its backup and restore Jobs may run (the
    /// settings' moverImage)
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Node directories where backups may live, comma-separated clean absolute paths (the
    /// settings' backupRoots; default: keep the cluster's, else /tmp/backup)
    #[arg(long, value_name = "DIR[,DIR...]", value_parser = crate::install::parse_backup_roots)]
    pub backup_roots: Option<crate::install::BackupRoots>,
    /// Object store endpoints an app's spec.backup.target.objectStore may name,
    /// comma-separated http(s)://host[:port] (the settings' objectStoreEndpoints; "" allows
    /// any; default: keep the cluster's, else any)
    #[arg(long, value_name = "URL[,URL...]", value_parser = crate::install::parse_object_store_endpoints)]
    pub object_store_endpoints: Option<crate::install::ObjectStoreEndpoints>,
    /// Whether apps without spec.storage.storageClassName get static node-directory volumes,
    /// which take node disk with no size bound (allow), or are refused (refuse; the
    /// settings' staticDataVolumes; default: keep the cluster's, else allow)
    #[arg(long, value_enum, value_name = "CHOICE")]
    pub static_data_volumes: Option<StaticDataVolumes>,
    /// Taint keys an app's spec.tolerations may name, comma-separated; "" for none, "*" for
    /// any, also every taint at once (the settings' tolerableTaints; default: keep the
    /// cluster's, else any)
    #[arg(long, value_name = "KEY[,KEY...]")]
    pub tolerable_taints: Option<String>,
    /// How much of a node's disk an app's backups in a node directory may take, a size like
    /// 10Gi or 500M; "" for no bound (the settings' nodeBackupLimit; default: keep the
    /// cluster's, else none)
    #[arg(long, value_name = "SIZE", value_parser = crate::install::parse_node_backup_limit)]
    pub node_backup_limit: Option<String>,
    /// client (the default when given bare): print the manifests; server: apply with dryRun=All
    #[arg(long, value_enum, value_name = "MODE", num_args = 0..=1, require_equals = true,
          default_missing_value = "client", default_value = "none")]
    pub dry_run: DryRun,
    /// Wait for the reconciler Deployment to be available (the default); --wait=false
    /// returns once everything is applied
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_value = "true", default_missing_value = "true", action = clap::ArgAction::Set)]
    pub wait: bool,
    /// Give up waiting after this long
    #[arg(long, value_name = "DURATION", default_value = "3m", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Install even over a newer version. Going back is not supported: the older version
    /// may not read what the newer one wrote (CHANGELOG.md); restore from backups instead
    #[arg(long)]
    pub allow_downgrade: bool,
}

/// `install --static-data-volumes`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq)]
pub enum StaticDataVolumes {
    Allow,
    Refuse,
}

impl StaticDataVolumes {
    /// The settings' word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Refuse => "refuse",
        }
    }
}

/// `uninstall`.
#[derive(Args, Debug, Clone)]
pub struct UninstallArgs {
    /// Also delete the CRD, and with it every HelloStateful app in the cluster
    #[arg(long)]
    pub include_crd: bool,
    /// Do not ask for confirmation (needed without a terminal, and always with --include-crd)
    #[arg(short = 'y', long)]
    pub yes: bool,
}

/// Parses a node label `KEY=VALUE` (the API server checks the label's syntax).
fn parse_label(text: &str) -> Result<(String, String), String> {
    key_value(text)
        .ok_or_else(|| format!("{text:?} is not a node label like kubernetes.io/hostname=node-1"))
}

/// `KEY=VALUE` with a key, split at the first '=' (the value may hold more).
fn key_value(text: &str) -> Option<(String, String)> {
    text.split_once('=')
        .filter(|(key, _)| !key.is_empty())
        .map(|(key, value)| (key.to_string(), value.to_string()))
}

/// Parses `KEY=VALUE` of `--env` (the value may hold '=').
fn parse_env(text: &str) -> Result<(String, String), String> {
    key_value(text)
        .ok_or_else(|| format!("{text:?} is not an environment variable like MODE=primary"))
}

/// Parses `SECRET/KEY`.
fn parse_secret_key(text: &str) -> Result<SecretKeyRef, String> {
    match text.split_once('/') {
        Some((name, key)) if !name.is_empty() && !key.is_empty() && !key.contains('/') => {
            Ok(SecretKeyRef {
                name: name.to_string(),
                key: key.to_string(),
            })
        }
        _ => Err(format!(
            "{text:?} is not SECRET/KEY, a key of a Secret like object-store-ca/ca.crt"
        )),
    }
}

/// Parses `OTHER` or `OTHER/ID` as the CRD would take them in `spec.restoreFrom`.
fn parse_backup_source(text: &str) -> Result<RestoreSource, String> {
    let (name, id) = match text.split_once('/') {
        Some((name, id)) => (name, Some(id)),
        None => (text, None),
    };
    if !validate::is_app_name(name) {
        return Err(format!(
            "{name:?} is not an app name (lower-case letters, digits and '-', starting with a letter)"
        ));
    }
    if let Some(id) = id {
        validate::restore_from(id).map_err(|e| e.to_string())?;
    }
    Ok(RestoreSource {
        name: name.to_string(),
        backup_id: id.filter(|id| *id != "latest").map(str::to_string),
    })
}

/// `--full-read-every`: a duration of at most 366 days, in whole seconds.
fn parse_full_read_every(text: &str) -> Result<i32, String> {
    seconds_within(text, 0)
}

/// `--max-backup-age`: a duration of a minute to 366 days, in whole seconds.
fn parse_max_backup_age(text: &str) -> Result<i32, String> {
    seconds_within(text, 60)
}

/// A duration of `least` seconds to 366 days, in whole seconds (the CRD's bounds).
fn seconds_within(text: &str, least: i32) -> Result<i32, String> {
    const MOST: i32 = 366 * 24 * 3600;
    let seconds = i32::try_from(parse_duration(text)?.as_secs())
        .ok()
        .filter(|seconds| *seconds <= MOST)
        .ok_or_else(|| format!("{text:?} is longer than 366 days (8784h)"))?;
    if seconds < least {
        return Err(format!("{text:?} is shorter than {least}s"));
    }
    Ok(seconds)
}

/// Parses `90`, `90s`, `10m`, `1h`, `1h30m`, `500ms`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration".to_string());
    }
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    let mut total = Duration::ZERO;
    let mut number = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let value: u64 = number
            .parse()
            .map_err(|_| format!("{text:?} is not a duration like 90s, 10m or 1h"))?;
        number.clear();
        let unit = match c {
            'h' => Duration::from_secs(3600),
            'm' if chars.peek() == Some(&'s') => {
                chars.next();
                Duration::from_millis(1)
            }
            'm' => Duration::from_secs(60),
            's' => Duration::from_secs(1),
            _ => return Err(format!("{text:?} is not a duration like 90s, 10m or 1h")),
        };
        total += unit * u32::try_from(value).map_err(|_| format!("{text:?} is too long"))?;
    }
    if !number.is_empty() {
        return Err(format!(
            "{text:?} is not a duration like 90s, 10m or 1h (a number needs a unit: h, m, s, ms)"
        ));
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("kubectl-hellostateful").chain(args.iter().copied()))
    }

    #[test]
    fn each_command_takes_only_the_outputs_it_can_print() {
        let command = |words: &[&str]| {
            Cli::try_parse_from(["kubectl-hellostateful"].iter().chain(words))
                .unwrap()
                .command
        };
        let list = command(&["list"]);
        assert!(list.honours(OutputFormat::Wide) && list.honours(OutputFormat::Json));
        let status = command(&["status", "hello"]);
        assert!(status.honours(OutputFormat::Json) && !status.honours(OutputFormat::Wide));
        let verify = command(&["verify", "hello"]);
        assert!(verify.honours(OutputFormat::Json) && !verify.honours(OutputFormat::Wide));
        let logs = command(&["logs", "hello"]);
        assert!(!logs.honours(OutputFormat::Json) && logs.honours(OutputFormat::Table));
    }

    #[test]
    fn the_command_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn help_starts_with_kubectl_hellostateful_and_every_command_has_examples() {
        let mut command = Cli::command();
        let help = command.render_help().to_string();
        assert!(help.contains("Usage: kubectl hellostateful"), "{help}");
        for sub in Cli::command()
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
        {
            let examples = sub
                .get_after_help()
                .map(|h| h.to_string())
                .unwrap_or_default();
            assert!(
                examples.contains("Examples:"),
                "{} has no examples",
                sub.get_name()
            );
        }
    }

    #[test]
    fn global_flags_go_anywhere() {
        let cli = parse(&[
            "list",
            "-n",
            "prod",
            "--context",
            "kind",
            "-o",
            "wide",
            "-A",
        ])
        .unwrap();
        assert_eq!(cli.global.namespace.as_deref(), Some("prod"));
        assert_eq!(cli.global.context.as_deref(), Some("kind"));
        assert_eq!(cli.global.output, Some(OutputFormat::Wide));
        let Command::List(list) = cli.command else {
            panic!("not list")
        };
        assert!(list.all_namespaces);
        let cli = parse(&["-n", "x", "--kubeconfig", "/k", "-v=2", "version"]).unwrap();
        assert_eq!(cli.global.verbose, 2);
        assert_eq!(cli.global.kubeconfig, Some(PathBuf::from("/k")));
    }

    #[test]
    fn kubectl_global_flags_are_taken() {
        let cli = parse(&[
            "status",
            "app",
            "--as",
            "jane",
            "--as-group",
            "devs",
            "--as-group",
            "ops",
            "--token",
            "t0k",
            "--cluster",
            "prod",
            "--user",
            "admin",
            "--request-timeout",
            "1m30s",
            "--v=3",
        ])
        .unwrap();
        let g = &cli.global;
        assert_eq!(g.as_user.as_deref(), Some("jane"));
        assert_eq!(g.as_group, ["devs", "ops"]);
        assert_eq!(g.token.as_deref(), Some("t0k"));
        assert_eq!(g.cluster.as_deref(), Some("prod"));
        assert_eq!(g.user.as_deref(), Some("admin"));
        assert_eq!(g.request_timeout, Some(Duration::from_secs(90)));
        assert_eq!(g.verbose, 3);
        assert_eq!(parse(&["-v", "2", "version"]).unwrap().global.verbose, 2);
        assert_eq!(parse(&["version", "-v2"]).unwrap().global.verbose, 2);
        // As kubectl: a level is needed.
        assert!(parse(&["-v", "version"]).is_err());
        assert_eq!(parse(&["version"]).unwrap().global.verbose, 0);
        // A group without a user to act as is refused, as kubectl does.
        assert!(parse(&["version", "--as-group", "devs"]).is_err());
    }

    #[test]
    fn dry_run_and_wait_take_optional_values() {
        let cli = parse(&["create", "a", "--dry-run"]).unwrap();
        let Command::Create(create) = cli.command else {
            panic!()
        };
        assert_eq!(create.dry_run, DryRun::Client);
        let cli = parse(&["create", "a", "--dry-run=server"]).unwrap();
        let Command::Create(create) = cli.command else {
            panic!()
        };
        assert_eq!(create.dry_run, DryRun::Server);
        let cli = parse(&["create", "a"]).unwrap();
        let Command::Create(create) = cli.command else {
            panic!()
        };
        assert_eq!(create.dry_run, DryRun::None);

        let cli = parse(&["backup", "a", "--wait=false", "--timeout", "30s"]).unwrap();
        let Command::Backup(backup) = cli.command else {
            panic!()
        };
        assert_eq!(backup.wait.wait, Some(false));
        assert_eq!(backup.wait.timeout, Duration::from_secs(30));
        let cli = parse(&["backup", "a", "--wait"]).unwrap();
        let Command::Backup(backup) = cli.command else {
            panic!()
        };
        assert_eq!(backup.wait.wait, Some(true));
        assert_eq!(backup.wait.timeout, Duration::from_secs(600));
    }

    #[test]
    fn restore_defaults_to_latest_and_describe_is_status() {
        let cli = parse(&["restore", "a", "-y"]).unwrap();
        let Command::Restore(restore) = cli.command else {
            panic!()
        };
        assert_eq!(restore.from, "latest");
        assert!(restore.yes);
        assert!(matches!(
            parse(&["describe", "a"]).unwrap().command,
            Command::Status(_)
        ));
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(parse(&["create", "a", "--replicas", "21"]).is_err());
        assert!(parse(&["list", "-o", "xml"]).is_err());
        assert!(parse(&["backup", "a", "--timeout", "soon"]).is_err());
        assert!(parse(&["completion", "tcsh"]).is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("10").is_ok());
        assert!(parse_duration("1x").is_err());
        assert!(parse_duration("1h30").is_err());
        assert!(parse_duration("").is_err());
    }
}
