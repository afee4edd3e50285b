//! Watch streams that come back quickly after the API server restarts.
//!
//! kube-runtime's `Controller` puts one client-go style backoff (0.8 s doubling to 30 s, plus
//! up to 100 % jitter, reset only by a success) over the merge of all its watches. While the
//! API server is down every watch fails, so that shared delay climbs to 30–60 s; when the
//! server is back each watch is first told that its resourceVersion "expired" (the new
//! server's watch cache starts after it), and each of those errors paused *all* watches for
//! another long step. Requests made in that window were seen only by the 2-minute resync.
//!
//! Here every watch backs off on its own, with a short ceiling, and an expired
//! resourceVersion is not an error to wait on: the watcher has already gone back to a fresh
//! list, which is exactly what should happen next. Errors are logged with the kind of
//! object and never reach the controller, so its shared backoff never engages.

use std::fmt::Debug;
use std::time::Duration;

use futures::{Stream, StreamExt, future};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, ExponentialBackoff};
use tracing::{debug, warn};

/// The first retry after a failed watch or list.
const FIRST_RETRY: Duration = Duration::from_millis(250);
/// The longest pause between retries before jitter (jitter adds up to as much again): a
/// watch is back within about this long after the API server is.
const LONGEST_RETRY: Duration = Duration::from_secs(4);

/// Per-watch backoff: doubles from `FIRST_RETRY` to `LONGEST_RETRY`, with jitter so that
/// the watches of many reconcilers do not retry in step; reset by the next success.
pub fn retry_backoff() -> ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(FIRST_RETRY)
        .with_max_delay(LONGEST_RETRY)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .into()
}

/// Whether the watch failed only because its resourceVersion is gone (HTTP 410): the
/// watcher relists on its own, so there is nothing to wait for.
fn is_expired(error: &watcher::Error) -> bool {
    matches!(error, watcher::Error::WatchError(status) if status.code == 410)
}

/// `objects` (a watcher stream after `touched_objects` or `applied_objects`) with its own
/// backoff; its errors are logged as failures to watch `kind` and dropped.
pub fn resilient<K, S>(
    objects: S,
    kind: String,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Debug + Send,
    S: Stream<Item = Result<K, watcher::Error>> + Send,
{
    objects
        .filter({
            let kind = kind.clone();
            move |item| {
                let expired = matches!(item, Err(error) if is_expired(error));
                if expired {
                    debug!(%kind, "watch resourceVersion expired; listing again");
                }
                future::ready(!expired)
            }
        })
        .backoff(retry_backoff())
        .filter_map(move |item| {
            future::ready(match item {
                Ok(object) => Some(Ok(object)),
                Err(error) => {
                    warn!(%kind, %error, "watch failed; retrying");
                    None
                }
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream;
    use kube::core::Status;
    use std::pin::pin;
    use tokio::time::Instant;

    fn expired() -> watcher::Error {
        watcher::Error::WatchError(Box::new(
            Status::failure("too old resource version", "Expired").with_code(410),
        ))
    }

    fn refused() -> watcher::Error {
        watcher::Error::WatchError(Box::new(
            Status::failure("etcdserver: leader changed", "InternalError").with_code(500),
        ))
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_resource_version_costs_no_wait_and_is_not_passed_on() {
        let started = Instant::now();
        let items: Vec<_> = resilient(
            stream::iter([Err(expired()), Ok(1), Err(expired()), Ok(2)]),
            "Test".into(),
        )
        .collect()
        .await;
        assert_eq!(
            items.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
            [1, 2]
        );
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn other_failures_wait_a_short_capped_time_and_are_dropped() {
        let started = Instant::now();
        let failures = (0..20).map(|_| Err(refused()));
        let mut items = pin!(resilient(
            stream::iter(failures.chain([Ok(7)])),
            "Test".into()
        ));
        assert_eq!(items.next().await.map(Result::unwrap), Some(7));
        let waited = started.elapsed();
        // 20 retries: 0.25 + 0.5 + 1 + 2 + 16 × 4 s at most, jitter at most doubling each.
        assert!(
            waited >= Duration::from_secs_f64(67.75),
            "waited {waited:?}"
        );
        assert!(
            waited <= Duration::from_secs_f64(2.0 * 67.75),
            "waited {waited:?}"
        );
        assert!(items.next().await.is_none());
    }
}
