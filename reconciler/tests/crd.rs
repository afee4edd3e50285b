//! manifests/crd.yaml is what `hellostateful-reconciler crd` prints: regenerate it with
//! `cargo run -p hellostateful-reconciler -- crd > manifests/crd.yaml` after API changes.

#[test]
fn committed_crd_equals_the_generated_one() {
    let committed = include_str!("../../manifests/crd.yaml");
    let generated = hellostateful_reconciler::crd_yaml().expect("CRD serializes");
    assert!(
        committed == generated,
        "manifests/crd.yaml is stale: run `cargo run -p hellostateful-reconciler -- crd > manifests/crd.yaml`"
    );
}
