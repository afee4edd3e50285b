//! `create NAME`: builds a HelloStateful from flags and creates it (POST semantics).

use hellostateful_api::names::MAX_NAME_LEN;
use hellostateful_api::{
    BackupSpec, BackupTarget, Consistency, ConsistencyMode, HelloStateful, HelloStatefulSpec,
    ObjectStoreTarget, ResolvedTarget, RestoreSource, Retention, StorageSpec, names, validate,
};
use k8s_openapi::api::core::v1::{ContainerPort, EnvVar};
use kube::api::PostParams;

use crate::cli::{BackupConsistency, CreateArgs, DryRun, OutputFormat};
use crate::context::{Ctx, Kube};
use crate::error::{Action, CliError, explain};
use crate::get::object_value;
use crate::mover_pod;
use crate::output::{printable, to_json, to_yaml};
use crate::prompt;

/// Checks an app name the way the CRD does, before sending anything.
pub fn check_name(name: &str) -> Result<(), CliError> {
    if validate::is_app_name(name) {
        Ok(())
    } else {
        Err(CliError::Usage(format!(
            "invalid app name {name:?}: it must be at most {MAX_NAME_LEN} lower-case letters, digits and '-', start with a letter and not end with '-' (it names the app's Service and backup CronJob)"
        )))
    }
}

/// The resource the flags describe (schedule already decided).
pub fn build(args: &CreateArgs, namespace: &str, schedule: Option<String>) -> HelloStateful {
    let storage = (args.size.is_some() || args.storage_class.is_some()).then(|| StorageSpec {
        size: args.size.clone(),
        storage_class_name: args.storage_class.clone(),
    });
    let store = &args.object_store;
    let object_store = store
        .object_store_endpoint
        .as_ref()
        .map(|endpoint| ObjectStoreTarget {
            endpoint: endpoint.clone(),
            bucket: store.object_store_bucket.clone().unwrap_or_default(),
            prefix: store.object_store_prefix.clone(),
            region: store.object_store_region.clone(),
            credentials_secret: store.object_store_secret.clone().unwrap_or_default(),
            insecure: store.object_store_insecure,
            endpoint_ca: store.object_store_ca.clone(),
        });
    let target = (args.backup_target_host_path.is_some()
        || args.backup_target_pvc.is_some()
        || object_store.is_some())
    .then(|| BackupTarget {
        host_path: args.backup_target_host_path.clone(),
        persistent_volume_claim: args.backup_target_pvc.clone(),
        object_store,
    });
    let retention = args.keep_last.map(|keep_last| Retention {
        keep_last: Some(keep_last),
    });
    let consistency = args.backup_consistency.map(|mode| Consistency {
        mode: match mode {
            BackupConsistency::Live => ConsistencyMode::Live,
            BackupConsistency::Stop => ConsistencyMode::Stop,
        },
        max_stop_seconds: None,
    });
    let backup = (target.is_some()
        || retention.is_some()
        || consistency.is_some()
        || args.full_read_every.is_some()
        || args.max_backup_age.is_some())
    .then_some(BackupSpec {
        target,
        retention,
        suspend: false,
        consistency,
        full_read_every_seconds: args.full_read_every,
        max_age_seconds: args.max_backup_age,
    });
    let spec = HelloStatefulSpec {
        replicas: args.replicas,
        restore_from_existing: args.restore_from_existing,
        restore_from: args.from_backup.clone(),
        backup_schedule: schedule,
        image: args.image.clone(),
        command: None,
        mount_path: None,
        args: None,
        env: (!args.env.is_empty()).then(|| {
            args.env
                .iter()
                .map(|(name, value)| EnvVar {
                    name: name.clone(),
                    value: Some(value.clone()),
                    ..EnvVar::default()
                })
                .collect()
        }),
        env_from: None,
        ports: (!args.port.is_empty()).then(|| {
            args.port
                .iter()
                .map(|&container_port| ContainerPort {
                    container_port,
                    ..ContainerPort::default()
                })
                .collect()
        }),
        resources: None,
        readiness_probe: None,
        liveness_probe: None,
        startup_probe: None,
        storage,
        backup,
        security_context: None,
        node_selector: (!args.node_selector.is_empty())
            .then(|| args.node_selector.iter().cloned().collect()),
        tolerations: None,
    };
    let mut app = HelloStateful::new(&args.name, spec);
    app.metadata.namespace = Some(namespace.to_string());
    app
}

/// `create`.
pub async fn create(ctx: &Ctx, args: &CreateArgs) -> Result<String, CliError> {
    check_name(&args.name)?;
    let mut schedule = args.schedule.clone().filter(|s| !s.trim().is_empty());
    if let Some(schedule) = &schedule {
        validate::schedule(schedule).map_err(|e| CliError::Usage(e.to_string()))?;
    }
    if args.schedule.is_none() && ctx.terminal.can_prompt() {
        let answer = prompt::input(
            "Backup schedule (cron like */5 * * * * or @hourly; empty for on-demand backups only)",
            |text| validate::schedule(text).map_err(|e| e.to_string()),
        )?;
        schedule = Some(answer).filter(|s| !s.is_empty());
    }
    if let Some(path) = &args.backup_target_host_path
        && !validate::is_clean_absolute_path(path)
    {
        return Err(CliError::Usage(format!(
            "--backup-target-host-path {path:?} must be a clean absolute path like /tmp/backup (no '.' or '..' components, no '//', no trailing '/'), and one of the backup roots the cluster admin allows (default /tmp/backup)"
        )));
    }

    // The checks beyond the CRD's schema (label keys, a restore source): refused here
    // rather than reported in status after the app was made.
    let unchecked = build(args, "default", schedule.clone());
    validate::spec(&unchecked.spec).map_err(|e| CliError::Usage(e.to_string()))?;

    if args.dry_run == DryRun::Client {
        let namespace = match &ctx.global.namespace {
            Some(namespace) => namespace.clone(),
            None => ctx
                .connect()
                .await
                .map(|k| k.namespace)
                .unwrap_or_else(|_| "default".into()),
        };
        let app = build(args, &namespace, schedule);
        return print(ctx, &app, "created (dry run)");
    }

    let kube = ctx.connect().await?;
    let app = build(args, &kube.namespace, schedule);
    if let Some(source) = &args.from_backup {
        check_source(&kube, &app, source).await?;
    }
    let params = PostParams {
        dry_run: args.dry_run == DryRun::Server,
        field_manager: Some(crate::context::FIELD_MANAGER.to_string()),
    };
    let created = kube
        .apps()
        .create(&params, &app)
        .await
        .map_err(|e| explain(e, &Action::app("create", &kube.namespace, &args.name)))?;
    if args.dry_run == DryRun::None
        && let Some(warning) = kube.reconciler().await.not_running_warning()
    {
        eprintln!("{} {warning}", ctx.style.warn("Warning:"));
    }
    if args.dry_run == DryRun::None
        && let Some(source) = &args.from_backup
    {
        eprintln!(
            "It restores {} before it starts: follow it with `kubectl hellostateful status {}`.",
            source.describe(),
            args.name
        );
    }
    let verb = if args.dry_run == DryRun::Server {
        "created (server dry run)"
    } else {
        "created"
    };
    print(ctx, &created, verb)
}

/// Refuses a `--from-backup` app with no backups before anything is created: in a node
/// directory they are read through its backup claim, which exists once it backed up and
/// outlives it. (A claim target holding every app's backups is checked by the restore.)
async fn check_source(
    kube: &Kube,
    app: &HelloStateful,
    source: &RestoreSource,
) -> Result<(), CliError> {
    if !matches!(app.spec.backup_target(), ResolvedTarget::HostPath(_)) {
        return Ok(());
    }
    let claim_name = names::backup_claim(&source.name);
    let claim = mover_pod::backup_claim(kube, &source.name).await?;
    if mover_pod::backup_claim_readable(&kube.namespace, &source.name, claim.as_ref())? {
        Ok(())
    } else {
        Err(CliError::Failed(format!(
            "--from-backup {}: app {} has no backups in namespace {} (its backup claim {claim_name} does not exist, so it never backed up here); nothing was created",
            source.name, source.name, kube.namespace
        )))
    }
}

fn print(ctx: &Ctx, app: &HelloStateful, verb: &str) -> Result<String, CliError> {
    let name = app.metadata.name.clone().unwrap_or_default();
    match ctx.global.output {
        Some(OutputFormat::Json) => to_json(&object_value(app)),
        Some(OutputFormat::Yaml) => to_yaml(&object_value(app)),
        _ => Ok(format!(
            "hellostateful.hello-stateful.example.com/{} {verb}\n",
            printable(&name)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn args(extra: &[&str]) -> CreateArgs {
        let cli = Cli::try_parse_from(
            ["kubectl-hellostateful", "create"]
                .iter()
                .chain(extra.iter()),
        )
        .unwrap();
        match cli.command {
            Command::Create(args) => *args,
            _ => unreachable!(),
        }
    }

    #[test]
    fn the_seed_app() {
        let a = args(&[
            "hello",
            "--schedule",
            "*/5 * * * *",
            "--restore-from-existing",
        ]);
        let app = build(&a, "default", a.schedule.clone());
        assert_eq!(
            serde_json::to_value(&app).unwrap(),
            serde_json::json!({
                "apiVersion": "hello-stateful.example.com/v1alpha1",
                "kind": "HelloStateful",
                "metadata": {"name": "hello", "namespace": "default"},
                "spec": {"replicas": 1, "restoreFromExisting": true, "backupSchedule": "*/5 * * * *"}
            })
        );
    }

    #[test]
    fn an_object_store_target_from_flags() {
        let a = args(&[
            "hello",
            "--object-store-endpoint",
            "https://s3.example.com",
            "--object-store-bucket",
            "backups",
            "--object-store-prefix",
            "team-a",
            "--object-store-region",
            "eu-west-1",
            "--object-store-secret",
            "s3-keys",
            "--object-store-ca",
            "s3-ca/ca.crt",
        ]);
        let app = build(&a, "prod", None);
        assert_eq!(
            serde_json::to_value(&app.spec.backup).unwrap(),
            serde_json::json!({"target": {"objectStore": {
                "endpoint": "https://s3.example.com", "bucket": "backups", "prefix": "team-a",
                "region": "eu-west-1", "credentialsSecret": "s3-keys", "insecure": false,
                "endpointCA": {"name": "s3-ca", "key": "ca.crt"}}}, "suspend": false})
        );
        let parse = |extra: &[&str]| {
            Cli::try_parse_from(["kubectl-hellostateful", "create", "x"].iter().chain(extra))
        };
        // The endpoint needs its bucket and keys; the other flags need the endpoint; one target.
        assert!(parse(&["--object-store-endpoint", "https://s3.example.com"]).is_err());
        assert!(parse(&["--object-store-bucket", "b"]).is_err());
        assert!(parse(&["--object-store-insecure"]).is_err());
        let store = [
            "--object-store-endpoint=http://s3:8333",
            "--object-store-bucket=b",
            "--object-store-secret=s",
        ];
        assert!(parse(&[&store[..], &["--object-store-insecure"]].concat()).is_ok());
        assert!(parse(&[&store[..], &["--backup-target-pvc=c"]].concat()).is_err());
        assert!(parse(&[&store[..], &["--object-store-ca=no-key"]].concat()).is_err());
    }

    #[test]
    fn every_option() {
        let a = args(&[
            "web",
            "--replicas",
            "3",
            "--image",
            "nginx:1",
            "--size",
            "5Gi",
            "--storage-class",
            "standard",
            "--keep-last",
            "3",
            "--backup-target-pvc",
            "backups",
            "--env",
            "MODE=primary",
            "--env",
            "URL=http://x/?a=b",
            "--port",
            "8080",
            "--full-read-every",
            "24h",
            "--max-backup-age",
            "26h",
        ]);
        let app = build(&a, "prod", None);
        assert_eq!(
            serde_json::to_value(&app.spec).unwrap(),
            serde_json::json!({
                "replicas": 3, "restoreFromExisting": false, "image": "nginx:1",
                "env": [{"name": "MODE", "value": "primary"}, {"name": "URL", "value": "http://x/?a=b"}],
                "ports": [{"containerPort": 8080}],
                "storage": {"size": "5Gi", "storageClassName": "standard"},
                "backup": {"target": {"persistentVolumeClaim": "backups"}, "retention": {"keepLast": 3}, "suspend": false,
                    "fullReadEverySeconds": 86400, "maxAgeSeconds": 93600}
            })
        );
    }

    #[test]
    fn full_reads_take_a_duration_of_at_most_a_year() {
        let every = |text: &str| {
            backup_spec_of(&["--full-read-every", text]).map(|b| b.full_read_every_seconds)
        };
        assert_eq!(every("0").ok(), Some(Some(0)));
        assert_eq!(every("168h").ok(), Some(Some(604_800)));
        assert_eq!(every("8784h").ok(), Some(Some(31_622_400)));
        assert!(every("8785h").is_err());
        assert!(every("weekly").is_err());
    }

    /// The backup spec `create web FLAGS...` makes (an error: the flags were refused).
    fn backup_spec_of(flags: &[&str]) -> Result<BackupSpec, clap::Error> {
        let line = ["kubectl-hellostateful", "create", "web"]
            .iter()
            .chain(flags);
        Cli::try_parse_from(line).map(|cli| match cli.command {
            crate::cli::Command::Create(args) => build(&args, "default", None)
                .spec
                .backup
                .unwrap_or_default(),
            other => panic!("a create, not {other:?}"),
        })
    }

    #[test]
    fn a_max_backup_age_is_a_minute_to_a_year() {
        let age =
            |text: &str| backup_spec_of(&["--max-backup-age", text]).map(|b| b.max_age_seconds);
        assert_eq!(age("26h").ok(), Some(Some(93_600)));
        assert_eq!(age("1m").ok(), Some(Some(60)));
        assert!(age("59s").is_err());
        assert!(age("8785h").is_err());
    }

    #[test]
    fn from_backup_names_an_app_and_maybe_one_of_its_backups() {
        let a = args(&["copy", "--from-backup", "hello/20261129T150102Z"]);
        let app = build(&a, "default", None);
        assert_eq!(
            serde_json::to_value(&app.spec.restore_from).unwrap(),
            serde_json::json!({"name": "hello", "backupId": "20261129T150102Z"})
        );
        for newest in ["hello", "hello/latest"] {
            let a = args(&["copy", "--from-backup", newest]);
            assert_eq!(
                serde_json::to_value(&build(&a, "default", None).spec.restore_from).unwrap(),
                serde_json::json!({"name": "hello"}),
                "{newest}"
            );
        }
        for bad in ["Hello", "hello/../x", "hello/--target=/", "/x", ""] {
            let parsed = Cli::try_parse_from([
                "kubectl-hellostateful",
                "create",
                "copy",
                "--from-backup",
                bad,
            ]);
            assert!(parsed.is_err(), "{bad}");
        }
        let both = Cli::try_parse_from([
            "kubectl-hellostateful",
            "create",
            "copy",
            "--from-backup",
            "hello",
            "--restore-from-existing",
        ]);
        assert!(both.is_err(), "one source of data at a time");
    }

    #[test]
    fn names_are_checked_locally() {
        assert!(check_name("hello").is_ok());
        assert!(check_name("a-1").is_ok());
        for bad in ["", "Hello", "1abc", "a_b", "abc-", &"a".repeat(46)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
