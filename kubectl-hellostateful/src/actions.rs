//! `backup` and `restore`: ask by annotation token, then follow the acknowledgement in status.

use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};
use hellostateful_api::names::{BACKUP_REQUESTED, BACKUP_REREAD, RESTORE_FROM, RESTORE_REQUESTED};
use hellostateful_api::{HelloStateful, RequestPhase, RequestStatus, ResolvedTarget, validate};
use indicatif::{ProgressBar, ProgressStyle};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::cli::{BackupArgs, OutputFormat, RestoreArgs, WaitArgs};
use crate::context::{Ctx, Kube};
use crate::error::{Action, CliError, explain};
use crate::output::{printable, to_json, to_yaml};
use crate::prompt;

/// How long to wait for a first acknowledgement when the reconciler looks absent.
pub const NO_RECONCILER_GRACE: Duration = Duration::from_secs(15);

/// A new token: the time now, RFC 3339 UTC with microseconds, so quick requests differ.
pub fn new_token(now: DateTime<Utc>) -> String {
    now.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// The merge patch asking for one backup; with `full`, one that reads every file again,
/// named by its token in the same write.
pub fn backup_patch(token: &str, full: bool) -> Value {
    let mut patch = json!({"metadata": {"annotations": {BACKUP_REQUESTED: token}}});
    if full {
        patch["metadata"]["annotations"][BACKUP_REREAD] = json!(token);
    }
    patch
}

/// The merge patch asking for one restore: both annotations in one write.
pub fn restore_patch(token: &str, from: &str) -> Value {
    json!({"metadata": {"annotations": {RESTORE_FROM: from, RESTORE_REQUESTED: token}}})
}

/// Which request slot of status to follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Backup,
    Restore,
}

impl Kind {
    fn noun(self) -> &'static str {
        match self {
            Kind::Backup => "backup",
            Kind::Restore => "restore",
        }
    }

    fn slot(self, app: &HelloStateful) -> Option<RequestStatus> {
        let status = app.status.as_ref()?;
        match self {
            Kind::Backup => status.backup_request.clone(),
            Kind::Restore => status.restore_request.clone(),
        }
    }
}

/// Whether to wait: yes unless --wait=false, with or without a terminal, so that a script
/// gets what a person gets.
fn should_wait(wait: &WaitArgs) -> bool {
    wait.wait.unwrap_or(true)
}

/// `backup NAME`.
pub async fn backup(ctx: &Ctx, args: &BackupArgs) -> Result<String, CliError> {
    let kube = ctx.connect().await?;
    kube.get_app(&args.name).await?;
    let waiting = should_wait(&args.wait);
    let reconciler = kube.reconciler().await;
    let warning = reconciler.not_running_warning();
    if let Some(warning) = &warning {
        eprintln!("{} {warning}", ctx.style.warn("Warning:"));
    }
    let token = new_token(Utc::now());
    send(&kube, &args.name, &backup_patch(&token, args.full)).await?;
    ctx.debug(1, format!("asked for a backup with token {token}"));
    if !waiting {
        return requested(ctx, Kind::Backup, &kube.namespace, &args.name, &token, None);
    }
    let result = follow(
        ctx,
        &kube,
        &args.name,
        Kind::Backup,
        &token,
        &args.wait,
        warning.is_some(),
    )
    .await?;
    finish(ctx, &kube, &args.name, Kind::Backup, result)
}

/// `restore NAME`.
pub async fn restore(ctx: &Ctx, args: &RestoreArgs) -> Result<String, CliError> {
    validate::restore_from(&args.from).map_err(|e| CliError::Usage(e.to_string()))?;
    if !args.yes && !ctx.terminal.can_prompt() {
        return Err(CliError::Usage(format!(
            "refusing to restore {} without confirmation: stdin is not a terminal; pass --yes to overwrite its data from backup {}",
            args.name, args.from
        )));
    }
    let kube = ctx.connect().await?;
    let app = kube.get_app(&args.name).await?;
    let reconciler = kube.reconciler().await;
    let warning = reconciler.not_running_warning();
    if let Some(warning) = &warning {
        eprintln!("{} {warning}", ctx.style.warn("Warning:"));
    }
    if !args.yes {
        let question = restore_question(&kube.namespace, &app, &args.from);
        if !prompt::confirm(&question)? {
            return Err(CliError::Failed(
                "restore cancelled: nothing was changed".to_string(),
            ));
        }
    }
    let token = new_token(Utc::now());
    send(&kube, &args.name, &restore_patch(&token, &args.from)).await?;
    ctx.debug(1, format!("asked for a restore with token {token}"));
    if !should_wait(&args.wait) {
        return requested(
            ctx,
            Kind::Restore,
            &kube.namespace,
            &args.name,
            &token,
            Some(&args.from),
        );
    }
    let result = follow(
        ctx,
        &kube,
        &args.name,
        Kind::Restore,
        &token,
        &args.wait,
        warning.is_some(),
    )
    .await?;
    finish(ctx, &kube, &args.name, Kind::Restore, result)
}

/// What the confirmation says: what will be overwritten, and that the app stops meanwhile.
pub fn restore_question(namespace: &str, app: &HelloStateful, from: &str) -> String {
    let name = app.metadata.name.clone().unwrap_or_default();
    let replicas = app.spec.replicas;
    let volumes: Vec<String> = match app.status.as_ref() {
        Some(status) if !status.backend_volumes.is_empty() => status.backend_volumes.clone(),
        _ => (0..replicas.max(1))
            .map(|i| hellostateful_api::names::claim(&name, i))
            .collect(),
    };
    let which = if from == "latest" {
        "the newest backup".to_string()
    } else {
        format!("backup {from}")
    };
    let target = match app.spec.backup_target() {
        ResolvedTarget::HostPath(path) => format!("node directory {path}"),
        ResolvedTarget::Claim(claim) => format!("PersistentVolumeClaim {claim}"),
        ResolvedTarget::ObjectStore(store) => store.describe(namespace, &name),
    };
    format!(
        "Restore {namespace}/{} from {which} (in {})?\n  This overwrites all data on the volumes {} of its {replicas} replica(s).\n  The app is scaled to 0 and stopped while the data is restored, then started again.\n  Continue?",
        printable(&name),
        printable(&target),
        printable(&volumes.join(", "))
    )
}

/// What a request not waited for prints: the request itself, in the format asked for (its
/// token is what status will acknowledge).
fn requested(
    ctx: &Ctx,
    kind: Kind,
    namespace: &str,
    name: &str,
    token: &str,
    from: Option<&str>,
) -> Result<String, CliError> {
    let mut request = json!({
        "kind": kind.noun(),
        "namespace": namespace,
        "name": name,
        "token": token,
        "phase": "Requested",
    });
    if let Some(from) = from {
        request["from"] = json!(from);
    }
    match ctx.output() {
        OutputFormat::Json => to_json(&request),
        OutputFormat::Yaml => to_yaml(&request),
        OutputFormat::Name => Ok(format!("{token}\n")),
        OutputFormat::Table | OutputFormat::Wide => {
            let what = match from {
                Some(from) => format!("Restore of {namespace}/{name} from {from}"),
                None => format!("Backup of {namespace}/{name}"),
            };
            Ok(format!(
                "{what} requested (token {token}). Follow it with `kubectl hellostateful status {name}`.\n"
            ))
        }
    }
}

async fn send(kube: &Kube, name: &str, patch: &Value) -> Result<(), CliError> {
    kube.apps()
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(|_| ())
        .map_err(|e| explain(e, &Action::app("patch", &kube.namespace, name)))
}

/// How waiting ended.
enum Outcome {
    Done(RequestStatus),
    TimedOut(Option<RequestStatus>),
    NeverAcknowledged,
}

/// Polls the app until its status acknowledges `token` with a final phase.
async fn follow(
    ctx: &Ctx,
    kube: &Kube,
    name: &str,
    kind: Kind,
    token: &str,
    wait: &WaitArgs,
    reconciler_absent: bool,
) -> Result<Outcome, CliError> {
    let started = Instant::now();
    let spinner = if ctx.terminal.stderr {
        if matches!(kind, Kind::Backup) {
            // `backup` and `backups` differ by one letter: say what started, and how to
            // get what the other one does.
            eprintln!(
                "{}",
                ctx.style.dim(format!(
                    "Started a backup of {}/{name}; Ctrl-C stops waiting (the backup goes \
                     on). To list backups instead: kubectl hellostateful backups {name}",
                    kube.namespace
                ))
            );
        }
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        bar.set_message(format!(
            "{} of {}/{name}: requested",
            kind.noun(),
            kube.namespace
        ));
        Some(bar)
    } else {
        eprintln!("{} of {}/{name}: requested", kind.noun(), kube.namespace);
        None
    };
    let mut last: Option<RequestStatus> = None;
    let outcome = loop {
        let app = match kube.get_app(name).await {
            Ok(app) => app,
            Err(error) if !passing(&error) => return Err(error),
            Err(error) if started.elapsed() >= wait.timeout => return Err(error),
            Err(error) => {
                ctx.debug(1, format!("reading {name} failed, trying again: {error}"));
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let current = kind.slot(&app).filter(|slot| slot.token == token);
        if current != last {
            if let Some(slot) = &current {
                let line = progress_line(kind, &kube.namespace, name, slot);
                match &spinner {
                    Some(bar) => bar.set_message(line),
                    None => eprintln!("{line}"),
                }
            }
            last = current.clone();
        }
        if let Some(slot) = &current
            && slot.phase.is_final()
        {
            break Outcome::Done(slot.clone());
        }
        if last.is_none() && reconciler_absent && started.elapsed() >= NO_RECONCILER_GRACE {
            break Outcome::NeverAcknowledged;
        }
        if started.elapsed() >= wait.timeout {
            break Outcome::TimedOut(last.clone());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    if let Some(bar) = spinner {
        bar.finish_and_clear();
    }
    Ok(outcome)
}

/// Whether a failed read may pass (an API server restarting, a dropped connection), so
/// that a long wait goes on instead of ending on it; a missing or forbidden app does not.
pub fn passing(error: &CliError) -> bool {
    matches!(error, CliError::Kube { .. } | CliError::Api { .. })
}

fn progress_line(kind: Kind, namespace: &str, name: &str, slot: &RequestStatus) -> String {
    let mut line = format!("{} of {namespace}/{name}: {:?}", kind.noun(), slot.phase);
    if let Some(job) = &slot.job {
        line.push_str(&format!(" (job {})", printable(job)));
    }
    if let Some(message) = &slot.message {
        line.push_str(&format!(": {}", printable(message)));
    }
    line
}

/// Prints the result; failures and timeouts become errors (exit 1).
fn finish(
    ctx: &Ctx,
    kube: &Kube,
    name: &str,
    kind: Kind,
    outcome: Outcome,
) -> Result<String, CliError> {
    let noun = kind.noun();
    let namespace = &kube.namespace;
    match outcome {
        Outcome::Done(slot) if slot.phase == RequestPhase::Succeeded => match ctx.output() {
            OutputFormat::Json => to_json(&slot),
            OutputFormat::Yaml => to_yaml(&slot),
            OutputFormat::Name => Ok(format!(
                "{}\n",
                printable(slot.backup_id.as_deref().unwrap_or_default())
            )),
            _ => {
                let id = printable(slot.backup_id.as_deref().unwrap_or("<unknown>"));
                let detail = slot
                    .message
                    .map(|m| format!(" ({})", printable(&m)))
                    .unwrap_or_default();
                Ok(match kind {
                    Kind::Backup => format!(
                        "{} {namespace}/{name} backed up: backup id {id}{detail}\n",
                        ctx.style.good("✔")
                    ),
                    Kind::Restore => format!(
                        "{} {namespace}/{name} restored from backup {id}{detail}\n",
                        ctx.style.good("✔")
                    ),
                })
            }
        },
        Outcome::Done(slot) => Err(CliError::Failed(format!(
            "{noun} of {namespace}/{name} failed: {}{}",
            slot.message.as_deref().unwrap_or("no message"),
            slot.job
                .map(|job| format!(" (see `kubectl -n {namespace} logs job/{job}`)"))
                .unwrap_or_default()
        ))),
        Outcome::TimedOut(last) => Err(CliError::Failed(format!(
            "timed out waiting for the {noun} of {namespace}/{name}: {}. Nothing is rolled back: the request stays and the reconciler goes on with it; follow it with `kubectl hellostateful status {name}`",
            match last {
                Some(slot) => format!(
                    "it was last {:?}{}",
                    slot.phase,
                    slot.message.map(|m| format!(" ({m})")).unwrap_or_default()
                ),
                None => "the reconciler had not acknowledged the request yet".to_string(),
            }
        ))),
        Outcome::NeverAcknowledged => Err(CliError::Failed(format!(
            "the {noun} of {namespace}/{name} was not acknowledged: the reconciler is not running. The request stays in the annotation and will be carried out when the reconciler runs (`kubectl hellostateful install --wait`)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_goes_on_through_passing_errors_only() {
        let api = |code: u16| {
            let status = kube::core::Status::failure("down", "ServiceUnavailable").with_code(code);
            explain(
                kube::Error::Api(Box::new(status)),
                &Action::app("get", "ns", "hello"),
            )
        };
        assert!(passing(&api(503)));
        assert!(passing(&api(500)));
        assert!(!passing(&api(404)), "the app is gone");
        assert!(!passing(&api(403)), "forbidden does not pass");
    }
    use chrono::TimeZone;

    #[test]
    fn tokens_are_rfc3339_utc_with_microseconds() {
        let now = Utc
            .with_ymd_and_hms(2026, 11, 29, 15, 1, 2)
            .unwrap()
            .checked_add_signed(chrono::Duration::microseconds(123_456))
            .unwrap();
        assert_eq!(new_token(now), "2026-11-29T15:01:02.123456Z");
        let later = now + chrono::Duration::microseconds(1);
        assert_ne!(new_token(now), new_token(later));
    }

    #[test]
    fn backup_patch_is_exact() {
        assert_eq!(
            serde_json::to_string(&backup_patch("2026-11-29T15:01:02.123456Z", false)).unwrap(),
            r#"{"metadata":{"annotations":{"hello-stateful.example.com/backup-requested":"2026-11-29T15:01:02.123456Z"}}}"#
        );
        assert_eq!(
            serde_json::to_string(&backup_patch("2026-11-29T15:01:02.123456Z", true)).unwrap(),
            r#"{"metadata":{"annotations":{"hello-stateful.example.com/backup-requested":"2026-11-29T15:01:02.123456Z","hello-stateful.example.com/backup-reread":"2026-11-29T15:01:02.123456Z"}}}"#
        );
    }

    #[test]
    fn restore_patch_sets_both_annotations_at_once() {
        assert_eq!(
            serde_json::to_string(&restore_patch("t1", "20261129T150102Z")).unwrap(),
            r#"{"metadata":{"annotations":{"hello-stateful.example.com/restore-from":"20261129T150102Z","hello-stateful.example.com/restore-requested":"t1"}}}"#
        );
    }

    #[test]
    fn the_question_says_what_is_overwritten() {
        let app = crate::get::tests::app("prod", "web", 2, 2);
        let question = restore_question("prod", &app, "latest");
        assert_eq!(
            question,
            "Restore prod/web from the newest backup (in node directory /tmp/backup)?\n  This overwrites all data on the volumes data-web-0, data-web-1 of its 2 replica(s).\n  The app is scaled to 0 and stopped while the data is restored, then started again.\n  Continue?"
        );
    }

    #[test]
    fn a_progress_line_shows_the_reconcilers_message_escaped() {
        let slot = RequestStatus {
            token: "t".into(),
            phase: RequestPhase::Running,
            job: Some("restore-hello-1\u{1b}[2J".into()),
            backup_id: None,
            message: Some("copying\rdone \u{1b}]0;x\u{7}".into()),
        };
        assert_eq!(
            progress_line(Kind::Restore, "default", "hello", &slot),
            "restore of default/hello: Running (job restore-hello-1\\u{1b}[2J): copying\\rdone \\u{1b}]0;x\\u{7}"
        );
    }

    #[test]
    fn progress_lines() {
        let slot = RequestStatus {
            token: "t".into(),
            phase: RequestPhase::Pending,
            job: None,
            backup_id: None,
            message: Some("waiting for the restore to finish".into()),
        };
        assert_eq!(
            progress_line(Kind::Backup, "default", "hello", &slot),
            "backup of default/hello: Pending: waiting for the restore to finish"
        );
    }
}
