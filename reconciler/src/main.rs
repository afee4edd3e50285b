//! `hellostateful-reconciler`: the controller (`run`), the admission webhook that holds the
//! controller's StatefulSets to their apps' images (`admission`), the data mover (`backup`,
//! `restore`, `backups`, `verify`, `prune`, run inside Jobs), `crd`, and `check-children`
//! (e2e).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use hellostateful_reconciler::cache::Cache;
use hellostateful_reconciler::children::Settings;
use hellostateful_reconciler::controller::{self, Context};
use hellostateful_reconciler::leader::{self, LeaderElection, Leadership, Timing};
use hellostateful_reconciler::metrics::Metrics;
use hellostateful_reconciler::server::{self, Health};
use hellostateful_reconciler::tenancy::{self, Allowed};
use prometheus_client::registry::Registry;
use tracing::{error, info};

/// jemalloc hands the pages a burst freed (the lists at start, a full pass, deleted apps)
/// back to the kernel. glibc's heap kept them: with 1,000 apps created and then deleted,
/// 34 MB of heap stayed resident, even with `malloc_trim`; with jemalloc, 9 MB.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read when it starts: its background thread hands freed pages back
/// after about a second instead of ten (`dirty_decay_ms`). A full pass over 1,000 apps frees
/// a few MB at once; with the default they stayed resident for about a minute
/// (bench/reconciler.sh, RssAnon sampled every 2 s: 23.8 MB after the pass, 21.2 MB 10 s
/// later, 20.0 MB after 50 s; with it, 21.7 MB after the pass, 20.0 MB 4 s later, and the
/// bench's RSS after the restart's full pass 37.8 MB instead of 40.4). The name is the one jemalloc reads under the prefix
/// tikv-jemalloc-sys builds it with.
#[unsafe(export_name = "_rjem_malloc_conf")]
static JEMALLOC_OPTIONS: &[u8; 20] = b"dirty_decay_ms:1000\0";

#[derive(Parser)]
#[command(
    name = "hellostateful-reconciler",
    version,
    about = "Runs HelloStateful apps on Kubernetes and moves their data",
    long_about = "Runs HelloStateful apps on Kubernetes and moves their data.\n\n\
`run` is the controller (in the cluster, or outside it with the current kubeconfig). The \
data-mover subcommands run inside the backup and restore Jobs the controller makes."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller.
    Run(RunArgs),
    /// Serve the admission webhook that refuses a StatefulSet of the controller's running
    /// any image but its app's spec.image (manifests/admission-webhook.yaml).
    Admission(AdmissionArgs),
    /// Print the HelloStateful CRD as YAML (what manifests/crd.yaml holds).
    Crd,
    /// Dry-run HelloStatefuls and the children made of them against the API server.
    #[command(
        hide = true,
        long_about = "Create each HelloStateful of FILE (multi-document YAML) with a \
server-side dry run, then every child the reconciler would make of one the CRD accepts. \
Prints one line per app; exits 1 if the API server refuses a child of an app the CRD \
accepted (the CRD must refuse what its children cannot be)."
    )]
    CheckChildren(CheckArgs),
    #[command(flatten)]
    Mover(hellostateful_mover::cli::MoverCommand),
}

#[derive(clap::Args)]
struct CheckArgs {
    /// Multi-document YAML of HelloStatefuls.
    file: std::path::PathBuf,
    /// Namespace to dry-run them in (it must exist).
    #[arg(long, default_value = "default")]
    namespace: String,
    /// Node directories allowed for backups, as the reconciler's --backup-roots.
    #[arg(long, default_value = hellostateful_api::defaults::BACKUP_HOST_PATH)]
    backup_roots: String,
    /// Object store endpoints allowed, as the reconciler's --object-store-endpoints.
    #[arg(long, default_value = "")]
    object_store_endpoints: String,
}

#[derive(clap::Args)]
struct AdmissionArgs {
    /// Port to serve HTTPS on.
    #[arg(long, default_value_t = 8443)]
    port: u16,
    /// The webhook's Service, whose DNS names its certificate holds.
    #[arg(long, default_value = "hellostateful-admission")]
    service: String,
    /// Namespace of the Service.
    #[arg(long, env = "POD_NAMESPACE", default_value = "hellostateful-system")]
    namespace: String,
    /// Log as JSON lines.
    #[arg(long, env = "HELLOSTATEFUL_LOG_JSON", default_value_t = false)]
    log_json: bool,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Image the backup and restore Jobs run (this binary's image).
    #[arg(long, env = "HELLOSTATEFUL_IMAGE", default_value = concat!("hellostateful-reconciler:", env!("CARGO_PKG_VERSION")))]
    mover_image: String,
    /// Node directories that may hold backups, separated by commas; the first is the
    /// default. The cluster admin's choice: a HelloStateful may only pick one of them (or a
    /// claim of its own namespace), and its backups go to <root>/<namespace>/<name>.
    #[arg(
        long,
        env = "HELLOSTATEFUL_BACKUP_ROOTS",
        default_value = hellostateful_api::defaults::BACKUP_HOST_PATH
    )]
    backup_roots: String,
    /// Object store endpoints (https://host[:port]) a HelloStateful's
    /// spec.backup.target.objectStore may name, separated by commas (the settings'
    /// objectStoreEndpoints); empty (the default): any. An endpoint matches only as the same
    /// text, trailing '/' aside. The keys always come from a Secret of the app's own namespace.
    #[arg(long, env = "HELLOSTATEFUL_OBJECT_STORE_ENDPOINTS", default_value = "")]
    object_store_endpoints: String,
    /// Whether an app without a StorageClass gets static volumes in a node directory
    /// (allow), which take node disk with no size bound, or is refused (refuse: only apps
    /// naming a StorageClass run; the settings' staticDataVolumes).
    #[arg(
        long,
        env = "HELLOSTATEFUL_STATIC_DATA_VOLUMES",
        default_value = "allow",
        value_parser = hellostateful_reconciler::tenancy::parse_static_data_volumes,
        action = clap::ArgAction::Set,
        value_name = "allow|refuse"
    )]
    static_data_volumes: bool,
    /// The taint keys an app's spec.tolerations may name, separated by commas (empty:
    /// none); * (the default): any, also a toleration of every taint, which reaches
    /// control-plane nodes (the settings' tolerableTaints).
    #[arg(
        long,
        env = "HELLOSTATEFUL_TOLERABLE_TAINTS",
        default_value = "*",
        value_name = "KEYS"
    )]
    tolerable_taints: String,
    /// How much an app's backups in a node directory may take (10Gi, 500M), counting the
    /// whole of its oldest snapshot and what each later one copied: a backup that would
    /// pass it fails, leaving the earlier ones (the settings' nodeBackupLimit). Empty (the
    /// default): no bound.
    #[arg(
        long,
        env = "HELLOSTATEFUL_NODE_BACKUP_LIMIT",
        default_value = "",
        value_name = "SIZE"
    )]
    node_backup_limit: String,
    /// How long a backup or restore Job's pod may fail to start (no node for it, an image
    /// that cannot be pulled, a refused pod) before its request fails with the pod's reason
    /// and the app runs again. Give more where new nodes take a while to come (cluster
    /// autoscaling).
    #[arg(
        long,
        env = "HELLOSTATEFUL_MOVER_START_SECONDS",
        default_value_t = controller::START_PATIENCE.as_secs(),
        value_parser = clap::value_parser!(u64).range(10..=3600),
        value_name = "SECONDS"
    )]
    mover_start_seconds: u64,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(
        long,
        env = "HELLOSTATEFUL_METRICS_ADDR",
        default_value = "0.0.0.0:8080"
    )]
    metrics_addr: SocketAddr,
    /// Take a Lease before reconciling, so that only one replica acts at a time.
    #[arg(long, env = "HELLOSTATEFUL_LEADER_ELECT", default_value_t = false)]
    leader_elect: bool,
    /// Namespace of the Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "hellostateful-system")]
    lease_namespace: String,
    /// Log as JSON lines.
    #[arg(long, env = "HELLOSTATEFUL_LOG_JSON", default_value_t = false)]
    log_json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Mover(command) => hellostateful_mover::cli::run(command),
        Command::Crd => match hellostateful_reconciler::crd_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("error: printing the CRD: {error}");
                ExitCode::FAILURE
            }
        },
        Command::CheckChildren(args) => {
            let Some(runtime) = runtime() else {
                return ExitCode::FAILURE;
            };
            match runtime.block_on(check_children(args)) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::FAILURE,
                Err(error) => {
                    eprintln!("error: {error:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Admission(args) => logged(args.log_json, admission(args)),
        Command::Run(args) => logged(args.log_json, run(args)),
    }
}

/// Runs a long-lived `task` (the controller, the webhook) with logging; its error is logged.
fn logged(log_json: bool, task: impl Future<Output = anyhow::Result<()>>) -> ExitCode {
    init_logging(log_json);
    let Some(runtime) = runtime() else {
        return ExitCode::FAILURE;
    };
    match runtime.block_on(task) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            error!("{error:#}");
            ExitCode::FAILURE
        }
    }
}

/// The async runtime, on one thread: the controller waits on the API server, not on the
/// CPU, and every extra thread costs an allocator arena of its own. None (said on stderr)
/// when it cannot start.
fn runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => Some(runtime),
        Err(error) => {
            eprintln!("error: starting the async runtime: {error}");
            None
        }
    }
}

/// `check-children`: true when no child of an app the CRD accepts is refused.
async fn check_children(args: CheckArgs) -> anyhow::Result<bool> {
    use hellostateful_reconciler::dry_run::{self, Verdict};
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let apps = dry_run::parse(&text)
        .map_err(|e| anyhow::anyhow!("{}: not HelloStateful YAML: {e}", args.file.display()))?;
    let settings = Settings {
        mover_image: concat!("hellostateful-reconciler:", env!("CARGO_PKG_VERSION")).into(),
        backup_roots: hellostateful_reconciler::location::parse_roots(&args.backup_roots)?,
        object_store_endpoints: hellostateful_reconciler::location::parse_endpoints(
            &args.object_store_endpoints,
        ),
        allowed: Allowed::default(),
    };
    let client = kube::Client::try_default()
        .await
        .context("connecting to the API server")?;
    let mut agreed = true;
    for app in apps {
        let name = app.metadata.name.clone().unwrap_or_default();
        let verdict = dry_run::check(&client, &args.namespace, app, &settings)
            .await
            .with_context(|| format!("dry-running {name}"))?;
        agreed &= !matches!(verdict, Verdict::ChildRefused { .. });
        println!("{}", dry_run::line(&name, &verdict));
    }
    Ok(agreed)
}

/// `admission`: serves the webhook over TLS with a certificate made now, then gives the API
/// server its CA.
async fn admission(args: AdmissionArgs) -> anyhow::Result<()> {
    use hellostateful_reconciler::admission::{self, Webhook};
    let client = kube::Client::try_default()
        .await
        .context("connecting to the API server")?;
    let service = format!("{}.{}.svc", args.service, args.namespace);
    let made = admission::certificates(vec![service.clone(), format!("{service}.cluster.local")])
        .context("making the webhook's certificate")?;
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(made.key_der.into());
    let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("choosing TLS versions")?
    .with_no_client_auth()
    .with_single_cert(vec![made.certificate_der.into()], key)
    .context("loading the webhook's certificate")?;
    let webhook = Arc::new(Webhook {
        client: client.clone(),
        ready: std::sync::atomic::AtomicBool::new(false),
    });
    let address = SocketAddr::from(([0, 0, 0, 0], args.port));
    let serving = axum_server::bind_rustls(
        address,
        axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(tls)),
    )
    .serve(admission::router(webhook.clone()).into_make_service());
    info!(%address, service, "serving the admission webhook");
    // Serving before the CA is published: the API server calls as soon as it has it.
    let publish = async {
        admission::publish_ca(client, &made.ca_pem)
            .await
            .with_context(|| {
                format!(
                    "giving the API server the webhook's CA (validatingwebhookconfiguration {})",
                    admission::WEBHOOK_CONFIGURATION
                )
            })?;
        webhook.ready.store(true, Ordering::Relaxed);
        info!("the API server has the webhook's CA");
        anyhow::Ok(())
    };
    tokio::try_join!(
        async { serving.await.context("serving the admission webhook") },
        publish
    )?;
    Ok(())
}

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,kube=warn".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let backup_roots = hellostateful_reconciler::location::parse_roots(&args.backup_roots)
        .context("reading --backup-roots (HELLOSTATEFUL_BACKUP_ROOTS)")?;
    let object_store_endpoints =
        hellostateful_reconciler::location::parse_endpoints(&args.object_store_endpoints);
    let node_backup_limit = hellostateful_api::quantity::node_backup_limit(&args.node_backup_limit)
        .map_err(anyhow::Error::msg)
        .context("reading --node-backup-limit (HELLOSTATEFUL_NODE_BACKUP_LIMIT)")?;
    let mut config = kube::Config::infer()
        .await
        .context("reading the Kubernetes config (in-cluster, or the current kubeconfig)")?;
    // Without a read timeout, a request on a connection that died with the API server
    // (a restart, a failover) waits forever and blocks its app's reconciles with it.
    config.read_timeout = Some(controller::READ_TIMEOUT);
    config.reset_reader_on_write = true;
    let builder = |config: &kube::Config| {
        kube::client::ClientBuilder::try_from(config.clone()).context("connecting to Kubernetes")
    };
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    let counted = Metrics::count_requests(metrics.api_requests.clone());
    // With leader election, the controller's client refuses writes unless this replica
    // holds the Lease (now), and only the election's own client writes the Lease.
    let (client, election) = if args.leader_elect {
        let leadership = Leadership::default();
        let identity = std::env::var("POD_NAME")
            .unwrap_or_else(|_| format!("{}-{}", hostname(), std::process::id()));
        let election = LeaderElection::new(
            builder(&config)?.build(),
            &args.lease_namespace,
            "hellostateful-reconciler",
            &identity,
            Timing::default(),
            leadership.clone(),
        );
        let guarded = builder(&config)?
            .with_layer(&counted)
            .with_layer(&leader::write_guard(leadership.clone()))
            .build();
        (guarded, Some((identity, election, leadership)))
    } else {
        (builder(&config)?.with_layer(&counted).build(), None)
    };
    let health = Arc::new(Health {
        registry,
        ready: Default::default(),
    });
    let listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .with_context(|| format!("listening on {}", args.metrics_addr))?;
    tokio::spawn(axum::serve(listener, server::router(health.clone())).into_future());

    if let Some((identity, election, _)) = &election {
        info!(%identity, "waiting for leadership");
        election.acquire().await;
    }
    health.ready.store(true, Ordering::Relaxed);
    // Said at start: an admin reading the log sees whether tenants may name any store.
    let endpoints_allowed = match object_store_endpoints.join(",") {
        none if none.is_empty() => "any".to_string(),
        listed => listed,
    };
    info!(
        mover_image = %args.mover_image,
        backup_roots = %backup_roots.join(","),
        object_store_endpoints = %endpoints_allowed,
        static_data_volumes = args.static_data_volumes,
        tolerable_taints = %args.tolerable_taints,
        node_backup_limit = %args.node_backup_limit,
        "reconciling HelloStateful apps"
    );
    let (cache, writers) = Cache::new();
    let ctx = Context::new(
        client,
        metrics,
        Settings {
            mover_image: args.mover_image,
            backup_roots,
            object_store_endpoints,
            allowed: Allowed {
                static_data_volumes: args.static_data_volumes,
                tolerable_taints: tenancy::parse_tolerable_taints(&args.tolerable_taints),
                node_backup_limit,
            },
        },
        cache,
    )
    .with_start_patience(std::time::Duration::from_secs(args.mover_start_seconds));
    let ctx = Arc::new(match &election {
        Some((identity, _, leadership)) => ctx.with_leadership(leadership.clone(), identity),
        None => ctx,
    });
    let outcome = match &election {
        Some((_, election, _)) => tokio::select! {
            () = controller::run(ctx, writers) => Ok(()),
            lost = election.hold() => Err(anyhow::anyhow!("stopping: {lost}")),
        },
        None => {
            controller::run(ctx, writers).await;
            Ok(())
        }
    };
    if let Some((_, election, _)) = &election {
        election.release().await;
    }
    info!("stopped");
    outcome
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .unwrap_or_else(|_| "reconciler".to_string())
}
