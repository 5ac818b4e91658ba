//! Enqueue: one message per row, or per partition, to a target queue.

use super::{write_all, ActionCounts};
use crate::storage::queue::{MessageEncoding, PutOptions, TimeToLive};
use crate::storage::table::entity::Entity;
use crate::storage::{QueueClient, StorageError};

const CONCURRENCY: usize = 16;

/// What each message holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageBody {
    /// The row as JSON: keys and properties, with type annotations where JSON cannot tell the
    /// type (the Table service's own format, so nothing is lost).
    Row,
    /// `{"PartitionKey": ...}`.
    PartitionKey,
}

#[derive(Clone)]
pub struct EnqueueRows {
    queue: QueueClient,
    body: MessageBody,
    options: PutOptions,
}

impl EnqueueRows {
    pub fn new(queue: QueueClient, body: MessageBody, encoding: MessageEncoding) -> Self {
        EnqueueRows {
            queue,
            body,
            options: PutOptions {
                encoding,
                visibility_timeout: std::time::Duration::ZERO,
                time_to_live: TimeToLive::Forever,
            },
        }
    }

    pub async fn apply(&self, rows: Vec<Entity>) -> Result<ActionCounts, StorageError> {
        let total = rows.len() as u64;
        let futures: Vec<_> = rows
            .into_iter()
            .map(|row| {
                let text = match self.body {
                    MessageBody::Row => row.to_json(),
                    MessageBody::PartitionKey => {
                        serde_json::json!({ "PartitionKey": row.partition_key }).to_string()
                    }
                };
                let queue = self.queue.clone();
                let options = self.options.clone();
                async move { queue.put_message(text.as_bytes(), &options).await.map(drop) }
            })
            .collect();
        write_all(futures, CONCURRENCY).await?;
        Ok(ActionCounts {
            acted: total,
            skipped: 0,
        })
    }
}
