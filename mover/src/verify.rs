//! Checking a snapshot against its manifest.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};

use rustix::fs::FileType;
use serde::Serialize;

use crate::catalog::{self, Snapshot};
use crate::confined::Dir;
use crate::entries::{self, BATCH};
use crate::error::Result;
use crate::fsops;
use crate::lock;
use crate::manifest::{Entry, Kind, MANIFEST_FILE, path_digest};
use crate::names::{App, Selector};

/// How long `verify` waits for a running backup or prune.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// What `verify` found.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyReport {
    /// The snapshot checked.
    pub id: String,
    /// Files checked.
    pub files: u64,
    /// Bytes hashed.
    pub bytes: u64,
    /// One line per bad, missing or unexpected file, naming it; empty if all is well.
    pub problems: Vec<String>,
}

/// Recomputes every checksum of the selected snapshot. A snapshot whose manifest is
/// missing or invalid is an error; damaged files are listed in the report.
pub fn verify(app: &App, selector: &Selector) -> Result<VerifyReport> {
    let _lock = match catalog::open_app_dir(app)? {
        Some(dir) => lock::shared(&dir, LOCK_WAIT)?,
        None => None,
    };
    let snapshot = catalog::resolve(app, selector)?;
    let problems = check(&snapshot)?;
    Ok(VerifyReport {
        id: snapshot.id.to_string(),
        files: snapshot.manifest.files,
        bytes: snapshot.manifest.bytes,
        problems,
    })
}

/// Every discrepancy between `snapshot` and its manifest, one line each. Everything is
/// read beneath the snapshot directory without following symlinks: a forged snapshot
/// must not make verify read (and so compare) a file outside it. Entries are streamed and
/// checked a batch at a time; what the walk must find is held as 16-byte digests.
pub(crate) fn check(snapshot: &Snapshot) -> Result<Vec<String>> {
    let dir = &snapshot.handle;
    let mut expected: HashSet<[u8; 16]> = HashSet::new();
    let mut problems = Vec::new();
    for replica in &snapshot.manifest.replicas {
        let root = PathBuf::from(replica.ordinal.to_string());
        expected.insert(path_digest(&root));
        let mut batch = Vec::new();
        for entry in entries::read(dir, replica)? {
            let entry = entry?;
            let rel = root.join(entry.rel_path());
            expected.insert(path_digest(&rel));
            batch.push((rel, entry));
            if batch.len() >= BATCH {
                problems.extend(check_batch(dir, &std::mem::take(&mut batch))?);
            }
        }
        problems.extend(check_batch(dir, &batch)?);
    }
    let walked = dir.walk(
        |_| false,
        |rel, _| {
            let bookkeeping = rel == Path::new(MANIFEST_FILE)
                || snapshot
                    .manifest
                    .replicas
                    .iter()
                    .any(|r| rel == Path::new(&r.entry_file_name()) && r.entry_file.is_some());
            if !bookkeeping && !expected.contains(&path_digest(rel)) {
                problems.push(format!("{}: not in the manifest", dir.join(rel).display()));
            }
            Ok(())
        },
    );
    if let Err(e) = walked {
        problems.push(format!("cannot walk the snapshot: {}", crate::chain(&e)));
    }
    Ok(problems)
}

/// The problems of a batch of (path in the snapshot, entry), checked in parallel.
fn check_batch(dir: &Dir, batch: &[(PathBuf, Entry)]) -> Result<Vec<String>> {
    Ok(fsops::par_map(batch, |(rel, entry), buf| {
        let problem = |what: &str| Ok(Some(format!("{}: {what}", dir.join(rel).display())));
        let lstat = match dir.lstat(rel) {
            Ok(lstat) => lstat,
            Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => return problem("missing"),
            Err(e) => return problem(&format!("cannot stat: {}", crate::chain(&e))),
        };
        match entry.kind {
            Kind::Dir if lstat.kind != FileType::Directory => problem("not a directory"),
            Kind::Symlink if lstat.kind != FileType::Symlink => problem("not a symlink"),
            Kind::Symlink => match dir.read_link(rel) {
                Ok(target) if Some(&target) == entry.link_target().as_ref() => Ok(None),
                Ok(_) => problem("symlink target differs from the manifest"),
                Err(e) => problem(&format!("cannot read symlink: {}", crate::chain(&e))),
            },
            Kind::File if lstat.kind != FileType::RegularFile => problem("not a regular file"),
            Kind::File => {
                let hash = dir.open_file(rel).and_then(|f| {
                    fsops::hash_file(&f, buf).map_err(crate::error::io_err("read", dir.join(rel)))
                });
                match hash {
                    Err(e) => problem(&format!("cannot read: {}", crate::chain(&e))),
                    Ok(_) if lstat.size != entry.size => problem(&format!(
                        "{} bytes, the manifest says {}",
                        lstat.size, entry.size
                    )),
                    Ok(hash) if entry.blake3.as_deref() != Some(hash.to_hex().as_str()) => {
                        problem("contents do not match the manifest checksum")
                    }
                    Ok(_) => Ok(None),
                }
            }
            Kind::Dir => Ok(None),
        }
    })?
    .into_iter()
    .flatten()
    .collect())
}
