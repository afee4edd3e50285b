//! Status conditions: set by type, with the transition time kept while the status holds.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// All replicas are ready and nothing stops the app.
pub const READY: &str = "Ready";
/// A restore Job runs (the app is stopped).
pub const RESTORING: &str = "Restoring";
/// A backup Job runs.
pub const BACKING_UP: &str = "BackingUp";
/// The newest finished backup succeeded.
pub const BACKUP_SUCCEEDED: &str = "BackupSucceeded";
/// The newest finished backup failed.
pub const BACKUP_FAILED: &str = "BackupFailed";
/// Two scheduled backup runs passed without a successful backup (see `overdue`).
pub const BACKUP_OVERDUE: &str = "BackupOverdue";
/// The app's volumes and StatefulSet were made (after the initial restore, if any). Never
/// goes back to False, so a StatefulSet deleted by hand is remade without a second restore.
pub const INITIALIZED: &str = "Initialized";

/// The app's volumes are as the spec asks (their size and class cannot change once made).
pub const STORAGE_APPLIED: &str = "StorageApplied";

/// The conditions of one status, being edited.
pub struct Conditions<'a> {
    list: &'a mut Vec<Condition>,
    generation: Option<i64>,
}

impl<'a> Conditions<'a> {
    pub fn new(list: &'a mut Vec<Condition>, generation: Option<i64>) -> Self {
        Self { list, generation }
    }

    /// Whether condition `kind` is True.
    pub fn is_true(&self, kind: &str) -> bool {
        self.list
            .iter()
            .any(|c| c.type_ == kind && c.status == "True")
    }

    /// The reason of condition `kind`, if present.
    pub fn reason(&self, kind: &str) -> Option<&str> {
        self.list
            .iter()
            .find(|c| c.type_ == kind)
            .map(|c| c.reason.as_str())
    }

    /// The message of condition `kind`, if present.
    pub fn message(&self, kind: &str) -> Option<&str> {
        self.list
            .iter()
            .find(|c| c.type_ == kind)
            .map(|c| c.message.as_str())
    }

    /// Whether condition `kind` is present.
    pub fn has(&self, kind: &str) -> bool {
        self.list.iter().any(|c| c.type_ == kind)
    }

    /// Sets condition `kind`; returns true when its status, reason or message changed (the
    /// moment to publish an event).
    pub fn set(&mut self, kind: &str, status: bool, reason: &str, message: &str) -> bool {
        let status = if status { "True" } else { "False" };
        let generation = self.generation;
        match self.list.iter_mut().find(|c| c.type_ == kind) {
            Some(existing) => {
                let changed = existing.status != status
                    || existing.reason != reason
                    || existing.message != message;
                if existing.status != status {
                    existing.last_transition_time = Time(Timestamp::now());
                }
                existing.status = status.to_string();
                existing.reason = reason.to_string();
                existing.message = message.to_string();
                existing.observed_generation = generation;
                changed
            }
            None => {
                self.list.push(Condition {
                    type_: kind.to_string(),
                    status: status.to_string(),
                    reason: reason.to_string(),
                    message: message.to_string(),
                    observed_generation: generation,
                    last_transition_time: Time(Timestamp::now()),
                });
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setting_the_same_condition_twice_is_no_change() {
        let mut list = Vec::new();
        let mut conditions = Conditions::new(&mut list, Some(1));
        assert!(conditions.set(READY, false, "Restoring", "wait"));
        assert!(!conditions.set(READY, false, "Restoring", "wait"));
        assert!(!conditions.is_true(READY));
        assert!(conditions.set(READY, true, "AllReplicasReady", "1/1"));
        assert!(conditions.is_true(READY));
        assert_eq!(list.len(), 1);
    }

    #[test]
    fn transition_time_moves_only_when_the_status_flips() {
        let mut list = Vec::new();
        Conditions::new(&mut list, Some(1)).set(READY, false, "A", "a");
        let first = list[0].last_transition_time.clone();
        Conditions::new(&mut list, Some(2)).set(READY, false, "B", "b");
        assert_eq!(list[0].last_transition_time, first);
        assert_eq!(list[0].observed_generation, Some(2));
    }
}
