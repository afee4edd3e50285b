//! The hellostateful data mover: incremental, verified, crash-safe snapshots of an app's
//! replica volumes, and restores that swap them back in without ever leaving a mix.
//!
//! Layout on the backup target (see DESIGN.md, "Backups on disk"):
//!
//! ```text
//! <target>/<namespace>/<name>/.lock                   flock(2): one backup at a time
//! <target>/<namespace>/<name>/<id>/<ordinal>/...       complete snapshot, browsable
//! <target>/<namespace>/<name>/<id>/manifest.json       files, checksums, result
//! <target>/<namespace>/<name>/.tmp-<id>/               a backup being written
//! ```
//!
//! Volumes and backups are written by the tenant, who may race the mover; every path
//! below the command-line roots is opened through `confined`, never following a symlink.
//!
//! The library functions ([`backup()`], [`restore()`], [`list`], [`describe`], [`verify()`],
//! [`prune`], [`delete`], [`purge`], [`wipe`], [`prepare`])
//! return [`MoverError`]s that name the file and keep the OS error as their source;
//! [`cli`] wraps them for the reconciler binary's Job subcommands.

mod backup;
mod catalog;
pub mod cli;
mod confined;
mod entries;
mod error;
mod fault;
mod fsops;
mod lock;
mod manifest;
mod names;
pub mod objstore;
mod restore;
mod swap;
mod verify;
mod volumes;

pub use backup::{BackupOptions, BackupReport, backup};
pub use catalog::{
    DeleteOutcome, PruneOutcome, PurgeOutcome, Snapshot, SnapshotDetails, SnapshotInfo, delete,
    describe, incomplete, list, prune, purge, resolve,
};
pub use error::{MoverError, Result, SWAP_INTERRUPTED};
pub use fault::{FAULT_ENV, TRACE_ENV};
pub use manifest::{
    Entry, EntryFile, Kind, MANIFEST_FILE, Manifest, Meta, Replica, SourceStamp, Xattrs,
};
pub use names::{App, BackupId, Selector};
pub use restore::{
    NotRestored, RestoreOptions, RestoreOutcome, RestoreReport, restore, restore_from_store,
};
pub use verify::{VerifyReport, verify};
pub use volumes::{PrepareOutcome, VolumeOwner, WipeOutcome, prepare, wipe};

/// Prints a warning on stderr. The mover runs as a Kubernetes Job: stderr is its log,
/// stdout carries only the one-line JSON result.
pub(crate) fn warn(message: String) {
    eprintln!("warning: {message}");
}

/// An error with its whole cause chain: `cannot read /x: Permission denied (os error 13)`.
/// A cause whose text its error already shows (HTTP clients' errors do) is not repeated,
/// and one line is made of each (a server's XML error body spans several).
pub fn chain(error: &dyn std::error::Error) -> String {
    let one_line = |e: &dyn std::error::Error| {
        e.to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut text = one_line(error);
    let mut cause = error.source();
    while let Some(e) = cause {
        let said = one_line(e);
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = e.source();
    }
    text
}
