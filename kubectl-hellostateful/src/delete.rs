//! `delete NAME`: deletes the app and waits until the reconciler has cleaned up (it wipes
//! static volumes' live data). Its backups stay where they are unless `--delete-backups`
//! asks the reconciler to delete them too.

use std::time::{Duration, Instant};

use clap::ValueEnum;
use hellostateful_api::{HelloStateful, ResolvedTarget, names};
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::actions::{NO_RECONCILER_GRACE, passing};
use crate::cli::{DeleteArgs, OutputFormat};
use crate::context::{Ctx, Kube};
use crate::error::{Action, CliError, explain};
use crate::output::printable;
use crate::prompt;

/// Where the app's backups are kept, in words, printable (it is read from the app).
pub fn backups_place(app: &HelloStateful, namespace: &str) -> String {
    let name = app.name_any();
    let place = match app.spec.backup_target() {
        ResolvedTarget::HostPath(path) => format!(
            "node directory {}{}",
            names::backup_host_path(&path, namespace, &name),
            app.status
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .map(|n| format!(" on node {n}"))
                .unwrap_or_default()
        ),
        ResolvedTarget::Claim(claim) => {
            format!("PersistentVolumeClaim {namespace}/{claim} under {namespace}/{name}")
        }
        ResolvedTarget::ObjectStore(store) => store.describe(namespace, &name),
    };
    printable(&place).into_owned()
}

/// What happens to the app's live data when it is deleted, in words: static volumes are
/// wiped by the reconciler; claims of a StorageClass go with the app.
pub fn live_data_fate(app: &HelloStateful) -> String {
    match app.spec.storage_class() {
        None => "Its live data is wiped.".to_string(),
        // The claims carry the app's owner reference: they go with it, and their volumes
        // as their class's reclaim policy says.
        Some(class) => format!(
            "Its claims (StorageClass {}) are deleted with it, and the live data on them as that \
             class's reclaim policy says (Delete, the usual one: gone for good; Retain: left on \
             released volumes for an admin). Only a backup brings it back.",
            printable(class)
        ),
    }
}

/// The confirmation: what goes, what stays, and what can never come back.
pub fn question(
    namespace: &str,
    name: &str,
    fate: &str,
    place: &str,
    delete_backups: bool,
) -> String {
    if delete_backups {
        format!(
            "Delete {namespace}/{name} with its StatefulSet, Service, CronJob and Jobs, and all its backups?\n  {fate}\n  Its backups in {place} are deleted too: they cannot be recovered.\n  Continue?"
        )
    } else {
        format!(
            "Delete {namespace}/{name} with its StatefulSet, Service, CronJob and Jobs?\n  {fate}\n  Its backups are kept in {place}.\n  Continue?"
        )
    }
}

/// What `delete` prints: the app is gone (or, without waiting, its deletion has begun).
pub fn deleted_message(name: &str, fate: &str, place: &str, delete_backups: bool) -> String {
    let backups = if delete_backups {
        format!("Its backups in {place} were deleted by the reconciler: they cannot be recovered.")
    } else {
        format!(
            "Its backups are kept in {place}: create it again with --restore-from-existing to get its data back."
        )
    };
    format!("hellostateful.hello-stateful.example.com/{name} deleted\n{fate} {backups}\n")
}

/// The merge patch that tells the reconciler's cleanup to delete the backups as well.
pub fn delete_backups_patch() -> Value {
    json!({"metadata": {"annotations": {names::DELETE_BACKUPS: "true"}}})
}

/// `delete`.
pub async fn delete(ctx: &Ctx, args: &DeleteArgs) -> Result<String, CliError> {
    let name_only = match ctx.global.output {
        None | Some(OutputFormat::Table) => false,
        Some(OutputFormat::Name) => true,
        Some(other) => {
            return Err(CliError::Usage(format!(
                "delete prints no object: -o {} means nothing here (use -o name, or none)",
                other
                    .to_possible_value()
                    .map_or_else(String::new, |value| value.get_name().to_string())
            )));
        }
    };
    if !args.yes && !ctx.terminal.can_prompt() {
        return Err(CliError::Usage(format!(
            "refusing to delete {} without confirmation: stdin is not a terminal; pass --yes",
            args.name
        )));
    }
    let kube = ctx.connect().await?;
    let app = kube.get_app(&args.name).await?;
    let place = backups_place(&app, &kube.namespace);
    let fate = live_data_fate(&app);
    // The finalizer holds the app until the reconciler has cleaned up: say so first.
    let warning = kube.reconciler().await.not_running_warning();
    if let Some(warning) = &warning {
        eprintln!("{} {warning}", ctx.style.warn("Warning:"));
    }
    if !args.yes
        && !prompt::confirm(&question(
            &kube.namespace,
            &args.name,
            &fate,
            &place,
            args.delete_backups,
        ))?
    {
        return Err(CliError::Failed(
            "delete cancelled: nothing was changed".to_string(),
        ));
    }
    // The annotation must be on the app before its deletion starts: the reconciler reads it
    // during cleanup, when the app can no longer be changed.
    if args.delete_backups {
        kube.apps()
            .patch(
                &args.name,
                &PatchParams::default(),
                &Patch::Merge(&delete_backups_patch()),
            )
            .await
            .map_err(|e| explain(e, &Action::app("patch", &kube.namespace, &args.name)))?;
    }
    kube.apps()
        .delete(&args.name, &DeleteParams::default())
        .await
        .map_err(|e| explain(e, &Action::app("delete", &kube.namespace, &args.name)))?;
    if args.wait.wait.unwrap_or(true) {
        wait_gone(ctx, &kube, &args.name, args.wait.timeout, warning.is_some()).await?;
    } else if !name_only {
        return Ok(format!(
            "hellostateful.hello-stateful.example.com/{} marked for deletion: the reconciler cleans up ({fate}); follow it with `kubectl hellostateful status {}`\n",
            args.name, args.name
        ));
    }
    Ok(if name_only {
        format!("hellostateful.hello-stateful.example.com/{}\n", args.name)
    } else {
        deleted_message(&args.name, &fate, &place, args.delete_backups)
    })
}

/// Polls until the app is gone, that is until the reconciler's cleanup released it.
async fn wait_gone(
    ctx: &Ctx,
    kube: &Kube,
    name: &str,
    timeout: Duration,
    reconciler_absent: bool,
) -> Result<(), CliError> {
    let started = Instant::now();
    let namespace = &kube.namespace;
    ctx.debug(1, format!("waiting for {namespace}/{name} to be gone"));
    loop {
        let waited = started.elapsed();
        match kube.apps().get_opt(name).await {
            Ok(None) => return Ok(()),
            Ok(Some(_)) => {}
            Err(error) => {
                let error = explain(error, &Action::app("get", namespace, name));
                if !passing(&error) || waited >= timeout {
                    return Err(error);
                }
                ctx.debug(1, format!("reading {name} failed, trying again: {error}"));
            }
        }
        if reconciler_absent && waited >= NO_RECONCILER_GRACE {
            return Err(CliError::Failed(format!(
                "{namespace}/{name} is marked for deletion, but the reconciler is not running: the app and its data stay until it runs again (`kubectl hellostateful install`)"
            )));
        }
        if waited >= timeout {
            return Err(CliError::Failed(format!(
                "timed out after {}s waiting for {namespace}/{name} to be deleted: the reconciler is still cleaning up (see `kubectl hellostateful status {name}` and its events); nothing is rolled back",
                timeout.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLACE: &str = "node directory /tmp/backup/default/hello on node node-1";

    #[test]
    fn says_where_backups_are_kept() {
        let app = crate::get::tests::app("default", "hello", 1, 1);
        assert_eq!(backups_place(&app, "default"), PLACE);
    }

    const WIPED: &str = "Its live data is wiped.";

    #[test]
    fn without_delete_backups_it_says_the_data_is_wiped_and_the_backups_kept() {
        assert_eq!(
            question("default", "hello", WIPED, PLACE, false),
            "Delete default/hello with its StatefulSet, Service, CronJob and Jobs?\n  Its live data is wiped.\n  Its backups are kept in node directory /tmp/backup/default/hello on node node-1.\n  Continue?"
        );
        assert_eq!(
            deleted_message("hello", WIPED, PLACE, false),
            "hellostateful.hello-stateful.example.com/hello deleted\nIts live data is wiped. Its backups are kept in node directory /tmp/backup/default/hello on node node-1: create it again with --restore-from-existing to get its data back.\n"
        );
    }

    #[test]
    fn with_delete_backups_it_says_nothing_can_be_recovered() {
        assert_eq!(
            question("default", "hello", WIPED, PLACE, true),
            "Delete default/hello with its StatefulSet, Service, CronJob and Jobs, and all its backups?\n  Its live data is wiped.\n  Its backups in node directory /tmp/backup/default/hello on node node-1 are deleted too: they cannot be recovered.\n  Continue?"
        );
        let message = deleted_message("hello", WIPED, PLACE, true);
        assert!(message.contains(
            "backups in node directory /tmp/backup/default/hello on node node-1 were deleted"
        ));
        assert!(message.contains("cannot be recovered"));
        assert!(!message.contains("--restore-from-existing"));
    }

    #[test]
    fn static_volumes_are_wiped_and_claims_of_a_class_go_with_the_app() {
        let mut app = crate::get::tests::app("default", "hello", 2, 2);
        assert_eq!(live_data_fate(&app), WIPED);
        app.spec.storage = serde_json::from_value(json!({"storageClassName": "fast"})).ok();
        let fate = live_data_fate(&app);
        assert!(
            fate.starts_with("Its claims (StorageClass fast) are deleted with it")
                && fate.contains("reclaim policy")
                && fate.ends_with("Only a backup brings it back."),
            "{fate}"
        );
    }

    #[test]
    fn delete_backups_is_one_annotation_set_to_true() {
        assert_eq!(
            delete_backups_patch(),
            json!({"metadata": {"annotations": {"hello-stateful.example.com/delete-backups": "true"}}})
        );
    }
}
