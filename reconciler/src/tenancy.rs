//! What the cluster admin lets a tenant's spec ask of the nodes, beyond the backup target
//! (`location`): static node-directory data volumes, which take node disk with no size
//! bound (settings `staticDataVolumes`), the taints the app may tolerate, which decide
//! whether it can reach control-plane or dedicated nodes (settings `tolerableTaints`), and
//! how much of a node's disk its backups in a node directory may take (`nodeBackupLimit`).

use hellostateful_api::HelloStatefulSpec;

/// The admin's choices; the default allows what the 2018 app needs (static volumes) and
/// any toleration.
#[derive(Clone, Debug, PartialEq)]
pub struct Allowed {
    /// Whether an app without a StorageClass gets static volumes in a node directory.
    pub static_data_volumes: bool,
    /// The taint keys a toleration may name; `None`: any, also a toleration of every taint.
    pub tolerable_taints: Option<Vec<String>>,
    /// The bytes an app's backup directory under a node root may hold; `None`: no bound.
    pub node_backup_limit: Option<u64>,
}

impl Default for Allowed {
    fn default() -> Self {
        Self {
            static_data_volumes: true,
            tolerable_taints: None,
            node_backup_limit: None,
        }
    }
}

/// A spec asking for what the admin does not allow.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum Refusal {
    #[error(
        "this cluster gives apps no static node-directory volumes (its admin set staticDataVolumes to refuse in the settings): name a StorageClass in spec.storage.storageClassName"
    )]
    StaticDataVolumes,
    #[error(
        "spec.tolerations[{index}] tolerates {what}, and this cluster's admin lets apps tolerate {allowed} (tolerableTaints in the settings)"
    )]
    Toleration {
        index: usize,
        what: String,
        allowed: String,
    },
}

impl Refusal {
    /// The reason of the Ready condition and of the event.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::StaticDataVolumes => "StaticDataVolumesRefused",
            Self::Toleration { .. } => "TolerationRefused",
        }
    }
}

/// Reads `staticDataVolumes`: `allow` (the default when unset) or `refuse`.
pub fn parse_static_data_volumes(text: &str) -> Result<bool, String> {
    match text.trim() {
        "" | "allow" => Ok(true),
        "refuse" => Ok(false),
        other => Err(format!(
            "staticDataVolumes is allow or refuse, not {other:?}"
        )),
    }
}

/// Reads `tolerableTaints`: `*` (the default when unset) for any, else the taint keys
/// allowed, separated by commas (empty: none).
pub fn parse_tolerable_taints(text: &str) -> Option<Vec<String>> {
    let text = text.trim();
    (text != "*").then(|| {
        text.split(',')
            .map(str::trim)
            .filter(|key| !key.is_empty())
            .map(String::from)
            .collect()
    })
}

/// Whether `spec` asks only for what `allowed` allows; the first thing it may not have.
pub fn check(spec: &HelloStatefulSpec, allowed: &Allowed) -> Result<(), Refusal> {
    if !allowed.static_data_volumes && spec.storage_class().is_none() {
        return Err(Refusal::StaticDataVolumes);
    }
    let Some(keys) = &allowed.tolerable_taints else {
        return Ok(());
    };
    for (index, toleration) in spec.tolerations.iter().flatten().enumerate() {
        // A toleration without a key tolerates every taint (operator Exists).
        let what = match toleration.key.as_deref().filter(|key| !key.is_empty()) {
            Some(key) if keys.iter().any(|allowed| allowed == key) => continue,
            Some(key) => format!("taints of key {key:?}"),
            None => "every taint".to_string(),
        };
        let allowed = if keys.is_empty() {
            "no taint".to_string()
        } else {
            format!("only taints of key {}", keys.join(", "))
        };
        return Err(Refusal::Toleration {
            index,
            what,
            allowed,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(value: serde_json::Value) -> HelloStatefulSpec {
        serde_json::from_value(value).expect("spec")
    }

    #[test]
    fn the_defaults_allow_the_2018_app_and_any_toleration() {
        let app = spec(json!({"tolerations": [{"operator": "Exists"}]}));
        assert_eq!(check(&app, &Allowed::default()), Ok(()));
        assert_eq!(parse_static_data_volumes(""), Ok(true));
        assert_eq!(parse_tolerable_taints("*"), None);
    }

    #[test]
    fn static_volumes_refused_leave_only_apps_with_a_storage_class() {
        let allowed = Allowed {
            static_data_volumes: parse_static_data_volumes("refuse").expect("setting"),
            ..Allowed::default()
        };
        let refusal = check(&spec(json!({})), &allowed).expect_err("refused");
        assert_eq!(refusal.reason(), "StaticDataVolumesRefused");
        assert!(
            refusal
                .to_string()
                .contains("spec.storage.storageClassName")
        );
        let blank = spec(json!({"storage": {"storageClassName": ""}}));
        assert_eq!(check(&blank, &allowed), Err(Refusal::StaticDataVolumes));
        let classed = spec(json!({"storage": {"storageClassName": "fast"}}));
        assert_eq!(check(&classed, &allowed), Ok(()));
        assert!(parse_static_data_volumes("no").is_err());
    }

    #[test]
    fn only_listed_taint_keys_may_be_tolerated_and_never_every_taint() {
        let allowed = Allowed {
            tolerable_taints: parse_tolerable_taints(" dedicated , gpu "),
            ..Allowed::default()
        };
        let listed = spec(json!({"tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"},
            {"key": "gpu", "operator": "Exists"},
        ]}));
        assert_eq!(check(&listed, &allowed), Ok(()));

        let control_plane = spec(json!({"tolerations": [
            {"key": "dedicated", "operator": "Exists"},
            {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
        ]}));
        let refusal = check(&control_plane, &allowed).expect_err("refused");
        assert_eq!(refusal.reason(), "TolerationRefused");
        assert_eq!(
            refusal.to_string(),
            "spec.tolerations[1] tolerates taints of key \"node-role.kubernetes.io/control-plane\", and this cluster's admin lets apps tolerate only taints of key dedicated, gpu (tolerableTaints in the settings)"
        );

        let everything = spec(json!({"tolerations": [{"operator": "Exists"}]}));
        assert!(
            check(&everything, &allowed)
                .expect_err("refused")
                .to_string()
                .contains("tolerates every taint")
        );
        let none = Allowed {
            tolerable_taints: parse_tolerable_taints(""),
            ..Allowed::default()
        };
        assert!(
            check(&listed, &none)
                .expect_err("refused")
                .to_string()
                .contains("lets apps tolerate no taint")
        );
        assert_eq!(check(&spec(json!({})), &none), Ok(()));
    }
}
