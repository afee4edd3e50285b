//! Defaults of optional spec fields: what the 2018 operator did.

/// The app's image: busybox, imported into the test cluster under this exact name.
pub const IMAGE: &str = "busybox:1.36";
/// Where the app's volume is mounted.
pub const MOUNT_PATH: &str = "/usr/share/hello";
/// The file the default app appends to.
pub const LOG_FILE: &str = "stateful.log";
/// Size of each replica's volume.
pub const STORAGE_SIZE: &str = "1Gi";
/// The node directory that holds snapshots.
pub const BACKUP_HOST_PATH: &str = "/tmp/backup";
/// The node directory under which static hostPath volumes live.
pub const HOSTPATH_ROOT: &str = "/tmp/hostpath-provisioner";
/// Snapshots kept by retention.
pub const KEEP_LAST: i32 = 10;
/// With backup.consistency.mode stop: the longest a copy may keep the app stopped.
pub const MAX_STOP_SECONDS: i32 = 900;
/// How old the newest backup that read every file may get: a week, as a stale copy's bound
/// that costs one full read a week.
pub const FULL_READ_EVERY_SECONDS: i32 = 604_800;

/// Replicas when the field is absent.
pub fn replicas() -> i32 {
    1
}

/// The 2018 app: append the date to `<mount_path>/stateful.log` every 10 seconds. It exits
/// on SIGTERM (a shell as PID 1 ignores it otherwise), so stopping it for a restore takes no
/// grace period.
pub fn command(mount_path: &str) -> Vec<String> {
    vec![
        "/bin/sh".to_string(),
        "-c".to_string(),
        format!(
            "trap 'exit 0' TERM; while true; do date >> {mount_path}/{LOG_FILE}; sleep 10 & wait $!; done"
        ),
    ]
}

/// The region object store requests are signed for when the spec names none.
pub const STORE_REGION: &str = "us-east-1";
