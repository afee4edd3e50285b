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
use std::io;
use std::os::unix::ffi::OsStrExt;

use serde::{Deserialize, Serialize};

use crate::confined::{Dir, Inode};
use crate::error::{MoverError, Result};
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
pub(crate) fn recover(volume: &Dir) -> Result<bool> {
    match volume.read_file(JOURNAL) {
        Ok(bytes) => {
            let journal: Journal =
                serde_json::from_slice(&bytes).map_err(|e| MoverError::Leftover {
                    path: volume.join(JOURNAL),
                    reason: format!(
                        "unreadable restore journal ({e}); inspect {} and {} by hand",
                        volume.join(OLD).display(),
                        volume.join(STAGING).display()
                    ),
                })?;
            crate::warn(format!(
                "completing the interrupted restore of backup {} in {}",
                journal.id,
                volume.path().display()
            ));
            finish(volume, journal)?;
            Ok(true)
        }
        Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => {
            // Look before removing: a backup mounts volumes read-only, where even unlinking
            // a missing file fails with EROFS.
            if volume.exists(JOURNAL_TMP)? {
                volume.remove_file(JOURNAL_TMP)?;
            }
            if volume.exists(STAGING)? {
                crate::warn(format!(
                    "removing {} left by a restore interrupted before its swap",
                    volume.join(STAGING).display()
                ));
                volume.remove_tree(STAGING)?;
            }
            if volume.exists(OLD)? {
                return Err(MoverError::Leftover {
                    path: volume.join(OLD),
                    reason: "old contents of an interrupted restore without its journal; \
                             move them back or delete them"
                        .into(),
                });
            }
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Swaps the complete, durable staging directory of `volume` (the inode `staged`) into
/// place. Returns whether ownership of the root could be set.
pub(crate) fn swap(volume: &Dir, staged: &Inode, id: &str, root: Meta) -> Result<bool> {
    // The tenant may have swapped the staging directory for another (or a symlink) since
    // it was written: refuse before the journal commits us to it.
    volume
        .open_dir(STAGING)?
        .stat()?
        .expect_same(staged, &volume.join(STAGING))?;
    let journal = Journal {
        phase: Phase::MoveOld,
        id: id.to_owned(),
        root,
    };
    write_journal(volume, &journal)?;
    finish(volume, journal)
}

fn finish(volume: &Dir, mut journal: Journal) -> Result<bool> {
    loop {
        match journal.phase {
            Phase::MoveOld => {
                match volume.make_dir(OLD) {
                    Err(e) if e.io_kind() == Some(io::ErrorKind::AlreadyExists) => {}
                    other => other?,
                }
                let old = volume.open_dir(OLD)?;
                for name in volume.names()? {
                    if !is_reserved(&name) {
                        volume.rename(&name, &old, &name)?;
                    }
                }
                old.sync()?;
                volume.sync()?;
                journal.phase = Phase::MoveNew;
            }
            Phase::MoveNew => {
                let staging = volume.open_dir(STAGING)?;
                for name in staging.names()? {
                    staging.rename(&name, volume, &name)?;
                }
                volume.sync()?;
                journal.phase = Phase::Cleanup;
            }
            Phase::Cleanup => {
                volume.remove_tree(OLD)?;
                volume.remove_tree(STAGING)?;
                volume.remove_file(JOURNAL)?;
                volume.sync()?;
                crate::fault::step();
                // Last, because removing the journal changes the root's mtime.
                return volume.set_meta(&journal.root);
            }
        }
        write_journal(volume, &journal)?;
    }
}

fn write_journal(volume: &Dir, journal: &Journal) -> Result<()> {
    let text = serde_json::to_vec(journal).map_err(|e| MoverError::Leftover {
        path: volume.join(JOURNAL_TMP),
        reason: format!("cannot encode the journal: {e}"),
    })?;
    volume.write_file(JOURNAL_TMP, &text)?;
    volume.durable_rename(JOURNAL_TMP, volume, JOURNAL)
}
