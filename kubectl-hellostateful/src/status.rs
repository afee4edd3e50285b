//! `status NAME` (`describe`): the app, its children and their health, conditions, backups,
//! requests in flight, and recent events.

use chrono::{DateTime, Utc};
use hellostateful_api::{
    HelloStateful, HelloStatefulStatus, RequestPhase, RequestStatus, ResolvedTarget, names, summary,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ContainerPort, Event, PersistentVolumeClaim, Pod};
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use crate::cli::OutputFormat;
use crate::context::{Ctx, Kube};
use crate::get::{created_age, object_value};
use crate::output::{
    Style, age, age_of, human_bytes, human_duration, human_millis, printable, table, to_json,
    to_yaml,
};

/// Everything `status` shows, read from the cluster.
#[derive(Default)]
pub struct View {
    pub namespace: String,
    pub app: Option<HelloStateful>,
    pub statefulset: Option<StatefulSet>,
    pub pods: Vec<Pod>,
    pub claims: Vec<(String, Option<PersistentVolumeClaim>)>,
    pub cronjob: Option<CronJob>,
    pub jobs: Vec<Job>,
    pub events: Vec<Event>,
    /// Things that could not be read (shown, not fatal).
    pub problems: Vec<String>,
}

/// `status`.
pub async fn status(ctx: &Ctx, name: &str) -> Result<String, CliError> {
    let kube = ctx.connect().await?;
    let app = kube.get_app(name).await?;
    let view = gather(&kube, app).await;
    match ctx.output() {
        OutputFormat::Json => to_json(&view_value(&view)),
        OutputFormat::Yaml => to_yaml(&view_value(&view)),
        _ => Ok(render(&view, Utc::now(), ctx.style)),
    }
}

/// The whole view for -o json|yaml: what the table shows, as the API server's objects.
fn view_value(view: &View) -> serde_json::Value {
    serde_json::json!({
        "app": view.app.as_ref().map(object_value),
        "statefulSet": view.statefulset,
        "pods": view.pods,
        "claims": view.claims.iter()
            .map(|(name, claim)| serde_json::json!({"name": name, "claim": claim}))
            .collect::<Vec<_>>(),
        "cronJob": view.cronjob,
        "jobs": view.jobs,
        "events": view.events,
        "problems": view.problems,
    })
}

use crate::error::CliError;

async fn gather(kube: &Kube, app: HelloStateful) -> View {
    let name = app.name_any();
    let ns = kube.namespace.clone();
    let client = kube.client.clone();
    let mut problems = Vec::new();
    let mut note =
        |what: &str, error: kube::Error| problems.push(format!("cannot read {what}: {error}"));

    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pvc_api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let cron_api: Api<CronJob> = Api::namespaced(client.clone(), &ns);
    let job_api: Api<Job> = Api::namespaced(client.clone(), &ns);
    let event_api: Api<Event> = Api::namespaced(client.clone(), &ns);

    let mut claim_names: Vec<String> = app
        .status
        .as_ref()
        .map(|s| s.backend_volumes.clone())
        .unwrap_or_default();
    for ordinal in 0..app.spec.replicas {
        let claim = names::claim(&name, ordinal);
        if !claim_names.contains(&claim) {
            claim_names.push(claim);
        }
    }
    let instance = format!(
        "app.kubernetes.io/instance={name},app.kubernetes.io/name={}",
        names::APP_NAME
    );
    // By uid too: an app created again under the same name must not show the events of
    // the one deleted before it.
    let mut events_selector =
        format!("involvedObject.name={name},involvedObject.kind=HelloStateful");
    if let Some(uid) = &app.metadata.uid {
        events_selector.push_str(&format!(",involvedObject.uid={uid}"));
    }
    let sts_name = names::statefulset(&name);
    let pods_params = ListParams::default().labels(&names::selector_string(&name));
    let cron_name = names::cronjob(&name);
    let jobs_params = ListParams::default().labels(&instance);
    let events_params = ListParams::default().fields(&events_selector);
    let (sts, pods, cron, jobs, events) = futures::join!(
        sts_api.get_opt(&sts_name),
        pod_api.list(&pods_params),
        cron_api.get_opt(&cron_name),
        job_api.list(&jobs_params),
        event_api.list(&events_params),
    );
    let claims = futures::future::join_all(claim_names.iter().map(|c| pvc_api.get_opt(c))).await;

    let statefulset = sts.unwrap_or_else(|e| {
        note("the StatefulSet", e);
        None
    });
    let mut pods = pods.map(|l| l.items).unwrap_or_else(|e| {
        note("the pods", e);
        Vec::new()
    });
    pods.sort_by_key(|p| p.name_any());
    let cronjob = cron.unwrap_or_else(|e| {
        note("the CronJob", e);
        None
    });
    let mut jobs = jobs.map(|l| l.items).unwrap_or_else(|e| {
        note("the Jobs", e);
        Vec::new()
    });
    jobs.sort_by_key(|j| j.metadata.creation_timestamp.clone());
    let mut events = events.map(|l| l.items).unwrap_or_else(|e| {
        note("the events", e);
        Vec::new()
    });
    events.sort_by_key(event_time);
    let claims = claim_names
        .into_iter()
        .zip(claims)
        .map(|(claim, result)| {
            let found = result.unwrap_or_else(|e| {
                note(&format!("claim {claim}"), e);
                None
            });
            (claim, found)
        })
        .collect();
    View {
        namespace: ns,
        app: Some(app),
        statefulset,
        pods,
        claims,
        cronjob,
        jobs,
        events,
        problems,
    }
}

pub fn event_time(event: &Event) -> Option<DateTime<Utc>> {
    event
        .last_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
        .or_else(|| event.first_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .map(|t| DateTime::<Utc>::from_timestamp(t.as_second(), 0).unwrap_or_default())
}

fn ts_age(
    now: DateTime<Utc>,
    t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
) -> String {
    t.map_or("<unknown>".to_string(), |t| age_of(now, &t.0.to_string()))
}

fn phase_text(phase: RequestPhase, style: Style) -> String {
    let text = format!("{phase:?}");
    match phase {
        RequestPhase::Succeeded => style.good(text),
        RequestPhase::Failed => style.bad(text),
        RequestPhase::Pending | RequestPhase::Running => style.warn(text),
    }
}

fn request_line(request: &RequestStatus, style: Style) -> String {
    let mut line = format!(
        "{} (token {})",
        phase_text(request.phase, style),
        printable(&request.token)
    );
    if let Some(id) = &request.backup_id {
        line.push_str(&format!(", backup {}", printable(id)));
    }
    if let Some(job) = &request.job {
        line.push_str(&format!(", job {}", printable(job)));
    }
    if let Some(message) = &request.message {
        line.push_str(&format!(": {}", printable(message)));
    }
    line
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

/// The report, as text: one section after the other.
pub fn render(view: &View, now: DateTime<Utc>, style: Style) -> String {
    let Some(app) = &view.app else {
        return String::new();
    };
    let status = app.status.clone().unwrap_or_default();
    [
        summary(view, app, &status, now, style),
        last_backup(app, &status, now, style),
        requests(app, &status, style),
        conditions(&status, now, style),
        workload(view, &app.name_any(), now, style),
        volumes(view, style),
        backup_jobs(view, app, now, style),
        events(view, now, style),
    ]
    .concat()
}

/// The app's ports as `kubectl describe pod` shows them: `8080/TCP (http), 9187/TCP`.
fn ports_text(ports: &[ContainerPort]) -> String {
    ports
        .iter()
        .map(|port| {
            let protocol = port.protocol.as_deref().unwrap_or("TCP");
            match &port.name {
                Some(name) => format!(
                    "{}/{} ({})",
                    port.container_port,
                    printable(protocol),
                    printable(name)
                ),
                None => format!("{}/{}", port.container_port, printable(protocol)),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Name, replicas, image, storage, schedule, backup target, restore settings.
fn summary(
    view: &View,
    app: &HelloStateful,
    status: &HelloStatefulStatus,
    now: DateTime<Utc>,
    style: Style,
) -> String {
    let name = app.name_any();
    let name = printable(&name);
    let namespace = printable(&view.namespace);
    let node = status.node_name.as_deref().map(printable);
    let mut out = String::new();
    let mut field = |label: &str, value: String| {
        out.push_str(&format!("{:<19}{value}\n", format!("{label}:")));
    };
    field("Name", style.bold(&name));
    field("Namespace", namespace.to_string());
    field("Age", created_age(app, now));
    let ready_text = format!("{}/{} ready", status.ready_replicas, app.spec.replicas);
    field(
        "Replicas",
        if status.ready_replicas >= app.spec.replicas {
            style.good(ready_text)
        } else {
            style.warn(ready_text)
        },
    );
    field("Image", printable(app.spec.image()).into_owned());
    field("Mount path", printable(app.spec.mount_path()).into_owned());
    if let Some(ports) = app.spec.ports.as_deref().filter(|ports| !ports.is_empty()) {
        field("Ports", ports_text(ports));
    }
    field(
        "Storage",
        match app.spec.storage_class() {
            Some(class) => format!(
                "{} per replica, StorageClass {}",
                printable(app.spec.storage_size()),
                printable(class)
            ),
            None => format!(
                "{} per replica, static hostPath volumes{}",
                printable(app.spec.storage_size()),
                node.as_ref()
                    .map(|n| format!(" on node {n}"))
                    .unwrap_or_default()
            ),
        },
    );
    field(
        "Schedule",
        match &app.spec.backup_schedule {
            Some(s) if app.spec.backups_suspended() => {
                format!("{} {}", printable(s), style.warn("(suspended)"))
            }
            Some(s) => printable(s).into_owned(),
            None => "<none> (on-demand backups only)".to_string(),
        },
    );
    let target = match app.spec.backup_target() {
        ResolvedTarget::HostPath(path) => format!(
            "node directory {}/{namespace}/{name}{}",
            printable(&path),
            node.as_ref()
                .map(|n| format!(" on {n}"))
                .unwrap_or_default()
        ),
        ResolvedTarget::Claim(claim) => format!("PersistentVolumeClaim {}", printable(&claim)),
        ResolvedTarget::ObjectStore(store) => {
            printable(&store.describe(&view.namespace, &app.name_any())).into_owned()
        }
    };
    field(
        "Backup target",
        format!("{target}, keep last {}", app.spec.keep_last()),
    );
    field(
        "Consistency",
        match app.spec.stop_for_backup() {
            Some(max) => {
                format!("stop (the app stops for each backup; the copy takes at most {max} s)")
            }
            None => "live (copied while the app runs)".to_string(),
        },
    );
    field("Full reads", full_reads(app, status, now));
    field("Overdue after", overdue_after(app));
    field(
        "Restore on create",
        match &app.spec.restore_from {
            Some(from) => printable(&from.describe()).into_owned(),
            None => app.spec.restore_from_existing.to_string(),
        },
    );
    field("Restored", status.is_restored.to_string());
    if let (Some(observed), Some(generation)) =
        (status.observed_generation, app.metadata.generation)
        && observed < generation
    {
        field(
            "Observed",
            style.warn(format!(
                "generation {observed} of {generation} (the reconciler has not caught up)"
            )),
        );
    }
    out
}

/// When backups count as overdue (the BackupOverdue condition, shown with the others).
fn overdue_after(app: &HelloStateful) -> String {
    if app.spec.backups_suspended() {
        return "never while scheduled backups are suspended".into();
    }
    match (app.spec.max_backup_age(), &app.spec.backup_schedule) {
        (Some(age), _) => format!(
            "{} without a successful backup (backup.maxAgeSeconds)",
            human_duration(age.num_seconds().unsigned_abs())
        ),
        (None, Some(_)) => "two scheduled runs without a successful backup".into(),
        (None, None) => "never (no schedule; backup.maxAgeSeconds would set it)".into(),
    }
}

/// How often a backup reads every file again, and when one last did.
fn full_reads(app: &HelloStateful, status: &HelloStatefulStatus, now: DateTime<Utc>) -> String {
    let Some(every) = app.spec.full_read_every() else {
        return "on request only (backup --full)".into();
    };
    let every = human_duration(every.as_secs());
    match &status.last_full_read {
        Some(last) => format!(
            "every {every}, the last at {} ({} ago)",
            printable(last),
            age_of(now, last)
        ),
        None => format!("every {every}, none yet (the next backup reads every file)"),
    }
}

/// The newest backup, and a warning for torn files.
fn last_backup(
    app: &HelloStateful,
    status: &HelloStatefulStatus,
    now: DateTime<Utc>,
    style: Style,
) -> String {
    let name = app.name_any();
    let mut out = String::new();
    out.push_str(&format!("\n{}\n", style.bold("Last backup:")));
    match &status.last_backup {
        Some(b) => out.push_str(&format!(
            "  {} at {} ({} ago): {} in {} files, {} new, took {}{}\n",
            printable(&b.id),
            printable(&b.time),
            age_of(now, &b.time),
            human_bytes(b.bytes),
            b.files,
            human_bytes(b.new_bytes),
            human_millis(b.duration_ms),
            b.job
                .as_ref()
                .map(|j| format!(", job {}", printable(j)))
                .unwrap_or_default()
        )),
        // An app created again starts a new status: its backups are the old app's.
        None if status.is_restored => out.push_str(&format!(
            "  <none since this app was created; it was restored from an earlier one: \
             kubectl hellostateful backups {}>\n",
            printable(
                app.spec
                    .restore_from
                    .as_ref()
                    .map_or(name.as_str(), |from| from.name.as_str())
            )
        )),
        None => out.push_str("  <none>\n"),
    }
    if let Some(b) = &status.last_backup
        && let Some(count) = b.snapshots
    {
        let oldest = b.oldest_snapshot.as_deref().map(|id| {
            let started = summary::snapshot_started(id).map(|time| age(now, time));
            format!(
                ", the oldest {} ({} ago)",
                printable(id),
                started.as_deref().unwrap_or("<unknown>")
            )
        });
        out.push_str(&format!(
            "  {count} snapshot(s) kept after it{}\n",
            oldest.unwrap_or_default()
        ));
    }
    if let Some(b) = status
        .last_backup
        .as_ref()
        .filter(|b| b.inconsistent_files > 0)
    {
        out.push_str(&format!(
            "  {}\n",
            style.warn(format!(
                "{} file(s) changed while being copied and may be torn (see the BackupSucceeded condition)",
                b.inconsistent_files
            ))
        ));
    }
    out
}

/// On-demand requests: acknowledged, and annotated but not acknowledged yet.
fn requests(app: &HelloStateful, status: &HelloStatefulStatus, style: Style) -> String {
    let mut out = String::new();
    let mut requests = Vec::new();
    if let Some(r) = &status.backup_request {
        requests.push(format!("  Backup:   {}\n", request_line(r, style)));
    }
    if let Some(r) = &status.restore_request {
        requests.push(format!("  Restore:  {}\n", request_line(r, style)));
    }
    if let Some(job) = &status.unfinished_restore {
        requests.push(format!(
            "  {} restore {} stopped midway: the app stays stopped until a restore succeeds (kubectl hellostateful restore {})\n",
            style.warn("!"),
            printable(job),
            printable(&app.name_any())
        ));
    }
    for (key, acknowledged, kind) in [
        (
            names::BACKUP_REQUESTED,
            status.backup_request.as_ref(),
            "backup",
        ),
        (
            names::RESTORE_REQUESTED,
            status.restore_request.as_ref(),
            "restore",
        ),
    ] {
        if let Some(token) = app.annotations().get(key)
            && Some(token) != acknowledged.map(|r| &r.token)
        {
            requests.push(format!(
                "  {} {kind} request {} not yet acknowledged by the reconciler\n",
                style.warn("!"),
                printable(token)
            ));
        }
    }
    if !requests.is_empty() {
        out.push_str(&format!("\n{}\n", style.bold("Requests:")));
        out.push_str(&requests.concat());
    }
    out
}

/// The conditions as a table.
fn conditions(status: &HelloStatefulStatus, now: DateTime<Utc>, style: Style) -> String {
    let mut out = String::new();
    out.push_str(&format!("\n{}\n", style.bold("Conditions:")));
    if status.conditions.is_empty() {
        out.push_str("  <none>\n");
    } else {
        let rows: Vec<Vec<String>> = status
            .conditions
            .iter()
            .map(|c| {
                let healthy = match c.type_.as_str() {
                    "BackupFailed" | "Restoring" | "BackingUp" => c.status != "True",
                    _ => c.status == "True",
                };
                let shown = printable(&c.status);
                vec![
                    printable(&c.type_).into_owned(),
                    if healthy {
                        style.good(shown)
                    } else {
                        style.warn(shown)
                    },
                    printable(&c.reason).into_owned(),
                    age_of(now, &c.last_transition_time.0.to_string()),
                    printable(&c.message).into_owned(),
                ]
            })
            .collect();
        out.push_str(&indent(&table(
            &["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"],
            &rows,
        )));
    }
    out
}

/// The StatefulSet and its pods.
fn workload(view: &View, name: &str, now: DateTime<Utc>, style: Style) -> String {
    let mut out = String::new();
    out.push_str(&format!("\n{}\n", style.bold("StatefulSet:")));
    match &view.statefulset {
        Some(sts) => {
            let desired = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
            let ready = sts
                .status
                .as_ref()
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            let text = format!("{}: {ready}/{desired} ready", printable(&sts.name_any()));
            out.push_str(&format!(
                "  {}\n",
                if ready >= desired {
                    style.good(text)
                } else {
                    style.warn(text)
                }
            ));
        }
        None => out.push_str(&format!(
            "  {}\n",
            style.warn(format!("{}: not found", printable(name)))
        )),
    }
    if !view.pods.is_empty() {
        let rows: Vec<Vec<String>> = view
            .pods
            .iter()
            .map(|pod| {
                let st = pod.status.clone().unwrap_or_default();
                let containers = st.container_statuses.unwrap_or_default();
                let ready = containers.iter().filter(|c| c.ready).count();
                let restarts: i32 = containers.iter().map(|c| c.restart_count).sum();
                let phase = st.phase.unwrap_or_else(|| "Unknown".into());
                let waiting = containers
                    .iter()
                    .find_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone());
                let shown = waiting.unwrap_or(phase.clone());
                let shown = printable(&shown);
                vec![
                    printable(&pod.name_any()).into_owned(),
                    if phase == "Running" && ready == containers.len() {
                        style.good(shown)
                    } else {
                        style.warn(shown)
                    },
                    format!("{ready}/{}", containers.len()),
                    restarts.to_string(),
                    pod.spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_deref())
                        .map_or_else(|| "<none>".into(), |node| printable(node).into_owned()),
                    ts_age(now, pod.metadata.creation_timestamp.as_ref()),
                ]
            })
            .collect();
        out.push_str(&indent(&table(
            &["POD", "STATUS", "READY", "RESTARTS", "NODE", "AGE"],
            &rows,
        )));
    }
    out
}

/// The claims of the replicas.
fn volumes(view: &View, style: Style) -> String {
    let mut out = String::new();
    out.push_str(&format!("\n{}\n", style.bold("Volumes:")));
    if view.claims.is_empty() {
        out.push_str("  <none>\n");
    } else {
        let rows: Vec<Vec<String>> = view
            .claims
            .iter()
            .map(|(claim, pvc)| match pvc {
                Some(pvc) => {
                    let phase = pvc
                        .status
                        .as_ref()
                        .and_then(|s| s.phase.clone())
                        .unwrap_or_else(|| "Unknown".into());
                    let capacity = pvc
                        .status
                        .as_ref()
                        .and_then(|s| s.capacity.as_ref())
                        .and_then(|c| c.get("storage"))
                        .map(|q| q.0.clone())
                        .unwrap_or_else(|| "<none>".into());
                    vec![
                        printable(claim).into_owned(),
                        if phase == "Bound" {
                            style.good(&phase)
                        } else {
                            style.warn(printable(&phase))
                        },
                        pvc.spec
                            .as_ref()
                            .and_then(|s| s.volume_name.as_deref())
                            .map_or_else(|| "<none>".into(), |v| printable(v).into_owned()),
                        printable(&capacity).into_owned(),
                    ]
                }
                None => vec![
                    printable(claim).into_owned(),
                    style.warn("Missing"),
                    "<none>".into(),
                    "<none>".into(),
                ],
            })
            .collect();
        out.push_str(&indent(&table(
            &["CLAIM", "STATUS", "VOLUME", "CAPACITY"],
            &rows,
        )));
    }
    out
}

/// The CronJob and the newest mover Jobs.
fn backup_jobs(view: &View, app: &HelloStateful, now: DateTime<Utc>, style: Style) -> String {
    let name = app.name_any();
    let mut out = String::new();
    out.push_str(&format!("\n{}\n", style.bold("Backups:")));
    match &view.cronjob {
        Some(cron) => {
            let spec = cron.spec.clone().unwrap_or_default();
            let st = cron.status.clone().unwrap_or_default();
            out.push_str(&format!(
                "  CronJob {}: schedule {}{}, last scheduled {}, last successful {}\n",
                printable(&cron.name_any()),
                printable(&spec.schedule),
                match (spec.suspend == Some(true), app.spec.backups_suspended()) {
                    (false, _) => String::new(),
                    (true, true) => format!(" {}", style.warn("(suspended)")),
                    // Not the user's pause: the reconciler holds the schedule while a restore
                    // is under way or left unfinished, and lets it run once the restore ends.
                    (true, false) => format!(
                        " {}",
                        style.warn("(suspended until the restore under way ends)")
                    ),
                },
                st.last_schedule_time
                    .as_ref()
                    .map_or("never".to_string(), |t| format!(
                        "{} ago",
                        age_of(now, &t.0.to_string())
                    )),
                st.last_successful_time
                    .as_ref()
                    .map_or("never".to_string(), |t| format!(
                        "{} ago",
                        age_of(now, &t.0.to_string())
                    )),
            ));
        }
        None if app.spec.backup_schedule.is_some() => out.push_str(&format!(
            "  {}\n",
            style.warn(format!(
                "CronJob {}: not found",
                printable(&names::cronjob(&name))
            ))
        )),
        None => out.push_str("  No CronJob (no schedule)\n"),
    }
    let jobs: Vec<Vec<String>> = view
        .jobs
        .iter()
        .rev()
        .take(5)
        .map(|job| {
            let st = job.status.clone().unwrap_or_default();
            let state = if st.active.unwrap_or(0) > 0 {
                style.warn("Running")
            } else if st.succeeded.unwrap_or(0) > 0 {
                style.good("Succeeded")
            } else if st.failed.unwrap_or(0) > 0 {
                style.bad("Failed")
            } else {
                "Pending".to_string()
            };
            vec![
                printable(&job.name_any()).into_owned(),
                job.labels()
                    .get("app.kubernetes.io/component")
                    .map(|component| printable(component).into_owned())
                    .unwrap_or_default(),
                state,
                ts_age(now, job.metadata.creation_timestamp.as_ref()),
            ]
        })
        .collect();
    if !jobs.is_empty() {
        out.push_str(&indent(&table(&["JOB", "KIND", "STATUS", "AGE"], &jobs)));
    }
    out
}

/// The ten newest events, and what could not be read.
fn events(view: &View, now: DateTime<Utc>, style: Style) -> String {
    let mut out = String::new();
    out.push_str(&format!("\n{}\n", style.bold("Events:")));
    if view.events.is_empty() {
        out.push_str("  <none>\n");
    } else {
        let skip = view.events.len().saturating_sub(10);
        let rows: Vec<Vec<String>> = view
            .events
            .iter()
            .skip(skip)
            .map(|e| {
                let kind = printable(e.type_.as_deref().unwrap_or_default());
                vec![
                    event_time(e).map_or("<unknown>".into(), |t| age(now, t)),
                    if kind == "Warning" {
                        style.warn(&kind)
                    } else {
                        kind.into_owned()
                    },
                    printable(e.reason.as_deref().unwrap_or_default()).into_owned(),
                    printable(e.message.as_deref().unwrap_or_default().trim()).into_owned(),
                ]
            })
            .collect();
        out.push_str(&indent(&table(
            &["AGE", "TYPE", "REASON", "MESSAGE"],
            &rows,
        )));
    }
    for problem in &view.problems {
        out.push_str(&format!(
            "{} {}\n",
            style.warn("Warning:"),
            printable(problem)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::get::tests::{app, now};

    #[test]
    fn overdue_after_says_what_decides_it() {
        let mut hello = app("default", "hello", 1, 1);
        assert_eq!(
            overdue_after(&hello),
            "two scheduled runs without a successful backup"
        );
        hello.spec.backup.get_or_insert_default().max_age_seconds = Some(93_600);
        assert_eq!(
            overdue_after(&hello),
            "26h without a successful backup (backup.maxAgeSeconds)"
        );
        hello.spec.backup = None;
        hello.spec.backup_schedule = None;
        assert!(overdue_after(&hello).starts_with("never (no schedule"));
    }
    use k8s_openapi::api::core::v1::{
        ContainerStatus, PersistentVolumeClaimSpec, PersistentVolumeClaimStatus, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn time(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    #[test]
    fn a_restored_app_without_a_backup_of_its_own_points_to_its_backups() {
        let mut hello = app("default", "hello", 1, 1);
        let status = hello.status.as_mut().unwrap();
        status.last_backup = None;
        status.is_restored = true;
        let view = View {
            namespace: "default".into(),
            app: Some(hello),
            statefulset: None,
            pods: vec![],
            claims: vec![],
            cronjob: None,
            jobs: vec![],
            events: vec![],
            problems: vec![],
        };
        let text = render(&view, now(), Style::PLAIN);
        assert!(
            text.contains(
                "Last backup:\n  <none since this app was created; it was restored from an \
                 earlier one: kubectl hellostateful backups hello>\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_restore_that_stopped_midway_is_shown_with_what_starts_the_app() {
        let mut hello = app("default", "hello", 2, 0);
        hello.status.as_mut().unwrap().unfinished_restore = Some("restore-hello-1a2b3c4d".into());
        let text = requests(&hello, hello.status.as_ref().unwrap(), Style::PLAIN);
        assert!(
            text.contains(
                "restore restore-hello-1a2b3c4d stopped midway: the app stays stopped until a \
                 restore succeeds (kubectl hellostateful restore hello)"
            ),
            "{text}"
        );
    }

    /// What a tenant plants in text the plugin prints: a window title (OSC), a screen
    /// clear (CSI), a carriage return that overwrites the line, and an 8-bit CSI.
    const HOSTILE: &str = "\u{1b}]0;x\u{7}\u{1b}[2J\rok\u{9b}31m";

    /// An app whose every tenant-written text the view shows carries [`HOSTILE`].
    fn hostile_view() -> View {
        let hostile = |what: &str| format!("{what}{HOSTILE}");
        let mut hello = app("default", "hello", 1, 0);
        hello.spec.image = Some(hostile("busybox"));
        hello.spec.backup_schedule = Some(hostile("@hourly"));
        let status = hello.status.as_mut().unwrap();
        status.node_name = Some(hostile("node"));
        status.conditions = vec![Condition {
            type_: hostile("Ready"),
            status: hostile("False"),
            reason: hostile("Reason"),
            message: hostile("condition"),
            last_transition_time: time("2026-11-29T12:01:00Z"),
            observed_generation: Some(1),
        }];
        status.restore_request = Some(RequestStatus {
            token: hostile("token"),
            phase: RequestPhase::Failed,
            job: Some(hostile("job")),
            backup_id: Some(hostile("id")),
            message: Some(hostile("request")),
        });
        if let Some(last) = status.last_backup.as_mut() {
            last.id = hostile("id");
            last.job = Some(hostile("job"));
        }
        hello
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(names::BACKUP_REQUESTED.into(), hostile("token"));
        let mut pod = Pod::default();
        pod.metadata.name = Some(hostile("pod"));
        pod.status = Some(PodStatus {
            phase: Some(hostile("Pending")),
            ..Default::default()
        });
        let mut job = Job::default();
        job.metadata.name = Some(hostile("job"));
        job.metadata.labels =
            Some([("app.kubernetes.io/component".to_string(), hostile("backup"))].into());
        let mut sts = StatefulSet::default();
        sts.metadata.name = Some(hostile("hello"));
        let mut cron = CronJob::default();
        cron.metadata.name = Some(hostile("backup-hello"));
        cron.spec = Some(k8s_openapi::api::batch::v1::CronJobSpec {
            schedule: hostile("@hourly"),
            ..Default::default()
        });
        let pvc = PersistentVolumeClaim {
            spec: Some(PersistentVolumeClaimSpec {
                volume_name: Some(hostile("volume")),
                ..Default::default()
            }),
            status: Some(PersistentVolumeClaimStatus {
                phase: Some(hostile("Lost")),
                capacity: Some(
                    [(
                        "storage".to_string(),
                        k8s_openapi::apimachinery::pkg::api::resource::Quantity(hostile("1Gi")),
                    )]
                    .into(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        let event = Event {
            type_: Some(hostile("Warning")),
            reason: Some(hostile("Reason")),
            message: Some(hostile("event")),
            last_timestamp: Some(time("2026-11-29T14:55:03Z")),
            ..Default::default()
        };
        View {
            namespace: "default".into(),
            app: Some(hello),
            statefulset: Some(sts),
            pods: vec![pod],
            claims: vec![(hostile("claim"), None), (hostile("claim"), Some(pvc))],
            cronjob: Some(cron),
            jobs: vec![job],
            events: vec![event],
            problems: vec![hostile("cannot read the events")],
        }
    }

    #[test]
    fn text_a_tenant_wrote_reaches_the_terminal_escaped() {
        let text = render(&hostile_view(), now(), Style::PLAIN);
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(
            !text.contains(|c: char| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert!(
            text.contains("condition\\u{1b}]0;x\\u{7}\\u{1b}[2J\\rok\\u{9b}31m"),
            "{text}"
        );
        assert!(text.contains("event\\u{1b}]0;x"), "{text}");
    }

    #[test]
    fn in_colour_the_only_escapes_are_the_plugins_own_colours() {
        let text = render(&hostile_view(), now(), Style { color: true });
        let mut rest = text.as_str();
        while let Some(at) = rest.find('\u{1b}') {
            let code = &rest[at + 1..];
            let end = code.find('m').expect("a colour code ends with m");
            assert!(
                code.starts_with('[')
                    && code[1..end].chars().all(|c| c.is_ascii_digit() || c == ';'),
                "not a colour code: {:?}",
                &code[..end.min(20)]
            );
            rest = &code[end..];
        }
        assert!(text.contains("request\\u{1b}]0;x"), "{text}");
    }

    #[test]
    fn ports_show_as_kubectl_describe_shows_a_pods() {
        let mut hello = app("default", "hello", 1, 1);
        let port = |container_port, name: Option<&str>, protocol: Option<&str>| ContainerPort {
            container_port,
            name: name.map(String::from),
            protocol: protocol.map(String::from),
            ..Default::default()
        };
        hello.spec.ports = Some(vec![
            port(8080, Some("http"), Some("TCP")),
            port(5353, None, Some("UDP")),
            port(9187, None, None),
        ]);
        let view = View {
            namespace: "default".into(),
            app: Some(hello.clone()),
            statefulset: None,
            pods: vec![],
            claims: vec![],
            cronjob: None,
            jobs: vec![],
            events: vec![],
            problems: vec![],
        };
        let text = summary(
            &view,
            &hello,
            &HelloStatefulStatus::default(),
            now(),
            Style::PLAIN,
        );
        assert!(
            text.contains("\nPorts:             8080/TCP (http), 5353/UDP, 9187/TCP\n"),
            "{text}"
        );
    }

    #[test]
    fn a_schedule_held_by_a_restore_is_told_apart_from_the_users_pause() {
        let backups = |paused_by_user: bool| {
            let mut hello = app("default", "hello", 1, 1);
            hello.spec.backup = Some(hellostateful_api::BackupSpec {
                suspend: paused_by_user,
                ..Default::default()
            });
            let mut cron = CronJob::default();
            cron.metadata.name = Some("backup-hello".into());
            cron.spec = Some(k8s_openapi::api::batch::v1::CronJobSpec {
                schedule: "*/5 * * * *".into(),
                suspend: Some(true),
                ..Default::default()
            });
            let view = View {
                namespace: "default".into(),
                app: Some(hello.clone()),
                statefulset: None,
                pods: vec![],
                claims: vec![],
                cronjob: Some(cron),
                jobs: vec![],
                events: vec![],
                problems: vec![],
            };
            backup_jobs(&view, &hello, now(), Style::PLAIN)
        };
        let held = backups(false);
        assert!(
            held.contains("schedule */5 * * * * (suspended until the restore under way ends),"),
            "{held}"
        );
        let paused = backups(true);
        assert!(
            paused.contains("schedule */5 * * * * (suspended),"),
            "{paused}"
        );
    }

    #[test]
    fn status_snapshot() {
        let mut hello = app("default", "hello", 1, 1);
        let status = hello.status.as_mut().unwrap();
        status.conditions = vec![Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "AllReplicasReady".into(),
            message: "1/1 replicas ready".into(),
            last_transition_time: time("2026-11-29T12:01:00Z"),
            observed_generation: Some(1),
        }];
        status.backup_request = Some(RequestStatus {
            token: "2026-11-29T14:55:00.000001Z".into(),
            phase: RequestPhase::Succeeded,
            job: Some("backup-hello-1a2b3c4d".into()),
            backup_id: Some("20261129T145500Z".into()),
            message: None,
        });
        let mut pod = Pod::default();
        pod.metadata.name = Some("hello-0".into());
        pod.metadata.creation_timestamp = Some(time("2026-11-29T12:00:30Z"));
        pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            node_name: Some("node-1".into()),
            ..Default::default()
        });
        pod.status = Some(PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "app".into(),
                ready: true,
                restart_count: 0,
                ..Default::default()
            }]),
            ..Default::default()
        });
        let mut sts = StatefulSet::default();
        sts.metadata.name = Some("hello".into());
        sts.spec = Some(k8s_openapi::api::apps::v1::StatefulSetSpec {
            replicas: Some(1),
            ..Default::default()
        });
        sts.status = Some(k8s_openapi::api::apps::v1::StatefulSetStatus {
            ready_replicas: Some(1),
            ..Default::default()
        });
        let pvc = PersistentVolumeClaim {
            spec: Some(PersistentVolumeClaimSpec {
                volume_name: Some(hellostateful_api::names::volume("default", "hello", 0)),
                ..Default::default()
            }),
            status: Some(PersistentVolumeClaimStatus {
                phase: Some("Bound".into()),
                capacity: Some(
                    [(
                        "storage".to_string(),
                        k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".into()),
                    )]
                    .into(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut cron = CronJob::default();
        cron.metadata.name = Some("backup-hello".into());
        cron.spec = Some(k8s_openapi::api::batch::v1::CronJobSpec {
            schedule: "*/5 * * * *".into(),
            ..Default::default()
        });
        cron.status = Some(k8s_openapi::api::batch::v1::CronJobStatus {
            last_schedule_time: Some(time("2026-11-29T14:55:00Z")),
            last_successful_time: Some(time("2026-11-29T14:55:03Z")),
            ..Default::default()
        });
        let event = Event {
            type_: Some("Normal".into()),
            reason: Some("BackupSucceeded".into()),
            message: Some("backup 20261129T145500Z: 2KiB in 1 files".into()),
            last_timestamp: Some(time("2026-11-29T14:55:03Z")),
            ..Default::default()
        };
        let view = View {
            namespace: "default".into(),
            app: Some(hello),
            statefulset: Some(sts),
            pods: vec![pod],
            claims: vec![("data-hello-0".into(), Some(pvc))],
            cronjob: Some(cron),
            jobs: vec![],
            events: vec![event],
            problems: vec![],
        };
        // -o json: the same view, as objects.
        let value = view_value(&view);
        assert_eq!(value["app"]["kind"], "HelloStateful");
        assert_eq!(value["statefulSet"]["metadata"]["name"], "hello");
        assert_eq!(value["claims"][0]["name"], "data-hello-0");
        assert_eq!(value["cronJob"]["spec"]["schedule"], "*/5 * * * *");
        assert_eq!(value["events"][0]["reason"], "BackupSucceeded");
        let text = render(&view, now(), Style::PLAIN);
        assert_eq!(
            text,
            "\
Name:              hello
Namespace:         default
Age:               3h
Replicas:          1/1 ready
Image:             busybox:1.36
Mount path:        /usr/share/hello
Storage:           1Gi per replica, static hostPath volumes on node node-1
Schedule:          */5 * * * *
Backup target:     node directory /tmp/backup/default/hello on node-1, keep last 10
Consistency:       live (copied while the app runs)
Full reads:        every 7d, the last at 2026-11-29T12:05:02Z (174m ago)
Overdue after:     two scheduled runs without a successful backup
Restore on create: true
Restored:          false

Last backup:
  20261129T145500Z at 2026-11-29T14:55:02Z (4m58s ago): 2KiB in 1 files, 100B new, took 120ms, job backup-hello-29376120
  4 snapshot(s) kept after it, the oldest 20261129T140000Z (60m ago)

Requests:
  Backup:   Succeeded (token 2026-11-29T14:55:00.000001Z), backup 20261129T145500Z, job backup-hello-1a2b3c4d

Conditions:
  TYPE    STATUS   REASON             AGE    MESSAGE
  Ready   True     AllReplicasReady   179m   1/1 replicas ready

StatefulSet:
  hello: 1/1 ready
  POD       STATUS    READY   RESTARTS   NODE     AGE
  hello-0   Running   1/1     0          node-1   179m

Volumes:
  CLAIM          STATUS   VOLUME                          CAPACITY
  data-hello-0   Bound    hellostateful.default.hello.0   1Gi

Backups:
  CronJob backup-hello: schedule */5 * * * *, last scheduled 5m ago, last successful 4m57s ago

Events:
  AGE     TYPE     REASON            MESSAGE
  4m57s   Normal   BackupSucceeded   backup 20261129T145500Z: 2KiB in 1 files
"
        );
    }
}
