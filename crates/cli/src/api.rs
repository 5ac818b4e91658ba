//! The app's HTTP API: one method per route, and failures sorted into what a user can act on.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use tablescan_api::answers::{
    ErrorAnswer, RemovalRound, ResumeRound, Retried, ScansPage, Started, StateAnswer, StatusAnswer,
};

/// A client of one app.
pub struct Api {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
}

/// Why a call failed, as the user acts on it.
#[derive(Debug)]
pub enum ApiError {
    /// Nothing answers at the URL, or the answer was lost on the way.
    NotRunning { url: String, why: Transport },
    /// 401: the key is missing or wrong.
    Unauthorized { had_key: bool },
    /// 404: no such scan.
    NotFound { what: String },
    /// Another 4xx: the app refused the request and said why (and which field, for a 400).
    Refused {
        status: u16,
        field: Option<String>,
        message: String,
        /// The answer as the app gave it, for `--json`.
        body: Value,
    },
    /// A 2xx whose JSON is not the answer the route gives (`what`): an app that is not
    /// tablescan's, or one whose answers changed in a way this command cannot read.
    Unreadable {
        what: &'static str,
        why: String,
        /// The answer as the app gave it, for `--json`.
        body: Value,
    },
    /// A 5xx, or an answer that is not the API's JSON: the app's words, if it gave any.
    Unexpected {
        status: u16,
        message: Option<String>,
        /// The answer's text (at most 500 characters), shown when it is not the API's JSON.
        body: String,
    },
}

impl ApiError {
    /// The exit code for it: 3 refused, 4 not reachable or unexpected.
    pub fn exit_code(&self) -> i32 {
        match self {
            ApiError::NotRunning { .. }
            | ApiError::Unexpected { .. }
            | ApiError::Unreadable { .. } => 4,
            ApiError::Unauthorized { .. }
            | ApiError::NotFound { .. }
            | ApiError::Refused { .. } => 3,
        }
    }

    /// The answer's JSON as the app gave it, if it gave JSON (what `--json` prints).
    pub fn json(&self) -> Option<Value> {
        match self {
            ApiError::Refused { body, .. } | ApiError::Unreadable { body, .. } => {
                Some(body.clone())
            }
            ApiError::Unexpected { body, .. } => serde_json::from_str(body).ok(),
            _ => None,
        }
    }
}

/// What went wrong on the way to the app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Nothing listens: the request never left.
    Refused,
    /// No answer in time.
    TimedOut,
    /// The connection broke before the whole answer came.
    Dropped,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Refused => "connection refused",
            Transport::TimedOut => "timed out",
            Transport::Dropped => "the connection broke before the answer came",
        })
    }
}

/// `field: message`, or the message alone when no field is at fault.
fn field_line(field: Option<&str>, message: &str) -> String {
    match field {
        Some(field) => format!("{field}: {message}"),
        None => message.to_string(),
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::NotRunning { url, why } if *why != Transport::Refused => {
                write!(f, "no answer from {url} ({why})")
            }
            ApiError::NotRunning { url, why } => write!(
                f,
                "nothing answers at {url} ({why}). Start the app locally with `scripts/dev \
                 --serve` (or `func start` in target/app), or name a running one with --url or \
                 --app and --resource-group"
            ),
            ApiError::Unauthorized { had_key: false } => write!(
                f,
                "the app wants a function key (401): pass --key or set TABLESCAN_FUNCTION_KEY \
                 (az functionapp keys list -g <group> -n <app> --query functionKeys.default), or \
                 use --app and --resource-group"
            ),
            ApiError::Unauthorized { had_key: true } => write!(
                f,
                "the app refused the function key (401): check --key or TABLESCAN_FUNCTION_KEY \
                 (az functionapp keys list -g <group> -n <app> --query functionKeys.default)"
            ),
            ApiError::NotFound { what } => write!(f, "{what} (404)"),
            ApiError::Unreadable { what, why, .. } => write!(
                f,
                "the app's answer is not {what} this command can read ({why}); is the URL a \
                 tablescan app's?"
            ),
            ApiError::Refused {
                status,
                field,
                message,
                ..
            } => write!(
                f,
                "refused ({status})\n  {}",
                field_line(field.as_deref(), message)
            ),
            ApiError::Unexpected {
                status: status @ 503,
                message: Some(message),
                ..
            } => write!(
                f,
                "the app cannot do it now ({status}); it may work when tried again\n  {message}"
            ),
            ApiError::Unexpected {
                status,
                message: Some(message),
                ..
            } => write!(f, "the app failed ({status})\n  {message}"),
            ApiError::Unexpected { status, body, .. } => {
                let body = body.trim();
                if body.is_empty() {
                    write!(f, "the app answered {status} with nothing")
                } else {
                    write!(f, "the app answered {status}\n  {body}")
                }
            }
        }
    }
}

impl Api {
    pub fn new(base: &str, key: Option<String>) -> Api {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap_or_default();
        Api {
            http,
            base: base.trim_end_matches('/').to_string(),
            key: key.filter(|k| !k.is_empty()),
        }
    }

    /// `POST /api/scans` with `idempotency_key`: the answer (`id`, `state`, `status`). A start
    /// whose answer was lost (the connection dropped, a timeout, a 5xx from a host that was
    /// restarting) is sent again with the same key, which the app answers with the scan the
    /// first one started, if it did: one scan, never two.
    pub async fn start(
        &self,
        body: &Value,
        idempotency_key: &str,
    ) -> Result<Answer<Started<String>>, ApiError> {
        let mut tries = 0;
        loop {
            let request = self
                .http
                .post(self.url("scans"))
                .json(body)
                .header("Idempotency-Key", idempotency_key);
            match self.send(request, "").await {
                Err(error) if tries < START_RETRIES && error.worth_another_try() => {
                    tries += 1;
                    eprintln!(
                        "tablescan: no answer to the start ({}); sending it again with the same \
                         idempotency key",
                        error.short()
                    );
                    tokio::time::sleep(Duration::from_secs(1 << tries.min(3))).await;
                }
                answer => return answer.and_then(|json| Answer::read(json, "a started scan")),
            }
        }
    }

    /// `GET /api/scans/{id}`.
    pub async fn status(&self, id: &str) -> Result<Answer<StatusAnswer>, ApiError> {
        let json = self
            .send(
                self.http.get(self.url(&format!("scans/{}", encode(id)))),
                id,
            )
            .await?;
        Answer::read(json, "a scan's status")
    }

    /// `GET /api/scans`, one page of `limit` scans read (fewer when filters drop some).
    pub async fn list(&self, query: &ListQuery<'_>) -> Result<Answer<ScansPage<String>>, ApiError> {
        let mut pairs: Vec<(&str, String)> = vec![("limit", query.limit.to_string())];
        for (name, value) in [
            ("state", query.state),
            ("action", query.action),
            ("table", query.table),
            ("after", query.after),
        ] {
            if let Some(value) = value {
                pairs.push((name, value.to_string()));
            }
        }
        let json = self
            .send(self.http.get(self.url("scans")).query(&pairs), "")
            .await?;
        Answer::read(json, "a page of the scans list")
    }

    /// `DELETE /api/scans/{id}`: one round of a removal (`removedRows`, `more`).
    pub async fn remove(&self, id: &str) -> Result<Answer<RemovalRound>, ApiError> {
        let json = self
            .send(
                self.http.delete(self.url(&format!("scans/{}", encode(id)))),
                id,
            )
            .await?;
        Answer::read(json, "a removal's answer")
    }

    /// `POST /api/scans/{id}/cancel`.
    pub async fn cancel(&self, id: &str) -> Result<Answer<StateAnswer<String>>, ApiError> {
        self.control(id, "cancel", "a cancel's answer").await
    }

    /// `POST /api/scans/{id}/pause`.
    pub async fn pause(&self, id: &str) -> Result<Answer<StateAnswer<String>>, ApiError> {
        self.control(id, "pause", "a pause's answer").await
    }

    /// `POST /api/scans/{id}/resume`: one round of the paused items' messages.
    pub async fn resume(&self, id: &str) -> Result<Answer<ResumeRound<String>>, ApiError> {
        self.control(id, "resume", "a resume's answer").await
    }

    /// `POST /api/scans/{id}/{verb}`, its answer read as `what`.
    async fn control<T: DeserializeOwned>(
        &self,
        id: &str,
        verb: &str,
        what: &'static str,
    ) -> Result<Answer<T>, ApiError> {
        let url = self.url(&format!("scans/{}/{verb}", encode(id)));
        let json = self.send(self.http.post(url), id).await?;
        Answer::read(json, what)
    }

    /// A call of the schedules' API: `method` on `schedules/{path}` with `body`, if any.
    pub async fn schedules(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ApiError> {
        let url = if path.is_empty() {
            self.url("schedules")
        } else {
            self.url(&format!("schedules/{path}"))
        };
        let request = self.http.request(method, url);
        let request = match body {
            Some(body) => request.json(body),
            None => request,
        };
        self.send(request, "").await
    }

    /// `POST /api/scans/{id}/retry`.
    pub async fn retry(&self, id: &str) -> Result<Answer<Retried<String>>, ApiError> {
        self.control(id, "retry", "a retry's answer").await
    }

    /// The address of the app's page (`GET /api/ui`), with the key in the fragment when
    /// `with_key` and there is one: the page takes it from there and browsers never send a
    /// fragment to the server.
    pub fn page_address(&self, with_key: bool) -> String {
        match (&self.key, with_key) {
            (Some(key), true) => format!("{}#key={}", self.url("ui"), encode(key)),
            _ => self.url("ui"),
        }
    }

    /// Whether the app serves its page: `Ok` for a 200 HTML answer, else why not in a
    /// sentence (an app of an earlier version has no page).
    pub async fn page_served(&self) -> Result<(), String> {
        let answer = self
            .http
            .get(self.url("ui"))
            .send()
            .await
            .map_err(|e| format!("the app at {} could not be reached ({e})", self.base))?;
        let html = answer
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/html"));
        match answer.status().as_u16() {
            200 if html => Ok(()),
            404 => Err(
                "the app has no page (GET /api/ui answered 404): it may be of a version \
                        before the page came"
                    .into(),
            ),
            status => Err(format!("GET /api/ui answered {status}, not the page")),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}/api/{path}", self.base)
    }

    async fn send(&self, request: reqwest::RequestBuilder, id: &str) -> Result<Value, ApiError> {
        let request = match &self.key {
            Some(key) => request.header("x-functions-key", key),
            None => request,
        };
        let lost = |e: reqwest::Error| ApiError::NotRunning {
            url: self.base.clone(),
            why: if e.is_connect() {
                Transport::Refused
            } else if e.is_timeout() {
                Transport::TimedOut
            } else {
                Transport::Dropped
            },
        };
        let response = request.send().await.map_err(lost)?;
        let status = response.status().as_u16();
        let text = response.text().await.map_err(lost)?;
        let json: Option<Value> = serde_json::from_str(&text).ok();
        // The API's refusal, when the answer is one.
        let refusal = json
            .as_ref()
            .and_then(|j| ErrorAnswer::deserialize(j).ok())
            .map(|answer| answer.error);
        match (status, json, refusal) {
            (200..=299, Some(json), _) => Ok(json),
            (401, _, _) => Err(ApiError::Unauthorized {
                had_key: self.key.is_some(),
            }),
            (404, _, refusal) => Err(ApiError::NotFound {
                what: refusal
                    .map(|error| error.message)
                    .filter(|message| !message.is_empty())
                    .unwrap_or_else(|| {
                        if id.is_empty() {
                            format!("no tablescan API at {}", self.base)
                        } else {
                            format!("no scan {id}")
                        }
                    }),
            }),
            (400..=499, Some(json), Some(error)) => Err(ApiError::Refused {
                status,
                field: error.field,
                message: match error.message {
                    message if message.is_empty() => "(no message)".to_string(),
                    message => message,
                },
                body: json,
            }),
            (_, _, refusal) => Err(ApiError::Unexpected {
                status,
                message: refusal
                    .filter(|error| !error.message.is_empty())
                    .map(|error| field_line(error.field.as_deref(), &error.message)),
                body: text.chars().take(500).collect(),
            }),
        }
    }
}

/// An answer of the app read into the API's type (`read`), and its JSON as the app gave it
/// (`json`): what `--json` prints, a newer app's fields included, never this command's
/// rewriting of it.
pub struct Answer<T> {
    pub read: T,
    pub json: Value,
}

impl<T: DeserializeOwned> Answer<T> {
    /// `json` read as the answer `what` names.
    pub fn read(json: Value, what: &'static str) -> Result<Answer<T>, ApiError> {
        match T::deserialize(&json) {
            Ok(read) => Ok(Answer { read, json }),
            Err(why) => Err(ApiError::Unreadable {
                what,
                why: why.to_string(),
                body: json,
            }),
        }
    }
}

/// How often a start whose answer was lost is sent again.
const START_RETRIES: u32 = 3;

impl ApiError {
    /// Whether the answer may have been lost on the way (and another try may get one): no
    /// answer at all, a gateway's or a busy app's 502, 503 or 504, or a 500 that is not the
    /// app's own JSON (a handler that stopped mid-request). A refusal, a 404, or the app's own
    /// 500 (a setting it cannot use) would be the same again.
    pub fn worth_another_try(&self) -> bool {
        match self {
            // Refused: the request never reached the app.
            ApiError::NotRunning { why, .. } => *why != Transport::Refused,
            ApiError::Unexpected {
                status: 500,
                message,
                ..
            } => message.is_none(),
            ApiError::Unexpected { status, .. } => *status > 500,
            _ => false,
        }
    }

    /// A few words for a retry's line.
    fn short(&self) -> String {
        match self {
            ApiError::NotRunning { why, .. } => why.to_string(),
            ApiError::Unexpected { status, .. } => format!("the app answered {status}"),
            other => other.to_string(),
        }
    }
}

/// The query of `GET /api/scans`.
#[derive(Debug, Default, Clone, Copy)]
pub struct ListQuery<'a> {
    pub limit: u32,
    pub state: Option<&'a str>,
    pub action: Option<&'a str>,
    pub table: Option<&'a str>,
    pub after: Option<&'a str>,
}

/// A scan id as a URL path segment.
fn encode(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_encoded_as_path_segments() {
        assert_eq!(encode("9f1c-ab_0"), "9f1c-ab_0");
        assert_eq!(encode("a/b?c"), "a%2Fb%3Fc");
    }

    #[test]
    fn errors_say_what_to_do_and_map_to_exit_codes() {
        let down = ApiError::NotRunning {
            url: "http://localhost:7071".into(),
            why: Transport::Refused,
        };
        assert!(down.to_string().contains("scripts/dev --serve"));
        assert_eq!(down.exit_code(), 4);
        let key = ApiError::Unauthorized { had_key: false };
        assert!(key.to_string().contains("--key"));
        assert_eq!(key.exit_code(), 3);
        let bad = ApiError::Refused {
            status: 400,
            field: Some("action.table".into()),
            message: "is required".into(),
            body: Value::Null,
        };
        assert_eq!(
            bad.to_string(),
            "refused (400)\n  action.table: is required"
        );
    }

    #[test]
    fn only_a_start_whose_answer_may_have_been_lost_is_sent_again() {
        let lost = |why| ApiError::NotRunning {
            url: "u".into(),
            why,
        };
        let answered = |status, message: Option<&str>| ApiError::Unexpected {
            status,
            message: message.map(str::to_string),
            body: String::new(),
        };
        assert!(lost(Transport::Dropped).worth_another_try());
        assert!(lost(Transport::TimedOut).worth_another_try());
        assert!(!lost(Transport::Refused).worth_another_try(), "never sent");
        assert!(answered(503, Some("the ledger is busy")).worth_another_try());
        assert!(answered(502, None).worth_another_try());
        assert!(
            answered(500, None).worth_another_try(),
            "a handler that stopped"
        );
        assert!(
            !answered(500, Some("TABLESCAN_MAX_ROWS_PER_SECOND: bad")).worth_another_try(),
            "the app's own answer"
        );
        let refused = ApiError::Refused {
            status: 409,
            field: None,
            message: "m".into(),
            body: Value::Null,
        };
        assert!(!refused.worth_another_try());
    }
}
