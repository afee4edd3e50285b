//! `manifest.json`: what a snapshot holds and how it went.
//!
//! The manifest is the authority for a restore: contents are checked against its
//! checksums and metadata is applied from it (the snapshot's own inodes are shared with
//! other snapshots by hard links, and ownership cannot always be set on the target).
//! It carries a checksum of itself so that a hand-edited manifest is refused rather than
//! trusted, and every path in it is checked to stay inside the snapshot.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::io::{BufReader, BufWriter};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::confined::Dir;
use crate::error::{MoverError, Result, io_err};

/// The manifest's file name inside a snapshot directory.
pub const MANIFEST_FILE: &str = "manifest.json";

/// The format version this crate writes. Format 1 (read too) sealed a manifest with the
/// checksum of its keys sorted, which needed a second copy of it in memory; format 2
/// (read too) seals it as written, hashed while serializing, with every entry inline;
/// format 3 keeps each replica's entries in their own file (see [`crate::entries`]),
/// streamed one at a time, so that memory does not grow with the number of files.
pub(crate) const FORMAT: u32 = 3;

/// The format an object store's manifests are written in: every entry inline, as format 2,
/// and small files' contents in packs (see [`PackRef`]). A mover that knows only formats
/// 1 to 3 refuses it rather than looking for packed contents where they are not.
pub(crate) const INLINE_FORMAT: u32 = 4;

/// The `result` of a snapshot that finished; only such snapshots are ever renamed into place.
pub const SUCCEEDED: &str = "Succeeded";

/// A snapshot's manifest.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Format version (1 to 4).
    pub format: u32,
    /// The backup id, equal to the snapshot's directory name.
    pub id: String,
    /// `namespace/name` of the app.
    pub app: String,
    /// `Succeeded` (the only result a visible snapshot can have).
    pub result: String,
    /// When the backup started.
    pub start_time: DateTime<Utc>,
    /// When the backup finished.
    pub end_time: DateTime<Utc>,
    /// Wall time of the backup.
    pub duration_ms: u64,
    /// Total size of the regular files.
    pub bytes: u64,
    /// Number of regular files.
    pub files: u64,
    /// Bytes copied by this backup (the rest are hard links to the previous snapshot).
    pub new_bytes: u64,
    /// Files hard-linked to the previous snapshot.
    pub linked_files: u64,
    /// Files that kept changing while they were copied (flagged `inconsistent`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub inconsistent_files: u64,
    /// The replica ordinals held, ascending.
    pub ordinals: Vec<u32>,
    /// One entry per ordinal, in `ordinals` order.
    pub replicas: Vec<Replica>,
    /// blake3 of this manifest serialized with `checksum` empty.
    #[serde(default)]
    pub checksum: String,
}

pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One replica's volume.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Replica {
    /// The ordinal (the subdirectory name).
    pub ordinal: u32,
    /// Metadata of the volume's root directory.
    pub root: Meta,
    /// Extended attributes of the volume's root directory (its default ACL among them).
    #[serde(default, skip_serializing_if = "Xattrs::is_empty")]
    pub root_xattrs: Xattrs,
    /// Formats 1, 2 and 4: every file, directory and symlink below the root, parents
    /// before children. Format 3: empty, the entries are in [`EntryFile`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<Entry>,
    /// Format 3: the file holding the entries, in path order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry_file: Option<EntryFile>,
}

/// A replica's entries file (format 3): `entries-<ordinal>.jsonl` beside the manifest,
/// one JSON entry per line, in path order (component by component, as `Path` compares;
/// the order of a depth-first walk that visits names sorted). Sealed by the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryFile {
    /// Number of entries (lines).
    pub count: u64,
    /// Size of the file.
    pub bytes: u64,
    /// blake3 of the file, hex.
    pub blake3: String,
}

impl Replica {
    /// The name of this replica's entries file (format 3).
    pub fn entry_file_name(&self) -> String {
        entry_file_name(self.ordinal)
    }
}

/// The name of replica `ordinal`'s entries file (format 3).
pub(crate) fn entry_file_name(ordinal: u32) -> String {
    format!("entries-{ordinal}.jsonl")
}

/// What kind of inode an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Dir => "dir",
            Kind::Symlink => "symlink",
        }
    }
}

/// Ownership, permissions and modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// Permission bits (`mode & 0o7777`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time, nanosecond precision.
    pub mtime: DateTime<Utc>,
}

/// One file, directory or symlink. Names that are not UTF-8 are kept exactly, hex-encoded
/// in `pathHex` / `targetHex` instead of `path` / `target`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// Path relative to the replica root, `/`-separated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The path's bytes in hex, when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_hex: Option<String>,
    /// file, dir or symlink.
    #[serde(rename = "type")]
    pub kind: Kind,
    /// Size in bytes (files: as copied; symlinks: length of the target; dirs: 0).
    pub size: u64,
    /// Ownership, permissions, mtime.
    #[serde(flatten)]
    pub meta: Meta,
    /// blake3 of the contents, hex (files only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blake3: Option<String>,
    /// Symlink target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Symlink target in hex, when it is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_hex: Option<String>,
    /// The live file this copy was read from (files only), for the next backup's quick
    /// check. Absent in manifests of older versions: their files are copied once more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceStamp>,
    /// The file kept changing while it was copied: the copy is what was read and may mix
    /// old and new contents (files only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inconsistent: bool,
    /// The file has holes, kept as holes in the snapshot and on restore (files only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sparse: bool,
    /// A hard link to this earlier file entry of the same replica (files only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard_link: Option<String>,
    /// The hard link's path in hex, when it is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard_link_hex: Option<String>,
    /// Extended attributes (POSIX ACLs are `system.posix_acl_access` and
    /// `system.posix_acl_default`): name to value in hex (files and directories).
    #[serde(default, skip_serializing_if = "Xattrs::is_empty")]
    pub xattrs: Xattrs,
    /// Format 4: the pack holding this small file's contents (else they are an object of
    /// their own, named by their BLAKE3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pack: Option<PackRef>,
}

/// Where in a pack (one object holding many small files' contents, so that a backup of
/// many small files is a few requests, not one per file) a file's contents lie: `size`
/// bytes from `offset`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PackRef {
    /// The pack's id: 32 lowercase hex digits.
    pub id: String,
    /// Where the contents start in the pack.
    pub offset: u64,
}

impl PackRef {
    /// A pack id is part of an object's key: only plain hex is taken from a manifest.
    pub(crate) fn id_is_valid(id: &str) -> bool {
        id.len() == 32 && id.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
    }
}

/// Whether `text` is a BLAKE3 as this crate writes it: 64 lowercase hex digits. Contents
/// are named by it in an object store, so a manifest's must be exactly that.
pub(crate) fn is_blake3_hex(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// Extended attributes: name to value in hex.
pub type Xattrs = BTreeMap<String, String>;

/// Identity and status-change time of a live file when it was backed up. Together with
/// size, mode, owner and mtime they must all be unchanged for a file to be linked from
/// the previous snapshot rather than copied (restic and git compare the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceStamp {
    /// Inode number.
    pub ino: u64,
    /// Status change time, nanosecond precision.
    pub ctime: DateTime<Utc>,
}

impl Entry {
    /// A new entry for `rel` (relative path) with the path encoded.
    pub(crate) fn new(rel: &Path, kind: Kind, size: u64, meta: Meta) -> Self {
        let (path, path_hex) = encode(rel.as_os_str());
        Self {
            path,
            path_hex,
            kind,
            size,
            meta,
            blake3: None,
            target: None,
            target_hex: None,
            source: None,
            inconsistent: false,
            sparse: false,
            hard_link: None,
            hard_link_hex: None,
            xattrs: Xattrs::new(),
            pack: None,
        }
    }

    /// Sets the symlink target.
    pub(crate) fn with_target(mut self, target: &Path) -> Self {
        let (text, hex) = encode(target.as_os_str());
        self.target = text;
        self.target_hex = hex;
        self
    }

    /// Makes this entry a hard link to the file entry `first`.
    pub(crate) fn with_hard_link(mut self, first: &Path) -> Self {
        let (text, hex) = encode(first.as_os_str());
        self.hard_link = text;
        self.hard_link_hex = hex;
        self
    }

    /// The earlier file entry this one is a hard link to, if any.
    pub fn hard_link_to(&self) -> Option<PathBuf> {
        decode(self.hard_link.as_deref(), self.hard_link_hex.as_deref())
    }

    /// The relative path. Only valid on entries of a manifest that passed [`Manifest::load`]
    /// or that this crate built.
    pub fn rel_path(&self) -> PathBuf {
        decode(self.path.as_deref(), self.path_hex.as_deref()).unwrap_or_default()
    }

    /// The symlink target, if any.
    pub fn link_target(&self) -> Option<PathBuf> {
        decode(self.target.as_deref(), self.target_hex.as_deref())
    }
}

fn encode(name: &OsStr) -> (Option<String>, Option<String>) {
    match name.to_str() {
        Some(text) => (Some(text.to_owned()), None),
        None => (None, Some(to_hex(name.as_bytes()))),
    }
}

fn decode(text: Option<&str>, hex: Option<&str>) -> Option<PathBuf> {
    if let Some(text) = text {
        return Some(PathBuf::from(text));
    }
    Some(PathBuf::from(OsString::from_vec(from_hex(hex?)?)))
}

pub(crate) fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn from_hex(hex: &str) -> Option<Vec<u8>> {
    let hex = hex.as_bytes();
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16);
    hex.chunks(2)
        .map(|pair| Some((digit(pair[0])? * 16 + digit(pair[1])?) as u8))
        .collect()
}

impl Manifest {
    /// blake3 of the manifest serialized with `checksum` empty.
    fn digest(&mut self) -> Result<String, serde_json::Error> {
        let checksum = std::mem::take(&mut self.checksum);
        let digest = if self.format == 1 {
            serde_json::to_value(&*self)
                .and_then(|sorted| serde_json::to_vec(&sorted))
                .map(|bytes| blake3::hash(&bytes))
        } else {
            let mut hasher = blake3::Hasher::new();
            serde_json::to_writer(&mut hasher, &*self).map(|()| hasher.finalize())
        };
        self.checksum = checksum;
        Ok(digest?.to_hex().to_string())
    }

    /// Writes the manifest, sealed with its own checksum, into `snapshot` and fsyncs it.
    pub(crate) fn write(&mut self, snapshot: &Dir) -> Result<()> {
        let path = snapshot.join(MANIFEST_FILE);
        let json_err = |source| MoverError::ManifestParse {
            path: path.clone(),
            source,
        };
        self.format = FORMAT;
        self.checksum = self.digest().map_err(json_err)?;
        let mut file = BufWriter::new(snapshot.create_truncated(MANIFEST_FILE)?);
        serde_json::to_writer_pretty(&mut file, self).map_err(json_err)?;
        let file = file
            .into_inner()
            .map_err(|e| io_err("write", &path)(e.into_error()))?;
        file.sync_all().map_err(io_err("fsync", &path))?;
        crate::fault::trace("fsync", &path);
        crate::fault::step();
        Ok(())
    }

    /// The manifest sealed with every entry inline (format 4), serialized: an object
    /// store keeps a snapshot as this one object (written last) and its files' contents.
    pub(crate) fn sealed_inline(&mut self) -> Result<Vec<u8>, serde_json::Error> {
        self.format = INLINE_FORMAT;
        self.checksum = self.digest()?;
        serde_json::to_vec(self)
    }

    /// Reads and checks the manifest of snapshot `id` in `snapshot`: parses, matches its
    /// own checksum (refusing hand edits), names `id`, succeeded, and describes a tree a
    /// restore can write without following anything (see [`check_tree`]).
    pub(crate) fn load(snapshot: &Dir, id: &str) -> Result<Self> {
        let path = &snapshot.join(MANIFEST_FILE);
        let file = BufReader::new(snapshot.open_file(MANIFEST_FILE)?);
        let manifest: Manifest =
            serde_json::from_reader(file).map_err(|source| MoverError::ManifestParse {
                path: path.to_owned(),
                source,
            })?;
        manifest.checked(path, id, Some(snapshot))
    }

    /// Parses and checks, as [`Manifest::load`] does, a manifest with its entries inline
    /// (format 1, 2 or 4) read from `path` (an object's address, for messages).
    pub(crate) fn parse_inline(bytes: &[u8], path: &Path, id: &str) -> Result<Self> {
        Self::parse_json(bytes, path)?.checked(path, id, None)
    }

    /// Parses and checks a part of a snapshot (see `objstore::parts`): as
    /// [`Manifest::parse_inline`], against the id it names itself.
    pub(crate) fn parse_part(bytes: &[u8], path: &Path) -> Result<Self> {
        let manifest = Self::parse_json(bytes, path)?;
        let id = manifest.id.clone();
        manifest.checked(path, &id, None)
    }

    fn parse_json(bytes: &[u8], path: &Path) -> Result<Self> {
        serde_json::from_slice(bytes).map_err(|source| MoverError::ManifestParse {
            path: path.to_owned(),
            source,
        })
    }

    /// The checks of [`Manifest::load`]; entries files (format 3) are read from `snapshot`.
    fn checked(mut self, path: &Path, id: &str, snapshot: Option<&Dir>) -> Result<Self> {
        let invalid = |reason: String| MoverError::ManifestInvalid {
            path: path.to_owned(),
            reason,
        };
        if !(1..=INLINE_FORMAT).contains(&self.format) {
            return Err(invalid(format!("unknown format {}", self.format)));
        }
        let digest = self.digest().map_err(|source| MoverError::ManifestParse {
            path: path.to_owned(),
            source,
        })?;
        if digest != self.checksum {
            return Err(invalid(
                "its checksum does not match its contents (edited or damaged); refusing to trust it"
                    .into(),
            ));
        }
        if self.id != id {
            return Err(invalid(format!(
                "it describes backup {:?}, not {id:?}",
                self.id
            )));
        }
        if self.result != SUCCEEDED {
            return Err(invalid(format!("result is {:?}", self.result)));
        }
        let ordinals: Vec<u32> = self.replicas.iter().map(|r| r.ordinal).collect();
        if ordinals != self.ordinals {
            return Err(invalid("replicas do not match ordinals".into()));
        }
        for replica in &self.replicas {
            let checked = match (&replica.entry_file, self.format) {
                (None, 1 | 2) if replica.entries.iter().any(|e| e.pack.is_some()) => {
                    Err("packed contents before format 4".to_owned())
                }
                (None, 1 | 2 | INLINE_FORMAT) => check_tree(replica),
                (Some(file), 3) if replica.entries.is_empty() => match snapshot {
                    // Sealed here; the tree is checked as the entries are read.
                    Some(snapshot) => {
                        crate::entries::check_file(snapshot, replica, file)?;
                        Ok(())
                    }
                    None => Err("its entries are not inline".to_owned()),
                },
                _ => Err("its entries are not where its format keeps them".to_owned()),
            };
            checked.map_err(|e| invalid(format!("replica {}: {e}", replica.ordinal)))?;
        }
        Ok(self)
    }
}

/// The manifest is forgeable (a tenant can write into its own backups), so before a
/// restore writes anything the tree it describes must be one that can be created without
/// following anything: every entry once, each below a directory entry listed before it.
/// An entry below a symlink entry would otherwise be written through that symlink.
fn check_tree(replica: &Replica) -> std::result::Result<(), String> {
    let mut kinds: HashMap<PathBuf, Kind> = HashMap::new();
    let mut link_targets = LinkTargets::default();
    for entry in &replica.entries {
        let rel = check_entry(entry)?;
        let parent = rel.parent().and_then(|parent| kinds.get(parent).copied());
        check_parent(&rel, parent)?;
        link_targets.check(entry, &rel)?;
        if kinds.insert(rel.clone(), entry.kind).is_some() {
            return Err(format!("entry {rel:?} appears twice"));
        }
    }
    Ok(())
}

/// Checks that the entry at `rel` lies directly beneath a directory entry (or at the
/// top): `parent` is the kind of its parent's entry, if that was listed before it.
pub(crate) fn check_parent(rel: &Path, parent: Option<Kind>) -> std::result::Result<(), String> {
    let Some(parent_path) = rel.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return Ok(());
    };
    match parent {
        Some(Kind::Dir) => Ok(()),
        Some(kind) => Err(format!(
            "entry {rel:?} lies beneath {parent_path:?}, which is a {} entry, not a directory",
            kind.name()
        )),
        None => Err(format!(
            "entry {rel:?} is not preceded by its parent directory {parent_path:?}"
        )),
    }
}

/// The file entries a later entry may be a hard link to: not links themselves, so that a
/// restore links to a file it has written. Held as path digests.
#[derive(Debug, Default)]
pub(crate) struct LinkTargets(HashSet<[u8; 16]>);

impl LinkTargets {
    /// A hard link must be to one of them; a file that is not a link becomes one.
    pub(crate) fn check(&mut self, entry: &Entry, rel: &Path) -> std::result::Result<(), String> {
        if entry.hard_link.is_some() || entry.hard_link_hex.is_some() {
            let first = entry
                .hard_link_to()
                .ok_or_else(|| format!("hard link {rel:?} has an invalid target"))?;
            if entry.kind != Kind::File || !self.0.contains(&path_digest(&first)) {
                return Err(format!(
                    "entry {rel:?} is a hard link to {first:?}, which is not an earlier file entry"
                ));
            }
        } else if entry.kind == Kind::File {
            self.0.insert(path_digest(rel));
        }
        Ok(())
    }
}

/// A path's identity in sets of many paths: 16 bytes of its blake3.
pub(crate) fn path_digest(path: &Path) -> [u8; 16] {
    let hash = blake3::hash(path.as_os_str().as_bytes());
    let mut digest = [0; 16];
    digest.copy_from_slice(&hash.as_bytes()[..16]);
    digest
}

/// A manifest path must be plain names joined by single `/`s; a restore writes exactly
/// there, so `..`, `.`, an absolute path or an empty component is refused. Returns the
/// path.
pub(crate) fn check_entry(entry: &Entry) -> std::result::Result<PathBuf, String> {
    let rel = decode(entry.path.as_deref(), entry.path_hex.as_deref())
        .ok_or_else(|| "an entry has no valid path".to_owned())?;
    let unsafe_component = rel
        .as_os_str()
        .as_bytes()
        .split(|b| *b == b'/')
        .any(|c| c.is_empty() || c == b"." || c == b"..");
    if unsafe_component {
        return Err(format!("entry {rel:?} has an unsafe path"));
    }
    if entry.xattrs.values().any(|value| from_hex(value).is_none()) {
        return Err(format!(
            "entry {rel:?} has an extended attribute that is not hex"
        ));
    }
    if entry
        .pack
        .as_ref()
        .is_some_and(|p| !PackRef::id_is_valid(&p.id))
    {
        return Err(format!("file {rel:?} names an invalid pack"));
    }
    match entry.kind {
        Kind::File if entry.blake3.is_none() => Err(format!("file {rel:?} has no checksum")),
        Kind::File if !entry.blake3.as_deref().is_some_and(is_blake3_hex) => {
            Err(format!("file {rel:?} has an invalid checksum"))
        }
        Kind::Symlink if entry.link_target().is_none() => {
            Err(format!("symlink {rel:?} has no target"))
        }
        _ => Ok(rel),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        let meta = Meta {
            mode: 0o644,
            uid: 1,
            gid: 2,
            mtime: DateTime::from_timestamp(1_700_000_000, 123_456_789).expect("time"),
        };
        let mut file = Entry::new(Path::new("dir/a file\n"), Kind::File, 3, meta);
        file.blake3 = Some(blake3::hash(b"abc").to_hex().to_string());
        let odd = Entry::new(
            Path::new(OsStr::from_bytes(b"bad\xff")),
            Kind::Symlink,
            1,
            meta,
        )
        .with_target(Path::new(OsStr::from_bytes(b"\xfe")));
        Manifest {
            format: 2,
            id: "20261129T150102Z".into(),
            app: "ns/app".into(),
            result: SUCCEEDED.into(),
            start_time: meta.mtime,
            end_time: meta.mtime,
            duration_ms: 0,
            bytes: 3,
            files: 1,
            new_bytes: 3,
            linked_files: 0,
            inconsistent_files: 0,
            ordinals: vec![0],
            replicas: vec![Replica {
                ordinal: 0,
                root: meta,
                root_xattrs: Xattrs::new(),
                entries: vec![odd, Entry::new(Path::new("dir"), Kind::Dir, 0, meta), file],
                entry_file: None,
            }],
            checksum: String::new(),
        }
    }

    /// `sample` as the mover writes it: its entries in their own file.
    fn write_current(dir: &Dir) -> (Manifest, Vec<Entry>) {
        let mut manifest = sample();
        let entries = std::mem::take(&mut manifest.replicas[0].entries);
        let mut writer = crate::entries::EntryWriter::create(dir, 0).expect("create");
        for entry in &entries {
            writer.push(entry).expect("push");
        }
        manifest.replicas[0].entry_file = Some(writer.finish().expect("finish"));
        manifest.write(dir).expect("write");
        (manifest, entries)
    }

    #[test]
    fn pack_ids_and_checksums_become_keys_so_only_plain_hex_is_taken() {
        let at = Path::new("s3://bucket/ns/app/snapshots/20261129T150102Z.json");
        let id = "20261129T150102Z";
        let with_file = |edit: &dyn Fn(&mut Entry)| {
            let mut manifest = sample();
            edit(&mut manifest.replicas[0].entries[2]);
            let sealed = manifest.sealed_inline().expect("seal");
            Manifest::parse_inline(&sealed, at, id).map_err(|e| e.to_string())
        };
        let packed = |id: &str| PackRef {
            id: id.into(),
            offset: 7,
        };
        with_file(&|e| e.pack = Some(packed("0123456789abcdef0123456789abcdef"))).expect("plain");
        for (edit, expected) in [
            (
                &(|e: &mut Entry| e.pack = Some(packed("../../other/ns/app/packs/aa")))
                    as &dyn Fn(&mut Entry),
                "invalid pack",
            ),
            (
                &|e| e.pack = Some(packed("0123456789ABCDEF0123456789ABCDEF")),
                "invalid pack",
            ),
            (&|e| e.blake3 = Some("../data".into()), "invalid checksum"),
            (&|e| e.blake3 = Some("é".repeat(32)), "invalid checksum"),
        ] {
            let error = with_file(edit).expect_err(expected);
            assert!(error.contains(expected), "{error}");
        }
        // A format-2 manifest (from before packs) naming a pack is not trusted either.
        let mut old = sample();
        old.replicas[0].entries[2].pack = Some(packed("0123456789abcdef0123456789abcdef"));
        old.format = 2;
        old.checksum = old.digest().expect("digest");
        let bytes = serde_json::to_vec(&old).expect("json");
        let error = Manifest::parse_inline(&bytes, at, id).expect_err("packed in format 2");
        assert!(error.to_string().contains("before format 4"), "{error}");
    }

    #[test]
    fn an_inline_manifest_for_an_object_store_round_trips_and_refuses_edits() {
        let mut manifest = sample();
        let sealed = manifest.sealed_inline().expect("seal");
        let at = Path::new("s3://bucket/ns/app/snapshots/20261129T150102Z.json");
        let loaded = Manifest::parse_inline(&sealed, at, "20261129T150102Z").expect("parse");
        assert_eq!(loaded.format, INLINE_FORMAT);
        assert_eq!(loaded.replicas[0].entries, manifest.replicas[0].entries);
        // Another id, an edited size, a format-3 manifest (its entries are elsewhere): refused.
        assert!(Manifest::parse_inline(&sealed, at, "20261129T150103Z").is_err());
        let edited = String::from_utf8(sealed.clone())
            .expect("utf-8")
            .replace("\"bytes\":3", "\"bytes\":4");
        assert_ne!(edited.as_bytes(), sealed.as_slice());
        let error = Manifest::parse_inline(edited.as_bytes(), at, "20261129T150102Z")
            .expect_err("edited")
            .to_string();
        assert!(
            error.contains("checksum does not match") && error.contains("s3://bucket"),
            "{error}"
        );
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = Dir::open_trusted(tmp.path()).expect("open");
        write_current(&dir);
        let current = std::fs::read(tmp.path().join(MANIFEST_FILE)).expect("read");
        let error = Manifest::parse_inline(&current, at, "20261129T150102Z")
            .expect_err("format 3")
            .to_string();
        assert!(error.contains("not inline"), "{error}");
    }

    #[test]
    fn round_trips_and_refuses_edits() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = Dir::open_trusted(tmp.path()).expect("open");
        let (_, entries) = write_current(&dir);
        let loaded = Manifest::load(&dir, "20261129T150102Z").expect("load");
        assert_eq!(loaded.format, FORMAT);
        let back: Vec<Entry> = crate::entries::read(&dir, &loaded.replicas[0])
            .expect("read")
            .collect::<Result<_>>()
            .expect("entries");
        assert_eq!(back, entries);
        assert_eq!(back[0].rel_path().as_os_str().as_bytes(), b"bad\xff");
        assert!(Manifest::load(&dir, "20261129T150103Z").is_err());

        let path = tmp.path().join(MANIFEST_FILE);
        let text = std::fs::read_to_string(&path).expect("read");
        std::fs::write(&path, text.replace("\"bytes\": 3", "\"bytes\": 4")).expect("edit");
        let err = Manifest::load(&dir, "20261129T150102Z").expect_err("edited");
        assert!(err.to_string().contains("manifest.json"), "{err}");

        // The entries file is sealed by the manifest.
        write_current(&dir);
        let path = tmp.path().join("entries-0.jsonl");
        let text = std::fs::read_to_string(&path).expect("read");
        std::fs::write(&path, text.replace("\"size\":3", "\"size\":4")).expect("edit");
        let err = Manifest::load(&dir, "20261129T150102Z").expect_err("edited");
        assert!(err.to_string().contains("entries-0.jsonl"), "{err}");
    }

    #[test]
    fn manifests_of_formats_1_and_2_still_load() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = Dir::open_trusted(tmp.path()).expect("open");
        for format in [1, 2] {
            let mut manifest = sample();
            manifest.format = format;
            manifest.checksum = manifest.digest().expect("digest");
            let text = serde_json::to_vec_pretty(&manifest).expect("json");
            dir.write_file(MANIFEST_FILE, &text).expect("write");
            let loaded = Manifest::load(&dir, "20261129T150102Z").expect("load");
            assert_eq!(loaded.format, format);
            let back: Vec<Entry> = crate::entries::read(&dir, &loaded.replicas[0])
                .expect("read")
                .collect::<Result<_>>()
                .expect("entries");
            assert_eq!(back, manifest.replicas[0].entries);
        }
        // Sealed the old way, it is refused the new way.
        let mut manifest = sample();
        manifest.format = 1;
        manifest.checksum = manifest.digest().expect("digest");
        manifest.format = 2;
        let text = serde_json::to_vec_pretty(&manifest).expect("json");
        dir.write_file(MANIFEST_FILE, &text).expect("write");
        assert!(Manifest::load(&dir, "20261129T150102Z").is_err());
        // Format 3 keeps no entries inline.
        let mut manifest = sample();
        manifest.format = 3;
        manifest.checksum = manifest.digest().expect("digest");
        let text = serde_json::to_vec_pretty(&manifest).expect("json");
        dir.write_file(MANIFEST_FILE, &text).expect("write");
        let err = Manifest::load(&dir, "20261129T150102Z").expect_err("inline in format 3");
        assert!(err.to_string().contains("not where its format"), "{err}");
    }

    #[test]
    fn refuses_paths_escaping_the_volume() {
        let meta = sample().replicas[0].root;
        for bad in [
            "../x",
            "/etc/passwd",
            "a/../../b",
            "",
            "a/",
            "a//b",
            "./a",
            "a/./b",
        ] {
            let entry = Entry::new(Path::new(bad), Kind::Dir, 0, meta);
            assert!(check_entry(&entry).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn refuses_trees_a_restore_would_write_through_a_non_directory() {
        let meta = sample().replicas[0].root;
        let dir = |p: &str| Entry::new(Path::new(p), Kind::Dir, 0, meta);
        let link =
            |p: &str| Entry::new(Path::new(p), Kind::Symlink, 1, meta).with_target(Path::new("/x"));
        let file = |p: &str| {
            let mut e = Entry::new(Path::new(p), Kind::File, 0, meta);
            e.blake3 = Some(blake3::hash(b"").to_hex().to_string());
            e
        };
        let cases: Vec<(Vec<Entry>, Option<&str>)> = vec![
            (
                vec![
                    dir("a"),
                    file("a/x"),
                    link("a/l"),
                    dir("a/b"),
                    file("a/b/y"),
                ],
                None,
            ),
            (
                vec![link("a"), file("a/x")],
                Some("beneath \"a\", which is a symlink"),
            ),
            (
                vec![file("a"), dir("a/x")],
                Some("beneath \"a\", which is a file"),
            ),
            (
                vec![dir("a"), file("a/x"), file("a/x")],
                Some("\"a/x\" appears twice"),
            ),
            (vec![dir("a"), dir("a")], Some("\"a\" appears twice")),
            (
                vec![file("a/x"), dir("a")],
                Some("not preceded by its parent"),
            ),
            (vec![dir("a"), file("a/../x")], Some("unsafe path")),
            (
                vec![file("x"), file("y").with_hard_link(Path::new("x"))],
                None,
            ),
            (
                vec![file("y").with_hard_link(Path::new("x")), file("x")],
                Some("not an earlier file entry"),
            ),
            (
                vec![dir("d"), file("y").with_hard_link(Path::new("d"))],
                Some("not an earlier file entry"),
            ),
            (
                vec![
                    file("x"),
                    file("y").with_hard_link(Path::new("x")),
                    file("z").with_hard_link(Path::new("y")),
                ],
                Some("not an earlier file entry"),
            ),
        ];
        for (entries, expected) in cases {
            let replica = Replica {
                ordinal: 0,
                root: meta,
                root_xattrs: Xattrs::new(),
                entries,
                entry_file: None,
            };
            match (check_tree(&replica), expected) {
                (Ok(()), None) => {}
                (Err(e), Some(text)) => assert!(e.contains(text), "{e}"),
                (got, _) => panic!("{got:?} for {:?}", replica.entries),
            }
        }
    }
}
