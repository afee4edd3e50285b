//! `kubectl hellostateful`: the plugin's logic. `main.rs` only calls [`main`].
//!
//! One module per command (`create`, `get`, `status`, `actions` for backup/restore,
//! `backups` for the catalog and `verify`, `delete`, `logs`, `report`, `install`, `version`) on shared
//! pieces: `mover_pod` (the pod that runs the data mover on backups), `cli` (clap),
//! `context` (kubeconfig, client, terminal), `output` (tables, ages, sizes, JSON/YAML),
//! `prompt` (dialoguer, terminal only) and `error` (what a user reads).

pub mod actions;
pub mod backups;
pub mod cli;
pub mod complete;
pub mod context;
pub mod create;
pub mod delete;
pub mod error;
pub mod get;
pub mod install;
pub mod logs;
pub mod mover_pod;
pub mod output;
pub mod prompt;
pub mod report;
pub mod status;
pub mod version;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, ValueEnum};

use crate::cli::{Cli, Command};
use crate::context::Ctx;
use crate::error::CliError;

/// Runs one command and returns what it prints on stdout.
pub async fn run(cli: Cli) -> Result<String, CliError> {
    if let Some(format) = cli.global.output
        && !cli.command.honours(format)
    {
        let format = format
            .to_possible_value()
            .map_or_else(String::new, |value| value.get_name().to_string());
        return Err(CliError::Usage(format!(
            "-o {format} means nothing for this command: it prints no such view (kubectl hellostateful <command> --help says which -o it takes)"
        )));
    }
    let ctx = Ctx::new(cli.global.clone());
    match &cli.command {
        Command::Create(args) => create::create(&ctx, args).await,
        Command::List(args) => get::list(&ctx, args).await,
        Command::Get(args) => get::get(&ctx, args).await,
        Command::Status(args) => status::status(&ctx, &args.name).await,
        Command::Backup(args) => actions::backup(&ctx, args).await,
        Command::Backups(args) => backups::backups(&ctx, args).await,
        Command::Verify(args) => backups::verify(&ctx, args).await,
        Command::Restore(args) => actions::restore(&ctx, args).await,
        Command::Delete(args) => delete::delete(&ctx, args).await,
        Command::Logs(args) => logs::logs(&ctx, args).await,
        Command::Report(args) => report::report(&ctx, args).await,
        Command::Install(args) => install::install(&ctx, args).await,
        Command::Uninstall(args) => install::uninstall(&ctx, args).await,
        Command::Version => version::version(&ctx).await,
        Command::Complete { words } => Ok(complete::complete(&cli.global, words).await),
        Command::Completion { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(
                *shell,
                &mut Cli::command(),
                "kubectl-hellostateful",
                &mut out,
            );
            Ok(String::from_utf8_lossy(&out).into_owned())
        }
    }
}

/// The program: parse, run, print, exit 0 on success and 1 on any error (2 for bad usage,
/// from clap).
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let no_color = cli.global.no_color;
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(text) => {
            print_stdout(&text);
            ExitCode::SUCCESS
        }
        Err(error) => {
            if let CliError::AfterOutput { output, .. } = &error {
                print_stdout(output);
            }
            let terminal = context::Terminal::detect();
            let style = output::Style {
                color: context::color_enabled(
                    no_color,
                    std::env::var("NO_COLOR").ok().as_deref(),
                    terminal.stderr,
                ),
            };
            // Errors carry what the API server and the mover said, and names and messages
            // read from the cluster: printable, with the line breaks of their own layout.
            eprintln!(
                "{} {}",
                style.bad("error:"),
                output::printable_lines(&error.to_string())
            );
            ExitCode::FAILURE
        }
    }
}

fn print_stdout(text: &str) {
    let mut stdout = std::io::stdout().lock();
    // A closed pipe (`| head`) is not an error worth reporting.
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}
