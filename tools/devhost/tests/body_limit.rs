//! Request bodies over the limit (1 MiB for a scan request) are refused with a 413 that names
//! the body, whatever their size up to what the host itself takes (100 MiB), through devhost
//! as the Functions host would deliver them: the handler must answer such an invocation with
//! an HTTP answer of its own, not refuse the invocation (which the host turns into a 500).

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_of_any_size_over_the_limit_are_refused_with_413() {
    let host = Host::start(1, &[]);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let url = format!("http://127.0.0.1:{}/api/scans", host.port);
    for mib in [2, 31, 32, 33, 99] {
        let pad = "x".repeat(mib << 20);
        let body = format!(
            "{{\"table\":\"sometable\",\"action\":{{\"type\":\"count\"}},\"pad\":\"{pad}\"}}"
        );
        let answer = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        let text = answer.text().await.unwrap();
        assert_eq!(status, 413, "{mib} MiB: {}", &text[..text.len().min(300)]);
        let error: Value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{mib} MiB: not JSON: {text:.300}"));
        assert_eq!(error["error"]["field"], "body", "{mib} MiB: {error}");
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .contains("the limit is 1048576"),
            "{error}"
        );
    }
    // The handler keeps serving.
    let list = client
        .get(format!("http://127.0.0.1:{}/api/scans", host.port))
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), 200);
}
