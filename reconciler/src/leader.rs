//! Leader election with a coordination.k8s.io Lease, so that two replicas of the
//! reconciler never reconcile at once: the holder renews the Lease; another replica takes it
//! over only once it has expired.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tracing::{info, warn};

/// How long a Lease is valid without renewal: another replica takes over after that.
const LEASE_SECONDS: i32 = 15;
/// How often the holder renews it.
const RENEW_EVERY: Duration = Duration::from_secs(5);

/// One contender for the Lease.
pub struct LeaderElection {
    api: Api<Lease>,
    name: String,
    identity: String,
}

impl LeaderElection {
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
        }
    }

    /// Waits until this process holds the Lease.
    pub async fn acquire(&self) -> Result<(), kube::Error> {
        loop {
            if self.try_take().await? {
                info!(lease = %self.name, identity = %self.identity, "became the leader");
                return Ok(());
            }
            tokio::time::sleep(RENEW_EVERY).await;
        }
    }

    /// Renews the Lease until another replica holds it; then returns, and the caller must
    /// stop reconciling. While the API server cannot be reached the Lease is kept: nobody
    /// can take it over then, and this replica cannot write anything either.
    pub async fn hold(&self) -> String {
        loop {
            tokio::time::sleep(RENEW_EVERY).await;
            match self.try_take().await {
                Ok(true) => {}
                Ok(false) => return format!("lease {} was taken by another replica", self.name),
                Err(error) => {
                    warn!(lease = %self.name, %error, "could not renew the lease; retrying")
                }
            }
        }
    }

    /// Gives the Lease up on shutdown, so that another replica takes over at once.
    pub async fn release(&self) {
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

    /// Takes or renews the Lease if it is free, expired or ours. A conflicting write by
    /// another replica makes this attempt lose, never both.
    async fn try_take(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let spec = LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(LEASE_SECONDS),
            renew_time: Some(MicroTime(now)),
            ..LeaseSpec::default()
        };
        let result = match self.api.get_opt(&self.name).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        acquire_time: Some(MicroTime(now)),
                        ..spec
                    }),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                let current = lease.spec.clone().unwrap_or_default();
                let ours = current.holder_identity.as_deref() == Some(self.identity.as_str());
                let free = current.holder_identity.as_deref().is_none_or(str::is_empty);
                let expired = current.renew_time.as_ref().is_none_or(|renewed| {
                    let lasts = i64::from(current.lease_duration_seconds.unwrap_or(LEASE_SECONDS));
                    renewed.0 + SignedDuration::from_secs(lasts) < now
                });
                if !(ours || free || expired) {
                    return Ok(false);
                }
                let acquire_time = if ours {
                    current.acquire_time
                } else {
                    Some(MicroTime(now))
                };
                let transitions = current.lease_transitions.unwrap_or(0) + i32::from(!ours);
                lease.spec = Some(LeaseSpec {
                    acquire_time,
                    lease_transitions: Some(transitions),
                    ..spec
                });
                // resourceVersion in the object makes this a compare-and-swap.
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match result {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(error) => Err(error),
        }
    }
}
