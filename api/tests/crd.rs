//! The CRD derived from the types: what `kubectl` and the API server will see.

use hellostateful_api::{HelloStateful, HelloStatefulSpec};
use kube::CustomResourceExt;

#[test]
fn the_2018_manifest_still_parses_with_its_meaning() {
    let seed = r#"
apiVersion: hello-stateful.example.com/v1alpha1
kind: HelloStateful
metadata: {name: minikube-hello-stateful}
spec: {replicas: 1, restoreFromExisting: true, backupSchedule: "*/5 * * * *"}
"#;
    let app: HelloStateful = serde_saphyr::from_str(seed).expect("seed manifest parses");
    assert_eq!(app.spec.replicas, 1);
    assert!(app.spec.restore_from_existing);
    assert_eq!(app.spec.backup_schedule.as_deref(), Some("*/5 * * * *"));
    assert_eq!(app.spec.image(), "busybox:1.36");
    assert_eq!(app.spec.mount_path(), "/usr/share/hello");
    assert!(app.spec.command()[2].contains("/usr/share/hello/stateful.log"));
}

#[test]
fn an_empty_spec_gets_the_seed_defaults() {
    let spec: HelloStatefulSpec = serde_json::from_str("{}").expect("empty spec parses");
    assert_eq!(spec.replicas, 1);
    assert!(!spec.restore_from_existing);
    assert_eq!(spec.keep_last(), 10);
    assert_eq!(spec.storage_class(), None);
}

#[test]
fn crd_has_names_columns_status_and_validation() {
    let crd = serde_json::to_value(HelloStateful::crd()).expect("crd serializes");
    let names = &crd["spec"]["names"];
    assert_eq!(names["plural"], "hellostatefuls");
    assert_eq!(names["shortNames"][0], "hs");
    assert_eq!(names["categories"][0], "all");
    let version = &crd["spec"]["versions"][0];
    assert_eq!(version["name"], "v1alpha1");
    assert!(version["subresources"]["status"].is_object());
    let columns: Vec<&str> = version["additionalPrinterColumns"]
        .as_array()
        .expect("columns")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        columns,
        [
            "Ready",
            "Replicas",
            "Schedule",
            "Last Backup",
            "Restored",
            "Age"
        ]
    );
    let text = crd.to_string();
    for expected in [
        "self.metadata.name.size() <= 45",
        "backupSchedule must be a cron schedule",
        "storage.size must be a quantity",
        "\"maximum\":20",
    ] {
        assert!(text.contains(expected), "CRD lacks {expected}");
    }
    let spec_schema = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let backup = &spec_schema["properties"]["backup"];
    assert!(
        backup["description"]
            .as_str()
            .is_some_and(|d| d.contains("Where backups go")),
        "fields are documented for kubectl explain: {backup}"
    );
}
