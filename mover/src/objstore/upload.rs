//! A backup into the object store, straight from the live volumes.
//!
//! Each regular file is read and hashed; its contents are sent only if they are not stored
//! yet (by this backup, an earlier one, or one that was killed before its manifest): small
//! files' into packs (see `pack`), larger ones' as objects named by their BLAKE3. A file
//! whose size, times, mode, owner and inode are those the previous snapshot recorded is not
//! read at all (the same quick check as a node-directory backup): its recorded hash is
//! reused, provided its contents are still stored. The manifest is put last, once a listing
//! shows every object it names stored.

use std::collections::{HashMap, HashSet};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use object_store::path::Path as Key;
use object_store::{ObjectStoreExt, WriteMultipart};
use rustix::fs::FileType;

use super::collect::Lock;
use super::pack::{PACKED_MAX, Pending};
use super::{PART_SIZE, Store};
use crate::backup::{
    BackupOptions, BackupReport, COPY_ATTEMPTS, CopyCheck, NAMED_INCONSISTENT, Totals, check_copy,
    has_holes, unchanged_since, vanished,
};
use crate::confined::{Dir, Inode};
use crate::error::{MoverError, Result};
use crate::fsops::{self, meta_of};
use crate::manifest::{Entry, Kind, Manifest, PackRef, Replica, Xattrs};
use crate::names::BackupId;
use crate::{swap, volumes};

/// Files read and sent at once (bounded: each holds up to a part in memory).
const UPLOADS_IN_FLIGHT: usize = 16;

/// Backs up every ordinal volume under `options.source` into a new snapshot in `store`.
pub fn backup(store: &Store, options: &BackupOptions) -> Result<BackupReport> {
    let Sent {
        lock,
        id,
        mut manifest,
        totals,
    } = send(store, options)?;
    let key = Store::manifest_key(&id);
    store.put_sealed(&key, &mut manifest)?;
    let retained = match options.keep_last {
        Some(keep) => Some(super::catalog::prune_holding(store, keep, Some(&lock))?),
        None => None,
    };
    Ok(totals.report(&manifest, retained))
}

/// What a backup sent: its manifest, not yet stored, and the lock that keeps a collection
/// from deleting what it names until it is.
pub(crate) struct Sent<'a> {
    pub lock: Lock<'a>,
    pub id: BackupId,
    pub manifest: Manifest,
    pub totals: Totals,
}

/// Sends the contents of every ordinal volume under `options.source` that the store does
/// not hold yet, and returns the manifest naming them.
pub(crate) fn send<'a>(store: &'a Store, options: &BackupOptions) -> Result<Sent<'a>> {
    let started = Instant::now();
    let start_time = Utc::now();
    if let Some(keep) = options.keep_last {
        crate::catalog::check_keep_last(keep)?;
    }
    let volumes = volumes::ordinal_dirs(&options.source)?;
    // A restore interrupted mid-swap may have left a mix of old and new volumes.
    swap::check_settled(&volumes)?;
    // Before listing what is stored: no collection may delete it while we reuse it.
    let lock = super::collect::lock_backup(store, options.lock_wait)?;
    let ids = store.snapshot_ids()?;
    let previous = super::catalog::latest(store, &ids);
    let mut id = BackupId::at(start_time);
    if let Some(last) = ids.last()
        && *last >= id
    {
        id = last.next();
    }
    let uploader = Uploader {
        store,
        known: Mutex::new(Known {
            contents: stored_contents(store, previous.as_ref().map(|p| &p.manifest))?,
            pending: Pending::default(),
        }),
        previous_start: options.quick_check_since(previous.as_ref().map(|p| p.manifest.start_time)),
    };
    let mut totals = Totals::default();
    let mut replicas = Vec::new();
    for (ordinal, volume) in &volumes {
        let previous_files: HashMap<PathBuf, Entry> = previous
            .as_ref()
            .and_then(|p| p.manifest.replicas.iter().find(|r| r.ordinal == *ordinal))
            .map(|r| {
                r.entries
                    .iter()
                    .filter(|e| e.kind == Kind::File && e.hard_link_to().is_none())
                    .map(|e| (e.rel_path(), e.clone()))
                    .collect()
            })
            .unwrap_or_default();
        replicas.push(uploader.replica(*ordinal, volume, &previous_files, &mut totals)?);
    }
    uploader.send_pending()?;
    let ordinals: Vec<u32> = volumes.iter().map(|(o, _)| *o).collect();
    let manifest = totals.manifest(
        &id,
        store.app().label(),
        start_time,
        started,
        ordinals,
        replicas,
    );
    Ok(Sent {
        lock,
        id,
        manifest,
        totals,
    })
}

impl Store {
    /// Seals `manifest` with its entries inline and puts it at `key`: the last write of a
    /// snapshot (or of a part of one).
    pub(crate) fn put_sealed(&self, key: &Key, manifest: &mut Manifest) -> Result<()> {
        self.check_contents_stored(key, manifest)?;
        let sealed = manifest
            .sealed_inline()
            .map_err(|source| MoverError::ManifestParse {
                path: self.address(key),
                source,
            })?;
        crate::fault::step();
        self.put_bytes(key, Bytes::from(sealed))
    }
}

impl Store {
    /// Fails unless every object `manifest` names is stored: listed once, just before its
    /// manifest (`key`) would be put. What a backup reuses was stored when it began, but may
    /// have been deleted since (by hand, or by a collection that missed this backup's lock
    /// in a listing that lagged); a snapshot naming it could not be restored.
    fn check_contents_stored(&self, key: &Key, manifest: &Manifest) -> Result<()> {
        let stored: HashSet<Key> = self
            .list_keys("data")?
            .into_iter()
            .chain(self.list_keys("packs")?)
            .map(|object| object.location)
            .collect();
        let mut missing = manifest
            .replicas
            .iter()
            .flat_map(|replica| replica.entries.iter())
            .filter(|entry| entry.kind == Kind::File)
            .map(Store::content_key)
            .filter(|content| !stored.contains(content))
            .collect::<Vec<_>>();
        missing.sort();
        missing.dedup();
        match missing.first() {
            None => Ok(()),
            Some(first) => Err(MoverError::ContentsGone {
                manifest: self.address(key),
                count: missing.len(),
                first: self.address(first),
            }),
        }
    }
}

/// What is stored, before anything is sent, as listed: every content object, what the
/// previous snapshot keeps in packs that are still stored, and what the packs it does not
/// name hold (those of a killed backup). A content the previous snapshot names but the
/// store lost (deleted by hand, a pack gone) is sent again, not named by every later
/// snapshot.
fn stored_contents(
    store: &Store,
    previous: Option<&crate::manifest::Manifest>,
) -> Result<HashMap<String, Option<PackRef>>> {
    let mut contents: HashMap<String, Option<PackRef>> = store
        .stored_contents()?
        .into_iter()
        .map(|blake3| (blake3, None))
        .collect();
    let packs = store.stored_packs()?;
    let stored_packs: HashSet<&str> = packs.iter().map(|(id, _)| id.as_str()).collect();
    let packed = previous
        .into_iter()
        .flat_map(|manifest| manifest.replicas.iter())
        .flat_map(|replica| replica.entries.iter())
        .filter_map(|entry| Some((entry.blake3.clone()?, entry.pack.clone()?)))
        .filter(|(_, at)| stored_packs.contains(at.id.as_str()));
    for (blake3, at) in packed {
        contents.entry(blake3).or_insert(Some(at));
    }
    let named_packs: HashSet<String> = contents
        .values()
        .filter_map(|at| Some(at.as_ref()?.id.clone()))
        .collect();
    for (id, size) in &packs {
        if !named_packs.contains(id) {
            for (blake3, at) in store.pack_index(id, *size)? {
                contents.entry(blake3).or_insert(Some(at));
            }
        }
    }
    Ok(contents)
}

struct Uploader<'a> {
    store: &'a Store,
    known: Mutex<Known>,
    previous_start: Option<DateTime<Utc>>,
}

/// The contents known to be stored (added to as we send), and the pack being filled.
struct Known {
    /// By BLAKE3: where they lie (`None`: an object of their own).
    contents: HashMap<String, Option<PackRef>>,
    pending: Pending,
}

/// What the walk found, in walk order.
enum Found {
    /// A directory or symlink: its entry is complete.
    Done(Entry),
    /// A regular file, read and sent (or found stored) in parallel.
    File { rel: PathBuf, lstat: Inode },
    /// Another path of a multiply-linked file seen earlier.
    Link {
        rel: PathBuf,
        lstat: Inode,
        first: PathBuf,
    },
}

enum Outcome {
    /// Unchanged since the previous snapshot: its recorded entry, object still stored.
    Reused(Entry),
    /// Read and hashed; `sent` is whether its contents had to be uploaded.
    Read {
        entry: Entry,
        sent: bool,
    },
    Vanished,
}

impl Uploader<'_> {
    fn replica(
        &self,
        ordinal: u32,
        volume: &Dir,
        previous: &HashMap<PathBuf, Entry>,
        totals: &mut Totals,
    ) -> Result<Replica> {
        let root = meta_of(&volume.stat()?, volume.path())?;
        let root_xattrs = fsops::read_xattrs(volume, volume.path())?;
        let mut found = Vec::new();
        let mut first_links: HashMap<(u64, u64), PathBuf> = HashMap::new();
        volume.walk(swap::is_reserved, |rel, lstat| {
            let path = volume.join(rel);
            match lstat.kind {
                FileType::Directory => {
                    let xattrs = match volume.open_dir(rel) {
                        Ok(dir) => fsops::read_xattrs(&dir, &path)?,
                        Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => Xattrs::new(),
                        Err(e) => return Err(e),
                    };
                    let mut entry = Entry::new(rel, Kind::Dir, 0, meta_of(lstat, &path)?);
                    entry.xattrs = xattrs;
                    found.push(Found::Done(entry));
                }
                FileType::Symlink => match volume.read_link(rel) {
                    Ok(target) => {
                        let size = target.as_os_str().len() as u64;
                        let meta = meta_of(lstat, &path)?;
                        found.push(Found::Done(
                            Entry::new(rel, Kind::Symlink, size, meta).with_target(&target),
                        ));
                    }
                    Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => vanished(&path),
                    Err(e) => return Err(e),
                },
                FileType::RegularFile => {
                    let (rel, lstat) = (rel.to_owned(), *lstat);
                    match first_links.get(&(lstat.dev, lstat.ino)) {
                        Some(first) => found.push(Found::Link {
                            first: first.clone(),
                            rel,
                            lstat,
                        }),
                        None => {
                            if lstat.nlink > 1 {
                                first_links.insert((lstat.dev, lstat.ino), rel.clone());
                            }
                            found.push(Found::File { rel, lstat });
                        }
                    }
                }
                _ => crate::warn(format!(
                    "skipping {}: sockets, fifos and device files are not backed up",
                    path.display()
                )),
            }
            Ok(())
        })?;

        // Each upload mostly waits for the server: more of them in flight than cores.
        let outcomes = fsops::par_map_on(UPLOADS_IN_FLIGHT, &found, |item, buf| match item {
            Found::File { rel, lstat } => self
                .file(volume, rel, lstat, previous.get(rel), buf)
                .map(Some),
            _ => Ok(None),
        })?;
        let mut entries: Vec<Entry> = Vec::with_capacity(found.len());
        let mut by_path: HashMap<PathBuf, usize> = HashMap::new();
        for (item, outcome) in found.into_iter().zip(outcomes) {
            let outcome = match (item, outcome) {
                (Found::Done(entry), _) => {
                    entries.push(entry);
                    continue;
                }
                (Found::File { .. }, Some(outcome)) => outcome,
                (Found::Link { rel, lstat, first }, _) => {
                    match by_path.get(&first).map(|&i| &entries[i]) {
                        Some(copied)
                            if !copied.inconsistent && self.same_inode(volume, &rel, &lstat) =>
                        {
                            let mut entry = Entry::new(&rel, Kind::File, copied.size, copied.meta)
                                .with_hard_link(&first);
                            entry.blake3.clone_from(&copied.blake3);
                            entry.pack.clone_from(&copied.pack);
                            entry.source = copied.source;
                            entry.sparse = copied.sparse;
                            entry.xattrs.clone_from(&copied.xattrs);
                            totals.files += 1;
                            totals.bytes += entry.size;
                            entries.push(entry);
                            continue;
                        }
                        // The first path vanished or changed: this one stands alone.
                        _ => {
                            self.file(volume, &rel, &lstat, previous.get(&rel), &mut Vec::new())?
                        }
                    }
                }
                // par_map gives every file an outcome.
                (Found::File { .. }, None) => continue,
            };
            let entry = match outcome {
                Outcome::Vanished => continue,
                Outcome::Reused(entry) => {
                    totals.linked_files += 1;
                    entry
                }
                Outcome::Read { entry, sent } => {
                    if sent {
                        totals.new_bytes += entry.size;
                    } else {
                        totals.linked_files += 1;
                    }
                    if entry.inconsistent {
                        totals.inconsistent += 1;
                        if totals.inconsistent_named.len() < NAMED_INCONSISTENT {
                            totals
                                .inconsistent_named
                                .push(format!("{ordinal}/{}", entry.rel_path().display()));
                        }
                    }
                    entry
                }
            };
            totals.files += 1;
            totals.bytes += entry.size;
            by_path.insert(entry.rel_path(), entries.len());
            entries.push(entry);
        }
        Ok(Replica {
            ordinal,
            root,
            root_xattrs,
            entries,
            entry_file: None,
        })
    }

    fn same_inode(&self, volume: &Dir, rel: &Path, lstat: &Inode) -> bool {
        volume
            .lstat(rel)
            .is_ok_and(|now| (now.dev, now.ino) == (lstat.dev, lstat.ino))
    }

    fn known(&self) -> MutexGuard<'_, Known> {
        // Nothing is left half-done under the lock: a panicked holder leaves it usable.
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where contents with this BLAKE3 are stored, if they are.
    fn stored_at(&self, blake3: &str) -> Option<Option<PackRef>> {
        self.known().contents.get(blake3).cloned()
    }

    /// Puts small contents into the pack being filled, unless they are stored; sends the
    /// pack once it is full. Returns where they lie and whether they were added.
    fn pack(&self, blake3: &str, contents: &[u8]) -> Result<(PackRef, bool)> {
        let mut known = self.known();
        if let Some(Some(at)) = known.contents.get(blake3) {
            return Ok((at.clone(), false));
        }
        let (at, full) = known.pending.add(blake3, contents);
        known.contents.insert(blake3.to_owned(), Some(at.clone()));
        drop(known);
        if let Some(full) = full {
            self.store.put_pack(full)?;
        }
        Ok((at, true))
    }

    /// Sends the last pack, not yet full.
    fn send_pending(&self) -> Result<()> {
        let pending = std::mem::take(&mut self.known().pending);
        if pending.is_empty() {
            return Ok(());
        }
        self.store.put_pack(pending)
    }

    fn file(
        &self,
        volume: &Dir,
        rel: &Path,
        lstat: &Inode,
        previous: Option<&Entry>,
        buf: &mut Vec<u8>,
    ) -> Result<Outcome> {
        let path = volume.join(rel);
        let meta = meta_of(lstat, &path)?;
        let stamp = fsops::stamp_of(lstat, &path)?;
        if let (Some(previous), Some(recorded_at)) = (previous, self.previous_start)
            && unchanged_since(previous, recorded_at, lstat, &meta, &stamp)
            && previous
                .blake3
                .as_deref()
                .is_some_and(|b| self.stored_at(b).is_some())
        {
            let mut entry = previous.clone();
            entry.source = Some(stamp);
            return Ok(Outcome::Reused(entry));
        }
        let mut attempt = 1;
        loop {
            let mut src = match volume.open_file(rel) {
                Ok(src) => src,
                Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => {
                    vanished(&path);
                    return Ok(Outcome::Vanished);
                }
                Err(e) => return Err(e),
            };
            let before = Inode::of(&src, &path)?;
            if before.kind != FileType::RegularFile {
                before.expect_same(lstat, &path)?;
            }
            let small = before.size <= PART_SIZE as u64;
            // Small files are kept in memory as read, so what is sent is what was hashed.
            buf.clear();
            let (len, hash) = if small {
                (&mut src)
                    .take(PART_SIZE as u64 + 1)
                    .read_to_end(buf)
                    .map_err(crate::error::io_err("read", &path))?;
                (buf.len() as u64, blake3::hash(buf))
            } else {
                hash_file(&mut src, &path, buf)?
            };
            let xattrs = fsops::read_xattrs(&src, &path)?;
            let after = Inode::of(&src, &path)?;
            let consistent = match check_copy(&before, &after, len) {
                CopyCheck::Consistent => true,
                CopyCheck::Short => {
                    return Err(MoverError::Io {
                        action: "read all of",
                        path,
                        source: io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!("short read: {len} of its {} bytes", before.size),
                        ),
                    });
                }
                CopyCheck::Changed if attempt < COPY_ATTEMPTS => {
                    attempt += 1;
                    continue;
                }
                CopyCheck::Changed if !small => {
                    return self.send_as_read(&mut src, rel, &path, &before, xattrs, buf);
                }
                CopyCheck::Changed => {
                    crate::warn(format!(
                        "{} changed while being read {COPY_ATTEMPTS} times; keeping the {len} bytes read, flagged inconsistent",
                        path.display()
                    ));
                    false
                }
            };
            let blake3 = hash.to_hex().to_string();
            let (pack, sent) = if let Some(at) = self.stored_at(&blake3) {
                (at, false)
            } else if len <= PACKED_MAX {
                let (at, added) = self.pack(&blake3, buf)?;
                (Some(at), added)
            } else if small {
                self.store
                    .put_bytes(&Store::data_key(&blake3), Bytes::copy_from_slice(buf))?;
                (None, true)
            } else if self.send_large(&mut src, &path, &blake3, buf)? {
                (None, true)
            } else if attempt < COPY_ATTEMPTS {
                attempt += 1;
                continue;
            } else {
                return self.send_as_read(&mut src, rel, &path, &before, xattrs, buf);
            };
            if pack.is_none() {
                self.known().contents.insert(blake3.clone(), None);
            }
            let mut entry = Entry::new(rel, Kind::File, len, meta_of(&before, &path)?);
            entry.xattrs = xattrs;
            entry.blake3 = Some(blake3);
            entry.pack = pack;
            entry.source = Some(fsops::stamp_of(&before, &path)?);
            entry.inconsistent = !consistent;
            entry.sparse = has_holes(&before);
            return Ok(Outcome::Read { entry, sent });
        }
    }

    /// Sends a large file that changed while it was read each time, as it is read once more:
    /// to a key of its own below `data/`, hashing what is sent, then copied (by the store) to
    /// the key of that hash. The snapshot then holds exactly what was sent, flagged
    /// inconsistent, rather than failing for a file that never holds still (a log, a
    /// database's file). The first key is deleted after; left by a crash, it is named by no
    /// snapshot and collected.
    fn send_as_read(
        &self,
        src: &mut std::fs::File,
        rel: &Path,
        path: &Path,
        before: &Inode,
        xattrs: Xattrs,
        buf: &mut Vec<u8>,
    ) -> Result<Outcome> {
        crate::warn(format!(
            "{} changed while being read {COPY_ATTEMPTS} times; sending it as it is read once more, flagged inconsistent",
            path.display()
        ));
        let store = self.store;
        let incoming = Key::from(format!(
            "data/incoming/{}-{}",
            Utc::now().format("%Y%m%dT%H%M%S%.9fZ"),
            std::process::id()
        ));
        let (writer, hash, len) = self.stream(src, path, &incoming, buf)?;
        store
            .block_on(writer.finish())
            .map_err(store.failed("upload", &incoming))?;
        let blake3 = hash.to_hex().to_string();
        let sent = self.stored_at(&blake3).is_none();
        if sent {
            let key = Store::data_key(&blake3);
            store
                .block_on(store.objects.copy(&incoming, &key))
                .map_err(store.failed("copy to its content's key", &incoming))?;
            self.known().contents.insert(blake3.clone(), None);
        }
        store.delete_key(&incoming)?;
        let mut entry = Entry::new(rel, Kind::File, len, meta_of(before, path)?);
        entry.xattrs = xattrs;
        entry.blake3 = Some(blake3);
        entry.source = Some(fsops::stamp_of(before, path)?);
        entry.inconsistent = true;
        entry.sparse = has_holes(before);
        Ok(Outcome::Read { entry, sent })
    }

    /// Sends a large file as a multipart upload, read again from the start; completes it
    /// only if what was sent hashes to `blake3` (else aborts it and returns false: the file
    /// changed since it was hashed).
    fn send_large(
        &self,
        src: &mut std::fs::File,
        path: &Path,
        blake3: &str,
        buf: &mut Vec<u8>,
    ) -> Result<bool> {
        let key = Store::data_key(blake3);
        let store = self.store;
        let (writer, sent, _) = self.stream(src, path, &key, buf)?;
        if sent.to_hex().as_str() != blake3 {
            let _ = store.block_on(writer.abort());
            return Ok(false);
        }
        store
            .block_on(writer.finish())
            .map_err(store.failed("upload", &key))?;
        Ok(true)
    }

    /// Sends `src`, read again from its start, as a multipart upload to `key`; returns the
    /// upload still open (the caller completes or aborts it), and the BLAKE3 and length of
    /// what was sent.
    fn stream(
        &self,
        src: &mut std::fs::File,
        path: &Path,
        key: &Key,
        buf: &mut Vec<u8>,
    ) -> Result<(WriteMultipart, blake3::Hash, u64)> {
        use std::io::Seek;
        src.seek(io::SeekFrom::Start(0))
            .map_err(crate::error::io_err("seek", path))?;
        let store = self.store;
        let upload = store
            .block_on(store.objects.put_multipart(key))
            .map_err(store.failed("start uploading", key))?;
        let _runtime = store.runtime.enter();
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut hasher = blake3::Hasher::new();
        let mut len = 0u64;
        buf.resize(1024 * 1024, 0);
        loop {
            let n = match src.read(buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let _ = store.block_on(writer.abort());
                    return Err(crate::error::io_err("read", path)(e));
                }
            };
            hasher.update(&buf[..n]);
            len += n as u64;
            // At most a few parts in flight: bounded memory, bounded parallelism.
            store
                .block_on(writer.wait_for_capacity(2))
                .map_err(store.failed("upload", key))?;
            writer.write(&buf[..n]);
        }
        Ok((writer, hasher.finalize(), len))
    }
}

fn hash_file(
    src: &mut std::fs::File,
    path: &Path,
    buf: &mut Vec<u8>,
) -> Result<(u64, blake3::Hash)> {
    buf.resize(1024 * 1024, 0);
    let mut hasher = blake3::Hasher::new();
    let mut len = 0u64;
    loop {
        match src.read(buf) {
            Ok(0) => return Ok((len, hasher.finalize())),
            Ok(n) => {
                hasher.update(&buf[..n]);
                len += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(crate::error::io_err("read", path)(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::names::Selector;
    use crate::objstore::collect::tests::options;

    /// A file larger than a part that a writer changes all the time, as a database does its
    /// files: the backup does not fail, it holds the file as sent (whose contents verify),
    /// flagged inconsistent, and leaves no upload behind.
    #[test]
    fn a_large_file_that_never_holds_still_is_sent_as_read_and_flagged() {
        let store = Store::in_memory("ns", "app");
        let volume = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(volume.path().join("0")).expect("mkdir");
        let path = volume.path().join("0/busy");
        let len = PART_SIZE as u64 + 4096;
        std::fs::write(&path, vec![0u8; len as usize]).expect("write");
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let stop = Arc::clone(&stop);
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .expect("open");
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    file.write_at(&n.to_le_bytes(), (n * 4096) % (len - 8))
                        .expect("write");
                    n += 1;
                }
            })
        };
        let report = backup(&store, &options(volume.path()));
        stop.store(true, Ordering::Relaxed);
        writer.join().expect("writer");
        let report = report.expect("a backup, not a failure");
        // The writer never lets a read through unchanged, short of a stalled thread.
        assert!(report.inconsistent <= 1, "{report:?}");
        if report.inconsistent == 1 {
            assert_eq!(report.inconsistent_files, ["0/busy"]);
        }
        let verified = super::super::verify(&store, &Selector::Latest).expect("verify");
        assert!(verified.problems.is_empty(), "{:?}", verified.problems);
        let incoming = store.list_keys("data/incoming").expect("list");
        assert!(incoming.is_empty(), "{incoming:?}");
    }

    /// A file with holes (a VM image, a database's preallocated file) comes back from the
    /// store with its holes, small (packed) or large (an object of its own), and its
    /// contents whole; a file without holes comes back dense, zeros and all.
    #[test]
    fn files_with_holes_are_restored_with_their_holes() {
        use std::os::unix::fs::MetadataExt;
        let store = Store::in_memory("ns", "app");
        let volume = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(volume.path().join("0")).expect("mkdir");
        let write = |name: &str, len: u64, at: u64, sparse: bool| {
            let path = volume.path().join("0").join(name);
            let file = std::fs::File::create(&path).expect("create");
            if sparse {
                file.set_len(len).expect("set_len");
            } else {
                file.write_all_at(&vec![0; len as usize], 0).expect("zeros");
            }
            file.write_all_at(b"data in the middle", at).expect("write");
            std::fs::read(&path).expect("read")
        };
        let files = [
            ("small", write("small", 1 << 20, 300_000, true)),
            (
                "large",
                write("large", PART_SIZE as u64 * 2, PART_SIZE as u64, true),
            ),
            ("dense", write("dense", 1 << 20, 300_000, false)),
        ];
        backup(&store, &options(volume.path())).expect("backup");
        let pod = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(pod.path().join("0")).expect("mkdir");
        let restore = crate::RestoreOptions {
            dest: pod.path().to_owned(),
            from: Selector::Latest,
            if_exists: false,
            lock_wait: std::time::Duration::ZERO,
            commit_note: None,
        };
        crate::restore_from_store(&store, &store, &restore).expect("restore");
        for (name, contents) in &files {
            let path = pod.path().join("0").join(name);
            assert!(
                std::fs::read(&path).expect("read") == *contents,
                "{name}'s contents"
            );
            let allocated = std::fs::metadata(&path).expect("stat").blocks() * 512;
            if *name == "dense" {
                assert!(
                    allocated >= contents.len() as u64,
                    "{name}: {allocated} bytes allocated"
                );
            } else {
                assert!(
                    allocated <= 64 * 1024,
                    "{name}: {allocated} bytes allocated, not holes"
                );
            }
        }
    }

    /// A volume of a small file (packed) and a larger one (an object of its own); their
    /// keys once backed up.
    fn two_kinds_backed_up(store: &Store) -> (tempfile::TempDir, Vec<Key>) {
        let volume = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(volume.path().join("0")).expect("mkdir");
        std::fs::write(volume.path().join("0/small"), "small").expect("write");
        let large = vec![7u8; PACKED_MAX as usize + 1];
        std::fs::write(volume.path().join("0/large"), &large).expect("write");
        backup(store, &options(volume.path())).expect("first backup");
        let keys = store
            .list_keys("data")
            .expect("list")
            .into_iter()
            .chain(store.list_keys("packs").expect("list"))
            .map(|object| object.location)
            .collect::<Vec<_>>();
        assert_eq!(keys.len(), 2, "{keys:?}");
        (volume, keys)
    }

    /// Contents the previous snapshot names but the store lost are sent again, so that the
    /// new snapshot restores, instead of being named by every later one.
    #[test]
    fn contents_lost_from_the_store_are_sent_again_by_the_next_backup() {
        let store = Store::in_memory("ns", "app");
        let (volume, keys) = two_kinds_backed_up(&store);
        for key in &keys {
            store.delete_key(key).expect("lose it");
        }
        let report = backup(&store, &options(volume.path())).expect("second backup");
        assert_eq!(
            report.new_bytes,
            "small".len() as u64 + PACKED_MAX + 1,
            "{report:?}"
        );
        let verified = super::super::verify(&store, &Selector::Latest).expect("verify");
        assert!(verified.problems.is_empty(), "{:?}", verified.problems);
    }

    /// A content deleted while a backup ran (here between its uploads and its manifest):
    /// the snapshot is not stored, and the failure is one that running again mends.
    #[test]
    fn a_snapshot_naming_contents_deleted_while_it_ran_is_not_stored() {
        let store = Store::in_memory("ns", "app");
        let (volume, keys) = two_kinds_backed_up(&store);
        let Sent {
            lock,
            id,
            mut manifest,
            ..
        } = send(&store, &options(volume.path())).expect("send");
        store.delete_key(&keys[0]).expect("deleted meanwhile");
        let key = Store::manifest_key(&id);
        let error = store
            .put_sealed(&key, &mut manifest)
            .expect_err("not stored");
        assert!(
            matches!(error, MoverError::ContentsGone { count: 1, .. }) && !error.is_permanent(),
            "{error}"
        );
        assert!(
            error.to_string().contains(keys[0].as_ref()),
            "names the missing object: {error}"
        );
        drop(lock);
        assert_eq!(
            store.snapshot_ids().expect("ids").len(),
            1,
            "only the first"
        );
        let report = backup(&store, &options(volume.path())).expect("run again");
        assert!(report.new_bytes > 0, "{report:?}");
        let verified = super::super::verify(&store, &Selector::Latest).expect("verify");
        assert!(verified.problems.is_empty(), "{:?}", verified.problems);
    }

    /// A file deeper than PATH_MAX below its volume is sent and verifies (a single
    /// `openat2` of its path fails).
    #[test]
    fn a_file_deeper_than_path_max_is_backed_up() {
        let store = Store::in_memory("ns", "app");
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(tmp.path().join("0")).expect("mkdir");
        let volume = Dir::open_trusted(&tmp.path().join("0")).expect("open");
        let deep = crate::confined::tests::deeper_than_path_max().join("f");
        volume
            .make_dirs(deep.parent().expect("parent"))
            .expect("mkdir");
        volume.write_file(&deep, b"deep").expect("write");
        let report = backup(&store, &options(tmp.path())).expect("backup");
        assert_eq!((report.files, report.bytes), (1, 4), "{report:?}");
        let verified = super::super::verify(&store, &Selector::Latest).expect("verify");
        assert!(verified.problems.is_empty(), "{:?}", verified.problems);
    }
}
