//! Leader election with a coordination.k8s.io Lease, so that two replicas of the
//! reconciler never act at once, as client-go's leaderelection does it:
//!
//! - the holder renews every `retry_period`; it stops acting (every write is refused by
//!   [`write_guard`]) once `renew_deadline` has passed since the start of its last
//!   successful renewal, which is shorter than the Lease, so it has stopped before anyone
//!   may take over;
//! - another replica takes the Lease only when the record has not changed for a whole
//!   `lease_duration` *by its own clock* (never by comparing `renewTime`, written by
//!   another machine's clock, with its own);
//! - every write of the Lease is a compare-and-swap on its resourceVersion.
//!
//! A holder that lapsed (paused, cut off from the API server) may act again only after a
//! renewal succeeds: its compare-and-swap on a record that still names it proves that no
//! other replica took the Lease, and so acted, in between.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http::{Method, Request};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::time::Instant;
use tower::filter::FilterLayer;
use tracing::{info, warn};

/// The Lease's timing (client-go's defaults).
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// How long a record must stay unchanged before another replica takes the Lease.
    pub lease_duration: Duration,
    /// How long after the start of its last successful renewal the holder stops acting.
    pub renew_deadline: Duration,
    /// How often the holder renews and a candidate tries.
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Whether this replica may write now: set by the election, read by [`write_guard`].
#[derive(Clone, Debug, Default)]
pub struct Leadership(Arc<Mutex<Option<Instant>>>);

impl Leadership {
    pub fn is_held(&self) -> bool {
        self.valid_until()
            .is_some_and(|until| Instant::now() < until)
    }

    fn valid_until(&self) -> Option<Instant> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, until: Option<Instant>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = until;
    }

    /// Leadership held for the next hour, for tests of what a leader writes.
    #[cfg(test)]
    pub fn held() -> Self {
        let leadership = Self::default();
        leadership.set(Some(Instant::now() + Duration::from_secs(3600)));
        leadership
    }
}

/// A write refused because this replica does not hold the Lease (now).
#[derive(Debug, thiserror::Error)]
#[error("not the leader: this replica does not hold the Lease, so it makes no change")]
pub struct NotLeader;

/// A client layer that lets reads through and refuses every other request while
/// `leadership` is not held: the last line of defence, whatever task tries to write.
pub fn write_guard<B>(
    leadership: Leadership,
) -> FilterLayer<impl Fn(Request<B>) -> Result<Request<B>, NotLeader> + Clone> {
    FilterLayer::new(move |request: Request<B>| {
        let reads = [Method::GET, Method::HEAD, Method::OPTIONS];
        if reads.contains(request.method()) || leadership.is_held() {
            Ok(request)
        } else {
            Err(NotLeader)
        }
    })
}

/// Why an attempt on the Lease neither took it nor found another holder.
#[derive(Debug, thiserror::Error)]
enum LeaseError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("no answer from the API server within {0:?}")]
    TimedOut(Duration),
}

/// The last Lease record seen, and when (by this replica's clock) it was first seen.
struct Observed {
    record: LeaseSpec,
    since: Instant,
}

/// One contender for the Lease.
pub struct LeaderElection {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    leadership: Leadership,
    observed: Mutex<Option<Observed>>,
}

/// What one attempt found.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    /// This replica holds the Lease (took or renewed it).
    Held,
    /// Another replica holds it.
    HeldBy(String),
}

impl LeaderElection {
    /// `client` must not carry the [`write_guard`]: the Lease is how leadership is won.
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timing: Timing,
        leadership: Leadership,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            timing,
            leadership,
            observed: Mutex::new(None),
        }
    }

    /// Waits until this process holds the Lease.
    pub async fn acquire(&self) {
        loop {
            match self.attempt().await {
                Ok(Attempt::Held) => {
                    info!(lease = %self.name, identity = %self.identity, "became the leader");
                    return;
                }
                Ok(Attempt::HeldBy(_)) => {}
                Err(error) => warn!(lease = %self.name, %error, "could not take the lease"),
            }
            tokio::time::sleep(self.timing.retry_period).await;
        }
    }

    /// Renews the Lease until another replica holds it, then returns why. A renewal that
    /// fails (the API server down, this process paused) stops this replica's writes once
    /// the renew deadline has passed, until a renewal succeeds again.
    pub async fn hold(&self) -> String {
        let mut lapsed = false;
        loop {
            tokio::time::sleep(self.timing.retry_period).await;
            match self.attempt().await {
                Ok(Attempt::Held) if lapsed => {
                    lapsed = false;
                    info!(lease = %self.name, "renewed the lease again: acting again");
                }
                Ok(Attempt::Held) => {}
                Ok(Attempt::HeldBy(holder)) => {
                    self.leadership.set(None);
                    return format!("lease {} is held by {holder}", self.name);
                }
                Err(error) => warn!(lease = %self.name, %error, "could not renew the lease"),
            }
            if !lapsed && !self.leadership.is_held() {
                lapsed = true;
                warn!(
                    lease = %self.name,
                    deadline = ?self.timing.renew_deadline,
                    "the lease was not renewed within the renew deadline: making no change until it is"
                );
            }
        }
    }

    /// Gives the Lease up on shutdown, so that another replica takes over at once.
    pub async fn release(&self) {
        self.leadership.set(None);
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await
            && let Some(spec) = lease.spec.as_mut()
            && spec.holder_identity.as_deref() == Some(self.identity.as_str())
        {
            spec.holder_identity = None;
            spec.renew_time = None;
            let _ = self
                .api
                .replace(&self.name, &PostParams::default(), &lease)
                .await;
        }
    }

    /// One try to take or renew the Lease. Leadership is extended only by a write that
    /// succeeded, and only from the time the attempt started.
    async fn attempt(&self) -> Result<Attempt, LeaseError> {
        let started = Instant::now();
        let attempt = tokio::time::timeout(self.timing.renew_deadline, self.try_take(started))
            .await
            .map_err(|_| LeaseError::TimedOut(self.timing.renew_deadline))??;
        if attempt == Attempt::Held {
            self.leadership
                .set(Some(started + self.timing.renew_deadline));
        }
        Ok(attempt)
    }

    async fn try_take(&self, now: Instant) -> Result<Attempt, kube::Error> {
        let wall = Timestamp::now();
        let spec = LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(seconds(self.timing.lease_duration)),
            renew_time: Some(MicroTime(wall)),
            ..LeaseSpec::default()
        };
        let written = match self.api.get_opt(&self.name).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        acquire_time: Some(MicroTime(wall)),
                        lease_transitions: Some(0),
                        ..spec
                    }),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                let current = lease.spec.clone().unwrap_or_default();
                let holder = current.holder_identity.clone().unwrap_or_default();
                let ours = holder == self.identity;
                if !ours && !holder.is_empty() && !self.expired(&current, now) {
                    return Ok(Attempt::HeldBy(holder));
                }
                lease.spec = Some(LeaseSpec {
                    acquire_time: if ours {
                        current.acquire_time
                    } else {
                        Some(MicroTime(wall))
                    },
                    lease_transitions: Some(
                        current.lease_transitions.unwrap_or(0) + i32::from(!ours),
                    ),
                    ..spec
                });
                // resourceVersion in the object makes this a compare-and-swap.
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(lease) => {
                self.observe(lease.spec.unwrap_or_default(), now);
                Ok(Attempt::Held)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::HeldBy(
                "another replica (it wrote the Lease first)".into(),
            )),
            Err(error) => Err(error),
        }
    }

    /// Whether `record` has been unchanged, by this replica's clock, for its whole duration.
    fn expired(&self, record: &LeaseSpec, now: Instant) -> bool {
        let since = self.observe(record.clone(), now);
        let lasts = record
            .lease_duration_seconds
            .and_then(|secs| u64::try_from(secs).ok())
            .map_or(self.timing.lease_duration, Duration::from_secs);
        now >= since + lasts
    }

    /// Records `record` as seen at `now` unless it is the one already seen; returns when
    /// the record now held was first seen.
    fn observe(&self, record: LeaseSpec, now: Instant) -> Instant {
        let mut observed = self.observed.lock().unwrap_or_else(PoisonError::into_inner);
        match observed.as_ref() {
            Some(seen) if seen.record == record => seen.since,
            _ => {
                *observed = Some(Observed { record, since: now });
                now
            }
        }
    }
}

fn seconds(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs()).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use http::{Response, StatusCode};
    use kube::client::Body;
    use serde_json::{Value, json};
    use tower::ServiceExt;

    use super::*;

    const LEASE_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/ops/leases/lead";

    /// One Lease in an in-memory API server: GET, POST and PUT with resourceVersion
    /// checks (409 on a stale one), and a switch that makes it unreachable.
    #[derive(Clone, Default)]
    struct LeaseServer {
        lease: Arc<Mutex<Option<Value>>>,
        down: Arc<AtomicBool>,
    }

    impl LeaseServer {
        fn client(&self) -> Client {
            let server = self.clone();
            let service = tower::service_fn(move |request: Request<Body>| {
                let server = server.clone();
                async move { server.answer(request).await }
            });
            Client::new(service, "ops")
        }

        async fn answer(&self, request: Request<Body>) -> Result<Response<Body>, NotLeader> {
            if self.down.load(Ordering::SeqCst) {
                return Ok(reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    status(503, "ServiceUnavailable"),
                ));
            }
            let method = request.method().clone();
            let path = request.uri().path().to_string();
            let body = request
                .into_body()
                .collect_bytes()
                .await
                .unwrap_or_default();
            let sent: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let mut lease = self.lease.lock().unwrap_or_else(PoisonError::into_inner);
            let version = |lease: &Value| lease["metadata"]["resourceVersion"].clone();
            let (code, answer) = match (method.as_str(), lease.as_ref()) {
                ("GET", Some(current)) if path == LEASE_PATH => (StatusCode::OK, current.clone()),
                ("GET", _) => (StatusCode::NOT_FOUND, status(404, "NotFound")),
                ("POST", None) => (StatusCode::CREATED, self.store(&mut lease, sent, 1)),
                ("PUT", Some(current)) if version(current) == version(&sent) => {
                    let next = version(current)
                        .as_str()
                        .unwrap_or("0")
                        .parse::<u64>()
                        .unwrap_or(0)
                        + 1;
                    (StatusCode::OK, self.store(&mut lease, sent, next))
                }
                _ => (StatusCode::CONFLICT, status(409, "Conflict")),
            };
            Ok(reply(code, answer))
        }

        fn store(&self, lease: &mut Option<Value>, mut sent: Value, version: u64) -> Value {
            sent["metadata"]["resourceVersion"] = json!(version.to_string());
            *lease = Some(sent.clone());
            sent
        }

        /// Another replica (with another clock) writes the record directly.
        fn written_by(&self, holder: &str, renew_time: &str) {
            let mut lease = self.lease.lock().unwrap_or_else(PoisonError::into_inner);
            let version = lease.as_ref().map_or(0, |l| {
                l["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("0")
                    .parse::<u64>()
                    .unwrap_or(0)
            });
            *lease = Some(json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "lead", "namespace": "ops", "resourceVersion": (version + 1).to_string()},
                "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renew_time},
            }));
        }

        fn holder(&self) -> Option<String> {
            let lease = self.lease.lock().unwrap_or_else(PoisonError::into_inner);
            lease.as_ref()?["spec"]["holderIdentity"]
                .as_str()
                .map(str::to_string)
        }
    }

    fn status(code: u16, reason: &str) -> Value {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": reason, "reason": reason})
    }

    fn reply(code: StatusCode, body: Value) -> Response<Body> {
        let mut response = Response::new(Body::from(body.to_string().into_bytes()));
        *response.status_mut() = code;
        response
    }

    fn election(server: &LeaseServer, identity: &str, leadership: &Leadership) -> LeaderElection {
        LeaderElection::new(
            server.client(),
            "ops",
            "lead",
            identity,
            Timing::default(),
            leadership.clone(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_record_is_taken_over_only_after_a_whole_lease_unchanged_by_the_local_clock() {
        let server = LeaseServer::default();
        // The holder's clock runs an hour ahead: its renewTime looks fresh for an hour
        // here, and one that runs an hour behind looks long expired. Neither may count.
        server.written_by("other", "2999-01-01T00:00:00.000000Z");
        let leadership = Leadership::default();
        let me = election(&server, "me", &leadership);
        let start = Instant::now();
        assert_eq!(
            me.attempt().await.ok(),
            Some(Attempt::HeldBy("other".into()))
        );
        for second in 1..=14 {
            tokio::time::advance(Duration::from_secs(1)).await;
            // The other replica keeps renewing for 7 s, with a clock far behind ours.
            if second <= 7 {
                server.written_by("other", &format!("2000-01-01T00:00:{second:02}.000000Z"));
            }
            assert_eq!(
                me.attempt().await.ok(),
                Some(Attempt::HeldBy("other".into())),
                "at {second} s"
            );
        }
        assert!(!leadership.is_held());
        // Unchanged since second 7: taken at second 22, not before.
        tokio::time::advance(Duration::from_secs(22) - start.elapsed()).await;
        assert_eq!(me.attempt().await.ok(), Some(Attempt::Held));
        assert!(leadership.is_held());
        assert_eq!(server.holder().as_deref(), Some("me"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_holder_stops_writing_at_the_renew_deadline_and_acts_again_once_renewed() {
        let server = LeaseServer::default();
        let leadership = Leadership::default();
        let me = election(&server, "me", &leadership);
        me.acquire().await;
        let guarded = tower::ServiceBuilder::new()
            .layer(write_guard::<Body>(leadership.clone()))
            .service(tower::service_fn(|_: Request<Body>| async {
                Ok::<_, NotLeader>(Response::new(Body::empty()))
            }));
        let request = |method: Method| {
            let mut request = Request::new(Body::empty());
            *request.method_mut() = method;
            request
        };
        let write = || request(Method::POST);
        let read = || request(Method::GET);
        assert!(guarded.clone().oneshot(write()).await.is_ok());

        let hold = tokio::spawn(async move { me.hold().await });
        server.down.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(9)).await;
        assert!(leadership.is_held(), "still within the renew deadline");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            !leadership.is_held(),
            "past the renew deadline without a renewal"
        );
        let refused = guarded
            .clone()
            .oneshot(write())
            .await
            .err()
            .map(|e| e.to_string());
        assert_eq!(refused.as_deref(), Some(NotLeader.to_string().as_str()));
        assert!(guarded.clone().oneshot(read()).await.is_ok(), "reads go on");

        // Nobody took the Lease meanwhile: the next renewal succeeds and writes resume.
        server.down.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(leadership.is_held());
        assert!(guarded.clone().oneshot(write()).await.is_ok());

        // Another replica takes it (after this one lapsed again, say): hold() ends.
        server.written_by("other", "2000-01-01T00:00:00.000000Z");
        let lost = tokio::time::timeout(Duration::from_secs(5), hold).await;
        let message = lost.ok().and_then(Result::ok).unwrap_or_default();
        assert_eq!(message, "lease lead is held by other");
        assert!(!leadership.is_held());
    }

    #[tokio::test(start_paused = true)]
    async fn of_two_candidates_for_a_free_lease_exactly_one_wins() {
        let server = LeaseServer::default();
        let (first, second) = (Leadership::default(), Leadership::default());
        let a = election(&server, "a", &first);
        let b = election(&server, "b", &second);
        a.acquire().await;
        assert_eq!(b.attempt().await.ok(), Some(Attempt::HeldBy("a".into())));
        assert!(first.is_held() && !second.is_held());
        // A release hands it over without waiting for expiry.
        a.release().await;
        assert!(!first.is_held());
        assert_eq!(b.attempt().await.ok(), Some(Attempt::Held));
        assert!(second.is_held());
    }
}
