//! One backup at a time per app: `flock(2)` on `<target>/<ns>/<name>/.lock`.
//!
//! flock rather than a pid file because the kernel drops the lock when the holder dies,
//! however it dies (OOM kill, SIGKILL, node reboot), so a crashed backup can never wedge
//! later ones. Backups and prunes take it exclusively; restores and verifies take it
//! shared, so that a prune cannot delete the snapshot they are reading.

use std::fs::File;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::fs::{FlockOperation, flock};

use crate::confined::Dir;
use crate::error::{MoverError, Result, io_err};

/// The lock file's name in an app directory; never deleted, even by a purge.
pub(crate) const LOCK_FILE: &str = ".lock";

/// How often a waiting process retries the lock.
const POLL: Duration = Duration::from_millis(50);

/// A held lock; released when dropped (or when the process dies).
#[derive(Debug)]
pub(crate) struct AppLock {
    _file: File,
}

/// Takes the exclusive lock, waiting up to `wait` for a current holder to finish.
pub(crate) fn exclusive(app_dir: &Dir, wait: Duration) -> Result<AppLock> {
    exclusive_on(app_dir, LOCK_FILE, wait)
}

/// Takes an exclusive lock on the file `name` in `dir` (created if missing), waiting up to
/// `wait`: the app's lock, or a volume's (one restore at a time on a volume).
pub(crate) fn exclusive_on(dir: &Dir, name: &str, wait: Duration) -> Result<AppLock> {
    let file = dir.open_or_create(name)?;
    acquire(
        file,
        &dir.join(name),
        FlockOperation::NonBlockingLockExclusive,
        wait,
    )
}

/// Takes the exclusive lock only if it is free right now.
pub(crate) fn try_exclusive(app_dir: &Dir) -> Result<Option<AppLock>> {
    match exclusive(app_dir, Duration::ZERO) {
        Ok(lock) => Ok(Some(lock)),
        Err(MoverError::Locked { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Takes the shared lock, waiting up to `wait`. A target we cannot write to (a read-only
/// mount for a restore) cannot have a lock file created in it, but then nobody can
/// prune it either: we warn and go on without the lock.
pub(crate) fn shared(app_dir: &Dir, wait: Duration) -> Result<Option<AppLock>> {
    let path = app_dir.join(LOCK_FILE);
    let file = match app_dir.open_file(LOCK_FILE) {
        Ok(file) => file,
        Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => {
            match app_dir.open_or_create(LOCK_FILE) {
                Ok(file) => file,
                Err(MoverError::Io { source, .. }) if is_read_only(&source) => {
                    crate::warn(format!(
                        "cannot create lock file {} ({source}); continuing without the lock",
                        path.display()
                    ));
                    return Ok(None);
                }
                Err(e) => return Err(e),
            }
        }
        Err(e) => return Err(e),
    };
    acquire(file, &path, FlockOperation::NonBlockingLockShared, wait).map(Some)
}

fn is_read_only(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::ROFS.raw_os_error())
        || e.kind() == io::ErrorKind::PermissionDenied
}

fn acquire(file: File, path: &Path, op: FlockOperation, wait: Duration) -> Result<AppLock> {
    let start = Instant::now();
    let mut told = false;
    loop {
        match flock(&file, op) {
            Ok(()) => return Ok(AppLock { _file: file }),
            Err(rustix::io::Errno::WOULDBLOCK) => {
                if start.elapsed() >= wait {
                    return Err(MoverError::Locked {
                        path: path.to_owned(),
                        waited: start.elapsed(),
                    });
                }
                if !told {
                    crate::warn(format!(
                        "{} is locked by another backup, restore or prune; waiting up to {}s",
                        path.display(),
                        wait.as_secs()
                    ));
                    told = true;
                }
                std::thread::sleep(POLL);
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(io_err("lock", path)(e.into())),
        }
    }
}
