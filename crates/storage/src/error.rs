//! The one error type of the storage layer.
//!
//! A [`StorageError`] says which operation failed, on which resource, and why: the service's
//! status, error code and message, or the transport failure, or the check that refused the
//! request before it was sent. It never holds a URL, a header or a connection string, so neither
//! `Display` nor `Debug` can leak an account key or a SAS token.

use std::fmt;

use super::reason::Reason;

/// A failed storage operation.
#[derive(Debug)]
pub struct StorageError {
    operation: &'static str,
    resource: String,
    /// Boxed so that `Result<_, StorageError>` stays small on the success path.
    kind: Box<ErrorKind>,
}

/// Why a storage operation failed.
#[derive(Debug, Clone, PartialEq)]
pub enum ErrorKind {
    /// The service answered with a non-success status.
    Service(ServiceError),
    /// An entity group transaction failed at one operation; nothing of it was applied.
    Batch {
        /// Zero-based index of the operation that failed.
        index: usize,
        /// The failing operation's own status and error.
        error: ServiceError,
    },
    /// The request never got a complete answer (connect, reset, timeout).
    Transport {
        /// What went wrong, without the URL.
        message: String,
        /// Whether the request may have reached the service. Retrying a request that may have
        /// been applied is only safe when it is idempotent.
        maybe_sent: bool,
    },
    /// Refused before sending: the request would break a documented service limit or rule.
    InvalidRequest(String),
    /// Refused before sending: the URL, once parsed, would not address the path the request
    /// was built with (URL parsing removes `.` and `..` segments), so it could reach outside
    /// `within`, the container, queue or table the request names. Names are checked before
    /// this; it is the last guard, in case a name slipped through.
    OutsideResource {
        /// The first segment of the request's path: its container, queue or table.
        within: String,
    },
    /// The service answered something this client cannot read.
    InvalidResponse(String),
    /// No token to send: the identity endpoint refused, or could not be reached (see
    /// [`super::token`]).
    NoToken(super::token::TokenError),
}

/// What the service said about a failed request.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceError {
    /// HTTP status code.
    pub status: u16,
    /// The service's error code, such as `EntityAlreadyExists`, when it gave one.
    pub code: Option<String>,
    /// The first line of the service's message (request id and time lines dropped).
    pub message: String,
    /// The `x-ms-request-id` of the failed request, for support cases.
    pub request_id: Option<String>,
}

impl StorageError {
    /// An error of any kind (also for readers outside this crate that model storage, such as
    /// the scan engine's in-memory tables).
    pub fn new(operation: &'static str, resource: impl Into<String>, kind: ErrorKind) -> Self {
        StorageError {
            operation,
            resource: resource.into(),
            kind: Box::new(kind),
        }
    }

    /// An error the service answered (for readers and tests outside this crate that model it).
    pub fn from_service(
        operation: &'static str,
        resource: impl Into<String>,
        error: ServiceError,
    ) -> Self {
        Self::new(operation, resource, ErrorKind::Service(error))
    }

    pub(crate) fn invalid_request(
        operation: &'static str,
        resource: impl Into<String>,
        why: impl Into<String>,
    ) -> Self {
        Self::new(operation, resource, ErrorKind::InvalidRequest(why.into()))
    }

    pub(crate) fn invalid_response(
        operation: &'static str,
        resource: impl Into<String>,
        why: impl Into<String>,
    ) -> Self {
        Self::new(operation, resource, ErrorKind::InvalidResponse(why.into()))
    }

    /// The operation that failed, such as `query entities`.
    pub fn operation(&self) -> &'static str {
        self.operation
    }

    /// The resource it was applied to, such as `table 'orders'`.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// Why it failed.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The HTTP status, when the service answered.
    pub fn status(&self) -> Option<u16> {
        match &*self.kind {
            ErrorKind::Service(e) | ErrorKind::Batch { error: e, .. } => Some(e.status),
            _ => None,
        }
    }

    /// The service's error code, when it gave one.
    pub fn code(&self) -> Option<&str> {
        match &*self.kind {
            ErrorKind::Service(e) | ErrorKind::Batch { error: e, .. } => e.code.as_deref(),
            _ => None,
        }
    }

    /// Whether trying again later may succeed: throttling, server faults and transport failures.
    pub fn is_transient(&self) -> bool {
        match &*self.kind {
            ErrorKind::Service(e) => is_transient_status(e.status),
            ErrorKind::Transport { .. } => true,
            ErrorKind::NoToken(e) => e.transient,
            ErrorKind::Batch { .. }
            | ErrorKind::InvalidRequest(_)
            | ErrorKind::OutsideResource { .. }
            | ErrorKind::InvalidResponse(_) => false,
        }
    }

    /// What the failure means to the caller (see [`Reason`]).
    pub fn reason(&self) -> Reason {
        match &*self.kind {
            ErrorKind::Service(e) | ErrorKind::Batch { error: e, .. } => e.reason(),
            ErrorKind::Transport { .. } => Reason::Unreachable,
            ErrorKind::InvalidRequest(_) | ErrorKind::OutsideResource { .. } => {
                Reason::InvalidRequest
            }
            ErrorKind::InvalidResponse(_) => Reason::InvalidResponse,
            ErrorKind::NoToken(e) if e.transient => Reason::Unreachable,
            ErrorKind::NoToken(_) => Reason::Unauthenticated,
        }
    }

    /// Whether what the request names is not there (table, queue, entity or message).
    pub fn is_not_found(&self) -> bool {
        matches!(self.reason(), Reason::NotFound(_))
    }
}

/// Statuses worth retrying: 408, 429, 500, 502, 503, 504 and the unassigned 5xx above 505.
/// 501 (not implemented) and 505 (HTTP version) are permanent.
pub(crate) fn is_transient_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 500 | 502 | 503 | 504) || (506..600).contains(&status)
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {} failed: ", self.operation, self.resource)?;
        match &*self.kind {
            ErrorKind::Service(e) => write!(f, "{e}"),
            ErrorKind::Batch { index, error } => {
                write!(
                    f,
                    "operation {index} of the transaction was refused: {error}"
                )
            }
            ErrorKind::Transport { message, .. } => {
                write!(f, "no answer from the service: {message}")
            }
            ErrorKind::InvalidRequest(why) => write!(f, "refused before sending: {why}"),
            ErrorKind::OutsideResource { within } => write!(
                f,
                "refused before sending: its URL would not stay within '{}' (URL parsing \
                 removes '.' and '..' segments)",
                shorten(within)
            ),
            ErrorKind::InvalidResponse(why) => write!(f, "unreadable answer: {why}"),
            ErrorKind::NoToken(why) => write!(f, "no token to send: {why}"),
        }?;
        if self.is_transient() {
            write!(f, " (transient)")?;
        }
        Ok(())
    }
}

impl ServiceError {
    /// What the failure means to the caller (see [`Reason`]).
    pub fn reason(&self) -> Reason {
        Reason::of_answer(self.status, self.code.as_deref())
    }
}

impl fmt::Display for ServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "status {}", self.status)?;
        if let Some(code) = &self.code {
            write!(f, " {code}")?;
        }
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        if let Some(id) = &self.request_id {
            write!(f, " (request id {id})")?;
        }
        Ok(())
    }
}

impl std::error::Error for StorageError {}

/// Names a resource for error messages, shortening very long names (keys can be 1 KiB).
pub(crate) fn describe(kind: &str, name: &str) -> String {
    format!("{kind} '{}'", shorten(name))
}

/// Names one entity for error messages.
pub(crate) fn describe_entity(table: &str, partition_key: &str, row_key: &str) -> String {
    format!(
        "entity ('{}', '{}') of {}",
        shorten(partition_key),
        shorten(row_key),
        describe("table", table)
    )
}

fn shorten(name: &str) -> String {
    const MAX_CHARS: usize = 80;
    if name.chars().count() <= MAX_CHARS {
        name.to_string()
    } else {
        let head: String = name.chars().take(MAX_CHARS).collect();
        format!("{head}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_statuses_follow_the_storage_retry_guidance() {
        for s in [408, 429, 500, 502, 503, 504, 507, 599] {
            assert!(is_transient_status(s), "{s}");
        }
        for s in [400, 401, 403, 404, 409, 412, 413, 501, 505] {
            assert!(!is_transient_status(s), "{s}");
        }
    }

    #[test]
    fn display_names_operation_resource_code_and_transience() {
        let e = StorageError::new(
            "insert entity",
            describe_entity("orders", "p", "r"),
            ErrorKind::Service(ServiceError {
                status: 503,
                code: Some("ServerBusy".into()),
                message: "The server is busy.".into(),
                request_id: None,
            }),
        );
        assert_eq!(
            e.to_string(),
            "insert entity on entity ('p', 'r') of table 'orders' failed: \
             status 503 ServerBusy: The server is busy. (transient)"
        );
    }

    #[test]
    fn long_names_are_shortened() {
        let long = "k".repeat(500);
        let text = describe("key", &long);
        assert!(text.len() < 100, "{text}");
        assert!(text.ends_with("…'"));
    }
}
