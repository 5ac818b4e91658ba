//! Export: a step's rows into one blob of newline-delimited JSON (see [`format`]).
//!
//! The rows a step reads are gathered in memory, a compressed chunk per page, and written as
//! one blob when the step ends; the step's finish records that blob in the ledger. A blob is
//! named after its work item *and the attempt* that wrote it: a step run again after a crash
//! may stop at another point than the first run (its budget is time), so the first run's blob
//! may hold rows the second hands on to its children. Only the blob of the attempt whose finish
//! was recorded belongs to the export; the manifest lists those, and the others are deleted
//! when it is written.

pub mod format;

use std::sync::{Arc, Mutex};

use super::Applied;
use format::{encode_chunk, sha256_base64, Compression};
use tablescan_storage::blob::{ContainerClient, UploadOptions};
use tablescan_storage::table::entity::Entity;
use tablescan_storage::StorageError;

/// A blob the export wrote: what its step's finish records, and the manifest lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub name: String,
    pub rows: u64,
    pub bytes: u64,
    /// SHA-256 of the blob's bytes, base64.
    pub sha256: String,
}

/// The rows of one step, gathered for its blob.
#[derive(Default)]
struct Gathered {
    bytes: Vec<u8>,
    rows: u64,
}

/// Writes each step's rows into a blob of `container`.
#[derive(Clone)]
pub struct ExportRows {
    container: ContainerClient,
    compression: Compression,
    gathered: Arc<Mutex<Gathered>>,
}

impl ExportRows {
    /// An export into `container`; a new one for each step (it gathers that step's rows).
    pub fn new(container: ContainerClient, compression: Compression) -> Self {
        ExportRows {
            container,
            compression,
            gathered: Arc::default(),
        }
    }

    /// Gathers a page of rows (as one chunk of the step's blob).
    pub fn apply(&self, rows: Vec<Entity>) -> Applied {
        if rows.is_empty() {
            return Applied::default();
        }
        let chunk = encode_chunk(&rows, self.compression);
        let mut gathered = self.gathered.lock().unwrap_or_else(|e| e.into_inner());
        gathered.bytes.extend_from_slice(&chunk);
        gathered.rows += rows.len() as u64;
        Applied::all_acted(rows.len())
    }

    /// Writes the rows gathered so far as blob `name` (replacing it whole, so a retried write
    /// leaves one copy); `None` when there were none.
    pub async fn write(&self, name: &str) -> Result<Option<Written>, StorageError> {
        // Taken: a step writes its blob once, at its end (a failed write fails the step).
        let Gathered { bytes, rows } =
            std::mem::take(&mut *self.gathered.lock().unwrap_or_else(|e| e.into_inner()));
        if rows == 0 {
            return Ok(None);
        }
        let written = Written {
            name: name.to_string(),
            rows,
            bytes: bytes.len() as u64,
            sha256: sha256_base64(&bytes),
        };
        self.container
            .upload(
                name,
                bytes,
                self.compression.content_type(),
                UploadOptions::default(),
            )
            .await?;
        Ok(Some(written))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_gather_into_one_blob() {
        let account = tablescan_storage::StorageAccount::from_connection_string(
            "DefaultEndpointsProtocol=http;AccountName=a;AccountKey=AAAA;BlobEndpoint=http://127.0.0.1:1/a",
        )
        .unwrap();
        let container = tablescan_storage::blob::BlobServiceClient::new(
            &account,
            tablescan_storage::ClientOptions::default(),
        )
        .unwrap()
        .container("exports")
        .unwrap();
        let export = ExportRows::new(container, Compression::Gzip);
        let applied = export.apply(vec![Entity::new("a", "1"), Entity::new("a", "2")]);
        assert_eq!(applied, Applied::all_acted(2));
        export.apply(vec![Entity::new("b", "1")]);
        let gathered = export.gathered.lock().unwrap();
        assert_eq!(gathered.rows, 3);
        let first = format::next_chunk(&gathered.bytes, 0, Compression::Gzip)
            .unwrap()
            .unwrap();
        assert_eq!(first.text.lines().count(), 2);
        let second = format::next_chunk(
            &gathered.bytes[first.length..],
            first.length as u64,
            Compression::Gzip,
        )
        .unwrap()
        .unwrap();
        assert_eq!(second.length + first.length, gathered.bytes.len());
    }
}
