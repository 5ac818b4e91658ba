//! A minimal stand-in for the Functions host inside tests: it serves the handler's router on a
//! loopback port and calls it exactly as the real host does (payload-mode HTTP requests, queue
//! messages JSON-encoded twice with string DequeueCount, quoted Id and PopReceipt, and the
//! message's top-level JSON fields copied into Metadata). Queue outputs are kept in memory and
//! delivered by `drain`, so a whole scan runs inside one test.

use std::collections::VecDeque;
use std::net::SocketAddr;

use serde_json::{json, Map, Value};
use tablescan::functions::names::{
    EXPORT_OUTPUT, PARTITION_OUTPUT, RANGE_OUTPUT, SCAN_EXPORT, SCAN_PARTITION, SCAN_RANGE,
};
use tablescan::functions::{router, AppState, Settings};

/// The answer to one invocation.
#[derive(Debug)]
pub struct Answer {
    /// The handler's HTTP status to the host.
    pub status: u16,
    pub content_type: String,
    /// The raw body.
    pub text: String,
    pub json: Value,
}

impl Answer {
    /// Messages written to a queue output binding.
    pub fn messages(&self, binding: &str) -> Vec<String> {
        self.json["Outputs"][binding]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|m| m.as_str().expect("outputs are strings").to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The `res` output: status and parsed body.
    pub fn res(&self) -> (u16, Value) {
        let res = &self.json["Outputs"]["res"];
        let body = res["body"].as_str().expect("res.body is a string");
        (
            res["statusCode"].as_u64().unwrap() as u16,
            serde_json::from_str(body).unwrap(),
        )
    }
}

pub struct TestHost {
    pub address: SocketAddr,
    client: reqwest::Client,
    task: tokio::task::JoinHandle<()>,
    /// Messages written to the work-item queues and not yet delivered: (function, text).
    pub queued: VecDeque<(String, String)>,
    next_id: u64,
}

impl TestHost {
    /// Serves the handler with these app settings (plus the test storage as AzureWebJobsStorage).
    pub async fn start(extra: &[(&str, &str)]) -> TestHost {
        let mut settings = vec![
            (
                "AzureWebJobsStorage".to_string(),
                super::connection_string(),
            ),
            (
                "TABLESCAN_LEDGER_TABLE".to_string(),
                super::unique_name("ledger"),
            ),
        ];
        settings.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Self::serve(AppState::new(Settings::from_pairs(settings))).await
    }

    /// Serves the handler with a state the test built itself.
    pub async fn serve(state: std::sync::Arc<AppState>) -> TestHost {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let app = router(state);
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.ok();
        });
        TestHost {
            address,
            client: reqwest::Client::new(),
            task,
            queued: VecDeque::new(),
            next_id: 0,
        }
    }

    /// Posts a raw invocation body to a function.
    pub async fn post_raw(&self, function: &str, body: String) -> Answer {
        let response = self
            .client
            .post(format!("http://{}/{function}", self.address))
            .header("content-type", "application/json; charset=utf-8")
            .header(
                "x-azure-functions-invocationid",
                uuid::Uuid::new_v4().to_string(),
            )
            .body(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let text = response.text().await.unwrap();
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer {
            status,
            content_type,
            text,
            json,
        }
    }

    /// Calls an HTTP-triggered function in payload mode.
    pub async fn http(
        &self,
        function: &str,
        method: &str,
        path: &str,
        params: &[(&str, &str)],
        body: Option<&str>,
    ) -> Answer {
        self.http_with_headers(function, method, path, params, body, &[], &[])
            .await
    }

    /// Like [`TestHost::http`], with extra request headers and query parameters.
    #[allow(clippy::too_many_arguments)]
    pub async fn http_with_headers(
        &self,
        function: &str,
        method: &str,
        path: &str,
        params: &[(&str, &str)],
        body: Option<&str>,
        extra_headers: &[(&str, &str)],
        query: &[(&str, &str)],
    ) -> Answer {
        let query: Map<String, Value> = query
            .iter()
            .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
            .collect();
        let mut headers = json!({ "Host": ["localhost:7071"] });
        for (name, value) in extra_headers {
            headers[*name] = json!([value]);
        }
        let mut metadata = Map::new();
        if let Some(body) = body {
            headers["Content-Type"] = json!(["application/json"]);
            headers["Content-Length"] = json!([body.len().to_string()]);
            leak_fields(body, &mut metadata);
        }
        let mut params_json = Map::new();
        for (k, v) in params {
            params_json.insert(k.to_string(), Value::String(v.to_string()));
            metadata.insert(k.to_string(), Value::String(format!("\"{v}\"")));
        }
        let mut req = json!({
            "Url": format!("http://localhost:7071{path}"),
            "Method": method,
            "Query": query.clone(),
            "Headers": headers,
            "Params": params_json,
            "Identities": [{"AuthenticationType": null, "IsAuthenticated": false, "Claims": []}],
        });
        if let Some(body) = body {
            req["Body"] = Value::String(body.to_string());
        }
        metadata.insert("Query".into(), Value::Object(query));
        metadata.insert("sys".into(), sys(function));
        let invocation = json!({ "Data": { "req": req }, "Metadata": metadata });
        self.post_raw(function, invocation.to_string()).await
    }

    /// Delivers one queue message as the real host does.
    pub async fn deliver(&mut self, function: &str, text: &str, dequeue_count: u32) -> Answer {
        self.next_id += 1;
        let body = self.delivery(function, text, dequeue_count, self.next_id);
        self.post_raw(function, body).await
    }

    /// The invocation the real host sends to deliver message number `message` with `text`.
    pub fn delivery(&self, function: &str, text: &str, dequeue_count: u32, message: u64) -> String {
        self.delivery_at(
            function,
            text,
            dequeue_count,
            message,
            "2026-11-21T06:00:06+00:00",
        )
    }

    /// [`TestHost::delivery`] of a message put in its queue at `inserted` (RFC 3339, to the
    /// second, as the host gives it): a step tells an old message of an item sent again from
    /// the new one by it (`Begin::Superseded`).
    pub fn delivery_at(
        &self,
        function: &str,
        text: &str,
        dequeue_count: u32,
        message: u64,
        inserted: &str,
    ) -> String {
        let mut metadata = Map::new();
        leak_fields(text, &mut metadata);
        metadata.insert(
            "DequeueCount".into(),
            Value::String(dequeue_count.to_string()),
        );
        metadata.insert(
            "ExpirationTime".into(),
            Value::String("9999-12-31T23:59:59+00:00".into()),
        );
        metadata.insert("Id".into(), Value::String(format!("\"message-{message}\"")));
        metadata.insert("InsertionTime".into(), Value::String(inserted.into()));
        metadata.insert(
            "NextVisibleTime".into(),
            Value::String("2026-11-21T06:10:06+00:00".into()),
        );
        metadata.insert(
            "PopReceipt".into(),
            Value::String("\"AgAAAAMAAAAAAAAA8d5gQex+2AE=\"".into()),
        );
        metadata.insert("sys".into(), sys(function));
        let data = serde_json::to_string(text).unwrap();
        json!({ "Data": { "item": data }, "Metadata": metadata }).to_string()
    }

    /// Keeps the work-item outputs of an answer for later delivery.
    pub fn enqueue_outputs(&mut self, answer: &Answer) {
        for m in answer.messages(RANGE_OUTPUT) {
            self.queued.push_back((SCAN_RANGE.to_string(), m));
        }
        for m in answer.messages(PARTITION_OUTPUT) {
            self.queued.push_back((SCAN_PARTITION.to_string(), m));
        }
        for m in answer.messages(EXPORT_OUTPUT) {
            self.queued.push_back((SCAN_EXPORT.to_string(), m));
        }
    }

    /// Delivers `text` to `function` (it must succeed), then everything that follows from it
    /// ([`TestHost::drain`]).
    pub async fn deliver_and_drain(&mut self, function: &str, text: &str) -> usize {
        let answer = self.deliver(function, text, 1).await;
        assert_eq!(answer.status, 200, "{function} failed: {}", answer.text);
        self.enqueue_outputs(&answer);
        1 + self.drain().await
    }

    /// Delivers queued work items until none are left; every invocation must succeed.
    pub async fn drain(&mut self) -> usize {
        let mut steps = 0;
        while let Some((function, text)) = self.queued.pop_front() {
            let answer = self.deliver(&function, &text, 1).await;
            assert_eq!(answer.status, 200, "{function} failed: {}", answer.text);
            self.enqueue_outputs(&answer);
            steps += 1;
            assert!(steps < 100_000, "the scan does not finish");
        }
        steps
    }

    /// Starts a scan (it must be accepted); returns the answer and the scan id.
    pub async fn start_scan(&self, request: &Value) -> (Answer, String) {
        let answer = self
            .http(
                "StartScan",
                "POST",
                "/api/scans",
                &[],
                Some(&request.to_string()),
            )
            .await;
        let (status, body) = answer.res();
        assert_eq!(status, 202, "{body}");
        let id = body["id"].as_str().unwrap().to_string();
        (answer, id)
    }

    /// Starts a scan, runs it to the end, and returns its id.
    pub async fn run_scan(&mut self, request: &Value) -> String {
        let (answer, id) = self.start_scan(request).await;
        self.enqueue_outputs(&answer);
        self.drain().await;
        id
    }

    /// Asserts that the handler still answers its health check.
    pub async fn assert_serving(&self) {
        let answer = reqwest::get(format!("http://{}/", self.address))
            .await
            .expect("the handler accepts connections");
        assert_eq!(answer.status(), 200, "the handler keeps serving");
    }

    /// The status document of a scan.
    pub async fn status(&self, id: &str) -> (u16, Value) {
        self.http(
            "GetScan",
            "GET",
            &format!("/api/scans/{id}"),
            &[("id", id)],
            None,
        )
        .await
        .res()
    }

    /// Cancels a scan; the HTTP answer.
    pub async fn cancel(&self, id: &str) -> (u16, Value) {
        self.http(
            "CancelScan",
            "POST",
            &format!("/api/scans/{id}/cancel"),
            &[("id", id)],
            None,
        )
        .await
        .res()
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn sys(function: &str) -> Value {
    json!({ "MethodName": function, "UtcNow": "2026-11-21T06:00:18.1974545Z", "RandGuid": uuid::Uuid::new_v4().to_string() })
}

/// The host copies the top-level fields of a JSON body into Metadata (strings quoted, objects
/// as they are, arrays dropped), overwriting keys of the same name.
fn leak_fields(text: &str, metadata: &mut Map<String, Value>) {
    let trimmed = text.trim();
    if !(trimmed.starts_with('{') && trimmed.ends_with('}')) {
        return;
    }
    if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(trimmed) {
        for (key, value) in fields {
            match value {
                Value::Array(_) => {}
                Value::Object(_) => {
                    metadata.insert(key, value);
                }
                Value::String(s) => {
                    metadata.insert(key, Value::String(serde_json::to_string(&s).unwrap()));
                }
                other => {
                    metadata.insert(key, Value::String(format!("\"{other}\"")));
                }
            }
        }
    }
}
