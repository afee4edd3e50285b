//! `list` and `get`: apps as table rows, JSON, YAML or names.

use chrono::{DateTime, Utc};
use hellostateful_api::HelloStateful;
use kube::api::ListParams;
use kube::{Api, Resource, ResourceExt};

use crate::cli::{GetArgs, ListArgs, OutputFormat};
use crate::context::Ctx;
use crate::error::{Action, CliError, explain};
use crate::output::{Style, age_of, list_of, printable, table, to_json, to_yaml};

/// `list`.
pub async fn list(ctx: &Ctx, args: &ListArgs) -> Result<String, CliError> {
    let kube = ctx.connect().await?;
    let api: Api<HelloStateful> = if args.all_namespaces {
        Api::all(kube.client.clone())
    } else {
        kube.apps()
    };
    let mut params = ListParams::default();
    if let Some(selector) = &args.selector {
        params = params.labels(selector);
    }
    let scope = if args.all_namespaces {
        "hellostatefuls in all namespaces".to_string()
    } else {
        format!("hellostatefuls in namespace {:?}", kube.namespace)
    };
    let mut apps = api
        .list(&params)
        .await
        .map_err(|e| explain(e, &Action::apps("list", scope)))?
        .items;
    apps.sort_by_key(|a| (a.namespace(), a.name_any()));
    if apps.is_empty() && matches!(ctx.output(), OutputFormat::Table | OutputFormat::Wide) {
        let place = if args.all_namespaces {
            "any namespace".to_string()
        } else {
            format!("namespace {}", kube.namespace)
        };
        eprintln!("No HelloStateful apps found in {place}.");
        return Ok(String::new());
    }
    render(ctx, &apps, args.all_namespaces, true, Utc::now())
}

/// `get [NAME]`.
pub async fn get(ctx: &Ctx, args: &GetArgs) -> Result<String, CliError> {
    let Some(name) = &args.name else {
        return list(ctx, &args.list).await;
    };
    let kube = ctx.connect().await?;
    let app = kube.get_app(name).await?;
    render(ctx, &[app], false, false, Utc::now())
}

/// Renders apps in the requested format. `many` makes -o json/yaml print a List.
pub fn render(
    ctx: &Ctx,
    apps: &[HelloStateful],
    all_namespaces: bool,
    many: bool,
    now: DateTime<Utc>,
) -> Result<String, CliError> {
    match ctx.output() {
        OutputFormat::Table => Ok(table_of(apps, all_namespaces, false, now, ctx.style)),
        OutputFormat::Wide => Ok(table_of(apps, all_namespaces, true, now, ctx.style)),
        OutputFormat::Name => Ok(apps
            .iter()
            .map(|app| {
                format!(
                    "hellostateful.hello-stateful.example.com/{}\n",
                    printable(&app.name_any())
                )
            })
            .collect()),
        format @ (OutputFormat::Json | OutputFormat::Yaml) => {
            let value = if many {
                list_of(apps.iter().map(object_value).collect())
            } else {
                apps.first().map(object_value).unwrap_or_default()
            };
            if format == OutputFormat::Json {
                to_json(&value)
            } else {
                to_yaml(&value)
            }
        }
    }
}

/// An app as kubectl prints it: with apiVersion and kind, without managedFields.
pub fn object_value(app: &HelloStateful) -> serde_json::Value {
    let mut value = serde_json::to_value(app).unwrap_or_default();
    if let Some(object) = value.as_object_mut() {
        object.insert(
            "apiVersion".to_string(),
            HelloStateful::api_version(&()).into(),
        );
        object.insert("kind".to_string(), HelloStateful::kind(&()).into());
        if let Some(metadata) = object.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            metadata.remove("managedFields");
        }
    }
    value
}

/// The READY cell: ready/desired, coloured.
fn ready(app: &HelloStateful, style: Style) -> String {
    let ready = app.status.as_ref().map_or(0, |s| s.ready_replicas);
    let desired = app.spec.replicas;
    let text = format!("{ready}/{desired}");
    if ready >= desired {
        style.good(text)
    } else {
        style.warn(text)
    }
}

/// Apps as a table: NAME, READY, REPLICAS, SCHEDULE, LAST BACKUP, RESTORED, AGE (+NAMESPACE
/// with -A; wide adds NODE, VOLUMES, LAST BACKUP ID).
pub fn table_of(
    apps: &[HelloStateful],
    all_namespaces: bool,
    wide: bool,
    now: DateTime<Utc>,
    style: Style,
) -> String {
    let mut headers = Vec::new();
    if all_namespaces {
        headers.push("NAMESPACE");
    }
    headers.extend([
        "NAME",
        "READY",
        "REPLICAS",
        "SCHEDULE",
        "LAST BACKUP",
        "RESTORED",
        "AGE",
    ]);
    if wide {
        headers.extend(["NODE", "VOLUMES", "LAST BACKUP ID"]);
    }
    let rows: Vec<Vec<String>> = apps
        .iter()
        .map(|app| {
            let status = app.status.clone().unwrap_or_default();
            let mut row = Vec::new();
            if all_namespaces {
                row.push(printable(&app.namespace().unwrap_or_default()).into_owned());
            }
            let schedule = match (&app.spec.backup_schedule, app.spec.backups_suspended()) {
                (Some(schedule), true) => format!("{} (suspended)", printable(schedule)),
                (Some(schedule), false) => printable(schedule).into_owned(),
                (None, _) => "<none>".to_string(),
            };
            let last_backup = status
                .last_backup
                .as_ref()
                .map_or("<none>".to_string(), |b| age_of(now, &b.time));
            // The reconciler's BackupOverdue condition: two scheduled runs passed without one.
            let overdue = status
                .conditions
                .iter()
                .any(|c| c.type_ == "BackupOverdue" && c.status == "True");
            let last_backup = if overdue {
                style.warn(format!("{last_backup} (overdue)"))
            } else {
                last_backup
            };
            row.extend([
                printable(&app.name_any()).into_owned(),
                ready(app, style),
                app.spec.replicas.to_string(),
                schedule,
                last_backup,
                status.is_restored.to_string(),
                app.meta()
                    .creation_timestamp
                    .as_ref()
                    .map_or("<unknown>".to_string(), |t| age_of(now, &t.0.to_string())),
            ]);
            if wide {
                row.push(
                    status
                        .node_name
                        .as_deref()
                        .map_or_else(|| "<none>".into(), |node| printable(node).into_owned()),
                );
                row.push(if status.backend_volumes.is_empty() {
                    "<none>".into()
                } else {
                    printable(&status.backend_volumes.join(",")).into_owned()
                });
                row.push(
                    status
                        .last_backup
                        .as_ref()
                        .map_or("<none>".into(), |b| printable(&b.id).into_owned()),
                );
            }
            row
        })
        .collect();
    table(&headers, &rows)
}

/// Age of a creation timestamp.
pub fn created_age(app: &HelloStateful, now: DateTime<Utc>) -> String {
    app.meta()
        .creation_timestamp
        .as_ref()
        .map_or("<unknown>".to_string(), |t| age_of(now, &t.0.to_string()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use chrono::TimeZone;
    use hellostateful_api::{HelloStatefulSpec, HelloStatefulStatus, LastBackup};

    pub fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 29, 15, 0, 0).unwrap()
    }

    pub fn app(namespace: &str, name: &str, replicas: i32, ready: i32) -> HelloStateful {
        let spec: HelloStatefulSpec = serde_json::from_value(serde_json::json!({
            "replicas": replicas,
            "restoreFromExisting": true,
            "backupSchedule": "*/5 * * * *",
        }))
        .unwrap();
        let mut app = HelloStateful::new(name, spec);
        app.metadata.namespace = Some(namespace.to_string());
        app.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-29T12:00:00Z".parse().unwrap(),
            ));
        app.status = Some(HelloStatefulStatus {
            ready_replicas: ready,
            backend_volumes: (0..replicas)
                .map(|i| hellostateful_api::names::claim(name, i))
                .collect(),
            node_name: Some("node-1".to_string()),
            last_backup: Some(LastBackup {
                id: "20261129T145500Z".to_string(),
                time: "2026-11-29T14:55:02Z".to_string(),
                bytes: 2048,
                files: 1,
                new_bytes: 100,
                duration_ms: 120,
                inconsistent_files: 0,
                job: Some(format!("backup-{name}-29376120")),
                snapshots: Some(4),
                oldest_snapshot: Some("20261129T140000Z".to_string()),
            }),
            last_full_read: Some("2026-11-29T12:05:02Z".to_string()),
            ..Default::default()
        });
        app
    }

    #[test]
    fn table_snapshot() {
        let mut second = app("prod", "web", 3, 2);
        second.spec.backup_schedule = None;
        second.status.as_mut().unwrap().last_backup = None;
        second.status.as_mut().unwrap().is_restored = true;
        let apps = vec![app("default", "hello", 1, 1), second];
        assert_eq!(
            table_of(&apps, false, false, now(), Style::PLAIN),
            "\
NAME    READY   REPLICAS   SCHEDULE      LAST BACKUP   RESTORED   AGE
hello   1/1     1          */5 * * * *   4m58s         false      3h
web     2/3     3          <none>        <none>        true       3h
"
        );
        assert_eq!(
            table_of(&apps, true, true, now(), Style::PLAIN),
            "\
NAMESPACE   NAME    READY   REPLICAS   SCHEDULE      LAST BACKUP   RESTORED   AGE   NODE     VOLUMES                            LAST BACKUP ID
default     hello   1/1     1          */5 * * * *   4m58s         false      3h    node-1   data-hello-0                       20261129T145500Z
prod        web     2/3     3          <none>        <none>        true       3h    node-1   data-web-0,data-web-1,data-web-2   <none>
"
        );
    }

    #[test]
    fn an_overdue_backup_is_marked_in_the_table() {
        let mut late = app("default", "late", 1, 1);
        late.status.as_mut().unwrap().conditions.push(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: "BackupOverdue".into(),
                status: "True".into(),
                reason: "BackupOverdue".into(),
                message: "no backup has succeeded since ...".into(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    "2026-11-29T14:00:00Z".parse().unwrap(),
                ),
                observed_generation: None,
            },
        );
        let text = table_of(&[late], false, false, now(), Style::PLAIN);
        assert!(text.contains("4m58s (overdue)"), "{text}");
    }

    #[test]
    fn a_table_row_shows_a_tenants_escapes_as_text() {
        let mut hello = app("default", "hello", 1, 1);
        hello.spec.backup_schedule = Some("@hourly\u{1b}[2J".into());
        let status = hello.status.as_mut().unwrap();
        status.node_name = Some("node\u{1b}]0;x\u{7}".into());
        status.backend_volumes = vec!["data\rhello".into()];
        if let Some(last) = status.last_backup.as_mut() {
            last.id = "id\u{9b}2J".into();
        }
        let text = table_of(&[hello], true, true, now(), Style::PLAIN);
        assert!(
            !text.contains(|c: char| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert!(text.contains("@hourly\\u{1b}[2J"), "{text}");
    }

    #[test]
    fn json_output_has_type_and_no_managed_fields() {
        let mut one = app("default", "hello", 1, 1);
        one.metadata.managed_fields = Some(vec![Default::default()]);
        let value = object_value(&one);
        assert_eq!(value["apiVersion"], "hello-stateful.example.com/v1alpha1");
        assert_eq!(value["kind"], "HelloStateful");
        assert!(value["metadata"].get("managedFields").is_none());
        assert_eq!(value["spec"]["backupSchedule"], "*/5 * * * *");
    }
}
