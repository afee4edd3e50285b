//! `kubectl-hellostateful`: everything is in the library.

fn main() -> std::process::ExitCode {
    kubectl_hellostateful::main()
}
