//! Whether scheduled backups have stopped: the BackupOverdue condition.
//!
//! A backup is overdue once two scheduled runs have passed since the newest successful
//! backup (or, before the first, since the app was made): one run may fail or still be
//! running, two may not. The reconciler reads schedules in UTC; for a schedule in a time
//! zone (`TZ=...`), whose runs it places up to a day off, one more run must pass.

use chrono::{DateTime, Utc};
use hellostateful_api::HelloStatefulSpec;
use hellostateful_api::validate;

/// Where the app's scheduled backups stand.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No schedule, or backups suspended: nothing can be overdue.
    NotScheduled(&'static str),
    /// The newest successful backup is recent enough.
    OnTime,
    /// Scheduled runs passed without a successful backup; the message says since when.
    Overdue(String),
}

/// The verdict at `now` for an app made at `created` whose newest successful backup, if
/// any, finished at `last_success`.
pub fn check(
    spec: &HelloStatefulSpec,
    created: DateTime<Utc>,
    last_success: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Verdict {
    let Some(schedule) = spec.backup_schedule.as_deref() else {
        return Verdict::NotScheduled("the app has no backupSchedule");
    };
    if spec.backups_suspended() {
        return Verdict::NotScheduled("scheduled backups are suspended");
    }
    let Some((cron, zoned)) = validate::parsed_schedule(schedule) else {
        return Verdict::NotScheduled("the backupSchedule is not valid");
    };
    let since = last_success.map_or(created, |success| success.max(created));
    let allowed = if zoned { 3 } else { 2 };
    let passed: Vec<DateTime<Utc>> = cron
        .iter_after(since)
        .take(allowed)
        .take_while(|run| *run <= now)
        .collect();
    if passed.len() < allowed {
        return Verdict::OnTime;
    }
    let runs = passed
        .iter()
        .map(|run| run.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let since_text = since.format("%Y-%m-%dT%H:%M:%SZ");
    Verdict::Overdue(match last_success {
        Some(_) => format!(
            "no backup has succeeded since {since_text}, and the runs scheduled at {runs} \
             (UTC) have passed; see BackupFailed and the backup Jobs' events"
        ),
        None => format!(
            "no backup has succeeded since the app was made ({since_text}), and the runs \
             scheduled at {runs} (UTC) have passed; see BackupFailed and the backup Jobs' events"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(schedule: &str, suspend: bool) -> HelloStatefulSpec {
        serde_json::from_value(json!({
            "backupSchedule": schedule,
            "backup": {"suspend": suspend},
        }))
        .expect("a valid spec")
    }

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("an RFC 3339 time")
            .with_timezone(&Utc)
    }

    #[test]
    fn one_missed_run_is_on_time_two_are_overdue() {
        let hourly = spec("0 * * * *", false);
        let created = at("2026-12-01T09:30:00Z");
        let success = Some(at("2026-12-01T10:00:05Z"));
        // The 11:00 run failed or still runs: on time.
        assert_eq!(
            check(&hourly, created, success, at("2026-12-01T11:59:00Z")),
            Verdict::OnTime
        );
        let Verdict::Overdue(message) =
            check(&hourly, created, success, at("2026-12-01T12:00:00Z"))
        else {
            panic!("two runs passed: overdue");
        };
        assert!(
            message.contains("since 2026-12-01T10:00:05Z")
                && message.contains("2026-12-01T11:00:00Z, 2026-12-01T12:00:00Z"),
            "{message}"
        );
    }

    #[test]
    fn before_the_first_backup_the_apps_creation_counts() {
        let daily = spec("@daily", false);
        let created = at("2026-12-01T09:30:00Z");
        assert_eq!(
            check(&daily, created, None, at("2026-12-02T23:00:00Z")),
            Verdict::OnTime
        );
        let Verdict::Overdue(message) = check(&daily, created, None, at("2026-12-03T00:00:01Z"))
        else {
            panic!("two runs passed since the app was made: overdue");
        };
        assert!(message.contains("since the app was made"), "{message}");
        // A backup older than the app (a name reused) does not make a new app overdue.
        assert_eq!(
            check(
                &daily,
                created,
                Some(at("2026-01-01T00:00:00Z")),
                at("2026-12-02T23:00:00Z")
            ),
            Verdict::OnTime
        );
    }

    #[test]
    fn a_schedule_in_a_time_zone_gets_one_more_run() {
        let zoned = spec("TZ=Europe/Paris 0 3 * * *", false);
        let created = at("2026-12-01T00:00:00Z");
        assert_eq!(
            check(&zoned, created, None, at("2026-12-02T04:00:00Z")),
            Verdict::OnTime
        );
        assert!(matches!(
            check(&zoned, created, None, at("2026-12-03T04:00:00Z")),
            Verdict::Overdue(_)
        ));
    }

    #[test]
    fn nothing_is_overdue_without_a_running_schedule() {
        let created = at("2020-01-01T00:00:00Z");
        let now = at("2026-12-01T00:00:00Z");
        let none: HelloStatefulSpec = serde_json::from_value(json!({})).expect("a valid spec");
        assert!(matches!(
            check(&none, created, None, now),
            Verdict::NotScheduled(_)
        ));
        assert!(matches!(
            check(&spec("* * * * *", true), created, None, now),
            Verdict::NotScheduled(_)
        ));
    }
}
