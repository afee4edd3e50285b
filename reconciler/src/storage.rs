//! The app's storage: static data volumes pinned to the node that holds the data, each
//! ordinal's claim, and the backup volume and claim of a node-directory backup location.
//!
//! Deciding is pure: `plan` reads what the cache holds (`Observed`) and returns the writes to
//! make, in order, what status says of the data node, and whether the app may go on. The
//! controller performs the writes.

use std::sync::Arc;

use hellostateful_api::names;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use kube::ResourceExt;
use kube::runtime::events::EventType;

use crate::Error;
use crate::cache::Cache;
use crate::children::{self, AppRef};
use crate::conditions;
use crate::kept::{ClaimView, Kept, VolumeView};
use crate::location::BackupLocation;
use crate::placement;
use crate::record::Record;

/// What the cache holds of an app's storage, and what decides its node.
pub struct Observed {
    /// Each ordinal's data claim, in ordinal order.
    pub claims: Vec<Option<Arc<Kept<ClaimView>>>>,
    /// The app's static data volumes.
    pub volumes: Vec<Arc<Kept<VolumeView>>>,
    /// The data node status last recorded.
    pub status_node: Option<String>,
    /// The node of the node-directory backups a new app restores, if any.
    pub restore_node: Option<String>,
    pub nodes: Vec<Arc<Node>>,
    /// With a node-directory location: its volume, claim, and the namespace's uid.
    pub backup: Option<BackupObserved>,
}

pub struct BackupObserved {
    /// The volume of the directory under the spec's root, whatever its name.
    pub volume: Option<Arc<Kept<VolumeView>>>,
    pub claim: Option<Arc<Kept<ClaimView>>>,
    /// Recorded on the backup volume, so that a later namespace of the same name never
    /// reaches this one's backups.
    pub namespace_uid: String,
}

impl Observed {
    /// Reads the app's storage from the cache. `namespace_uid` is needed (and only read)
    /// for a node-directory location.
    pub fn from_cache(
        cache: &Cache,
        app: &AppRef,
        location: &BackupLocation,
        status_node: Option<String>,
        namespace_uid: Option<String>,
    ) -> Self {
        let backup = match (location, namespace_uid) {
            (BackupLocation::NodeRoot(root), Some(namespace_uid)) => {
                let path = names::backup_host_path(root, &app.namespace, &app.name);
                Some(BackupObserved {
                    volume: cache.backup_volume_at(
                        &app.namespace,
                        &app.name,
                        &path,
                        &namespace_uid,
                    ),
                    claim: cache.claim(&app.namespace, &names::backup_claim(&app.name)),
                    namespace_uid,
                })
            }
            _ => None,
        };
        Self {
            claims: app
                .ordinals()
                .map(|ordinal| cache.claim(&app.namespace, &names::claim(&app.name, ordinal)))
                .collect(),
            volumes: cache.data_volumes(&app.namespace, &app.name),
            status_node,
            restore_node: restore_node(cache, app, location),
            nodes: cache.nodes(),
            backup,
        }
    }
}

/// The node that holds the backups a new app restores (its own, or `spec.restoreFrom`'s),
/// when they are in a node directory: the data must be made there for the restore Job to
/// mount both. Found through the backup claim, which binds only that app's directory.
fn restore_node(cache: &Cache, app: &AppRef, location: &BackupLocation) -> Option<String> {
    let spec = &app.app.spec;
    let owner = match &spec.restore_from {
        Some(from) => &from.name,
        None if spec.restore_from_existing => &app.name,
        None => return None,
    };
    if !matches!(location, BackupLocation::NodeRoot(_)) {
        return None;
    }
    let claim = cache.claim(&app.namespace, &names::backup_claim(owner));
    // Only a Bound claim's volumeName is the volume's: a tenant may write any name there.
    let bound = claim.filter(|c| c.view.bound);
    let volume = bound.and_then(|c| c.view.volume_name.clone())?;
    cache.volume(&volume)?.view.node.clone()
}

/// A write the plan asks for.
#[derive(Debug)]
pub enum Write {
    /// Apply a PersistentVolume (cluster-wide).
    Volume(Box<PersistentVolume>),
    /// Apply a claim in the app's namespace.
    Claim(Box<PersistentVolumeClaim>),
    DeleteClaim(String),
    /// Clear a Released volume's claim reference, so that a new claim of the same name binds.
    Reopen(String),
}

/// What status says of the data node.
#[derive(Debug, PartialEq)]
pub enum NodeName {
    Keep,
    Set(String),
    Clear,
}

/// Whether the app may go on past its storage.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    Ready,
    /// Something must go away first: Ready=False with this reason.
    Wait {
        reason: &'static str,
        message: String,
    },
    /// No node can hold the data.
    NoNode(String),
    /// Refused until a cluster admin acts: Ready=False, and a Warning event.
    Refused {
        reason: &'static str,
        message: String,
    },
}

#[derive(Debug)]
pub struct Plan {
    pub writes: Vec<Write>,
    pub node_name: NodeName,
    pub verdict: Verdict,
}

impl Plan {
    fn ending(self, verdict: Verdict) -> Self {
        Self { verdict, ..self }
    }

    fn waiting(self, reason: &'static str, message: String) -> Self {
        self.ending(Verdict::Wait { reason, message })
    }
}

/// The writes that put the app's storage in place, from what is observed. `mover_image`
/// is the image the app's backup claim names (`children::backup_claim`).
pub fn plan(
    app: &AppRef,
    location: &BackupLocation,
    observed: &Observed,
    mover_image: &str,
) -> Result<Plan, Error> {
    let mut plan = Plan {
        writes: Vec::new(),
        node_name: NodeName::Keep,
        verdict: Verdict::Ready,
    };
    // A data claim of this name that another object controls (an earlier app of this name,
    // its claims not yet collected), or none does: its data is not this app's, and is never
    // taken for it (a restore skipped, an old app's data served as this one's).
    for (ordinal, claim) in app.ordinals().zip(&observed.claims) {
        if let Some(claim) = claim
            && !claim.deleting
            && !claim.is_controlled_by(&app.uid)
        {
            let whose = match &claim.controller {
                Some(_) => "another object controls it: an earlier app of this name, say",
                None => "it has no controller owner",
            };
            return Ok(plan.waiting(
                "ClaimTaken",
                format!(
                    "PersistentVolumeClaim {} is not this app's ({whose}): its data is never \
                     taken for this app's; the app is made once it is gone (delete it if \
                     nothing needs it)",
                    names::claim(&app.name, ordinal)
                ),
            ));
        }
    }
    let node = if app.app.spec.storage_class().is_none() {
        let node = match data_node(app, observed, &observed.volumes) {
            Ok(node) => node,
            Err(why) => return Ok(plan.ending(Verdict::NoNode(why))),
        };
        for (ordinal, claim) in app.ordinals().zip(&observed.claims) {
            // A claim made by 0.1.0 is bound to a volume of the old name: keep using it.
            let bound_to = claim.as_ref().and_then(|c| c.view.volume_name.clone());
            let name = bound_to
                .filter(|bound| observed.volumes.iter().any(|v| v.name() == bound))
                .unwrap_or_else(|| names::volume(&app.namespace, &app.name, ordinal));
            match observed.volumes.iter().find(|v| v.name() == name) {
                Some(old) if old.deleting => {
                    return Ok(plan.waiting(
                        "OldVolumeReleasing",
                        format!(
                            "waiting for PersistentVolume {name} of an earlier app of this name to be released; {}",
                            claim_held(&names::claim(&app.name, ordinal))
                        ),
                    ));
                }
                Some(_) => {}
                None => plan.writes.push(Write::Volume(Box::new(children::volume(
                    app, ordinal, &node,
                )?))),
            }
        }
        Some(node)
    } else {
        None
    };
    for (ordinal, claim) in app.ordinals().zip(&observed.claims) {
        match claim {
            Some(old) if old.deleting => {
                return Ok(plan.waiting(
                    "OldClaimReleasing",
                    format!(
                        "waiting for PersistentVolumeClaim {} of an earlier app of this name to be deleted; {}",
                        names::claim(&app.name, ordinal),
                        claim_held(&names::claim(&app.name, ordinal))
                    ),
                ));
            }
            // Claims are immutable once made: never rewritten.
            Some(_) => {}
            None => plan
                .writes
                .push(Write::Claim(Box::new(children::claim(app, ordinal)?))),
        }
    }
    plan.node_name = match &node {
        Some(node) => NodeName::Set(node.clone()),
        // Dynamic volumes with node-directory backups: status keeps the backups' node.
        None if matches!(location, BackupLocation::NodeRoot(_)) => NodeName::Keep,
        None => NodeName::Clear,
    };
    let (BackupLocation::NodeRoot(root), Some(backup)) = (location, &observed.backup) else {
        return Ok(plan);
    };
    // Dynamic volumes with node-directory backups: the backups still need one node.
    let node = match node {
        Some(node) => node,
        None => match data_node(app, observed, &[]) {
            Ok(node) => node,
            Err(why) => return Ok(plan.ending(Verdict::NoNode(why))),
        },
    };
    plan.node_name = NodeName::Set(node.clone());
    backup_storage(app, root, &node, backup, mover_image, plan)
}

/// The node the app's pods must run on, if one. With dynamic volumes and backups in a node
/// directory, that is the backups' node (`status_node`): a mover Job mounts the app's claims
/// and its backup claim together, so they must be attachable on one node, and a claim bound
/// when its first pod is scheduled is made there too. Static volumes pin the pods
/// themselves. A StatefulSet that runs unpinned (`existing` is `Some(None)`: made by an
/// earlier version) stays so: its volumes may be elsewhere, and pods moved away from them
/// would not start.
pub fn pods_node(
    app: &AppRef,
    location: &BackupLocation,
    status_node: Option<&str>,
    existing: Option<Option<&str>>,
) -> Option<String> {
    let dynamic = app.app.spec.storage_class().is_some();
    if !dynamic || !matches!(location, BackupLocation::NodeRoot(_)) || existing == Some(None) {
        return None;
    }
    status_node.map(str::to_owned)
}

/// The node of the app's static volumes: where existing volumes are pinned, else where the
/// status says, else where the backups to restore are, else one the app's pods can run on
/// (see `placement`). `Err` says why no node can.
fn data_node(
    app: &AppRef,
    observed: &Observed,
    volumes: &[Arc<Kept<VolumeView>>],
) -> Result<String, String> {
    if let Some(node) = volumes.iter().find_map(|volume| volume.view.node.clone()) {
        return Ok(node);
    }
    if let Some(node) = observed
        .status_node
        .as_ref()
        .or(observed.restore_node.as_ref())
    {
        return Ok(node.clone());
    }
    let spec = &app.app.spec;
    placement::choose(
        &observed.nodes,
        &spec.node_selector.clone().unwrap_or_default(),
        spec.tolerations.as_deref().unwrap_or_default(),
    )
}

/// What keeps an earlier app's claim from going, said to the user: the API server keeps a
/// claim while any scheduled pod names it, even one that ended (an orphaned mover pod, say),
/// and nothing of the reconciler's may delete pods.
fn claim_held(claim: &str) -> String {
    format!(
        "if it stays, a pod still names claim {claim} (even an ended pod holds it): delete that pod"
    )
}

/// The app's backup directory under a node root: a static volume pre-bound to a claim in
/// the app's namespace. When the spec moves to another root, the claim is made anew for that
/// root's volume; the old root's volume stays, Released, as long as the snapshots left in
/// its directory: it records whose they are, so that no later namespace of the same name
/// is ever given that directory (`BackupsOfAnotherNamespace`).
fn backup_storage(
    app: &AppRef,
    root: &str,
    node: &str,
    backup: &BackupObserved,
    mover_image: &str,
    mut plan: Plan,
) -> Result<Plan, Error> {
    let claim_name = names::backup_claim(&app.name);
    let path = names::backup_host_path(root, &app.namespace, &app.name);
    let (volume_name, released) = match &backup.volume {
        None => {
            let volume = children::backup_volume(app, root, node, &backup.namespace_uid)?;
            let name = volume.name_any();
            plan.writes.push(Write::Volume(Box::new(volume)));
            (name, false)
        }
        Some(volume) if volume.deleting => {
            return Ok(plan.waiting(
                "BackupVolumeReleasing",
                format!(
                    "waiting for the old PersistentVolume {} of {path} to be deleted",
                    volume.name()
                ),
            ));
        }
        Some(volume) if volume.view.namespace_uid.as_ref() != Some(&backup.namespace_uid) => {
            return Ok(plan.ending(Verdict::Refused {
                reason: "BackupsOfAnotherNamespace",
                message: format!(
                    "the backup directory {path} belongs to an earlier namespace named {} (PersistentVolume {}); a cluster admin must remove that volume and move or delete the directory before this app may back up there",
                    app.namespace,
                    volume.name()
                ),
            }));
        }
        Some(volume) => (volume.name().to_owned(), volume.view.released),
    };
    match &backup.claim {
        Some(claim) if claim.deleting => {
            return Ok(plan.waiting(
                "BackupClaimReleasing",
                format!("waiting for the old PersistentVolumeClaim {claim_name} to be deleted"),
            ));
        }
        Some(claim) if claim.view.volume_name.as_deref() != Some(volume_name.as_str()) => {
            // The spec moved to another allowed root: the claim names the old root's volume
            // (immutably), so it is made anew. That volume and its snapshots stay.
            plan.writes.push(Write::DeleteClaim(claim_name));
            let old = claim.view.volume_name.as_deref().unwrap_or("?");
            return Ok(plan.waiting(
                "BackupRootChanging",
                format!(
                    "moving backups to {path}: earlier snapshots stay where they were, kept for this namespace by PersistentVolume {old}"
                ),
            ));
        }
        Some(claim) => {
            if released {
                plan.writes.push(Write::Reopen(volume_name.clone()));
            }
            // Made by an earlier version, or before the mover image changed: the image the
            // admission policy allows to write it is named again.
            if claim.view.mover_image.as_deref() != Some(mover_image) {
                plan.writes
                    .push(Write::Claim(Box::new(children::backup_claim(
                        app,
                        &volume_name,
                        mover_image,
                    )?)));
            }
        }
        None => {
            if released {
                // Its claim was deleted (by hand, with its namespace, which is the same
                // namespace: the uid matched, or by a move to another root and back): let
                // a new claim of the same name bind.
                plan.writes.push(Write::Reopen(volume_name.clone()));
            }
            plan.writes
                .push(Write::Claim(Box::new(children::backup_claim(
                    app,
                    &volume_name,
                    mover_image,
                )?)));
        }
    }
    Ok(plan)
}

/// Says whether the volumes are as the spec asks: a size or class changed after they were
/// made, and the volumes of replicas the spec no longer has (kept with their data, as the
/// StatefulSet keeps them), are reported (condition StorageApplied and an event), not
/// silently taken as applied. `data_claims` are the names of the app's data claims, of
/// every ordinal that ever ran.
pub fn report_drift(
    app: &AppRef,
    claim_templates: &[PersistentVolumeClaim],
    data_claims: Vec<String>,
    record: &mut Record,
) {
    let mut kept: Vec<(i32, String)> = data_claims
        .into_iter()
        .filter_map(|claim| Some((names::claim_ordinal(&app.name, &claim)?, claim)))
        .filter(|(ordinal, _)| *ordinal >= app.app.spec.replicas)
        .collect();
    kept.sort();
    let kept = (!kept.is_empty()).then(|| {
        let claims: Vec<_> = kept.into_iter().map(|(_, claim)| claim).collect();
        format!(
            "spec.replicas is {}: the volumes of the removed replicas are kept with their data (PersistentVolumeClaims {}); scaling up again brings those replicas back on them, and deleting the app releases them",
            app.app.spec.replicas,
            claims.join(", ")
        )
    });
    let (reason, message) = match (children::storage_drift(app, claim_templates), kept) {
        (Some(drift), kept) => (
            "StorageImmutable",
            [Some(drift), kept]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join("; "),
        ),
        (None, Some(kept)) => ("RemovedReplicasVolumesKept", kept),
        (None, None) => {
            record.conditions().set(
                conditions::STORAGE_APPLIED,
                true,
                "Applied",
                "the volumes have the size and class the spec asks for",
            );
            return;
        }
    };
    if record
        .conditions()
        .set(conditions::STORAGE_APPLIED, false, reason, &message)
    {
        // Kept volumes are how StatefulSets work, not a mistake in the spec.
        let kind = match reason {
            "StorageImmutable" => EventType::Warning,
            _ => EventType::Normal,
        };
        record.note(kind, reason, "Apply", message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::kept::Cached;
    use hellostateful_api::HelloStateful;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    const ROOT: &str = "/tmp/backup";

    fn node_root() -> BackupLocation {
        BackupLocation::NodeRoot(ROOT.into())
    }

    fn ready_node(name: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "spec": {},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .expect("a valid Node"),
        )
    }

    fn nothing(app: &HelloStateful) -> Observed {
        Observed {
            claims: vec![None; app.spec.replicas.max(0) as usize],
            volumes: Vec::new(),
            status_node: None,
            restore_node: None,
            nodes: vec![ready_node("node-a")],
            backup: None,
        }
    }

    fn deleting<K: kube::Resource>(mut object: K) -> K {
        object.meta_mut().deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        object
    }

    fn written(plan: &Plan) -> Vec<String> {
        plan.writes
            .iter()
            .map(|write| match write {
                Write::Volume(volume) => {
                    format!("volume {}", volume.metadata.name.as_deref().unwrap_or("?"))
                }
                Write::Claim(claim) => {
                    format!("claim {}", claim.metadata.name.as_deref().unwrap_or("?"))
                }
                Write::DeleteClaim(name) => format!("delete claim {name}"),
                Write::Reopen(name) => format!("reopen volume {name}"),
            })
            .collect()
    }

    /// The mover image of the tests' settings.
    const MOVER: &str = "mover:test";

    #[test]
    fn a_new_app_gets_a_volume_per_ordinal_on_a_node_it_can_run_on_then_its_claims() {
        let app = fixtures::app(json!({"replicas": 2}), json!({}));
        let app_ref = AppRef::new(&app).expect("app");
        let mut observed = nothing(&app);
        observed.nodes = vec![ready_node("node-b")];
        let plan = super::plan(
            &app_ref,
            &BackupLocation::Claim("mine".into()),
            &observed,
            MOVER,
        )
        .expect("plan");
        assert_eq!(
            written(&plan),
            [
                format!("volume {}", names::volume("ns1", "hello", 0)),
                format!("volume {}", names::volume("ns1", "hello", 1)),
                format!("claim {}", names::claim("hello", 0)),
                format!("claim {}", names::claim("hello", 1)),
            ]
        );
        let Write::Volume(volume) = &plan.writes[0] else {
            panic!("a volume first");
        };
        assert_eq!(children::volume_node(volume).as_deref(), Some("node-b"));
        assert_eq!(plan.node_name, NodeName::Set("node-b".into()));
        assert_eq!(plan.verdict, Verdict::Ready);
    }

    #[test]
    fn existing_volumes_keep_their_node_and_nothing_is_rewritten() {
        let app = fixtures::app(json!({"replicas": 1}), json!({}));
        let app_ref = AppRef::new(&app).expect("app");
        let mut observed = nothing(&app);
        observed.volumes = vec![Arc::new(
            children::volume(&app_ref, 0, "node-old")
                .expect("volume")
                .keep(),
        )];
        observed.claims = vec![Some(Arc::new(
            children::claim(&app_ref, 0).expect("claim").keep(),
        ))];
        observed.status_node = Some("node-status".into());
        let plan = super::plan(
            &app_ref,
            &BackupLocation::Claim("mine".into()),
            &observed,
            MOVER,
        )
        .expect("plan");
        assert!(plan.writes.is_empty(), "{:?}", written(&plan));
        assert_eq!(plan.node_name, NodeName::Set("node-old".into()));
        assert_eq!(plan.verdict, Verdict::Ready);
    }

    #[test]
    fn an_old_volume_or_claim_being_deleted_is_waited_for() {
        let app = fixtures::app(json!({"replicas": 2}), json!({}));
        let app_ref = AppRef::new(&app).expect("app");
        let mut observed = nothing(&app);
        let old = deleting(children::volume(&app_ref, 1, "node-a").expect("volume"));
        observed.volumes = vec![Arc::new(old.keep())];
        let plan = super::plan(
            &app_ref,
            &BackupLocation::Claim("mine".into()),
            &observed,
            MOVER,
        )
        .expect("plan");
        // Ordinal 0's volume is made meanwhile; nothing after the one that is going away.
        assert_eq!(
            written(&plan),
            [format!("volume {}", names::volume("ns1", "hello", 0))]
        );
        assert!(
            matches!(
                &plan.verdict,
                Verdict::Wait {
                    reason: "OldVolumeReleasing",
                    message,
                } if message.contains("a pod still names claim data-hello-1")
            ),
            "{:?}",
            plan.verdict
        );
        assert_eq!(plan.node_name, NodeName::Keep);

        let mut observed = nothing(&app);
        observed.claims[0] = Some(Arc::new(
            deleting(children::claim(&app_ref, 0).expect("claim")).keep(),
        ));
        let plan = super::plan(
            &app_ref,
            &BackupLocation::Claim("mine".into()),
            &observed,
            MOVER,
        )
        .expect("plan");
        assert!(matches!(
            plan.verdict,
            Verdict::Wait {
                reason: "OldClaimReleasing",
                ..
            }
        ));
    }

    #[test]
    fn a_data_claim_that_is_not_this_apps_is_never_adopted() {
        // Two replicas on a StorageClass.
        let app = fixtures::spread_app(json!({}));
        let app_ref = AppRef::new(&app).expect("app");
        let location = BackupLocation::Claim("mine".into());
        let ours = children::claim(&app_ref, 0).expect("claim");
        let mut earlier = children::claim(&app_ref, 1).expect("claim");
        for owner in earlier.metadata.owner_references.iter_mut().flatten() {
            owner.uid = "uid-of-an-earlier-app".into();
        }
        let mut unowned = earlier.clone();
        unowned.metadata.owner_references = None;
        for (other, whose) in [
            (earlier, "another object controls it"),
            (unowned, "it has no controller owner"),
        ] {
            let mut observed = nothing(&app);
            observed.claims = vec![
                Some(Arc::new(ours.clone().keep())),
                Some(Arc::new(other.keep())),
            ];
            let plan = super::plan(&app_ref, &location, &observed, MOVER).expect("plan");
            assert!(written(&plan).is_empty(), "{:?}", written(&plan));
            let Verdict::Wait { reason, message } = &plan.verdict else {
                panic!("{:?}", plan.verdict);
            };
            assert_eq!(*reason, "ClaimTaken");
            assert!(
                message.contains("PersistentVolumeClaim data-hello-1") && message.contains(whose),
                "{message}"
            );
        }

        // Its own claims are used as they are.
        let mut observed = nothing(&app);
        observed.claims = vec![
            Some(Arc::new(ours.keep())),
            Some(Arc::new(
                children::claim(&app_ref, 1).expect("claim").keep(),
            )),
        ];
        let plan = super::plan(&app_ref, &location, &observed, MOVER).expect("plan");
        assert!(matches!(plan.verdict, Verdict::Ready), "{:?}", plan.verdict);
        assert!(written(&plan).is_empty());
    }

    #[test]
    fn no_node_fit_for_the_app_is_said_and_nothing_is_made() {
        let app = fixtures::app(json!({"replicas": 1}), json!({}));
        let app_ref = AppRef::new(&app).expect("app");
        let mut observed = nothing(&app);
        observed.nodes = Vec::new();
        let plan = super::plan(&app_ref, &node_root(), &observed, MOVER).expect("plan");
        assert!(plan.writes.is_empty());
        assert!(
            matches!(plan.verdict, Verdict::NoNode(_)),
            "{:?}",
            plan.verdict
        );
    }

    #[test]
    fn dynamic_volumes_make_only_claims_and_clear_the_node_unless_backups_need_one() {
        let app = fixtures::app(
            json!({"replicas": 1, "storage": {"storageClassName": "fast"}}),
            json!({}),
        );
        let app_ref = AppRef::new(&app).expect("app");
        let mut observed = nothing(&app);
        observed.status_node = Some("node-a".into());
        let plan = super::plan(
            &app_ref,
            &BackupLocation::Claim("mine".into()),
            &observed,
            MOVER,
        )
        .expect("plan");
        assert_eq!(
            written(&plan),
            [format!("claim {}", names::claim("hello", 0))]
        );
        assert_eq!(plan.node_name, NodeName::Clear);

        // Node-directory backups keep the node status names, and get their volume there.
        observed.backup = Some(BackupObserved {
            volume: None,
            claim: None,
            namespace_uid: "ns-uid".into(),
        });
        let plan = super::plan(&app_ref, &node_root(), &observed, MOVER).expect("plan");
        assert_eq!(
            written(&plan),
            [
                format!("claim {}", names::claim("hello", 0)),
                format!("volume {}", names::backup_volume(ROOT, "ns1", "hello")),
                format!("claim {}", names::backup_claim("hello")),
            ]
        );
        let Write::Volume(volume) = &plan.writes[1] else {
            panic!("the backup volume second");
        };
        assert_eq!(children::volume_node(volume).as_deref(), Some("node-a"));
        assert_eq!(plan.node_name, NodeName::Set("node-a".into()));
    }

    #[test]
    fn a_new_app_is_made_where_the_backups_it_restores_are() {
        let app = fixtures::app(
            json!({"replicas": 1, "restoreFromExisting": true}),
            json!({}),
        );
        let app_ref = AppRef::new(&app).expect("app");
        let mut observed = nothing(&app);
        observed.nodes = vec![ready_node("node-a"), ready_node("node-b")];
        observed.restore_node = Some("node-b".into());
        let plan = super::plan(
            &app_ref,
            &BackupLocation::Claim("mine".into()),
            &observed,
            MOVER,
        )
        .expect("plan");
        assert_eq!(plan.node_name, NodeName::Set("node-b".into()));
    }

    fn backup_volume(app: &AppRef, path_root: &str, uid: &str) -> PersistentVolume {
        children::backup_volume(app, path_root, "node-a", uid).expect("backup volume")
    }

    #[test]
    fn a_backup_volume_of_an_earlier_namespace_of_the_same_name_is_refused() {
        let app = fixtures::app(json!({"replicas": 1}), json!({}));
        let app_ref = AppRef::new(&app).expect("app");
        let mut observed = nothing(&app);
        observed.backup = Some(BackupObserved {
            volume: Some(Arc::new(backup_volume(&app_ref, ROOT, "old-uid").keep())),
            claim: None,
            namespace_uid: "new-uid".into(),
        });
        let plan = super::plan(&app_ref, &node_root(), &observed, MOVER).expect("plan");
        let Verdict::Refused { reason, message } = &plan.verdict else {
            panic!("refused: {:?}", plan.verdict);
        };
        assert_eq!(*reason, "BackupsOfAnotherNamespace");
        assert!(message.contains("a cluster admin must remove"), "{message}");
        assert!(
            !written(&plan).iter().any(|w| w.contains("backup")),
            "nothing is written to the old backups: {:?}",
            written(&plan)
        );
    }

    #[test]
    fn a_moved_root_makes_the_claim_anew_and_keeps_the_old_roots_volume_as_its_record() {
        let app = fixtures::app(json!({"replicas": 1}), json!({}));
        let app_ref = AppRef::new(&app).expect("app");
        let mut observed = nothing(&app);
        // The claim names the volume of the root the app used before; none is at ROOT yet.
        let earlier = names::backup_volume("/srv/elsewhere", "ns1", "hello");
        let claim = Arc::new(
            children::backup_claim(&app_ref, &earlier, MOVER)
                .expect("claim")
                .keep(),
        );
        observed.backup = Some(BackupObserved {
            volume: None,
            claim: Some(claim),
            namespace_uid: "ns-uid".into(),
        });
        let plan = super::plan(&app_ref, &node_root(), &observed, MOVER).expect("plan");
        let here = names::backup_volume(ROOT, "ns1", "hello");
        assert_eq!(
            written(&plan)[2..],
            [
                format!("volume {here}"),
                format!("delete claim {}", names::backup_claim("hello")),
            ]
        );
        let Verdict::Wait {
            reason: "BackupRootChanging",
            message,
        } = &plan.verdict
        else {
            panic!("waits for the claim: {:?}", plan.verdict);
        };
        assert!(message.contains(&earlier), "{message}");
        assert!(
            !written(&plan).iter().any(|write| write.contains(&earlier)),
            "the earlier root's volume is kept: {:?}",
            written(&plan)
        );

        // The claim gone: made again for the volume at ROOT.
        if let Some(backup) = observed.backup.as_mut() {
            backup.claim = None;
            backup.volume = Some(Arc::new(backup_volume(&app_ref, ROOT, "ns-uid").keep()));
        }
        let plan = super::plan(&app_ref, &node_root(), &observed, MOVER).expect("plan");
        assert_eq!(
            written(&plan)[2..],
            [format!("claim {}", names::backup_claim("hello"))]
        );
        let Write::Claim(made) = &plan.writes[2] else {
            panic!("a claim");
        };
        assert_eq!(
            made.spec
                .as_ref()
                .and_then(|spec| spec.volume_name.as_ref()),
            Some(&here)
        );
        assert_eq!(plan.verdict, Verdict::Ready);

        // Back to a root whose volume was released when the app left it: reopened for the
        // new claim.
        let mut released = backup_volume(&app_ref, ROOT, "ns-uid");
        released.status =
            Some(serde_json::from_value(json!({"phase": "Released"})).expect("status"));
        if let Some(backup) = observed.backup.as_mut() {
            backup.volume = Some(Arc::new(released.keep()));
        }
        let plan = super::plan(&app_ref, &node_root(), &observed, MOVER).expect("plan");
        assert_eq!(
            written(&plan)[2..],
            [
                format!("reopen volume {here}"),
                format!("claim {}", names::backup_claim("hello")),
            ]
        );
        assert_eq!(plan.verdict, Verdict::Ready);
    }

    /// The backup claim names the image the admission policy lets a tenant's pod write it
    /// with (the plugin's `backups delete`): a claim made by an earlier version, or before
    /// the mover image changed, is applied again naming the current one, and left alone
    /// once it does.
    #[test]
    fn a_backup_claim_names_the_current_mover_image() {
        let app = fixtures::app(json!({"replicas": 1}), json!({}));
        let app_ref = AppRef::new(&app).expect("app");
        let volume = names::backup_volume(ROOT, "ns1", "hello");
        let mut observed = nothing(&app);
        let claim_of = |image: Option<&str>| {
            let mut claim = children::backup_claim(&app_ref, &volume, "mover:old").expect("claim");
            claim.metadata.annotations = image.map(|image| {
                [(names::MOVER_IMAGE_ANNOTATION.to_string(), image.to_string())].into()
            });
            Arc::new(claim.keep())
        };
        let claims_written = |observed: &Observed| {
            let plan = super::plan(&app_ref, &node_root(), observed, MOVER).expect("plan");
            assert_eq!(plan.verdict, Verdict::Ready);
            plan.writes
                .iter()
                .filter_map(|write| match write {
                    Write::Claim(claim) if claim.name_any() == names::backup_claim("hello") => {
                        Some(claim.annotations()[names::MOVER_IMAGE_ANNOTATION].clone())
                    }
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        for earlier in [None, Some("mover:old")] {
            observed.backup = Some(BackupObserved {
                volume: Some(Arc::new(backup_volume(&app_ref, ROOT, "ns-uid").keep())),
                claim: Some(claim_of(earlier)),
                namespace_uid: "ns-uid".into(),
            });
            assert_eq!(claims_written(&observed), [MOVER], "made with {earlier:?}");
        }
        observed.backup = Some(BackupObserved {
            volume: Some(Arc::new(backup_volume(&app_ref, ROOT, "ns-uid").keep())),
            claim: Some(claim_of(Some(MOVER))),
            namespace_uid: "ns-uid".into(),
        });
        assert!(claims_written(&observed).is_empty());
    }

    #[test]
    fn volumes_that_cannot_follow_the_spec_are_reported_and_kept_ones_said_plainly() {
        let made = fixtures::app(
            json!({"replicas": 3, "storage": {"size": "1Gi"}}),
            json!({}),
        );
        let made_ref = AppRef::new(&made).expect("app");
        let templates = [children::claim(&made_ref, 0).expect("claim")];
        let claims = |ordinals: &[i32]| -> Vec<String> {
            ordinals.iter().map(|o| names::claim("hello", *o)).collect()
        };
        let report = |spec: serde_json::Value, existing: Vec<String>| {
            let app = fixtures::app(spec, json!({}));
            let mut record = Record::new(Default::default(), Some(1));
            report_drift(
                &AppRef::new(&app).expect("app"),
                &templates,
                existing,
                &mut record,
            );
            let conditions = record.conditions();
            let reason = conditions
                .reason(conditions::STORAGE_APPLIED)
                .map(str::to_string);
            let message = conditions
                .message(conditions::STORAGE_APPLIED)
                .unwrap_or_default()
                .to_string();
            let events: Vec<_> = record.notes.iter().map(|n| (n.kind, n.reason)).collect();
            (reason, message, events)
        };

        let (reason, _, events) = report(
            json!({"replicas": 3, "storage": {"size": "1Gi"}}),
            claims(&[0, 1, 2]),
        );
        assert_eq!(reason.as_deref(), Some("Applied"));
        assert!(events.is_empty());

        let (reason, message, events) = report(
            json!({"replicas": 1, "storage": {"size": "1Gi"}}),
            claims(&[0, 10, 2]),
        );
        assert_eq!(reason.as_deref(), Some("RemovedReplicasVolumesKept"));
        assert!(
            message.contains("PersistentVolumeClaims data-hello-2, data-hello-10"),
            "{message}"
        );
        assert_eq!(events, [(EventType::Normal, "RemovedReplicasVolumesKept")]);

        let (reason, message, events) = report(
            json!({"replicas": 3, "storage": {"size": "5Gi"}}),
            claims(&[0, 1, 2]),
        );
        assert_eq!(reason.as_deref(), Some("StorageImmutable"));
        assert!(message.contains("5Gi"), "{message}");
        assert_eq!(events, [(EventType::Warning, "StorageImmutable")]);
    }

    #[test]
    fn pods_follow_node_directory_backups_only_with_dynamic_volumes_and_never_move_an_unpinned_app()
    {
        let dynamic = fixtures::app(
            json!({"replicas": 2, "storage": {"storageClassName": "fast"}}),
            json!({}),
        );
        let dynamic = AppRef::new(&dynamic).expect("app");
        let root = node_root();
        // A new app, and one already pinned (to whatever node): the backups' node.
        assert_eq!(
            super::pods_node(&dynamic, &root, Some("node-a"), None).as_deref(),
            Some("node-a")
        );
        assert_eq!(
            super::pods_node(&dynamic, &root, Some("node-a"), Some(Some("node-b"))).as_deref(),
            Some("node-a")
        );
        // Made unpinned by an earlier version: left where it runs.
        assert_eq!(
            super::pods_node(&dynamic, &root, Some("node-a"), Some(None)),
            None
        );
        // No node chosen yet, backups elsewhere than a node directory, static volumes.
        assert_eq!(super::pods_node(&dynamic, &root, None, None), None);
        let claim = BackupLocation::Claim("mine".into());
        assert_eq!(
            super::pods_node(&dynamic, &claim, Some("node-a"), None),
            None
        );
        let fixed = fixtures::app(json!({"replicas": 2}), json!({}));
        let fixed = AppRef::new(&fixed).expect("app");
        assert_eq!(super::pods_node(&fixed, &root, Some("node-a"), None), None);
    }
}
