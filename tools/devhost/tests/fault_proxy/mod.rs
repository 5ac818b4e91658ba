//! A fault-injecting HTTP proxy between the handler and Azurite. Each request is, at a seeded
//! random rate, answered with a fault instead of (or on top of) Azurite's answer:
//!
//! - 503 ServerBusy, 500 InternalError, 408 OperationTimedOut, without reaching Azurite;
//! - a slow answer (0.2 to 1.2 s before forwarding);
//! - a connection reset in the middle of the answer, after Azurite has done the request (the
//!   client sees an error for something that happened);
//! - for table queries: a short page (the `$top` cut to a third) or, when the query resumes
//!   from a continuation, an empty page that hands the same continuation back.
//!
//! Shared Key signatures cover the path and query, not the host, so Azurite accepts the
//! forwarded requests as they are.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode};

/// What was injected, by kind.
#[derive(Default, Debug)]
pub struct Injected {
    pub forwarded: AtomicU64,
    pub busy: AtomicU64,
    pub internal: AtomicU64,
    pub timeout: AtomicU64,
    pub slow: AtomicU64,
    pub reset: AtomicU64,
    pub short_page: AtomicU64,
    pub empty_page: AtomicU64,
}

impl Injected {
    pub fn total(&self) -> u64 {
        [
            &self.busy,
            &self.internal,
            &self.timeout,
            &self.slow,
            &self.reset,
            &self.short_page,
            &self.empty_page,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }

    pub fn summary(&self) -> String {
        format!(
            "forwarded {}, 503 {}, 500 {}, 408 {}, slow {}, reset {}, short page {}, empty page {}",
            self.forwarded.load(Ordering::Relaxed),
            self.busy.load(Ordering::Relaxed),
            self.internal.load(Ordering::Relaxed),
            self.timeout.load(Ordering::Relaxed),
            self.slow.load(Ordering::Relaxed),
            self.reset.load(Ordering::Relaxed),
            self.short_page.load(Ordering::Relaxed),
            self.empty_page.load(Ordering::Relaxed),
        )
    }
}

struct Shared {
    upstream: String,
    rate: f64,
    random: Mutex<u64>,
    client: reqwest::Client,
    injected: Arc<Injected>,
}

/// A running proxy; stops when dropped.
pub struct FaultProxy {
    /// The endpoint to use instead of the upstream one (same account path).
    pub endpoint: String,
    pub injected: Arc<Injected>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    /// Proxies `endpoint` (`http://host:port/account`), injecting a fault into `rate` of the
    /// requests.
    pub async fn start(endpoint: &str, rate: f64, seed: u64) -> FaultProxy {
        let (origin, account) = split_endpoint(endpoint);
        let injected = Arc::new(Injected::default());
        let shared = Arc::new(Shared {
            upstream: origin,
            rate,
            random: Mutex::new(seed | 1),
            client: reqwest::Client::new(),
            injected: injected.clone(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let app = axum::Router::new().fallback(forward).with_state(shared);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FaultProxy {
            endpoint: format!("http://127.0.0.1:{port}{account}"),
            injected,
            task,
        }
    }
}

fn split_endpoint(endpoint: &str) -> (String, String) {
    let after_scheme = endpoint.find("://").map_or(0, |i| i + 3);
    match endpoint[after_scheme..].find('/') {
        Some(i) => (
            endpoint[..after_scheme + i].to_string(),
            endpoint[after_scheme + i..]
                .trim_end_matches('/')
                .to_string(),
        ),
        None => (endpoint.to_string(), String::new()),
    }
}

#[derive(Clone, Copy)]
enum Fault {
    Busy,
    Internal,
    Timeout,
    Slow,
    Reset,
    ShortPage,
    EmptyPage,
}

impl Shared {
    /// A number in [0, 1).
    fn draw(&self) -> f64 {
        let mut state = self.random.lock().unwrap();
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        (*state % 1_000_000) as f64 / 1_000_000.0
    }

    fn choose(&self, is_query: bool, resumes: bool) -> Option<Fault> {
        if self.draw() >= self.rate {
            return None;
        }
        let mut kinds = vec![
            Fault::Busy,
            Fault::Internal,
            Fault::Timeout,
            Fault::Slow,
            Fault::Reset,
        ];
        if is_query {
            kinds.push(Fault::ShortPage);
            if resumes {
                kinds.push(Fault::EmptyPage);
            }
        }
        Some(kinds[(self.draw() * kinds.len() as f64) as usize % kinds.len()])
    }
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 64 * 1024 * 1024)
        .await
        .unwrap_or_default();
    let mut path_and_query = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let query = parts.uri.query().unwrap_or("");
    // A table query: GET on a table with a filter or a continuation (not a single entity).
    let is_query = parts.method == axum::http::Method::GET
        && (query.contains("$top=") || query.contains("%24top="));
    let resumes = query.contains("NextPartitionKey");
    let fault = shared.choose(is_query, resumes);
    let injected = &shared.injected;
    match fault {
        Some(Fault::Busy) => {
            injected.busy.fetch_add(1, Ordering::Relaxed);
            return error(503, "ServerBusy");
        }
        Some(Fault::Internal) => {
            injected.internal.fetch_add(1, Ordering::Relaxed);
            return error(500, "InternalError");
        }
        Some(Fault::Timeout) => {
            injected.timeout.fetch_add(1, Ordering::Relaxed);
            return error(408, "OperationTimedOut");
        }
        Some(Fault::EmptyPage) => {
            injected.empty_page.fetch_add(1, Ordering::Relaxed);
            return empty_page(query);
        }
        Some(Fault::Slow) => {
            injected.slow.fetch_add(1, Ordering::Relaxed);
            let ms = 200 + (shared.draw() * 1000.0) as u64;
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        Some(Fault::ShortPage) => {
            injected.short_page.fetch_add(1, Ordering::Relaxed);
            path_and_query = shorten_top(&path_and_query);
        }
        Some(Fault::Reset) | None => {}
    }
    let mut upstream = shared.client.request(
        parts.method.clone(),
        format!("{}{}", shared.upstream, path_and_query),
    );
    for (name, value) in parts.headers.iter() {
        if !matches!(name.as_str(), "host" | "content-length" | "connection") {
            upstream = upstream.header(name, value);
        }
    }
    let answer = match upstream.body(body).send().await {
        Ok(answer) => answer,
        Err(_) => return error(502, "ProxyUpstreamFailed"),
    };
    injected.forwarded.fetch_add(1, Ordering::Relaxed);
    let status = answer.status();
    let headers = answer.headers().clone();
    let bytes = answer.bytes().await.unwrap_or_default();
    let mut response = if matches!(fault, Some(Fault::Reset)) {
        injected.reset.fetch_add(1, Ordering::Relaxed);
        // Headers, half the body, then the connection breaks.
        let half = bytes.slice(..bytes.len() / 2);
        let chunks: Vec<Result<axum::body::Bytes, std::io::Error>> = vec![
            Ok(half),
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "injected reset",
            )),
        ];
        Response::new(Body::from_stream(futures_util::stream::iter(chunks)))
    } else {
        Response::new(Body::from(bytes))
    };
    *response.status_mut() = status;
    copy_headers(&headers, response.headers_mut());
    response
}

fn copy_headers(from: &HeaderMap, to: &mut HeaderMap) {
    for (name, value) in from {
        if !matches!(
            name.as_str(),
            "content-length" | "transfer-encoding" | "connection" | "keep-alive"
        ) {
            to.append(name.clone(), value.clone());
        }
    }
}

fn error(status: u16, code: &str) -> Response<Body> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>{code}</Code><Message>injected by the fault proxy</Message></Error>"
    );
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    let headers = response.headers_mut();
    headers.insert("x-ms-error-code", HeaderValue::from_str(code).unwrap());
    headers.insert("content-type", HeaderValue::from_static("application/xml"));
    response
}

/// An empty page that hands back the continuation the query resumed from.
fn empty_page(query: &str) -> Response<Body> {
    let mut response = Response::new(Body::from("{\"value\":[]}"));
    let headers = response.headers_mut();
    headers.insert(
        "content-type",
        HeaderValue::from_static("application/json;odata=nometadata"),
    );
    for pair in query.split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let header = match name {
            "NextPartitionKey" => "x-ms-continuation-NextPartitionKey",
            "NextRowKey" => "x-ms-continuation-NextRowKey",
            _ => continue,
        };
        // The token travels URL-encoded in the query and as is in the header.
        let decoded = percent_decode(value);
        if let Ok(value) = HeaderValue::from_str(&decoded) {
            headers.insert(header, value);
        }
    }
    response
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(byte) = u8::from_str_radix(&text[i + 1..i + 3], 16) {
                out.push(byte);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The same request with its `$top` cut to a third (at least 1).
fn shorten_top(path_and_query: &str) -> String {
    let Some((path, query)) = path_and_query.split_once('?') else {
        return path_and_query.to_string();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name @ ("$top" | "%24top"), n)) => {
                let n: u32 = n.parse().unwrap_or(1000);
                format!("{name}={}", (n / 3).max(1))
            }
            _ => pair.to_string(),
        })
        .collect();
    format!("{path}?{}", pairs.join("&"))
}
