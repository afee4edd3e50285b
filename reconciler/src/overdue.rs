//! Whether scheduled backups have stopped: the BackupOverdue condition.
//!
//! A backup is overdue once two scheduled runs have passed since the newest successful
//! backup (or, before the first, since the app was made): one run may fail or still be
//! running, two may not. The reconciler reads schedules in UTC; for a schedule in a time
//! zone (`TZ=...`), whose runs it places up to a day off, one more run must pass. An app
//! may instead say how old its newest backup may get (`spec.backup.maxAgeSeconds`), also
//! without a schedule, for backups taken on demand.

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
    let since = last_success.map_or(created, |success| success.max(created));
    if spec.backups_suspended() {
        return Verdict::NotScheduled("scheduled backups are suspended");
    }
    if let Some(max_age) = spec.max_backup_age() {
        if now - since <= max_age {
            return Verdict::OnTime;
        }
        return Verdict::Overdue(format!(
            "{}, more than backup.maxAgeSeconds ({}s) ago; see BackupFailed and the backup \
             Jobs' events",
            since_what(since, last_success),
            max_age.num_seconds()
        ));
    }
    let Some(schedule) = spec.backup_schedule.as_deref() else {
        return Verdict::NotScheduled("the app has no backupSchedule");
    };
    let Some((cron, zoned)) = validate::parsed_schedule(schedule) else {
        return Verdict::NotScheduled("the backupSchedule is not valid");
    };
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
    Verdict::Overdue(format!(
        "{}, and the runs scheduled at {runs} (UTC) have passed; see BackupFailed and the \
         backup Jobs' events",
        since_what(since, last_success)
    ))
}

/// "no backup has succeeded since …", from the newest success or the app's creation.
fn since_what(since: DateTime<Utc>, last_success: Option<DateTime<Utc>>) -> String {
    let since_text = since.format("%Y-%m-%dT%H:%M:%SZ");
    match last_success {
        Some(_) => format!("no backup has succeeded since {since_text}"),
        None => format!("no backup has succeeded since the app was made ({since_text})"),
    }
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
    fn a_max_age_decides_with_or_without_a_schedule() {
        let created = at("2026-12-01T00:00:00Z");
        let success = Some(at("2026-12-01T06:00:00Z"));
        for spec in [
            json!({"backup": {"maxAgeSeconds": 7200}}),
            // Hourly runs would allow two hours too, but the max age decides alone.
            json!({"backupSchedule": "@yearly", "backup": {"maxAgeSeconds": 7200}}),
        ] {
            let spec: HelloStatefulSpec = serde_json::from_value(spec).expect("a valid spec");
            assert_eq!(
                check(&spec, created, success, at("2026-12-01T08:00:00Z")),
                Verdict::OnTime
            );
            let Verdict::Overdue(message) =
                check(&spec, created, success, at("2026-12-01T08:00:01Z"))
            else {
                panic!("older than its max age: overdue");
            };
            assert!(
                message.contains(
                    "since 2026-12-01T06:00:00Z, more than backup.maxAgeSeconds (7200s) ago"
                ),
                "{message}"
            );
            assert!(matches!(
                check(&spec, created, None, at("2026-12-01T02:00:01Z")),
                Verdict::Overdue(message) if message.contains("since the app was made")
            ));
        }
        let paused: HelloStatefulSpec =
            serde_json::from_value(json!({"backup": {"maxAgeSeconds": 60, "suspend": true}}))
                .expect("a valid spec");
        assert!(matches!(
            check(&paused, created, None, at("2027-01-01T00:00:00Z")),
            Verdict::NotScheduled(_)
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
