//! Which node holds an app's node-directory volumes: one the app's pods can actually run on.
//!
//! The scheduler later places the pods by the volumes' node affinity, so a node chosen here
//! that the pods cannot run on (a tainted control plane, a cordoned node, one outside the
//! app's nodeSelector) strands the app for good. The rules are the scheduler's own filters
//! for these fields, and a refusal says why each node was passed over, as the scheduler's
//! "0/3 nodes are available" message does.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Taint, Toleration};
use kube::ResourceExt;

/// Why one node cannot hold the app's data.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Unfit {
    NotReady,
    Unschedulable,
    SelectorMismatch,
    Taint(String),
}

impl Unfit {
    fn describe(&self) -> String {
        match self {
            Unfit::NotReady => "not Ready".into(),
            Unfit::Unschedulable => "cordoned (unschedulable)".into(),
            Unfit::SelectorMismatch => "did not match the app's nodeSelector".into(),
            Unfit::Taint(taint) => format!("had a taint the app does not tolerate ({taint})"),
        }
    }
}

/// The node for the app's data: the first by name that is Ready, not cordoned, matches
/// `selector` and has no NoSchedule/NoExecute taint that `tolerations` leave untolerated.
/// Otherwise a message that counts the reasons, for the app's status.
pub fn choose<N: Borrow<Node>>(
    nodes: &[N],
    selector: &BTreeMap<String, String>,
    tolerations: &[Toleration],
) -> Result<String, String> {
    let mut fit: Vec<String> = Vec::new();
    let mut reasons: BTreeMap<Unfit, usize> = BTreeMap::new();
    for node in nodes.iter().map(Borrow::borrow) {
        match unfit(node, selector, tolerations) {
            None => fit.push(node.name_any()),
            Some(reason) => *reasons.entry(reason).or_default() += 1,
        }
    }
    fit.sort();
    if let Some(node) = fit.into_iter().next() {
        return Ok(node);
    }
    let why: Vec<String> = reasons
        .iter()
        .map(|(reason, count)| format!("{count} {}", reason.describe()))
        .collect();
    Err(if why.is_empty() {
        "no node in the cluster can hold the app's data".to_string()
    } else {
        format!(
            "0/{} nodes can hold the app's data: {}",
            nodes.len(),
            why.join(", ")
        )
    })
}

/// Why the app's pods cannot run on `node` now, if they cannot (as `choose` would say).
pub fn why_not(
    node: &Node,
    selector: &BTreeMap<String, String>,
    tolerations: &[Toleration],
) -> Option<String> {
    unfit(node, selector, tolerations).map(|unfit| unfit.describe())
}

fn unfit(
    node: &Node,
    selector: &BTreeMap<String, String>,
    tolerations: &[Toleration],
) -> Option<Unfit> {
    let ready = node
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        });
    if !ready {
        return Some(Unfit::NotReady);
    }
    let spec = node.spec.as_ref();
    if spec.and_then(|spec| spec.unschedulable).unwrap_or(false) {
        return Some(Unfit::Unschedulable);
    }
    let labels = node.labels();
    if selector
        .iter()
        .any(|(key, value)| labels.get(key) != Some(value))
    {
        return Some(Unfit::SelectorMismatch);
    }
    let taints = spec.and_then(|spec| spec.taints.as_deref()).unwrap_or(&[]);
    taints
        .iter()
        .filter(|taint| taint.effect == "NoSchedule" || taint.effect == "NoExecute")
        .find(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
        .map(|taint| {
            // As kubectl prints taints: key=value:effect, or key:effect without a value.
            Unfit::Taint(match taint.value.as_deref().filter(|v| !v.is_empty()) {
                Some(value) => format!("{}={value}:{}", taint.key, taint.effect),
                None => format!("{}:{}", taint.key, taint.effect),
            })
        })
}

/// Kubernetes' toleration rule: an empty effect matches every effect; operator Exists
/// matches any value (and, with an empty key, every key); Equal (the default) needs the
/// same key and value.
fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == taint.key,
        "Equal" => {
            key == taint.key
                && toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, ready: bool, extra: serde_json::Value) -> Node {
        let mut node = json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        });
        if let Some(spec) = extra.get("spec") {
            node["spec"] = spec.clone();
        }
        if let Some(labels) = extra.get("labels") {
            node["metadata"]["labels"] = labels.clone();
        }
        serde_json::from_value(node).expect("a valid Node")
    }

    fn control_plane() -> Node {
        node(
            "a-control-plane",
            true,
            json!({"spec": {"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}}),
        )
    }

    fn toleration(value: serde_json::Value) -> Toleration {
        serde_json::from_value(value).expect("a valid Toleration")
    }

    fn cluster() -> Vec<Node> {
        vec![
            node("z-worker", true, json!({})),
            control_plane(),
            node("b-cordoned", true, json!({"spec": {"unschedulable": true}})),
            node("c-notready", false, json!({})),
            node(
                "d-soft",
                true,
                json!({"spec": {"taints": [{"key": "busy", "effect": "PreferNoSchedule"}]}}),
            ),
        ]
    }

    #[test]
    fn skips_tainted_cordoned_and_not_ready_nodes_that_sort_first() {
        assert_eq!(
            choose(&cluster(), &BTreeMap::new(), &[]),
            Ok("d-soft".into())
        );
        let without_soft: Vec<Node> = cluster()
            .into_iter()
            .filter(|n| n.name_any() != "d-soft")
            .collect();
        assert_eq!(
            choose(&without_soft, &BTreeMap::new(), &[]),
            Ok("z-worker".into())
        );
    }

    #[test]
    fn a_toleration_and_a_selector_can_choose_the_control_plane() {
        let pin = BTreeMap::from([(
            "kubernetes.io/hostname".to_string(),
            "a-control-plane".to_string(),
        )]);
        let exists = toleration(
            json!({"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}),
        );
        assert_eq!(
            choose(&cluster(), &pin, &[exists]),
            Ok("a-control-plane".into())
        );
        let message = choose(&cluster(), &pin, &[]).unwrap_err();
        assert_eq!(
            message,
            "0/5 nodes can hold the app's data: 1 not Ready, 1 cordoned (unschedulable), \
             2 did not match the app's nodeSelector, \
             1 had a taint the app does not tolerate (node-role.kubernetes.io/control-plane:NoSchedule)"
        );
    }

    #[test]
    fn tolerations_follow_the_kubernetes_matching_rules() {
        let taint: Taint =
            serde_json::from_value(json!({"key": "k", "value": "v", "effect": "NoExecute"}))
                .unwrap();
        let cases = [
            (json!({"operator": "Exists"}), true),
            (json!({"key": "k", "operator": "Exists"}), true),
            (json!({"key": "k", "value": "v"}), true),
            (
                json!({"key": "k", "value": "v", "effect": "NoExecute"}),
                true,
            ),
            (
                json!({"key": "k", "value": "v", "effect": "NoSchedule"}),
                false,
            ),
            (json!({"key": "k", "value": "w"}), false),
            (json!({"key": "other", "operator": "Exists"}), false),
            (json!({"key": "k", "operator": "Lt", "value": "9"}), false),
        ];
        for (value, expected) in cases {
            assert_eq!(
                tolerates(&toleration(value.clone()), &taint),
                expected,
                "{value}"
            );
        }
    }

    #[test]
    fn no_node_at_all_is_said_plainly() {
        assert_eq!(
            choose::<Node>(&[], &BTreeMap::new(), &[]),
            Err("no node in the cluster can hold the app's data".into())
        );
    }
}
