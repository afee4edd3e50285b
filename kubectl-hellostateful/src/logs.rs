//! `logs NAME`: the app's stateful.log, read by exec'ing `tail` in a replica.

use hellostateful_api::defaults::LOG_FILE;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::AttachParams;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

use crate::cli::LogsArgs;
use crate::context::Ctx;
use crate::error::{Action, CliError, explain};
use crate::output::printable_lines;

/// The command run in the app container.
pub fn tail_command(mount_path: &str, lines: i64, follow: bool) -> Vec<String> {
    // `tail -n +1` prints from the first line: the whole file.
    let lines = if lines < 0 {
        "+1".to_string()
    } else {
        lines.to_string()
    };
    let mut command = vec!["tail".to_string(), "-n".to_string(), lines];
    if follow {
        command.push("-f".to_string());
    }
    command.push(format!("{}/{LOG_FILE}", mount_path.trim_end_matches('/')));
    command
}

/// `logs`.
pub async fn logs(ctx: &Ctx, args: &LogsArgs) -> Result<String, CliError> {
    let kube = ctx.connect().await?;
    let app = kube.get_app(&args.name).await?;
    if i64::from(args.replica) >= i64::from(app.spec.replicas) {
        return Err(CliError::Usage(format!(
            "{} has {} replica(s): --replica must be below {}",
            args.name, app.spec.replicas, app.spec.replicas
        )));
    }
    let pod = format!("{}-{}", args.name, args.replica);
    let command = tail_command(app.spec.mount_path(), args.tail, args.follow);
    ctx.debug(
        1,
        format!("exec in pod {pod} container app: {}", command.join(" ")),
    );
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &kube.namespace);
    let params = AttachParams::default()
        .container("app")
        .stdin(false)
        .stdout(true)
        .stderr(true);
    let mut process = match pods.exec(&pod, command, &params).await {
        Ok(process) => process,
        Err(e) if crate::error::code(&e) == Some(404) => {
            return Err(CliError::Failed(format!(
                "pod {pod} of {}/{} does not exist (yet): see `kubectl hellostateful status {} -n {}`",
                kube.namespace, args.name, args.name, kube.namespace
            )));
        }
        Err(e) => {
            return Err(explain(
                e,
                &Action::new(
                    "exec into",
                    format!("pod {pod:?} in namespace {:?}", kube.namespace),
                ),
            ));
        }
    };
    let stdout = process.stdout();
    let stderr = process.stderr();
    let status = process.take_status();
    let copy_out = async {
        if let Some(reader) = stdout {
            copy_log(reader, tokio::io::stdout(), ctx.terminal.stdout).await;
        }
    };
    let copy_err = async {
        if let Some(reader) = stderr {
            copy_log(reader, tokio::io::stderr(), ctx.terminal.stderr).await;
        }
    };
    futures::join!(copy_out, copy_err);
    let outcome = match status {
        Some(status) => status.await,
        None => None,
    };
    let _ = process.join().await;
    if let Some(status) = outcome
        && status.status.as_deref() == Some("Failure")
    {
        return Err(CliError::Failed(format!(
            "reading {}/{LOG_FILE} in pod {pod} failed: {}",
            app.spec.mount_path(),
            status.message.unwrap_or_default()
        )));
    }
    Ok(String::new())
}

/// Copies the app's log to `to`: byte for byte into a pipe or a file, but on a terminal
/// line by line through [`printable_lines`], since whoever runs the app writes the log and
/// its escapes would drive the terminal of whoever reads it. A write that fails (a closed
/// pipe) ends the copy.
async fn copy_log(from: impl AsyncRead + Unpin, mut to: impl AsyncWrite + Unpin, terminal: bool) {
    let mut from = BufReader::new(from);
    if !terminal {
        let _ = tokio::io::copy_buf(&mut from, &mut to).await;
        return;
    }
    let mut line = Vec::new();
    while from
        .read_until(b'\n', &mut line)
        .await
        .is_ok_and(|read| read > 0)
    {
        let shown = printable_log_line(&line);
        if to.write_all(shown.as_bytes()).await.is_err() || to.flush().await.is_err() {
            return;
        }
        line.clear();
    }
}

/// One line of a log as a terminal may show it (bytes that are not UTF-8 become U+FFFD).
fn printable_log_line(line: &[u8]) -> String {
    printable_lines(&String::from_utf8_lossy(line)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_line_shown_on_a_terminal_keeps_its_end_but_not_its_escapes() {
        assert_eq!(
            printable_log_line(b"ready\x1b]0;pwned\x07\x1b[2J\r\n"),
            "ready\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\r\n"
        );
        assert_eq!(
            printable_log_line("é ✔ \u{9b}\n".as_bytes()),
            "é ✔ \\u{9b}\n"
        );
        assert_eq!(printable_log_line(b"\xff\n"), "\u{fffd}\n");
    }

    #[test]
    fn the_tail_command() {
        assert_eq!(
            tail_command("/usr/share/hello", 10, false),
            ["tail", "-n", "10", "/usr/share/hello/stateful.log"]
        );
        assert_eq!(
            tail_command("/data/", 5, true),
            ["tail", "-n", "5", "-f", "/data/stateful.log"]
        );
        assert_eq!(
            tail_command("/data", -1, false),
            ["tail", "-n", "+1", "/data/stateful.log"]
        );
    }
}
