//! The one error type of the mover. Every variant names the file (or the thing the user
//! typed) it is about and keeps the OS error as its `source`, so `error: ...` lines printed
//! by the CLI with the cause chain say both *what* failed and *why*.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// How a failed restore's message begins when it had already begun replacing the live
/// data (the reconciler then keeps the app stopped rather than run it on a mix).
pub const SWAP_INTERRUPTED: &str = "the restore was interrupted while it replaced the live data";

/// Result alias used throughout the crate.
pub type Result<T, E = MoverError> = std::result::Result<T, E>;

/// Everything that can make a mover operation fail.
#[derive(Debug, thiserror::Error)]
pub enum MoverError {
    /// A filesystem call on `path` failed.
    #[error("cannot {action} {}", path.display())]
    Io {
        /// What we were doing, as a verb phrase ("read", "create directory", ...).
        action: &'static str,
        /// The file the call was about.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// Copying one file into another, or linking or renaming it, failed.
    #[error("cannot {action} {} to {}", from.display(), to.display())]
    Copy {
        /// What was done: copy, link or rename.
        action: &'static str,
        /// The file being read.
        from: PathBuf,
        /// The file being written.
        to: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// A namespace or app name that is not a valid Kubernetes name (and so could escape
    /// the backup root, e.g. `..` or `a/b`).
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidName {
        /// "namespace" or "name".
        what: &'static str,
        /// The rejected value.
        value: String,
        /// Why it was rejected.
        reason: &'static str,
    },

    /// A backup id that is not of the form `20261129T150102Z` or `20261129T150102Z-2`.
    #[error(
        "invalid backup id {0:?}: expected \"latest\" or an id like 20261129T150102Z or 20261129T150102Z-2"
    )]
    InvalidId(String),

    /// A command-line value that is out of range or otherwise unusable.
    #[error("{0}")]
    Usage(String),

    /// A backup that would take the app's backup directory past the admin's bound.
    #[error(
        "this backup would take the app's backups past the {limit} bytes this cluster allows per app on a node (the settings' nodeBackupLimit): its snapshots hold up to {held} bytes and it had copied {copied} more when it stopped; earlier backups are intact. Keep fewer backups (spec.backup.retention.keepLast), or ask the admin for more"
    )]
    OverLimit {
        /// The bound.
        limit: u64,
        /// What the snapshots before took (at most).
        held: u64,
        /// What this one had copied.
        copied: u64,
    },

    /// The source directory has no usable ordinal subdirectories.
    #[error("no replica volumes in {}: expected subdirectories named by ordinal (0, 1, ...)", .0.display())]
    NoOrdinals(PathBuf),

    /// The app has no complete snapshot.
    #[error("no complete backup of {app} in {}", dir.display())]
    NoBackup {
        /// `namespace/name`.
        app: String,
        /// The app's backup directory.
        dir: PathBuf,
    },

    /// An explicit backup id that does not exist.
    #[error(
        "backup {id} of {app} does not exist; existing backups: {}",
        list_or_none(existing)
    )]
    NoSuchBackup {
        /// The requested id.
        id: String,
        /// `namespace/name`.
        app: String,
        /// The ids that do exist, newest first.
        existing: Vec<String>,
    },

    /// Another backup (or restore) holds the app's lock for longer than we may wait.
    #[error(
        "another backup, restore or prune of this app is running (lock {} still held after {}s)",
        path.display(),
        waited.as_secs()
    )]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// How long we waited.
        waited: Duration,
    },

    /// A manifest that cannot be parsed.
    #[error("invalid manifest {}", path.display())]
    ManifestParse {
        /// The manifest file.
        path: PathBuf,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },

    /// A manifest that parses but is inconsistent (edited by hand, wrong id, ...).
    #[error("invalid manifest {}: {reason}", path.display())]
    ManifestInvalid {
        /// The manifest file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// A snapshot whose files do not match its manifest.
    #[error("backup {id} is damaged: {}", problems.join("; "))]
    Damaged {
        /// The snapshot id.
        id: String,
        /// One line per bad or missing file, each naming the file.
        problems: Vec<String>,
    },

    /// A path the mover refused to use: it leads through a symlink or out of its tree,
    /// or it is not the inode a walk found (another process swapped it meanwhile).
    #[error("refusing {}: {reason}", path.display())]
    Unsafe {
        /// The path.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// A volume without room for the staged copy of a restore (which is written beside the
    /// live data before it replaces it).
    #[error(
        "not enough space in {}{} to restore backup {id}: the copy needs {needed_bytes} bytes{}, \
         {free_bytes} bytes{} are free; nothing was changed (the live data stays until the \
         restored copy is complete): grow the volume or free space, then restore again",
        path.display(),
        on_one_filesystem(sharing),
        needed_inodes.map(|n| format!(" and {n} inodes")).unwrap_or_default(),
        free_inodes.map(|n| format!(" and {n} inodes")).unwrap_or_default()
    )]
    NoSpace {
        /// The volume.
        path: PathBuf,
        /// The other volumes on its filesystem, whose copies it shares the space with.
        sharing: Vec<PathBuf>,
        /// The backup being restored.
        id: String,
        /// Bytes the copy takes (whole blocks).
        needed_bytes: u64,
        /// Bytes free for an unprivileged writer.
        free_bytes: u64,
        /// Inodes the copy takes, where the filesystem counts them.
        needed_inodes: Option<u64>,
        /// Inodes free.
        free_inodes: Option<u64>,
    },

    /// A restore that failed after it began replacing the live data: some volumes may
    /// hold the new data and others the old until the next restore finishes the swap.
    #[error("{SWAP_INTERRUPTED} with backup {id} (the next restore finishes the swap first)")]
    SwapInterrupted {
        /// The backup being restored.
        id: String,
        /// What stopped it.
        #[source]
        source: Box<MoverError>,
    },

    /// A volume of a committed restore made in parts holding neither the staged copy its
    /// swap was to put in nor the mark that it put it in already: reporting it restored
    /// would start the app on its old data.
    #[error(
        "restore {set} was committed with backup {id}, but {} holds neither its staged copy \
         nor the mark that it was swapped in: the copy was removed after its stage was \
         recorded; the live data there was NOT restored (restore again)",
        path.display()
    )]
    StagingLost {
        /// The volume.
        path: PathBuf,
        /// The restore set.
        set: String,
        /// The backup the set restores.
        id: String,
    },

    /// A request to the object store failed (after its retries).
    #[error("cannot {action} {}: {reason}", path.display())]
    Store {
        /// What we were doing, as a verb phrase ("read", "list", ...).
        action: &'static str,
        /// `s3://bucket/prefix/namespace/name/<key>`.
        path: PathBuf,
        /// The store's answer in short (`the store answered 403 Forbidden (AccessDenied)`),
        /// else the client's error in full.
        reason: String,
        /// The client's error (not a `source`: `reason` says what matters of it).
        error: Box<object_store::Error>,
    },

    /// A snapshot (or part) about to be stored names contents the store no longer holds:
    /// they were deleted while the backup ran (by hand, or by a collection that missed its
    /// lock in a listing that lagged). Storing it would make a backup that cannot be
    /// restored; running again sends them anew.
    #[error(
        "not storing {} : {count} of the contents it names are gone from the store (the first:          {}); they were deleted while the backup ran, and the next backup sends them again",
        manifest.display(), first.display()
    )]
    ContentsGone {
        /// The manifest that was not stored.
        manifest: PathBuf,
        /// How many of the objects it names are missing.
        count: usize,
        /// The first of them.
        first: PathBuf,
    },

    /// Something left in a volume by an interrupted restore that we cannot interpret.
    #[error("{}: {reason}", path.display())]
    Leftover {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong and what to do.
        reason: String,
    },
}

/// ` and B, C (on one filesystem)` for volumes sharing one with the first named.
fn on_one_filesystem(sharing: &[PathBuf]) -> String {
    if sharing.is_empty() {
        return String::new();
    }
    let others: Vec<String> = sharing.iter().map(|p| p.display().to_string()).collect();
    format!(" and {} (on one filesystem)", others.join(", "))
}

impl MoverError {
    /// Whether running the same command again cannot succeed: bad input, a missing or
    /// damaged backup. The CLI exits with [`crate::cli::PERMANENT_FAILURE`] for these, so a
    /// Job fails at once instead of retrying.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            MoverError::InvalidName { .. }
                | MoverError::InvalidId(_)
                | MoverError::Usage(_)
                | MoverError::NoOrdinals(_)
                | MoverError::NoBackup { .. }
                | MoverError::NoSuchBackup { .. }
                | MoverError::ManifestParse { .. }
                | MoverError::ManifestInvalid { .. }
                | MoverError::Damaged { .. }
                | MoverError::NoSpace { .. }
                | MoverError::OverLimit { .. }
                | MoverError::StagingLost { .. }
        ) || matches!(self, MoverError::Store { error, .. } if refused(error))
    }
}

/// An object store client's error in short: the HTTP status and S3 error code the server
/// answered with, when it answered; why its certificate is not trusted, or why it could not
/// be reached; else (a timeout, anything else) all of it.
pub(crate) fn store_reason(error: &object_store::Error) -> String {
    let text = crate::chain(error);
    let after = |marker: &str, end: char| {
        let start = text.find(marker)? + marker.len();
        text[start..].split(end).next().map(|s| s.trim().to_owned())
    };
    let rest = |marker: &str| {
        text.split_once(marker)
            .map(|(_, cause)| cause.trim().to_owned())
    };
    if let Some(status) = after("status code: ", ':') {
        return match after("<Code>", '<') {
            Some(code) => format!("the store answered {status} ({code})"),
            None => format!("the store answered {status}"),
        };
    }
    if let Some(cause) = rest(UNTRUSTED_CERTIFICATE) {
        return format!(
            "the store's certificate is not trusted ({cause}): if a private CA signed it, name that CA in spec.backup.target.objectStore.endpointCA"
        );
    }
    match (rest("tcp connect error: "), after(" after ", ',')) {
        (Some(cause), Some(retries)) => {
            format!("the store could not be reached ({cause}), after {retries}")
        }
        (Some(cause), None) => format!("the store could not be reached ({cause})"),
        _ => text,
    }
}

/// How rustls says that no trusted CA signed the store's certificate.
const UNTRUSTED_CERTIFICATE: &str = "invalid peer certificate: ";

/// Whether the object store refused the keys (401, 403), or its certificate is not trusted:
/// trying again meets the same refusal. A listing's refusal comes as a generic error that
/// only its text tells apart.
fn refused(error: &object_store::Error) -> bool {
    match error {
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => true,
        other => {
            let text = crate::chain(other);
            text.contains(" 403 Forbidden")
                || text.contains(" 401 Unauthorized")
                || text.contains(UNTRUSTED_CERTIFICATE)
        }
    }
}

impl MoverError {
    /// The kind of the underlying OS error, if this is one (to tell "missing" apart).
    pub(crate) fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            MoverError::Io { source, .. } | MoverError::Copy { source, .. } => Some(source.kind()),
            _ => None,
        }
    }
}

fn list_or_none(ids: &[String]) -> String {
    if ids.is_empty() {
        "none".to_owned()
    } else {
        ids.join(", ")
    }
}

/// Builds a closure that wraps an `io::Error` into [`MoverError::Io`], for `map_err`.
pub(crate) fn io_err(
    action: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(io::Error) -> MoverError {
    let path = path.into();
    move |source| MoverError::Io {
        action,
        path,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(text: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: text.into(),
        }
    }

    #[test]
    fn a_stores_answer_or_its_absence_reads_in_short() {
        let refused = generic(
            "Error performing PUT http://s3:8333/b/k in 1.6s, after 4 retries, max_retries: 4, retry_timeout: 30s - HTTP error: error sending request: client error (Connect): tcp connect error: Connection refused (os error 111)",
        );
        assert_eq!(
            store_reason(&refused),
            "the store could not be reached (Connection refused (os error 111)), after 4 retries"
        );
        let forbidden = generic(
            "Error performing GET http://s3:8333/b?list-type=2 in 2ms - Server returned non-2xx status code: 403 Forbidden: <Error><Code>AccessDenied</Code></Error>",
        );
        assert_eq!(
            store_reason(&forbidden),
            "the store answered 403 Forbidden (AccessDenied)"
        );
        let untrusted = generic(
            "Error performing PUT https://s3:8334/b/k in 20ms - HTTP error: error sending request: client error (Connect): invalid peer certificate: UnknownIssuer",
        );
        assert_eq!(
            store_reason(&untrusted),
            "the store's certificate is not trusted (UnknownIssuer): if a private CA signed it, name that CA in spec.backup.target.objectStore.endpointCA"
        );
        let other = generic("something else entirely");
        assert!(store_reason(&other).contains("something else entirely"));

        // Keys refused and certificates not trusted are refused again: the Job stops at once.
        let failed = |error: object_store::Error| MoverError::Store {
            action: "write",
            path: PathBuf::from("s3://b/k"),
            reason: store_reason(&error),
            error: Box::new(error),
        };
        assert!(failed(forbidden).is_permanent());
        assert!(failed(untrusted).is_permanent());
        assert!(!failed(refused).is_permanent(), "the server may come back");
    }
}
