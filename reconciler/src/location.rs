//! Where an app's backups may live. Node directories are the cluster admin's to choose (the
//! reconciler's `--backup-roots`); a spec only picks one of them, a claim of its own
//! namespace, or an object store (which the admin may restrict with
//! `--object-store-endpoints`) with a Secret of its own namespace. Every value here comes
//! from a tenant's spec and is checked before anything is mounted or sent.

use hellostateful_api::{HelloStatefulSpec, ObjectStoreTarget, ResolvedTarget, validate};
use thiserror::Error;

/// Where the Jobs of one app read and write snapshots.
#[derive(Clone, Debug, PartialEq)]
pub enum BackupLocation {
    /// The app's own directory `<root>/<namespace>/<name>` under an allowed node root,
    /// reached through a static volume and a claim that the reconciler makes.
    NodeRoot(String),
    /// A PersistentVolumeClaim of the app's namespace (the tenant's own storage).
    Claim(String),
    /// An S3-compatible object store; its keys come from a Secret of the app's namespace.
    ObjectStore(ObjectStoreTarget),
}

/// Why a setting or a spec's backup target is refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum LocationError {
    #[error(
        "backup root {0:?} is not a clean absolute path like /tmp/backup (no '.', '..', '//', trailing '/', and not '/')"
    )]
    BadRoot(String),
    #[error("no backup root is allowed: --backup-roots is empty")]
    NoRoots,
    #[error(
        "spec.backup.target.hostPath {path:?} is not a backup root the cluster admin allows ({allowed}): nothing is mounted; use one of them, or a PersistentVolumeClaim of this namespace (spec.backup.target.persistentVolumeClaim)"
    )]
    NotAllowed { path: String, allowed: String },
    #[error(
        "spec.backup.target.objectStore.endpoint {endpoint:?} is not an object store the cluster admin allows ({allowed}): nothing is sent"
    )]
    EndpointNotAllowed { endpoint: String, allowed: String },
}

/// Parses the admin's comma-separated object store endpoints (empty: any endpoint), as the
/// plugin does (one rule, in the API crate).
pub fn parse_endpoints(setting: &str) -> Vec<String> {
    hellostateful_api::endpoints::parse(setting)
}

/// Parses the admin's comma-separated backup roots; the first is the default.
pub fn parse_roots(setting: &str) -> Result<Vec<String>, LocationError> {
    let roots: Vec<String> = setting
        .split(',')
        .map(str::trim)
        .filter(|root| !root.is_empty())
        .map(str::to_string)
        .collect();
    if roots.is_empty() {
        return Err(LocationError::NoRoots);
    }
    match roots
        .iter()
        .find(|root| !validate::is_clean_absolute_path(root))
    {
        Some(bad) => Err(LocationError::BadRoot(bad.clone())),
        None => Ok(roots),
    }
}

/// The location a spec asks for, if the admin allows it.
pub fn resolve(
    spec: &HelloStatefulSpec,
    roots: &[String],
    endpoints: &[String],
) -> Result<BackupLocation, LocationError> {
    let wants_node_path = spec
        .backup
        .as_ref()
        .and_then(|b| b.target.as_ref())
        .and_then(|t| t.host_path.as_deref());
    match (spec.backup_target(), wants_node_path) {
        (ResolvedTarget::Claim(claim), _) => Ok(BackupLocation::Claim(claim)),
        (ResolvedTarget::ObjectStore(store), _) => {
            // One rule with the plugin's: exact text, trailing '/' aside.
            if hellostateful_api::endpoints::allows(endpoints, &store.endpoint) {
                Ok(BackupLocation::ObjectStore(store))
            } else {
                Err(LocationError::EndpointNotAllowed {
                    endpoint: store.endpoint.clone(),
                    allowed: endpoints.join(", "),
                })
            }
        }
        (ResolvedTarget::HostPath(_), None) => roots
            .first()
            .cloned()
            .map(BackupLocation::NodeRoot)
            .ok_or(LocationError::NoRoots),
        // Exact match only: a prefix would let `/tmp/backup-other` or `/tmp/backup/../etc`
        // through, and the app's own directory is appended by the reconciler, not the spec.
        (ResolvedTarget::HostPath(_), Some(path)) => roots
            .iter()
            .find(|root| root.as_str() == path)
            .cloned()
            .map(BackupLocation::NodeRoot)
            .ok_or_else(|| LocationError::NotAllowed {
                path: path.to_string(),
                allowed: roots.join(", "),
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(value: serde_json::Value) -> HelloStatefulSpec {
        serde_json::from_value(value).expect("spec")
    }

    fn roots() -> Vec<String> {
        vec!["/tmp/backup".into(), "/srv/backups".into()]
    }

    #[test]
    fn a_spec_without_target_gets_the_first_root() {
        assert_eq!(
            resolve(&spec(json!({})), &roots(), &[]),
            Ok(BackupLocation::NodeRoot("/tmp/backup".into()))
        );
    }

    #[test]
    fn a_spec_may_pick_any_allowed_root_or_its_own_claim() {
        let picked = spec(json!({"backup": {"target": {"hostPath": "/srv/backups"}}}));
        assert_eq!(
            resolve(&picked, &roots(), &[]),
            Ok(BackupLocation::NodeRoot("/srv/backups".into()))
        );
        let claim = spec(json!({"backup": {"target": {"persistentVolumeClaim": "mine"}}}));
        assert_eq!(
            resolve(&claim, &roots(), &[]),
            Ok(BackupLocation::Claim("mine".into()))
        );
    }

    #[test]
    fn an_object_store_is_taken_unless_the_admin_lists_others() {
        let store = spec(json!({"backup": {"target": {"objectStore": {
            "endpoint": "https://s3.example.com/", "bucket": "backups", "credentialsSecret": "s3"
        }}}}));
        assert!(matches!(
            resolve(&store, &roots(), &[]),
            Ok(BackupLocation::ObjectStore(target)) if target.bucket == "backups"
        ));
        let allowed = parse_endpoints(" https://s3.example.com/ ,https://other:9000");
        assert!(resolve(&store, &roots(), &allowed).is_ok());
        let error = resolve(&store, &roots(), &parse_endpoints("https://s3.internal"))
            .expect_err("an endpoint the admin does not list");
        assert!(
            error.to_string().contains("https://s3.internal")
                && error.to_string().contains("nothing is sent"),
            "{error}"
        );
    }

    #[test]
    fn a_look_alike_of_an_allowed_endpoint_is_refused() {
        let allowed = parse_endpoints("https://s3.example.com");
        for endpoint in ["https://s3.example.com.evil.io", "http://s3.example.com"] {
            let store = spec(json!({"backup": {"target": {"objectStore": {
                "endpoint": endpoint, "bucket": "backups", "credentialsSecret": "s3"
            }}}}));
            assert_eq!(
                resolve(&store, &roots(), &allowed),
                Err(LocationError::EndpointNotAllowed {
                    endpoint: endpoint.to_string(),
                    allowed: "https://s3.example.com".to_string(),
                }),
                "{endpoint}"
            );
        }
    }

    #[test]
    fn node_paths_outside_the_allowed_roots_are_refused() {
        for hostile in [
            "/",
            "/.",
            "//",
            "/etc",
            "/var/lib/kubelet",
            "/tmp",
            "/tmp/backup/",
            "/tmp/backup/..",
            "/tmp/backup/../etc",
            "/tmp/backup/other-ns",
            "/tmp/backup-other",
            "/tmp//backup",
            "tmp/backup",
        ] {
            let hostile_spec = spec(json!({"backup": {"target": {"hostPath": hostile}}}));
            let error = resolve(&hostile_spec, &roots(), &[]).expect_err(hostile);
            let message = error.to_string();
            assert!(
                message.contains("/tmp/backup, /srv/backups") && message.contains(hostile),
                "{message}"
            );
        }
    }

    #[test]
    fn admin_roots_must_be_clean_absolute_paths() {
        assert_eq!(
            parse_roots(" /tmp/backup , /srv/b ,"),
            Ok(vec!["/tmp/backup".to_string(), "/srv/b".to_string()])
        );
        for bad in ["/", "relative", "/a/../b", "/a//b", "/a/", "/a/./b", "/a b"] {
            assert_eq!(
                parse_roots(bad),
                Err(LocationError::BadRoot(bad.to_string())),
                "{bad}"
            );
        }
        assert_eq!(parse_roots(" , "), Err(LocationError::NoRoots));
    }
}
