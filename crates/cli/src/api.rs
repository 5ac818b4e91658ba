//! The app's HTTP API: one method per route, and failures sorted into what a user can act on.

use std::time::Duration;

use serde_json::Value;

/// A client of one app.
pub struct Api {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
}

/// Why a call failed, as the user acts on it.
#[derive(Debug)]
pub enum ApiError {
    /// Nothing answers at the URL.
    NotRunning { url: String, why: String },
    /// 401: the key is missing or wrong.
    Unauthorized { had_key: bool },
    /// 404: no such scan.
    NotFound { what: String },
    /// Another 4xx: the app refused the request and said why (and which field, for a 400).
    Refused {
        status: u16,
        field: Option<String>,
        message: String,
    },
    /// An answer this command cannot use (a 5xx, or something that is not the API's JSON).
    Unexpected { status: u16, body: String },
}

impl ApiError {
    /// The exit code for it: 3 refused, 4 not reachable or unexpected.
    pub fn exit_code(&self) -> i32 {
        match self {
            ApiError::NotRunning { .. } | ApiError::Unexpected { .. } => 4,
            ApiError::Unauthorized { .. }
            | ApiError::NotFound { .. }
            | ApiError::Refused { .. } => 3,
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
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
            ApiError::Refused {
                status,
                field: Some(field),
                message,
            } => write!(f, "refused ({status}): {field} {message}"),
            ApiError::Refused {
                status, message, ..
            } => write!(f, "refused ({status}): {message}"),
            ApiError::Unexpected { status, body } => {
                write!(f, "the app answered {status}: {body}")
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

    /// `POST /api/scans`: the answer (`id`, `state`, `status`).
    pub async fn start(
        &self,
        body: &Value,
        idempotency_key: Option<&str>,
    ) -> Result<Value, ApiError> {
        let mut request = self.http.post(self.url("scans")).json(body);
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        self.send(request, "").await
    }

    /// `GET /api/scans/{id}`.
    pub async fn status(&self, id: &str) -> Result<Value, ApiError> {
        self.send(
            self.http.get(self.url(&format!("scans/{}", encode(id)))),
            id,
        )
        .await
    }

    /// `GET /api/scans`, one page.
    pub async fn list(
        &self,
        state: Option<&str>,
        limit: u32,
        after: Option<&str>,
    ) -> Result<Value, ApiError> {
        let mut query: Vec<(&str, String)> = vec![("limit", limit.to_string())];
        if let Some(state) = state {
            query.push(("state", state.to_string()));
        }
        if let Some(after) = after {
            query.push(("after", after.to_string()));
        }
        self.send(self.http.get(self.url("scans")).query(&query), "")
            .await
    }

    /// `POST /api/scans/{id}/cancel`.
    pub async fn cancel(&self, id: &str) -> Result<Value, ApiError> {
        self.send(
            self.http
                .post(self.url(&format!("scans/{}/cancel", encode(id)))),
            id,
        )
        .await
    }

    /// `POST /api/scans/{id}/retry`.
    pub async fn retry(&self, id: &str) -> Result<Value, ApiError> {
        self.send(
            self.http
                .post(self.url(&format!("scans/{}/retry", encode(id)))),
            id,
        )
        .await
    }

    fn url(&self, path: &str) -> String {
        format!("{}/api/{path}", self.base)
    }

    async fn send(&self, request: reqwest::RequestBuilder, id: &str) -> Result<Value, ApiError> {
        let request = match &self.key {
            Some(key) => request.header("x-functions-key", key),
            None => request,
        };
        let response = request.send().await.map_err(|e| ApiError::NotRunning {
            url: self.base.clone(),
            why: if e.is_connect() {
                "connection refused".to_string()
            } else if e.is_timeout() {
                "timed out".to_string()
            } else {
                "the connection failed".to_string()
            },
        })?;
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        let json: Option<Value> = serde_json::from_str(&text).ok();
        match (status, json) {
            (200..=299, Some(json)) => Ok(json),
            (401, _) => Err(ApiError::Unauthorized {
                had_key: self.key.is_some(),
            }),
            (404, json) => Err(ApiError::NotFound {
                what: json
                    .as_ref()
                    .and_then(|j| j["error"]["message"].as_str().map(str::to_string))
                    .unwrap_or_else(|| {
                        if id.is_empty() {
                            format!("no tablescan API at {}", self.base)
                        } else {
                            format!("no scan {id}")
                        }
                    }),
            }),
            (400..=499, Some(json)) if json["error"].is_object() => Err(ApiError::Refused {
                status,
                field: json["error"]["field"].as_str().map(str::to_string),
                message: json["error"]["message"]
                    .as_str()
                    .unwrap_or("(no message)")
                    .to_string(),
            }),
            (_, _) => Err(ApiError::Unexpected {
                status,
                body: text.chars().take(500).collect(),
            }),
        }
    }
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
            why: "connection refused".into(),
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
        };
        assert_eq!(bad.to_string(), "refused (400): action.table is required");
    }
}
