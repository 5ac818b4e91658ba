//! Where slice rows are kept: a trait, so that the protocol runs against the ledger's table in
//! the handler and against memory in tests of many processes.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::slice::SliceRow;

/// Why a store operation did not happen.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    /// A row changed since it was read (or exists where none was expected): nothing written.
    #[error("a slice changed since it was read")]
    Conflict,
    /// The store could not be reached or answered an error; a write may or may not have
    /// applied.
    #[error("the slice store is unavailable: {0}")]
    Unavailable(String),
}

/// The slice rows of every scan.
pub trait SliceStore: Send + Sync + 'static {
    /// Every stored slice of `scan` (one request; slices never written are absent).
    fn read_all(
        &self,
        scan: &str,
    ) -> impl Future<Output = Result<Vec<SliceRow>, StoreError>> + Send;

    /// One slice of `scan`, if stored (one request, one entity).
    fn read_one(
        &self,
        scan: &str,
        index: u16,
    ) -> impl Future<Output = Result<Option<SliceRow>, StoreError>> + Send;

    /// Writes `rows` of `scan` all or none, each only if it is unchanged since it was read (its
    /// etag) or, for a row without one, absent; returns their new etags in order.
    fn write(
        &self,
        scan: &str,
        rows: &[SliceRow],
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;
}

/// What a store was asked: requests, and entities read and written (what the service counts).
#[derive(Debug, Default)]
pub struct Counts {
    pub requests: AtomicU64,
    pub read: AtomicU64,
    pub written: AtomicU64,
}

impl Counts {
    /// Entities read and written so far.
    pub fn entities(&self) -> u64 {
        self.read.load(Ordering::Relaxed) + self.written.load(Ordering::Relaxed)
    }
}

/// Stored rows by scan and index, each with its version.
type Rows = HashMap<(String, u16), (SliceRow, u64)>;

/// Slice rows in memory, counting what is asked of them; clones share the rows.
#[derive(Debug, Clone, Default)]
pub struct InMemorySlices {
    rows: Arc<Mutex<Rows>>,
    versions: Arc<AtomicU64>,
    pub counts: Arc<Counts>,
}

impl InMemorySlices {
    fn count(&self, read: u64, written: u64) {
        self.counts.requests.fetch_add(1, Ordering::Relaxed);
        self.counts.read.fetch_add(read, Ordering::Relaxed);
        self.counts.written.fetch_add(written, Ordering::Relaxed);
    }

    fn rows(&self) -> std::sync::MutexGuard<'_, Rows> {
        self.rows.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn stored(row: &SliceRow, version: u64) -> SliceRow {
    SliceRow {
        etag: Some(version.to_string()),
        ..row.clone()
    }
}

impl SliceStore for InMemorySlices {
    async fn read_all(&self, scan: &str) -> Result<Vec<SliceRow>, StoreError> {
        let mut found: Vec<SliceRow> = self
            .rows()
            .iter()
            .filter(|((s, _), _)| s == scan)
            .map(|(_, (row, version))| stored(row, *version))
            .collect();
        found.sort_by_key(|row| row.index);
        self.count(found.len().max(1) as u64, 0);
        Ok(found)
    }

    async fn read_one(&self, scan: &str, index: u16) -> Result<Option<SliceRow>, StoreError> {
        self.count(1, 0);
        Ok(self
            .rows()
            .get(&(scan.to_string(), index))
            .map(|(row, version)| stored(row, *version)))
    }

    async fn write(&self, scan: &str, rows: &[SliceRow]) -> Result<Vec<String>, StoreError> {
        self.count(0, rows.len() as u64);
        let mut stored_rows = self.rows();
        for row in rows {
            let current = stored_rows.get(&(scan.to_string(), row.index));
            let matches = match (&row.etag, current) {
                (None, None) => true,
                (Some(etag), Some((_, version))) => *etag == version.to_string(),
                _ => false,
            };
            if !matches {
                return Err(StoreError::Conflict);
            }
        }
        let mut etags = Vec::with_capacity(rows.len());
        for row in rows {
            let version = self.versions.fetch_add(1, Ordering::Relaxed) + 1;
            stored_rows.insert((scan.to_string(), row.index), (row.clone(), version));
            etags.push(version.to_string());
        }
        Ok(etags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writes_are_conditional_and_all_or_none() {
        let store = InMemorySlices::default();
        let a = SliceRow::unwritten(0).held("p", 100, 0.0);
        let b = SliceRow::unwritten(1).held("p", 100, 0.0);
        let etags = store.write("s", &[a.clone(), b.clone()]).await.unwrap();
        // Inserting again: the rows exist.
        assert_eq!(
            store.write("s", std::slice::from_ref(&a)).await,
            Err(StoreError::Conflict)
        );
        // One stale etag stops the whole write.
        let fresh = SliceRow {
            etag: Some(etags[0].clone()),
            ..a.held("q", 200, 0.0)
        };
        let stale = SliceRow {
            etag: Some("nope".into()),
            ..b.held("q", 200, 0.0)
        };
        assert_eq!(
            store.write("s", &[fresh.clone(), stale]).await,
            Err(StoreError::Conflict)
        );
        let rows = store.read_all("s").await.unwrap();
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|r| r.holder == "p"));
        store.write("s", &[fresh]).await.unwrap();
        assert_eq!(store.read_one("s", 0).await.unwrap().unwrap().holder, "q");
        assert_eq!(store.read_one("t", 0).await.unwrap(), None);
        assert_eq!(store.counts.written.load(Ordering::Relaxed), 2 + 1 + 2 + 1);
    }
}
