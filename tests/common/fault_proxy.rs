//! A tiny HTTP proxy that sits between a client and Azurite and fails chosen requests.
//!
//! Each request takes the next planned fault from a list (an empty list means "forward"), so a
//! test states exactly which attempts fail and can count how many attempts were made.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Response, StatusCode};
use axum::Router;

/// What the proxy does with one request.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Answer with this status and a storage-style XML error, without forwarding.
    Status(u16, &'static str),
    /// Like `Status`, with a `Retry-After` header in seconds.
    StatusWithRetryAfter(u16, &'static str, u64),
}

#[derive(Default)]
struct Shared {
    plan: VecDeque<Fault>,
    seen: Vec<String>,
}

/// A running proxy. It stops when dropped.
pub struct FaultProxy {
    pub address: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port that forwards to `upstream` (scheme and host).
    pub async fn start(upstream: String) -> FaultProxy {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let state = (shared.clone(), upstream, reqwest::Client::new());
        let app = Router::new().fallback(forward).with_state(Arc::new(state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.ok();
        });
        FaultProxy {
            address,
            shared,
            task,
        }
    }

    /// Queues faults for the next requests, in order.
    pub fn plan(&self, faults: impl IntoIterator<Item = Fault>) {
        self.shared.lock().unwrap().plan.extend(faults);
    }

    /// The method and path of every request seen so far.
    pub fn seen(&self) -> Vec<String> {
        self.shared.lock().unwrap().seen.clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type ProxyState = Arc<(Arc<Mutex<Shared>>, String, reqwest::Client)>;

async fn forward(State(state): State<ProxyState>, request: Request) -> Response<Body> {
    let (shared, upstream, client) = &*state;
    let path = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let fault = {
        let mut shared = shared.lock().unwrap();
        shared
            .seen
            .push(format!("{} {}", request.method(), request.uri().path()));
        shared.plan.pop_front()
    };
    if let Some(fault) = fault {
        let (status, code, retry_after) = match fault {
            Fault::Status(s, c) => (s, c, None),
            Fault::StatusWithRetryAfter(s, c, r) => (s, c, Some(r)),
        };
        let mut response = Response::builder()
            .status(StatusCode::from_u16(status).unwrap())
            .header("content-type", "application/xml")
            .header("x-ms-error-code", code);
        if let Some(seconds) = retry_after {
            response = response.header("retry-after", seconds.to_string());
        }
        let body = format!("<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>injected by the test proxy</Message></Error>");
        return response.body(Body::from(body)).unwrap();
    }
    let method = reqwest::Method::from_bytes(request.method().as_str().as_bytes()).unwrap();
    let mut outgoing = client.request(method, format!("{upstream}{path}"));
    for (name, value) in request.headers() {
        if name != "host" && name != "content-length" {
            outgoing = outgoing.header(name.as_str(), value.as_bytes());
        }
    }
    let body = to_bytes(request.into_body(), 16 * 1024 * 1024)
        .await
        .unwrap();
    let answer = match outgoing.body(body.to_vec()).send().await {
        Ok(answer) => answer,
        Err(_) => return Response::builder().status(502).body(Body::empty()).unwrap(),
    };
    let mut response = Response::builder().status(answer.status().as_u16());
    for (name, value) in answer.headers() {
        if name != "content-length" && name != "transfer-encoding" && name != "connection" {
            response = response.header(
                HeaderName::from_bytes(name.as_str().as_bytes()).unwrap(),
                HeaderValue::from_bytes(value.as_bytes()).unwrap(),
            );
        }
    }
    let bytes = answer.bytes().await.unwrap_or_default();
    response.body(Body::from(bytes)).unwrap()
}
