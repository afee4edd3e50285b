//! Prometheus metrics of the reconciler, served at /metrics.

use http::{Method, Request};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tower::util::MapRequestLayer;

use hellostateful_api::{HelloStatefulStatus, summary};

use crate::conditions;

/// An app's action, by outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub namespace: String,
    pub name: String,
    pub result: &'static str,
}

/// An app's operation under way: `backup` or `restore`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabel {
    pub namespace: String,
    pub name: String,
    pub operation: &'static str,
}

/// Kind label of a failure.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabel {
    pub error: String,
}

/// Kind label of an API request: `read` (GET), `watch` (GET with watch=true), `write`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabel {
    pub kind: &'static str,
}

/// An app, for the per-app metrics (removed when the app is deleted, so their number
/// follows the apps').
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AppLabel {
    pub namespace: String,
    pub name: String,
}

/// Every metric the reconciler exports.
pub struct Metrics {
    pub reconciles: Counter,
    pub failures: Family<ErrorLabel, Counter>,
    pub duration: Histogram,
    pub writes: Counter,
    pub backups: Family<ResultLabel, Counter>,
    pub restores: Family<ResultLabel, Counter>,
    pub backup_bytes: Counter,
    pub api_requests: Family<RequestLabel, Counter>,
    pub last_backup: Family<AppLabel, Gauge>,
    pub backup_overdue: Family<AppLabel, Gauge>,
    last_duration: Family<AppLabel, Gauge<f64, AtomicU64>>,
    last_bytes: Family<AppLabel, Gauge>,
    last_new_bytes: Family<AppLabel, Gauge>,
    last_inconsistent: Family<AppLabel, Gauge>,
    snapshots: Family<AppLabel, Gauge>,
    oldest_snapshot: Family<AppLabel, Gauge>,
    in_flight: Family<OperationLabel, Gauge>,
}

const RESULTS: [&str; 2] = ["succeeded", "failed"];

/// The operations `operation_in_flight` shows, by the condition that is true while they run.
const OPERATIONS: [(&str, &str); 2] = [
    ("backup", conditions::BACKING_UP),
    ("restore", conditions::RESTORING),
];

impl Metrics {
    /// Makes the metrics and registers them under the `hellostateful` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            reconciles: Counter::default(),
            failures: Family::default(),
            duration: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            writes: Counter::default(),
            backups: Family::default(),
            restores: Family::default(),
            backup_bytes: Counter::default(),
            api_requests: Family::default(),
            last_backup: Family::default(),
            backup_overdue: Family::default(),
            last_duration: Family::default(),
            last_bytes: Family::default(),
            last_new_bytes: Family::default(),
            last_inconsistent: Family::default(),
            snapshots: Family::default(),
            oldest_snapshot: Family::default(),
            in_flight: Family::default(),
        };
        // A failure kind at zero from the start, so that the family is exported (with no
        // series, it would not be) and a panic is the first increase an alert sees.
        metrics
            .failures
            .get_or_create(&ErrorLabel {
                error: "panicked".to_string(),
            })
            .inc_by(0);
        let registry = registry.sub_registry_with_prefix("hellostateful");
        registry.register("reconciles", "Reconcile passes", metrics.reconciles.clone());
        registry.register(
            "reconcile_failures",
            "Reconcile passes that failed, by error",
            metrics.failures.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of reconcile passes",
            metrics.duration.clone(),
        );
        registry.register(
            "child_writes",
            "Writes of child objects (zero at steady state)",
            metrics.writes.clone(),
        );
        registry.register(
            "backups",
            "Finished backups, by app and result",
            metrics.backups.clone(),
        );
        registry.register(
            "restores",
            "Finished restores, by app and result",
            metrics.restores.clone(),
        );
        registry.register(
            "backup_bytes",
            "Bytes in finished backups",
            metrics.backup_bytes.clone(),
        );
        registry.register(
            "api_requests",
            "Requests sent to the API server, by kind (read, watch, write)",
            metrics.api_requests.clone(),
        );
        registry.register(
            "backup_last_success_timestamp_seconds",
            "When the app's newest successful backup finished (Unix time), by app",
            metrics.last_backup.clone(),
        );
        registry.register(
            "backup_overdue",
            "1 while the app's scheduled backups are overdue (its BackupOverdue condition), by app",
            metrics.backup_overdue.clone(),
        );
        registry.register(
            "backup_last_duration_seconds",
            "How long the app's newest successful backup took, by app",
            metrics.last_duration.clone(),
        );
        registry.register(
            "backup_last_bytes",
            "Bytes in the app's newest successful backup, by app",
            metrics.last_bytes.clone(),
        );
        registry.register(
            "backup_last_new_bytes",
            "Bytes the app's newest successful backup copied or sent (the rest were unchanged), by app",
            metrics.last_new_bytes.clone(),
        );
        registry.register(
            "backup_last_inconsistent_files",
            "Files that changed while the app's newest successful backup copied them, by app",
            metrics.last_inconsistent.clone(),
        );
        registry.register(
            "snapshots",
            "Snapshots of the app left by its newest successful backup's retention, by app",
            metrics.snapshots.clone(),
        );
        registry.register(
            "snapshot_oldest_timestamp_seconds",
            "When the oldest of them started (Unix time), by app",
            metrics.oldest_snapshot.clone(),
        );
        registry.register(
            "operation_in_flight",
            "1 while the app's backup or restore runs, by app and operation",
            metrics.in_flight.clone(),
        );
        metrics
    }

    /// Sets an app's per-app metrics from the status its pass writes: they are read off
    /// that durable record, so a restarted reconciler exports them again at once. Its
    /// outcome counters exist from its first pass, at zero, so that an alert on `increase`
    /// sees its first backup or restore.
    pub fn observe(&self, app: &AppLabel, status: &HelloStatefulStatus) {
        for family in [&self.backups, &self.restores] {
            for result in RESULTS {
                family.get_or_create(&app.result(result)).inc_by(0);
            }
        }
        if let Some(backup) = &status.last_backup {
            if let Ok(time) = chrono::DateTime::parse_from_rfc3339(&backup.time) {
                self.last_backup.get_or_create(app).set(time.timestamp());
            }
            self.last_duration
                .get_or_create(app)
                .set(Duration::from_millis(backup.duration_ms).as_secs_f64());
            set(&self.last_bytes, app, Some(backup.bytes));
            set(&self.last_new_bytes, app, Some(backup.new_bytes));
            set(
                &self.last_inconsistent,
                app,
                Some(backup.inconsistent_files),
            );
            set(&self.snapshots, app, backup.snapshots);
            let oldest = (backup.oldest_snapshot.as_deref())
                .and_then(summary::snapshot_started)
                .and_then(|time| u64::try_from(time.timestamp()).ok());
            set(&self.oldest_snapshot, app, oldest);
        }
        for (operation, condition) in OPERATIONS {
            let running = status
                .conditions
                .iter()
                .any(|c| c.type_ == condition && c.status == "True");
            self.in_flight
                .get_or_create(&OperationLabel {
                    namespace: app.namespace.clone(),
                    name: app.name.clone(),
                    operation,
                })
                .set(i64::from(running));
        }
    }

    /// Forgets a deleted app's per-app metrics.
    pub fn forget(&self, app: &AppLabel) {
        for family in [
            &self.last_backup,
            &self.backup_overdue,
            &self.last_bytes,
            &self.last_new_bytes,
            &self.last_inconsistent,
            &self.snapshots,
            &self.oldest_snapshot,
        ] {
            family.remove(app);
        }
        self.last_duration.remove(app);
        for result in RESULTS {
            self.backups.remove(&app.result(result));
            self.restores.remove(&app.result(result));
        }
        for (operation, _) in OPERATIONS {
            self.in_flight.remove(&OperationLabel {
                namespace: app.namespace.clone(),
                name: app.name.clone(),
                operation,
            });
        }
    }

    /// A client layer that counts every request it lets through in `api_requests`.
    pub fn count_requests<B>(
        requests: Family<RequestLabel, Counter>,
    ) -> MapRequestLayer<impl Fn(Request<B>) -> Request<B> + Clone> {
        MapRequestLayer::new(move |request: Request<B>| {
            let watch = request
                .uri()
                .query()
                .is_some_and(|query| query.split('&').any(|pair| pair == "watch=true"));
            let kind = match *request.method() {
                Method::GET if watch => "watch",
                Method::GET => "read",
                _ => "write",
            };
            requests.get_or_create(&RequestLabel { kind }).inc();
            request
        })
    }

    /// Counts an app's finished backup or restore.
    pub fn finished(family: &Family<ResultLabel, Counter>, app: &AppLabel, succeeded: bool) {
        let result = if succeeded { RESULTS[0] } else { RESULTS[1] };
        family.get_or_create(&app.result(result)).inc();
    }
}

impl AppLabel {
    fn result(&self, result: &'static str) -> ResultLabel {
        ResultLabel {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            result,
        }
    }
}

/// Sets the app's gauge to `value`, or removes it when the status does not say.
fn set(family: &Family<AppLabel, Gauge>, app: &AppLabel, value: Option<u64>) {
    match value {
        Some(value) => {
            family
                .get_or_create(app)
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        }
        None => {
            family.remove(app);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hellostateful_api::LastBackup;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use k8s_openapi::jiff::Timestamp;

    fn text(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).expect("encodes");
        text
    }

    fn app(name: &str) -> AppLabel {
        AppLabel {
            namespace: "ns1".to_string(),
            name: name.to_string(),
        }
    }

    fn condition(type_: &str, status: &str) -> Condition {
        Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: "Test".to_string(),
            message: String::new(),
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }
    }

    #[test]
    fn an_apps_outcome_counters_are_at_zero_from_its_first_pass() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        assert!(
            text(&registry)
                .contains("hellostateful_reconcile_failures_total{error=\"panicked\"} 0")
        );
        metrics.observe(&app("hello"), &HelloStatefulStatus::default());
        let text = text(&registry);
        for family in ["backups", "restores"] {
            for result in RESULTS {
                let series = format!(
                    "hellostateful_{family}_total{{namespace=\"ns1\",name=\"hello\",result=\"{result}\"}} 0"
                );
                assert!(text.contains(&series), "{series} missing from:\n{text}");
            }
        }
        // Nothing is said of a backup there is none of.
        assert!(!text.contains("hellostateful_backup_last_bytes{"), "{text}");
    }

    #[test]
    fn the_newest_backup_and_the_operations_under_way_are_read_off_status_and_forgotten_with_the_app()
     {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let status = HelloStatefulStatus {
            last_backup: Some(LastBackup {
                id: "20261207T100000Z".to_string(),
                time: "2026-12-07T10:00:02Z".to_string(),
                bytes: 4096,
                files: 3,
                new_bytes: 1024,
                duration_ms: 1500,
                inconsistent_files: 2,
                job: Some("hello-backup-1".to_string()),
                snapshots: Some(7),
                oldest_snapshot: Some("20261201T000000Z-2".to_string()),
            }),
            conditions: vec![
                condition(conditions::BACKING_UP, "True"),
                condition(conditions::RESTORING, "False"),
            ],
            ..HelloStatefulStatus::default()
        };
        metrics.observe(&app("hello"), &status);
        metrics.observe(&app("other"), &HelloStatefulStatus::default());
        Metrics::finished(&metrics.backups, &app("hello"), false);
        let exported = text(&registry);
        let of_hello = |metric: &str, value: &str| {
            format!("hellostateful_{metric}{{namespace=\"ns1\",name=\"hello\"}} {value}\n")
        };
        for series in [
            of_hello("backup_last_success_timestamp_seconds", "1796637602"),
            of_hello("backup_last_duration_seconds", "1.5"),
            of_hello("backup_last_bytes", "4096"),
            of_hello("backup_last_new_bytes", "1024"),
            of_hello("backup_last_inconsistent_files", "2"),
            of_hello("snapshots", "7"),
            of_hello("snapshot_oldest_timestamp_seconds", "1796083200"),
            "hellostateful_operation_in_flight{namespace=\"ns1\",name=\"hello\",operation=\"backup\"} 1\n".to_string(),
            "hellostateful_operation_in_flight{namespace=\"ns1\",name=\"hello\",operation=\"restore\"} 0\n".to_string(),
            "hellostateful_backups_total{namespace=\"ns1\",name=\"hello\",result=\"failed\"} 1\n".to_string(),
        ] {
            assert!(exported.contains(&series), "{series} missing from:\n{exported}");
        }

        metrics.forget(&app("hello"));
        let left = text(&registry);
        assert!(!left.contains("name=\"hello\""), "{left}");
        assert!(left.contains("name=\"other\""), "{left}");
    }
}
