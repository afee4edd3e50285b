//! Swapping restored contents into the live volumes, crash-safely and all or nothing.
//!
//! A volume is a mount point: we cannot rename the directory itself, only its entries.
//! Every volume of a restore holds a fsynced journal naming the backup, the ordinals the
//! restore swaps, and the volume's phase. Each phase can be re-run from its start (each
//! step is a rename of one entry, which either happened or did not):
//!
//! 1. `Prepared`: the staging directory is complete and durable. Written to every volume
//!    before any live entry moves. While every journal says `Prepared`, nothing is
//!    committed: recovery rolls back (deletes staging and journals) and the live data is
//!    untouched.
//! 2. `MoveOld`: every current top-level entry is renamed into `.hellostateful-old/`.
//!    The first journal to say so commits the whole set: from then on recovery rolls
//!    *every* journaled volume forward, so the set never ends part old, part new.
//! 3. `MoveNew`: every staged entry is renamed to the root.
//! 4. `Swapped`: old contents and staging are deleted; then the volume root's owner, mode
//!    and extended attributes are set, a restore made in parts marks the volume swapped in
//!    (`.hellostateful-swapped`, naming its set), and only then is the journal, which all
//!    of this is redone from, removed.
//!
//! Journals are deleted only once every volume is `Swapped`, so a volume without a
//! journal beside one with a journal past `Prepared` is a finished one. A volume of a
//! restore made in parts holds, from its staging on, the journal or the mark of its set:
//! a swap that finds neither has nothing to swap in, and must say so.
//!
//! Recovery runs only in a restore, under every volume's lock ([`lock_volumes`]); a
//! backup reads volumes mounted read-only and only checks ([`check_settled`]).

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::confined::{Dir, Inode};
use crate::error::{MoverError, Result};
use crate::fsops;
use crate::lock::{self, AppLock};
use crate::manifest::{Meta, Xattrs};

/// The staging directory a restore writes into.
pub(crate) const STAGING: &str = ".hellostateful-staging";
/// Where the old contents go during a swap.
const OLD: &str = ".hellostateful-old";
/// The swap journal.
const JOURNAL: &str = ".hellostateful-journal";
/// The journal being rewritten (renamed over `JOURNAL`).
const JOURNAL_TMP: &str = ".hellostateful-journal.tmp";
/// The volume's lock: one restore at a time.
const LOCK: &str = ".hellostateful-lock";
/// The mark of the last restore made in parts swapped in here, kept once its journal is
/// gone: a swap run again after it finished tells by it that nothing is left to do.
const SWAPPED: &str = ".hellostateful-swapped";
/// The mark being written (renamed over `SWAPPED`).
const SWAPPED_TMP: &str = ".hellostateful-swapped.tmp";

/// Whether a top-level volume entry is one of the mover's own (backups skip exactly these;
/// any other name, `.hellostateful-notes` too, is the app's and is backed up).
pub(crate) fn is_reserved(name: &OsStr) -> bool {
    [
        STAGING,
        OLD,
        JOURNAL,
        JOURNAL_TMP,
        LOCK,
        SWAPPED,
        SWAPPED_TMP,
    ]
    .iter()
    .any(|reserved| name == OsStr::new(reserved))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Phase {
    Prepared,
    MoveOld,
    MoveNew,
    Swapped,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Journal {
    phase: Phase,
    /// The backup being restored, for messages.
    id: String,
    /// Every ordinal this restore swaps.
    ordinals: Vec<u32>,
    /// The set of a restore made in parts, one pod per volume: whether it was committed
    /// is then recorded by the set's coordinator, not told by the other volumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    set: Option<String>,
    /// Metadata for the volume root, applied last.
    root: Meta,
    /// Extended attributes for the volume root, applied with its metadata.
    #[serde(default, skip_serializing_if = "Xattrs::is_empty")]
    root_xattrs: Xattrs,
}

/// What [`SWAPPED`] holds.
#[derive(Debug, Serialize, Deserialize)]
struct Swapped {
    set: String,
    /// The backup swapped in.
    id: String,
}

/// Where the swap of a restore made in parts stands on one volume.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PartState {
    /// Its journal is there: staged, perhaps partly swapped in ([`recover_parts`] ends it).
    Journaled,
    /// Swapped in, or there was nothing to swap in: marked so, with the backup's id.
    Swapped(String),
    /// Neither: nothing of it is on this volume.
    Absent,
}

/// Where the swap of restore set `set` stands on `volume`.
pub(crate) fn part_state(volume: &Dir, set: &str) -> Result<PartState> {
    if read_journal(volume)?.is_some_and(|j| j.set.as_deref() == Some(set)) {
        return Ok(PartState::Journaled);
    }
    let mark = match volume.read_file(SWAPPED) {
        Ok(bytes) => {
            serde_json::from_slice::<Swapped>(&bytes).map_err(|e| MoverError::Leftover {
                path: volume.join(SWAPPED),
                reason: format!(
                    "unreadable mark of a finished restore ({e}); remove it, then swap again"
                ),
            })?
        }
        Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => return Ok(PartState::Absent),
        Err(e) => return Err(e),
    };
    Ok(if mark.set == set {
        PartState::Swapped(mark.id)
    } else {
        PartState::Absent
    })
}

/// Marks `volume` as swapped in by restore set `set` of backup `id`, durably.
pub(crate) fn mark_swapped(volume: &Dir, set: &str, id: &str) -> Result<()> {
    let mark = Swapped {
        set: set.to_owned(),
        id: id.to_owned(),
    };
    let text = serde_json::to_vec(&mark).map_err(|e| MoverError::Leftover {
        path: volume.join(SWAPPED_TMP),
        reason: format!("cannot encode the mark of a finished restore: {e}"),
    })?;
    replace(volume, SWAPPED_TMP, SWAPPED, &text)
}

/// Exclusive locks on every volume, taken in ordinal order (so two restores cannot
/// deadlock), waiting up to `wait` for a running restore.
pub(crate) fn lock_volumes(volumes: &[(u32, Dir)], wait: Duration) -> Result<Vec<AppLock>> {
    volumes
        .iter()
        .map(|(_, volume)| lock::exclusive_on(volume, LOCK, wait))
        .collect()
}

fn read_journal(volume: &Dir) -> Result<Option<Journal>> {
    match volume.read_file(JOURNAL) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| MoverError::Leftover {
                path: volume.join(JOURNAL),
                reason: format!(
                    "unreadable restore journal ({e}); inspect {} and {} by hand",
                    volume.join(OLD).display(),
                    volume.join(STAGING).display()
                ),
            }),
        Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The journals found in `volumes`, all of one restore.
fn journals(volumes: &[(u32, Dir)]) -> Result<Vec<(&Dir, Journal)>> {
    let mut found: Vec<(&Dir, Journal)> = Vec::new();
    for (_, volume) in volumes {
        if let Some(journal) = read_journal(volume)? {
            if let Some((other, first)) = found.first()
                && first.id != journal.id
            {
                return Err(MoverError::Leftover {
                    path: volume.join(JOURNAL),
                    reason: format!(
                        "journal of a restore of backup {}, but {} holds one of backup {}; \
                         inspect the volumes by hand",
                        journal.id,
                        other.path().display(),
                        first.id
                    ),
                });
            }
            found.push((volume, journal));
        }
    }
    Ok(found)
}

fn committed(journals: &[(&Dir, Journal)]) -> bool {
    journals.iter().any(|(_, j)| j.phase != Phase::Prepared)
}

/// Before a backup reads `volumes` (mounted read-only: nothing is written here). Fails on
/// a restore that was committed but not finished: some volumes may hold the new data and
/// others the old, and backing that up would keep the mix. A restore that never got past
/// staging left the live data untouched; its leftovers are skipped like every reserved
/// name.
pub(crate) fn check_settled(volumes: &[(u32, Dir)]) -> Result<()> {
    let journals = journals(volumes)?;
    if let Some((volume, journal)) = journals.first()
        && committed(&journals)
    {
        return Err(MoverError::Leftover {
            path: volume.join(JOURNAL),
            reason: format!(
                "the restore of backup {} into ordinals {:?} was interrupted while it \
                 replaced the live data; not backing up a half-restored app (the next \
                 restore finishes it)",
                journal.id, journal.ordinals
            ),
        });
    }
    for (_, volume) in volumes {
        if volume.exists(OLD)? && read_journal(volume)?.is_none() {
            return Err(old_without_journal(volume));
        }
    }
    Ok(())
}

fn old_without_journal(volume: &Dir) -> MoverError {
    MoverError::Leftover {
        path: volume.join(OLD),
        reason: "old contents of an interrupted restore without its journal; move them back \
                 or delete them"
            .into(),
    }
}

/// Finishes or undoes an interrupted restore in `volumes`, under their locks, before a
/// restore writes anything. Rolls a committed one forward in every journaled volume;
/// rolls back one that was not committed, provided every volume it named is here (one we
/// cannot see might be further along).
pub(crate) fn recover(volumes: &[(u32, Dir)]) -> Result<()> {
    for (_, volume) in volumes {
        for tmp in [JOURNAL_TMP, SWAPPED_TMP] {
            if volume.exists(tmp)? {
                volume.remove_file(tmp)?;
            }
        }
    }
    let journals = journals(volumes)?;
    if let Some((_, first)) = journals.first() {
        if committed(&journals) {
            crate::warn(format!(
                "completing the interrupted restore of backup {} into ordinals {:?}",
                first.id, first.ordinals
            ));
            let id = first.id.clone();
            let mut swapped = Vec::new();
            for (volume, journal) in journals {
                swapped.push((volume, advance(volume, journal)?));
            }
            for (volume, journal) in swapped {
                finish(volume, &journal)?;
            }
            crate::warn(format!("the restore of backup {id} is now complete"));
            return Ok(());
        }
        let present: BTreeSet<u32> = volumes.iter().map(|(o, _)| *o).collect();
        if let Some(missing) = first.ordinals.iter().find(|o| !present.contains(o)) {
            return Err(MoverError::Leftover {
                path: journals[0].0.join(JOURNAL),
                reason: format!(
                    "an interrupted restore of backup {} also swaps ordinal {missing}, which \
                     is not mounted here: cannot tell whether it was committed; restore with \
                     every ordinal mounted",
                    first.id
                ),
            });
        }
        crate::warn(format!(
            "undoing the restore of backup {} interrupted before it replaced anything",
            first.id
        ));
    }
    for (_, volume) in volumes {
        if volume.exists(STAGING)? {
            volume.remove_tree(STAGING)?;
        }
        if volume.exists(JOURNAL)? {
            volume.remove_file(JOURNAL)?;
            volume.sync()?;
        }
        if volume.exists(OLD)? {
            return Err(old_without_journal(volume));
        }
    }
    Ok(())
}

/// One volume of a restore whose staging directory is complete and durable.
pub(crate) struct Staged<'a> {
    pub volume: &'a Dir,
    /// The staging directory as it was written (the tenant may swap it meanwhile).
    pub staging: Inode,
    /// Metadata for the volume root.
    pub root: Meta,
    /// Extended attributes for the volume root.
    pub root_xattrs: Xattrs,
}

/// Marks every volume `Prepared`: nothing live has moved yet. `set` names a restore made
/// in parts (see [`recover_parts`]).
pub(crate) fn prepare(
    staged: &[Staged<'_>],
    id: &str,
    ordinals: &[u32],
    set: Option<&str>,
) -> Result<()> {
    for s in staged {
        // Refuse a swapped staging directory before the journal commits us to it.
        s.volume
            .open_dir(STAGING)?
            .stat()?
            .expect_same(&s.staging, &s.volume.join(STAGING))?;
        let mut journal = s.journal(id, ordinals);
        journal.set = set.map(str::to_owned);
        write_journal(s.volume, &journal)?;
    }
    Ok(())
}

/// Finishes or undoes, in each of `volumes` on its own, the swap of a restore made in
/// parts, then recovers as [`recover`] does. A pod sees only its own volume, so whether
/// such a restore was committed is asked of `committed(set)` (its coordinator's record):
/// committed, or already past `Prepared` here, it is rolled forward; else rolled back,
/// which leaves this volume's live data as it was, once `unrecord(set, ordinal)` removed
/// the coordinator's record of this staging. Returns the sets rolled forward.
pub(crate) fn recover_parts(
    volumes: &[(u32, Dir)],
    committed: impl Fn(&str) -> Result<bool>,
    unrecord: impl Fn(&str, u32) -> Result<()>,
) -> Result<Vec<String>> {
    let mut finished = Vec::new();
    for (ordinal, volume) in volumes {
        if volume.exists(JOURNAL_TMP)? {
            volume.remove_file(JOURNAL_TMP)?;
        }
        let Some(journal) = read_journal(volume)? else {
            continue;
        };
        let Some(set) = journal.set.clone() else {
            continue; // a one-pod restore's: `recover` below
        };
        if journal.phase != Phase::Prepared || committed(&set)? {
            crate::warn(format!(
                "completing the swap of restore {set} (backup {}) in {}",
                journal.id,
                volume.path().display()
            ));
            let journal = advance(volume, journal)?;
            finish(volume, &journal)?;
            finished.push(set);
        } else {
            crate::warn(format!(
                "undoing restore {set} (backup {}) in {}: it was never committed",
                journal.id,
                volume.path().display()
            ));
            // The record before the staging: a crash in between leaves a staging no record
            // names (no commit takes it, the next restore drops it), never a record of a
            // staging gone, which a commit would take for staged.
            unrecord(&set, *ordinal)?;
            if volume.exists(STAGING)? {
                volume.remove_tree(STAGING)?;
            }
            volume.remove_file(JOURNAL)?;
            volume.sync()?;
        }
    }
    recover(volumes)?;
    Ok(finished)
}

/// Swaps every prepared volume in: the first journal moved past `Prepared` commits the
/// set. Returns whether ownership of every root could be set.
pub(crate) fn commit(staged: &[Staged<'_>], id: &str, ordinals: &[u32]) -> Result<bool> {
    let mut swapped = Vec::new();
    for s in staged {
        swapped.push((s.volume, advance(s.volume, s.journal(id, ordinals))?));
    }
    let mut owned = true;
    for (volume, journal) in swapped {
        owned &= finish(volume, &journal)?;
    }
    Ok(owned)
}

impl Staged<'_> {
    /// The journal of this volume's swap, `Prepared`.
    fn journal(&self, id: &str, ordinals: &[u32]) -> Journal {
        Journal {
            phase: Phase::Prepared,
            id: id.to_owned(),
            ordinals: ordinals.to_vec(),
            set: None,
            root: self.root,
            root_xattrs: self.root_xattrs.clone(),
        }
    }
}

/// Runs a volume's swap from the journal's phase to `Swapped`; returns the journal.
fn advance(volume: &Dir, mut journal: Journal) -> Result<Journal> {
    loop {
        match journal.phase {
            Phase::Prepared => journal.phase = Phase::MoveOld,
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
                journal.phase = Phase::Swapped;
            }
            Phase::Swapped => {
                volume.remove_tree(OLD)?;
                volume.remove_tree(STAGING)?;
                volume.sync()?;
                return Ok(journal);
            }
        }
        write_journal(volume, &journal)?;
    }
}

/// Ends a swapped volume's swap: sets its root's metadata and extended attributes, marks
/// it swapped in when the restore was made in parts, and only then removes the journal,
/// which is what recovery redoes all this from (removed first, a crash would leave the
/// root with its old owner and mode, and nothing to tell). Each step may run again.
/// Removing the journal changes the root's mtime: that is set once more after it (a crash
/// in between loses only the mtime). Returns whether ownership was set.
fn finish(volume: &Dir, journal: &Journal) -> Result<bool> {
    let owned = volume.set_meta(&journal.root)?;
    let refused = fsops::write_xattrs(volume, &journal.root_xattrs, volume.path())?;
    if !refused.is_empty() {
        crate::warn(format!(
            "extended attributes of {} not restored (not supported by this filesystem or not \
             permitted): {}",
            volume.path().display(),
            refused.join(", ")
        ));
    }
    // The metadata durable (an fsync of the root) and a restore made in parts marked
    // swapped in before the journal goes: a swap of its set run again finds one or the other.
    match &journal.set {
        Some(set) => mark_swapped(volume, set, &journal.id)?, // fsyncs the root too
        None => volume.sync()?,
    }
    match volume.remove_file(JOURNAL) {
        Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => {} // a finish run again
        other => other?,
    }
    volume.sync()?;
    crate::fault::step();
    volume.set_meta(&journal.root)?;
    Ok(owned)
}

fn write_journal(volume: &Dir, journal: &Journal) -> Result<()> {
    let text = serde_json::to_vec(journal).map_err(|e| MoverError::Leftover {
        path: volume.join(JOURNAL_TMP),
        reason: format!("cannot encode the journal: {e}"),
    })?;
    replace(volume, JOURNAL_TMP, JOURNAL, &text)
}

/// Writes `name` in `volume` whole or not at all: `bytes` to `tmp`, fsynced, renamed over
/// `name`, the rename made durable.
fn replace(volume: &Dir, tmp: &str, name: &str, bytes: &[u8]) -> Result<()> {
    volume.write_file(tmp, bytes)?;
    volume.durable_rename(tmp, volume, name)
}
