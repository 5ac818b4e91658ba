//! Golden tests of the host behaviours that need a real handler process, run against a small
//! fake handler written in Python (devhost starts whatever host.json names).

#[path = "../src/stop.rs"]
mod stop;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A fake custom handler: answers GET / (unless FAKE_NEVER_READY), and per function:
/// Echo reports how the request arrived, Slow sleeps past the timeout, Empty answers an empty 200.
const FAKE_HANDLER: &str = r#"#!/usr/bin/env python3
import json, os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args):
        pass
    def reply(self, status, body, content_type="application/json"):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        if os.environ.get("FAKE_NEVER_READY"):
            time.sleep(3600)
        self.reply(200, "ok", "text/plain")
    def do_POST(self):
        chunked = self.headers.get("Transfer-Encoding", "").lower() == "chunked"
        raw = b""
        if chunked:
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                raw += self.rfile.read(size)
                self.rfile.readline()
        else:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        invocation = json.loads(raw)
        name = self.path.strip("/")
        if name == "Slow":
            time.sleep(30)
        if name == "Empty":
            return self.reply(200, "")
        seen = {
            "chunked": chunked,
            "contentLength": self.headers.get("Content-Length"),
            "contentType": self.headers.get("Content-Type"),
            "invocationId": self.headers.get("X-Azure-Functions-InvocationId") is not None,
            "pid": os.getpid(),
            "body": invocation["Data"]["req"].get("Body"),
        }
        res = {"statusCode": 200, "headers": {"Content-Type": "application/json"}, "body": json.dumps(seen)}
        self.reply(200, json.dumps({"Outputs": {"res": res}, "Logs": [], "ReturnValue": None}))

ThreadingHTTPServer(("127.0.0.1", int(os.environ["FUNCTIONS_CUSTOMHANDLER_PORT"])), Handler).serve_forever()
"#;

struct App(PathBuf);

impl Drop for App {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn app(forwarding: bool) -> App {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "devhost-quirks-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let host = json!({
        "version": "2.0",
        "customHandler": { "description": { "defaultExecutablePath": "handler", "workingDirectory": "", "arguments": [] },
                           "enableForwardingHttpRequest": forwarding },
        "functionTimeout": "00:00:02",
        "extensions": { "http": { "routePrefix": "api" } }
    });
    std::fs::write(dir.join("host.json"), host.to_string()).unwrap();
    let handler = dir.join("handler");
    std::fs::write(&handler, FAKE_HANDLER).unwrap();
    std::process::Command::new("chmod")
        .args(["755", handler.to_str().unwrap()])
        .status()
        .unwrap();
    for name in ["Echo", "Slow", "Empty"] {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        let function = json!({ "bindings": [
            { "name": "req", "type": "httpTrigger", "direction": "in", "authLevel": "function", "methods": ["post"], "route": name.to_lowercase() },
            { "name": "res", "type": "http", "direction": "out" }
        ]});
        std::fs::write(dir.join(name).join("function.json"), function.to_string()).unwrap();
    }
    App(dir)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Devhost {
    child: std::process::Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Devhost {
    fn drop(&mut self) {
        stop::stop_devhost(&mut self.child);
        let _ = std::fs::remove_file(&self.log);
    }
}

impl Devhost {
    fn start(app: &Path, env: &[(&str, &str)]) -> Devhost {
        let port = free_port();
        let log = app.with_extension("log");
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_devhost"))
            .args([
                "--script-root",
                app.to_str().unwrap(),
                "--port",
                &port.to_string(),
            ])
            .env("AzureWebJobsStorage", "UseDevelopmentStorage=true")
            .envs(env.iter().copied())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        let host = Devhost { child, port, log };
        host.wait_for("started handler pid", 1, Duration::from_secs(20));
        host
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_for(&self, text: &str, times: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.log().matches(text).count() < times {
            assert!(
                Instant::now() < deadline,
                "waited for {text:?} x{times}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    async fn post(&self, route: &str, body: &str) -> (u16, String) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match reqwest::Client::new()
                .post(format!("http://127.0.0.1:{}/api/{route}", self.port))
                .body(body.to_string())
                .send()
                .await
            {
                Ok(response) => {
                    return (response.status().as_u16(), response.text().await.unwrap())
                }
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
}

#[tokio::test]
async fn quirk_16_the_request_to_the_handler_is_chunked_json_with_the_host_headers() {
    let app = app(false);
    let host = Devhost::start(&app.0, &[]);
    let (status, body) = host.post("echo", r#"{"a":1}"#).await;
    assert_eq!(status, 200, "{}", host.log());
    let seen: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(seen["chunked"], true);
    assert_eq!(seen["contentLength"], Value::Null);
    assert_eq!(seen["contentType"], "application/json; charset=utf-8");
    assert_eq!(seen["invocationId"], true);
    assert_eq!(
        seen["body"], r#"{"a":1}"#,
        "a body with Content-Length reaches the handler"
    );
}

#[tokio::test]
async fn quirk_11_a_function_timeout_restarts_the_handler() {
    let app = app(false);
    let host = Devhost::start(&app.0, &[]);
    let started = Instant::now();
    let (status, _) = host.post("slow", "{}").await;
    assert_eq!(status, 500);
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "the timeout is 2 s"
    );
    host.wait_for("started handler pid", 2, Duration::from_secs(20));
    assert!(
        host.log().contains("A function timeout has occurred"),
        "{}",
        host.log()
    );
    // The new process serves the next call.
    assert_eq!(host.post("echo", "{}").await.0, 200);
}

#[tokio::test]
async fn quirk_6_an_empty_answer_hangs_until_the_timeout_and_restarts() {
    let app = app(false);
    let host = Devhost::start(&app.0, &[]);
    let started = Instant::now();
    let (status, _) = host.post("empty", "{}").await;
    assert_eq!(status, 500);
    assert!(started.elapsed() >= Duration::from_secs(2));
    host.wait_for("started handler pid", 2, Duration::from_secs(20));
}

#[test]
fn quirk_13_and_12_a_handler_that_never_answers_get_is_restarted_then_the_host_gives_up() {
    let app = app(false);
    let port = free_port().to_string();
    let started = Instant::now();
    let output: Output = Command::new(env!("CARGO_BIN_EXE_devhost"))
        .args(["--script-root", app.0.to_str().unwrap(), "--port", &port])
        .env("FAKE_NEVER_READY", "1")
        .env("DEVHOST_INITIALIZATION_TIMEOUT", "00:00:01")
        .env("AzureWebJobsStorage", "UseDevelopmentStorage=true")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{log}");
    assert_eq!(log.matches("started handler pid").count(), 3, "{log}");
    assert!(log.contains("did not answer GET /"), "{log}");
    assert!(
        log.contains("Exceeded http worker restart retry count"),
        "{log}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn quirk_10_forwarding_mode_is_refused_with_a_reason() {
    let app = app(true);
    let output = Command::new(env!("CARGO_BIN_EXE_devhost"))
        .args([
            "--script-root",
            app.0.to_str().unwrap(),
            "--port",
            &free_port().to_string(),
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("enableForwardingHttpRequest"));
}
