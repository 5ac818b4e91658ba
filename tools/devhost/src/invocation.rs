//! The custom-handler protocol seen from the host's side: the request bodies the real Functions
//! host builds, and what it makes of the handler's answers. Every quirk of the real host that a
//! handler must survive is reproduced here on purpose (see the golden tests at the bottom).

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::{json, Map, Value};

/// A queue message as the trigger hands it over.
#[derive(Debug, Clone)]
pub struct QueueMessage {
    pub id: String,
    pub pop_receipt: String,
    pub dequeue_count: u32,
    /// RFC 1123 times as the Queue service returns them.
    pub insertion_time: String,
    pub expiration_time: String,
    pub next_visible_time: String,
    /// The decoded message text.
    pub text: String,
}

/// Turns an RFC 1123 time into the host's second-precision ISO form (`+00:00`).
pub fn host_date(rfc1123: &str) -> String {
    let format = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    match time::PrimitiveDateTime::parse(rfc1123, format) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}+00:00",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        Err(_) => rfc1123.to_string(),
    }
}

pub fn sys(function: &str) -> Value {
    let now = time::OffsetDateTime::now_utc();
    json!({
        "MethodName": function,
        "UtcNow": format!("{}", tablescan::storage::table::entity::EdmDateTime::new(now)),
        "RandGuid": uuid::Uuid::new_v4().to_string(),
    })
}

/// A string value the way the host serialises it: JSON-encoded once more.
fn double_encoded(text: &str) -> Value {
    Value::String(serde_json::to_string(text).expect("strings serialise"))
}

/// Copies the top-level fields of a JSON object text into binding data, as the host does:
/// scalars as JSON-encoded strings, objects as they are, arrays left out; same names overwritten.
pub fn leak_fields(text: &str, metadata: &mut Map<String, Value>) {
    let trimmed = text.trim();
    let looks_like_json = (trimmed.starts_with('{') && trimmed.ends_with('}'))
        || (trimmed.starts_with('[') && trimmed.ends_with(']'));
    if !looks_like_json {
        return;
    }
    let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(trimmed) else {
        return;
    };
    for (key, value) in fields {
        let leaked = match value {
            Value::Array(_) | Value::Null => continue,
            Value::Object(_) => value,
            Value::String(s) => double_encoded(&s),
            Value::Bool(b) => double_encoded(if b { "True" } else { "False" }),
            Value::Number(n) => double_encoded(&n.to_string()),
        };
        metadata.insert(key, leaked);
    }
}

/// The invocation body for a queue-triggered function.
pub fn queue_request(
    function: &str,
    binding: &str,
    binary: bool,
    message: &QueueMessage,
    raw: &[u8],
) -> Value {
    let data = if binary {
        Value::String(base64::engine::general_purpose::STANDARD.encode(raw))
    } else {
        double_encoded(&message.text)
    };
    let mut metadata = Map::new();
    metadata.insert(
        "DequeueCount".into(),
        Value::String(message.dequeue_count.to_string()),
    );
    metadata.insert(
        "ExpirationTime".into(),
        Value::String(host_date(&message.expiration_time)),
    );
    metadata.insert("Id".into(), double_encoded(&message.id));
    metadata.insert(
        "InsertionTime".into(),
        Value::String(host_date(&message.insertion_time)),
    );
    metadata.insert(
        "NextVisibleTime".into(),
        Value::String(host_date(&message.next_visible_time)),
    );
    metadata.insert("PopReceipt".into(), double_encoded(&message.pop_receipt));
    if !binary {
        leak_fields(&message.text, &mut metadata);
    }
    metadata.insert("sys".into(), sys(function));
    let mut data_map = Map::new();
    data_map.insert(binding.to_string(), data);
    json!({ "Data": data_map, "Metadata": metadata })
}

/// An incoming HTTP request, as devhost received it.
#[derive(Debug, Clone, Default)]
pub struct IncomingHttp {
    pub url: String,
    pub method: String,
    pub query: BTreeMap<String, String>,
    pub headers: Vec<(String, String)>,
    pub params: BTreeMap<String, String>,
    pub body: Vec<u8>,
    /// The request carried a Content-Length header (the host drops bodies without one).
    pub has_content_length: bool,
}

/// The invocation body for an HTTP-triggered function in payload mode.
pub fn http_request(function: &str, binding: &str, request: &IncomingHttp) -> Value {
    let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in &request.headers {
        headers.entry(name.clone()).or_default().push(value.clone());
    }
    let mut req = json!({
        "Url": request.url,
        "Method": request.method,
        "Query": request.query,
        "Headers": headers,
        "Params": request.params,
        "Identities": [{
            "AuthenticationType": null, "IsAuthenticated": false, "Actor": null, "BootstrapContext": null,
            "Claims": [], "Label": null, "Name": null,
            "NameClaimType": "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name",
            "RoleClaimType": "http://schemas.microsoft.com/ws/2008/06/identity/claims/role"
        }],
    });
    let mut metadata = Map::new();
    // Bodies travel only with a Content-Length above zero; chunked bodies are dropped.
    if request.has_content_length && !request.body.is_empty() {
        let content_type = request
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-type"))
            .map(|(_, v)| v.to_ascii_lowercase())
            .unwrap_or_default();
        let body = if content_type.starts_with("application/octet-stream")
            || content_type.starts_with("multipart/")
        {
            Value::String(base64::engine::general_purpose::STANDARD.encode(&request.body))
        } else {
            let text = String::from_utf8_lossy(&request.body).into_owned();
            leak_fields(&text, &mut metadata);
            Value::String(text)
        };
        req["Body"] = body;
    }
    for (k, v) in &request.params {
        metadata.insert(k.clone(), double_encoded(v));
    }
    metadata.insert("Query".into(), json!(request.query));
    let single: BTreeMap<&String, String> = headers.iter().map(|(k, v)| (k, v.join(","))).collect();
    metadata.insert("Headers".into(), json!(single));
    metadata.insert("sys".into(), sys(function));
    let mut data = Map::new();
    data.insert(binding.to_string(), req);
    json!({ "Data": data, "Metadata": metadata })
}

/// What the host made of the handler's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The invocation succeeded: output values by binding name, and log lines.
    Success {
        outputs: Map<String, Value>,
        logs: Vec<String>,
    },
    /// The invocation failed (retried for queue triggers).
    Failure(String),
    /// An empty or `null` 200 body: the real host never completes the invocation, so it ends
    /// only at the function timeout, which also restarts the handler.
    Hang,
}

/// Reads a handler response the way the host's HTTP worker service does.
pub fn read_answer(
    status: u16,
    content_type: Option<&str>,
    body: &[u8],
    output_bindings: &[String],
) -> Answer {
    if !(200..300).contains(&status) {
        return Answer::Failure(format!("the handler answered {status}"));
    }
    let media = content_type
        .unwrap_or("application/octet-stream")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if media != "application/json" && media != "text/json" {
        return Answer::Failure(format!(
            "Invalid HttpResponseMessage: unsupported media type {media:?}"
        ));
    }
    let text = String::from_utf8_lossy(body);
    if text.trim().is_empty() || text.trim() == "null" {
        return Answer::Hang;
    }
    let Ok(Value::Object(result)) = serde_json::from_str::<Value>(&text) else {
        return Answer::Failure(format!(
            "Invalid HttpResponseMessage: the body is not a JSON object: {}",
            text.chars().take(200).collect::<String>()
        ));
    };
    let field = |name: &str| {
        result
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let mut logs = Vec::new();
    match field("Logs") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for item in items {
                match item {
                    Value::String(s) => logs.push(s),
                    Value::Null => {}
                    _ => return Answer::Failure("Logs must be an array of strings".into()),
                }
            }
        }
        Some(_) => return Answer::Failure("Logs must be an array of strings".into()),
    }
    let mut outputs = match field("Outputs") {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    let return_value = field("ReturnValue").unwrap_or(Value::Null);
    if output_bindings.iter().any(|b| b == "$return") {
        // ReturnValue overwrites Outputs["$return"].
        outputs.remove("$return");
        if !return_value.is_null() {
            outputs.insert("$return".into(), return_value);
        }
    } else if let Value::Object(fields) = return_value {
        // An object ReturnValue fans out into outputs of the same names.
        for (k, v) in fields {
            outputs.insert(k, v);
        }
    }
    // Output keys are matched to binding names exactly (case-sensitively); others are ignored.
    outputs.retain(|k, _| output_bindings.iter().any(|b| b == k));
    Answer::Success { outputs, logs }
}

/// Whether a string decodes as .NET's `Convert.FromBase64String` accepts it.
pub fn dotnet_base64(text: &str) -> Option<Vec<u8>> {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    if compact.len() % 4 != 0 {
        return None;
    }
    if !compact
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '/' || c == '=')
    {
        return None;
    }
    base64::engine::general_purpose::STANDARD
        .decode(compact)
        .ok()
}

/// The C# `ToString` of a JSON token written as a queue message.
fn token_text(value: &Value) -> Option<Vec<u8>> {
    match value {
        Value::Null => None,
        Value::String(s) => Some(s.clone().into_bytes()),
        Value::Bool(b) => Some(if *b {
            b"True".to_vec()
        } else {
            b"False".to_vec()
        }),
        Value::Number(n) => Some(n.to_string().into_bytes()),
        // JToken.ToString(): indented with two spaces, newlines as on Linux.
        Value::Object(_) | Value::Array(_) => Some(
            serde_json::to_string_pretty(value)
                .expect("JSON serialises")
                .into_bytes(),
        ),
    }
}

/// The queue messages the host writes for one output value (Queues extension, `byte[]`
/// collector): base64-looking strings are decoded, JSON-looking strings re-parsed (objects
/// re-indented, arrays split), arrays of strings written exactly.
pub fn queue_messages(value: &Value, binary: bool) -> Vec<Vec<u8>> {
    if let Value::String(s) = value {
        if !binary {
            if let Some(bytes) = dotnet_base64(s) {
                return vec![bytes];
            }
        }
        let trimmed = s.trim();
        let json_like = (trimmed.starts_with('{') && trimmed.ends_with('}'))
            || (trimmed.starts_with('[') && trimmed.ends_with(']'));
        if json_like {
            if let Ok(parsed) = serde_json::from_str::<Value>(trimmed) {
                return match parsed {
                    Value::Array(items) => items.iter().filter_map(token_text).collect(),
                    other => token_text(&other).into_iter().collect(),
                };
            }
        }
        return vec![s.clone().into_bytes()];
    }
    match value {
        Value::Array(items) => items.iter().filter_map(token_text).collect(),
        other => token_text(other).into_iter().collect(),
    }
}

/// The HTTP answer built from a `res` output.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpAnswer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Turns the `res` output into the response to the caller. `None` (no `res`) gives 200 `{}`.
pub fn http_answer(res: Option<&Value>) -> Result<HttpAnswer, String> {
    let Some(res) = res else {
        return Ok(HttpAnswer {
            status: 200,
            headers: vec![(
                "Content-Type".into(),
                "application/json; charset=utf-8".into(),
            )],
            body: b"{}".to_vec(),
        });
    };
    let Value::Object(res) = res else {
        return Err("the http output must be an object".into());
    };
    let field = |name: &str| {
        res.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    };
    let status = match field("statusCode").or_else(|| field("status")) {
        None | Some(Value::Null) => 200,
        Some(Value::Number(n)) => n.as_u64().unwrap_or(500) as u16,
        Some(Value::String(s)) => s
            .parse()
            .map_err(|_| format!("statusCode {s:?} is not a number"))?,
        Some(_) => return Err("statusCode must be a number".into()),
    };
    let mut headers: Vec<(String, String)> = match field("headers") {
        Some(Value::Object(h)) => h
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.as_str().map_or_else(|| v.to_string(), str::to_string),
                )
            })
            .collect(),
        _ => Vec::new(),
    };
    let body = match field("body") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => s.clone().into_bytes(),
        // An object body is written as indented JSON text.
        Some(other) => serde_json::to_string_pretty(other)
            .expect("JSON serialises")
            .into_bytes(),
    };
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        headers.push(("Content-Type".into(), "text/plain; charset=utf-8".into()));
    }
    Ok(HttpAnswer {
        status,
        headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    //! Golden tests: one per quirk of the real host that devhost must reproduce (the numbers
    //! follow the list of known behaviours in docs/devhost.md).

    use super::*;

    fn message(text: &str) -> QueueMessage {
        QueueMessage {
            id: "a0004923-f050-417a-9742-6d7c7b984134".into(),
            pop_receipt: "AgAAAAMAAAAAAAAA8d5gQex+2AE=".into(),
            dequeue_count: 1,
            insertion_time: "Mon, 13 Jun 2022 06:00:06 GMT".into(),
            expiration_time: "Mon, 20 Jun 2022 06:00:06 GMT".into(),
            next_visible_time: "Mon, 13 Jun 2022 06:10:18 GMT".into(),
            text: text.into(),
        }
    }

    #[test]
    fn quirk_1_queue_strings_are_double_encoded_with_string_counts_and_quoted_ids() {
        let body = queue_request("queue", "inMsg", false, &message("aaaaa"), b"aaaaa");
        assert_eq!(body["Data"]["inMsg"], "\"aaaaa\"");
        let m = &body["Metadata"];
        assert_eq!(m["DequeueCount"], "1");
        assert_eq!(m["Id"], "\"a0004923-f050-417a-9742-6d7c7b984134\"");
        assert_eq!(m["PopReceipt"], "\"AgAAAAMAAAAAAAAA8d5gQex+2AE=\"");
        assert_eq!(m["ExpirationTime"], "2022-06-20T06:00:06+00:00");
        assert_eq!(m["InsertionTime"], "2022-06-13T06:00:06+00:00");
        assert_eq!(m["NextVisibleTime"], "2022-06-13T06:10:18+00:00");
        assert_eq!(m["sys"]["MethodName"], "queue");
        assert_eq!(
            m["sys"]["UtcNow"].as_str().unwrap().len(),
            "2022-06-13T06:00:18.1974545Z".len()
        );
        assert!(m.get("QueueTrigger").is_none(), "trigger keys are dropped");
    }

    #[test]
    fn quirk_2_json_message_fields_leak_into_metadata_and_overwrite() {
        let text = r#"{"orderId":42,"customer":{"name":"Ann"},"tags":["x"],"Id":"mine","ok":true}"#;
        let body = queue_request("q", "msg", false, &message(text), text.as_bytes());
        let m = &body["Metadata"];
        assert_eq!(m["orderId"], "\"42\"");
        assert_eq!(m["customer"], json!({"name": "Ann"}));
        assert!(m.get("tags").is_none());
        assert_eq!(
            m["Id"], "\"mine\"",
            "the message's own Id overwrites the queue message id"
        );
        assert_eq!(m["ok"], "\"True\"");
        assert_eq!(body["Data"]["msg"], serde_json::to_string(text).unwrap());
    }

    #[test]
    fn quirk_3_a_top_level_base64_looking_string_is_decoded() {
        assert_eq!(
            queue_messages(&json!("aGVsbG8="), false),
            vec![b"hello".to_vec()]
        );
        assert_eq!(
            queue_messages(&json!("test"), false),
            vec![base64::engine::general_purpose::STANDARD
                .decode("test")
                .unwrap()]
        );
        assert_eq!(
            queue_messages(&json!("hello"), false),
            vec![b"hello".to_vec()]
        );
        assert_eq!(
            queue_messages(&json!("aGVsbG8="), true),
            vec![b"aGVsbG8=".to_vec()],
            "dataType binary disables it"
        );
    }

    #[test]
    fn quirk_4_json_looking_strings_are_reparsed_objects_indented_arrays_split() {
        assert_eq!(
            queue_messages(&json!("{\"id\":1}"), false),
            vec![b"{\n  \"id\": 1\n}".to_vec()]
        );
        assert_eq!(
            queue_messages(&json!("[1,2,3]"), false),
            vec![b"1".to_vec(), b"2".to_vec(), b"3".to_vec()]
        );
        assert_eq!(
            queue_messages(&json!({"id": 1}), false),
            vec![b"{\n  \"id\": 1\n}".to_vec()]
        );
        // The safe form: an array of pre-serialised strings is written exactly.
        assert_eq!(
            queue_messages(&json!(["{\"id\":1}", "aGVsbG8="]), false),
            vec![b"{\"id\":1}".to_vec(), b"aGVsbG8=".to_vec()]
        );
        assert_eq!(
            queue_messages(&json!([{"id": 1}]), false),
            vec![b"{\n  \"id\": 1\n}".to_vec()]
        );
        assert!(queue_messages(&json!([]), false).is_empty());
        assert_eq!(queue_messages(&json!(42), false), vec![b"42".to_vec()]);
        assert_eq!(queue_messages(&json!(true), false), vec![b"True".to_vec()]);
        assert!(queue_messages(&Value::Null, false).is_empty());
    }

    #[test]
    fn quirk_5_the_answer_must_be_json() {
        let outputs = ["q".to_string()];
        assert!(matches!(
            read_answer(200, Some("text/plain"), b"{}", &outputs),
            Answer::Failure(_)
        ));
        assert!(matches!(
            read_answer(200, None, b"{}", &outputs),
            Answer::Failure(_)
        ));
        assert!(matches!(
            read_answer(200, Some("application/json"), b"{oops", &outputs),
            Answer::Failure(_)
        ));
        assert!(matches!(
            read_answer(200, Some("text/json; charset=utf-8"), b"{}", &outputs),
            Answer::Success { .. }
        ));
        assert!(matches!(
            read_answer(
                200,
                Some("application/json"),
                br#"{"key1":"value1"}"#,
                &outputs
            ),
            Answer::Success { .. }
        ));
    }

    #[test]
    fn quirk_6_an_empty_or_null_200_hangs_until_the_timeout() {
        assert_eq!(
            read_answer(200, Some("application/json"), b"", &[]),
            Answer::Hang
        );
        assert_eq!(
            read_answer(200, Some("application/json"), b"null", &[]),
            Answer::Hang
        );
    }

    #[test]
    fn quirk_7_non_2xx_fails_and_drops_outputs_and_logs() {
        let body = br#"{"Outputs":{"q":["x"]},"Logs":["l"]}"#;
        assert!(matches!(
            read_answer(500, Some("application/json"), body, &["q".into()]),
            Answer::Failure(_)
        ));
        assert!(matches!(
            read_answer(404, Some("application/json"), body, &["q".into()]),
            Answer::Failure(_)
        ));
    }

    #[test]
    fn quirk_8_output_keys_are_case_sensitive_res_must_be_an_object_object_bodies_are_indented_text(
    ) {
        let answer = read_answer(
            200,
            Some("application/json"),
            br#"{"outputs":{"Q":["x"],"q":["y"]},"LOGS":["a"]}"#,
            &["q".into()],
        );
        match answer {
            Answer::Success { outputs, logs } => {
                assert_eq!(outputs.keys().collect::<Vec<_>>(), ["q"]);
                assert_eq!(logs, ["a"]);
            }
            other => panic!("{other:?}"),
        }
        assert!(
            read_answer(200, Some("application/json"), br#"{"Logs":[{"a":1}]}"#, &[])
                != Answer::Hang
        );
        assert!(http_answer(Some(&json!("SomeBlah"))).is_err());
        let object_body =
            http_answer(Some(&json!({"statusCode": "201", "body": {"a": 1}}))).unwrap();
        assert_eq!(object_body.status, 201);
        assert_eq!(object_body.body, b"{\n  \"a\": 1\n}");
        assert!(object_body
            .headers
            .contains(&("Content-Type".into(), "text/plain; charset=utf-8".into())));
        let missing = http_answer(None).unwrap();
        assert_eq!(
            (missing.status, missing.body.as_slice()),
            (200, b"{}".as_slice())
        );
        assert_eq!(
            http_answer(Some(&json!({"body": "x"}))).unwrap().status,
            200,
            "status defaults to 200"
        );
    }

    #[test]
    fn quirk_9_return_value_overrides_and_fans_out() {
        let body = br#"{"Outputs":{"$return":"old","q":["a"]},"ReturnValue":"new"}"#;
        match read_answer(
            200,
            Some("application/json"),
            body,
            &["$return".into(), "q".into()],
        ) {
            Answer::Success { outputs, .. } => assert_eq!(outputs["$return"], "new"),
            other => panic!("{other:?}"),
        }
        let body = br#"{"Outputs":{"q":["a"]},"ReturnValue":{"q":["b"]}}"#;
        match read_answer(200, Some("application/json"), body, &["q".into()]) {
            Answer::Success { outputs, .. } => assert_eq!(outputs["q"], json!(["b"])),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn quirk_15_bodies_without_content_length_are_dropped() {
        let request = IncomingHttp {
            url: "http://localhost:7071/api/scans".into(),
            method: "POST".into(),
            body: br#"{"table":"x"}"#.to_vec(),
            has_content_length: false,
            ..IncomingHttp::default()
        };
        let body = http_request("StartScan", "req", &request);
        assert!(body["Data"]["req"].get("Body").is_none());
        let with_length = IncomingHttp {
            has_content_length: true,
            headers: vec![("Content-Type".into(), "application/json".into())],
            ..request
        };
        let body = http_request("StartScan", "req", &with_length);
        assert_eq!(body["Data"]["req"]["Body"], r#"{"table":"x"}"#);
        assert_eq!(
            body["Metadata"]["table"], "\"x\"",
            "JSON body fields leak into Metadata"
        );
        assert_eq!(
            body["Data"]["req"]["Headers"]["Content-Type"],
            json!(["application/json"])
        );
        assert_eq!(
            body["Metadata"]["Headers"]["Content-Type"],
            "application/json"
        );
    }

    #[test]
    fn dotnet_base64_rules() {
        assert!(dotnet_base64("abcd1234").is_some());
        assert!(dotnet_base64("ab cd").is_some(), "whitespace is ignored");
        assert!(dotnet_base64("abc").is_none());
        assert!(dotnet_base64("{\"a\":1}").is_none());
    }
}
