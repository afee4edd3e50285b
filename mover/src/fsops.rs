//! Content and metadata operations on files that are already open (opening anything by
//! path is `confined`'s job): copying (holes kept) with a checksum of what was written, applying
//! metadata, and a small parallel executor.

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use chrono::{DateTime, Utc};
use rustix::fs::{Mode, SeekFrom, Timespec, Timestamps, XattrFlags};
use rustix::io::Errno;

use crate::confined::Inode;
use crate::error::{MoverError, Result, io_err};
use crate::manifest::{Meta, SourceStamp, Xattrs, from_hex, to_hex};

/// Size of each worker's scratch buffer: files are read, hashed and written in chunks of
/// this size.
pub(crate) const BUF_SIZE: usize = 1 << 20;

/// `mode`, `uid`, `gid` and `mtime` of an `lstat`/`fstat` result.
pub(crate) fn meta_of(inode: &Inode, path: &Path) -> Result<Meta> {
    Ok(Meta {
        mode: inode.mode & 0o7777,
        uid: inode.uid,
        gid: inode.gid,
        mtime: time_of(inode.mtime, inode.mtime_nsec, "modification", path)?,
    })
}

/// Inode number and ctime of an `lstat`/`fstat` result.
pub(crate) fn stamp_of(inode: &Inode, path: &Path) -> Result<SourceStamp> {
    Ok(SourceStamp {
        ino: inode.ino,
        ctime: time_of(inode.ctime, inode.ctime_nsec, "status change", path)?,
    })
}

fn time_of(secs: i64, nsec: u32, which: &str, path: &Path) -> Result<DateTime<Utc>> {
    DateTime::<Utc>::from_timestamp(secs, nsec).ok_or_else(|| MoverError::Io {
        action: "record the timestamps of",
        path: path.to_owned(),
        source: io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{which} time out of range"),
        ),
    })
}

pub(crate) fn timestamps(meta: &Meta) -> Timestamps {
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
pub(crate) fn owner(meta: &Meta) -> Option<rustix::fs::Uid> {
    (meta.uid != u32::MAX).then(|| rustix::fs::Uid::from_raw(meta.uid))
}

pub(crate) fn group(meta: &Meta) -> Option<rustix::fs::Gid> {
    (meta.gid != u32::MAX).then(|| rustix::fs::Gid::from_raw(meta.gid))
}

/// Whether a failed chown should be tolerated: we are not root (or lack CAP_CHOWN).
pub(crate) fn chown_not_permitted(e: Errno) -> bool {
    e == Errno::PERM || e == Errno::ACCESS
}

/// Applies ownership, mode and mtime to an open file or directory. Returns `false` if
/// ownership could not be set for lack of privilege (the caller decides whether to warn).
pub(crate) fn apply_meta_fd(fd: impl AsFd, meta: &Meta, path: &Path) -> Result<bool> {
    // chown first: it clears setuid/setgid bits, which the chmod then restores.
    let owned = match rustix::fs::fchown(&fd, owner(meta), group(meta)) {
        Ok(()) => true,
        Err(e) if chown_not_permitted(e) => false,
        Err(e) => return Err(io_err("set the owner of", path)(e.into())),
    };
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(meta.mode))
        .map_err(|e| io_err("set the mode of", path)(e.into()))?;
    rustix::fs::futimens(fd, &timestamps(meta))
        .map_err(|e| io_err("set the modification time of", path)(e.into()))?;
    Ok(owned)
}

/// Applies `meta` to a file this process just made with [`crate::confined::Dir::create_file`]
/// (mode `meta.mode & 0o777`), skipping the calls that would change nothing: the chown
/// when the owner is already ours, the chmod when the creation mode survived the umask
/// and there are no setuid, setgid or sticky bits. Returns what [`apply_meta_fd`] does.
pub(crate) fn apply_meta_new_file(fd: impl AsFd, meta: &Meta, path: &Path) -> Result<bool> {
    static CREATOR: OnceLock<(u32, u32, Option<u32>)> = OnceLock::new();
    let &(uid, gid, umask) = CREATOR.get_or_init(|| {
        (
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw(),
            current_umask(),
        )
    });
    let owned = if (meta.uid, meta.gid) == (uid, gid) {
        true
    } else {
        match rustix::fs::fchown(&fd, owner(meta), group(meta)) {
            Ok(()) => true,
            Err(e) if chown_not_permitted(e) => false,
            Err(e) => return Err(io_err("set the owner of", path)(e.into())),
        }
    };
    let masked = umask.is_none_or(|umask| meta.mode & 0o777 & umask != 0);
    if masked || meta.mode & 0o7000 != 0 {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(meta.mode))
            .map_err(|e| io_err("set the mode of", path)(e.into()))?;
    }
    rustix::fs::futimens(fd, &timestamps(meta))
        .map_err(|e| io_err("set the modification time of", path)(e.into()))?;
    Ok(owned)
}

/// The process's umask, read without changing it (`umask(2)` would, for every thread).
fn current_umask() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
    u32::from_str_radix(line.trim(), 8).ok()
}

/// The extended attributes of an open file or directory (POSIX ACLs among them). One
/// `flistxattr` when there are none; a filesystem without them has none.
pub(crate) fn read_xattrs(fd: impl AsFd, path: &Path) -> Result<Xattrs> {
    let failed = |e: Errno| io_err("read the extended attributes of", path)(e.into());
    let mut names = vec![0u8; 1024];
    let len = loop {
        match rustix::fs::flistxattr(&fd, &mut names[..]) {
            Ok(len) => break len,
            Err(Errno::NOTSUP) => return Ok(Xattrs::new()),
            Err(Errno::RANGE) => {
                let needed = rustix::fs::flistxattr_query(&fd).map_err(failed)?;
                names.resize(needed.max(names.len() * 2), 0);
            }
            Err(e) => return Err(failed(e)),
        }
    };
    let mut xattrs = Xattrs::new();
    for name in names[..len].split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let Ok(text) = std::str::from_utf8(name) else {
            crate::warn(format!(
                "{}: skipping an extended attribute whose name is not UTF-8",
                path.display()
            ));
            continue;
        };
        let value = loop {
            let size = match rustix::fs::fgetxattr_query(&fd, name) {
                Ok(size) => size,
                // Removed since it was listed.
                Err(Errno::NODATA) => break None,
                Err(e) => return Err(failed(e)),
            };
            let mut value = vec![0u8; size];
            match rustix::fs::fgetxattr(&fd, name, &mut value[..]) {
                Ok(len) => {
                    value.truncate(len);
                    break Some(value);
                }
                // Grew since it was measured.
                Err(Errno::RANGE) => {}
                Err(Errno::NODATA) => break None,
                Err(e) => return Err(failed(e)),
            }
        };
        if let Some(value) = value {
            xattrs.insert(text.to_owned(), to_hex(&value));
        }
    }
    Ok(xattrs)
}

/// Sets `xattrs` on an open file or directory. Returns the names this filesystem or this
/// process may not set (`security.*` without privilege, no xattr support), for one
/// warning; other failures are errors.
pub(crate) fn write_xattrs(fd: impl AsFd, xattrs: &Xattrs, path: &Path) -> Result<Vec<String>> {
    let mut refused = Vec::new();
    for (name, value) in xattrs {
        let value = from_hex(value).unwrap_or_default();
        match rustix::fs::fsetxattr(&fd, name.as_str(), &value, XattrFlags::empty()) {
            Ok(()) => {}
            Err(Errno::PERM | Errno::ACCESS | Errno::NOTSUP | Errno::INVAL) => {
                refused.push(name.clone());
            }
            Err(e) => return Err(io_err("set the extended attributes of", path)(e.into())),
        }
    }
    Ok(refused)
}

/// Result of copying one file.
pub(crate) struct Copied {
    /// The new file, still open (for metadata calls).
    pub file: File,
    /// Bytes written (the file's length, holes included).
    pub len: u64,
    /// blake3 of the bytes written.
    pub hash: blake3::Hash,
}

/// What is known of a file before it is copied.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    /// Its size when last seen.
    pub size: u64,
    /// It takes fewer blocks than its size: it has holes.
    pub holes: bool,
    /// Read only once, and likely not in the page cache (a restore's snapshot file):
    /// read with direct I/O where the filesystem allows it (see [`read_directly`]).
    pub read_once: bool,
}

/// Files at least this big are read with direct I/O when [`Layout::read_once`].
const DIRECT_MIN: u64 = 4 * BUF_SIZE as u64;

/// Alignment of direct I/O buffers and offsets (the largest usual logical block size).
const DIRECT_ALIGN: usize = 4096;

/// Asks for direct reads of `src`: the device writes straight into our buffer instead of
/// the page cache, which the read would then copy out of. That copy, like the one into
/// the new file, is a third of a big restore's time here (perf: `_copy_to_iter`), and a
/// snapshot file read once gains nothing from being cached. Refused by some
/// filesystems (tmpfs): then reads stay buffered.
fn read_directly(src: &File) -> bool {
    rustix::fs::fcntl_getfl(src)
        .and_then(|flags| rustix::fs::fcntl_setfl(src, flags | rustix::fs::OFlags::DIRECT))
        .is_ok()
}

/// A big file of a backup: the kernel copies it (`copy_file_range`, as cp does: one copy of
/// each byte instead of a read and a write through our buffer), and each chunk is hashed
/// from the new file while its pages are still cached, so the checksum is of what was
/// written. (A restore reads with direct I/O instead: see [`read_directly`]; a backup
/// must not bypass the cache the app may be using.) `None` if the filesystem refuses
/// before anything is copied: then the caller reads and writes.
fn copy_in_kernel(
    src: &File,
    dst: &File,
    hasher: &mut blake3::Hasher,
    buf: &mut [u8],
) -> io::Result<Option<u64>> {
    let mut len = 0u64;
    loop {
        let n = match rustix::fs::copy_file_range(src, None, dst, None, buf.len()) {
            Ok(0) => return Ok(Some(len)),
            Ok(n) => n,
            Err(Errno::INTR) => continue,
            Err(Errno::XDEV | Errno::INVAL | Errno::OPNOTSUPP | Errno::NOSYS) if len == 0 => {
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        dst.read_exact_at(&mut buf[..n], len)?;
        hasher.update(&buf[..n]);
        len += n as u64;
    }
}

/// Back to buffered reads, from `offset` (a direct read the device refused).
fn read_buffered(mut src: &File, offset: u64) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(src)?;
    rustix::fs::fcntl_setfl(src, flags - rustix::fs::OFlags::DIRECT)?;
    src.seek(io::SeekFrom::Start(offset))?;
    Ok(())
}

/// Copies everything readable from `src` into the new, empty file `dst` in one pass:
/// each chunk is read once, hashed and written, so the checksum is of exactly what was
/// written and nothing is read twice. A file with holes has only its data segments read
/// and written (`SEEK_DATA`/`SEEK_HOLE`) and the holes stay holes, as `cp --sparse` and
/// `rsync -S` keep them; they hash as zeros.
pub(crate) fn copy_into(
    src: &File,
    mut dst: File,
    from: &Path,
    to: &Path,
    buf: &mut Vec<u8>,
    layout: Layout,
) -> Result<Copied> {
    buf.resize(BUF_SIZE, 0);
    if layout.size > BUF_SIZE as u64 {
        // A larger readahead window, as cp asks for; only advice, so a refusal is fine.
        let _ = rustix::fs::fadvise(src, 0, None, rustix::fs::Advice::Sequential);
    }
    let holes = layout.holes;
    let mut hasher = blake3::Hasher::new();
    let len = if holes {
        copy_segments(src, &dst, &mut hasher, buf).map_err(|source| MoverError::Copy {
            action: "copy",
            from: from.to_owned(),
            to: to.to_owned(),
            source,
        })?
    } else if let Some(len) = (!layout.read_once && layout.size >= DIRECT_MIN)
        .then(|| copy_in_kernel(src, &dst, &mut hasher, buf))
        .transpose()
        .map_err(|source| MoverError::Copy {
            action: "copy",
            from: from.to_owned(),
            to: to.to_owned(),
            source,
        })?
        .flatten()
    {
        len
    } else {
        let mut direct = layout.read_once && layout.size >= DIRECT_MIN && read_directly(src);
        // Direct reads need an aligned buffer (offsets stay aligned: whole chunks).
        buf.resize(BUF_SIZE + DIRECT_ALIGN, 0);
        let start = (DIRECT_ALIGN - buf.as_ptr() as usize % DIRECT_ALIGN) % DIRECT_ALIGN;
        let chunk = &mut buf[start..start + BUF_SIZE];
        let mut len = 0u64;
        loop {
            let n = match read_full(src, chunk) {
                Err(e) if direct && e.raw_os_error() == Some(Errno::INVAL.raw_os_error()) => {
                    direct = false;
                    read_buffered(src, len).and_then(|()| read_full(src, chunk))
                }
                read => read,
            }
            .map_err(io_err("read", from))?;
            hasher.update(&chunk[..n]);
            dst.write_all(&chunk[..n]).map_err(io_err("write", to))?;
            len += n as u64;
            if n < chunk.len() {
                break len;
            }
        }
    };
    crate::fault::step();
    Ok(Copied {
        file: dst,
        len,
        hash: hasher.finalize(),
    })
}

/// The sparse copy: data segments at their offsets, then the length set (a trailing hole).
fn copy_segments(
    src: &File,
    dst: &File,
    hasher: &mut blake3::Hasher,
    buf: &mut [u8],
) -> io::Result<u64> {
    let mut offset = 0u64;
    loop {
        let data = match rustix::fs::seek(src, SeekFrom::Data(offset)) {
            Ok(data) => data,
            // No data at or after `offset`: the rest is a hole.
            Err(Errno::NXIO) => break,
            Err(e) => return Err(e.into()),
        };
        let hole = rustix::fs::seek(src, SeekFrom::Hole(data))?;
        hash_zeros(hasher, data - offset);
        offset = data;
        while offset < hole {
            let want = buf.len().min((hole - offset) as usize);
            let n = match src.read_at(&mut buf[..want], offset) {
                // Ended inside a data segment: keep what was read (never zeros in its
                // place); the caller compares the length with the file's size.
                Ok(0) => {
                    dst.set_len(offset)?;
                    return Ok(offset);
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            hasher.update(&buf[..n]);
            dst.write_all_at(&buf[..n], offset)?;
            offset += n as u64;
        }
    }
    // No data after `offset`: a trailing hole up to the current end.
    let end = rustix::fs::seek(src, SeekFrom::End(0))?.max(offset);
    hash_zeros(hasher, end - offset);
    dst.set_len(end)?;
    Ok(end)
}

/// Writes a file's contents in the order they arrive (downloaded), leaving a hole for
/// every whole block of zeros when `holes` (the file had holes when it was backed up), as
/// `cp --sparse=always` does; [`HoleWriter::finish`] sets the length, which makes a
/// trailing run of zeros a hole too.
pub(crate) struct HoleWriter<'a> {
    file: &'a File,
    holes: bool,
    at: u64,
}

/// The block a run of zeros must fill to become a hole (the usual filesystem block).
const HOLE_BLOCK: u64 = 4096;

impl<'a> HoleWriter<'a> {
    pub(crate) fn new(file: &'a File, holes: bool) -> Self {
        Self { file, holes, at: 0 }
    }

    pub(crate) fn write(&mut self, mut chunk: &[u8]) -> io::Result<()> {
        while !chunk.is_empty() {
            let to_block_end = (HOLE_BLOCK - self.at % HOLE_BLOCK) as usize;
            let take = if self.holes {
                to_block_end.min(chunk.len())
            } else {
                chunk.len()
            };
            let (piece, rest) = chunk.split_at(take);
            // A zero piece is left unwritten: it reads as zeros, and a whole block of them
            // is a hole.
            if !(self.holes && piece.iter().all(|b| *b == 0)) {
                self.file.write_all_at(piece, self.at)?;
            }
            self.at += piece.len() as u64;
            chunk = rest;
        }
        Ok(())
    }

    pub(crate) fn finish(self) -> io::Result<()> {
        self.file.set_len(self.at)
    }
}

fn hash_zeros(hasher: &mut blake3::Hasher, mut len: u64) {
    static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
    while len > 0 {
        let n = len.min(ZEROS.len() as u64) as usize;
        hasher.update(&ZEROS[..n]);
        len -= n as u64;
    }
}

/// Reads until `buf` is full or EOF; returns the number of bytes read.
fn read_full(mut src: &File, buf: &mut [u8]) -> io::Result<usize> {
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
    par_map_on((cores * 2).clamp(2, 16), items, f)
}

/// [`par_map`] on `threads` threads at most.
pub(crate) fn par_map_on<T, R, F>(threads: usize, items: &[T], f: F) -> Result<Vec<R>>
where
    T: Sync,
    R: Send,
    F: Fn(&T, &mut Vec<u8>) -> Result<R> + Sync,
{
    let workers = threads.max(1).min(items.len().max(1));
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
