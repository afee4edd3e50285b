//! `backups NAME`, `backups describe NAME ID`, `backups delete NAME ID` and `verify NAME
//! [ID]`: the data mover's catalog commands, run in a short-lived pod (`mover_pod`) on the
//! claim that holds the app's backups, also after the app was deleted.

use chrono::{DateTime, Utc};
use hellostateful_api::summary::{
    BackupDetails, CatalogEntry, DeleteResult, VerifyResult, parse_last_line,
};
use hellostateful_api::validate;
use serde::de::DeserializeOwned;

use crate::cli::{
    BackupRef, BackupsAction, BackupsArgs, DeleteBackupArgs, OutputFormat, VerifyArgs,
};
use crate::context::{Ctx, Kube};
use crate::error::CliError;
use crate::mover_pod::{self, Ended, Source, Task, last_lines};
use crate::output::{age_of, human_bytes, human_millis, printable, table, to_json, to_yaml};
use crate::prompt;

/// `backups ...`.
pub async fn backups(ctx: &Ctx, args: &BackupsArgs) -> Result<String, CliError> {
    match (&args.action, &args.name) {
        (Some(BackupsAction::Describe(backup)), _) => describe(ctx, backup).await,
        (Some(BackupsAction::Delete(delete_args)), _) => delete(ctx, delete_args).await,
        (None, Some(name)) => list(ctx, name, args.image.image.as_deref()).await,
        (None, None) => Err(CliError::Usage(
            "backups needs the name of an app: `kubectl hellostateful backups NAME`".into(),
        )),
    }
}

/// Where the backups of `name` are; an error that says so when there are none.
async fn located(kube: &Kube, name: &str) -> Result<Source, CliError> {
    mover_pod::locate(kube, name)
        .await?
        .ok_or_else(|| no_backups(kube, name))
}

fn no_backups(kube: &Kube, name: &str) -> CliError {
    CliError::Failed(format!(
        "no backups of {}/{name}: its backup claim {} does not exist, so no backup was ever made",
        kube.namespace,
        hellostateful_api::names::backup_claim(name)
    ))
}

/// Runs `task` and parses the mover's JSON. A failed pod is an error with the mover's last
/// words, unless `damage_is_output` and it printed its JSON (verify: damage found).
async fn run_parsed<T: DeserializeOwned>(
    ctx: &Ctx,
    kube: &Kube,
    name: &str,
    task: &Task,
    image: Option<&str>,
    damage_is_output: bool,
) -> Result<T, CliError> {
    let source = located(kube, name).await?;
    match mover_pod::run(ctx, kube, name, &source, task, image).await? {
        Ended::NoDirectory => Err(no_backups(kube, name)),
        Ended::Ran { succeeded, log } => {
            let parsed = parse_last_line::<T>(&log);
            match parsed {
                Some(value) if succeeded || damage_is_output => Ok(value),
                _ => Err(CliError::Failed(last_lines(&log, 5))),
            }
        }
    }
}

/// `backups NAME`: also for a deleted app whose backups were on a node root (its backup
/// claim outlives it).
async fn list(ctx: &Ctx, name: &str, image: Option<&str>) -> Result<String, CliError> {
    let kube = ctx.connect().await?;
    let Some(source) = mover_pod::locate(&kube, name).await? else {
        eprintln!(
            "No backups of {}/{name}: {}.",
            kube.namespace,
            no_claim(name)
        );
        return print_catalog(ctx, &kube.namespace, name, Vec::new(), true);
    };
    let mut entries = match mover_pod::run(ctx, &kube, name, &source, &Task::List, image).await? {
        Ended::NoDirectory => Vec::new(),
        Ended::Ran { succeeded, log } => match parse_last_line::<Vec<CatalogEntry>>(&log) {
            Some(entries) if succeeded => entries,
            _ => {
                return Err(CliError::Failed(format!(
                    "reading the backups failed: {}",
                    last_lines(&log, 5)
                )));
            }
        },
    };
    entries.sort_by(|a, b| b.time.cmp(&a.time));
    print_catalog(ctx, &kube.namespace, name, entries, false)
}

fn no_claim(name: &str) -> String {
    format!(
        "its backup claim {} does not exist, so no backup was ever made",
        hellostateful_api::names::backup_claim(name)
    )
}

/// The catalog in the format asked for; `explained` when stderr already said why it is empty.
fn print_catalog(
    ctx: &Ctx,
    namespace: &str,
    name: &str,
    entries: Vec<CatalogEntry>,
    explained: bool,
) -> Result<String, CliError> {
    match ctx.output() {
        OutputFormat::Json => to_json(&entries),
        OutputFormat::Yaml => to_yaml(&entries),
        OutputFormat::Name => Ok(entries
            .iter()
            .map(|e| format!("{}\n", printable(&e.id)))
            .collect()),
        _ if entries.is_empty() => {
            if !explained {
                eprintln!("No backups of {namespace}/{name} yet.");
            }
            Ok(String::new())
        }
        _ => Ok(catalog_table(&entries, Utc::now())),
    }
}

fn check_id(id: &str) -> Result<(), CliError> {
    validate::restore_from(id).map_err(|e| CliError::Usage(e.to_string()))
}

/// `backups describe NAME ID`.
async fn describe(ctx: &Ctx, backup: &BackupRef) -> Result<String, CliError> {
    check_id(&backup.id)?;
    let kube = ctx.connect().await?;
    let task = Task::Describe(backup.id.clone());
    let details: BackupDetails = run_parsed(
        ctx,
        &kube,
        &backup.name,
        &task,
        backup.image.image.as_deref(),
        false,
    )
    .await?;
    let text = details_text(&details, &backup.name, Utc::now());
    formatted(ctx, &details, &details.id, text)
}

/// `value` as -o asks (`name` prints `id`), else `text`.
fn formatted<T: serde::Serialize>(
    ctx: &Ctx,
    value: &T,
    id: &str,
    text: String,
) -> Result<String, CliError> {
    match ctx.output() {
        OutputFormat::Json => to_json(value),
        OutputFormat::Yaml => to_yaml(value),
        OutputFormat::Name => Ok(format!("{}\n", printable(id))),
        _ => Ok(text),
    }
}

/// A backup in full, for people.
pub fn details_text(d: &BackupDetails, name: &str, now: DateTime<Utc>) -> String {
    let ordinals: Vec<String> = d.ordinals.iter().map(u32::to_string).collect();
    let id = printable(&d.id);
    let mut lines = vec![
        (
            "Backup",
            if d.newest {
                format!("{id} (the newest: kept by retention and delete)")
            } else {
                id.to_string()
            },
        ),
        ("App", printable(&d.app).into_owned()),
        (
            "Started",
            format!("{} ({} ago)", printable(&d.time), age_of(now, &d.time)),
        ),
        ("Took", human_millis(d.duration_ms)),
        (
            "Size",
            format!("{} in {} files", human_bytes(d.bytes), d.files),
        ),
        (
            "New",
            format!(
                "{} copied; {} files linked to the backup before",
                human_bytes(d.new_bytes),
                d.linked_files
            ),
        ),
        ("Replicas", ordinals.join(", ")),
    ];
    if d.inconsistent_files > 0 {
        lines.push((
            "Torn files",
            format!("{} kept changing while copied", d.inconsistent_files),
        ));
    }
    lines.push((
        "Manifest",
        format!(
            "format {}, checksum {} (matches)",
            d.format,
            printable(&d.manifest_checksum)
        ),
    ));
    lines.push((
        "Contents",
        format!("not checked here: `kubectl hellostateful verify {name} {id}`"),
    ));
    lines
        .iter()
        .map(|(key, value)| format!("{:<12}{value}\n", format!("{key}:")))
        .collect()
}

/// `backups delete NAME ID`.
async fn delete(ctx: &Ctx, args: &DeleteBackupArgs) -> Result<String, CliError> {
    let backup = &args.backup;
    check_id(&backup.id)?;
    if backup.id == "latest" {
        return Err(CliError::Usage(
            "backups delete takes a backup id, not latest: `kubectl hellostateful backups NAME` lists them".into(),
        ));
    }
    if !args.yes && !ctx.terminal.can_prompt() {
        return Err(CliError::Usage(format!(
            "refusing to delete backup {} of {} without confirmation: stdin is not a terminal; pass --yes",
            backup.id, backup.name
        )));
    }
    let kube = ctx.connect().await?;
    if !args.yes {
        let question = format!(
            "Delete backup {} of {}/{}? It cannot be recovered.",
            backup.id, kube.namespace, backup.name
        );
        if !prompt::confirm(&question)? {
            return Err(CliError::Failed("nothing was deleted".into()));
        }
    }
    let task = Task::Delete {
        id: backup.id.clone(),
        force: args.force,
    };
    let result: DeleteResult = run_parsed(
        ctx,
        &kube,
        &backup.name,
        &task,
        backup.image.image.as_deref(),
        false,
    )
    .await?;
    let text = format!(
        "backup {} of {}/{} deleted; {} left\n",
        printable(&result.deleted),
        kube.namespace,
        backup.name,
        result.kept.len()
    );
    formatted(ctx, &result, &result.deleted, text)
}

/// `verify NAME [ID]`: exits 1 when any file is damaged, after listing them.
pub async fn verify(ctx: &Ctx, args: &VerifyArgs) -> Result<String, CliError> {
    check_id(&args.id)?;
    let kube = ctx.connect().await?;
    let task = Task::Verify(args.id.clone());
    let result: VerifyResult = run_parsed(
        ctx,
        &kube,
        &args.name,
        &task,
        args.image.image.as_deref(),
        true,
    )
    .await?;
    let output = match ctx.output() {
        OutputFormat::Json => to_json(&result)?,
        OutputFormat::Yaml => to_yaml(&result)?,
        _ if result.problems.is_empty() => format!(
            "backup {} of {}/{} verified: {} files, {}, every checksum matches\n",
            printable(&result.id),
            kube.namespace,
            args.name,
            result.files,
            human_bytes(result.bytes)
        ),
        _ => result
            .problems
            .iter()
            .map(|problem| format!("damaged: {}\n", printable(problem)))
            .collect(),
    };
    if result.problems.is_empty() {
        return Ok(output);
    }
    Err(CliError::AfterOutput {
        output,
        error: Box::new(CliError::Failed(format!(
            "backup {} of {}/{} is damaged: {} problem(s); restore an older backup (`kubectl hellostateful backups {}`)",
            result.id,
            kube.namespace,
            args.name,
            result.problems.len(),
            args.name
        ))),
    })
}

/// The catalog as a table: ID, TIME, AGE, SIZE, FILES, NEW.
pub fn catalog_table(entries: &[CatalogEntry], now: DateTime<Utc>) -> String {
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            vec![
                printable(&e.id).into_owned(),
                printable(&e.time).into_owned(),
                age_of(now, &e.time),
                human_bytes(e.bytes),
                e.files.to_string(),
                human_bytes(e.new_bytes),
            ]
        })
        .collect();
    table(&["ID", "TIME", "AGE", "SIZE", "FILES", "NEW"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::get::tests::now;

    #[test]
    fn ids_and_file_names_from_a_backup_are_printed_escaped() {
        let entry = CatalogEntry {
            id: "20261129T145500Z\u{1b}]0;x\u{7}".into(),
            time: "2026-11-29T14:55:00Z\r".into(),
            bytes: 1,
            files: 1,
            new_bytes: 1,
            duration_ms: 1,
            ordinals: vec![0],
        };
        let text = catalog_table(&[entry], now());
        assert!(
            !text.contains(|c: char| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert!(text.contains("20261129T145500Z\\u{1b}]0;x\\u{7}"), "{text}");
    }

    #[test]
    fn catalog_table_snapshot() {
        let entries = vec![
            CatalogEntry {
                id: "20261129T145500Z".into(),
                time: "2026-11-29T14:55:00Z".into(),
                bytes: 2048,
                files: 2,
                new_bytes: 300,
                duration_ms: 40,
                ordinals: vec![0],
            },
            CatalogEntry {
                id: "20261129T145000Z".into(),
                time: "2026-11-29T14:50:00Z".into(),
                bytes: 1_800_000,
                files: 120,
                new_bytes: 1_800_000,
                duration_ms: 900,
                ordinals: vec![0],
            },
        ];
        assert_eq!(
            catalog_table(&entries, now()),
            "\
ID                 TIME                   AGE   SIZE     FILES   NEW
20261129T145500Z   2026-11-29T14:55:00Z   5m    2KiB     2       300B
20261129T145000Z   2026-11-29T14:50:00Z   10m   1.7MiB   120     1.7MiB
"
        );
    }
}
