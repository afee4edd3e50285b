//! Crash-test hook. When the environment variable `HELLOSTATEFUL_MOVER_FAULT_AFTER=N` is
//! set, the process aborts (like `kill -9`: no destructors, no cleanup) at the N-th
//! filesystem-changing step (file copied, directory made, rename, journal write, ...).
//! The crash-safety tests use it to stop a backup or restore at every point in turn;
//! unset, it costs one atomic increment per step.
//!
//! Aborting cannot show a missing fsync (the page cache survives the process), so with
//! `HELLOSTATEFUL_MOVER_TRACE=<file>` every file creation, fsync, syncfs and rename is
//! also appended to that file, one `<op> <path>` line each, for the durability tests to
//! check their order.

use std::fs::File;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// The variable's name.
pub const FAULT_ENV: &str = "HELLOSTATEFUL_MOVER_FAULT_AFTER";
/// The trace variable's name.
pub const TRACE_ENV: &str = "HELLOSTATEFUL_MOVER_TRACE";

static TRACE: OnceLock<Option<Mutex<File>>> = OnceLock::new();

/// Records one durability-relevant operation when tracing is on.
pub(crate) fn trace(op: &str, path: &Path) {
    let trace = TRACE.get_or_init(|| {
        let path = std::env::var_os(TRACE_ENV)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok()?;
        Some(Mutex::new(file))
    });
    if let Some(file) = trace
        && let Ok(mut file) = file.lock()
    {
        let mut line = format!("{op} ").into_bytes();
        line.extend_from_slice(path.as_os_str().as_bytes());
        line.push(b'\n');
        // A test hook: a failed write shows as a missing line in the test.
        let _ = file.write_all(&line);
    }
}

static STEPS: AtomicU64 = AtomicU64::new(0);
static LIMIT: OnceLock<Option<u64>> = OnceLock::new();

/// Counts one step; aborts the process if the configured limit is reached.
pub(crate) fn step() {
    let limit = LIMIT.get_or_init(|| std::env::var(FAULT_ENV).ok()?.parse().ok());
    if let Some(limit) = *limit
        && STEPS.fetch_add(1, Ordering::SeqCst) + 1 >= limit
    {
        std::process::abort();
    }
}
