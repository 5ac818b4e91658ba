//! An HTTP proxy between a client and Azurite that fails requests, in one of two ways:
//!
//! - planned (`plan`): each request takes the next fault from a list (an empty list means
//!   "forward"), so a test states exactly which attempts fail and counts the attempts made;
//! - random (`start_random`): a seeded share of requests gets a fault drawn from every kind
//!   that fits the request.
//!
//! Faults: an error status with a storage-style XML body (503 ServerBusy, 500 InternalError,
//! 408 OperationTimedOut, optionally with Retry-After), without reaching Azurite; a slow answer;
//! a connection reset halfway through the answer, after Azurite did the request (the client
//! sees an error for something that happened); a connection dropped before the request reaches
//! Azurite (an error for something that did not happen); for table queries, a short page (`$top` cut to
//! a third) or, when the query resumes from a continuation, an empty page that hands the same
//! continuation back. Shared Key signatures cover the path, not the host, so Azurite accepts
//! the forwarded requests as they are. Used by tests/retry.rs and by devhost's fault tests.
//!
//! Two more modes stand for the service as a whole: an outage (`set_outage`: every request
//! answered 503), and a rate limit (`set_rate_limit`): a token bucket in entities per second,
//! charged with what each forwarded request touched (each entity a query returned, each
//! operation of a transaction, one for anything else), that answers 503 Server Busy while it is
//! empty, as the service answers a client above an account's or a partition's target.
//!
//! And one for the service's latency (`set_latency`): every answer leaves the proxy no sooner
//! than the service would have answered it ([`ServiceLatency`]), counted from the request's
//! arrival, so Azurite's own time is part of it, not added to it (`e2e_bench
//! --service-latency`).
//!
//! Requests to one table can be counted apart (`mark_table`): an application that shares the
//! account with a scan (tools/devhost/tests/common/app_load.rs) uses a table of its own, so a
//! test can tell the application's refusals from the scan's while both meet the same rate limit.
//!
//! And one for a target that refuses some rows (`refuse_rows_marked`): in a transaction, an
//! operation whose JSON holds a given string value gets that value swapped for one longer than
//! a property may be, so Azurite itself refuses that operation (400 PropertyValueTooLarge, at
//! its index) and the rest of the transaction with it, as the service refuses an invalid row.
//! Or the whole transaction (`refuse_transactions_marked`): answered 400 InvalidInput without an
//! operation index, as the service answers a request it cannot take at all.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{to_bytes, Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode};
use axum::Router;

/// What the proxy does with one request.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Answer with this status and a storage-style XML error, without forwarding.
    Status(u16, &'static str),
    /// Like `Status`, with a `Retry-After` header in seconds.
    StatusWithRetryAfter(u16, &'static str, u64),
    /// Forward after this long.
    Slow(Duration),
    /// Forward, then send the headers and half the body and break the connection.
    Reset,
    /// Break the connection without forwarding: the request never reaches Azurite, and the
    /// client, which cannot know that, sees the answer break off before its body.
    Drop,
    /// A table query: forward with `$top` cut to a third.
    ShortPage,
    /// A table query resuming from a continuation: answer an empty page with the same one.
    EmptyPage,
}

/// How many faults of each kind were injected, and how many requests were forwarded.
#[derive(Default, Debug)]
pub struct Injected {
    pub forwarded: AtomicU64,
    /// Entities the forwarded requests touched, as the Table service counts them against its
    /// scalability targets: each operation of an entity group transaction, each entity a query
    /// returned, one for any other request.
    pub entities: AtomicU64,
    /// Each forwarded request's entities, with when it arrived: when the service would count
    /// them. (Counted when answered instead, a stall of the emulator moves a second's requests
    /// into the next second, and a window after the stall holds more than was sent in it.)
    pub arrivals: std::sync::Mutex<Vec<(std::time::Instant, u64)>>,
    pub busy: AtomicU64,
    pub internal: AtomicU64,
    /// 408 and any other planned status.
    pub other_status: AtomicU64,
    pub slow: AtomicU64,
    pub reset: AtomicU64,
    pub dropped: AtomicU64,
    pub short_page: AtomicU64,
    pub empty_page: AtomicU64,
    /// Requests answered 503 by the rate limit (counted apart from the faults).
    pub throttled: AtomicU64,
    /// Of the counts above, those of requests to the table named by [`FaultProxy::mark_table`]
    /// (the totals include them; subtract these for everybody else's): forwarded, the entities
    /// they touched, and refused by the rate limit.
    pub marked_forwarded: AtomicU64,
    pub marked_entities: AtomicU64,
    pub marked_throttled: AtomicU64,
}

impl Injected {
    fn count(&self, fault: &Fault) {
        let counter = match fault {
            Fault::Status(503, _) | Fault::StatusWithRetryAfter(503, _, _) => &self.busy,
            Fault::Status(500, _) | Fault::StatusWithRetryAfter(500, _, _) => &self.internal,
            Fault::Status(..) | Fault::StatusWithRetryAfter(..) => &self.other_status,
            Fault::Slow(_) => &self.slow,
            Fault::Reset => &self.reset,
            Fault::Drop => &self.dropped,
            Fault::ShortPage => &self.short_page,
            Fault::EmptyPage => &self.empty_page,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Faults of every kind.
    pub fn total(&self) -> u64 {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        load(&self.busy)
            + load(&self.internal)
            + load(&self.other_status)
            + load(&self.slow)
            + load(&self.reset)
            + load(&self.dropped)
            + load(&self.short_page)
            + load(&self.empty_page)
    }

    pub fn summary(&self) -> String {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "forwarded {} ({} marked), 503 {}, 500 {}, 408 {}, slow {}, reset {}, dropped {}, short page {}, empty page {}, throttled {} ({} marked)",
            load(&self.forwarded),
            load(&self.marked_forwarded),
            load(&self.busy),
            load(&self.internal),
            load(&self.other_status),
            load(&self.slow),
            load(&self.reset),
            load(&self.dropped),
            load(&self.short_page),
            load(&self.empty_page),
            load(&self.throttled),
            load(&self.marked_throttled),
        )
    }
}

#[derive(Default)]
struct Plan {
    faults: VecDeque<Fault>,
    seen: Vec<String>,
    /// Share of requests faulted at random, and the generator's state.
    rate: f64,
    random: u64,
    /// While set, every request is answered 503 (an outage of the service behind).
    outage: bool,
    /// While set, the entities per second the service behind takes.
    bucket: Option<Bucket>,
    /// While set, operations of transactions holding this string value are made too large.
    refused_marker: Option<String>,
    /// While set, transactions holding this string value are answered 400 as a whole.
    refused_transactions: Option<String>,
    /// While set, requests to this table are also counted in the `marked_` counters.
    marked_table: Option<String>,
    /// While set, each answer is held back by the service's latency for it.
    latency: Option<ServiceLatency>,
}

/// What the Table service takes to answer a request, by kind: a query (any read but of one
/// entity) a fixed part plus a part per entity returned, a transaction a fixed part plus a part
/// per operation, anything else a fixed time. [`ServiceLatency::PUBLISHED`] is the simulator's
/// model (tools/simulator `Params`: `query_base_ms`, `query_ms_per_entity`, `batch_base_ms`,
/// `batch_ms_per_entity`, `entity_ms`); keep the two in step.
#[derive(Debug, Clone, Copy)]
pub struct ServiceLatency {
    pub query: Duration,
    pub query_per_entity: Duration,
    pub transaction: Duration,
    pub transaction_per_operation: Duration,
    pub single: Duration,
}

impl ServiceLatency {
    /// The simulator's defaults: a full page of 1,000 entities in 137 ms (30 ms and 0.107 ms an
    /// entity), the published serial read of 3.5M rows in about 8 minutes; a transaction 30 ms
    /// and 0.1 ms an operation; a single-entity request 15 ms.
    pub const PUBLISHED: ServiceLatency = ServiceLatency {
        query: Duration::from_millis(30),
        query_per_entity: Duration::from_micros(107),
        transaction: Duration::from_millis(30),
        transaction_per_operation: Duration::from_micros(100),
        single: Duration::from_millis(15),
    };

    /// The latency of a `method` request of `path` that touched `entities`: a transaction
    /// (`$batch`), a query (a GET of anything but one entity: `table(PartitionKey=..,RowKey=..)`
    /// names one, a page or a filtered read of a few rows does not), or a single request.
    fn of(&self, method: &str, path: &str, entities: u64) -> Duration {
        let entities = u32::try_from(entities).unwrap_or(u32::MAX);
        if path.ends_with("$batch") {
            self.transaction + self.transaction_per_operation * entities
        } else if method == "GET" && !path.contains("PartitionKey=") {
            self.query + self.query_per_entity * entities
        } else {
            self.single
        }
    }
}

/// A token bucket of entities: refilled at `rate` per second up to one second's worth, charged
/// after each forwarded request with the entities it touched (so one large page may take it
/// below zero, and later requests wait for the debt to be repaid, as a throttled client would).
struct Bucket {
    rate: f64,
    tokens: f64,
    refilled: std::time::Instant,
}

impl Bucket {
    fn refill(&mut self) {
        let now = std::time::Instant::now();
        let elapsed = now.duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.rate);
        self.refilled = now;
    }
}

/// When a request matches, something happens (a process is killed) before it is forwarded
/// or after its answer came back and before that is passed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    Before,
    After,
}

/// Decides, from a request's method and path with query, whether and when to act.
pub type Trigger = Box<dyn Fn(&str, &str) -> Option<Moment> + Send + Sync>;
/// What to do then.
pub type Act = Box<dyn Fn() + Send + Sync>;

struct Shared {
    plan: Mutex<Plan>,
    hook: Mutex<Option<(Trigger, Act)>>,
    upstream: String,
    client: reqwest::Client,
    injected: Arc<Injected>,
}

/// A running proxy. It stops when dropped.
pub struct FaultProxy {
    pub address: SocketAddr,
    pub injected: Arc<Injected>,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port that forwards to `upstream` (scheme and host)
    /// and injects only the faults planned with [`FaultProxy::plan`].
    pub async fn start(upstream: String) -> FaultProxy {
        Self::start_random(upstream, 0.0, 1).await
    }

    /// Like [`FaultProxy::start`], and also faults `rate` of the requests at random.
    pub async fn start_random(upstream: String, rate: f64, seed: u64) -> FaultProxy {
        let injected = Arc::new(Injected::default());
        let shared = Arc::new(Shared {
            plan: Mutex::new(Plan {
                rate,
                random: seed | 1,
                ..Plan::default()
            }),
            hook: Mutex::new(None),
            upstream,
            client: reqwest::Client::new(),
            injected: injected.clone(),
        });
        let app = Router::new().fallback(forward).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.ok();
        });
        FaultProxy {
            address,
            injected,
            shared,
            task,
        }
    }

    /// Queues faults for the next requests, in order.
    pub fn plan(&self, faults: impl IntoIterator<Item = Fault>) {
        self.shared.plan.lock().unwrap().faults.extend(faults);
    }

    /// Runs `act` when `trigger` matches a request, at the moment it says.
    pub fn on(&self, trigger: Trigger, act: Act) {
        *self.shared.hook.lock().unwrap() = Some((trigger, act));
    }

    /// Starts (`true`) or ends an outage: meanwhile every request is answered 503 ServerBusy.
    pub fn set_outage(&self, outage: bool) {
        self.shared.plan.lock().unwrap().outage = outage;
    }

    /// Limits the entities per second forwarded (`None` lifts the limit); above it, requests
    /// are answered 503 Server Busy without reaching Azurite.
    pub fn set_rate_limit(&self, entities_per_second: Option<f64>) {
        self.shared.plan.lock().unwrap().bucket = entities_per_second.map(|rate| Bucket {
            rate,
            tokens: rate,
            refilled: std::time::Instant::now(),
        });
    }

    /// Holds every answer back until the service would have answered it (`None` ends it).
    pub fn set_latency(&self, latency: Option<ServiceLatency>) {
        self.shared.plan.lock().unwrap().latency = latency;
    }

    /// Makes every operation of a transaction whose JSON holds the string value `marker` one
    /// that Azurite refuses as invalid (`None` ends it).
    pub fn refuse_rows_marked(&self, marker: Option<&str>) {
        self.shared.plan.lock().unwrap().refused_marker = marker.map(str::to_string);
    }

    /// Answers every transaction whose JSON holds the string value `marker` with a 400
    /// InvalidInput for the request as a whole, without forwarding it (`None` ends it).
    pub fn refuse_transactions_marked(&self, marker: Option<&str>) {
        self.shared.plan.lock().unwrap().refused_transactions = marker.map(str::to_string);
    }

    /// Counts the requests to table `name` apart as well (`None` ends it): in the `marked_`
    /// counters of [`Injected`], besides the totals. A request is to the table when its path
    /// names it (`/account/name`, `/account/name()` or `/account/name(PartitionKey=...)`), so
    /// single-entity requests and queries are matched, and a scan that never addresses the table
    /// is never counted; transactions (`/account/$batch`) and table creation are not matched.
    pub fn mark_table(&self, name: Option<&str>) {
        self.shared.plan.lock().unwrap().marked_table = name.map(str::to_string);
    }

    /// The method and path of every request seen so far.
    pub fn seen(&self) -> Vec<String> {
        self.shared.plan.lock().unwrap().seen.clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Plan {
    /// A number in [0, 1).
    fn draw(&mut self) -> f64 {
        self.random ^= self.random << 13;
        self.random ^= self.random >> 7;
        self.random ^= self.random << 17;
        (self.random % 1_000_000) as f64 / 1_000_000.0
    }

    /// The planned fault for the next request, else perhaps a random one that fits it.
    fn next(&mut self, is_query: bool, resumes: bool) -> Option<Fault> {
        if self.outage {
            return Some(Fault::Status(503, "ServerBusy"));
        }
        if let Some(fault) = self.faults.pop_front() {
            return Some(fault);
        }
        if self.rate <= 0.0 || self.draw() >= self.rate {
            return None;
        }
        let mut kinds = vec![
            Fault::Status(503, "ServerBusy"),
            Fault::Status(500, "InternalError"),
            Fault::Status(408, "OperationTimedOut"),
            Fault::Slow(Duration::from_millis(200 + (self.draw() * 1000.0) as u64)),
            Fault::Reset,
            Fault::Drop,
        ];
        if is_query {
            kinds.push(Fault::ShortPage);
            if resumes {
                kinds.push(Fault::EmptyPage);
            }
        }
        let pick = (self.draw() * kinds.len() as f64) as usize % kinds.len();
        Some(kinds.swap_remove(pick))
    }
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response<Body> {
    let arrived = std::time::Instant::now();
    let (parts, body) = request.into_parts();
    let mut path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let query = parts.uri.query().unwrap_or("").to_string();
    // A table query (not a single entity): a GET with a page size.
    let is_query = parts.method == axum::http::Method::GET
        && (query.contains("$top=") || query.contains("%24top="));
    let (fault, over_limit, refused_marker, refused_transactions, marked) = {
        let mut plan = shared.plan.lock().unwrap();
        let marked = plan
            .marked_table
            .as_deref()
            .is_some_and(|table| names_table(parts.uri.path(), table));
        plan.seen
            .push(format!("{} {}", parts.method, parts.uri.path()));
        let over_limit = plan.bucket.as_mut().is_some_and(|bucket| {
            bucket.refill();
            bucket.tokens <= 0.0
        });
        (
            plan.next(is_query, query.contains("NextPartitionKey")),
            over_limit,
            plan.refused_marker.clone(),
            plan.refused_transactions.clone(),
            marked,
        )
    };
    if over_limit {
        shared.injected.throttled.fetch_add(1, Ordering::Relaxed);
        if marked {
            shared
                .injected
                .marked_throttled
                .fetch_add(1, Ordering::Relaxed);
        }
        return error(503, "ServerBusy", None);
    }
    if let Some(fault) = &fault {
        shared.injected.count(fault);
    }
    let moment = shared
        .hook
        .lock()
        .unwrap()
        .as_ref()
        .and_then(|(trigger, _)| trigger(parts.method.as_str(), &path));
    let act = || {
        if let Some((_, act)) = shared.hook.lock().unwrap().as_ref() {
            act();
        }
    };
    if moment == Some(Moment::Before) {
        act();
        return error(502, "ProxyKilledTheCaller", None);
    }
    match &fault {
        Some(Fault::Status(status, code)) => return error(*status, code, None),
        Some(Fault::StatusWithRetryAfter(status, code, seconds)) => {
            return error(*status, code, Some(*seconds))
        }
        Some(Fault::EmptyPage) => return empty_page(&query),
        Some(Fault::Drop) => return broken_off(),
        Some(Fault::Slow(delay)) => tokio::time::sleep(*delay).await,
        Some(Fault::ShortPage) => path = shorten_top(&path),
        Some(Fault::Reset) | None => {}
    }
    let mut body = to_bytes(body, 64 * 1024 * 1024).await.unwrap_or_default();
    if let Some(marker) = refused_transactions.filter(|_| parts.uri.path().ends_with("$batch")) {
        if String::from_utf8_lossy(&body).contains(&format!("\"{marker}\"")) {
            shared.injected.other_status.fetch_add(1, Ordering::Relaxed);
            return error(400, "InvalidInput", None);
        }
    }
    if let Some(marker) = refused_marker.filter(|_| parts.uri.path().ends_with("$batch")) {
        // A string of 40,000 characters: more than the 32K a property holds.
        let quoted = format!("\"{marker}\"");
        let text = String::from_utf8_lossy(&body);
        if text.contains(&quoted) {
            let too_long = format!("\"{}\"", "x".repeat(40_000));
            body = Bytes::from(text.replace(&quoted, &too_long));
        }
    }
    let method = reqwest::Method::from_bytes(parts.method.as_str().as_bytes()).unwrap();
    let mut outgoing = shared
        .client
        .request(method, format!("{}{path}", shared.upstream));
    for (name, value) in &parts.headers {
        if !matches!(name.as_str(), "host" | "content-length" | "connection") {
            outgoing = outgoing.header(name.as_str(), value.as_bytes());
        }
    }
    let answer = match outgoing.body(body.to_vec()).send().await {
        Ok(answer) => answer,
        Err(_) => return error(502, "ProxyUpstreamFailed", None),
    };
    shared.injected.forwarded.fetch_add(1, Ordering::Relaxed);
    let status = answer.status().as_u16();
    let headers = answer.headers().clone();
    let bytes = answer.bytes().await.unwrap_or_default();
    let touched = entities_touched(parts.uri.path(), &body, &bytes);
    shared
        .injected
        .entities
        .fetch_add(touched, Ordering::Relaxed);
    if marked {
        let injected = &shared.injected;
        injected.marked_forwarded.fetch_add(1, Ordering::Relaxed);
        injected
            .marked_entities
            .fetch_add(touched, Ordering::Relaxed);
    }
    shared
        .injected
        .arrivals
        .lock()
        .unwrap()
        .push((arrived, touched));
    let latency = {
        let mut plan = shared.plan.lock().unwrap();
        if let Some(bucket) = plan.bucket.as_mut() {
            bucket.refill();
            bucket.tokens -= touched as f64;
        }
        plan.latency
    };
    if let Some(latency) = latency {
        let answered = latency.of(parts.method.as_str(), parts.uri.path(), touched);
        tokio::time::sleep_until((arrived + answered).into()).await;
    }
    if moment == Some(Moment::After) {
        act();
    }
    let mut response = if matches!(fault, Some(Fault::Reset)) {
        let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(bytes.slice(..bytes.len() / 2)),
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "injected reset",
            )),
        ];
        Response::new(Body::from_stream(futures_util::stream::iter(chunks)))
    } else {
        Response::new(Body::from(bytes))
    };
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    copy_headers(&headers, response.headers_mut());
    response
}

/// How many entities one forwarded request touched (see [`Injected::entities`]).
fn entities_touched(path: &str, request: &[u8], answer: &[u8]) -> u64 {
    if path.ends_with("$batch") {
        // Each operation is an HTTP request line inside the multipart body.
        let text = String::from_utf8_lossy(request);
        return text.matches(" HTTP/1.1").count() as u64;
    }
    match serde_json::from_slice::<serde_json::Value>(answer) {
        Ok(serde_json::Value::Object(map)) => match map.get("value") {
            Some(serde_json::Value::Array(entities)) => entities.len() as u64,
            _ => 1,
        },
        _ => 1,
    }
}

/// Whether a request path addresses table `table`: its first or second segment (after the
/// account, in path-style URLs such as Azurite's) is the table's name, alone or followed by
/// `(`. Table names are case-insensitive.
fn names_table(path: &str, table: &str) -> bool {
    path.split('/')
        .filter(|segment| !segment.is_empty())
        .take(2)
        .any(|segment| {
            let name = segment.split('(').next().unwrap_or("");
            name.eq_ignore_ascii_case(table)
        })
}

/// An answer that breaks off before its body: the nearest an HTTP server gets to dropping the
/// connection, and to the client the same (an error it cannot tell from a reset).
fn broken_off() -> Response<Body> {
    let chunks: Vec<Result<Bytes, std::io::Error>> = vec![Err(std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "injected drop",
    ))];
    let mut response = Response::new(Body::from_stream(futures_util::stream::iter(chunks)));
    *response.status_mut() = StatusCode::OK;
    response
}

fn copy_headers(from: &reqwest::header::HeaderMap, to: &mut HeaderMap) {
    for (name, value) in from {
        if !matches!(
            name.as_str(),
            "content-length" | "transfer-encoding" | "connection" | "keep-alive"
        ) {
            if let (Ok(name), Ok(value)) = (
                axum::http::HeaderName::from_bytes(name.as_str().as_bytes()),
                HeaderValue::from_bytes(value.as_bytes()),
            ) {
                to.append(name, value);
            }
        }
    }
}

fn error(status: u16, code: &str, retry_after: Option<u64>) -> Response<Body> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>{code}</Code><Message>injected by the test proxy</Message></Error>"
    );
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    let headers = response.headers_mut();
    headers.insert("x-ms-error-code", HeaderValue::from_str(code).unwrap());
    headers.insert("content-type", HeaderValue::from_static("application/xml"));
    if let Some(seconds) = retry_after {
        headers.insert("retry-after", HeaderValue::from(seconds));
    }
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
    // The token travels percent-encoded in the query and as it is in the headers.
    let Ok(url) = reqwest::Url::parse(&format!("http://proxy/?{query}")) else {
        return response;
    };
    for (name, value) in url.query_pairs() {
        let header = match name.as_ref() {
            "NextPartitionKey" => "x-ms-continuation-NextPartitionKey",
            "NextRowKey" => "x-ms-continuation-NextRowKey",
            _ => continue,
        };
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(header, value);
        }
    }
    response
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
