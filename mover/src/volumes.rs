//! The replica volumes under `--source` / `--dest`: one subdirectory per ordinal.

use std::path::Path;

use rustix::fs::FileType;
use serde::Serialize;

use crate::confined::Dir;
use crate::error::{MoverError, Result};

/// The ordinal subdirectories of `root`, ascending, each opened without following a
/// symlink. Anything else is ignored with a warning (a `lost+found`, a stray file, a
/// symlink): only `0`, `1`, ... are replica volumes.
pub(crate) fn ordinal_dirs(root: &Path) -> Result<Vec<(u32, Dir)>> {
    let root = Dir::open_trusted(root)?;
    let mut out = Vec::new();
    for name in root.names()? {
        let ordinal = name.to_str().and_then(parse_ordinal);
        let inode = root.lstat(&name)?;
        match ordinal {
            Some(ordinal) if inode.kind == FileType::Directory => {
                out.push((ordinal, root.open_dir_as(Path::new(&name), &inode)?));
            }
            _ => crate::warn(format!(
                "ignoring {}: not a replica volume (a directory named by ordinal)",
                root.join(&name).display()
            )),
        }
    }
    if out.is_empty() {
        return Err(MoverError::NoOrdinals(root.path().to_owned()));
    }
    out.sort_by_key(|(ordinal, _)| *ordinal);
    Ok(out)
}

/// What `wipe` did.
#[derive(Debug, Clone, Serialize)]
pub struct WipeOutcome {
    /// The ordinals whose volumes were emptied.
    pub wiped: Vec<u32>,
    /// Files, directories and symlinks removed.
    pub entries: u64,
}

/// Removes everything inside each ordinal volume under `dest`, keeping the volumes
/// themselves (mount points), without following any symlink: for a deleted app, whose
/// data must not survive for the next app of the same name.
pub fn wipe(dest: &Path) -> Result<WipeOutcome> {
    let volumes = ordinal_dirs(dest)?;
    let mut entries = 0;
    for (_, volume) in &volumes {
        entries += volume.remove_contents()?;
        volume.sync()?;
    }
    Ok(WipeOutcome {
        wiped: volumes.iter().map(|(ordinal, _)| *ordinal).collect(),
        entries,
    })
}

/// `"0"`, `"1"`, ... but not `"01"` or `"+1"`: one spelling per ordinal.
fn parse_ordinal(name: &str) -> Option<u32> {
    if name.is_empty() || (name.len() > 1 && name.starts_with('0')) {
        return None;
    }
    if !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_have_one_spelling() {
        assert_eq!(parse_ordinal("0"), Some(0));
        assert_eq!(parse_ordinal("12"), Some(12));
        for bad in ["", "01", "+1", "-1", "a", "1a", "99999999999"] {
            assert_eq!(parse_ordinal(bad), None, "{bad:?}");
        }
    }
}
