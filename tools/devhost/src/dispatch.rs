//! Calls the handler for one invocation and writes the queue outputs of a successful one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use tablescan::storage::pacing::Governors;
use tablescan::storage::queue::{MessageEncoding, PutOptions};
use tablescan::storage::token::TokenCredentials;
use tablescan::storage::{ClientOptions, QueueServiceClient};

use crate::config::Function;
use crate::invocation::{queue_messages, read_answer, Answer};
use crate::process::Handler;
use crate::say::say_err;

/// The version devhost reports in `X-Azure-Functions-HostVersion`.
pub const HOST_VERSION: &str = "4.1037.0-devhost";

pub struct Dispatcher {
    pub handlers: Vec<Arc<Handler>>,
    client: reqwest::Client,
    pub function_timeout: Duration,
    next: AtomicUsize,
    settings: HashMap<String, String>,
    queues: std::sync::Mutex<HashMap<String, QueueServiceClient>>,
    /// The host's back-off per queue and its token credential per identity, shared by its
    /// queue clients as a host process shares them.
    governors: Governors,
    tokens: TokenCredentials,
    pub base64: bool,
    /// Wakes the listeners of a queue an instance just wrote to, as that instance's host's
    /// shared queue watcher does, instead of leaving the message until their next poll. Keyed by
    /// instance and queue: each instance of a scaled-out app is a host of its own, whose
    /// watcher knows only its own writes; the others find the message at their next poll.
    watchers: std::sync::Mutex<HashMap<(usize, String), Arc<tokio::sync::Notify>>>,
}

impl Dispatcher {
    pub fn new(
        handlers: Vec<Arc<Handler>>,
        function_timeout: Duration,
        settings: HashMap<String, String>,
        base64: bool,
    ) -> Self {
        Dispatcher {
            handlers,
            client: reqwest::Client::builder()
                .pool_idle_timeout(Duration::from_secs(4))
                .build()
                .expect("client builds"),
            function_timeout,
            next: AtomicUsize::new(0),
            settings,
            queues: std::sync::Mutex::new(HashMap::new()),
            governors: Governors::default(),
            tokens: TokenCredentials::default(),
            base64,
            watchers: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The signal that instance `instance` just wrote a message to `queue`.
    pub fn watcher(&self, instance: usize, queue: &str) -> Arc<tokio::sync::Notify> {
        let mut watchers = self.watchers.lock().expect("watchers lock");
        watchers
            .entry((instance, queue.to_string()))
            .or_default()
            .clone()
    }

    /// The next handler, round robin (for HTTP triggers).
    pub fn any_handler(&self) -> Arc<Handler> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handlers.len();
        self.handlers[i].clone()
    }

    /// Posts the invocation to `/<Function>` and reads the answer as the host does.
    pub async fn invoke(&self, handler: &Handler, function: &Function, body: &Value) -> Answer {
        let started = Instant::now();
        let Some(url) = handler.url(Duration::from_secs(60)).await else {
            return Answer::Failure("the handler is not running".into());
        };
        let text = body.to_string();
        // The host sends the body without a length (chunked).
        let stream = futures_util::stream::once(async move { Ok::<_, std::io::Error>(text) });
        let request = self
            .client
            .post(format!("{url}/{}", function.name))
            .header("content-type", "application/json; charset=utf-8")
            .header(
                "x-azure-functions-invocationid",
                uuid::Uuid::new_v4().to_string(),
            )
            .header("x-azure-functions-hostversion", HOST_VERSION)
            .header("user-agent", format!("Azure-Functions-Host/{HOST_VERSION}"))
            .body(reqwest::Body::wrap_stream(stream));
        let exchange = async {
            let response = request
                .send()
                .await
                .map_err(|e| format!("the handler did not answer: {}", e.without_url()))?;
            let status = response.status().as_u16();
            let content_type = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let bytes = response
                .bytes()
                .await
                .map_err(|e| format!("the answer broke off: {}", e.without_url()))?;
            Ok::<_, String>((status, content_type, bytes))
        };
        let outputs: Vec<String> = function.outputs().map(|b| b.name.clone()).collect();
        match tokio::time::timeout(self.function_timeout, exchange).await {
            Ok(Ok((status, content_type, bytes))) => {
                match read_answer(status, content_type.as_deref(), &bytes, &outputs) {
                    Answer::Hang => {
                        // The real host never completes this invocation: it times out and restarts
                        // the handler.
                        tokio::time::sleep(self.function_timeout.saturating_sub(started.elapsed()))
                            .await;
                        say_err!("[devhost] {}: A function timeout has occurred (empty answer). Restarting the handler", function.name);
                        handler.restart();
                        Answer::Failure("timed out after an empty answer".into())
                    }
                    answer => answer,
                }
            }
            Ok(Err(why)) => Answer::Failure(why),
            Err(_) => {
                say_err!(
                    "[devhost] {}: A function timeout has occurred. Restarting the handler",
                    function.name
                );
                handler.restart();
                Answer::Failure(format!("timed out after {:?}", self.function_timeout))
            }
        }
    }

    /// The queue client for a connection setting.
    pub fn queues(&self, connection: &str) -> Result<QueueServiceClient, String> {
        let mut cache = self.queues.lock().map_err(|_| "poisoned".to_string())?;
        if let Some(client) = cache.get(connection) {
            return Ok(client.clone());
        }
        // As the host does: a connection string, or settings `C__...` of a connection by identity.
        let lookup = |name: &str| self.settings.get(name).cloned();
        let account = tablescan::storage::connection::resolve(connection, &lookup, &self.tokens)
            .map_err(|e| format!("connection {connection}: {e}"))?;
        let options = ClientOptions {
            governors: self.governors.clone(),
            ..ClientOptions::default()
        };
        let client = QueueServiceClient::new(&account, options).map_err(|e| e.to_string())?;
        cache.insert(connection.to_string(), client.clone());
        Ok(client)
    }

    /// Puts a message for instance `instance`, creating the queue if needed (as the output
    /// binding does).
    pub async fn put(
        &self,
        instance: usize,
        connection: &str,
        queue: &str,
        payload: &[u8],
    ) -> Result<(), String> {
        let client = self
            .queues(connection)?
            .queue(queue)
            .map_err(|e| e.to_string())?;
        let options = PutOptions {
            encoding: if self.base64 {
                MessageEncoding::Base64
            } else {
                MessageEncoding::Text
            },
            ..PutOptions::default()
        };
        let result = match client.put_message(payload, &options).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => {
                client.create().await.map_err(|e| e.to_string())?;
                client
                    .put_message(payload, &options)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string())
            }
            Err(e) => Err(e.to_string()),
        };
        if result.is_ok() {
            self.watcher(instance, queue).notify_waiters();
        }
        result
    }

    /// Writes the queue outputs of a successful invocation on instance `instance`.
    pub async fn write_outputs(
        &self,
        instance: usize,
        function: &Function,
        outputs: &Map<String, Value>,
    ) -> Result<usize, String> {
        let mut written = 0;
        for binding in function.outputs().filter(|b| b.kind == "queue") {
            let Some(value) = outputs.get(&binding.name) else {
                continue;
            };
            let queue = binding
                .queue_name
                .clone()
                .ok_or_else(|| format!("output {} has no queueName", binding.name))?;
            for message in queue_messages(value, binding.binary) {
                self.put(instance, &binding.connection, &queue, &message)
                    .await?;
                written += 1;
            }
        }
        Ok(written)
    }
}
