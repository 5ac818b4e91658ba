//! What a start tells its caller when an account a scan would use fails the start's check:
//! which app setting, which endpoint, and what to do, with a status that says whose problem it
//! is. Refused credentials and made-up endpoints are the request's (4xx: the caller named a
//! setting that cannot work); an endpoint that does not answer may come back (503).
//!
//! The checks run through clients that give up within seconds (`AppState::probe_clients`) and
//! within [`CHECK_DEADLINE`] in all: a start waits for them, and "the account did not answer
//! within 8 s" is more use to the caller than a request that hangs for half a minute before the
//! same 503.

use std::time::Duration;

use axum::http::StatusCode;

use tablescan_storage::{ErrorKind, StorageAccount, StorageError};

/// The longest one attempt of a start's check may take, connecting included.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest a check may take, its retries included: a "busy" answer is tried again a few
/// times quickly, an endpoint that does not answer is not waited for beyond this.
pub const CHECK_DEADLINE: Duration = Duration::from_secs(8);

/// How a start's checks retry: a few times, quickly (transient answers are common under load;
/// the caller is waiting).
pub fn check_retries() -> tablescan_storage::retry::RetryPolicy {
    tablescan_storage::retry::RetryPolicy {
        max_retries: 4,
        base_delay: Duration::from_millis(100),
        min_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_secs(1),
        max_elapsed: CHECK_DEADLINE,
    }
}

/// The refusal for a check that took longer than [`CHECK_DEADLINE`].
pub fn timed_out(check: &Check<'_>, what: &str) -> (StatusCode, String) {
    let Check {
        setting, service, ..
    } = *check;
    let endpoint = endpoint_of(check);
    let named = check.account.setting_name(service.setting());
    if check.account.is_derived(service.setting()) {
        return (
            StatusCode::BAD_REQUEST,
            format!(
                "connection {setting:?} gives no {named} and the one made from its account \
                 name, {endpoint}, did not answer within {} s when {what}; set {named}",
                CHECK_DEADLINE.as_secs(),
            ),
        );
    }
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "{endpoint} (the {named} of connection {setting:?}) did not answer within {} s \
             when {what}; check that it is right and reachable",
            CHECK_DEADLINE.as_secs()
        ),
    )
}

fn endpoint_of(check: &Check<'_>) -> String {
    match check.service {
        Service::Table => check.account.table_endpoint(),
        Service::Queue => check.account.queue_endpoint(),
        Service::Blob => check.account.blob_endpoint(),
    }
    .map_or("(none)".to_string(), |e| e.as_str().to_string())
}

/// Which service of an account: the endpoint a check used, or where a guarded place lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    Table,
    Queue,
    Blob,
}

impl Service {
    /// Its name in a connection string.
    fn setting(self) -> &'static str {
        match self {
            Service::Table => "TableEndpoint",
            Service::Queue => "QueueEndpoint",
            Service::Blob => "BlobEndpoint",
        }
    }
}

/// One account check: the app setting behind it, the request field that named it, and the
/// endpoint it used.
pub struct Check<'a> {
    pub setting: &'a str,
    pub field: &'a str,
    pub service: Service,
    pub account: &'a StorageAccount,
}

/// The refusal for a check that failed with `error`, other than a missing table or queue:
/// the status, and a message that names the setting and the endpoint (never a key or token).
pub fn refusal(check: &Check<'_>, what: &str, error: &StorageError) -> (StatusCode, String) {
    let Check {
        setting, service, ..
    } = *check;
    let endpoint = endpoint_of(check);
    let named = check.account.setting_name(service.setting());
    let derived = check.account.is_derived(service.setting());
    match (error.reason(), error.kind()) {
        (reason, _) if reason.is_refused_credentials() => (
            StatusCode::BAD_REQUEST,
            format!(
                "the account of connection {setting:?} refused its credentials when {what} \
                 ({error}); {}",
                check.account.credential().refusal_hint()
            ),
        ),
        (_, ErrorKind::NoToken(why)) => (
            if why.transient {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::BAD_REQUEST
            },
            format!("connection {setting:?} has no token to send when {what}: {why}"),
        ),
        (_, ErrorKind::Transport { message, .. }) if derived => (
            StatusCode::BAD_REQUEST,
            format!(
                "connection {setting:?} gives no {named} and the one made from its account \
                 name, {endpoint}, did not answer when {what} ({message}); set {named}"
            ),
        ),
        (_, ErrorKind::Transport { message, .. }) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{endpoint} (the {named} of connection {setting:?}) did not answer when {what} \
                 ({message}); check that it is right and reachable"
            ),
        ),
        _ => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{what} failed in the account of connection {setting:?}: {error}"),
        ),
    }
}
