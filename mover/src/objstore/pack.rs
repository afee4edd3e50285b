//! Packs: many small files' contents in one object, so that a backup of many small files
//! costs a few requests rather than one per file (restic and borg pack for the same
//! reason). Larger files stay objects of their own, named by their BLAKE3.
//!
//! A pack object holds the contents back to back, then its index (JSON: each content's
//! BLAKE3, offset and size), then the index's length (8 bytes, little-endian) and
//! [`MAGIC`]. Manifests say where each file's contents lie; the index lets a later backup
//! reuse the contents of a pack that no manifest names yet (one put by a backup killed
//! before its manifest), so they are not sent again.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use object_store::path::Path as Key;
use object_store::{GetOptions, GetRange, ObjectStoreExt};
use serde::{Deserialize, Serialize};

use super::Store;
use crate::error::{MoverError, Result};
use crate::manifest::{PackRef, is_blake3_hex};

/// Files up to this size go into packs.
pub(crate) const PACKED_MAX: u64 = 1024 * 1024;
/// A pack is sent once it holds this much.
const PACK_SIZE: usize = 8 * 1024 * 1024;
/// The last bytes of every pack.
const MAGIC: &[u8; 8] = b"hspack01";
/// The index length and the magic.
const TRAILER: u64 = 16;

#[derive(Debug, Serialize, Deserialize)]
struct Indexed {
    blake3: String,
    offset: u64,
    size: u64,
}

/// A pack being filled.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    id: String,
    contents: Vec<u8>,
    index: Vec<Indexed>,
}

impl Pending {
    /// Appends contents with this BLAKE3 (hex); returns where they lie and, once the pack
    /// is full, the pack to send (a new one is started).
    pub(crate) fn add(&mut self, blake3: &str, contents: &[u8]) -> (PackRef, Option<Pending>) {
        if self.id.is_empty() {
            self.id = new_id();
        }
        let at = PackRef {
            id: self.id.clone(),
            offset: self.contents.len() as u64,
        };
        self.contents.extend_from_slice(contents);
        self.index.push(Indexed {
            blake3: blake3.to_owned(),
            offset: at.offset,
            size: contents.len() as u64,
        });
        let full = (self.contents.len() >= PACK_SIZE).then(|| std::mem::take(self));
        (at, full)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

/// A new pack id: 32 hex digits, unique across movers (the pod's name, the process, the
/// time and a counter, hashed).
fn new_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = blake3::Hasher::new();
    hasher.update(std::env::var("HOSTNAME").unwrap_or_default().as_bytes());
    hasher.update(&std::process::id().to_le_bytes());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    hasher.update(&now.as_nanos().to_le_bytes());
    hasher.update(&COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    hasher.finalize().to_hex()[..32].to_owned()
}

impl Store {
    /// The key of pack `id` (a valid id: see [`PackRef::id_is_valid`]).
    pub(crate) fn pack_key(id: &str) -> Key {
        Key::from(format!("packs/{}/{id}", id.get(..2).unwrap_or_default()))
    }

    /// Puts a filled pack.
    pub(crate) fn put_pack(&self, pack: Pending) -> Result<()> {
        let key = Self::pack_key(&pack.id);
        let index =
            serde_json::to_vec(&pack.index).map_err(|source| MoverError::ManifestParse {
                path: self.address(&key),
                source,
            })?;
        let mut object = pack.contents;
        object.extend_from_slice(&index);
        object.extend_from_slice(&(index.len() as u64).to_le_bytes());
        object.extend_from_slice(MAGIC);
        self.put_bytes(&key, Bytes::from(object))
    }

    /// The packs stored: their ids and sizes.
    pub(crate) fn stored_packs(&self) -> Result<Vec<(String, u64)>> {
        Ok(self
            .list_keys("packs")?
            .into_iter()
            .filter_map(|m| Some((m.location.filename()?.to_owned(), m.size)))
            .filter(|(id, _)| PackRef::id_is_valid(id))
            .collect())
    }

    /// What pack `id` (of `size` bytes) holds, from its index: each content's BLAKE3 and
    /// where it lies. A pack whose index cannot be read is passed over (with a warning):
    /// its contents are only sent again.
    pub(crate) fn pack_index(&self, id: &str, size: u64) -> Result<Vec<(String, PackRef)>> {
        let key = Self::pack_key(id);
        let unreadable = |why: &str| {
            crate::warn(format!(
                "passing over pack {}: {why}",
                self.address(&key).display()
            ));
            Ok(Vec::new())
        };
        if size < TRAILER {
            return unreadable("too short to be a pack");
        }
        let trailer = self.get_suffix(&key, TRAILER)?;
        let (Some(len), Some(magic)) = (trailer.get(..8), trailer.get(8..)) else {
            return unreadable("it does not end as a pack does");
        };
        if magic != MAGIC {
            return unreadable("it does not end as a pack does");
        }
        let len = u64::from_le_bytes(len.try_into().unwrap_or_default());
        let Some(contents_len) = size.checked_sub(TRAILER).and_then(|s| s.checked_sub(len)) else {
            return unreadable("its index is longer than the pack");
        };
        let index = self
            .block_on(self.objects.get_range(&key, contents_len..size - TRAILER))
            .map_err(self.failed("read", &key))?;
        let Ok(index) = serde_json::from_slice::<Vec<Indexed>>(&index) else {
            return unreadable("its index is not readable");
        };
        let valid = |i: &Indexed| {
            is_blake3_hex(&i.blake3)
                && i.offset
                    .checked_add(i.size)
                    .is_some_and(|end| end <= contents_len)
        };
        if !index.iter().all(valid) {
            return unreadable("its index names contents outside it");
        }
        Ok(index
            .into_iter()
            .map(|i| {
                let at = PackRef {
                    id: id.to_owned(),
                    offset: i.offset,
                };
                (i.blake3, at)
            })
            .collect())
    }

    /// The last `n` bytes of an object.
    fn get_suffix(&self, key: &Key, n: u64) -> Result<Bytes> {
        let options = GetOptions {
            range: Some(GetRange::Suffix(n)),
            ..GetOptions::default()
        };
        self.block_on(async { self.objects.get_opts(key, options).await?.bytes().await })
            .map_err(self.failed("read", key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pack_is_sent_once_full_and_its_index_says_where_each_content_lies() {
        let store = Store::in_memory("ns", "app");
        let mut pending = Pending::default();
        let small = b"hello".as_slice();
        let hash = blake3::hash(small).to_hex().to_string();
        let (first, full) = pending.add(&hash, small);
        assert!(full.is_none() && first.offset == 0);
        let big = vec![7u8; PACK_SIZE];
        let big_hash = blake3::hash(&big).to_hex().to_string();
        let (second, full) = pending.add(&big_hash, &big);
        assert_eq!((second.id.as_str(), second.offset), (first.id.as_str(), 5));
        assert!(pending.is_empty(), "a new pack is started");
        let full = full.expect("the pack is full");
        store.put_pack(full).expect("put");

        let packs = store.stored_packs().expect("list");
        assert_eq!(packs.len(), 1);
        let (id, size) = &packs[0];
        assert_eq!(id, &first.id);
        let index = store.pack_index(id, *size).expect("index");
        assert_eq!(index, vec![(hash, first), (big_hash, second)]);
    }

    #[test]
    fn a_pack_that_does_not_end_as_a_pack_is_passed_over() {
        let store = Store::in_memory("ns", "app");
        let id = new_id();
        assert!(PackRef::id_is_valid(&id), "{id}");
        let key = Store::pack_key(&id);
        store
            .put_bytes(&key, Bytes::from_static(b"not a pack at all, only bytes"))
            .expect("put");
        assert!(store.pack_index(&id, 29).expect("read").is_empty());
    }
}
