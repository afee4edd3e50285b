//! Checks of a spec that the CRD schema cannot express. The reconciler reports a failure in
//! status and an event; the plugin refuses before sending.

use std::str::FromStr;

use croner::Cron;
use thiserror::Error;

use crate::HelloStatefulSpec;
use crate::names::MAX_NAME_LEN;

/// Why a spec cannot be carried out.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SpecError {
    #[error("backupSchedule {schedule:?} is not a valid cron schedule: {reason}")]
    Schedule { schedule: String, reason: String },
    #[error("restore-from {0:?} is not a backup id (like 20261129T150102Z) or \"latest\"")]
    RestoreFrom(String),
    #[error(
        "nodeSelector key {0:?} is not a label key: an optional DNS prefix and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
    )]
    LabelKey(String),
    #[error(
        "restoreFrom.name {0:?} is not the name of an app: at most {MAX_NAME_LEN} lower-case letters, digits and '-', starting with a letter and not ending with '-'"
    )]
    SourceName(String),
}

/// Macros Kubernetes CronJobs accept in place of five fields, and the fields they stand for.
const CRON_MACROS: [(&str, &str); 7] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// A schedule's time zone and expression: `TZ=Europe/Paris 0 3 * * *` (the CRD's form, as
/// cron writes it) is zone `Europe/Paris` and `0 3 * * *`. A CronJob takes the zone in its
/// own `timeZone` field: the API server refuses `TZ=` in `schedule`.
pub fn split_time_zone(schedule: &str) -> (Option<&str>, &str) {
    match schedule
        .strip_prefix("TZ=")
        .or(schedule.strip_prefix("CRON_TZ="))
    {
        Some(rest) => match rest.split_once(' ') {
            Some((zone, expression)) => (Some(zone), expression.trim()),
            None => (Some(rest), ""),
        },
        None => (None, schedule.trim()),
    }
}

/// Checks a cron schedule the way a CronJob would take it (five fields or a macro, with an
/// optional `TZ=` prefix).
pub fn schedule(schedule: &str) -> Result<(), SpecError> {
    let invalid = |reason: String| SpecError::Schedule {
        schedule: schedule.to_string(),
        reason,
    };
    let expression = match split_time_zone(schedule) {
        (Some(_), "") => {
            return Err(invalid(
                "a time zone must be followed by a schedule".to_string(),
            ));
        }
        (_, expression) => expression,
    };
    if CRON_MACROS.iter().any(|(name, _)| *name == expression) {
        return Ok(());
    }
    let fields = expression.split_whitespace().count();
    if fields != 5 {
        return Err(invalid(format!(
            "expected 5 fields (minute hour day-of-month month day-of-week), found {fields}"
        )));
    }
    Cron::from_str(expression)
        .map(|_| ())
        .map_err(|error| invalid(error.to_string()))
}

/// A valid schedule's cron expression (a macro expanded), and whether it names a time zone.
/// `None` for a schedule [`schedule`] refuses.
pub fn parsed_schedule(text: &str) -> Option<(Cron, bool)> {
    schedule(text).ok()?;
    let (zone, expression) = split_time_zone(text);
    let expression = CRON_MACROS
        .iter()
        .find(|(name, _)| *name == expression)
        .map_or(expression, |(_, fields)| fields);
    Some((Cron::from_str(expression).ok()?, zone.is_some()))
}

/// Checks a `restore-from` annotation value: `latest` or a snapshot id.
pub fn restore_from(value: &str) -> Result<(), SpecError> {
    let is_id = !value.is_empty()
        && value.len() <= 64
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_')
        && !value.starts_with('.')
        // Never an option to the mover, whatever its command line looks like.
        && !value.starts_with('-');
    if value == "latest" || is_id {
        Ok(())
    } else {
        Err(SpecError::RestoreFrom(value.to_string()))
    }
}

/// Whether `name` can name an app, as the CRD requires: a DNS-1035 label of at most
/// [`MAX_NAME_LEN`] characters (it names the app's Service and backup CronJob).
pub fn is_app_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Whether `key` is a label key, as the API server checks a Pod's nodeSelector: an optional
/// DNS-subdomain prefix of at most 253 characters and '/', then a name of at most 63.
pub fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                    && part.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    });
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    prefix_ok && name_ok
}

/// A node path as the CRD accepts it (`^(/[A-Za-z0-9_][-A-Za-z0-9._]*)+$`, 2 to 512
/// characters): absolute, no empty, `.` or `..` component, no trailing `/`, never `/` itself.
/// The plugin checks flags with it before sending, the reconciler the admin's backup roots.
pub fn is_clean_absolute_path(path: &str) -> bool {
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    (2..=512).contains(&path.len())
        && rest.split('/').all(|component| {
            let mut chars = component.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        })
}

/// Every check of a spec beyond the schema.
pub fn spec(spec: &HelloStatefulSpec) -> Result<(), SpecError> {
    if let Some(expression) = &spec.backup_schedule {
        schedule(expression)?;
    }
    if let Some(key) = spec
        .node_selector
        .iter()
        .flatten()
        .map(|(key, _)| key)
        .find(|key| !is_label_key(key))
    {
        return Err(SpecError::LabelKey(key.clone()));
    }
    if let Some(source) = &spec.restore_from {
        if !is_app_name(&source.name) {
            return Err(SpecError::SourceName(source.name.clone()));
        }
        restore_from(source.snapshot())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_what_cronjobs_accept() {
        for ok in [
            "*/5 * * * *",
            "0 3 * * 1-5",
            "@hourly",
            "TZ=Europe/Paris 0 3 * * *",
            "*/1 * * * *",
        ] {
            assert_eq!(schedule(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn refuses_bad_schedules_with_a_reason() {
        for bad in ["* * *", "61 * * * *", "every minute", "* * * * * *"] {
            let error = schedule(bad).expect_err(bad).to_string();
            assert!(error.contains(bad), "{error}");
        }
    }

    #[test]
    fn host_paths_follow_the_crd_rule() {
        for good in [
            "/tmp/backup",
            "/a",
            "/srv/back-ups/v1.2",
            "/_x/y_",
            "/srv/x.y/_z-1",
        ] {
            assert!(is_clean_absolute_path(good), "{good}");
        }
        for bad in [
            "",
            "/",
            "//",
            "/.",
            "tmp/backup",
            "/tmp/backup/",
            "//tmp",
            "/tmp//backup",
            "/tmp/./backup",
            "/tmp/../etc",
            "/..",
            "/.hidden",
            "/a/.b",
            "/-x",
            "/tmp/back up",
            "/tmp/bäckup",
            &format!("/{}", "a".repeat(512)),
        ] {
            assert!(!is_clean_absolute_path(bad), "{bad}");
        }
    }

    #[test]
    fn restore_from_takes_latest_or_an_id_only() {
        assert!(restore_from("latest").is_ok());
        assert!(restore_from("20261129T150102Z").is_ok());
        assert!(restore_from("20261129T150102Z-2").is_ok());
        for bad in [
            "",
            "../etc",
            "a/b",
            ".hidden",
            "x y",
            "-x",
            "--help",
            "--target=/",
        ] {
            assert!(restore_from(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_restore_source_is_an_app_name_and_a_backup_id() {
        let with = |source: serde_json::Value| {
            let parsed: HelloStatefulSpec =
                serde_json::from_value(serde_json::json!({"restoreFrom": source})).expect("spec");
            spec(&parsed)
        };
        assert_eq!(with(serde_json::json!({"name": "old"})), Ok(()));
        assert_eq!(
            with(serde_json::json!({"name": "old", "backupId": "20261129T150102Z"})),
            Ok(())
        );
        for bad in ["", "Old", "../x", "a/b", "-x", &"a".repeat(46)] {
            assert!(with(serde_json::json!({"name": bad})).is_err(), "{bad}");
        }
        for bad in ["../x", "--target=/", ".x", "a b"] {
            assert!(
                with(serde_json::json!({"name": "old", "backupId": bad})).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn node_selector_keys_are_label_keys() {
        for ok in [
            "tier",
            "kubernetes.io/hostname",
            "example.com/a_b.c-d",
            "A1",
        ] {
            assert!(is_label_key(ok), "{ok}");
        }
        for bad in [
            "",
            "/x",
            "a b",
            "Example.com/x",
            "x/",
            "-x",
            &"a".repeat(64),
            "a/b/c",
        ] {
            assert!(!is_label_key(bad), "{bad}");
        }
    }
}
