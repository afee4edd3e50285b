//! The binary against a fake API server, without a terminal: outputs, exit codes, and no
//! prompt ever.

mod fake_api;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fake_api::{Behaviour, FakeApi, refusing_kubeconfig};

fn plugin(kubeconfig: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-hellostateful"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .output()
        .expect("run the plugin")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn healthy() -> FakeApi {
    FakeApi::start(Behaviour {
        crd: true,
        ack_phase: Some("Succeeded"),
    })
}

#[test]
fn list_prints_a_table_without_colour() {
    let api = healthy();
    let out = plugin(&api.kubeconfig, &["list"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let mut lines = stdout.lines();
    assert_eq!(
        lines.next(),
        Some("NAME    READY   REPLICAS   SCHEDULE      LAST BACKUP   RESTORED   AGE")
    );
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("hello   1/1     1          */5 * * * *")
    );
    assert!(
        !stdout.contains('\u{1b}'),
        "colour without a terminal: {stdout:?}"
    );
}

#[test]
fn json_and_yaml_and_name_outputs_parse() {
    let api = healthy();
    let out = plugin(&api.kubeconfig, &["list", "-o", "json"]);
    assert!(out.status.success());
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"][0]["kind"], "HelloStateful");
    let out = plugin(&api.kubeconfig, &["get", "hello", "-o", "json"]);
    let one: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(one["metadata"]["name"], "hello");
    let out = plugin(&api.kubeconfig, &["get", "hello", "-o", "yaml"]);
    assert!(text(&out.stdout).contains("kind: HelloStateful"));
    let out = plugin(&api.kubeconfig, &["get", "-o", "name"]);
    assert_eq!(
        text(&out.stdout),
        "hellostateful.hello-stateful.example.com/hello\nhellostateful.hello-stateful.example.com/web\n"
    );
}

#[test]
fn a_missing_app_lists_what_exists() {
    let api = healthy();
    let out = plugin(&api.kubeconfig, &["get", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr).trim(),
        "error: hellostateful \"nope\" not found in namespace \"default\"; apps in it: hello, web"
    );
}

#[test]
fn a_missing_crd_says_how_to_install() {
    let api = FakeApi::start(Behaviour {
        crd: false,
        ack_phase: None,
    });
    for args in [
        &["list"][..],
        &["status", "hello"],
        &["backup", "hello", "--wait=false"],
    ] {
        let out = plugin(&api.kubeconfig, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            text(&out.stderr).contains("the HelloStateful CRD is not installed in this cluster: run `kubectl hellostateful install`"),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn backup_waits_for_the_acknowledgement_and_prints_the_id() {
    let api = healthy();
    let out = plugin(
        &api.kubeconfig,
        &["backup", "hello", "--wait", "--timeout", "20s"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("backup id 20261129T150000Z"),
        "{}",
        text(&out.stdout)
    );
    let patches: Vec<_> = api
        .requests()
        .into_iter()
        .filter(|r| r.0 == "PATCH")
        .collect();
    assert_eq!(patches.len(), 1);
    let body: serde_json::Value = serde_json::from_str(&patches[0].2).unwrap();
    let token = body["metadata"]["annotations"]["hello-stateful.example.com/backup-requested"]
        .as_str()
        .unwrap();
    assert!(
        chrono::DateTime::parse_from_rfc3339(token).is_ok(),
        "{token}"
    );
}

#[test]
fn a_failed_backup_exits_1_with_the_reason() {
    let api = FakeApi::start(Behaviour {
        crd: true,
        ack_phase: Some("Failed"),
    });
    let out = plugin(&api.kubeconfig, &["backup", "hello", "--wait"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("backup of default/hello failed: disk full"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_timeout_says_what_state_was_left() {
    let api = FakeApi::start(Behaviour {
        crd: true,
        ack_phase: Some("Running"),
    });
    let out = plugin(
        &api.kubeconfig,
        &["backup", "hello", "--wait", "--timeout", "2s"],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("timed out waiting for the backup of default/hello: it was last Running"),
        "{stderr}"
    );
    assert!(stderr.contains("Nothing is rolled back"), "{stderr}");
}

#[test]
fn without_a_terminal_backup_still_waits_and_wait_false_returns_the_request() {
    let api = FakeApi::start(Behaviour {
        crd: true,
        ack_phase: None,
    });
    // What a person gets on a terminal, a script gets too: it waits (here until --timeout).
    let out = plugin(&api.kubeconfig, &["backup", "hello", "--timeout", "2s"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("timed out waiting for the backup of default/hello"));
    let out = plugin(&api.kubeconfig, &["backup", "hello", "--wait=false"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("Backup of default/hello requested (token "));
    let out = plugin(
        &api.kubeconfig,
        &["backup", "hello", "--wait=false", "-o", "json"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let request: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(request["kind"], "backup");
    assert_eq!(request["namespace"], "default");
    assert_eq!(request["name"], "hello");
    assert_eq!(request["phase"], "Requested");
    assert!(
        request["token"]
            .as_str()
            .is_some_and(|t| t.starts_with("20"))
    );
}

#[test]
fn restore_with_yes_sends_one_patch_with_both_annotations() {
    let api = healthy();
    let out = plugin(
        &api.kubeconfig,
        &[
            "restore",
            "hello",
            "--from",
            "20261129T145500Z",
            "--yes",
            "--wait",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("restored from backup 20261129T145500Z"));
    let patches: Vec<_> = api
        .requests()
        .into_iter()
        .filter(|r| r.0 == "PATCH")
        .collect();
    assert_eq!(patches.len(), 1);
    let body: serde_json::Value = serde_json::from_str(&patches[0].2).unwrap();
    let annotations = &body["metadata"]["annotations"];
    assert_eq!(
        annotations["hello-stateful.example.com/restore-from"],
        "20261129T145500Z"
    );
    assert!(annotations["hello-stateful.example.com/restore-requested"].is_string());
}

#[test]
fn destructive_commands_refuse_without_a_terminal_or_yes() {
    let refusing = refusing_kubeconfig();
    for (args, message) in [
        (
            &["restore", "hello"][..],
            "refusing to restore hello without confirmation: stdin is not a terminal; pass --yes",
        ),
        (
            &["delete", "hello"][..],
            "refusing to delete hello without confirmation: stdin is not a terminal; pass --yes",
        ),
        (
            &["uninstall"][..],
            "refusing to uninstall without confirmation",
        ),
        (&["uninstall", "--include-crd"][..], "pass --yes as well"),
    ] {
        let started = Instant::now();
        let out = plugin(&refusing, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            text(&out.stderr).contains(message),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{args:?} was slow"
        );
    }
}

#[test]
fn bad_input_is_refused_before_contacting_the_cluster() {
    let refusing = refusing_kubeconfig();
    let out = plugin(
        &refusing,
        &["create", "hello", "--schedule", "every minute"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is not a valid cron schedule"),
        "{}",
        text(&out.stderr)
    );
    let out = plugin(
        &refusing,
        &["create", "Hello_World", "--schedule", "@hourly"],
    );
    assert!(
        text(&out.stderr).contains("invalid app name"),
        "{}",
        text(&out.stderr)
    );
    let out = plugin(
        &refusing,
        &[
            "create",
            "hello",
            "--schedule",
            "@hourly",
            "--node-selector",
            "Example.com/tier=gold",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("nodeSelector key \"Example.com/tier\" is not a label key"),
        "{}",
        text(&out.stderr)
    );
    let out = plugin(
        &refusing,
        &["restore", "hello", "--from", "../etc", "--yes"],
    );
    assert!(
        text(&out.stderr).contains("is not a backup id"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn create_client_dry_run_prints_the_object_without_prompting() {
    let refusing = refusing_kubeconfig();
    let out = plugin(
        &refusing,
        &[
            "create",
            "hello",
            "-n",
            "default",
            "--dry-run=client",
            "-o",
            "json",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let object: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(object["metadata"]["namespace"], "default");
    assert_eq!(object["spec"]["replicas"], 1);
    assert!(object["spec"].get("backupSchedule").is_none());
}

#[test]
fn an_unreachable_cluster_is_a_clear_error() {
    let refusing = refusing_kubeconfig();
    let out = plugin(&refusing, &["list"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("error: cannot list hellostatefuls in namespace \"default\""),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn version_without_a_cluster_names_the_plugin_and_fails() {
    let refusing = refusing_kubeconfig();
    let out = plugin(&refusing, &["version"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stdout),
        format!(
            "Plugin:     kubectl-hellostateful {}\n",
            env!("CARGO_PKG_VERSION")
        )
    );
    assert!(
        text(&out.stderr).starts_with("error: cannot reach the cluster's API server:"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn version_and_completion_work() {
    let api = healthy();
    let out = plugin(&api.kubeconfig, &["version"]);
    assert_eq!(
        text(&out.stdout),
        format!(
            "Plugin:     kubectl-hellostateful {}\n\
             Server:     Kubernetes v1.34.4\n\
             Reconciler: 0.1.0 (image hellostateful-reconciler:0.1.0), available (1/1 pods)\n  \
             pod hellostateful-reconciler-1: runs docker.io/library/hellostateful-reconciler:0.1.0 (sha256:ab12)\n",
            env!("CARGO_PKG_VERSION")
        )
    );
    let out = plugin(&api.kubeconfig, &["completion", "bash"]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("kubectl-hellostateful"));
}

#[test]
fn delete_with_yes_keeps_the_backups_and_says_the_data_is_wiped() {
    let api = healthy();
    let out = plugin(&api.kubeconfig, &["delete", "hello", "--yes"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "hellostateful.hello-stateful.example.com/hello deleted\nIts live data is wiped. Its backups are kept in node directory /tmp/backup/default/hello on node node-1: create it again with --restore-from-existing to get its data back.\n"
    );
    let requests = api.requests();
    assert!(requests.iter().all(|r| r.0 != "PATCH"), "{requests:?}");
    assert_eq!(
        requests
            .iter()
            .filter(|r| r.0 == "DELETE" && r.1.starts_with(&format!("{}/hello", fake_api::APPS)))
            .count(),
        1
    );
}

#[test]
fn delete_backups_annotates_the_app_before_deleting_it() {
    let api = healthy();
    let out = plugin(
        &api.kubeconfig,
        &["delete", "hello", "--delete-backups", "--yes"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(
            "Its backups in node directory /tmp/backup/default/hello on node node-1 were deleted by the reconciler: they cannot be recovered"
        ),
        "{}",
        text(&out.stdout)
    );
    let changes: Vec<_> = api
        .requests()
        .into_iter()
        .filter(|r| r.0 == "PATCH" || r.0 == "DELETE")
        .collect();
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert_eq!(changes[0].0, "PATCH");
    assert_eq!(changes[1].0, "DELETE");
    let body: serde_json::Value = serde_json::from_str(&changes[0].2).unwrap();
    assert_eq!(
        body,
        serde_json::json!({"metadata": {"annotations": {"hello-stateful.example.com/delete-backups": "true"}}})
    );
}

#[test]
fn backups_without_a_backup_claim_says_none_were_made_and_runs_no_pod() {
    let api = healthy();
    let out = plugin(&api.kubeconfig, &["backups", "hello"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "");
    assert!(
        text(&out.stderr).contains(
            "No backups of default/hello: its backup claim backups-hello does not exist, so no backup was ever made."
        ),
        "{}",
        text(&out.stderr)
    );
    let out = plugin(&api.kubeconfig, &["backups", "hello", "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(list, serde_json::json!([]));
    let requests = api.requests();
    assert!(
        requests.iter().any(|r| r.0 == "GET"
            && r.1
                .starts_with("/api/v1/namespaces/default/persistentvolumeclaims/backups-hello")),
        "{requests:?}"
    );
    assert!(requests.iter().all(|r| r.0 != "POST"), "{requests:?}");
}

#[test]
fn backups_in_a_store_the_admin_does_not_allow_are_refused_before_any_pod_is_made() {
    let api = healthy();
    for command in [
        &["backups", "offsite"][..],
        &["verify", "offsite"],
        &["backups", "describe", "offsite", "latest"],
        &["backups", "delete", "offsite", "20261129T145500Z", "--yes"],
    ] {
        let out = plugin(&api.kubeconfig, command);
        assert_eq!(out.status.code(), Some(1), "{command:?}");
        assert!(
            text(&out.stderr).contains(
                "the object store endpoint \"https://s3.example.com.evil.io\" of default/offsite (spec.backup.target.objectStore.endpoint) is not one the cluster admin allows (https://s3.example.com): no pod was run"
            ),
            "{command:?}: {}",
            text(&out.stderr)
        );
    }
    let requests = api.requests();
    assert!(
        requests.iter().any(|r| r.0 == "GET"
            && r.1.starts_with(
                "/api/v1/namespaces/hellostateful-system/configmaps/hellostateful-settings"
            )),
        "{requests:?}"
    );
    assert!(requests.iter().all(|r| r.0 != "POST"), "{requests:?}");

    // The store the admin allows gets as far as making the pod (which the fake refuses).
    let out = plugin(&api.kubeconfig, &["backups", "onsite"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        api.requests()
            .iter()
            .any(|r| r.0 == "POST" && r.1.starts_with("/api/v1/namespaces/default/pods")),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn install_dry_run_shows_the_settings_with_the_roots_and_image() {
    let refusing = refusing_kubeconfig();
    let out = plugin(
        &refusing,
        &[
            "install",
            "--dry-run",
            "-o",
            "json",
            "--image",
            "registry.example.com/hs:2",
            "--backup-roots",
            "/tmp/backup,/srv/backups",
            "--object-store-endpoints",
            "https://s3.example.com/, http://minio:9000",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let items = list["items"].as_array().unwrap();
    let settings = items
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "hellostateful-settings")
        .expect("the settings");
    assert_eq!(settings["data"]["backupRoots"], "/tmp/backup,/srv/backups");
    assert_eq!(
        settings["data"]["objectStoreEndpoints"],
        "https://s3.example.com,http://minio:9000"
    );
    assert_eq!(settings["data"]["moverImage"], "registry.example.com/hs:2");
    for kind in [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        assert!(items.iter().any(|d| d["kind"] == kind), "{kind} missing");
    }
    let out = plugin(&refusing, &["install", "--dry-run", "-o", "yaml"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("backupRoots: /tmp/backup"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stdout).contains("objectStoreEndpoints: ''")
            || text(&out.stdout).contains("objectStoreEndpoints: \"\""),
        "by default any endpoint: {}",
        text(&out.stdout)
    );
}

#[test]
fn object_store_endpoints_are_refused_unless_scheme_and_host() {
    let refusing = refusing_kubeconfig();
    let out = plugin(
        &refusing,
        &["install", "--object-store-endpoints", "s3.example.com"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr)
            .contains("\"s3.example.com\" is not an object store endpoint like https://"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn node_paths_are_refused_unless_clean() {
    let refusing = refusing_kubeconfig();
    let out = plugin(&refusing, &["install", "--backup-roots", "/"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("/ is the whole node"),
        "{}",
        text(&out.stderr)
    );
    let out = plugin(
        &refusing,
        &[
            "create",
            "hello",
            "--schedule",
            "@hourly",
            "--backup-target-host-path",
            "/tmp/backup/../etc",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("must be a clean absolute path like /tmp/backup")
            && text(&out.stderr)
                .contains("the backup roots the cluster admin allows (default /tmp/backup)"),
        "{}",
        text(&out.stderr)
    );
}
