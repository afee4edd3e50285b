//! Checking a snapshot against its manifest.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::PathBuf;

use serde::Serialize;
use walkdir::WalkDir;

use crate::catalog::{self, Snapshot};
use crate::error::Result;
use crate::fsops;
use crate::lock;
use crate::manifest::{Kind, MANIFEST_FILE};
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
    let app_dir = app.dir();
    let _lock = if app_dir.exists() {
        lock::shared(&app_dir, LOCK_WAIT)?
    } else {
        None
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

/// Every discrepancy between `snapshot` and its manifest, one line each.
pub(crate) fn check(snapshot: &Snapshot) -> Result<Vec<String>> {
    let mut expected: HashSet<PathBuf> = HashSet::new();
    let mut items = Vec::new();
    for replica in &snapshot.manifest.replicas {
        let root = snapshot.dir.join(replica.ordinal.to_string());
        expected.insert(root.clone());
        for entry in &replica.entries {
            let path = root.join(entry.rel_path());
            expected.insert(path.clone());
            items.push((path, entry));
        }
    }
    let mut problems: Vec<String> = fsops::par_map(&items, |(path, entry), buf| {
        let problem = |what: &str| Ok(Some(format!("{}: {what}", path.display())));
        let lstat = match fs::symlink_metadata(path) {
            Ok(md) => md,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return problem("missing"),
            Err(e) => return problem(&format!("cannot stat: {e}")),
        };
        match entry.kind {
            Kind::Dir if !lstat.is_dir() => problem("not a directory"),
            Kind::Symlink if !lstat.file_type().is_symlink() => problem("not a symlink"),
            Kind::Symlink => match fs::read_link(path) {
                Ok(target) if Some(&target) == entry.link_target().as_ref() => Ok(None),
                Ok(_) => problem("symlink target differs from the manifest"),
                Err(e) => problem(&format!("cannot read symlink: {e}")),
            },
            Kind::File if !lstat.is_file() => problem("not a regular file"),
            Kind::File => {
                let hash = fsops::open_nofollow(path).and_then(|f| fsops::hash_file(&f, buf));
                match hash {
                    Err(e) => problem(&format!("cannot read: {e}")),
                    Ok(_) if lstat.len() != entry.size => problem(&format!(
                        "{} bytes, the manifest says {}",
                        lstat.len(),
                        entry.size
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
    .collect();

    let manifest_path = snapshot.dir.join(MANIFEST_FILE);
    for item in WalkDir::new(&snapshot.dir).min_depth(1) {
        match item {
            Ok(entry) if entry.path() == manifest_path => {}
            Ok(entry) if !expected.contains(entry.path()) => {
                problems.push(format!("{}: not in the manifest", entry.path().display()));
            }
            Ok(_) => {}
            Err(e) => problems.push(format!("cannot walk the snapshot: {e}")),
        }
    }
    Ok(problems)
}
