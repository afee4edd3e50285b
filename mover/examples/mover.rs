//! The mover's subcommands as a standalone program, for `bench/mover.sh` and manual use
//! without building the reconciler: `mover backup --namespace ns --name app ...`.

use clap::Parser;

#[derive(Parser)]
#[command(about = "hellostateful data mover")]
struct Cli {
    #[command(subcommand)]
    command: hellostateful_mover::cli::MoverCommand,
}

fn main() -> std::process::ExitCode {
    hellostateful_mover::cli::run(Cli::parse().command)
}
