//! `delete NAME`: deletes the app; its backups stay where they are.

use hellostateful_api::{HelloStateful, ResolvedTarget};
use kube::ResourceExt;
use kube::api::DeleteParams;

use crate::cli::DeleteArgs;
use crate::context::Ctx;
use crate::error::{Action, CliError, explain};
use crate::prompt;

/// Where the app's backups are kept, in words.
pub fn backups_place(app: &HelloStateful, namespace: &str) -> String {
    let name = app.name_any();
    match app.spec.backup_target() {
        ResolvedTarget::HostPath(path) => format!(
            "node directory {path}/{namespace}/{name}{}",
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
    if !args.yes {
        let question = format!(
            "Delete {}/{} with its StatefulSet, volumes and their data, CronJob and Jobs?\n  Its backups are kept in {place}.\n  Continue?",
            kube.namespace, args.name
        );
        if !prompt::confirm(&question)? {
            return Err(CliError::Failed(
                "delete cancelled: nothing was changed".to_string(),
            ));
        }
    }
    kube.apps()
        .delete(&args.name, &DeleteParams::default())
        .await
        .map_err(|e| explain(e, &Action::app("delete", &kube.namespace, &args.name)))?;
    Ok(format!(
        "hellostateful.hello-stateful.example.com/{} deleted\nIts backups are kept in {place}: create it again with --restore-from-existing to get its data back.\n",
        args.name
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn says_where_backups_are_kept() {
        let app = crate::get::tests::app("default", "hello", 1, 1);
        assert_eq!(
            backups_place(&app, "default"),
            "node directory /tmp/backup/default/hello on node node-1"
        );
    }
}
