//! The replica volumes under `--source` / `--dest`: one subdirectory per ordinal.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{MoverError, Result, io_err};

/// The ordinal subdirectories of `root`, ascending. Anything else is ignored with a
/// warning (a `lost+found`, a stray file): only `0`, `1`, ... are replica volumes.
pub(crate) fn ordinal_dirs(root: &Path) -> Result<Vec<(u32, PathBuf)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(root).map_err(io_err("list", root))? {
        let entry = entry.map_err(io_err("list", root))?;
        let path = entry.path();
        let ordinal = entry.file_name().to_str().and_then(parse_ordinal);
        let is_dir = entry.file_type().map_err(io_err("stat", &path))?.is_dir();
        match ordinal {
            Some(ordinal) if is_dir => out.push((ordinal, path)),
            _ => crate::warn(format!(
                "ignoring {}: not a replica volume (a directory named by ordinal)",
                path.display()
            )),
        }
    }
    if out.is_empty() {
        return Err(MoverError::NoOrdinals(root.to_owned()));
    }
    out.sort();
    Ok(out)
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
