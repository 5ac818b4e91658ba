//! Enqueue: one message per row (or per partition), or one per group of rows, to a target
//! queue.
//!
//! A queue takes about 2,000 messages per second, so a scan of 50 million rows into one queue
//! needs seven hours at one row per message. With `rowsPerMessage` above 1, each message holds
//! a JSON array of up to that many rows in table order, cut short where the next row would
//! take the message past the Queue service's 64 KiB (after base64, when messages are encoded).

use crate::writes::write_until;
use crate::{Applied, GoOn, RowFailure};
use std::sync::Arc;
use tablescan_storage::pacing::Governor;
use tablescan_storage::queue::{
    MessageEncoding, PutOptions, TimeToLive, MAX_BASE64_PAYLOAD_BYTES, MAX_MESSAGE_TEXT_BYTES,
};
use tablescan_storage::table::entity::Entity;
use tablescan_storage::{QueueClient, StorageError};

/// Messages one step keeps in flight.
pub const CONCURRENCY: usize = 16;

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
    if json.chars().all(tablescan_storage::queue::is_xml_char) {
        return json.to_string();
    }
    let mut out = String::with_capacity(json.len() + 12);
    for c in json.chars() {
        if tablescan_storage::queue::is_xml_char(c) {
            out.push(c);
        } else {
            out.push_str(&format!("\\u{:04x}", c as u32));
        }
    }
    out
}

#[derive(Clone)]
pub struct EnqueueRows {
    /// One queue, or several that rows are spread over by a hash of their PartitionKey.
    queues: Vec<QueueClient>,
    body: MessageBody,
    options: PutOptions,
    /// 1: a JSON object per message; more: JSON arrays of up to this many.
    rows_per_message: usize,
}

impl EnqueueRows {
    pub fn new(queue: QueueClient, body: MessageBody, encoding: MessageEncoding) -> Self {
        EnqueueRows {
            queues: vec![queue],
            body,
            options: PutOptions {
                encoding,
                visibility_timeout: std::time::Duration::ZERO,
                time_to_live: TimeToLive::Forever,
                // Delivery is at least once in any case (a step that fails puts its messages
                // again); retrying one put duplicates one message at most.
                at_least_once: true,
            },
            rows_per_message: 1,
        }
    }

    /// Puts up to `rows` rows into each message, as a JSON array (1 keeps one JSON object per
    /// message).
    pub fn with_rows_per_message(mut self, rows: u16) -> Self {
        self.rows_per_message = usize::from(rows.max(1));
        self
    }

    /// Spreads the rows over `queues` (in place of the one given to `new`) by a hash of their
    /// PartitionKey: each queue takes about 2,000 messages per second, so `n` queues take `n`
    /// times as many. A partition's rows all go to one queue.
    pub fn spread_over(mut self, queues: Vec<QueueClient>) -> Self {
        if !queues.is_empty() {
            self.queues = queues;
        }
        self
    }

    /// The index of the queue `row` goes to.
    fn queue_of(&self, row: &Entity) -> usize {
        if self.queues.len() == 1 {
            return 0;
        }
        (fnv1a(row.partition_key.as_bytes()) % self.queues.len() as u64) as usize
    }

    fn json_of(&self, row: &Entity) -> String {
        match self.body {
            MessageBody::Row => row.to_json(),
            MessageBody::PartitionKey => {
                serde_json::json!({ "PartitionKey": row.partition_key }).to_string()
            }
        }
    }

    /// The largest message text the queue takes, before encoding.
    fn payload_limit(&self) -> usize {
        match self.options.encoding {
            MessageEncoding::Base64 => MAX_BASE64_PAYLOAD_BYTES,
            MessageEncoding::Text => MAX_MESSAGE_TEXT_BYTES,
        }
    }

    /// Sorts the rows into those that fit a message, each with its queue and its XML-safe
    /// JSON, and those that cannot (failed, with why), keeping each one's index in `rows`.
    fn screen(&self, rows: &[Entity]) -> (Vec<Placed>, Vec<(usize, RowFailure)>) {
        let limit = self.payload_limit();
        // An array of one row adds its brackets.
        let wrapping = if self.rows_per_message > 1 { 2 } else { 0 };
        let mut placed = Vec::with_capacity(rows.len());
        let mut refused = Vec::new();
        for (row, entity) in rows.iter().enumerate() {
            let json = xml_safe_json(&self.json_of(entity));
            if json.len() + wrapping > limit {
                let why = format!(
                    "too large for a queue message: {} bytes of JSON where a message holds at most {limit}{}",
                    json.len() + wrapping,
                    match self.options.encoding {
                        MessageEncoding::Base64 => " before base64 encoding",
                        MessageEncoding::Text => "",
                    }
                );
                refused.push((
                    row,
                    RowFailure::new(&entity.partition_key, &entity.row_key, why),
                ));
            } else {
                placed.push(Placed {
                    row,
                    queue: self.queue_of(entity),
                    json,
                });
            }
        }
        (placed, refused)
    }

    /// How many messages `apply` would put on each queue for `rows` (those given a row, at
    /// most `rows_per_message` rows each; rows too large for a message counted as sent: at
    /// most one message too many is waited for), with each queue's back-off.
    pub fn messages_per_queue(&self, rows: &[Entity]) -> Vec<(u64, Arc<Governor>)> {
        let mut per_queue = vec![0u64; self.queues.len()];
        for row in rows {
            per_queue[self.queue_of(row)] += 1;
        }
        let per_message = self.rows_per_message as u64;
        per_queue
            .into_iter()
            .zip(&self.queues)
            .filter(|(rows, _)| *rows > 0)
            .map(|(rows, queue)| (rows.div_ceil(per_message), queue.governor()))
            .collect()
    }

    /// What `apply` would do, without sending anything: every row that fits a message would
    /// be enqueued, the others fail.
    pub fn preview(&self, rows: &[Entity]) -> Applied {
        let (placed, refused) = self.screen(rows);
        let mut applied = Applied::all_acted(rows.len());
        applied.counts.acted = placed.len() as u64;
        for (_, failure) in refused {
            applied.fail(failure);
        }
        applied
    }

    /// Puts the rows' messages, in order, until `go_on` says no; `finished` counts the rows
    /// of the messages put before the first that was not. A row too large for a message fails
    /// alone: it is reported, and the others are sent.
    pub async fn apply(&self, rows: Vec<Entity>, go_on: GoOn<'_>) -> Result<Applied, StorageError> {
        let (placed, refused) = self.screen(&rows);
        let messages = plan_messages(
            placed,
            self.queues.len(),
            self.rows_per_message,
            self.payload_limit(),
        );
        // Messages go out in the order of their first rows; the rows finished are those before
        // the first row of the first message not sent. (With several queues a message sent may
        // also hold later rows, which are then sent again with the rest: at least once.)
        let first_rows: Vec<usize> = messages.iter().map(|m| m.first_row).collect();
        let futures: Vec<_> = messages
            .into_iter()
            .map(|message| {
                let text = message.text;
                let queue = self.queues[message.queue].clone();
                let options = self.options.clone();
                let governor = queue.governor();
                // The queue's back-off was waited for before (`Action::queue_writes`, for the
                // whole page); a refused put cuts it and its retry waits for it (the pipeline),
                // and so does a put that waited long in the queue's backlog.
                async move {
                    let sent = std::time::Instant::now();
                    let put = queue.put_message(text.as_bytes(), &options).await;
                    tablescan_storage::pacing::queue::put_answered(&governor, sent.elapsed());
                    put.map(drop)
                }
            })
            .collect();
        let sent = write_until(futures, CONCURRENCY, go_on).await?;
        let finished = first_rows.get(sent).copied().unwrap_or(rows.len());
        let mut applied = Applied::all_acted(finished);
        for (row, failure) in refused {
            if row < finished {
                applied.counts.acted -= 1;
                applied.fail(failure);
            }
        }
        Ok(applied)
    }
}

/// A row that fits a message: its index in the page, its queue, its XML-safe JSON.
#[derive(Debug, Clone, PartialEq)]
struct Placed {
    row: usize,
    queue: usize,
    json: String,
}

/// FNV-1a, 64 bits: a stable hash (the same queue for a partition in every step and version).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// One message to send.
#[derive(Debug, Clone, PartialEq)]
struct Planned {
    queue: usize,
    /// XML-safe JSON: one row, or an array of rows.
    text: String,
    /// The index of its first row in the page.
    first_row: usize,
}

/// The messages for rows placed on queues (in table order): one per row, or per queue arrays
/// of up to `per_message` rows within `limit` bytes (see [`group_rows`]); in the order of
/// their first rows.
fn plan_messages(
    placed: Vec<Placed>,
    queues: usize,
    per_message: usize,
    limit: usize,
) -> Vec<Planned> {
    if per_message <= 1 {
        return placed
            .into_iter()
            .map(|p| Planned {
                queue: p.queue,
                text: p.json,
                first_row: p.row,
            })
            .collect();
    }
    let mut by_queue: Vec<(Vec<usize>, Vec<String>)> = vec![(Vec::new(), Vec::new()); queues];
    for p in placed {
        by_queue[p.queue].0.push(p.row);
        by_queue[p.queue].1.push(p.json);
    }
    let mut messages = Vec::new();
    for (queue, (indices, jsons)) in by_queue.into_iter().enumerate() {
        let mut next = 0;
        for (text, rows) in group_rows(jsons, per_message, limit) {
            messages.push(Planned {
                queue,
                text,
                first_row: indices[next],
            });
            next += rows;
        }
    }
    messages.sort_by_key(|m| m.first_row);
    messages
}

/// Groups rows' JSON texts (XML-safe already), in order, into JSON arrays of at most
/// `per_message` rows whose text stays within `limit` bytes; each array with the number of rows
/// it holds. A row too large to share a message gets one of its own (`apply` has failed the
/// rows too large for a message of their own before).
fn group_rows(jsons: Vec<String>, per_message: usize, limit: usize) -> Vec<(String, usize)> {
    let mut messages = Vec::new();
    let mut current = String::from("[");
    let mut rows = 0;
    for json in jsons {
        // The comma before it and the closing bracket after it.
        let grown = current.len() + usize::from(rows > 0) + json.len() + 1;
        if rows > 0 && (rows == per_message || grown > limit) {
            current.push(']');
            messages.push((std::mem::replace(&mut current, String::from("[")), rows));
            rows = 0;
        }
        if rows > 0 {
            current.push(',');
        }
        current.push_str(&json);
        rows += 1;
    }
    if rows > 0 {
        current.push(']');
        messages.push((current, rows));
    }
    messages
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
            safe.chars().all(tablescan_storage::queue::is_xml_char),
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

    fn texts(n: usize, size: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("{{\"n\":\"{}\"}}", format!("{i:04}").repeat(size / 4)))
            .collect()
    }

    #[test]
    fn messages_for_several_queues_hold_each_row_once_in_its_queue_in_row_order() {
        let placed: Vec<Placed> = (0..50)
            .map(|i| Placed {
                row: i,
                queue: i % 7 % 3,
                json: format!("{i}"),
            })
            .collect();
        for per_message in [1, 4] {
            let messages = plan_messages(placed.clone(), 3, per_message, 64 * 1024);
            let mut seen = Vec::new();
            for message in &messages {
                let rows: Vec<usize> = if per_message == 1 {
                    vec![message.text.parse().unwrap()]
                } else {
                    serde_json::from_str(&message.text).unwrap()
                };
                assert!(rows.len() <= per_message);
                assert_eq!(rows[0], message.first_row);
                for row in &rows {
                    assert_eq!(row % 7 % 3, message.queue, "row {row} in the wrong queue");
                }
                seen.extend(rows);
            }
            assert!(messages.windows(2).all(|w| w[0].first_row < w[1].first_row));
            seen.sort();
            assert_eq!(seen, (0..50).collect::<Vec<_>>());
        }
    }

    #[test]
    fn the_queue_of_a_partition_is_stable() {
        // FNV-1a's published test vectors: the placement must not change between versions.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn rows_are_grouped_in_order_up_to_the_count() {
        let groups = group_rows(texts(10, 4), 4, 64 * 1024);
        let counts: Vec<usize> = groups.iter().map(|(_, n)| *n).collect();
        assert_eq!(counts, [4, 4, 2]);
        let mut all = Vec::new();
        for (text, n) in &groups {
            let array: Vec<serde_json::Value> = serde_json::from_str(text).unwrap();
            assert_eq!(array.len(), *n);
            all.extend(array);
        }
        let expected: Vec<serde_json::Value> = texts(10, 4)
            .iter()
            .map(|t| serde_json::from_str(t).unwrap())
            .collect();
        assert_eq!(all, expected, "every row once, in order");
    }

    #[test]
    fn a_group_ends_before_the_size_limit() {
        // Rows of about 1,000 bytes into messages of at most 3,500: three per message.
        let groups = group_rows(texts(10, 1000), 100, 3500);
        for (text, _) in &groups {
            assert!(text.len() <= 3500, "{}", text.len());
        }
        let counts: Vec<usize> = groups.iter().map(|(_, n)| *n).collect();
        assert_eq!(counts, [3, 3, 3, 1]);
        // A row larger than the limit alone goes alone (and the queue decides).
        let big = group_rows(texts(3, 5000), 100, 3500);
        assert_eq!(big.iter().map(|(_, n)| *n).collect::<Vec<_>>(), [1, 1, 1]);
        assert!(group_rows(Vec::new(), 5, 100).is_empty());
    }
}
