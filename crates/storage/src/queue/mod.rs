//! The Queue service: queues and their messages.

mod xml;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use reqwest::Method;

use super::authorize::Service;
use super::connection_string::StorageAccount;
use super::encoding::encode_component;
use super::error::{describe, StorageError};
use super::names::validate_queue_name;
use super::pipeline::{ClientOptions, Pipeline, Request};

/// The service refuses message text (after XML decoding) longer than 64 KiB.
pub const MAX_MESSAGE_TEXT_BYTES: usize = 64 * 1024;
/// The largest payload that fits once base64-encoded: 48 KiB.
pub const MAX_BASE64_PAYLOAD_BYTES: usize = MAX_MESSAGE_TEXT_BYTES / 4 * 3;
/// Get Messages returns at most this many messages per call.
pub const MAX_MESSAGES_PER_RECEIVE: u8 = 32;
/// The longest visibility timeout and the longest finite time to live: seven days.
pub const MAX_VISIBILITY: Duration = Duration::from_secs(7 * 24 * 3600);

/// How a payload is put into the message text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MessageEncoding {
    /// Standard base64: what the Azure Functions queue trigger expects by default.
    #[default]
    Base64,
    /// The payload as text (it must be UTF-8); the client escapes it for XML.
    Text,
}

impl MessageEncoding {
    /// Turns a payload into message text.
    pub fn encode(self, payload: &[u8]) -> Result<String, String> {
        match self {
            MessageEncoding::Base64 => {
                Ok(base64::engine::general_purpose::STANDARD.encode(payload))
            }
            MessageEncoding::Text => String::from_utf8(payload.to_vec())
                .map_err(|_| "a text-encoded message must be valid UTF-8".to_string()),
        }
    }

    /// Turns message text back into the payload.
    pub fn decode(self, text: &str) -> Result<Vec<u8>, String> {
        match self {
            MessageEncoding::Base64 => base64::engine::general_purpose::STANDARD
                .decode(text.trim())
                .map_err(|_| "the message text is not valid base64".to_string()),
            MessageEncoding::Text => Ok(text.as_bytes().to_vec()),
        }
    }
}

/// How long a message lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeToLive {
    /// The service default: seven days.
    #[default]
    Default,
    /// Until it is deleted (`messagettl=-1`).
    Forever,
    /// This long (at least one second).
    For(Duration),
}

/// Options of Put Message.
#[derive(Debug, Clone, Default)]
pub struct PutOptions {
    pub encoding: MessageEncoding,
    /// How long the message stays invisible after it is put.
    pub visibility_timeout: Duration,
    pub time_to_live: TimeToLive,
    /// Retry the put even when an attempt may have been done (its answer was lost, or the
    /// service answered 408 or 500): the message may then arrive twice. For callers that
    /// deliver at least once anyway, one possible duplicate beats failing a whole batch whose
    /// retry would put every message again.
    pub at_least_once: bool,
}

/// A message as Get Messages returns it: owned by the caller until its visibility ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMessage {
    pub id: String,
    /// Needed to delete or update the message; replaced by every update.
    pub pop_receipt: String,
    /// How many times the message has been handed out, this time included.
    pub dequeue_count: u32,
    pub insertion_time: String,
    pub expiration_time: String,
    pub time_next_visible: String,
    /// The message text as stored (still base64 when it was put that way).
    pub text: String,
}

/// A message as Peek Messages returns it: no receipt, not owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeekedMessage {
    pub id: String,
    pub dequeue_count: u32,
    /// When it was put, as the service wrote it (RFC 1123, e.g. `Sun, 22 Nov 2026 21:00:00 GMT`).
    pub insertion_time: String,
    pub text: String,
}

/// The answer to Put Message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutReceipt {
    pub id: String,
    pub pop_receipt: String,
}

/// A client for the Queue service of one account.
#[derive(Clone)]
pub struct QueueServiceClient {
    pipeline: Arc<Pipeline>,
}

impl QueueServiceClient {
    /// A client for the account's queue endpoint.
    pub fn new(account: &StorageAccount, options: ClientOptions) -> Result<Self, StorageError> {
        let endpoint = account.queue_endpoint().cloned().ok_or_else(|| {
            StorageError::invalid_request(
                "create client",
                "storage account",
                "the connection string has no queue endpoint",
            )
        })?;
        Ok(QueueServiceClient {
            pipeline: Arc::new(Pipeline::new(account, endpoint, Service::Queue, options)?),
        })
    }

    /// The service's base URL (which account, for telling two clients' storage apart).
    pub fn endpoint(&self) -> &str {
        self.pipeline.endpoint().as_str()
    }

    /// A client for one queue; the name is checked here, the queue is not contacted.
    pub fn queue(&self, name: &str) -> Result<QueueClient, StorageError> {
        validate_queue_name(name).map_err(|e| {
            StorageError::invalid_request("open queue", describe("queue", name), e.to_string())
        })?;
        Ok(QueueClient {
            pipeline: self.pipeline.clone(),
            name: name.to_string(),
        })
    }
}

/// A client for one queue.
#[derive(Clone)]
pub struct QueueClient {
    pipeline: Arc<Pipeline>,
    name: String,
}

impl QueueClient {
    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn resource(&self) -> String {
        describe("queue", &self.name)
    }

    /// The back-off of this queue, shared by the clients given the same
    /// [`crate::pacing::Governors`].
    pub fn governor(&self) -> Arc<crate::pacing::Governor> {
        self.pipeline.governor(&self.name)
    }

    fn request(&self, operation: &'static str, method: Method, path: String) -> Request {
        Request::new(operation, self.resource(), method, path)
    }

    /// Creates the queue; returns `false` when it already existed.
    pub async fn create(&self) -> Result<bool, StorageError> {
        let response = self
            .pipeline
            .send(self.request("create queue", Method::PUT, self.name.clone()))
            .await?;
        Ok(response.status == 201)
    }

    /// Deletes the queue and its messages.
    pub async fn delete(&self) -> Result<(), StorageError> {
        let request = self.request("delete queue", Method::DELETE, self.name.clone());
        self.pipeline.send(request).await.map(drop)
    }

    /// Deletes every message.
    pub async fn clear(&self) -> Result<(), StorageError> {
        let request = self.request(
            "clear messages",
            Method::DELETE,
            format!("{}/messages", self.name),
        );
        self.pipeline.send(request).await.map(drop)
    }

    /// The service's approximate message count.
    pub async fn approximate_count(&self) -> Result<u64, StorageError> {
        const OP: &str = "get queue metadata";
        let request = self
            .request(OP, Method::GET, self.name.clone())
            .query("comp", "metadata");
        let response = self.pipeline.send(request).await?;
        response
            .header("x-ms-approximate-messages-count")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                StorageError::invalid_response(
                    OP,
                    self.resource(),
                    "no message count in the answer",
                )
            })
    }

    /// Puts a message. Payloads whose text would exceed 64 KiB are refused before sending.
    pub async fn put_message(
        &self,
        payload: &[u8],
        options: &PutOptions,
    ) -> Result<PutReceipt, StorageError> {
        const OP: &str = "put message";
        let refuse = |why: String| StorageError::invalid_request(OP, self.resource(), why);
        let text = options.encoding.encode(payload).map_err(refuse)?;
        check_xml_text(&text).map_err(refuse)?;
        check_text_size(&text, options.encoding).map_err(refuse)?;
        check_duration("visibility timeout", options.visibility_timeout, false).map_err(refuse)?;
        let mut request = self
            .request(OP, Method::POST, format!("{}/messages", self.name))
            .query(
                "visibilitytimeout",
                options.visibility_timeout.as_secs().to_string(),
            );
        match options.time_to_live {
            TimeToLive::Default => {}
            TimeToLive::Forever => request = request.query("messagettl", "-1"),
            TimeToLive::For(ttl) => {
                if ttl.as_secs() < 1 {
                    return Err(refuse("a time to live must be at least one second".into()));
                }
                if ttl <= options.visibility_timeout {
                    return Err(refuse(
                        "the visibility timeout must be shorter than the time to live".into(),
                    ));
                }
                request = request.query("messagettl", ttl.as_secs().to_string());
            }
        }
        let body = xml::message_body(&text).map_err(refuse)?;
        // One message against the queue's target (about 2,000 a second): a put sent again
        // after a refusal waits for the queue's back-off, and slow answers hold it (see
        // `Pipeline::send`).
        let request = request
            .body("application/xml", body.into_bytes())
            .idempotent(options.at_least_once)
            .entities(1);
        let response = self.pipeline.send(request).await?;
        let messages = xml::parse_message_list(&response.body)
            .map_err(|why| StorageError::invalid_response(OP, self.resource(), why))?;
        let message = messages.first().ok_or_else(|| {
            StorageError::invalid_response(OP, self.resource(), "no message in the answer")
        })?;
        Ok(PutReceipt {
            id: message.message_id.clone(),
            pop_receipt: message.pop_receipt.clone(),
        })
    }

    /// Takes up to `count` (1 to 32) visible messages and hides them for `visibility`.
    pub async fn receive(
        &self,
        count: u8,
        visibility: Duration,
    ) -> Result<Vec<ReceivedMessage>, StorageError> {
        const OP: &str = "get messages";
        let refuse = |why: String| StorageError::invalid_request(OP, self.resource(), why);
        if !(1..=MAX_MESSAGES_PER_RECEIVE).contains(&count) {
            return Err(refuse(format!("between 1 and {MAX_MESSAGES_PER_RECEIVE} messages can be taken at once, not {count}")));
        }
        check_duration("visibility timeout", visibility, true).map_err(refuse)?;
        let request = self
            .request(OP, Method::GET, format!("{}/messages", self.name))
            .query("numofmessages", count.to_string())
            .query("visibilitytimeout", visibility.as_secs().to_string());
        let response = self.pipeline.send(request).await?;
        let messages = xml::parse_message_list(&response.body)
            .map_err(|why| StorageError::invalid_response(OP, self.resource(), why))?;
        Ok(messages
            .into_iter()
            .map(|m| ReceivedMessage {
                id: m.message_id,
                pop_receipt: m.pop_receipt,
                dequeue_count: m.dequeue_count,
                insertion_time: m.insertion_time,
                expiration_time: m.expiration_time,
                time_next_visible: m.time_next_visible,
                text: m.message_text,
            })
            .collect())
    }

    /// When the oldest visible message was put (ms since the epoch); `None` when no message is
    /// visible. Queues are close to first in, first out, so a message put before this time is
    /// probably gone (taken, or lost), not waiting.
    pub async fn oldest_visible_ms(&self) -> Result<Option<u64>, StorageError> {
        let Some(oldest) = self.peek(1).await?.into_iter().next() else {
            return Ok(None);
        };
        let put = time::OffsetDateTime::parse(
            &oldest.insertion_time,
            &time::format_description::well_known::Rfc2822,
        )
        .map_err(|e| {
            StorageError::invalid_response(
                "peek messages",
                self.resource(),
                format!("InsertionTime '{}': {e}", oldest.insertion_time),
            )
        })?;
        Ok(Some((put.unix_timestamp_nanos() / 1_000_000).max(0) as u64))
    }

    /// Looks at up to `count` visible messages without taking them.
    pub async fn peek(&self, count: u8) -> Result<Vec<PeekedMessage>, StorageError> {
        const OP: &str = "peek messages";
        if !(1..=MAX_MESSAGES_PER_RECEIVE).contains(&count) {
            return Err(StorageError::invalid_request(
                OP,
                self.resource(),
                format!("between 1 and {MAX_MESSAGES_PER_RECEIVE} messages can be peeked at once, not {count}"),
            ));
        }
        let request = self
            .request(OP, Method::GET, format!("{}/messages", self.name))
            .query("peekonly", "true")
            .query("numofmessages", count.to_string());
        let response = self.pipeline.send(request).await?;
        let messages = xml::parse_message_list(&response.body)
            .map_err(|why| StorageError::invalid_response(OP, self.resource(), why))?;
        Ok(messages
            .into_iter()
            .map(|m| PeekedMessage {
                id: m.message_id,
                dequeue_count: m.dequeue_count,
                insertion_time: m.insertion_time,
                text: m.message_text,
            })
            .collect())
    }

    /// Deletes a received message.
    pub async fn delete_message(&self, id: &str, pop_receipt: &str) -> Result<(), StorageError> {
        let request = self
            .request(
                "delete message",
                Method::DELETE,
                format!("{}/messages/{}", self.name, encode_component(id)),
            )
            .query("popreceipt", pop_receipt);
        self.pipeline.send(request).await.map(drop)
    }

    /// Changes how long a received message stays hidden, and optionally its text; returns the
    /// new pop receipt (the old one stops working).
    pub async fn update_message(
        &self,
        id: &str,
        pop_receipt: &str,
        visibility: Duration,
        new_text: Option<&str>,
    ) -> Result<String, StorageError> {
        const OP: &str = "update message";
        let refuse = |why: String| StorageError::invalid_request(OP, self.resource(), why);
        check_duration("visibility timeout", visibility, false).map_err(refuse)?;
        let mut request = self
            .request(
                OP,
                Method::PUT,
                format!("{}/messages/{}", self.name, encode_component(id)),
            )
            .query("popreceipt", pop_receipt)
            .query("visibilitytimeout", visibility.as_secs().to_string())
            // A retry after a lost answer would carry a receipt the first attempt replaced.
            .idempotent(false);
        if let Some(text) = new_text {
            check_xml_text(text).map_err(refuse)?;
            check_text_size(text, MessageEncoding::Text).map_err(refuse)?;
            let body = xml::message_body(text).map_err(refuse)?;
            request = request.body("application/xml", body.into_bytes());
        }
        let response = self.pipeline.send(request).await?;
        response
            .header("x-ms-popreceipt")
            .map(str::to_string)
            .ok_or_else(|| {
                StorageError::invalid_response(OP, self.resource(), "no pop receipt in the answer")
            })
    }
}

/// Whether a character can travel in XML 1.0 text (a message put as text travels in XML).
pub fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && c != '\u{FFFE}' && c != '\u{FFFF}')
}

/// Text messages must be XML-safe: otherwise the service cannot hand them back (the emulator
/// stores such a message, then returns no messages at all from that queue).
fn check_xml_text(text: &str) -> Result<(), String> {
    match text.chars().find(|c| !is_xml_char(*c)) {
        None => Ok(()),
        Some(c) => Err(format!(
            "the message text contains U+{:04X}, which XML (and so the Queue service) cannot carry; put it base64-encoded",
            c as u32
        )),
    }
}

fn check_text_size(text: &str, encoding: MessageEncoding) -> Result<(), String> {
    if text.len() <= MAX_MESSAGE_TEXT_BYTES {
        return Ok(());
    }
    let hint = match encoding {
        MessageEncoding::Base64 => format!(
            " (payloads of at most {MAX_BASE64_PAYLOAD_BYTES} bytes fit once base64-encoded)"
        ),
        MessageEncoding::Text => String::new(),
    };
    Err(format!(
        "the message text is {} bytes; the service accepts at most {MAX_MESSAGE_TEXT_BYTES}{hint}",
        text.len()
    ))
}

fn check_duration(what: &str, value: Duration, at_least_one_second: bool) -> Result<(), String> {
    if value > MAX_VISIBILITY {
        return Err(format!("the {what} may be at most seven days"));
    }
    if at_least_one_second && value.as_secs() < 1 {
        return Err(format!("the {what} must be at least one second"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_limit_is_48_kib_of_payload() {
        let fits = MessageEncoding::Base64
            .encode(&vec![7u8; MAX_BASE64_PAYLOAD_BYTES])
            .unwrap();
        assert!(check_text_size(&fits, MessageEncoding::Base64).is_ok());
        let too_big = MessageEncoding::Base64
            .encode(&vec![7u8; MAX_BASE64_PAYLOAD_BYTES + 1])
            .unwrap();
        let err = check_text_size(&too_big, MessageEncoding::Base64).unwrap_err();
        assert!(err.contains("49152"), "{err}");
    }

    #[test]
    fn encodings_round_trip_and_reject_bad_input() {
        for encoding in [MessageEncoding::Base64, MessageEncoding::Text] {
            let text = encoding.encode("héllo <x>".as_bytes()).unwrap();
            assert_eq!(encoding.decode(&text).unwrap(), "héllo <x>".as_bytes());
        }
        assert!(MessageEncoding::Text.encode(&[0xff, 0xfe]).is_err());
        assert!(MessageEncoding::Base64.decode("not base64!").is_err());
    }

    #[test]
    fn text_messages_must_be_xml_safe() {
        assert!(check_xml_text("tab\tnew\nline é 😀 \u{E000}").is_ok());
        for bad in ["a\u{FFFF}b", "\u{FFFE}", "\u{0}", "\u{1}", "\u{1F}"] {
            let err = check_xml_text(bad).unwrap_err();
            assert!(err.contains("base64"), "{err}");
        }
    }

    #[test]
    fn durations_are_bounded() {
        assert!(check_duration("v", Duration::from_secs(7 * 24 * 3600), true).is_ok());
        assert!(check_duration("v", Duration::from_secs(7 * 24 * 3600 + 1), true).is_err());
        assert!(check_duration("v", Duration::ZERO, true).is_err());
        assert!(check_duration("v", Duration::ZERO, false).is_ok());
    }
}
