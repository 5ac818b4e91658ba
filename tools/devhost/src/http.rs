//! HTTP triggers: `/{routePrefix}/{route}` on 127.0.0.1, sent to the handler in payload mode
//! (forwarding mode is not reproduced; devhost refuses to start an app that needs it), and the
//! `res` output turned back into the HTTP answer.
//!
//! Also the host's admin route for running a function that HTTP does not trigger, as `func
//! start` serves it: `POST /admin/functions/<Function>` with a JSON body (`{"input": ...}`),
//! answered 202 at once while the function runs. devhost runs timer functions this way.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Response, StatusCode};

use crate::config::Function;
use crate::dispatch::Dispatcher;
use crate::invocation::{http_answer, http_request, Answer, IncomingHttp};
use crate::say::{say, say_err};

pub struct HttpFront {
    pub functions: Vec<Function>,
    pub route_prefix: String,
    pub dispatcher: Arc<Dispatcher>,
    pub port: u16,
    /// Timer functions by name, for the admin route.
    pub timers: BTreeMap<String, Arc<crate::timers::Timer>>,
    /// With a key, HTTP triggers whose `authLevel` is not `anonymous` want it, as in Azure
    /// (`x-functions-key` header or `code` query parameter; 401 without a body otherwise).
    /// Without one, none is checked, as under `func start`.
    pub function_key: Option<String>,
}

/// `POST /admin/functions/<name>`: runs a timer function now (202), as the host's admin route
/// does; 404 for a function that does not exist, 400 for one devhost cannot run this way.
fn run_by_hand(front: &HttpFront, name: &str) -> Response<Body> {
    if let Some(timer) = front
        .timers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, t)| t.clone())
    {
        say!("[devhost] {} (timer): run by hand", timer.function.name);
        tokio::spawn(async move { timer.fire(None).await });
        return plain(StatusCode::ACCEPTED, "");
    }
    if front
        .functions
        .iter()
        .any(|f| f.name.eq_ignore_ascii_case(name))
    {
        return plain(
            StatusCode::BAD_REQUEST,
            "devhost runs only timer functions through the admin route",
        );
    }
    plain(StatusCode::NOT_FOUND, "no function has this name")
}

/// Matches a route template (`scans/{id}/cancel`) against a path; returns the parameters.
pub fn match_route(template: &str, path: &str) -> Option<BTreeMap<String, String>> {
    let want: Vec<&str> = template.trim_matches('/').split('/').collect();
    let got: Vec<&str> = path.trim_matches('/').split('/').collect();
    if want.len() != got.len() {
        return None;
    }
    let mut params = BTreeMap::new();
    for (w, g) in want.iter().zip(&got) {
        if let Some(name) = w.strip_prefix('{').and_then(|w| w.strip_suffix('}')) {
            if g.is_empty() {
                return None;
            }
            let name = name.split(':').next().unwrap_or(name);
            params.insert(name.to_string(), percent_decode(g));
        } else if !w.eq_ignore_ascii_case(g) {
            return None;
        }
    }
    Some(params)
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&text[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub async fn handle(State(front): State<Arc<HttpFront>>, request: Request) -> Response<Body> {
    let started = Instant::now();
    let method = request.method().as_str().to_ascii_uppercase();
    let path = request.uri().path().to_string();
    if let Some(name) = path.strip_prefix("/admin/functions/") {
        if method == "POST" {
            return run_by_hand(&front, name);
        }
    }
    let (function, params) = match routed(&front, &path, &method) {
        Ok(routed) => routed,
        Err(why) => return plain(StatusCode::NOT_FOUND, why),
    };
    let query = query_of(request.uri().query().unwrap_or(""));
    if key_refused(&front, &function, &request, &query) {
        return plain(StatusCode::UNAUTHORIZED, "");
    }
    let incoming = match incoming(&front, request, method.clone(), query, params).await {
        Ok(incoming) => incoming,
        Err(response) => return response,
    };
    let trigger = function
        .trigger()
        .expect("matched functions have a trigger");
    let invocation = http_request(&function.name, &trigger.name, &incoming);
    let handler = front.dispatcher.any_handler();
    let answer = front
        .dispatcher
        .invoke(&handler, &function, &invocation)
        .await;
    let response = response_of(&front, handler.instance, &function, answer).await;
    // Reads that succeed are the bulk of a watched scan's traffic (a status poll every second
    // or so): shown only with DEVHOST_VERBOSE=1, so that the log shows what changed things.
    let quiet_read = method == "GET" && response.status().is_success() && !verbose();
    if !quiet_read {
        say!(
            "[devhost] {} {method} {path} {}ms {}",
            function.name,
            started.elapsed().as_millis(),
            response.status().as_u16()
        );
    }
    response
}

/// The HTTP-triggered function that `path` and `method` reach under the route prefix, with the
/// route's parameters; why not (for a 404) when none does.
fn routed(
    front: &HttpFront,
    path: &str,
    method: &str,
) -> Result<(Function, BTreeMap<String, String>), &'static str> {
    let prefix = format!("/{}/", front.route_prefix.trim_matches('/'));
    let Some(route_path) = path
        .strip_prefix(&prefix)
        .or_else(|| (front.route_prefix.is_empty()).then_some(path.trim_start_matches('/')))
    else {
        return Err("no function has this route");
    };
    matching_function(&front.functions, route_path, method)
        .ok_or("no function has this route and method")
}

/// The HTTP response for the handler's answer: its `http` output binding once every other
/// output is written, or a 500 saying what went wrong.
async fn response_of(
    front: &HttpFront,
    instance: usize,
    function: &Function,
    answer: Answer,
) -> Response<Body> {
    match answer {
        Answer::Success { outputs, logs } => {
            for line in logs {
                say!("[handler {instance}] {line}");
            }
            if let Err(why) = front
                .dispatcher
                .write_outputs(instance, function, &outputs)
                .await
            {
                say_err!("[devhost] {}: writing outputs failed: {why}", function.name);
                return plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the function's outputs could not be written",
                );
            }
            let response_binding = function.outputs().find(|b| b.kind == "http");
            http_response(response_binding.and_then(|b| outputs.get(&b.name)))
        }
        Answer::Failure(why) => {
            say_err!("[devhost] {}: {why}", function.name);
            plain(StatusCode::INTERNAL_SERVER_ERROR, "the function failed")
        }
        Answer::Hang => plain(StatusCode::INTERNAL_SERVER_ERROR, "the function timed out"),
    }
}

/// Whether the request lacks the function key that `function` needs (any level but
/// anonymous, when devhost has a key): in the `x-functions-key` header or the `code` parameter.
fn key_refused(
    front: &HttpFront,
    function: &Function,
    request: &Request,
    query: &BTreeMap<String, String>,
) -> bool {
    let Some(key) = &front.function_key else {
        return false;
    };
    let wants_key = function
        .trigger()
        .is_some_and(|t| t.auth_level != "anonymous");
    let given = request
        .headers()
        .get("x-functions-key")
        .and_then(|v| v.to_str().ok())
        .or(query.get("code").map(String::as_str));
    wants_key && given != Some(key.as_str())
}

/// The request as the invocation describes it; a response when its body is too large.
async fn incoming(
    front: &HttpFront,
    request: Request,
    method: String,
    query: BTreeMap<String, String>,
    params: BTreeMap<String, String>,
) -> Result<IncomingHttp, Response<Body>> {
    let headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                title_case(k.as_str()),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let has_content_length = request.headers().contains_key("content-length");
    let url = format!("http://127.0.0.1:{}{}", front.port, request.uri());
    let body = match to_bytes(request.into_body(), 100 * 1024 * 1024).await {
        Ok(body) => body.to_vec(),
        Err(_) => {
            return Err(plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the request body is too large",
            ))
        }
    };
    Ok(IncomingHttp {
        url,
        method,
        query,
        headers,
        params,
        body,
        has_content_length,
    })
}

/// The first HTTP-triggered function whose route matches `route_path` and whose methods take
/// `method`, with the route's parameters.
fn matching_function(
    functions: &[Function],
    route_path: &str,
    method: &str,
) -> Option<(Function, BTreeMap<String, String>)> {
    for function in functions {
        let Some(trigger) = function.trigger().filter(|t| t.kind == "httpTrigger") else {
            continue;
        };
        let template = trigger
            .route
            .clone()
            .unwrap_or_else(|| function.name.clone());
        if let Some(params) = match_route(&template, route_path) {
            if trigger.methods.is_empty() || trigger.methods.iter().any(|m| m == method) {
                return Some((function.clone(), params));
            }
        }
    }
    None
}

/// A query string's parameters, percent-decoded.
fn query_of(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// The HTTP response a function's `http` output binding describes.
fn http_response(binding: Option<&serde_json::Value>) -> Response<Body> {
    match http_answer(binding) {
        Ok(answer) => {
            let mut response = Response::builder().status(answer.status);
            for (name, value) in answer.headers {
                if let (Ok(name), Ok(value)) = (
                    HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_str(&value),
                ) {
                    response = response.header(name, value);
                }
            }
            response
                .body(Body::from(answer.body))
                .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, "bad answer"))
        }
        Err(why) => plain(StatusCode::INTERNAL_SERVER_ERROR, &why),
    }
}

/// Whether `DEVHOST_VERBOSE=1` asks for every HTTP invocation to be shown.
fn verbose() -> bool {
    static VERBOSE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *VERBOSE.get_or_init(|| std::env::var("DEVHOST_VERBOSE").is_ok_and(|v| v == "1"))
}

/// Header names as the host's request object shows them (`Content-Type`).
fn title_case(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or_else(String::new, |c| {
                c.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect::<Vec<_>>()
        .join("-")
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "text/plain; charset=utf-8")
        .body(Body::from(text.to_string()))
        .expect("a plain response builds")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_match_with_parameters() {
        assert_eq!(match_route("scans", "scans"), Some(BTreeMap::new()));
        let params = match_route("scans/{id}/cancel", "scans/abc/cancel").unwrap();
        assert_eq!(params["id"], "abc");
        assert_eq!(match_route("scans/{id}", "scans"), None);
        assert_eq!(match_route("scans/{id}", "scans/a/b"), None);
        assert_eq!(
            match_route("scans/{id:guid}", "scans/x%20y").unwrap()["id"],
            "x y"
        );
        assert_eq!(title_case("content-type"), "Content-Type");
    }
}
