//! `delete NAME`: deletes the app; the reconciler wipes its live data. Its backups stay
//! where they are unless `--delete-backups` asks the reconciler to delete them too.

use hellostateful_api::{HelloStateful, ResolvedTarget, names};
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::cli::DeleteArgs;
use crate::context::Ctx;
use crate::error::{Action, CliError, explain};
use crate::prompt;

/// Where the app's backups are kept, in words.
pub fn backups_place(app: &HelloStateful, namespace: &str) -> String {
    let name = app.name_any();
    match app.spec.backup_target() {
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
    }
}

/// The confirmation: what goes, what stays, and what can never come back.
pub fn question(namespace: &str, name: &str, place: &str, delete_backups: bool) -> String {
    if delete_backups {
        format!(
            "Delete {namespace}/{name} with its StatefulSet, volumes, CronJob and Jobs, and all its backups?\n  Its live data is wiped, and its backups in {place} are deleted too: they cannot be recovered.\n  Continue?"
        )
    } else {
        format!(
            "Delete {namespace}/{name} with its StatefulSet, volumes, CronJob and Jobs?\n  Its live data is wiped.\n  Its backups are kept in {place}.\n  Continue?"
        )
    }
}

/// What `delete` prints once the API server accepted the deletion.
pub fn deleted_message(name: &str, place: &str, delete_backups: bool) -> String {
    let outcome = if delete_backups {
        format!(
            "The reconciler wipes its live data and deletes its backups in {place}: they cannot be recovered."
        )
    } else {
        format!(
            "The reconciler wipes its live data. Its backups are kept in {place}: create it again with --restore-from-existing to get its data back."
        )
    };
    format!("hellostateful.hello-stateful.example.com/{name} deleted\n{outcome}\n")
}

/// The merge patch that tells the reconciler's cleanup to delete the backups as well.
pub fn delete_backups_patch() -> Value {
    json!({"metadata": {"annotations": {names::DELETE_BACKUPS: "true"}}})
}

/// `delete`.
pub async fn delete(ctx: &Ctx, args: &DeleteArgs) -> Result<String, CliError> {
    if !args.yes && !ctx.terminal.can_prompt() {
        return Err(CliError::Usage(format!(
            "refusing to delete {} without confirmation: stdin is not a terminal; pass --yes",
            args.name
        )));
    }
    let kube = ctx.connect().await?;
    let app = kube.get_app(&args.name).await?;
    let place = backups_place(&app, &kube.namespace);
    if !args.yes
        && !prompt::confirm(&question(
            &kube.namespace,
            &args.name,
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
    Ok(deleted_message(&args.name, &place, args.delete_backups))
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

    #[test]
    fn without_delete_backups_it_says_the_data_is_wiped_and_the_backups_kept() {
        assert_eq!(
            question("default", "hello", PLACE, false),
            "Delete default/hello with its StatefulSet, volumes, CronJob and Jobs?\n  Its live data is wiped.\n  Its backups are kept in node directory /tmp/backup/default/hello on node node-1.\n  Continue?"
        );
        assert_eq!(
            deleted_message("hello", PLACE, false),
            "hellostateful.hello-stateful.example.com/hello deleted\nThe reconciler wipes its live data. Its backups are kept in node directory /tmp/backup/default/hello on node node-1: create it again with --restore-from-existing to get its data back.\n"
        );
    }

    #[test]
    fn with_delete_backups_it_says_nothing_can_be_recovered() {
        assert_eq!(
            question("default", "hello", PLACE, true),
            "Delete default/hello with its StatefulSet, volumes, CronJob and Jobs, and all its backups?\n  Its live data is wiped, and its backups in node directory /tmp/backup/default/hello on node node-1 are deleted too: they cannot be recovered.\n  Continue?"
        );
        let message = deleted_message("hello", PLACE, true);
        assert!(
            message.contains("deletes its backups in node directory /tmp/backup/default/hello")
        );
        assert!(message.contains("cannot be recovered"));
        assert!(!message.contains("--restore-from-existing"));
    }

    #[test]
    fn delete_backups_is_one_annotation_set_to_true() {
        assert_eq!(
            delete_backups_patch(),
            json!({"metadata": {"annotations": {"hello-stateful.example.com/delete-backups": "true"}}})
        );
    }
}
