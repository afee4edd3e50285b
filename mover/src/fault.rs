//! Crash-test hook. When the environment variable `HELLOSTATEFUL_MOVER_FAULT_AFTER=N` is
//! set, the process aborts (like `kill -9`: no destructors, no cleanup) at the N-th
//! filesystem-changing step (file copied, directory made, rename, journal write, ...).
//! The crash-safety tests use it to stop a backup or restore at every point in turn;
//! unset, it costs one atomic increment per step.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The variable's name.
pub const FAULT_ENV: &str = "HELLOSTATEFUL_MOVER_FAULT_AFTER";

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
