//! Swapping restored contents into a live volume, crash-safely.
//!
//! A volume is a mount point: we cannot rename the directory itself, only its entries.
//! A fsynced journal in the volume records the phase, and every phase can be re-run from
//! the start (each step is a rename of one entry, which either happened or did not), so
//! whoever finds a journal rolls the swap *forward* to the end:
//!
//! 1. `MoveOld`: every current top-level entry is renamed into `.hellostateful-old/`.
//! 2. `MoveNew`: every entry of the (complete, fsynced) staging directory is renamed to
//!    the root.
//! 3. `Cleanup`: old and staging are deleted, then the journal.
//!
//! The journal is written only once staging is complete and durable, so a restore killed
//! before that leaves the old contents in place plus a staging directory that the next
//! run deletes. Killed after, the next restore or backup on the volume finishes the swap.
//! Either way the volume ends entirely old or entirely new.

use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{MoverError, Result, io_err};
use crate::fsops;
use crate::manifest::Meta;

/// Prefix of every name the mover keeps in a volume; backups skip these entries.
const RESERVED_PREFIX: &[u8] = b".hellostateful-";
/// The staging directory a restore writes into.
pub(crate) const STAGING: &str = ".hellostateful-staging";
/// Where the old contents go during a swap.
const OLD: &str = ".hellostateful-old";
/// The swap journal.
const JOURNAL: &str = ".hellostateful-journal";
/// The journal being rewritten (renamed over `JOURNAL`).
const JOURNAL_TMP: &str = ".hellostateful-journal.tmp";

/// Whether a top-level volume entry belongs to the mover rather than the app.
pub(crate) fn is_reserved(name: &OsStr) -> bool {
    name.as_bytes().starts_with(RESERVED_PREFIX)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Phase {
    MoveOld,
    MoveNew,
    Cleanup,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Journal {
    phase: Phase,
    /// The backup being restored, for messages.
    id: String,
    /// Metadata for the volume root, applied last.
    root: Meta,
}

/// Finishes (or cleans up after) an interrupted restore in `volume`. Called before any
/// restore or backup touches the volume. Returns whether a swap was completed.
pub(crate) fn recover(volume: &Path) -> Result<bool> {
    let journal_path = volume.join(JOURNAL);
    match fs::read(&journal_path) {
        Ok(bytes) => {
            let journal: Journal =
                serde_json::from_slice(&bytes).map_err(|e| MoverError::Leftover {
                    path: journal_path.clone(),
                    reason: format!(
                        "unreadable restore journal ({e}); inspect {} and {} by hand",
                        volume.join(OLD).display(),
                        volume.join(STAGING).display()
                    ),
                })?;
            crate::warn(format!(
                "completing the interrupted restore of backup {} in {}",
                journal.id,
                volume.display()
            ));
            finish(volume, journal)?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // Look before removing: a backup mounts volumes read-only, where even unlinking
            // a missing file fails with EROFS.
            let journal_tmp = volume.join(JOURNAL_TMP);
            if journal_tmp.symlink_metadata().is_ok() {
                remove_file_if_exists(&journal_tmp)?;
            }
            let staging = volume.join(STAGING);
            if staging.symlink_metadata().is_ok() {
                crate::warn(format!(
                    "removing {} left by a restore interrupted before its swap",
                    staging.display()
                ));
                fsops::remove_tree(&staging)?;
            }
            let old = volume.join(OLD);
            if old.symlink_metadata().is_ok() {
                return Err(MoverError::Leftover {
                    path: old,
                    reason: "old contents of an interrupted restore without its journal; \
                             move them back or delete them"
                        .into(),
                });
            }
            Ok(false)
        }
        Err(e) => Err(io_err("read", journal_path)(e)),
    }
}

/// Swaps the complete, durable staging directory of `volume` into place. Returns whether
/// ownership of the root could be set.
pub(crate) fn swap(volume: &Path, id: &str, root: Meta) -> Result<bool> {
    let journal = Journal {
        phase: Phase::MoveOld,
        id: id.to_owned(),
        root,
    };
    write_journal(volume, &journal)?;
    finish(volume, journal)
}

fn finish(volume: &Path, mut journal: Journal) -> Result<bool> {
    let old = volume.join(OLD);
    let staging = volume.join(STAGING);
    loop {
        match journal.phase {
            Phase::MoveOld => {
                match fs::create_dir(&old) {
                    Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                        return Err(io_err("create directory", &old)(e));
                    }
                    _ => crate::fault::step(),
                }
                for path in fsops::list_dir(volume)? {
                    let Some(name) = path.file_name() else {
                        continue;
                    };
                    if !is_reserved(name) {
                        rename(&path, &old.join(name))?;
                    }
                }
                fsops::sync_dir(&old)?;
                fsops::sync_dir(volume)?;
                journal.phase = Phase::MoveNew;
            }
            Phase::MoveNew => {
                for path in fsops::list_dir(&staging)? {
                    if let Some(name) = path.file_name() {
                        rename(&path, &volume.join(name))?;
                    }
                }
                fsops::sync_dir(volume)?;
                journal.phase = Phase::Cleanup;
            }
            Phase::Cleanup => {
                fsops::remove_tree(&old)?;
                fsops::remove_tree(&staging)?;
                let journal_path = volume.join(JOURNAL);
                fs::remove_file(&journal_path).map_err(io_err("remove", &journal_path))?;
                fsops::sync_dir(volume)?;
                crate::fault::step();
                // Last, because removing the journal changes the root's mtime.
                return fsops::apply_meta_dir(volume, &journal.root);
            }
        }
        write_journal(volume, &journal)?;
    }
}

fn rename(from: &Path, to: &Path) -> Result<()> {
    fs::rename(from, to).map_err(|source| MoverError::Copy {
        from: from.to_owned(),
        to: to.to_owned(),
        source,
    })?;
    crate::fault::step();
    Ok(())
}

fn write_journal(volume: &Path, journal: &Journal) -> Result<()> {
    let tmp = volume.join(JOURNAL_TMP);
    let text = serde_json::to_vec(journal).map_err(|e| MoverError::Leftover {
        path: tmp.clone(),
        reason: format!("cannot encode the journal: {e}"),
    })?;
    let mut file = fs::File::create(&tmp).map_err(io_err("create", &tmp))?;
    file.write_all(&text).map_err(io_err("write", &tmp))?;
    file.sync_all().map_err(io_err("fsync", &tmp))?;
    fsops::durable_rename(&tmp, &volume.join(JOURNAL))
}

fn remove_file_if_exists(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("remove", path)(e)),
        _ => Ok(()),
    }
}
