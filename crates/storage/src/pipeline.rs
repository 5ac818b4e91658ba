//! Sends one storage request: builds the URL, signs every attempt, retries transient failures,
//! and turns failures into [`StorageError`]s that carry no URL and no secret.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName};
use reqwest::{Method, Url};

use super::authorize::{authorize, header_value, Authority, Service, TableAuthScheme};
use super::connection_string::{Endpoint, StorageAccount};
use super::credential::Credential;
use super::encoding::encode_component;
use super::error::{ErrorKind, ServiceError, StorageError};
use super::pacing::{Governor, Governors};
use super::retry::{
    parse_retry_after, should_retry, AttemptOutcome, RandomSource, RetryPolicy, SystemRandomSource,
};
use super::signing;
use super::token::AccessToken;

/// The service version we speak: the one the official Table SDKs send, and new enough for
/// queue messages that never expire (`messagettl=-1`).
pub const SERVICE_VERSION: &str = "2019-02-02";

/// Knobs of a storage client.
#[derive(Clone)]
pub struct ClientOptions {
    /// How transient failures are retried.
    pub retry: RetryPolicy,
    /// The longest one attempt may take, connection and full body included.
    pub attempt_timeout: Duration,
    /// How long an idle pooled connection is kept. It must be shorter than the server's
    /// keep-alive (Azurite closes idle sockets after 5 s by default), or a request can be
    /// written onto a socket the server already closed.
    pub pool_idle_timeout: Duration,
    /// The signature scheme for Table requests.
    pub table_auth: TableAuthScheme,
    /// The random source for backoff jitter.
    pub random: Arc<dyn RandomSource>,
    /// The back-off of each storage target, shared by every client given the same registry
    /// (see [`Governors`]). The default is a registry of the client's own: a process that
    /// builds several clients of one account (the handler) gives them all one.
    pub governors: Governors,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            retry: RetryPolicy::default(),
            attempt_timeout: Duration::from_secs(30),
            pool_idle_timeout: Duration::from_secs(4),
            table_auth: TableAuthScheme::default(),
            random: Arc::new(SystemRandomSource::default()),
            governors: Governors::default(),
        }
    }
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("retry", &self.retry)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("pool_idle_timeout", &self.pool_idle_timeout)
            .field("table_auth", &self.table_auth)
            .field("governors", &self.governors)
            .finish_non_exhaustive()
    }
}

/// One request, described before it is signed.
pub(crate) struct Request {
    pub operation: &'static str,
    pub resource: String,
    pub method: Method,
    /// Path below the endpoint, already percent-encoded.
    pub path: String,
    /// Query parameters with raw (not yet encoded) values.
    pub query: Vec<(&'static str, String)>,
    pub headers: Vec<(HeaderName, String)>,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    /// Whether repeating the request after it may have been applied is harmless.
    pub idempotent: bool,
    /// Entities the request touches, as the service counts them (a query's page size, a
    /// transaction's operations); 0 for bookkeeping that is not paced. A retry after a "too
    /// busy" answer waits for this much of its target's back-off (see [`super::pacing`]), so
    /// that retries do not press on a busy account at full speed.
    pub entities: u64,
}

impl Request {
    pub fn new(operation: &'static str, resource: String, method: Method, path: String) -> Self {
        let idempotent = !matches!(method.as_str(), "POST");
        Request {
            operation,
            resource,
            method,
            path,
            query: Vec::new(),
            headers: Vec::new(),
            content_type: None,
            body: Vec::new(),
            idempotent,
            entities: 0,
        }
    }

    /// Sets the entities the request touches (see [`Request::entities`]).
    pub fn entities(mut self, entities: u64) -> Self {
        self.entities = entities;
        self
    }

    pub fn query(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.query.push((name, value.into()));
        self
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers
            .push((HeaderName::from_static(name), value.into()));
        self
    }

    pub fn body(mut self, content_type: impl Into<String>, body: Vec<u8>) -> Self {
        self.content_type = Some(content_type.into());
        self.body = body;
        self
    }

    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }
}

/// A successful answer, fully read.
pub(crate) struct Response {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// The shared machinery of one service client.
pub(crate) struct Pipeline {
    http: reqwest::Client,
    credential: Credential,
    endpoint: Endpoint,
    /// The endpoint's path without its trailing slash (`/devstoreaccount1`, or empty): every
    /// request's URL path is this, a slash, and the request's path.
    base_path: String,
    service: Service,
    options: ClientOptions,
}

impl Pipeline {
    pub fn new(
        account: &StorageAccount,
        endpoint: Endpoint,
        service: Service,
        options: ClientOptions,
    ) -> Result<Self, StorageError> {
        let mut builder = reqwest::Client::builder();
        for root in account.trusted_roots().certificates() {
            builder = builder.add_root_certificate(root.clone());
        }
        let http = builder
            .pool_idle_timeout(options.pool_idle_timeout)
            .timeout(options.attempt_timeout)
            .connect_timeout(options.attempt_timeout.min(Duration::from_secs(10)))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| {
                StorageError::invalid_request(
                    "create client",
                    "storage account",
                    transport_message(&e),
                )
            })?;
        let base_path = Url::parse(endpoint.as_str())
            .map(|url| url.path().trim_end_matches('/').to_string())
            .unwrap_or_default();
        Ok(Pipeline {
            http,
            credential: account.credential().clone(),
            endpoint,
            base_path,
            service,
            options,
        })
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// What a refusal as too busy is held against (see [`super::pacing`]): the account's table
    /// service as a whole (its entity target is per account), or one queue (its message target
    /// is per queue).
    pub fn pacing_target(&self, path: &str) -> String {
        match self.service {
            Service::Table => format!("table {}", self.endpoint.as_str()),
            // Blob targets are per account (and per blob, which one step writes once).
            Service::Blob => format!("blob {}", self.endpoint.as_str()),
            Service::Queue => {
                let queue = path.trim_start_matches('/').split('/').next().unwrap_or("");
                format!("queue {}/{queue}", self.endpoint.as_str())
            }
        }
    }

    /// The governor of the target a request to `path` is held against, from this client's
    /// registry ([`ClientOptions::governors`]).
    pub fn governor(&self, path: &str) -> Arc<Governor> {
        self.options.governors.of(&self.pacing_target(path))
    }

    /// Sends the request, retrying as the policy allows; any non-2xx answer is an error.
    pub async fn send(&self, request: Request) -> Result<Response, StorageError> {
        let url = self.url(&request)?;
        let mut retry = 0;
        let retry_ends = tokio::time::Instant::now() + self.options.retry.max_elapsed;
        let mut token_refused_once = false;
        loop {
            let token = self.token(&request).await?;
            let prepared = self.prepared(&request, &url, token.as_ref())?;
            let sent_at = tokio::time::Instant::now();
            let (outcome, error, retry_after) = match self.attempt(prepared).await {
                Ok(response) if (200..300).contains(&response.status) => {
                    // Latency is a sign of a busy target before it refuses (see `Governor`).
                    if request.entities > 0 {
                        self.governor(&request.path)
                            .answered_in(sent_at.elapsed(), request.entities);
                    }
                    return Ok(response);
                }
                Ok(response) => {
                    let retry_after = response.header("retry-after").and_then(parse_retry_after);
                    let error = service_error(&response);
                    // A refused token is dropped and a fresh one tried once (it may have been
                    // revoked, or issued by a clock that runs ahead); a second refusal stands.
                    if self.token_refused(&request, token.as_ref(), &error) && !token_refused_once {
                        token_refused_once = true;
                        continue;
                    }
                    if error.reason() == super::reason::Reason::Throttled {
                        super::throttled::note_throttled();
                        self.governor(&request.path).throttled();
                    }
                    (
                        AttemptOutcome::Status(error.status),
                        ErrorKind::Service(error),
                        retry_after,
                    )
                }
                Err((outcome, message)) => (
                    outcome,
                    ErrorKind::Transport {
                        message,
                        maybe_sent: outcome == AttemptOutcome::MaybeSent,
                    },
                    None,
                ),
            };
            let Some(delay) = self.next_retry(&request, retry, outcome, retry_after, retry_ends)
            else {
                return Err(StorageError::new(
                    request.operation,
                    request.resource.clone(),
                    error,
                ));
            };
            retry += 1;
            tracing::debug!(
                operation = request.operation,
                resource = %request.resource,
                retry,
                delay_ms = delay.as_millis() as u64,
                failure = ?outcome,
                "retrying storage request"
            );
            tokio::time::sleep(delay).await;
            if request.entities > 0 && matches!(outcome, AttemptOutcome::Status(503 | 500)) {
                self.governor(&request.path).take(request.entities).await;
            }
        }
    }

    /// Whether `error` refused the bearer `token` sent with `request`; the token is forgotten
    /// then, so that the next attempt fetches a fresh one.
    fn token_refused(
        &self,
        request: &Request,
        token: Option<&AccessToken>,
        error: &ServiceError,
    ) -> bool {
        let (Some(token), Credential::Bearer(credential)) = (token, &self.credential) else {
            return false;
        };
        if error.reason() != super::reason::Reason::Unauthenticated {
            return false;
        }
        tracing::warn!(
            operation = request.operation,
            resource = %request.resource,
            "the service refused a token ({error}); fetching a new one"
        );
        credential.forget(token);
        true
    }

    /// How long to wait before retrying `request` after its attempt number `retry` failed with
    /// `outcome`; `None` when it is not retried: out of retries, a failure that is not safe to
    /// repeat, or a wait that would end past the policy's time limit (`retry_ends`) or the
    /// caller's deadline.
    fn next_retry(
        &self,
        request: &Request,
        retry: u32,
        outcome: AttemptOutcome,
        retry_after: Option<Duration>,
        retry_ends: tokio::time::Instant,
    ) -> Option<Duration> {
        let delay =
            self.options
                .retry
                .delay(retry + 1, self.options.random.next_unit(), retry_after);
        let give_up_at = super::deadline::current().map_or(retry_ends, |d| d.min(retry_ends));
        let retried = retry < self.options.retry.max_retries
            && should_retry(outcome, request.idempotent)
            && tokio::time::Instant::now() + delay <= give_up_at;
        retried.then_some(delay)
    }

    fn url(&self, request: &Request) -> Result<Url, StorageError> {
        let mut text = self.endpoint.join(&request.path);
        let mut separator = '?';
        for (name, value) in &request.query {
            text.push(separator);
            text.push_str(name);
            text.push('=');
            text.push_str(&encode_component(value));
            separator = '&';
        }
        if let Credential::Sas(token) = &self.credential {
            text.push(separator);
            text.push_str(token.query());
        }
        let url = Url::parse(&text).map_err(|_| {
            StorageError::invalid_request(
                request.operation,
                request.resource.clone(),
                "the request URL is not valid",
            )
        })?;
        self.stays_where_built(request, &url)?;
        Ok(url)
    }

    /// Refuses a URL whose path is not the one the request was built with: URL parsing
    /// resolves `.` and `..` segments, so a name holding one (`c/../$web/x`) would address
    /// another container, queue or table than the request names. Every path is made of
    /// percent-encoded names and the service's fixed syntax, which parsing leaves as it is;
    /// anything else it changed is refused too.
    fn stays_where_built(&self, request: &Request, url: &Url) -> Result<(), StorageError> {
        let built = format!("{}/{}", self.base_path, request.path);
        if url.path() == built {
            return Ok(());
        }
        let within = request.path.split('/').next().unwrap_or_default();
        Err(StorageError::new(
            request.operation,
            request.resource.clone(),
            ErrorKind::OutsideResource {
                within: within.to_string(),
            },
        ))
    }

    async fn attempt(
        &self,
        request: reqwest::Request,
    ) -> Result<Response, (AttemptOutcome, String)> {
        let response = self.http.execute(request).await.map_err(classify)?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.bytes().await.map_err(classify)?.to_vec();
        Ok(Response {
            status,
            headers,
            body,
        })
    }

    /// The token for one attempt, for a bearer credential (cached; see [`super::token`]).
    async fn token(&self, request: &Request) -> Result<Option<AccessToken>, StorageError> {
        let Credential::Bearer(credential) = &self.credential else {
            return Ok(None);
        };
        credential.token().await.map(Some).map_err(|error| {
            StorageError::new(
                request.operation,
                request.resource.clone(),
                ErrorKind::NoToken(error),
            )
        })
    }

    /// One attempt's request as it will be sent: built with a fresh date, then authorised from
    /// its own headers (see [`super::authorize`]). A header value that cannot be sent as the
    /// same text is refused here, never dropped.
    fn prepared(
        &self,
        request: &Request,
        url: &Url,
        token: Option<&AccessToken>,
    ) -> Result<reqwest::Request, StorageError> {
        let refused = |why: String| {
            StorageError::invalid_request(request.operation, request.resource.clone(), why)
        };
        let date = signing::rfc1123(time::OffsetDateTime::now_utc());
        let mut headers = HeaderMap::new();
        let mut put = |name: HeaderName, value: &str| match header_value(value) {
            Some(value) => {
                headers.insert(name, value);
                Ok(())
            }
            None => Err(refused(format!(
                "the value of header {name} cannot be sent (a line break or a character \
                 that is not plain ASCII text)"
            ))),
        };
        put(HeaderName::from_static("x-ms-date"), &date)?;
        put(HeaderName::from_static("x-ms-version"), SERVICE_VERSION)?;
        if let Some(content_type) = request.content_type.as_deref() {
            put(reqwest::header::CONTENT_TYPE, content_type)?;
        }
        for (name, value) in &request.headers {
            put(name.clone(), value)?;
        }
        let mut built = self
            .http
            .request(request.method.clone(), url.clone())
            .headers(headers)
            .body(request.body.clone())
            .build()
            .map_err(|e| refused(transport_message(&e)))?;
        let authority = match token {
            Some(token) => Authority::Token(token),
            None => Authority::Credential(&self.credential),
        };
        authorize(&mut built, authority, self.service, self.options.table_auth).map_err(refused)?;
        Ok(built)
    }
}

/// Sorts a transport failure into "nothing was sent" and "it may have been applied".
fn classify(error: reqwest::Error) -> (AttemptOutcome, String) {
    let outcome = if error.is_connect() {
        AttemptOutcome::NotConnected
    } else {
        AttemptOutcome::MaybeSent
    };
    (outcome, transport_message(&error))
}

/// The error's message and causes, with the URL (which may hold a SAS) removed.
fn transport_message(error: &reqwest::Error) -> String {
    let mut parts = Vec::new();
    if error.is_timeout() {
        parts.push("timed out".to_string());
    } else if error.is_connect() {
        parts.push("could not connect".to_string());
    } else {
        parts.push("connection failed".to_string());
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !text.contains("://") && !parts.contains(&text) {
            parts.push(text);
        }
        source = cause.source();
    }
    parts.join(": ")
}

/// Reads the service's error from a failed answer: JSON (`odata.error`) from the Table service,
/// XML (`<Error>`) from the Queue service and from Azurite's authentication layer.
pub(crate) fn service_error(response: &Response) -> ServiceError {
    let (code, message) = parse_error_body(&response.body);
    ServiceError {
        status: response.status,
        code: response
            .header("x-ms-error-code")
            .map(str::to_string)
            .or(code),
        message,
        request_id: response.header("x-ms-request-id").map(str::to_string),
    }
}

/// Extracts (code, first line of message) from a JSON or XML error body. The service's
/// `AuthenticationErrorDetail`, when it gives one, is added to the message: it is what says
/// why a token was refused ("Invalid token audience", "The token is expired").
pub(crate) fn parse_error_body(body: &[u8]) -> (Option<String>, String) {
    let first_line = |text: &str| text.lines().next().unwrap_or("").trim().to_string();
    let with_detail = |message: String, detail: Option<&str>| match detail.map(first_line) {
        Some(detail) if !detail.is_empty() => format!("{message} ({detail})"),
        _ => message,
    };
    if let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) {
        let error = &json["odata.error"];
        let code = error["code"].as_str().map(str::to_string);
        let message = error["message"]["value"]
            .as_str()
            .map(first_line)
            .unwrap_or_default();
        let detail = error["AuthenticationErrorDetail"].as_str();
        return (code, with_detail(message, detail));
    }
    let xml = std::str::from_utf8(body)
        .ok()
        .and_then(|text| quick_xml::de::from_str::<XmlError>(text).ok());
    match xml {
        Some(error) => {
            let message = error.message.as_deref().map(first_line).unwrap_or_default();
            let message = with_detail(message, error.authentication_error_detail.as_deref());
            (error.code, message)
        }
        None => (None, String::new()),
    }
}

/// The `<Error>` body of the Queue service (and of Azurite's authentication, for any service).
#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct XmlError {
    code: Option<String>,
    message: Option<String>,
    authentication_error_detail: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StorageAccount;

    #[test]
    fn json_error_bodies_give_code_and_first_message_line() {
        let body = br#"{"odata.error":{"code":"EntityAlreadyExists","message":{"lang":"en-US","value":"The specified entity already exists.\nRequestId:abc\nTime:2026"}}}"#;
        let (code, message) = parse_error_body(body);
        assert_eq!(code.as_deref(), Some("EntityAlreadyExists"));
        assert_eq!(message, "The specified entity already exists.");
    }

    #[test]
    fn xml_error_bodies_give_code_and_message() {
        let body = b"<?xml version=\"1.0\"?><Error><Code>QueueNotFound</Code><Message>The specified queue does not exist.\nRequestId:x</Message><Unknown>u</Unknown></Error>";
        let (code, message) = parse_error_body(body);
        assert_eq!(code.as_deref(), Some("QueueNotFound"));
        assert_eq!(message, "The specified queue does not exist.");
    }

    #[test]
    fn authentication_details_join_the_message() {
        let xml = b"<Error><Code>AuthenticationFailed</Code><Message>Server failed to authenticate the request.\nRequestId:x</Message><AuthenticationErrorDetail>Invalid token audience.</AuthenticationErrorDetail></Error>";
        assert_eq!(
            parse_error_body(xml).1,
            "Server failed to authenticate the request. (Invalid token audience.)"
        );
        let json = br#"{"odata.error":{"code":"AuthenticationFailed","message":{"lang":"en-US","value":"Server failed.\nRequestId:x"},"AuthenticationErrorDetail":"Lifetime validation failed. The token is expired."}}"#;
        assert_eq!(
            parse_error_body(json).1,
            "Server failed. (Lifetime validation failed. The token is expired.)"
        );
    }

    /// The last guard against a name that leaves its container: a path holding a dot segment,
    /// which URL parsing would resolve, is refused with its own kind before anything is sent,
    /// whatever the endpoint's form.
    #[test]
    fn a_url_whose_parsed_path_leaves_its_container_is_refused() {
        let key = crate::connection_string::EMULATOR_KEY;
        for connection in [
            format!(
                "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={key};\
                 BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"
            ),
            format!("AccountName=acct;AccountKey={key}"),
        ] {
            let account = StorageAccount::from_connection_string(&connection).unwrap();
            let endpoint = account.blob_endpoint().unwrap().clone();
            let pipeline =
                Pipeline::new(&account, endpoint, Service::Blob, ClientOptions::default()).unwrap();
            let request =
                |path: &str| Request::new("put blob", "blob".into(), Method::PUT, path.to_string());
            for path in [
                "backups/../%24web/data/1.ndjson.gz",
                "backups/a/../../azure-webjobs-secrets/x",
                "backups/./x",
                "backups/%2e%2e/%24web/x",
                "backups/.%2E/%24web/x",
            ] {
                let error = pipeline.url(&request(path)).expect_err(path);
                assert_eq!(
                    error.kind(),
                    &ErrorKind::OutsideResource {
                        within: "backups".into()
                    },
                    "{path}"
                );
                assert_eq!(error.reason(), crate::Reason::InvalidRequest, "{path}");
                assert!(!error.is_transient());
            }
            // Encoded names, `%252e` (a literal `%2e` in the name) included, are sent as built.
            for path in [
                "backups/a%2Fb/c",
                "backups/%252e%252e/x",
                "backups/x..y/data",
                "",
                "backups",
            ] {
                let url = pipeline.url(&request(path)).expect(path);
                assert!(url.path().ends_with(path), "{path}: {url}");
            }
        }
    }

    #[test]
    fn empty_error_bodies_are_fine() {
        assert_eq!(parse_error_body(b""), (None, String::new()));
        assert_eq!(parse_error_body(b"<html>oops"), (None, String::new()));
    }
}
