//! Backups in an S3-compatible object store (`spec.backup.target.objectStore`): off the
//! node, so that losing the node does not lose the backups.
//!
//! Layout below `<bucket>/<prefix>/<namespace>/<name>/`:
//!
//! ```text
//! data/<b3[0..2]>/<b3>          a larger file's contents, named by their BLAKE3: written
//!                               once, shared by every snapshot that holds that content
//! packs/<id[0..2]>/<id>         many small files' contents and their index (see `pack`),
//!                               shared the same way
//! snapshots/<id>.json           a snapshot's manifest (entries inline), written last
//! parts/<set>/<ordinal>.json    a part of a snapshot made by several pods (see `parts`)
//! restores/<set>/…              a restore made by several pods (see `restore_parts`)
//! locks/<backup|collect>-…      a running backup or collection (see `collect`)
//! ```
//!
//! A snapshot exists once its manifest does, and the manifest is put only after every
//! object it names is stored: a backup killed midway leaves objects that the next one
//! finds and does not send again, and no snapshot. Restores and `verify` hash what they
//! download and refuse an object whose contents do not match its name.
//!
//! The protocol (signing, retries with backoff on 5xx and timeouts, multipart uploads) is
//! the `object_store` crate's; the mover's code is synchronous, so calls run on a small
//! Tokio runtime of their own.

mod catalog;
mod collect;
mod pack;
mod parts;
mod restore_parts;
mod upload;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as Key;
use object_store::prefix::PrefixStore;
use object_store::{
    BackoffConfig, ClientOptions, ObjectMeta, ObjectStore, ObjectStoreExt, RetryConfig,
};

use crate::error::{MoverError, Result};
use crate::manifest::Entry;
use crate::names::{App, BackupId};

pub(crate) use catalog::{StoredSnapshot, any, resolve};
pub use catalog::{delete, describe, list, prune, purge, verify};
pub use collect::Collected;
pub use parts::{PartSet, backup_part, seal};
pub(crate) use restore_parts::recover;
pub use restore_parts::{StagedPart, commit, stage_part, swap_part, undo_part};
pub use upload::backup;

/// Environment variable holding the access key id (from the app's Secret).
pub const ACCESS_KEY_ENV: &str = "AWS_ACCESS_KEY_ID";
/// Environment variable holding the secret access key (from the app's Secret).
pub const SECRET_KEY_ENV: &str = "AWS_SECRET_ACCESS_KEY";
/// Environment variable holding PEM certificates of a CA to trust besides the public ones
/// (from the Secret key `endpointCA` names).
pub const CA_ENV: &str = "HELLOSTATEFUL_STORE_CA";

/// Files up to this size are read into memory and put in one request; larger ones are
/// sent as a multipart upload of parts this size.
pub(crate) const PART_SIZE: usize = 8 * 1024 * 1024;

/// Where an app's backups live in an object store, and the keys to it.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// `http(s)://host[:port]` of the S3 API.
    pub endpoint: String,
    /// The bucket.
    pub bucket: String,
    /// Key prefix inside the bucket (may be empty); the app's objects go below
    /// `<prefix>/<namespace>/<name>/`.
    pub prefix: String,
    /// The region to sign for (S3-compatible servers mostly accept any).
    pub region: String,
    /// Allow a plain-HTTP endpoint.
    pub insecure: bool,
    /// Access key id.
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: String,
    /// PEM certificates of a CA to trust besides the public ones.
    pub ca_pem: Option<String>,
}

impl StoreConfig {
    /// Checks the parts a spec controls: a bucket name S3 accepts, and a prefix of plain
    /// path segments (it must not reach above or beside the app's own place).
    pub fn check(&self) -> Result<()> {
        let usage = |m: String| Err(MoverError::Usage(m));
        let b = &self.bucket;
        let bucket_ok = (3..=63).contains(&b.len())
            && b.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'.' || c == b'-')
            && b.bytes().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && b.bytes().last().is_some_and(|c| c.is_ascii_alphanumeric());
        if !bucket_ok {
            return usage(format!(
                "invalid bucket {b:?}: 3 to 63 lowercase letters, digits, '.' or '-', starting and ending with a letter or digit"
            ));
        }
        let segment_ok = |s: &str| {
            !s.is_empty()
                && s != "."
                && s != ".."
                && s.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c))
        };
        if !self.prefix.is_empty() && !self.prefix.split('/').all(segment_ok) {
            return usage(format!(
                "invalid prefix {:?}: '/'-separated segments of letters, digits, '.', '_' or '-', no '.' or '..' segment, no leading, trailing or doubled '/'",
                self.prefix
            ));
        }
        let scheme_ok = self.endpoint.starts_with("https://")
            || (self.insecure && self.endpoint.starts_with("http://"));
        if !scheme_ok {
            return usage(format!(
                "invalid endpoint {:?}: https://host[:port] (http:// only with insecure: true)",
                self.endpoint
            ));
        }
        if self.access_key_id.is_empty() || self.secret_access_key.is_empty() {
            return usage(format!(
                "no credentials for the object store: {ACCESS_KEY_ENV} and {SECRET_KEY_ENV} must be set (from the Secret the spec names)"
            ));
        }
        Ok(())
    }

    /// `s3://bucket/prefix`, for messages.
    fn url(&self) -> String {
        match self.prefix.as_str() {
            "" => format!("s3://{}", self.bucket),
            prefix => format!("s3://{}/{prefix}", self.bucket),
        }
    }
}

/// One app's place in an object store.
pub struct Store {
    runtime: tokio::runtime::Runtime,
    objects: Arc<dyn ObjectStore>,
    /// Names the app, with the store's URL as its target (for messages).
    app: App,
    /// How this mover's locks are kept fresh, and when others' are stale.
    lease: collect::Lease,
    /// How recently stored contents a collection leaves, named or not.
    collect_grace: chrono::TimeDelta,
}

impl Store {
    /// Connects (lazily: nothing is sent until the first call) to the app's place.
    pub fn open(config: &StoreConfig, namespace: &str, name: &str) -> Result<Self> {
        config.check()?;
        let app = App::new(config.url(), namespace, name)?;
        // The mover runs as a Job with a deadline: fail within minutes, not hours, on a
        // server that is down, and let the Job's retry start over.
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(200),
                max_backoff: Duration::from_secs(5),
                base: 2.0,
            },
            max_retries: 4,
            retry_timeout: Duration::from_secs(30),
        };
        let mut client = ClientOptions::new()
            .with_allow_http(config.insecure)
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(120));
        if let Some(pem) = &config.ca_pem {
            let not_pem = |why: String| {
                MoverError::Usage(format!(
                    "the endpoint's CA ({CA_ENV}, from spec.backup.target.objectStore.endpointCA) is not PEM certificates: {why}"
                ))
            };
            let certificates = object_store::Certificate::from_pem_bundle(pem.as_bytes())
                .map_err(|e| not_pem(e.to_string()))?;
            if certificates.is_empty() {
                return Err(not_pem("no certificate in it".into()));
            }
            for certificate in certificates {
                client = client.with_root_certificate(certificate);
            }
        }
        // The HTTP client's TLS takes its cryptography from the process-wide provider: ring,
        // as kube's in the same binary. An Err only says one is installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let s3 = AmazonS3Builder::new()
            .with_endpoint(&config.endpoint)
            .with_bucket_name(&config.bucket)
            .with_region(&config.region)
            .with_access_key_id(&config.access_key_id)
            .with_secret_access_key(&config.secret_access_key)
            .with_virtual_hosted_style_request(false)
            // Contents are checked by their BLAKE3 on every restore and verify: hashing each
            // payload again with SHA-256 for the signature only slows the upload. What travels
            // is still checked end to end: each request carries the payload's CRC-64/NVME
            // (cheap, SIMD), and the store refuses one that does not match (BadDigest), so
            // nothing damaged on the way is stored.
            .with_unsigned_payload(true)
            .with_checksum_algorithm(object_store::aws::Checksum::CRC64NVME)
            .with_retry(retry)
            .with_client_options(client)
            .build()
            .map_err(|e| {
                MoverError::Usage(format!("cannot use object store {}: {e}", config.url()))
            })?;
        let below = match config.prefix.as_str() {
            "" => format!("{namespace}/{name}"),
            prefix => format!("{prefix}/{namespace}/{name}"),
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| MoverError::Io {
                action: "start the I/O runtime for",
                path: PathBuf::from(config.url()),
                source: e,
            })?;
        Ok(Store {
            runtime,
            objects: Arc::new(PrefixStore::new(s3, below.as_str())),
            app,
            lease: collect::Lease::default(),
            collect_grace: collect::GRACE,
        })
    }

    /// An app's place in a store held in memory, for tests.
    #[cfg(test)]
    pub(crate) fn in_memory(namespace: &str, name: &str) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        Store {
            runtime,
            objects: Arc::new(object_store::memory::InMemory::new()),
            app: App::new("s3://test", namespace, name).expect("app"),
            lease: collect::Lease::default(),
            // Tests collect what they just stored (the grace has a test of its own).
            collect_grace: chrono::TimeDelta::zero(),
        }
    }

    /// The app, named with the store's URL as its target.
    pub fn app(&self) -> &App {
        &self.app
    }

    /// Runs a call to the store to completion (from any thread but the runtime's own).
    fn block_on<F: Future>(&self, call: F) -> F::Output {
        self.runtime.block_on(call)
    }

    /// `s3://bucket/prefix/ns/name/<key>`, for messages.
    fn address(&self, key: &Key) -> PathBuf {
        self.app.dir().join(key.as_ref())
    }

    fn failed(
        &self,
        action: &'static str,
        key: &Key,
    ) -> impl FnOnce(object_store::Error) -> MoverError {
        let path = self.address(key);
        move |error| MoverError::Store {
            action,
            path,
            reason: crate::error::store_reason(&error),
            error: Box::new(error),
        }
    }

    /// The key of the object holding contents with this BLAKE3 (hex).
    fn data_key(blake3: &str) -> Key {
        Key::from(format!("data/{}/{blake3}", &blake3[..2.min(blake3.len())]))
    }

    /// The key of snapshot `id`'s manifest.
    fn manifest_key(id: &BackupId) -> Key {
        Key::from(format!("snapshots/{id}.json"))
    }

    /// Every object whose key starts with `prefix/`.
    fn list_keys(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let prefix = Key::from(prefix);
        self.block_on(self.objects.list(Some(&prefix)).try_collect::<Vec<_>>())
            .map_err(self.failed("list", &prefix))
    }

    /// The ids of the snapshots whose manifests are stored, oldest first.
    pub(crate) fn snapshot_ids(&self) -> Result<Vec<BackupId>> {
        let mut ids: Vec<BackupId> = self
            .list_keys("snapshots")?
            .iter()
            .filter_map(|m| m.location.filename()?.strip_suffix(".json")?.parse().ok())
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// The contents stored as objects of their own, by BLAKE3 (hex).
    pub(crate) fn stored_contents(&self) -> Result<Vec<String>> {
        Ok(self
            .list_keys("data")?
            .into_iter()
            .filter_map(|m| Some(m.location.filename()?.to_owned()))
            .collect())
    }

    /// Whether the content with this BLAKE3 is stored.
    #[cfg(test)]
    pub(crate) fn has_content(&self, blake3: &str) -> Result<bool> {
        let key = Self::data_key(blake3);
        match self.block_on(self.objects.head(&key)) {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.failed("look for", &key)(e)),
        }
    }

    /// Reads a whole (small) object; `None` if there is none.
    fn get_bytes(&self, key: &Key) -> Result<Option<Bytes>> {
        let fetched = self.block_on(async {
            match self.objects.get(key).await {
                Ok(result) => result.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        });
        fetched.map_err(self.failed("read", key))
    }

    fn put_bytes(&self, key: &Key, bytes: Bytes) -> Result<()> {
        self.block_on(self.objects.put(key, bytes.into()))
            .map(|_| ())
            .map_err(self.failed("write", key))
    }

    fn delete_key(&self, key: &Key) -> Result<()> {
        self.block_on(self.objects.delete(key))
            .map_err(self.failed("delete", key))
    }

    /// The key of the object holding a file entry's contents.
    fn content_key(entry: &Entry) -> Key {
        match &entry.pack {
            Some(pack) => Self::pack_key(&pack.id),
            None => Self::data_key(entry.blake3.as_deref().unwrap_or_default()),
        }
    }

    /// Streams a file entry's contents (an object of their own, or their place in a pack)
    /// into `write`, hashing them; returns their length and hash, or `None` if the object
    /// is missing.
    pub(crate) fn fetch_content(
        &self,
        entry: &Entry,
        mut write: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<Option<(u64, blake3::Hash)>> {
        let key = Self::content_key(entry);
        let failed = || self.failed("read", &key);
        let mut hasher = blake3::Hasher::new();
        let mut len = 0u64;
        let mut take = |chunk: &[u8]| {
            hasher.update(chunk);
            len += chunk.len() as u64;
            write(chunk)
        };
        match &entry.pack {
            // S3 has no empty range to ask for.
            Some(_) if entry.size == 0 => {}
            Some(pack) => {
                let range = pack.offset..pack.offset.saturating_add(entry.size);
                match self.block_on(self.objects.get_range(&key, range)) {
                    Ok(bytes) => take(&bytes)?,
                    Err(object_store::Error::NotFound { .. }) => return Ok(None),
                    Err(e) => return Err(failed()(e)),
                }
            }
            None => {
                let mut stream = match self.block_on(self.objects.get(&key)) {
                    Ok(result) => result.into_stream(),
                    Err(object_store::Error::NotFound { .. }) => return Ok(None),
                    Err(e) => return Err(failed()(e)),
                };
                while let Some(chunk) = self.block_on(stream.try_next()).map_err(failed())? {
                    take(&chunk)?;
                }
            }
        }
        Ok(Some((len, hasher.finalize())))
    }

    /// The address of the object holding a file entry's contents, for messages.
    pub(crate) fn content_address(&self, entry: &Entry) -> PathBuf {
        let address = self.address(&Self::content_key(entry));
        match &entry.pack {
            Some(pack) => PathBuf::from(format!("{}@{}", address.display(), pack.offset)),
            None => address,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> StoreConfig {
        StoreConfig {
            endpoint: "https://s3.example.com".into(),
            bucket: "backups".into(),
            prefix: "team/a".into(),
            region: "us-east-1".into(),
            insecure: false,
            access_key_id: "key".into(),
            secret_access_key: "secret".into(),
            ca_pem: None,
        }
    }

    #[test]
    fn a_clean_config_is_taken() {
        assert!(config().check().is_ok());
        let no_prefix = StoreConfig {
            prefix: String::new(),
            ..config()
        };
        assert!(no_prefix.check().is_ok());
    }

    #[test]
    fn prefixes_that_could_reach_beside_the_app_are_refused() {
        for bad in [
            "..", "a/../b", "/a", "a/", "a//b", "./a", "a b", "a\\b", "%2e%2e",
        ] {
            let hostile = StoreConfig {
                prefix: bad.into(),
                ..config()
            };
            let error = hostile.check().expect_err(bad).to_string();
            assert!(error.contains("invalid prefix"), "{bad}: {error}");
        }
    }

    #[test]
    fn bad_buckets_plain_http_and_missing_keys_are_refused_with_the_reason() {
        let cases = [
            (
                StoreConfig {
                    bucket: "B".into(),
                    ..config()
                },
                "invalid bucket",
            ),
            (
                StoreConfig {
                    bucket: "a/b".into(),
                    ..config()
                },
                "invalid bucket",
            ),
            (
                StoreConfig {
                    endpoint: "http://s3.example.com".into(),
                    ..config()
                },
                "insecure",
            ),
            (
                StoreConfig {
                    endpoint: "file:///etc".into(),
                    insecure: true,
                    ..config()
                },
                "invalid endpoint",
            ),
            (
                StoreConfig {
                    secret_access_key: String::new(),
                    ..config()
                },
                SECRET_KEY_ENV,
            ),
        ];
        for (config, expected) in cases {
            let error = config.check().expect_err(expected).to_string();
            assert!(error.contains(expected), "{error}");
        }
        let http = StoreConfig {
            endpoint: "http://seaweedfs:8333".into(),
            insecure: true,
            ..config()
        };
        assert!(http.check().is_ok());
    }

    #[test]
    fn an_endpoint_ca_that_is_not_pem_certificates_is_refused_before_anything_is_sent() {
        for garbage in ["not a certificate", "-----BEGIN CERTIFICATE-----\nAAAA\n"] {
            let with_ca = StoreConfig {
                ca_pem: Some(garbage.into()),
                ..config()
            };
            let error = Store::open(&with_ca, "ns", "app")
                .err()
                .expect(garbage)
                .to_string();
            assert!(
                error.contains("is not PEM certificates") && error.contains(CA_ENV),
                "{error}"
            );
        }
    }

    #[test]
    fn contents_are_named_by_their_hash_below_two_hex_digits() {
        let hash = blake3::hash(b"hello").to_hex().to_string();
        let key = Store::data_key(&hash);
        assert_eq!(key.as_ref(), format!("data/{}/{hash}", &hash[..2]));
        let id: BackupId = "20261130T010203Z".parse().expect("id");
        assert_eq!(
            Store::manifest_key(&id).as_ref(),
            "snapshots/20261130T010203Z.json"
        );
    }
}
