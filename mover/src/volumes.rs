//! The replica volumes under `--source` / `--dest`: one subdirectory per ordinal.

use std::path::Path;

use rustix::fs::FileType;
use serde::Serialize;

use crate::confined::Dir;
use crate::error::{MoverError, Result, io_err};

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

/// Who a prepared volume belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeOwner {
    pub uid: u32,
    pub gid: u32,
    /// Permission bits of the volume's root directory (with setgid, new files take its
    /// group, as kubelet's fsGroup handling does).
    pub mode: u32,
}

/// What `prepare` did.
#[derive(Debug, Clone, Serialize)]
pub struct PrepareOutcome {
    /// The ordinals whose volumes now belong to the owner.
    pub prepared: Vec<u32>,
    /// `uid:gid`.
    pub owner: String,
    /// The root directories' mode, in octal.
    pub mode: String,
}

/// Gives the root directory of each ordinal volume under `dest` to `owner`, so that an
/// app running as that (non-root) user can write into volumes whose type takes no fsGroup
/// (static hostPath volumes: the kubelet makes their directory root's). Only the root:
/// the files in it keep their owners. Idempotent, so it can simply run again.
pub fn prepare(dest: &Path, owner: VolumeOwner) -> Result<PrepareOutcome> {
    let volumes = ordinal_dirs(dest)?;
    for (_, volume) in &volumes {
        let path = volume.path();
        // chown first: it clears the setgid bit, which the chmod then sets.
        rustix::fs::fchown(
            volume,
            Some(rustix::fs::Uid::from_raw(owner.uid)),
            Some(rustix::fs::Gid::from_raw(owner.gid)),
        )
        .map_err(|e| io_err("set the owner of", path)(e.into()))?;
        rustix::fs::fchmod(volume, rustix::fs::Mode::from_raw_mode(owner.mode))
            .map_err(|e| io_err("set the mode of", path)(e.into()))?;
        volume.sync()?;
    }
    Ok(PrepareOutcome {
        prepared: volumes.iter().map(|(ordinal, _)| *ordinal).collect(),
        owner: format!("{}:{}", owner.uid, owner.gid),
        mode: format!("{:o}", owner.mode),
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
    fn prepare_gives_each_volume_root_to_the_owner_and_leaves_its_files_alone() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dest = tempfile::tempdir().expect("tempdir");
        for ordinal in ["0", "1"] {
            std::fs::create_dir(dest.path().join(ordinal)).expect("mkdir");
            std::fs::set_permissions(
                dest.path().join(ordinal),
                std::fs::Permissions::from_mode(0o755),
            )
            .expect("chmod");
        }
        std::fs::write(dest.path().join("0/kept"), "x").expect("write");
        let kept_mode = std::fs::metadata(dest.path().join("0/kept"))
            .expect("stat")
            .mode();
        // Our own ids: the test needs no privilege, and the mode shows the call was made.
        let owner = VolumeOwner {
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
            mode: 0o2770,
        };
        let outcome = prepare(dest.path(), owner).expect("prepare");
        assert_eq!(outcome.prepared, [0, 1]);
        for ordinal in ["0", "1"] {
            let meta = std::fs::metadata(dest.path().join(ordinal)).expect("stat");
            assert_eq!((meta.uid(), meta.gid()), (owner.uid, owner.gid));
            assert_eq!(meta.mode() & 0o7777, 0o2770, "{ordinal}");
        }
        let kept = std::fs::metadata(dest.path().join("0/kept")).expect("stat");
        assert_eq!(kept.mode(), kept_mode);
        // Again: the same.
        assert_eq!(prepare(dest.path(), owner).expect("again").prepared, [0, 1]);
    }

    #[test]
    fn ordinals_have_one_spelling() {
        assert_eq!(parse_ordinal("0"), Some(0));
        assert_eq!(parse_ordinal("12"), Some(12));
        for bad in ["", "01", "+1", "-1", "a", "1a", "99999999999"] {
            assert_eq!(parse_ordinal(bad), None, "{bad:?}");
        }
    }
}
