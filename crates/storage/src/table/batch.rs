//! Entity group transactions: up to 100 writes to one partition, applied all or nothing.
//!
//! The request is a `multipart/mixed` body holding one changeset; each operation is an HTTP
//! request with an absolute URL and a one-line JSON body. The service checks the limits too,
//! but not always the way Azure does (the emulator accepts operations on several partitions),
//! so every limit is checked here before anything is sent.

use std::collections::HashSet;

use super::entity::Entity;
use crate::encoding::entity_path;
use crate::names::{validate_key, KeyKind};

/// At most this many operations per transaction.
pub const MAX_OPERATIONS: usize = 100;
/// At most this many bytes of request body per transaction.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// The condition on an update or delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IfMatch {
    /// Whatever the entity's version (`If-Match: *`).
    Any,
    /// Only if the entity still has this etag.
    Etag(String),
}

impl IfMatch {
    pub(crate) fn header(&self) -> &str {
        match self {
            IfMatch::Any => "*",
            IfMatch::Etag(etag) => etag,
        }
    }
}

/// One write in a transaction.
#[derive(Debug, Clone)]
pub enum Operation {
    /// Fails if the entity exists.
    Insert(Entity),
    /// Creates or replaces the whole entity.
    UpsertReplace(Entity),
    /// Creates the entity or merges the given properties into it.
    UpsertMerge(Entity),
    /// Replaces an existing entity.
    Update(Entity, IfMatch),
    /// Merges into an existing entity.
    Merge(Entity, IfMatch),
    /// Deletes an entity.
    Delete {
        partition_key: String,
        row_key: String,
        if_match: IfMatch,
    },
}

impl Operation {
    /// The partition and row key the operation writes.
    pub fn keys(&self) -> (&str, &str) {
        match self {
            Operation::Insert(e)
            | Operation::UpsertReplace(e)
            | Operation::UpsertMerge(e)
            | Operation::Update(e, _)
            | Operation::Merge(e, _) => (&e.partition_key, &e.row_key),
            Operation::Delete {
                partition_key,
                row_key,
                ..
            } => (partition_key, row_key),
        }
    }

    /// Whether sending it again after an attempt that may have been done is safe: applying
    /// it twice has the same effect as once (upserts), or the second attempt can only be
    /// refused (a delete conditional on an etag answers 404 or 412, and deletes nothing else).
    fn is_idempotent(&self) -> bool {
        matches!(
            self,
            Operation::UpsertReplace(_)
                | Operation::UpsertMerge(_)
                | Operation::Delete {
                    if_match: IfMatch::Etag(_),
                    ..
                }
        )
    }
}

/// A validated, encoded transaction ready to send.
#[derive(Debug)]
pub(crate) struct EncodedBatch {
    pub content_type: String,
    pub body: Vec<u8>,
    pub idempotent: bool,
}

/// Checks every limit and builds the multipart body. `table_url` is the absolute URL of the
/// table, which each operation's request line needs.
pub(crate) fn encode(
    table_url: &str,
    table: &str,
    operations: &[Operation],
) -> Result<EncodedBatch, String> {
    check_operations(operations)?;
    let batch = format!("batch_{}", uuid::Uuid::new_v4());
    let changeset = format!("changeset_{}", uuid::Uuid::new_v4());
    let mut body = String::with_capacity(operations.len() * 512);
    body.push_str(&format!(
        "--{batch}\r\nContent-Type: multipart/mixed; boundary={changeset}\r\n\r\n"
    ));
    for op in operations {
        push_operation(&mut body, &changeset, table_url, table, op);
    }
    body.push_str(&format!("--{changeset}--\r\n--{batch}--\r\n"));
    if body.len() > MAX_BODY_BYTES {
        return Err(format!(
            "the transaction's body is {} bytes; the limit is {MAX_BODY_BYTES} (4 MiB)",
            body.len()
        ));
    }
    Ok(EncodedBatch {
        content_type: format!("multipart/mixed; boundary={batch}"),
        body: body.into_bytes(),
        idempotent: operations.iter().all(Operation::is_idempotent),
    })
}

/// The service's rules for one transaction, checked before anything is sent: 1 to
/// [`MAX_OPERATIONS`] operations, valid keys, one PartitionKey, no RowKey twice.
fn check_operations(operations: &[Operation]) -> Result<(), String> {
    if operations.is_empty() {
        return Err("a transaction needs at least one operation".into());
    }
    if operations.len() > MAX_OPERATIONS {
        return Err(format!(
            "a transaction holds at most {MAX_OPERATIONS} operations; this one has {}",
            operations.len()
        ));
    }
    let partition = operations[0].keys().0;
    let mut seen = HashSet::new();
    for (index, op) in operations.iter().enumerate() {
        let (pk, rk) = op.keys();
        validate_key(KeyKind::PartitionKey, pk).map_err(|e| format!("operation {index}: {e}"))?;
        validate_key(KeyKind::RowKey, rk).map_err(|e| format!("operation {index}: {e}"))?;
        if pk != partition {
            return Err(format!(
                "operation {index} is on another partition than operation 0; a transaction covers one PartitionKey"
            ));
        }
        if !seen.insert(rk) {
            return Err(format!(
                "operation {index} names a RowKey that an earlier operation already names"
            ));
        }
    }
    Ok(())
}

/// One operation of the changeset: its part headers, request line, headers and entity.
fn push_operation(
    body: &mut String,
    changeset: &str,
    table_url: &str,
    table: &str,
    op: &Operation,
) {
    body.push_str(&format!(
        "--{changeset}\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n"
    ));
    let (pk, rk) = op.keys();
    let this_entity = || entity_url(table_url, table, pk, rk);
    let (method, url, if_match, entity) = match op {
        Operation::Insert(e) => ("POST", table_url.to_string(), None, Some(e)),
        Operation::UpsertReplace(e) => ("PUT", this_entity(), None, Some(e)),
        Operation::UpsertMerge(e) => ("MERGE", this_entity(), None, Some(e)),
        Operation::Update(e, m) => ("PUT", this_entity(), Some(m), Some(e)),
        Operation::Merge(e, m) => ("MERGE", this_entity(), Some(m), Some(e)),
        Operation::Delete { if_match, .. } => ("DELETE", this_entity(), Some(if_match), None),
    };
    body.push_str(&format!(
        "{method} {url} HTTP/1.1\r\nAccept: application/json;odata=minimalmetadata\r\nDataServiceVersion: 3.0;\r\n"
    ));
    if method == "POST" {
        body.push_str("Prefer: return-no-content\r\n");
    }
    if let Some(condition) = if_match {
        body.push_str(&format!("If-Match: {}\r\n", condition.header()));
    }
    match entity {
        Some(e) => {
            body.push_str("Content-Type: application/json\r\n\r\n");
            body.push_str(&e.to_json());
            body.push_str("\r\n");
        }
        None => body.push_str("\r\n"),
    }
}

/// The absolute URL of one entity: the table URL followed by the key predicate.
fn entity_url(table_url: &str, table: &str, pk: &str, rk: &str) -> String {
    let path = entity_path(table, pk, rk);
    format!(
        "{}{}",
        table_url.trim_end_matches('/'),
        &path[table.len()..]
    )
}

/// One operation's answer inside a batch response.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PartResponse {
    pub status: u16,
    pub etag: Option<String>,
    pub content_id: Option<usize>,
    pub body: String,
}

/// Reads every operation response of a batch answer, in order.
///
/// Parts are found by their `HTTP/1.1 ` status lines rather than by fixed offsets after the
/// boundaries: the emulator puts an extra boundary line before the status line in some error
/// answers.
pub(crate) fn parse_response(body: &str) -> Vec<PartResponse> {
    let mut parts = Vec::new();
    let mut lines = body
        .split('\n')
        .map(|l| l.trim_end_matches('\r'))
        .peekable();
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix("HTTP/1.1 ") else {
            continue;
        };
        let status = rest
            .split(' ')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let (mut etag, mut content_id) = (None, None);
        for header in lines.by_ref() {
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                let value = value.trim();
                if name.eq_ignore_ascii_case("etag") {
                    etag = Some(value.to_string());
                } else if name.eq_ignore_ascii_case("content-id") {
                    content_id = value.parse().ok();
                }
            }
        }
        let mut text = Vec::new();
        while let Some(next) = lines.peek() {
            if next.starts_with("--") || next.starts_with("HTTP/1.1 ") {
                break;
            }
            text.push(lines.next().unwrap_or_default());
        }
        parts.push(PartResponse {
            status,
            etag,
            content_id,
            body: text.join("\n").trim().to_string(),
        });
    }
    parts
}

/// The failing operation's index, from the `N:` prefix of the error message, else from the
/// part's Content-ID (1-based), else 0.
pub(crate) fn failed_index(message: &str, content_id: Option<usize>) -> usize {
    let digits: String = message.chars().take_while(char::is_ascii_digit).collect();
    if !digits.is_empty() && message[digits.len()..].starts_with(':') {
        if let Ok(index) = digits.parse() {
            return index;
        }
    }
    content_id.map_or(0, |id| id.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://127.0.0.1:10002/devstoreaccount1/orders";

    fn upsert(pk: &str, rk: &str) -> Operation {
        Operation::UpsertReplace(Entity::new(pk, rk))
    }

    #[test]
    fn body_has_one_changeset_with_absolute_urls_and_one_line_json() {
        let ops = vec![
            Operation::Insert(Entity::new("p", "a")),
            upsert("p", "it's"),
            Operation::Delete {
                partition_key: "p".into(),
                row_key: "c".into(),
                if_match: IfMatch::Any,
            },
        ];
        let batch = encode(URL, "orders", &ops).unwrap();
        let body = String::from_utf8(batch.body).unwrap();
        assert!(batch
            .content_type
            .starts_with("multipart/mixed; boundary=batch_"));
        assert!(body.contains(&format!("POST {URL} HTTP/1.1\r\n")));
        assert!(body.contains(&format!(
            "PUT {URL}(PartitionKey='p',RowKey='it%27%27s') HTTP/1.1\r\n"
        )));
        assert!(body.contains(&format!(
            "DELETE {URL}(PartitionKey='p',RowKey='c') HTTP/1.1\r\n"
        )));
        assert!(body.contains("If-Match: *\r\n"));
        assert!(body.contains("{\"PartitionKey\":\"p\",\"RowKey\":\"a\"}\r\n"));
        assert!(!body.replace("\r\n", "").contains('\n'), "CRLF only");
        assert!(!batch.idempotent);
        assert!(
            encode(URL, "orders", &[upsert("p", "x")])
                .unwrap()
                .idempotent
        );
        // A delete on an etag can be sent again safely (the second attempt can only be
        // refused); one on any etag could delete a row inserted in between.
        let delete = |if_match| Operation::Delete {
            if_match,
            partition_key: "p".into(),
            row_key: "x".into(),
        };
        assert!(
            encode(URL, "orders", &[delete(IfMatch::Etag("W/\"1\"".into()))])
                .unwrap()
                .idempotent
        );
        assert!(
            !encode(URL, "orders", &[delete(IfMatch::Any)])
                .unwrap()
                .idempotent
        );
    }

    #[test]
    fn every_limit_is_checked_before_sending() {
        assert!(encode(URL, "orders", &[]).is_err());
        let hundred_one: Vec<_> = (0..101).map(|i| upsert("p", &i.to_string())).collect();
        assert!(encode(URL, "orders", &hundred_one)
            .unwrap_err()
            .contains("at most 100"));
        let hundred: Vec<_> = (0..100).map(|i| upsert("p", &i.to_string())).collect();
        assert!(encode(URL, "orders", &hundred).is_ok());
        let mixed = [upsert("p", "a"), upsert("q", "b")];
        assert!(encode(URL, "orders", &mixed)
            .unwrap_err()
            .contains("operation 1 is on another partition"));
        let duplicate = [upsert("p", "a"), upsert("p", "a")];
        assert!(encode(URL, "orders", &duplicate)
            .unwrap_err()
            .contains("operation 1"));
        let bad_key = [upsert("p", "a/b")];
        assert!(encode(URL, "orders", &bad_key)
            .unwrap_err()
            .contains("RowKey"));
        let big = crate::table::entity::Value::String("x".repeat(60_000));
        let heavy: Vec<_> = (0..80)
            .map(|i| {
                Operation::UpsertReplace(Entity::new("p", i.to_string()).with("s", big.clone()))
            })
            .collect();
        assert!(encode(URL, "orders", &heavy).unwrap_err().contains("4 MiB"));
    }

    #[test]
    fn responses_are_read_per_operation() {
        let body = "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_2\r\n\r\n\
            --changesetresponse_2\r\nContent-Type: application/http\r\n\r\n\
            HTTP/1.1 204 No Content\r\nETag: W/\"datetime'a'\"\r\n\r\n\r\n\
            --changesetresponse_2\r\nContent-Type: application/http\r\n\r\n\
            HTTP/1.1 204 No Content\r\nETag: W/\"datetime'b'\"\r\n\r\n\r\n\
            --changesetresponse_2--\r\n--batchresponse_1--\r\n";
        let parts = parse_response(body);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[1].etag.as_deref(), Some("W/\"datetime'b'\""));
        assert!(parts.iter().all(|p| p.status == 204));
    }

    #[test]
    fn a_failed_part_gives_its_index() {
        let body = "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_2\r\n\r\n\
            --changesetresponse_2\r\nContent-Type: application/http\r\n\r\n\
            --changesetresponse_2\r\n\
            HTTP/1.1 409 Conflict\r\nContent-ID: 6\r\nContent-Type: application/json\r\n\r\n\
            {\"odata.error\":{\"code\":\"EntityAlreadyExists\",\"message\":{\"value\":\"5:The specified entity already exists.\"}}}\r\n\
            --changesetresponse_2--\r\n--batchresponse_1--\r\n";
        let parts = parse_response(body);
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].status, 409);
        assert_eq!(parts[0].content_id, Some(6));
        assert!(parts[0].body.contains("EntityAlreadyExists"));
        assert_eq!(
            failed_index("5:The specified entity already exists.", None),
            5
        );
        assert_eq!(failed_index("no index here", Some(3)), 2);
        assert_eq!(failed_index("12 apples", None), 0);
    }
}
