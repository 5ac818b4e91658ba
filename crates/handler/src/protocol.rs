//! The custom-handler invocation protocol, as the real Functions host speaks it.
//!
//! Requests: `POST /<Function>` with `{"Data": {...}, "Metadata": {...}}`. A queue message
//! string arrives JSON-encoded twice (`"\"text\""`), `DequeueCount` is a string, `Id` and
//! `PopReceipt` carry extra quotes, and the top-level fields of a JSON message are copied into
//! `Metadata` (where they may overwrite the queue's own keys). HTTP triggers arrive as a `req`
//! object whose `Body` is the raw text (absent when the caller sent none).
//!
//! Responses: always `200` with `Content-Type: application/json` and a JSON object (an empty
//! body makes the host wait until the function times out). Queue outputs are arrays of
//! pre-serialised strings, the only form the host writes byte for byte (a bare string that looks
//! like base64 or JSON is rewritten). The HTTP answer is the `res` output, an object with a
//! string body and an explicit Content-Type. A failed invocation is a non-2xx answer, which makes
//! the host retry the message and finally move it to the poison queue.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

/// The parts of an invocation request the handler reads.
#[derive(Debug, Default)]
pub struct Invocation {
    pub data: Map<String, Value>,
    pub metadata: Map<String, Value>,
}

impl Invocation {
    /// Parses the host's request body. Property names are matched without regard to case, as the
    /// host's own (Newtonsoft) reader does.
    pub fn parse(body: &[u8]) -> Result<Invocation, String> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| format!("the invocation is not JSON: {e}"))?;
        let Value::Object(object) = value else {
            return Err("the invocation is not a JSON object".into());
        };
        let mut invocation = Invocation::default();
        for (key, value) in object {
            match (key.to_ascii_lowercase().as_str(), value) {
                ("data", Value::Object(map)) => invocation.data = map,
                ("metadata", Value::Object(map)) => invocation.metadata = map,
                _ => {}
            }
        }
        Ok(invocation)
    }

    /// The text of the queue message bound to `binding`, undoing the host's double encoding.
    pub fn queue_message(&self, binding: &str) -> Result<String, String> {
        let value = self
            .data
            .get(binding)
            .ok_or_else(|| format!("the invocation has no Data.{binding}"))?;
        match value {
            Value::String(once) => Ok(unquote(once)),
            // A JSON message bound some other way (an object or array): its JSON text.
            other => Ok(other.to_string()),
        }
    }

    /// The message's dequeue count (a string from the real host, a number in its docs).
    pub fn dequeue_count(&self) -> Option<u32> {
        match self.metadata_value("DequeueCount")? {
            Value::Number(n) => n.as_u64().map(|n| n.min(u64::from(u32::MAX)) as u32),
            Value::String(s) => unquote(s).trim().parse().ok(),
            _ => None,
        }
    }

    /// When the queue message was put (the host's `InsertionTime`, to the second).
    pub fn insertion_time(&self) -> Option<time::OffsetDateTime> {
        let Value::String(text) = self.metadata_value("InsertionTime")? else {
            return None;
        };
        time::OffsetDateTime::parse(
            unquote(text).trim(),
            &time::format_description::well_known::Rfc3339,
        )
        .ok()
    }

    /// The queue message id, without the host's extra quotes. A message's own `id` field can
    /// overwrite it (fields of JSON messages leak into Metadata), so it is only used in logs.
    pub fn message_id(&self) -> Option<String> {
        match self.metadata_value("Id")? {
            Value::String(s) => Some(unquote(s)),
            other => Some(other.to_string()),
        }
    }

    fn metadata_value(&self, name: &str) -> Option<&Value> {
        self.metadata.get(name).or_else(|| {
            self.metadata
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        })
    }

    /// The HTTP request of an HTTP-triggered invocation.
    pub fn http_request(&self, binding: &str) -> Result<HttpRequest, String> {
        let Some(Value::Object(req)) = self.data.get(binding) else {
            return Err(format!("the invocation has no Data.{binding} object"));
        };
        let get = |name: &str| {
            req.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        };
        let params = match get("Params") {
            Some(Value::Object(map)) => map
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
        let body = match get("Body") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            // A JSON body may come already parsed by some host versions.
            Some(other) => Some(other.to_string()),
        };
        let headers = match get("Headers") {
            Some(Value::Object(map)) => map
                .iter()
                .filter_map(|(k, v)| {
                    let first = match v {
                        Value::Array(values) => values.first()?.as_str()?,
                        Value::String(value) => value.as_str(),
                        _ => return None,
                    };
                    Some((k.clone(), first.to_string()))
                })
                .collect(),
            _ => Vec::new(),
        };
        let query_object = match get("Query") {
            Some(Value::Object(map)) => Some(map.clone()),
            Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(map)) => Some(map),
                _ => None,
            },
            _ => None,
        };
        let query = query_object
            .map(|map| {
                map.into_iter()
                    .filter_map(|(k, v)| Some((k, v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        Ok(HttpRequest {
            headers,
            query,
            method: get("Method")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            params,
            body,
        })
    }
}

/// Undoes one level of JSON string encoding if the text is a JSON string literal.
fn unquote(text: &str) -> String {
    if text.len() >= 2 && text.starts_with('"') && text.ends_with('"') {
        if let Ok(inner) = serde_json::from_str::<String>(text) {
            return inner;
        }
    }
    text.to_string()
}

/// The HTTP request carried by an invocation.
#[derive(Debug, Clone, Default)]
pub struct HttpRequest {
    pub method: String,
    /// Route parameters, such as `id`.
    pub params: Vec<(String, String)>,
    /// The raw body; `None` when the caller sent none.
    pub body: Option<String>,
    /// Request headers, the first value of each (the host sends arrays of strings).
    pub headers: Vec<(String, String)>,
    /// Query string parameters (the host sends an object of strings; hosts before 2020 sent
    /// that object as a JSON string).
    pub query: Vec<(String, String)>,
}

impl HttpRequest {
    /// A query parameter; names compare case-insensitively.
    pub fn query_param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// A header's first value; names compare case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A successful invocation: output bindings and log lines.
#[derive(Debug, Default)]
pub struct Outcome {
    outputs: Map<String, Value>,
    logs: Vec<String>,
}

impl Outcome {
    /// Queue messages for an output binding (always an array of strings).
    pub fn messages(mut self, binding: &str, messages: Vec<String>) -> Self {
        if !messages.is_empty() {
            self.outputs.insert(
                binding.to_string(),
                Value::Array(messages.into_iter().map(Value::String).collect()),
            );
        }
        self
    }

    /// The HTTP answer (`res`), with a JSON body.
    pub fn http(
        self,
        binding: &str,
        status: StatusCode,
        body: &Value,
        extra_headers: &[(&str, String)],
    ) -> Self {
        let mut headers = vec![(
            "Content-Type",
            "application/json; charset=utf-8".to_string(),
        )];
        headers.extend(extra_headers.iter().cloned());
        self.http_text(binding, status, &body.to_string(), &headers)
    }

    /// The HTTP answer (`res`) with a text body as it is, and `headers` (which name its
    /// `Content-Type`; without one the host sends text/plain).
    pub fn http_text(
        mut self,
        binding: &str,
        status: StatusCode,
        body: &str,
        headers: &[(&str, String)],
    ) -> Self {
        let headers: Map<String, Value> = headers
            .iter()
            .map(|(name, value)| ((*name).to_string(), Value::String(value.clone())))
            .collect();
        self.outputs.insert(
            binding.to_string(),
            json!({ "statusCode": status.as_u16(), "headers": headers, "body": body }),
        );
        self
    }

    pub fn log(mut self, line: impl Into<String>) -> Self {
        self.logs.push(line.into());
        self
    }

    /// The JSON document the host reads.
    pub fn to_json(&self) -> Value {
        json!({ "Outputs": self.outputs, "Logs": self.logs, "ReturnValue": null })
    }
}

impl IntoResponse for Outcome {
    fn into_response(self) -> Response {
        json_response(StatusCode::OK, &self.to_json())
    }
}

/// A failed invocation: the host retries the message (or, for HTTP, answers 500).
#[derive(Debug)]
pub struct Failure {
    pub status: StatusCode,
    pub message: String,
}

impl Failure {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Failure {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        json_response(self.status, &json!({ "error": self.message }))
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue-trigger request as the real host sends it (captured in Azure, 2022).
    const QUEUE_STRING: &str = r#"{"Data":{"inMsg":"\"aaaaa\""},"Metadata":{"DequeueCount":"1","ExpirationTime":"2022-06-20T06:00:06+00:00","Id":"\"a0004923-f050-417a-9742-6d7c7b984134\"","InsertionTime":"2022-06-13T06:00:06+00:00","NextVisibleTime":"2022-06-13T06:10:18+00:00","PopReceipt":"\"AgAAAAMAAAAAAAAA8d5gQex+2AE=\"","sys":{"MethodName":"queue","UtcNow":"2022-06-13T06:00:18.1974545Z","RandGuid":"d9ba2785-ee1a-4260-a83b-f57cb54b969e"}}}"#;

    #[test]
    fn the_real_queue_string_decodes_once_more() {
        let invocation = Invocation::parse(QUEUE_STRING.as_bytes()).unwrap();
        assert_eq!(invocation.queue_message("inMsg").unwrap(), "aaaaa");
        assert_eq!(invocation.dequeue_count(), Some(1));
        assert_eq!(
            invocation.insertion_time().map(|t| t.unix_timestamp()),
            Some(1_655_100_006)
        );
        assert_eq!(
            invocation.message_id().as_deref(),
            Some("a0004923-f050-417a-9742-6d7c7b984134")
        );
    }

    #[test]
    fn the_documented_single_encoding_and_numbers_work_too() {
        let body = r#"{"data":{"item":"{\"v\":1}"},"metadata":{"DequeueCount":3,"Id":"x"}}"#;
        let invocation = Invocation::parse(body.as_bytes()).unwrap();
        assert_eq!(invocation.queue_message("item").unwrap(), "{\"v\":1}");
        assert_eq!(invocation.dequeue_count(), Some(3));
    }

    #[test]
    fn a_json_message_keeps_its_exact_text() {
        let text = r#"{"v":1,"scan":"s","id":"not-the-queue-id"}"#;
        let doubled = serde_json::to_string(&serde_json::to_string(text).unwrap()).unwrap();
        let body = format!(
            r#"{{"Data":{{"item":{doubled}}},"Metadata":{{"v":"\"1\"","scan":"\"s\"","id":"\"not-the-queue-id\"","DequeueCount":"2"}}}}"#
        );
        let invocation = Invocation::parse(body.as_bytes()).unwrap();
        assert_eq!(invocation.queue_message("item").unwrap(), text);
        assert_eq!(invocation.dequeue_count(), Some(2));
    }

    #[test]
    fn outputs_are_arrays_of_strings_and_res_has_a_string_body() {
        let outcome = Outcome::default()
            .messages("q", vec!["{\"a\":1}".into(), "aGVsbG8=".into()])
            .messages("empty", Vec::new())
            .http(
                "res",
                StatusCode::ACCEPTED,
                &json!({"id": "x"}),
                &[("Location", "/api/scans/x".into())],
            )
            .log("hello");
        assert_eq!(
            outcome.to_json().to_string(),
            r#"{"Logs":["hello"],"Outputs":{"q":["{\"a\":1}","aGVsbG8="],"res":{"body":"{\"id\":\"x\"}","headers":{"Content-Type":"application/json; charset=utf-8","Location":"/api/scans/x"},"statusCode":202}},"ReturnValue":null}"#
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for body in ["", "null", "[]", "{\"Data\":5}", "\u{0}"] {
            let parsed = Invocation::parse(body.as_bytes());
            if let Ok(invocation) = parsed {
                assert!(invocation.queue_message("item").is_err());
                assert!(invocation.http_request("req").is_err());
            }
        }
    }
}
