//! Path safety: every filesystem call the mover makes on a path goes through [`Dir`].
//!
//! Volumes and backup directories are written by the tenant, who may race the mover by
//! swapping directories for symlinks. So only the roots named on the command line (the
//! admin's `--source`, `--dest`, `--target`) are opened by path; everything below them is
//! reached from a directory fd with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, and
//! the last component is handled by an `*at` call that does not follow it
//! (`AT_SYMLINK_NOFOLLOW`, or calls that never follow: mkdirat, unlinkat, renameat,
//! linkat without `AT_SYMLINK_FOLLOW`, symlinkat, readlinkat). A symlink anywhere on the
//! way is an error, never followed; a symlink *entry* is read and recreated as a symlink.
//! What a walk found is reopened and compared by (st_dev, st_ino) with its lstat, so a
//! swap between the two is caught. Nothing here needs CAP_DAC_READ_SEARCH (no
//! `AT_EMPTY_PATH` links, no handles).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

use crate::error::{MoverError, Result, io_err};
use crate::fsops;
use crate::manifest::Meta;

/// How every path below a root is resolved.
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_SYMLINKS);

/// How often an operation that a concurrent writer keeps undoing (a removal racing a
/// tenant that refills a directory, an `openat2` that reports a rename race) is retried.
const RACE_RETRIES: u32 = 64;

/// What an `lstat`/`fstat` found, for deciding what to do and for the swap check.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Inode {
    pub dev: u64,
    pub ino: u64,
    pub kind: FileType,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// 512-byte blocks allocated: fewer than the size takes means holes.
    pub blocks: u64,
    /// Hard links to the inode.
    pub nlink: u64,
    pub mtime: i64,
    pub mtime_nsec: u32,
    /// Status change time: moves on every write, chmod, chown, rename and `utimens`, and
    /// cannot be set back, so a file replaced with its old size and mtime still shows.
    pub ctime: i64,
    pub ctime_nsec: u32,
}

impl Inode {
    // The casts only widen: field types differ between architectures.
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    fn from_stat(st: &Stat) -> Self {
        Self {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            kind: FileType::from_raw_mode(st.st_mode as _),
            mode: st.st_mode as u32,
            uid: st.st_uid,
            gid: st.st_gid,
            size: st.st_size as u64,
            blocks: st.st_blocks as u64,
            nlink: st.st_nlink as u64,
            mtime: st.st_mtime as i64,
            mtime_nsec: st.st_mtime_nsec as u32,
            ctime: st.st_ctime as i64,
            ctime_nsec: st.st_ctime_nsec as u32,
        }
    }

    /// `fstat` of an open file.
    pub(crate) fn of(fd: impl AsFd, path: &Path) -> Result<Self> {
        rustix::fs::fstat(fd)
            .map(|st| Self::from_stat(&st))
            .map_err(|e| fail("stat", path)(e.into()))
    }

    /// Fails unless `self` (what was opened) is the inode the walk recorded.
    pub(crate) fn expect_same(&self, recorded: &Inode, path: &Path) -> Result<()> {
        if (self.dev, self.ino) == (recorded.dev, recorded.ino) {
            return Ok(());
        }
        Err(MoverError::Unsafe {
            path: path.to_owned(),
            reason: "it was replaced while being read (another process swapped it); \
                     nothing was followed"
                .into(),
        })
    }
}

/// What `statvfs` says is left on a filesystem.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FreeSpace {
    pub bytes: u64,
    /// `None` where the filesystem has no inode limit.
    pub inodes: Option<u64>,
    /// Allocation unit: every file takes a whole number of these.
    pub block: u64,
}

/// Wraps an OS error about `path`; a symlink or an escape on the way is reported as such.
fn fail(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> MoverError {
    let path = path.into();
    move |source| {
        let reason = match Errno::from_io_error(&source) {
            Some(Errno::LOOP) => {
                "a symlink is in the way (symlinks inside volumes and backups \
                                  are never followed)"
            }
            Some(Errno::XDEV) => "it leads outside its directory",
            _ => return io_err(action, path)(source),
        };
        MoverError::Unsafe {
            path,
            reason: format!("{reason}; not going to {action} it"),
        }
    }
}

/// Wraps an OS error of a call on two paths (rename, link); a symlink on the way of
/// either is reported as such.
fn two_paths(
    action: &'static str,
    from: PathBuf,
    to: PathBuf,
) -> impl FnOnce(io::Error) -> MoverError {
    move |source| match Errno::from_io_error(&source) {
        Some(Errno::LOOP) => MoverError::Unsafe {
            path: from,
            reason: format!(
                "a symlink is in the way (symlinks inside volumes and backups are never \
                 followed); not going to {action} it to {}",
                to.display()
            ),
        },
        _ => MoverError::Copy {
            action,
            from,
            to,
            source,
        },
    }
}

/// The longest relative path resolved by one `openat2` (PATH_MAX is 4096 bytes): deeper
/// paths are resolved a part at a time.
const ONE_RESOLVE: usize = 2048;

/// `openat2` of `rel` beneath `at`, never through a symlink, retried on concurrent renames.
fn openat2_beneath(
    at: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    mode: Mode,
) -> io::Result<OwnedFd> {
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(at, rel, flags | OFlags::CLOEXEC, mode, RESOLVE) {
            // The kernel saw a concurrent rename it could not rule out; try again.
            Err(Errno::AGAIN) if tries < RACE_RETRIES => tries += 1,
            other => return other.map_err(Into::into),
        }
    }
}

/// Refuses anything but plain names separated by `/`: no `..`, no root, no empty path.
fn check_rel(rel: &Path) -> io::Result<()> {
    let plain = rel.components().all(|c| matches!(c, Component::Normal(_)));
    if plain && rel.file_name().is_some() {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a plain relative path",
        ))
    }
}

/// A directory opened without following symlinks; every path given to its methods is
/// relative to it and resolved beneath it.
#[derive(Debug)]
pub(crate) struct Dir {
    fd: OwnedFd,
    /// For messages only: never used to reach the directory.
    path: PathBuf,
}

// For calls on the directory itself (metadata, extended attributes): nothing is resolved.
impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Dir {
    /// Opens a root named on the command line. It is the admin's path, so symlinks in
    /// it are followed: confinement starts below it.
    pub(crate) fn open_trusted(path: &Path) -> Result<Dir> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::open(path, flags, Mode::empty())
            .map_err(|e| io_err("open directory", path)(e.into()))?;
        Ok(Dir {
            fd,
            path: path.to_owned(),
        })
    }

    /// Creates a root named on the command line (and its parents) if missing, then
    /// opens it.
    pub(crate) fn create_trusted(path: &Path) -> Result<Dir> {
        std::fs::create_dir_all(path).map_err(io_err("create directory", path))?;
        Self::open_trusted(path)
    }

    /// Another handle on this directory.
    pub(crate) fn try_clone(&self) -> Result<Dir> {
        Ok(Dir {
            fd: self
                .fd
                .try_clone()
                .map_err(io_err("duplicate the handle of", &self.path))?,
            path: self.path.clone(),
        })
    }

    /// The path of `rel` below this directory, for messages.
    pub(crate) fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path.join(rel)
    }

    /// This directory's path, for messages.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// `openat2` beneath this directory, never through a symlink. A path longer than one
    /// call takes is resolved a part at a time, each beneath the directory the one before
    /// opened (a tenant's pod can move a directory only within its volume).
    fn resolve(&self, rel: &Path, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
        check_rel(rel)?;
        let mut names = rel.iter().peekable();
        let mut base: Option<OwnedFd> = None;
        let mut part = PathBuf::new();
        while let Some(name) = names.next() {
            let fits = part.as_os_str().len() + 1 + name.len() <= ONE_RESOLVE;
            if !fits && !part.as_os_str().is_empty() {
                let dir = OFlags::RDONLY | OFlags::DIRECTORY;
                let at = base.as_ref().map_or(self.fd.as_fd(), AsFd::as_fd);
                base = Some(openat2_beneath(at, &part, dir, Mode::empty())?);
                part.clear();
            }
            part.push(name);
            if names.peek().is_none() {
                let at = base.as_ref().map_or(self.fd.as_fd(), AsFd::as_fd);
                return openat2_beneath(at, &part, flags, mode);
            }
        }
        Err(io::Error::new(io::ErrorKind::InvalidInput, "an empty path"))
    }

    /// Runs `f` on the directory holding `rel` (resolved beneath) and `rel`'s last name.
    fn at<R>(
        &self,
        rel: &Path,
        f: impl FnOnce(BorrowedFd<'_>, &OsStr) -> io::Result<R>,
    ) -> io::Result<R> {
        check_rel(rel)?;
        let name = rel.file_name().unwrap_or_default();
        match rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            None => f(self.fd.as_fd(), name),
            Some(parent) => {
                let dir =
                    self.resolve(parent, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())?;
                f(dir.as_fd(), name)
            }
        }
    }

    /// Opens the subdirectory `rel`.
    pub(crate) fn open_dir(&self, rel: impl AsRef<Path>) -> Result<Dir> {
        let rel = rel.as_ref();
        let fd = self
            .resolve(rel, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
            .map_err(fail("open directory", self.join(rel)))?;
        Ok(Dir {
            fd,
            path: self.join(rel),
        })
    }

    /// Opens the subdirectory `rel` and checks it is the inode a walk recorded.
    pub(crate) fn open_dir_as(&self, rel: &Path, recorded: &Inode) -> Result<Dir> {
        let dir = self.open_dir(rel)?;
        dir.stat()?.expect_same(recorded, &dir.path)?;
        Ok(dir)
    }

    /// Opens the regular file `rel` for reading.
    pub(crate) fn open_file(&self, rel: impl AsRef<Path>) -> Result<File> {
        let rel = rel.as_ref();
        // NONBLOCK: a FIFO swapped in for a file must not hang the mover (no effect on
        // regular files).
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK;
        self.resolve(rel, flags, Mode::empty())
            .map(File::from)
            .map_err(fail("open", self.join(rel)))
    }

    /// Opens `rel` for reading and writing, creating it if missing (lock files).
    pub(crate) fn open_or_create(&self, rel: impl AsRef<Path>) -> Result<File> {
        let rel = rel.as_ref();
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW;
        self.resolve(rel, flags, Mode::from_raw_mode(0o644))
            .map(File::from)
            .map_err(fail("open", self.join(rel)))
    }

    /// Creates the new file `rel` with the permission bits `mode & 0o777` (less the umask).
    /// It belongs to this process until its metadata is applied, so it is never more open
    /// than the file it copies.
    pub(crate) fn create_file(&self, rel: impl AsRef<Path>, mode: u32) -> Result<File> {
        let rel = rel.as_ref();
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW;
        let file = self
            .resolve(rel, flags, Mode::from_raw_mode(mode & 0o777))
            .map(File::from)
            .map_err(fail("create", self.join(rel)))?;
        crate::fault::trace("create", &self.join(rel));
        Ok(file)
    }

    /// Opens `rel` for writing, created or truncated.
    pub(crate) fn create_truncated(&self, rel: impl AsRef<Path>) -> Result<File> {
        let rel = rel.as_ref();
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW;
        self.resolve(rel, flags, Mode::from_raw_mode(0o644))
            .map(File::from)
            .map_err(fail("create", self.join(rel)))
    }

    /// Writes `bytes` to `rel` (created or truncated) and fsyncs it.
    pub(crate) fn write_file(&self, rel: impl AsRef<Path>, bytes: &[u8]) -> Result<()> {
        let rel = rel.as_ref();
        let path = self.join(rel);
        let mut file = self.create_truncated(rel)?;
        file.write_all(bytes).map_err(io_err("write", &path))?;
        file.sync_all().map_err(io_err("fsync", &path))?;
        crate::fault::trace("fsync", &path);
        Ok(())
    }

    /// The whole contents of the regular file `rel`.
    pub(crate) fn read_file(&self, rel: impl AsRef<Path>) -> Result<Vec<u8>> {
        let rel = rel.as_ref();
        let mut bytes = Vec::new();
        self.open_file(rel)?
            .read_to_end(&mut bytes)
            .map_err(io_err("read", self.join(rel)))?;
        Ok(bytes)
    }

    /// Makes the directory `rel` (mode 0700 until its real metadata is applied).
    pub(crate) fn make_dir(&self, rel: impl AsRef<Path>) -> Result<()> {
        let rel = rel.as_ref();
        self.at(rel, |dir, name| {
            rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700)).map_err(Into::into)
        })
        .map_err(fail("create directory", self.join(rel)))?;
        crate::fault::step();
        Ok(())
    }

    /// Makes every missing directory of `rel`, then opens it.
    pub(crate) fn make_dirs(&self, rel: &Path) -> Result<Dir> {
        let mut partial = PathBuf::new();
        for component in rel.components() {
            partial.push(component);
            match self.make_dir(&partial) {
                Err(e) if e.io_kind() == Some(io::ErrorKind::AlreadyExists) => {}
                other => other?,
            }
        }
        self.open_dir(rel)
    }

    /// Creates the symlink `rel` pointing at `target` (which is stored, never resolved).
    pub(crate) fn symlink(&self, target: &Path, rel: &Path) -> Result<()> {
        self.at(rel, |dir, name| {
            rustix::fs::symlinkat(target, dir, name).map_err(Into::into)
        })
        .map_err(fail("create symlink", self.join(rel)))?;
        crate::fault::step();
        Ok(())
    }

    /// The target of the symlink `rel`.
    pub(crate) fn read_link(&self, rel: &Path) -> Result<PathBuf> {
        self.at(rel, |dir, name| {
            let target = rustix::fs::readlinkat(dir, name, Vec::new())?;
            Ok(PathBuf::from(OsStr::from_bytes(target.to_bytes())))
        })
        .map_err(|e| {
            if Errno::from_io_error(&e) == Some(Errno::INVAL) {
                MoverError::Unsafe {
                    path: self.join(rel),
                    reason: "it is no longer a symlink (another process swapped it)".into(),
                }
            } else {
                fail("read symlink", self.join(rel))(e)
            }
        })
    }

    /// `lstat` of `rel`.
    pub(crate) fn lstat(&self, rel: impl AsRef<Path>) -> Result<Inode> {
        let rel = rel.as_ref();
        self.at(rel, |dir, name| {
            rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(Into::into)
        })
        .map(|st| Inode::from_stat(&st))
        .map_err(fail("stat", self.join(rel)))
    }

    /// Whether `rel` exists (as anything, symlinks included).
    pub(crate) fn exists(&self, rel: impl AsRef<Path>) -> Result<bool> {
        match self.lstat(rel) {
            Ok(_) => Ok(true),
            Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `fstat` of this directory.
    pub(crate) fn stat(&self) -> Result<Inode> {
        Inode::of(&self.fd, &self.path)
    }

    /// Space an unprivileged writer may still use on this directory's filesystem.
    pub(crate) fn free_space(&self) -> Result<FreeSpace> {
        let st =
            rustix::fs::fstatvfs(&self.fd).map_err(|e| fail("statfs", &self.path)(e.into()))?;
        Ok(FreeSpace {
            bytes: st.f_bavail.saturating_mul(st.f_frsize),
            // Filesystems without an inode limit (btrfs) report no inodes at all.
            inodes: (st.f_files > 0).then_some(st.f_favail),
            block: st.f_frsize.max(1),
        })
    }

    /// The names in this directory, sorted by bytes.
    pub(crate) fn names(&self) -> Result<Vec<OsString>> {
        names(self.fd.as_fd()).map_err(fail("list", &self.path))
    }

    /// Applies ownership, mode and mtime to this directory.
    pub(crate) fn set_meta(&self, meta: &Meta) -> Result<bool> {
        fsops::apply_meta_fd(&self.fd, meta, &self.path)
    }

    /// Applies ownership and mtime to the symlink `rel` itself (its mode is meaningless
    /// on Linux). Returns `false` if ownership could not be set for lack of privilege.
    pub(crate) fn set_symlink_meta(&self, rel: &Path, meta: &Meta) -> Result<bool> {
        let path = self.join(rel);
        self.at(rel, |dir, name| {
            let owned = match rustix::fs::chownat(
                dir,
                name,
                fsops::owner(meta),
                fsops::group(meta),
                AtFlags::SYMLINK_NOFOLLOW,
            ) {
                Ok(()) => true,
                Err(e) if fsops::chown_not_permitted(e) => false,
                Err(e) => return Err(e.into()),
            };
            rustix::fs::utimensat(
                dir,
                name,
                &fsops::timestamps(meta),
                AtFlags::SYMLINK_NOFOLLOW,
            )?;
            Ok(owned)
        })
        .map_err(fail("set the owner and modification time of", path))
    }

    /// Hard-links `from` (below `self`) as `to` (below `to_dir`); never follows either.
    pub(crate) fn hard_link(&self, from: &Path, to_dir: &Dir, to: &Path) -> Result<()> {
        self.at(from, |from_fd, from_name| {
            to_dir.at(to, |to_fd, to_name| {
                rustix::fs::linkat(from_fd, from_name, to_fd, to_name, AtFlags::empty())
                    .map_err(Into::into)
            })
        })
        .map_err(two_paths("link", self.join(from), to_dir.join(to)))?;
        crate::fault::step();
        Ok(())
    }

    /// Renames `from` (below `self`) to `to` (below `to_dir`).
    pub(crate) fn rename(
        &self,
        from: impl AsRef<Path>,
        to_dir: &Dir,
        to: impl AsRef<Path>,
    ) -> Result<()> {
        let (from, to) = (from.as_ref(), to.as_ref());
        self.at(from, |from_fd, from_name| {
            to_dir.at(to, |to_fd, to_name| {
                rustix::fs::renameat(from_fd, from_name, to_fd, to_name).map_err(Into::into)
            })
        })
        .map_err(two_paths("rename", self.join(from), to_dir.join(to)))?;
        crate::fault::trace("rename", &self.join(from));
        crate::fault::trace("to", &to_dir.join(to));
        crate::fault::step();
        Ok(())
    }

    /// Renames, then makes the rename durable by fsyncing both directories.
    pub(crate) fn durable_rename(
        &self,
        from: impl AsRef<Path>,
        to_dir: &Dir,
        to: impl AsRef<Path>,
    ) -> Result<()> {
        self.rename(from, to_dir, to)?;
        self.sync()?;
        to_dir.sync()
    }

    /// Removes the file or symlink `rel`.
    pub(crate) fn remove_file(&self, rel: impl AsRef<Path>) -> Result<()> {
        let rel = rel.as_ref();
        self.at(rel, |dir, name| {
            rustix::fs::unlinkat(dir, name, AtFlags::empty()).map_err(Into::into)
        })
        .map_err(fail("remove", self.join(rel)))
    }

    /// Removes `rel` and, if it is a directory, everything below it, never following a
    /// symlink (a symlink is removed as a link). Missing is fine. Returns how many
    /// entries were removed.
    pub(crate) fn remove_tree(&self, rel: impl AsRef<Path>) -> Result<u64> {
        let rel = rel.as_ref();
        let path = self.join(rel);
        let removed = self
            .at(rel, |dir, name| remove_entry(dir, name, false))
            .map_err(fail("remove", &path))?;
        crate::fault::step();
        Ok(removed)
    }

    /// Removes everything inside this directory, keeping the directory itself (a mount
    /// point). Returns how many entries were removed.
    pub(crate) fn remove_contents(&self) -> Result<u64> {
        empty_dir(self.fd.as_fd(), false).map_err(fail("empty", &self.path))
    }

    /// Walks everything below this directory, parents before children and children by
    /// name, calling `visit` with each entry's relative path and lstat. Top-level names
    /// for which `skip_top` is true are left out. Directories are reopened beneath this
    /// one and must be the inode their lstat found; an entry that vanishes is skipped
    /// with a warning.
    pub(crate) fn walk(
        &self,
        skip_top: impl Fn(&OsStr) -> bool,
        mut visit: impl FnMut(&Path, &Inode) -> Result<()>,
    ) -> Result<()> {
        let mut stack: Vec<(PathBuf, Inode)> = Vec::new();
        self.push_children(self, Path::new(""), &skip_top, &mut stack)?;
        while let Some((rel, inode)) = stack.pop() {
            visit(&rel, &inode)?;
            if inode.kind != FileType::Directory {
                continue;
            }
            match self.open_dir_as(&rel, &inode) {
                Ok(dir) => self.push_children(&dir, &rel, &skip_top, &mut stack)?,
                Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => {
                    vanished(&self.join(&rel));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Pushes `dir`'s entries (at `rel` below `self`) in reverse name order, so they pop
    /// in name order.
    fn push_children(
        &self,
        dir: &Dir,
        rel: &Path,
        skip_top: &impl Fn(&OsStr) -> bool,
        stack: &mut Vec<(PathBuf, Inode)>,
    ) -> Result<()> {
        for name in dir.names()?.into_iter().rev() {
            if rel.as_os_str().is_empty() && skip_top(&name) {
                continue;
            }
            match dir.lstat(&name) {
                Ok(inode) => stack.push((rel.join(&name), inode)),
                Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => {
                    vanished(&dir.join(&name));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// fsyncs this directory, making renames and creations in it durable.
    pub(crate) fn sync(&self) -> Result<()> {
        rustix::fs::fsync(&self.fd).map_err(|e| io_err("fsync directory", &self.path)(e.into()))?;
        crate::fault::trace("fsync-dir", &self.path);
        Ok(())
    }

    /// Flushes the whole filesystem holding this directory: one `syncfs` instead of an
    /// fsync per copied file, which is what makes many small files fast.
    pub(crate) fn sync_filesystem(&self) -> Result<()> {
        rustix::fs::syncfs(&self.fd)
            .map_err(|e| io_err("sync the filesystem of", &self.path)(e.into()))?;
        crate::fault::trace("syncfs", &self.path);
        Ok(())
    }
}

fn vanished(path: &Path) {
    crate::warn(format!(
        "{} vanished while being read; skipped",
        path.display()
    ));
}

fn names(dir: BorrowedFd<'_>) -> io::Result<Vec<OsString>> {
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            names.push(OsStr::from_bytes(&name).to_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// Removes `name` in `parent`: unlinks it, and if it is a directory empties it first.
/// A tenant may swap the name for a symlink or refill the directory meanwhile, so each
/// step is retried on what is there now, a bounded number of times.
fn remove_entry(parent: BorrowedFd<'_>, name: &OsStr, may_chmod_parent: bool) -> io::Result<u64> {
    let mut chmodded = false;
    for _ in 0..RACE_RETRIES {
        match rustix::fs::unlinkat(parent, name, AtFlags::empty()) {
            Ok(()) => return Ok(1),
            Err(Errno::NOENT) => return Ok(0),
            Err(Errno::ISDIR) => {}
            // Snapshot directories keep their source's modes, which may lack write
            // permission; without root that blocks removal.
            Err(Errno::ACCESS | Errno::PERM) if may_chmod_parent && !chmodded => {
                rustix::fs::fchmod(parent, Mode::from_raw_mode(0o700))?;
                chmodded = true;
                continue;
            }
            Err(e) => return Err(e.into()),
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let dir = match rustix::fs::openat2(parent, name, flags, Mode::empty(), RESOLVE) {
            Ok(dir) => dir,
            Err(Errno::NOENT) => return Ok(0),
            // Swapped for a symlink or a file since the unlink: unlink that.
            Err(Errno::LOOP | Errno::NOTDIR | Errno::AGAIN) => continue,
            Err(e) => return Err(e.into()),
        };
        let inside = empty_dir(dir.as_fd(), true)?;
        match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
            Ok(()) => return Ok(inside + 1),
            Err(Errno::NOENT) => return Ok(inside),
            // Refilled or swapped meanwhile: start over with what is there now.
            Err(Errno::NOTEMPTY | Errno::EXIST | Errno::NOTDIR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::other(
        "it kept changing while being removed (another process is writing to it)",
    ))
}

fn empty_dir(dir: BorrowedFd<'_>, may_chmod: bool) -> io::Result<u64> {
    let mut removed = 0;
    for name in names(dir)? {
        removed += remove_entry(dir, &name, may_chmod)?;
    }
    Ok(removed)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A relative directory path of 20 names of 252 bytes: longer than PATH_MAX (4096), so
    /// no single `openat2` resolves it.
    pub(crate) fn deeper_than_path_max() -> PathBuf {
        (0..20)
            .map(|n| format!("{n:02}{}", "d".repeat(250)))
            .collect()
    }

    #[test]
    fn a_path_longer_than_path_max_is_resolved_a_part_at_a_time_and_stays_confined() {
        let (tmp, root) = setup();
        let deep = deeper_than_path_max();
        assert!(deep.as_os_str().len() > 4096);
        root.make_dirs(&deep).expect("make the directories");
        let file = deep.join("f");
        root.write_file(&file, b"deep").expect("write");
        assert_eq!(root.read_file(&file).expect("read"), b"deep");
        let mut found = Vec::new();
        root.walk(
            |_| false,
            |rel, inode| {
                if inode.kind == FileType::RegularFile && rel.starts_with(&deep) {
                    found.push((rel.to_owned(), inode.size));
                }
                Ok(())
            },
        )
        .expect("walk");
        assert_eq!(found, [(file.clone(), 4)]);

        // A symlink where one part ends and the next begins is refused like any other.
        let names: Vec<_> = deep.iter().collect();
        let (first, rest): (PathBuf, PathBuf) =
            (names[..8].iter().collect(), names[8..].iter().collect());
        let moved = tmp.path().join("outside/moved");
        std::fs::rename(tmp.path().join("root").join(&first), &moved).expect("move away");
        symlink(&moved, tmp.path().join("root").join(&first)).expect("symlink");
        let error = root
            .read_file(first.join(rest).join("f"))
            .expect_err("refused");
        assert!(error.to_string().contains("symlink"), "{error}");
    }

    fn setup() -> (tempfile::TempDir, Dir) {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(tmp.path().join("root/sub")).expect("mkdir");
        std::fs::create_dir_all(tmp.path().join("outside")).expect("mkdir");
        std::fs::write(tmp.path().join("outside/secret"), b"secret").expect("write");
        symlink(tmp.path().join("outside"), tmp.path().join("root/link")).expect("symlink");
        let root = Dir::open_trusted(&tmp.path().join("root")).expect("open");
        (tmp, root)
    }

    #[track_caller]
    fn assert_unsafe(r: Result<impl std::fmt::Debug>) {
        assert!(matches!(r, Err(MoverError::Unsafe { .. })), "{r:?}");
    }

    #[test]
    fn no_operation_goes_through_a_symlink() {
        let (tmp, root) = setup();
        let through = Path::new("link/secret");
        assert_unsafe(root.open_file(through));
        assert_unsafe(root.open_dir("link"));
        assert_unsafe(root.create_file("link/new", 0o600));
        assert_unsafe(root.make_dir("link/new"));
        assert_unsafe(root.lstat(through));
        assert_unsafe(root.symlink(Path::new("x"), Path::new("link/new")));
        assert_unsafe(root.write_file("link/new", b"x"));
        assert_unsafe(root.remove_file(through));
        assert_unsafe(root.rename(through, &root, "stolen"));
        assert_unsafe(root.hard_link(through, &root, Path::new("stolen")));
        assert!(root.open_file("../outside/secret").is_err());
        assert!(root.open_file("/etc/passwd").is_err());
        // The link itself is an entry like any other: read, not followed.
        assert_eq!(
            root.read_link(Path::new("link")).expect("readlink"),
            tmp.path().join("outside")
        );
        let outside = tmp.path().join("outside");
        assert_eq!(std::fs::read_dir(&outside).expect("ls").count(), 1);
        assert_eq!(
            std::fs::read(outside.join("secret")).expect("read"),
            b"secret"
        );
    }

    #[test]
    fn removal_unlinks_symlinks_and_keeps_their_targets() {
        let (tmp, root) = setup();
        std::fs::write(tmp.path().join("root/sub/f"), b"x").expect("write");
        symlink(tmp.path().join("outside"), tmp.path().join("root/sub/link")).expect("symlink");
        assert_eq!(root.remove_contents().expect("empty"), 4);
        assert_eq!(
            std::fs::read_dir(tmp.path().join("root"))
                .expect("ls")
                .count(),
            0
        );
        assert_eq!(
            std::fs::read(tmp.path().join("outside/secret")).expect("read"),
            b"secret"
        );
    }

    #[test]
    fn a_directory_swapped_after_the_walk_saw_it_is_refused() {
        let (tmp, root) = setup();
        let recorded = root.lstat("sub").expect("lstat");
        std::fs::rename(tmp.path().join("root/sub"), tmp.path().join("root/old")).expect("mv");
        std::fs::create_dir(tmp.path().join("root/sub")).expect("mkdir");
        let e = root
            .open_dir_as(Path::new("sub"), &recorded)
            .expect_err("swapped");
        assert!(e.to_string().contains("replaced"), "{e}");
    }
}
