//! Filesystem building blocks shared by backup, restore and verify: copying with a
//! checksum of what was written, applying metadata, durable renames, a small parallel
//! executor and tree removal.

use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use chrono::{DateTime, Utc};
use rustix::fs::{AtFlags, CWD, Mode, OFlags, Timespec, Timestamps};
use rustix::io::Errno;

use crate::error::{MoverError, Result, io_err};
use crate::manifest::Meta;

/// Size of each worker's scratch buffer. Files that fit are copied with one read and one
/// write and hashed from memory; larger ones go through `copy_file_range`.
pub(crate) const BUF_SIZE: usize = 1 << 20;

/// `mode`, `uid`, `gid` and `mtime` of an `lstat`/`fstat` result.
pub(crate) fn meta_of(md: &Metadata, path: &Path) -> Result<Meta> {
    let mtime =
        DateTime::<Utc>::from_timestamp(md.mtime(), md.mtime_nsec() as u32).ok_or_else(|| {
            MoverError::Io {
                action: "record the modification time of",
                path: path.to_owned(),
                source: io::Error::new(io::ErrorKind::InvalidData, "mtime out of range"),
            }
        })?;
    Ok(Meta {
        mode: md.mode() & 0o7777,
        uid: md.uid(),
        gid: md.gid(),
        mtime,
    })
}

fn timestamps(meta: &Meta) -> Timestamps {
    let mtime = Timespec {
        tv_sec: meta.mtime.timestamp(),
        tv_nsec: meta.mtime.timestamp_subsec_nanos().into(),
    };
    Timestamps {
        // atime is not recorded; setting it to the mtime keeps copies reproducible.
        last_access: mtime,
        last_modification: mtime,
    }
}

// u32::MAX is chown's "leave unchanged"; never pass it as an id.
fn owner(meta: &Meta) -> Option<rustix::fs::Uid> {
    (meta.uid != u32::MAX).then(|| rustix::fs::Uid::from_raw(meta.uid))
}

fn group(meta: &Meta) -> Option<rustix::fs::Gid> {
    (meta.gid != u32::MAX).then(|| rustix::fs::Gid::from_raw(meta.gid))
}

/// Whether a failed chown should be tolerated: we are not root (or lack CAP_CHOWN).
fn chown_not_permitted(e: Errno) -> bool {
    e == Errno::PERM || e == Errno::ACCESS
}

/// Applies ownership, mode and mtime to an open file or directory. Returns `false` if
/// ownership could not be set for lack of privilege (the caller decides whether to warn).
pub(crate) fn apply_meta_fd(fd: &File, meta: &Meta, path: &Path) -> Result<bool> {
    // chown first: it clears setuid/setgid bits, which the chmod then restores.
    let owned = match rustix::fs::fchown(fd, owner(meta), group(meta)) {
        Ok(()) => true,
        Err(e) if chown_not_permitted(e) => false,
        Err(e) => return Err(io_err("set the owner of", path)(e.into())),
    };
    rustix::fs::fchmod(fd, Mode::from_raw_mode(meta.mode))
        .map_err(|e| io_err("set the mode of", path)(e.into()))?;
    rustix::fs::futimens(fd, &timestamps(meta))
        .map_err(|e| io_err("set the modification time of", path)(e.into()))?;
    Ok(owned)
}

/// Applies ownership, mode and mtime to a directory by path (after its contents are done).
pub(crate) fn apply_meta_dir(path: &Path, meta: &Meta) -> Result<bool> {
    let dir = open_dir(path)?;
    apply_meta_fd(&dir, meta, path)
}

/// Applies ownership and mtime to a symlink itself (its mode is meaningless on Linux).
pub(crate) fn apply_meta_symlink(path: &Path, meta: &Meta) -> Result<bool> {
    let owned = match rustix::fs::chownat(
        CWD,
        path,
        owner(meta),
        group(meta),
        AtFlags::SYMLINK_NOFOLLOW,
    ) {
        Ok(()) => true,
        Err(e) if chown_not_permitted(e) => false,
        Err(e) => return Err(io_err("set the owner of", path)(e.into())),
    };
    rustix::fs::utimensat(CWD, path, &timestamps(meta), AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| io_err("set the modification time of", path)(e.into()))?;
    Ok(owned)
}

/// Opens a directory (never following a symlink) for fsync or metadata calls.
pub(crate) fn open_dir(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags((OFlags::DIRECTORY | OFlags::NOFOLLOW).bits() as i32)
        .open(path)
        .map_err(io_err("open directory", path))
}

/// fsyncs a directory, making renames and creations in it durable.
pub(crate) fn sync_dir(path: &Path) -> Result<()> {
    open_dir(path)?
        .sync_all()
        .map_err(io_err("fsync directory", path))
}

/// Flushes the whole filesystem holding `path`: one `syncfs` instead of an fsync per
/// copied file, which is what makes many small files fast.
pub(crate) fn sync_filesystem(path: &Path) -> Result<()> {
    let dir = open_dir(path)?;
    rustix::fs::syncfs(&dir).map_err(|e| io_err("sync the filesystem of", path)(e.into()))
}

/// Renames `from` to `to` and makes it durable by fsyncing the parent(s).
pub(crate) fn durable_rename(from: &Path, to: &Path) -> Result<()> {
    fs::rename(from, to).map_err(|source| MoverError::Copy {
        from: from.to_owned(),
        to: to.to_owned(),
        source,
    })?;
    crate::fault::step();
    for parent in [from.parent(), to.parent()].into_iter().flatten() {
        sync_dir(parent)?;
    }
    Ok(())
}

/// Makes a directory (mode 0700 until its real metadata is applied after its contents).
pub(crate) fn make_dir(path: &Path) -> Result<()> {
    fs::DirBuilder::new()
        .mode(0o700)
        .create(path)
        .map_err(io_err("create directory", path))?;
    crate::fault::step();
    Ok(())
}

/// Result of copying one file.
pub(crate) struct Copied {
    /// The new file, still open (for metadata calls).
    pub file: File,
    /// Bytes written.
    pub len: u64,
    /// blake3 of the bytes written.
    pub hash: blake3::Hash,
}

/// Copies everything readable from `src` (from its current offset to EOF) into a new file
/// `to`, returning the checksum of what was actually written. Small files are hashed from
/// the buffer; large ones are copied in the kernel (`copy_file_range`, which reflinks on
/// filesystems that can) and hashed by reading the new file back.
pub(crate) fn copy_new(
    src: &mut File,
    from: &Path,
    to: &Path,
    buf: &mut Vec<u8>,
) -> Result<Copied> {
    let copy_err = |source| MoverError::Copy {
        from: from.to_owned(),
        to: to.to_owned(),
        source,
    };
    let mut dst = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .map_err(io_err("create", to))?;
    buf.resize(BUF_SIZE, 0);
    let head = read_full(src, buf).map_err(io_err("read", from))?;
    dst.write_all(&buf[..head]).map_err(io_err("write", to))?;
    let (len, hash) = if head < buf.len() {
        (head as u64, blake3::hash(&buf[..head]))
    } else {
        let rest = copy_rest(src, &mut dst, buf).map_err(copy_err)?;
        let len = head as u64 + rest;
        (len, hash_file(&dst, buf).map_err(io_err("read back", to))?)
    };
    crate::fault::step();
    Ok(Copied {
        file: dst,
        len,
        hash,
    })
}

/// Reads until `buf` is full or EOF; returns the number of bytes read.
fn read_full(src: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match src.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

fn copy_rest(src: &mut File, dst: &mut File, buf: &mut [u8]) -> io::Result<u64> {
    let mut total = 0u64;
    loop {
        match rustix::fs::copy_file_range(&*src, None, &*dst, None, 1 << 30) {
            Ok(0) => return Ok(total),
            Ok(n) => total += n as u64,
            Err(Errno::INTR) => {}
            // Not supported between these files (other filesystem on old kernels,
            // special filesystems): fall back to read/write from the current offsets.
            Err(Errno::XDEV | Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => break,
            Err(e) => return Err(e.into()),
        }
    }
    loop {
        let n = read_full(src, buf)?;
        if n == 0 {
            return Ok(total);
        }
        dst.write_all(&buf[..n])?;
        total += n as u64;
    }
}

/// blake3 of a whole file, read with positional reads (the offset of `file` is untouched).
pub(crate) fn hash_file(file: &File, buf: &mut Vec<u8>) -> io::Result<blake3::Hash> {
    buf.resize(BUF_SIZE, 0);
    let mut hasher = blake3::Hasher::new();
    let mut offset = 0u64;
    loop {
        match file.read_at(buf, offset) {
            Ok(0) => return Ok(hasher.finalize()),
            Ok(n) => {
                hasher.update(&buf[..n]);
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Opens a file for reading without following a symlink at its last component.
pub(crate) fn open_nofollow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(OFlags::NOFOLLOW.bits() as i32)
        .open(path)
}

/// Runs `f` over `items` on a few threads, each with its own scratch buffer, and returns
/// the results in item order. Stops handing out work after the first error, which it
/// returns. Copying is I/O-bound, so we use more threads than cores.
pub(crate) fn par_map<T, R, F>(items: &[T], f: F) -> Result<Vec<R>>
where
    T: Sync,
    R: Send,
    F: Fn(&T, &mut Vec<u8>) -> Result<R> + Sync,
{
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = (cores * 2).clamp(2, 16).min(items.len().max(1));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let run = || -> Result<Vec<(usize, R)>> {
        let mut buf = Vec::new();
        let mut done = Vec::new();
        while !failed.load(Ordering::Relaxed) {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else { break };
            match f(item, &mut buf) {
                Ok(r) => done.push((i, r)),
                Err(e) => {
                    failed.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(done)
    };
    let outcomes: Vec<Result<Vec<(usize, R)>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers).map(|_| s.spawn(run)).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let mut all = Vec::with_capacity(items.len());
    for outcome in outcomes {
        all.extend(outcome?);
    }
    all.sort_unstable_by_key(|(i, _)| *i);
    Ok(all.into_iter().map(|(_, r)| r).collect())
}

/// Removes a directory tree. Snapshot directories keep their source's modes, which may
/// lack write permission; when not running as root that blocks removal, so on failure we
/// make every directory writable and try again.
pub(crate) fn remove_tree(path: &Path) -> Result<()> {
    match fs::remove_dir_all(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(_) => {
            for entry in walkdir::WalkDir::new(path).into_iter().flatten() {
                if entry.file_type().is_dir() {
                    // Best effort: the retry below reports what still fails.
                    let _ = rustix::fs::chmod(entry.path(), Mode::from_raw_mode(0o700));
                }
            }
            fs::remove_dir_all(path).map_err(io_err("remove", path))?;
        }
    }
    crate::fault::step();
    Ok(())
}

/// The names directly inside `dir`, sorted, as full paths.
pub(crate) fn list_dir(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err("list", dir))? {
        names.push(entry.map_err(io_err("list", dir))?.path());
    }
    names.sort();
    Ok(names)
}
