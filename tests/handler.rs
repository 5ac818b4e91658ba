//! The custom handler against Azurite, called as the Functions host calls it: the protocol's
//! envelopes, and every kind of request it must refuse or answer (starts, lists, the ledger's
//! account). What steps do to tables is in `handler_actions.rs`.

mod common;

use common::host::TestHost;
use common::{connection_string, fresh_table, unique_name};
use serde_json::{json, Value};
use tablescan::storage::table::entity::Entity;

/// The real host's captured queue-trigger request for the message `aaaaa` (Azure, 2022).
const CAPTURED_QUEUE_STRING: &str = r#"{"Data":{"inMsg":"\"aaaaa\""},"Metadata":{"DequeueCount":"1","ExpirationTime":"2022-06-20T06:00:06+00:00","Id":"\"a0004923-f050-417a-9742-6d7c7b984134\"","InsertionTime":"2022-06-13T06:00:06+00:00","NextVisibleTime":"2022-06-13T06:10:18+00:00","PopReceipt":"\"AgAAAAMAAAAAAAAA8d5gQex+2AE=\"","sys":{"MethodName":"queue","UtcNow":"2022-06-13T06:00:18.1974545Z","RandGuid":"d9ba2785-ee1a-4260-a83b-f57cb54b969e"}}}"#;

/// The real host's captured payload-mode HTTP request (trimmed identities), body
/// `{"name":"Anjana","age":12}` whose fields leak into Metadata.
const CAPTURED_HTTP_PAYLOAD: &str = r#"{"Data":{"req":{"Url":"https://bal-dev.azurewebsites.net/api/hello","Method":"POST","Query":{},"Headers":{"Content-Type":["application/json"],"Content-Length":["41"],"Host":["bal-dev.azurewebsites.net"]},"Params":{},"Identities":[{"AuthenticationType":null,"IsAuthenticated":false,"Actor":null,"BootstrapContext":null,"Claims":[],"Label":null,"Name":null,"NameClaimType":"http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name","RoleClaimType":"http://schemas.microsoft.com/ws/2008/06/identity/claims/role"}],"Body":"{\n    \"name\" : \"Anjana\",\n    \"age\" : 12\n}"}},"Metadata":{"name":"\"Anjana\"","age":"\"12\"","Query":{},"Headers":{"Content-Type":"application/json","Content-Length":"41","Host":"bal-dev.azurewebsites.net"},"sys":{"MethodName":"post-hello-payload-jsonToJson","UtcNow":"2022-06-20T07:50:50.4482488Z","RandGuid":"3e4ea15e-0000-0000-0000-000000000000"}}}"#;

#[tokio::test]
async fn the_root_path_answers_for_the_host_readiness_check() {
    let host = TestHost::start(&[]).await;
    let response = reqwest::get(format!("http://{}/", host.address))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn the_captured_http_payload_gets_an_exact_400_envelope() {
    let host = TestHost::start(&[]).await;
    let answer = host
        .post_raw("StartScan", CAPTURED_HTTP_PAYLOAD.to_string())
        .await;
    // The host is strict here: 200, JSON content type, an object with Outputs.res whose body is
    // a string and whose headers carry the content type.
    assert_eq!(answer.status, 200);
    assert_eq!(answer.content_type, "application/json; charset=utf-8");
    assert_eq!(
        answer.text,
        r#"{"Logs":[],"Outputs":{"res":{"body":"{\"error\":{\"field\":\"table\",\"message\":\"is required\"}}","headers":{"Content-Type":"application/json; charset=utf-8"},"statusCode":400}},"ReturnValue":null}"#
    );
}

#[tokio::test]
async fn the_captured_queue_string_fails_alone_and_shows_in_the_scans_list() {
    let host = TestHost::start(&[]).await;
    // Bound under its real binding name the message is found but is not a work item.
    let body = CAPTURED_QUEUE_STRING.replace("\"inMsg\"", "\"item\"");
    let answer = host.post_raw("ScanRange", body).await;
    assert_eq!(answer.status, 422, "{}", answer.text);
    assert_eq!(answer.content_type, "application/json; charset=utf-8");
    assert!(
        answer.json["error"].as_str().unwrap().contains("not JSON"),
        "{}",
        answer.text
    );
    let list = host.http("ListScans", "GET", "/api/scans", &[], None).await;
    let (status, body) = list.res();
    assert_eq!(status, 200);
    let rejected = body["rejectedMessages"].as_array().unwrap();
    assert!(
        rejected
            .iter()
            .any(|r| r["messageId"] == "a0004923-f050-417a-9742-6d7c7b984134"
                && r["sample"] == "aaaaa"),
        "{body}"
    );

    // Under another binding name, the handler says what is missing.
    let missing = host
        .post_raw("ScanRange", CAPTURED_QUEUE_STRING.to_string())
        .await;
    assert_eq!(missing.status, 422);
    assert!(missing.text.contains("Data.item"), "{}", missing.text);
}

#[tokio::test]
async fn a_json_message_with_leaking_fields_still_runs_its_step() {
    // A real work item is a JSON object, so its fields (v, scan, depth, task) leak into
    // Metadata exactly as the host does it; the handler must not be confused by them.
    let source = fresh_table("leaky").await;
    source.insert(&Entity::new("p", "r")).await.unwrap();
    let mut host = TestHost::start(&[]).await;
    let (start, id) = host
        .start_scan(&json!({"table": source.name(), "action": {"type": "count"}}))
        .await;
    let root = start.messages("rangeItems");
    assert_eq!(root.len(), 1);
    let answer = host.deliver("ScanRange", &root[0], 1).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.content_type, "application/json; charset=utf-8");
    let (_, status) = host.status(&id).await;
    assert_eq!(status["progress"]["rowsRead"], 1, "{status}");
    assert_eq!(status["state"], "succeeded", "{status}");
}

async fn start(host: &TestHost, body: String, key: String) -> common::host::Answer {
    host.http_with_headers(
        "StartScan",
        "POST",
        "/api/scans",
        &[],
        Some(&body),
        &[("Idempotency-Key", &key)],
        &[],
    )
    .await
}

/// A start retried with the same `Idempotency-Key` answers the same scan: its first work item
/// is sent again while no step has taken it (the first answer may have been lost), never once
/// a step has; the key with another request is a conflict; a bad key is a 400 naming it.
#[tokio::test]
async fn a_start_retried_with_the_same_key_makes_one_scan() {
    let source = fresh_table("idempotent").await;
    common::load(&source, &[Entity::new("p", "r")]).await;
    let mut host = TestHost::start(&[]).await;
    let request = json!({"table": source.name(), "action": {"type": "count"}}).to_string();
    let key = unique_name("key-");
    let first = start(&host, request.clone(), key.clone()).await;
    let (status, body) = first.res();
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    // The first answer's message is lost (the host failed to write it); the client retries.
    let retried = start(&host, request.clone(), key.clone()).await;
    assert_eq!(retried.res().1["id"], id.as_str());
    assert_eq!(
        retried.messages("rangeItems").len(),
        1,
        "the root is sent again"
    );
    host.enqueue_outputs(&retried);
    host.drain().await;
    let (_, status) = host.status(&id).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(status["result"]["rows"], 1);

    let late = start(&host, request.clone(), key.clone()).await;
    assert_eq!(late.res(), (202, first.res().1.clone()));
    assert!(
        late.messages("rangeItems").is_empty(),
        "started already: nothing is sent"
    );

    let other = json!({"table": source.name(), "pageSize": 7, "action": {"type": "count"}});
    let conflict = start(&host, other.to_string(), key.clone()).await;
    let (status, body) = conflict.res();
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["field"], "Idempotency-Key", "{body}");

    let bad = start(&host, request.clone(), "k".repeat(300)).await;
    let (status, body) = bad.res();
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "Idempotency-Key", "{body}");
}

/// The app's own work queues (and their poison queues) and ledger are refused as targets, and a
/// copy onto its own source; nothing is written for a refused scan. A count of the ledger is
/// a read, and allowed.
#[tokio::test]
async fn the_apps_own_storage_and_a_copy_onto_itself_are_refused() {
    let source = fresh_table("guarded").await;
    let ledger = unique_name("guardledger");
    let host = TestHost::start(&[("TABLESCAN_LEDGER_TABLE", ledger.as_str())]).await;
    let table = source.name();
    let enqueue =
        |queue: &str| json!({"table": table, "action": {"type": "enqueue", "queue": queue}});
    let cases = vec![
        (enqueue("tablescan-range"), "action.queue"),
        (enqueue("tablescan-partition-poison"), "action.queue"),
        (
            json!({"table": table, "action": {"type": "enqueue", "queues": ["fine1", "tablescan-range-poison"]}}),
            "action.queues",
        ),
        (
            json!({"table": table, "action": {"type": "partition-keys", "queue": "tablescan-partition"}}),
            "action.queue",
        ),
        (
            json!({"table": table, "action": {"type": "copy", "table": ledger}}),
            "action.table",
        ),
        (
            json!({"table": table, "action": {"type": "copy", "table": table.to_uppercase()}}),
            "action.table",
        ),
        (
            json!({"table": ledger, "action": {"type": "delete"}}),
            "table",
        ),
    ];
    for (request, field) in cases {
        let body = request.to_string();
        let (status, error) = host
            .http("StartScan", "POST", "/api/scans", &[], Some(&body))
            .await
            .res();
        assert_eq!(status, 400, "{body}: {error}");
        assert_eq!(error["error"]["field"], field, "{body}: {error}");
    }
    assert!(host.queued.is_empty(), "{:?}", host.queued);
    let fine = json!({"table": table, "action": {"type": "enqueue", "queue": unique_name("fine")}});
    let (answer, _) = host.start_scan(&fine).await;
    assert_eq!(answer.res().0, 202);
    let count_ledger = json!({"table": ledger, "action": {"type": "count"}});
    let (answer, _) = host.start_scan(&count_ledger).await;
    assert_eq!(answer.res().0, 202);
}

#[tokio::test]
async fn every_kind_of_bad_request_is_a_400_naming_the_field() {
    let source = fresh_table("badreq").await;
    let host = TestHost::start(&[
        ("Elsewhere", "UseDevelopmentStorage=true"),
        ("Broken", "AccountName=x"),
    ])
    .await;
    let table = source.name();
    let cases: Vec<(String, &str)> = vec![
        ("{".into(), "body"),
        ("[]".into(), "body"),
        (json!({"action": {"type": "count"}}).to_string(), "table"),
        (
            json!({"table": "bad-name", "action": {"type": "count"}}).to_string(),
            "table",
        ),
        (
            json!({"table": "missingtable1", "action": {"type": "count"}}).to_string(),
            "table",
        ),
        (json!({"table": table}).to_string(), "action"),
        (
            json!({"table": table, "action": {"type": "shred"}}).to_string(),
            "action.type",
        ),
        (
            json!({"table": table, "action": {"type": "copy"}}).to_string(),
            "action.table",
        ),
        (
            json!({"table": table, "action": {"type": "enqueue", "queue": "UPPER"}}).to_string(),
            "action.queue",
        ),
        (
            json!({"table": table, "connection": "Nope", "action": {"type": "count"}}).to_string(),
            "connection",
        ),
        (
            json!({"table": table, "connection": "Broken", "action": {"type": "count"}})
                .to_string(),
            "connection",
        ),
        (
            json!({"table": table, "connection": connection_string(), "action": {"type": "count"}})
                .to_string(),
            "connection",
        ),
        (
            json!({"table": table, "pageSize": 0, "action": {"type": "count"}}).to_string(),
            "pageSize",
        ),
        (
            json!({"table": table, "strategy": "random", "action": {"type": "count"}}).to_string(),
            "strategy",
        ),
        (
            json!({"table": table, "select": ["ok", "not ok"], "action": {"type": "count"}})
                .to_string(),
            "select[1]",
        ),
        (
            json!({"table": table, "scope": {"prefix": "a#b"}, "action": {"type": "count"}})
                .to_string(),
            "scope.prefix",
        ),
        (
            json!({"table": table, "action": {"type": "count"}, "priority": 1}).to_string(),
            "priority",
        ),
        (
            format!(r#"{{"table":"{table}","action":{{"type":"count","type":"delete"}}}}"#),
            "action.type",
        ),
        (
            json!({"table": table, "scope": {"after": "b", "before": "a"}, "action": {"type": "count"}})
                .to_string(),
            "scope.before",
        ),
        (
            json!({"table": table, "select": ["Name"], "action": {"type": "delete"}}).to_string(),
            "select",
        ),
    ];
    for (body, field) in cases {
        let answer = host
            .http("StartScan", "POST", "/api/scans", &[], Some(&body))
            .await;
        assert_eq!(answer.status, 200, "the host must get a normal answer");
        let (status, error) = answer.res();
        assert_eq!(status, 400, "{body}: {error}");
        assert_eq!(error["error"]["field"], field, "{body}: {error}");
        // A connection string pasted as a connection name is never echoed back.
        assert!(
            !error
                .to_string()
                .contains(tablescan::storage::connection_string::EMULATOR_KEY),
            "{error}"
        );
    }
    let no_body = host
        .http("StartScan", "POST", "/api/scans", &[], None)
        .await;
    assert_eq!(no_body.res().0, 400);
    let huge = format!(
        "{{\"table\":\"{}\",\"pad\":\"{}\"}}",
        table,
        "x".repeat(2 * 1024 * 1024)
    );
    assert_eq!(
        host.http("StartScan", "POST", "/api/scans", &[], Some(&huge))
            .await
            .res()
            .0,
        413
    );
    for id in ["0123456789abcdef0123456789abcdef", "../etc", "~index"] {
        assert_eq!(host.status(id).await.0, 404, "{id}");
        let cancel = host
            .http("CancelScan", "POST", "/x", &[("id", id)], None)
            .await;
        assert_eq!(cancel.res().0, 404);
    }
    // The handler keeps serving after all that.
    host.assert_serving().await;
}

#[tokio::test]
async fn wrong_types_out_of_range_values_huge_and_deep_bodies_are_refused_clearly() {
    let source = fresh_table("badtypes").await;
    let host = TestHost::start(&[]).await;
    let table = source.name();
    let count = json!({"type": "count"});
    let cases: Vec<(Value, &str)> = vec![
        (json!({"table": 5, "action": count}), "table"),
        (json!({"table": "a".repeat(64), "action": count}), "table"),
        (json!({"table": table, "action": "count"}), "action"),
        (
            json!({"table": table, "action": {"type": 1}}),
            "action.type",
        ),
        (
            json!({"table": table, "action": {"type": "copy", "table": ["x"]}}),
            "action.table",
        ),
        (
            json!({"table": table, "pageSize": "10", "action": count}),
            "pageSize",
        ),
        (
            json!({"table": table, "pageSize": 1001, "action": count}),
            "pageSize",
        ),
        (
            json!({"table": table, "pageSize": -1, "action": count}),
            "pageSize",
        ),
        (
            json!({"table": table, "select": "a", "action": count}),
            "select",
        ),
        (
            json!({"table": table, "scope": [], "action": count}),
            "scope",
        ),
        (
            json!({"table": table, "scope": {"prefix": "x".repeat(1100)}, "action": count}),
            "scope.prefix",
        ),
        (
            json!({"table": table, "scope": {"after": 3}, "action": count}),
            "scope.after",
        ),
        (
            json!({"table": table, "connection": 7, "action": count}),
            "connection",
        ),
        (
            json!({"table": table, "action": {"type": "enqueue", "queue": "q".repeat(64)}}),
            "action.queue",
        ),
    ];
    for (body, field) in cases {
        let body = body.to_string();
        let (status, error) = host
            .http("StartScan", "POST", "/api/scans", &[], Some(&body))
            .await
            .res();
        assert_eq!(status, 400, "{body:.200}: {error}");
        assert_eq!(error["error"]["field"], field, "{body:.200}: {error}");
    }
    // Nested 100,000 deep: refused as a body, not a stack overflow.
    let deep = "[".repeat(100_000);
    let (status, error) = host
        .http("StartScan", "POST", "/api/scans", &[], Some(&deep))
        .await
        .res();
    assert_eq!(
        (status, &error["error"]["field"]),
        (400, &json!("body")),
        "{error}"
    );
    // Ten megabytes.
    let huge = format!(
        "{{\"table\":\"{table}\",\"pad\":\"{}\"}}",
        "x".repeat(10 << 20)
    );
    let answer = host
        .http("StartScan", "POST", "/api/scans", &[], Some(&huge))
        .await;
    assert!(
        matches!(answer.status, 413) || answer.res().0 == 413,
        "{} {}",
        answer.status,
        answer.text.chars().take(200).collect::<String>()
    );
    // An invocation that is not UTF-8 at all, straight to the handler.
    let raw = reqwest::Client::new()
        .post(format!("http://{}/StartScan", host.address))
        .header("content-type", "application/json")
        .body(vec![0xff, 0xfe, b'{', 0xc3])
        .send()
        .await
        .unwrap();
    assert!(raw.status().is_client_error(), "{}", raw.status());
    host.assert_serving().await;
}

#[tokio::test]
async fn quotes_in_a_scope_cannot_change_the_meaning_of_the_query() {
    let source = fresh_table("inject").await;
    let rows = vec![
        Entity::new("a", "1"),
        Entity::new("b", "1"),
        Entity::new("x' or PartitionKey ne 'x", "1"),
        Entity::new("x' or PartitionKey ne 'x", "2"),
        Entity::new("x'", "1"),
    ];
    common::load(&source, &rows).await;
    let mut host = TestHost::start(&[]).await;
    for (scope, rows, partitions) in [
        // Each would select every row if the quote closed the literal.
        (json!({"prefix": "x' or PartitionKey ne 'x"}), 2, 1),
        (json!({"prefix": "' or 1 eq 1 or '"}), 0, 0),
        (
            json!({"after": "x'", "before": "y' or PartitionKey ne '"}),
            2,
            1,
        ),
        (json!({"before": "b' or PartitionKey gt '"}), 2, 2),
    ] {
        let id = host
            .run_scan(&json!({"table": source.name(), "scope": scope, "action": {"type": "count"}}))
            .await;
        let (_, body) = host.status(&id).await;
        assert_eq!(body["state"], "succeeded", "{body}");
        assert_eq!(
            body["result"],
            json!({"rows": rows, "partitions": partitions}),
            "{scope}: {body}"
        );
    }
}

#[tokio::test]
async fn keys_in_a_scope_are_checked_against_the_services_rules() {
    let source = fresh_table("keyrules").await;
    let host = TestHost::start(&[]).await;
    let table = source.name();
    let start = |scope: Value| {
        json!({"table": table, "scope": scope, "action": {"type": "count"}}).to_string()
    };
    // 1 KiB (512 UTF-16 units) is the limit; a supplementary character counts twice.
    for (prefix, accepted) in [
        ("a".repeat(512), true),
        ("a".repeat(513), false),
        ("\u{1F600}".repeat(256), true),
        (format!("{}a", "\u{1F600}".repeat(256)), false),
    ] {
        let (status, body) = host
            .http(
                "StartScan",
                "POST",
                "/api/scans",
                &[],
                Some(&start(json!({"prefix": prefix}))),
            )
            .await
            .res();
        if accepted {
            assert_eq!(status, 202, "{body}");
        } else {
            assert_eq!(
                (status, &body["error"]["field"]),
                (400, &json!("scope.prefix")),
                "{body}"
            );
        }
    }
    // Every character the service refuses in keys, in each place a key can be given.
    for c in ['/', '\\', '#', '?', '\u{0}', '\u{1F}', '\u{7F}', '\u{9F}'] {
        for field in ["prefix", "after", "before"] {
            let (status, body) = host
                .http(
                    "StartScan",
                    "POST",
                    "/api/scans",
                    &[],
                    Some(&start(json!({ field: format!("a{c}b") }))),
                )
                .await
                .res();
            assert_eq!(status, 400, "{c:?} in {field}: {body}");
            assert_eq!(body["error"]["field"], format!("scope.{field}"), "{body}");
        }
    }
    // A lone surrogate cannot be a key (JSON allows the escape; a Rust string cannot hold it).
    let lone = format!(
        "{{\"table\":\"{table}\",\"scope\":{{\"prefix\":\"a\\ud800b\"}},\"action\":{{\"type\":\"count\"}}}}"
    );
    let (status, body) = host
        .http("StartScan", "POST", "/api/scans", &[], Some(&lone))
        .await
        .res();
    assert_eq!(status, 400, "{body}");
    host.assert_serving().await;
}

async fn list(host: &TestHost, query: &[(&str, &str)]) -> (u16, Value) {
    host.http_with_headers("ListScans", "GET", "/api/scans", &[], None, &[], query)
        .await
        .res()
}

/// The scans list pages newest first with a continuation, filters by state and shows each
/// scan's state and counts; a finished scan's ledger rows can be removed, and the record of
/// refused messages cleared; bad parameters are 400s naming them.
#[tokio::test]
async fn scans_are_listed_in_pages_filtered_by_state_and_removed_when_finished() {
    let source = fresh_table("listing").await;
    common::load(&source, &[Entity::new("p", "r")]).await;
    let mut host = TestHost::start(&[]).await;
    let count = json!({"table": source.name(), "action": {"type": "count"}});
    let mut finished = Vec::new();
    for _ in 0..3 {
        finished.push(host.run_scan(&count).await);
    }
    let (_, waiting) = host.start_scan(&count).await;

    let (status, first) = list(&host, &[("limit", "2")]).await;
    assert_eq!(status, 200, "{first}");
    let ids = |page: &Value| -> Vec<String> {
        page["scans"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        ids(&first),
        vec![waiting.clone(), finished[2].clone()],
        "newest first"
    );
    assert_eq!(first["scans"][0]["state"], "pending");
    assert_eq!(first["scans"][1]["state"], "succeeded");
    assert_eq!(first["scans"][1]["progress"]["rowsActed"], 1);
    let next = first["next"].as_str().unwrap().to_string();
    let (_, second) = list(&host, &[("limit", "2"), ("after", &next)]).await;
    assert_eq!(ids(&second), vec![finished[1].clone(), finished[0].clone()]);
    let (_, pending) = list(&host, &[("state", "pending")]).await;
    assert_eq!(ids(&pending), vec![waiting.clone()]);
    let (_, status) = host.status(&waiting).await;
    assert_eq!(status["activity"]["stepsRunning"], 0, "{status}");
    assert_eq!(status["activity"]["stepsAbandoned"], 0, "{status}");
    assert!(
        status["activity"]["secondsSinceLastStep"].as_u64().unwrap() < 60,
        "{status}"
    );
    // Its root item waits, written moments ago; nothing was abandoned.
    assert!(
        status["activity"]["oldestPendingSeconds"].as_u64().unwrap() < 60,
        "{status}"
    );
    assert!(
        status["activity"].get("abandonedReturnBy").is_none(),
        "{status}"
    );
    let (_, done) = host.status(&finished[0]).await;
    assert!(
        done.get("activity").is_none(),
        "only scans in flight: {done}"
    );

    for (query, field) in [
        (("limit", "0"), "limit"),
        (("limit", "many"), "limit"),
        (("state", "asleep"), "state"),
        (("after", "x' or 'a"), "after"),
    ] {
        let (status, body) = list(&host, &[query]).await;
        assert_eq!(status, 400, "{query:?}: {body}");
        assert_eq!(body["error"]["field"], field, "{body}");
    }

    let delete = |id: String| {
        let host = &host;
        async move {
            host.http("DeleteScan", "DELETE", "/x", &[("id", &id)], None)
                .await
                .res()
        }
    };
    let (status, body) = delete(waiting.clone()).await;
    assert_eq!(status, 409, "a scan not finished stays: {body}");
    let (status, body) = delete(finished[1].clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["more"], false);
    assert!(
        body["removedRows"].as_u64().unwrap() >= 18,
        "scan, shards, done row: {body}"
    );
    assert_eq!(host.status(&finished[1]).await.0, 404);
    let (_, all) = list(&host, &[]).await;
    assert_eq!(
        ids(&all),
        vec![waiting, finished[2].clone(), finished[0].clone()]
    );

    let refused = host
        .post_raw(
            "ScanRange",
            host.delivery("ScanRange", "not a work item", 1, 9),
        )
        .await;
    assert_eq!(refused.status, 422);
    let (_, with_rejected) = list(&host, &[]).await;
    assert_eq!(
        with_rejected["rejectedMessages"].as_array().unwrap().len(),
        1
    );
    let cleared = host
        .http("ClearRejected", "DELETE", "/api/rejected", &[], None)
        .await;
    assert_eq!(cleared.res().0, 200, "{}", cleared.text);
    let (_, after) = list(&host, &[]).await;
    assert_eq!(after["rejectedMessages"], json!([]), "{after}");
}

/// The ledger lives in the account `TABLESCAN_LEDGER_CONNECTION` names: a scan runs with it
/// set to a connection of its own, and a start fails clearly when that setting names nothing.
#[tokio::test]
async fn the_ledger_can_live_in_an_account_of_its_own() {
    let source = fresh_table("ledgeraccount").await;
    common::load(&source, &[Entity::new("p", "r")]).await;
    let count = json!({"table": source.name(), "action": {"type": "count"}});
    let connection = connection_string();
    let mut host = TestHost::start(&[
        ("TABLESCAN_LEDGER_CONNECTION", "LEDGER_STORAGE"),
        ("LEDGER_STORAGE", connection.as_str()),
    ])
    .await;
    let id = host.run_scan(&count).await;
    let (_, status) = host.status(&id).await;
    assert_eq!(status["state"], "succeeded", "{status}");

    let host = TestHost::start(&[("TABLESCAN_LEDGER_CONNECTION", "NO_SUCH_SETTING")]).await;
    let answer = host
        .http(
            "StartScan",
            "POST",
            "/api/scans",
            &[],
            Some(&count.to_string()),
        )
        .await;
    let (code, body) = answer.res();
    assert_eq!(code, 503, "{body}");
    assert!(body.to_string().contains("NO_SUCH_SETTING"), "{body}");
}
