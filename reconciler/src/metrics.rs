//! Prometheus metrics of the reconciler, served at /metrics.

use http::{Method, Request};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tower::util::MapRequestLayer;

/// Outcome label of an action.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
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
}

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
        };
        // Both outcomes from the start, at zero: an alert on `increase` sees the first one.
        for family in [&metrics.backups, &metrics.restores] {
            for result in ["succeeded", "failed"] {
                family
                    .get_or_create(&ResultLabel {
                        result: result.to_string(),
                    })
                    .inc_by(0);
            }
        }
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
            "Finished backups, by result",
            metrics.backups.clone(),
        );
        registry.register(
            "restores",
            "Finished restores, by result",
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
        metrics
    }

    /// Forgets a deleted app's per-app metrics.
    pub fn forget(&self, app: &AppLabel) {
        self.last_backup.remove(app);
        self.backup_overdue.remove(app);
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

    /// Counts a finished backup or restore.
    pub fn finished(family: &Family<ResultLabel, Counter>, succeeded: bool) {
        let result = if succeeded { "succeeded" } else { "failed" };
        family
            .get_or_create(&ResultLabel {
                result: result.to_string(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_the_alerts_and_dashboard_read_is_exported_from_the_start() {
        let mut registry = Registry::default();
        let _metrics = Metrics::register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        for family in [
            "hellostateful_reconcile_failures",
            "hellostateful_backups",
            "hellostateful_restores",
        ] {
            assert!(
                text.contains(&format!("# TYPE {family} counter")),
                "{family} missing from:\n{text}"
            );
        }
        assert!(text.contains("hellostateful_reconcile_failures_total{error=\"panicked\"} 0"));
    }
}
