//! Names that end up in paths: the app (`namespace/name`) and backup ids. Both are
//! validated strictly wherever they are accepted, so nothing a user types can make the
//! mover read or write outside `<target>/<namespace>/<name>/`.

use std::cmp::Ordering;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use chrono::{DateTime, NaiveDateTime, Utc};

use crate::error::{MoverError, Result};

/// One app's place in the backup target: `<target>/<namespace>/<name>/`.
#[derive(Debug, Clone)]
pub struct App {
    target: PathBuf,
    namespace: String,
    name: String,
}

impl App {
    /// Validates `namespace` (a DNS-1123 label, as Kubernetes requires for namespaces)
    /// and `name` (a DNS-1123 subdomain, as for object names).
    pub fn new(target: impl Into<PathBuf>, namespace: &str, name: &str) -> Result<Self> {
        check_label("namespace", namespace, 63)?;
        check_subdomain("name", name)?;
        Ok(Self {
            target: target.into(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }

    /// The backup root this app lives under.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// `<target>/<namespace>/<name>`: holds the snapshots, `.lock` and `.tmp-*` leftovers.
    pub fn dir(&self) -> PathBuf {
        self.target.join(self.rel_dir())
    }

    /// `<namespace>/<name>`: the app directory relative to the target.
    pub(crate) fn rel_dir(&self) -> PathBuf {
        Path::new(&self.namespace).join(&self.name)
    }

    /// `namespace/name`, for messages.
    pub fn label(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The plugin's command that deletes backup `id` of this app.
    pub fn delete_command(&self, id: &BackupId) -> String {
        format!(
            "kubectl hellostateful -n {} backups delete {} {id}",
            self.namespace, self.name
        )
    }
}

fn check_label(what: &'static str, value: &str, max: usize) -> Result<()> {
    let bad = |reason| {
        Err(MoverError::InvalidName {
            what,
            value: value.to_owned(),
            reason,
        })
    };
    if value.is_empty() {
        return bad("must not be empty");
    }
    if value.len() > max {
        return bad("too long");
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return bad("only lowercase letters, digits and '-' are allowed");
    }
    if value.starts_with('-') || value.ends_with('-') {
        return bad("must start and end with a letter or digit");
    }
    Ok(())
}

fn check_subdomain(what: &'static str, value: &str) -> Result<()> {
    if value.len() > 253 {
        return Err(MoverError::InvalidName {
            what,
            value: value.to_owned(),
            reason: "too long",
        });
    }
    // Splitting on '.' and checking every part as a label also refuses "", ".", ".."
    // and "a..b": each part must be non-empty.
    value
        .split('.')
        .try_for_each(|part| check_label(what, part, 63))
        .map_err(|_| MoverError::InvalidName {
            what,
            value: value.to_owned(),
            reason: "must be a DNS subdomain: lowercase letters, digits, '-' and '.', \
                     each dot-separated part starting and ending with a letter or digit",
        })
}

const STAMP_FORMAT: &str = "%Y%m%dT%H%M%SZ";
const STAMP_LEN: usize = 16;

/// A backup id: the UTC start time `20261129T150102Z`, with a `-N` suffix (N ≥ 2) when
/// that second is already taken. Ordered by time, then suffix number, so sorting ids
/// sorts snapshots oldest to newest (plain string order would put `-10` before `-2`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BackupId {
    text: String,
    seq: u32,
}

impl BackupId {
    /// The id for a backup started at `time` (no suffix).
    pub fn at(time: DateTime<Utc>) -> Self {
        Self {
            text: time.format(STAMP_FORMAT).to_string(),
            seq: 1,
        }
    }

    /// The same second with the next suffix: `X` → `X-2` → `X-3`.
    pub fn next(&self) -> Self {
        let seq = self.seq + 1;
        Self {
            text: format!("{}-{seq}", self.stamp()),
            seq,
        }
    }

    fn stamp(&self) -> &str {
        &self.text[..STAMP_LEN]
    }

    /// The id as text (also the snapshot's directory name).
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl FromStr for BackupId {
    type Err = MoverError;

    fn from_str(s: &str) -> Result<Self> {
        let invalid = || MoverError::InvalidId(s.to_owned());
        let (stamp, seq) = match s.split_once('-') {
            None => (s, 1),
            Some((stamp, suffix)) => {
                // Digits only, no sign, no leading zero, at least 2: exactly one spelling
                // per id, so "X-02" and "X-2" can never both exist.
                if suffix.is_empty()
                    || suffix.len() > 6
                    || suffix.starts_with('0')
                    || !suffix.bytes().all(|b| b.is_ascii_digit())
                {
                    return Err(invalid());
                }
                let seq: u32 = suffix.parse().map_err(|_| invalid())?;
                if seq < 2 {
                    return Err(invalid());
                }
                (stamp, seq)
            }
        };
        if stamp.len() != STAMP_LEN || !stamp.is_ascii() {
            return Err(invalid());
        }
        NaiveDateTime::parse_from_str(stamp, STAMP_FORMAT).map_err(|_| invalid())?;
        Ok(Self {
            text: s.to_owned(),
            seq,
        })
    }
}

impl fmt::Display for BackupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Ord for BackupId {
    fn cmp(&self, other: &Self) -> Ordering {
        self.stamp()
            .cmp(other.stamp())
            .then(self.seq.cmp(&other.seq))
    }
}

impl PartialOrd for BackupId {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Which snapshot a command is about: `latest` or an explicit id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// The newest complete snapshot.
    Latest,
    /// Exactly this one.
    Id(BackupId),
}

impl FromStr for Selector {
    type Err = MoverError;

    fn from_str(s: &str) -> Result<Self> {
        if s == "latest" {
            Ok(Self::Latest)
        } else {
            s.parse().map(Self::Id)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated() {
        assert!(App::new("/b", "default", "minikube-hello-stateful").is_ok());
        assert!(App::new("/b", "default", "a.b-c").is_ok());
        for (ns, name) in [
            ("", "x"),
            ("default", ""),
            ("..", "x"),
            ("default", ".."),
            ("default", "a/b"),
            ("a/b", "x"),
            ("default", "a..b"),
            ("default", ".x"),
            ("Default", "x"),
            ("default", "-x"),
            ("a.b", "x"),
        ] {
            assert!(App::new("/b", ns, name).is_err(), "{ns:?} {name:?}");
        }
    }

    #[test]
    fn ids_parse_strictly_and_sort_by_time_then_suffix() {
        for bad in [
            "",
            "latest2",
            "../20261129T150102Z",
            "20261129T150102Z/..",
            "20261129T150102",
            "20261129T150102Z-",
            "20261129T150102Z-1",
            "20261129T150102Z-02",
            "20261129T150102Z-+2",
            "20261329T150102Z",
            "2026112९T150102Z",
        ] {
            assert!(bad.parse::<BackupId>().is_err(), "{bad:?}");
        }
        let mut ids: Vec<BackupId> = [
            "20261129T150102Z-10",
            "20261129T150102Z-2",
            "20261129T150101Z",
            "20261129T150102Z",
        ]
        .iter()
        .map(|s| s.parse().expect("valid id"))
        .collect();
        ids.sort();
        let sorted: Vec<&str> = ids.iter().map(BackupId::as_str).collect();
        assert_eq!(
            sorted,
            [
                "20261129T150101Z",
                "20261129T150102Z",
                "20261129T150102Z-2",
                "20261129T150102Z-10"
            ]
        );
        assert_eq!(ids[1].next().as_str(), "20261129T150102Z-2");
        assert_eq!(
            "latest".parse::<Selector>().expect("latest"),
            Selector::Latest
        );
    }
}
