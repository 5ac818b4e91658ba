//! Enqueue: one message per row, or per partition, to a target queue.

use super::{write_until, ActionCounts, Applied, GoOn};
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

/// The same JSON with every character XML cannot carry (U+FFFE, U+FFFF; control characters are
/// escaped by the serialiser already) written as a `\uXXXX` escape: the value a consumer parses
/// is unchanged, and the text can travel unencoded through the Queue service.
pub fn xml_safe_json(json: &str) -> String {
    if json.chars().all(crate::storage::queue::is_xml_char) {
        return json.to_string();
    }
    let mut out = String::with_capacity(json.len() + 12);
    for c in json.chars() {
        if crate::storage::queue::is_xml_char(c) {
            out.push(c);
        } else {
            out.push_str(&format!("\\u{:04x}", c as u32));
        }
    }
    out
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
                // Delivery is at least once in any case (a step that fails puts its messages
                // again); retrying one put duplicates one message at most.
                at_least_once: true,
            },
        }
    }

    /// Puts one message per row, in order, until `go_on` says no.
    pub async fn apply(&self, rows: Vec<Entity>, go_on: GoOn<'_>) -> Result<Applied, StorageError> {
        let futures: Vec<_> = rows
            .into_iter()
            .map(|row| {
                let json = match self.body {
                    MessageBody::Row => row.to_json(),
                    MessageBody::PartitionKey => {
                        serde_json::json!({ "PartitionKey": row.partition_key }).to_string()
                    }
                };
                let text = xml_safe_json(&json);
                let queue = self.queue.clone();
                let options = self.options.clone();
                async move { queue.put_message(text.as_bytes(), &options).await.map(drop) }
            })
            .collect();
        let finished = write_until(futures, CONCURRENCY, go_on).await?;
        Ok(Applied {
            counts: ActionCounts {
                acted: finished as u64,
                skipped: 0,
            },
            finished,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_made_xml_safe_without_changing_its_value() {
        let json =
            serde_json::json!({ "PartitionKey": "a\u{FFFF}b\u{FFFE}", "RowKey": "😀" }).to_string();
        let safe = xml_safe_json(&json);
        assert!(
            safe.chars().all(crate::storage::queue::is_xml_char),
            "{safe}"
        );
        assert!(safe.contains("\\uffff"), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(
            back,
            serde_json::from_str::<serde_json::Value>(&json).unwrap()
        );
        assert_eq!(xml_safe_json("{\"a\":1}"), "{\"a\":1}");
    }
}
