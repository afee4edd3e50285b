//! Terminal behaviour through a pseudo-terminal: prompts appear on a terminal, colours too
//! unless NO_COLOR says otherwise, and every run ends with the exit code a script expects.

mod fake_api;

use std::process::Command;

use fake_api::{Behaviour, FakeApi};
use rexpect::process::WaitStatus;
use rexpect::session::{PtySession, spawn_command};

/// The plugin on a terminal, without colours (so that the texts below match).
fn command(kubeconfig: &std::path::Path, args: &[&str]) -> Command {
    let mut command = coloured(kubeconfig, args);
    command.env("NO_COLOR", "1");
    command
}

/// The plugin on a terminal, colours as the user's environment would have them.
fn coloured(kubeconfig: &std::path::Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kubectl-hellostateful"));
    command
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("NO_COLOR")
        .env("TERM", "xterm");
    command
}

/// Reads the rest of the output, waits for the process and returns its exit code.
fn exit_code(mut session: PtySession) -> i32 {
    session.exp_eof().expect("the end of the output");
    match session.process().wait().expect("wait") {
        WaitStatus::Exited(_, code) => code,
        other => panic!("the plugin did not exit: {other:?}"),
    }
}

/// Answers a yes/no question once it waits for a key (in raw mode: a key typed before that
/// would be flushed away).
fn answer(session: &mut rexpect::session::PtySession, key: &str) {
    session.exp_string("[y/N]").expect("the yes/no prompt");
    std::thread::sleep(std::time::Duration::from_millis(400));
    session.send(key).expect("answer");
    session.flush().expect("flush");
}

#[test]
fn restore_asks_what_will_be_overwritten_and_no_changes_nothing() {
    let api = FakeApi::start(Behaviour {
        crd: true,
        ack_phase: Some("Succeeded"),
    });
    let mut session = spawn_command(
        command(&api.kubeconfig, &["restore", "hello"]),
        Some(15_000),
    )
    .expect("spawn");
    session
        .exp_string("Restore default/hello from the newest backup (in node directory /tmp/backup)?")
        .expect("the question");
    session
        .exp_string("This overwrites all data on the volumes data-hello-0 of its 1 replica(s).")
        .expect("what is overwritten");
    session
        .exp_string("stopped while the data is restored")
        .expect("stopped");
    answer(&mut session, "n");
    session
        .exp_string("restore cancelled: nothing was changed")
        .expect("cancelled");
    assert_eq!(exit_code(session), 1);
    assert!(
        api.requests().iter().all(|r| r.0 != "PATCH"),
        "a patch was sent"
    );
}

#[test]
fn restore_yes_on_a_terminal_restores() {
    let api = FakeApi::start(Behaviour {
        crd: true,
        ack_phase: Some("Succeeded"),
    });
    let mut session = spawn_command(
        command(&api.kubeconfig, &["restore", "hello"]),
        Some(15_000),
    )
    .expect("spawn");
    answer(&mut session, "y");
    session
        .exp_string("restored from backup 20261129T145500Z")
        .expect("restored");
    assert_eq!(exit_code(session), 0);
    assert_eq!(api.requests().iter().filter(|r| r.0 == "PATCH").count(), 1);
}

#[test]
fn backup_on_a_terminal_says_how_to_list_backups_instead() {
    let api = FakeApi::start(Behaviour {
        crd: true,
        ack_phase: Some("Succeeded"),
    });
    let mut session =
        spawn_command(command(&api.kubeconfig, &["backup", "hello"]), Some(15_000)).expect("spawn");
    session
        .exp_string("To list backups instead: kubectl hellostateful backups hello")
        .expect("the hint");
    assert_eq!(exit_code(session), 0);
    assert_eq!(api.requests().iter().filter(|r| r.0 == "PATCH").count(), 1);
}

#[test]
fn create_asks_for_a_schedule_on_a_terminal() {
    let api = FakeApi::start(Behaviour {
        crd: true,
        ack_phase: None,
    });
    let mut session = spawn_command(
        command(
            &api.kubeconfig,
            &["create", "demo", "--dry-run=client", "-o", "json"],
        ),
        Some(15_000),
    )
    .expect("spawn");
    session.exp_string("Backup schedule").expect("the prompt");
    session.send_line("*/10 * * * *").expect("answer");
    session
        .exp_string("\"backupSchedule\": \"*/10 * * * *\"")
        .expect("the schedule is used");
    assert_eq!(exit_code(session), 0);
}

#[test]
fn delete_asks_and_says_backups_are_kept() {
    let api = FakeApi::start(Behaviour {
        crd: true,
        ack_phase: None,
    });
    let mut session =
        spawn_command(command(&api.kubeconfig, &["delete", "hello"]), Some(15_000)).expect("spawn");
    session
        .exp_string("Its live data is wiped.")
        .expect("the data is wiped");
    session
        .exp_string(
            "Its backups are kept in node directory /tmp/backup/default/hello on node node-1.",
        )
        .expect("the question");
    answer(&mut session, "n");
    session.exp_string("delete cancelled").expect("cancelled");
    assert_eq!(exit_code(session), 1);
    assert!(
        api.requests().iter().all(|r| r.0 != "DELETE"),
        "a delete was sent"
    );
}

#[test]
fn delete_backups_warns_they_cannot_be_recovered_and_no_changes_nothing() {
    let api = FakeApi::start(Behaviour {
        crd: true,
        ack_phase: None,
    });
    let mut session = spawn_command(
        command(&api.kubeconfig, &["delete", "hello", "--delete-backups"]),
        Some(15_000),
    )
    .expect("spawn");
    session
        .exp_string("and all its backups?")
        .expect("the question");
    session
        .exp_string(
            "Its backups in node directory /tmp/backup/default/hello on node node-1 are deleted too: they cannot be recovered.",
        )
        .expect("the warning");
    answer(&mut session, "n");
    session.exp_string("delete cancelled").expect("cancelled");
    assert_eq!(exit_code(session), 1);
    assert!(
        api.requests()
            .iter()
            .all(|r| r.0 != "PATCH" && r.0 != "DELETE"),
        "a change was sent"
    );
}

#[test]
fn a_terminal_gets_colours_unless_no_color_is_set() {
    let api = FakeApi::start(Behaviour {
        crd: true,
        ack_phase: None,
    });
    let mut session =
        spawn_command(coloured(&api.kubeconfig, &["list"]), Some(15_000)).expect("spawn");
    let before = session.exp_string("hello").expect("the first app");
    let row = session.exp_string("web").expect("the second app");
    assert!(
        format!("{before}{row}").contains("\u{1b}["),
        "no colour on a terminal: {before:?} {row:?}"
    );
    assert_eq!(exit_code(session), 0);

    let mut plain = command(&api.kubeconfig, &["list"]);
    plain.env("NO_COLOR", "1");
    let mut session = spawn_command(plain, Some(15_000)).expect("spawn");
    let text = session.exp_string("web").expect("the apps");
    assert!(
        !text.contains('\u{1b}'),
        "colour despite NO_COLOR: {text:?}"
    );
    assert_eq!(exit_code(session), 0);
}

#[test]
fn a_missing_app_fails_with_exit_code_1_and_a_red_error_on_a_terminal() {
    let api = FakeApi::start(Behaviour {
        crd: true,
        ack_phase: None,
    });
    let mut session =
        spawn_command(coloured(&api.kubeconfig, &["get", "nosuch"]), Some(15_000)).expect("spawn");
    let before = session
        .exp_string("hellostateful \"nosuch\" not found")
        .expect("the error");
    assert!(before.contains("\u{1b}[31m"), "a red error: {before:?}");
    assert_eq!(exit_code(session), 1);
    // A usage error is 2, as clap (and kubectl) exit.
    let session =
        spawn_command(command(&api.kubeconfig, &["get", "--bogus"]), Some(15_000)).expect("spawn");
    assert_eq!(exit_code(session), 2);
}

#[test]
fn status_get_and_version_on_a_terminal_say_the_same_as_without_one() {
    let api = FakeApi::start(Behaviour {
        crd: true,
        ack_phase: None,
    });
    // status: the report, bold headings on a terminal.
    let mut session = spawn_command(
        coloured(&api.kubeconfig, &["status", "hello"]),
        Some(15_000),
    )
    .expect("spawn");
    let before = session.exp_string("Conditions:").expect("the conditions");
    assert!(
        before.contains("hello") && before.contains("\u{1b}[1m"),
        "a bold report: {before:?}"
    );
    assert_eq!(exit_code(session), 0);
    // get -o json: plain JSON even on a terminal, so that it can be copied or piped.
    let mut session = spawn_command(
        coloured(&api.kubeconfig, &["get", "hello", "-o", "json"]),
        Some(15_000),
    )
    .expect("spawn");
    let json = session
        .exp_string("\"kind\": \"HelloStateful\"")
        .expect("JSON");
    assert!(!json.contains('\u{1b}'), "colour codes in JSON: {json:?}");
    assert_eq!(exit_code(session), 0);
    // version: the plugin, the API server and the reconciler's image.
    let mut session =
        spawn_command(command(&api.kubeconfig, &["version"]), Some(15_000)).expect("spawn");
    session
        .exp_string(
            "Reconciler: 0.1.0 (image hellostateful-reconciler:0.1.0), available (1/1 pods)",
        )
        .expect("the reconciler");
    assert_eq!(exit_code(session), 0);
    // -o where it means nothing is refused, on a terminal too.
    let mut session = spawn_command(
        command(&api.kubeconfig, &["logs", "hello", "-o", "json"]),
        Some(15_000),
    )
    .expect("spawn");
    session
        .exp_string("-o json means nothing for this command")
        .expect("the refusal");
    assert_eq!(exit_code(session), 1);
}
