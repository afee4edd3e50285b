//! What the data mover prints (one JSON line) and writes to the Job's termination message.
//! The reconciler reads these into status; the plugin reads the catalog.

use serde::{Deserialize, Serialize};

/// Result of `hellostateful-reconciler backup`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct BackupSummary {
    pub id: String,
    pub time: String,
    pub bytes: u64,
    pub files: u64,
    #[serde(default)]
    pub new_bytes: u64,
    #[serde(default)]
    pub linked_files: u64,
    pub duration_ms: u64,
    #[serde(default)]
    pub ordinals: Vec<u32>,
    #[serde(default)]
    pub pruned: Vec<String>,
    /// The complete snapshots left after the backup's retention, itself included (movers
    /// before 0.2 do not say).
    #[serde(default)]
    pub snapshots: Option<u64>,
    /// The oldest of them.
    #[serde(default)]
    pub oldest: Option<String>,
    /// Files that kept changing while they were copied (kept as read, may be torn).
    #[serde(default)]
    pub inconsistent: u64,
    /// The first few of them, `<ordinal>/<path>`.
    #[serde(default)]
    pub inconsistent_files: Vec<String>,
}

/// Result of `hellostateful-reconciler restore`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSummary {
    pub restored: bool,
    /// Why nothing was restored (`NoBackup` with `--if-exists`).
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub bytes: u64,
    #[serde(default)]
    pub files: u64,
    #[serde(default)]
    pub duration_ms: u64,
}

/// One snapshot in `hellostateful-reconciler backups --json`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CatalogEntry {
    pub id: String,
    pub time: String,
    pub bytes: u64,
    pub files: u64,
    #[serde(default)]
    pub new_bytes: u64,
    #[serde(default)]
    pub duration_ms: u64,
    #[serde(default)]
    pub ordinals: Vec<u32>,
}

/// One snapshot in full: `hellostateful-reconciler describe`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct BackupDetails {
    pub id: String,
    /// `namespace/name` of the app backed up.
    pub app: String,
    pub time: String,
    pub end_time: String,
    pub duration_ms: u64,
    pub bytes: u64,
    pub files: u64,
    pub new_bytes: u64,
    pub linked_files: u64,
    #[serde(default)]
    pub inconsistent_files: u64,
    pub ordinals: Vec<u32>,
    pub format: u32,
    pub manifest_checksum: String,
    /// The newest complete backup, which retention and `backups delete` keep.
    pub newest: bool,
}

/// `hellostateful-reconciler verify --json`: every damaged, missing or unexpected file.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct VerifyResult {
    pub id: String,
    pub files: u64,
    pub bytes: u64,
    pub problems: Vec<String>,
}

/// `hellostateful-reconciler delete`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct DeleteResult {
    pub deleted: String,
    /// The complete backups left, newest first.
    pub kept: Vec<String>,
}

/// When the backup `id` started: ids are its UTC start time (`20261129T150102Z`), with a
/// `-N` suffix when that second was taken already.
pub fn snapshot_started(id: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let stamp = id.split_once('-').map_or(id, |(stamp, _)| stamp);
    chrono::NaiveDateTime::parse_from_str(stamp, "%Y%m%dT%H%M%SZ")
        .ok()
        .map(|time| time.and_utc())
}

/// The last line of `text` that parses as `T`: the mover's summary follows any warnings.
pub fn parse_last_line<T: serde::de::DeserializeOwned>(text: &str) -> Option<T> {
    text.lines()
        .rev()
        .find_map(|line| serde_json::from_str(line.trim()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshots_start_is_read_from_its_id() {
        let start = |id| snapshot_started(id).map(|t| t.to_rfc3339());
        assert_eq!(
            start("20261129T150102Z").as_deref(),
            Some("2026-11-29T15:01:02+00:00")
        );
        assert_eq!(
            start("20261129T150102Z-12").as_deref(),
            Some("2026-11-29T15:01:02+00:00")
        );
        assert_eq!(start("latest"), None);
        assert_eq!(start(""), None);
    }

    #[test]
    fn parses_the_summary_after_warnings() {
        let text = "warning: skipping lost+found\n{\"id\":\"20261129T150102Z\",\"time\":\"2026-11-29T15:01:02Z\",\"bytes\":10,\"files\":2,\"newBytes\":4,\"linkedFiles\":1,\"durationMs\":3,\"ordinals\":[0],\"pruned\":[]}\n";
        let summary: BackupSummary = parse_last_line(text).expect("summary");
        assert_eq!(summary.id, "20261129T150102Z");
        assert_eq!(summary.new_bytes, 4);
        assert!(parse_last_line::<BackupSummary>("no json here").is_none());
    }

    #[test]
    fn parses_a_restore_that_found_no_backup() {
        let summary: RestoreSummary =
            parse_last_line("{\"restored\":false,\"reason\":\"NoBackup\"}").expect("summary");
        assert!(!summary.restored);
        assert_eq!(summary.reason.as_deref(), Some("NoBackup"));
    }
}
