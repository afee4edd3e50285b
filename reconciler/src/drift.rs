//! Deciding whether a child needs a write: an object is up to date when every field the
//! reconciler sets has that value in the cluster. Fields the API server or other
//! controllers add are not the reconciler's business, so they never cause a write.

use hellostateful_api::quantity;
use serde_json::Value;

/// True when every field of `desired` is present in `observed` with the same value.
///
/// Empty lists, empty maps and nulls in `desired` match absent fields: the API server drops
/// them, and treating them as drift would write on every pass.
pub fn is_subset(desired: &Value, observed: &Value) -> bool {
    match (desired, observed) {
        (Value::Object(want), Value::Object(have)) => {
            want.iter().all(|(key, value)| match have.get(key) {
                Some(found) if QUANTITIES.contains(&key.as_str()) => same_quantities(value, found),
                Some(found) => is_subset(value, found),
                None => is_empty(value),
            })
        }
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| is_subset(w, h))
        }
        (want, Value::Null) => is_empty(want),
        (want, have) => want == have,
    }
}

/// Maps of quantities (a container's resources), which the API server stores in canonical
/// form: `cpu: 0.5` reads back `500m`.
const QUANTITIES: [&str; 2] = ["limits", "requests"];

fn same_quantities(desired: &Value, observed: &Value) -> bool {
    match (desired, observed) {
        (Value::Object(want), Value::Object(have)) => {
            want.len() == have.len()
                && want.iter().all(|(name, amount)| {
                    match (amount.as_str(), have.get(name).and_then(Value::as_str)) {
                        (Some(want), Some(have)) => quantity::same(want, have),
                        _ => is_subset(amount, have.get(name).unwrap_or(&Value::Null)),
                    }
                })
        }
        _ => is_subset(desired, observed),
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn server_added_fields_are_not_drift() {
        let desired =
            json!({"spec": {"replicas": 1, "template": {"containers": [{"name": "app"}]}}});
        let observed = json!({"spec": {"replicas": 1, "revisionHistoryLimit": 10,
            "template": {"containers": [{"name": "app", "terminationMessagePath": "/dev/termination-log"}]}},
            "status": {"replicas": 1}});
        assert!(is_subset(&desired, &observed));
    }

    #[test]
    fn changed_or_missing_values_are_drift() {
        let desired = json!({"spec": {"replicas": 2}});
        assert!(!is_subset(&desired, &json!({"spec": {"replicas": 1}})));
        assert!(!is_subset(&desired, &json!({"spec": {}})));
        let containers = json!({"c": [{"image": "a"}, {"image": "b"}]});
        assert!(!is_subset(&containers, &json!({"c": [{"image": "a"}]})));
    }

    #[test]
    fn resources_read_back_in_canonical_form_are_not_drift() {
        let desired = json!({"resources": {"requests": {"cpu": "0.5", "memory": "1.5Gi"}}});
        let canonical = json!({"resources": {"requests": {"cpu": "500m", "memory": "1536Mi"}}});
        assert!(is_subset(&desired, &canonical));
        let changed = json!({"resources": {"requests": {"cpu": "1", "memory": "1536Mi"}}});
        assert!(!is_subset(&desired, &changed));
        let more = json!({"resources": {"requests": {"cpu": "500m", "memory": "1536Mi", "ephemeral-storage": "1Gi"}}});
        assert!(
            !is_subset(&desired, &more),
            "a request removed from the spec is drift"
        );
    }

    #[test]
    fn empty_desired_collections_match_absent_fields() {
        let desired = json!({"metadata": {"annotations": {}}, "spec": {"args": [], "x": null}});
        assert!(is_subset(&desired, &json!({"metadata": {}, "spec": {}})));
    }
}
