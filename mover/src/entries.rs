//! A replica's entries, streamed one at a time (manifest format 3).
//!
//! A snapshot of 200,000 files has 200,000 entries; holding them (and the previous
//! snapshot's) in memory is what made the mover's memory grow with the data. Format 3
//! writes them as JSON lines into `entries-<ordinal>.jsonl`, in path order, sealed by
//! the manifest with their count, size and blake3. Readers stream them back, checking
//! as they go what [`crate::manifest`] checks of an inline tree: with the order fixed,
//! that needs only the chain of ancestors of the current entry (and a 16-byte digest per
//! file, for hard links), not every path seen.

use std::cmp::Ordering;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;

use crate::confined::Dir;
use crate::error::{MoverError, Result, io_err};
use crate::fsops;
use crate::manifest::{self, Entry, EntryFile, Kind, LinkTargets, Replica};

/// Entries handled at a time by backup, restore and verify: memory holds one batch,
/// however many files a volume has.
pub(crate) const BATCH: usize = 4096;

/// Writes one replica's entries file, hashing it as it goes.
pub(crate) struct EntryWriter {
    file: BufWriter<File>,
    path: PathBuf,
    hasher: blake3::Hasher,
    line: Vec<u8>,
    count: u64,
    bytes: u64,
}

impl EntryWriter {
    /// Creates the entries file of replica `ordinal` in `snapshot`.
    pub(crate) fn create(snapshot: &Dir, ordinal: u32) -> Result<Self> {
        let name = manifest::entry_file_name(ordinal);
        Ok(Self {
            file: BufWriter::new(snapshot.create_truncated(&name)?),
            path: snapshot.join(&name),
            hasher: blake3::Hasher::new(),
            line: Vec::new(),
            count: 0,
            bytes: 0,
        })
    }

    /// Appends `entry`; entries must come in path order.
    pub(crate) fn push(&mut self, entry: &Entry) -> Result<()> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, entry).map_err(|source| {
            MoverError::ManifestParse {
                path: self.path.clone(),
                source,
            }
        })?;
        self.line.push(b'\n');
        self.hasher.update(&self.line);
        self.file
            .write_all(&self.line)
            .map_err(io_err("write", &self.path))?;
        self.count += 1;
        self.bytes += self.line.len() as u64;
        Ok(())
    }

    /// Flushes the file (made durable with the snapshot's `syncfs`) and returns what the
    /// manifest records of it.
    pub(crate) fn finish(self) -> Result<EntryFile> {
        self.file
            .into_inner()
            .map_err(|e| io_err("write", &self.path)(e.into_error()))?;
        Ok(EntryFile {
            count: self.count,
            bytes: self.bytes,
            blake3: self.hasher.finalize().to_hex().to_string(),
        })
    }
}

/// Checks that replica's entries file in `snapshot` is the one the (sealed) manifest
/// recorded: same size and blake3. Reads it without keeping it.
pub(crate) fn check_file(snapshot: &Dir, replica: &Replica, recorded: &EntryFile) -> Result<()> {
    let name = replica.entry_file_name();
    let path = snapshot.join(&name);
    let file = snapshot.open_file(&name)?;
    let bytes = file.metadata().map_err(io_err("stat", &path))?.len();
    let hash = fsops::hash_file(&file, &mut Vec::new()).map_err(io_err("read", &path))?;
    if bytes != recorded.bytes || hash.to_hex().as_str() != recorded.blake3 {
        return Err(MoverError::ManifestInvalid {
            path,
            reason: "its checksum does not match the manifest (edited or damaged); refusing \
                     to trust it"
                .into(),
        });
    }
    Ok(())
}

/// A replica's entries in manifest order, each checked (see [`TreeCheck`]); inline in
/// manifests of formats 1 and 2 (checked whole when loaded), streamed from the entries
/// file in format 3. The file is read again, not trusted from when the manifest was
/// loaded: its count and checksum are checked once more at its end, so a consumer must
/// read to the end (`None`) before it trusts what it did with the entries.
pub(crate) enum Entries<'a> {
    /// Formats 1 and 2.
    Inline(std::slice::Iter<'a, Entry>),
    /// Format 3.
    File(Box<EntryReader>),
}

/// The entries of `replica` of the snapshot in `snapshot`, whose manifest was loaded.
pub(crate) fn read<'a>(snapshot: &Dir, replica: &'a Replica) -> Result<Entries<'a>> {
    let Some(recorded) = &replica.entry_file else {
        return Ok(Entries::Inline(replica.entries.iter()));
    };
    let name = replica.entry_file_name();
    Ok(Entries::File(Box::new(EntryReader {
        file: BufReader::with_capacity(64 * 1024, snapshot.open_file(&name)?),
        path: snapshot.join(&name),
        ordinal: replica.ordinal,
        recorded: recorded.clone(),
        hasher: blake3::Hasher::new(),
        line: Vec::new(),
        count: 0,
        bytes: 0,
        tree: TreeCheck::default(),
        done: false,
    })))
}

impl Iterator for Entries<'_> {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Entries::Inline(entries) => entries.next().cloned().map(Ok),
            Entries::File(reader) => reader.next(),
        }
    }
}

/// Streams an entries file (see [`Entries`]).
pub(crate) struct EntryReader {
    file: BufReader<File>,
    path: PathBuf,
    ordinal: u32,
    recorded: EntryFile,
    hasher: blake3::Hasher,
    line: Vec<u8>,
    count: u64,
    bytes: u64,
    tree: TreeCheck,
    done: bool,
}

impl EntryReader {
    fn invalid(&mut self, reason: String) -> Option<Result<Entry>> {
        self.done = true;
        Some(Err(MoverError::ManifestInvalid {
            path: self.path.clone(),
            reason,
        }))
    }

    fn end(&mut self) -> Option<Result<Entry>> {
        self.done = true;
        let digest = std::mem::take(&mut self.hasher).finalize();
        if self.count != self.recorded.count
            || self.bytes != self.recorded.bytes
            || digest.to_hex().as_str() != self.recorded.blake3
        {
            return self.invalid(
                "it changed since its manifest was checked (edited while in use?); refusing to \
                 trust it"
                    .into(),
            );
        }
        None
    }
}

impl Iterator for EntryReader {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        self.line.clear();
        let n = match self.file.read_until(b'\n', &mut self.line) {
            Ok(0) => return self.end(),
            Ok(n) => n,
            Err(e) => {
                self.done = true;
                return Some(Err(io_err("read", &self.path)(e)));
            }
        };
        self.hasher.update(&self.line);
        self.bytes += n as u64;
        self.count += 1;
        let entry: Entry = match serde_json::from_slice(&self.line) {
            Ok(entry) => entry,
            Err(e) => return self.invalid(format!("line {}: {e}", self.count)),
        };
        if let Err(e) = self.tree.check(&entry) {
            return self.invalid(format!("replica {}: {e}", self.ordinal));
        }
        Some(Ok(entry))
    }
}

/// The streaming form of the manifest's tree check (format 3), for a tree a restore can
/// write without following anything: entries strictly in path order (so none twice),
/// each below a directory entry (its parent, among the ancestors of the entries before
/// it), hard links only to earlier file entries that are not links themselves.
#[derive(Debug, Default)]
pub(crate) struct TreeCheck {
    last: Option<PathBuf>,
    /// The previous entry and those of its ancestors that have entries, outermost first.
    ancestors: Vec<(PathBuf, Kind)>,
    link_targets: LinkTargets,
}

impl TreeCheck {
    /// Checks the next entry; returns its path.
    pub(crate) fn check(&mut self, entry: &Entry) -> std::result::Result<PathBuf, String> {
        let rel = manifest::check_entry(entry)?;
        if let Some(last) = &self.last {
            match rel.cmp(last) {
                Ordering::Greater => {}
                Ordering::Equal => return Err(format!("entry {rel:?} appears twice")),
                Ordering::Less => {
                    return Err(format!(
                        "entry {rel:?} comes after {last:?}: entries must be in path order"
                    ));
                }
            }
        }
        while self
            .ancestors
            .last()
            .is_some_and(|(above, _)| !rel.starts_with(above))
        {
            self.ancestors.pop();
        }
        let parent = self
            .ancestors
            .last()
            .filter(|(above, _)| Some(above.as_path()) == rel.parent())
            .map(|(_, kind)| *kind);
        manifest::check_parent(&rel, parent)?;
        self.link_targets.check(entry, &rel)?;
        self.ancestors.push((rel.clone(), entry.kind));
        self.last = Some(rel.clone());
        Ok(rel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{Meta, Xattrs};
    use chrono::DateTime;
    use std::path::Path;

    fn meta() -> Meta {
        Meta {
            mode: 0o644,
            uid: 1,
            gid: 2,
            mtime: DateTime::from_timestamp(1_700_000_000, 0).expect("time"),
        }
    }

    fn dir(p: &str) -> Entry {
        Entry::new(Path::new(p), Kind::Dir, 0, meta())
    }

    fn file(p: &str) -> Entry {
        let mut e = Entry::new(Path::new(p), Kind::File, 0, meta());
        e.blake3 = Some(blake3::hash(b"").to_hex().to_string());
        e
    }

    fn link(p: &str) -> Entry {
        Entry::new(Path::new(p), Kind::Symlink, 1, meta()).with_target(Path::new("/x"))
    }

    fn check(entries: &[Entry]) -> std::result::Result<(), String> {
        let mut tree = TreeCheck::default();
        entries.iter().try_for_each(|e| tree.check(e).map(drop))
    }

    #[test]
    fn accepts_a_walk_in_path_order_and_refuses_what_a_restore_would_write_through() {
        let walk = [
            dir("a"),
            dir("a/b"),
            file("a/b/y"),
            link("a/l"),
            file("a/x"),
            file("a-z"),
            file("b").with_hard_link(Path::new("a/x")),
        ];
        assert_eq!(check(&walk), Ok(()));
        let cases: Vec<(Vec<Entry>, &str)> = vec![
            (
                vec![link("a"), file("a/x")],
                "beneath \"a\", which is a symlink",
            ),
            (
                vec![file("a"), dir("a/x")],
                "beneath \"a\", which is a file",
            ),
            (
                vec![dir("a"), file("a/x"), file("a/x")],
                "\"a/x\" appears twice",
            ),
            (vec![file("a/x"), dir("a")], "not preceded by its parent"),
            (vec![dir("b"), dir("a")], "must be in path order"),
            (vec![dir("a"), file("a/../x")], "unsafe path"),
            // The parent's entry must be the directory itself, not a cousin of its name.
            (vec![dir("a"), file("a-z/x")], "not preceded by its parent"),
            (
                vec![dir("d"), file("y").with_hard_link(Path::new("d"))],
                "not an earlier file entry",
            ),
            (
                vec![
                    file("x"),
                    file("y").with_hard_link(Path::new("x")),
                    file("z").with_hard_link(Path::new("y")),
                ],
                "not an earlier file entry",
            ),
        ];
        for (entries, expected) in cases {
            match check(&entries) {
                Err(e) => assert!(e.contains(expected), "{e} for {entries:?}"),
                Ok(()) => panic!("accepted {entries:?}"),
            }
        }
    }

    #[test]
    fn a_written_file_reads_back_and_any_edit_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let snapshot = Dir::open_trusted(tmp.path()).expect("open");
        let mut writer = EntryWriter::create(&snapshot, 0).expect("create");
        let entries = [dir("a"), file("a/x"), file("b")];
        for entry in &entries {
            writer.push(entry).expect("push");
        }
        let replica = Replica {
            ordinal: 0,
            root: meta(),
            root_xattrs: Xattrs::new(),
            entries: Vec::new(),
            entry_file: Some(writer.finish().expect("finish")),
        };
        let recorded = replica.entry_file.clone().expect("file");
        check_file(&snapshot, &replica, &recorded).expect("sealed");
        let back: Vec<Entry> = read(&snapshot, &replica)
            .expect("read")
            .collect::<Result<_>>()
            .expect("entries");
        assert_eq!(back, entries);

        // Edited after the manifest was loaded: the reader fails at its end.
        let path = tmp.path().join("entries-0.jsonl");
        let text = std::fs::read_to_string(&path).expect("read");
        std::fs::write(&path, text.replace("\"size\":0", "\"size\":1")).expect("edit");
        assert!(check_file(&snapshot, &replica, &recorded).is_err());
        let last = read(&snapshot, &replica).expect("read").last();
        assert!(
            matches!(last, Some(Err(MoverError::ManifestInvalid { .. }))),
            "{last:?}"
        );
    }
}
