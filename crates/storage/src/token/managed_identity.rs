//! Tokens from the managed identity endpoint that App Service, Azure Functions and Container
//! Apps give every process of an app with an identity.
//!
//! The contract (App Service and Container Apps documentation, "REST endpoint reference"; the
//! Azure SDKs' `AppServiceManagedIdentitySource` of api-version 2019-08-01):
//! - the platform sets `IDENTITY_ENDPOINT` (a local URL) and `IDENTITY_HEADER` (a secret that
//!   it rotates, sent back to prove the request comes from the app, against request forgery);
//! - `GET {IDENTITY_ENDPOINT}?api-version=2019-08-01&resource=<audience>[&client_id=<id>]`
//!   with the header `X-IDENTITY-HEADER: {IDENTITY_HEADER}`; without `client_id` the
//!   system-assigned identity answers;
//! - the answer is JSON with `access_token` and `expires_on`, the expiry in seconds since the
//!   epoch, which the endpoint writes as a string (a number is taken too, and `expires_in`,
//!   seconds from now, when `expires_on` is missing).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{AccessToken, TokenError};

/// The endpoint's API version this client speaks.
pub const API_VERSION: &str = "2019-08-01";

/// One managed identity of this process, for one audience.
pub struct ManagedIdentity {
    endpoint: reqwest::Url,
    /// The value of `IDENTITY_HEADER`: a secret, never shown.
    header: String,
    /// The client id of a user-assigned identity; `None` for the system-assigned one.
    client_id: Option<String>,
    resource: String,
}

impl std::fmt::Debug for ManagedIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagedIdentity")
            .field("endpoint", &self.endpoint.as_str())
            .field("client_id", &self.client_id)
            .field("resource", &self.resource)
            .finish_non_exhaustive()
    }
}

/// How many times one fetch asks the endpoint, and the first wait between (doubling).
const ATTEMPTS: u32 = 4;
const FIRST_WAIT: Duration = Duration::from_millis(500);

impl ManagedIdentity {
    /// The identity behind `endpoint` (the value of `IDENTITY_ENDPOINT`), authenticated with
    /// `header` (the value of `IDENTITY_HEADER`); `client_id` picks a user-assigned identity.
    pub fn new(
        endpoint: &str,
        header: &str,
        client_id: Option<&str>,
        resource: &str,
    ) -> Result<ManagedIdentity, String> {
        let endpoint = reqwest::Url::parse(endpoint.trim())
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https") && url.host().is_some())
            .ok_or("IDENTITY_ENDPOINT is not an http(s) URL")?;
        if header.trim().is_empty() {
            return Err("IDENTITY_HEADER is empty".into());
        }
        Ok(ManagedIdentity {
            endpoint,
            header: header.trim().to_string(),
            client_id: client_id
                .map(str::trim)
                .filter(|id| !id.is_empty())
                .map(str::to_string),
            resource: resource.to_string(),
        })
    }

    pub(super) fn describe(&self) -> String {
        match &self.client_id {
            Some(id) => format!("the user-assigned managed identity with client id {id}"),
            None => "the system-assigned managed identity".to_string(),
        }
    }

    pub(super) fn key(&self) -> String {
        format!(
            "managed identity {} {} {}",
            self.endpoint,
            self.client_id.as_deref().unwrap_or("-"),
            self.resource
        )
    }

    fn url(&self) -> reqwest::Url {
        let mut url = self.endpoint.clone();
        {
            let mut query = url.query_pairs_mut();
            query.append_pair("api-version", API_VERSION);
            query.append_pair("resource", &self.resource);
            if let Some(id) = &self.client_id {
                query.append_pair("client_id", id);
            }
        }
        url
    }

    /// Asks the endpoint for a token, trying again when it is unreachable or busy, within the
    /// caller's deadline.
    pub(super) async fn fetch(&self, http: &reqwest::Client) -> Result<AccessToken, TokenError> {
        let mut wait = FIRST_WAIT;
        let mut attempt = 1;
        loop {
            match self.attempt(http).await {
                Ok(token) => return Ok(token),
                Err(error) if !error.transient || attempt >= ATTEMPTS => return Err(error),
                Err(error) => {
                    let past_deadline = crate::deadline::current()
                        .is_some_and(|d| tokio::time::Instant::now() + wait > d);
                    if past_deadline {
                        return Err(error);
                    }
                    tracing::debug!(attempt, "asking the identity endpoint again: {error}");
                }
            }
            tokio::time::sleep(wait).await;
            wait *= 2;
            attempt += 1;
        }
    }

    async fn attempt(&self, http: &reqwest::Client) -> Result<AccessToken, TokenError> {
        let fail = |transient: bool, what: String| TokenError {
            message: format!(
                "{} gave no token from {} ({what})",
                self.describe(),
                self.endpoint_for_messages()
            ),
            transient,
        };
        let response = http
            .get(self.url())
            .header("X-IDENTITY-HEADER", &self.header)
            .send()
            .await
            .map_err(|e| {
                let why = if e.is_timeout() {
                    "timed out"
                } else if e.is_connect() {
                    "could not connect"
                } else {
                    "the connection failed"
                };
                fail(true, why.to_string())
            })?;
        let status = response.status().as_u16();
        let body = response
            .bytes()
            .await
            .map_err(|_| fail(true, "the answer broke off".to_string()))?;
        if !(200..300).contains(&status) {
            // 404 and 410 come while the endpoint itself starts (the SDKs retry them too).
            let transient = matches!(status, 404 | 408 | 410 | 429 | 500..=599);
            return Err(fail(
                transient,
                format!("status {status}{}", error_text(&body)),
            ));
        }
        parse_answer(&body, SystemTime::now()).map_err(|why| fail(false, why))
    }

    /// The endpoint without its query, which is all a message needs.
    fn endpoint_for_messages(&self) -> String {
        let mut url = self.endpoint.clone();
        url.set_query(None);
        url.to_string()
    }
}

/// `: <message>` from an error answer's JSON (`message`, `error_description` or `error`), or
/// nothing.
fn error_text(body: &[u8]) -> String {
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) else {
        return String::new();
    };
    ["message", "error_description", "error", "Message"]
        .iter()
        .find_map(|field| json[field].as_str())
        .map(|text| {
            let line = text.lines().next().unwrap_or("").trim();
            format!(": {}", line.chars().take(300).collect::<String>())
        })
        .unwrap_or_default()
}

/// The token of a successful answer, received at `now`.
fn parse_answer(body: &[u8], now: SystemTime) -> Result<AccessToken, String> {
    let json: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| "the answer is not JSON".to_string())?;
    let secret = json["access_token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .ok_or("the answer has no access_token")?;
    let seconds = |value: &serde_json::Value| -> Option<u64> {
        value
            .as_u64()
            .or_else(|| value.as_str().and_then(|s| s.trim().parse().ok()))
    };
    let expires_at = match (seconds(&json["expires_on"]), seconds(&json["expires_in"])) {
        (Some(on), _) => UNIX_EPOCH + Duration::from_secs(on),
        (None, Some(within)) => now + Duration::from_secs(within),
        (None, None) => return Err("the answer says neither expires_on nor expires_in".into()),
    };
    if expires_at <= now {
        return Err(
            "the token it gave has expired already (is this machine's clock right?)".into(),
        );
    }
    Ok(AccessToken::new(secret.to_string(), now, expires_at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_give_the_token_and_its_expiry_as_the_endpoint_writes_it() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let as_string = br#"{"access_token":"t1","expires_on":"1003600","resource":"https://storage.azure.com/","token_type":"Bearer","client_id":"c"}"#;
        let token = parse_answer(as_string, now).unwrap();
        assert_eq!(token.secret(), "t1");
        assert_eq!(token.refresh_at, now + Duration::from_secs(3300));
        assert_eq!(token.usable_until, now + Duration::from_secs(3570));

        let as_number = br#"{"access_token":"t2","expires_on":1000020}"#;
        let token = parse_answer(as_number, now).unwrap();
        assert_eq!(token.refresh_at, now + Duration::from_secs(10));
        assert_eq!(token.usable_until, now + Duration::from_secs(18));

        let relative = br#"{"access_token":"t3","expires_in":"600"}"#;
        assert_eq!(
            parse_answer(relative, now).unwrap().refresh_at,
            now + Duration::from_secs(300)
        );
    }

    #[test]
    fn unusable_answers_say_why() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        for (body, why) in [
            (&b"<html>"[..], "not JSON"),
            (br#"{"expires_on":"1003600"}"#, "no access_token"),
            (br#"{"access_token":"t"}"#, "neither"),
            (br#"{"access_token":"t","expires_on":"999999"}"#, "expired"),
        ] {
            let error = parse_answer(body, now).unwrap_err();
            assert!(error.contains(why), "{error}");
        }
    }

    #[test]
    fn the_request_names_the_audience_and_the_identity() {
        let system = ManagedIdentity::new(
            "http://127.0.0.1:4141/msi/token",
            "h",
            None,
            "https://storage.azure.com/",
        )
        .unwrap();
        assert_eq!(
            system.url().as_str(),
            "http://127.0.0.1:4141/msi/token?api-version=2019-08-01&resource=https%3A%2F%2Fstorage.azure.com%2F"
        );
        let user = ManagedIdentity::new(
            "http://127.0.0.1:4141/msi/token?x=1",
            "h",
            Some("1234-abcd"),
            "https://storage.azure.com/",
        )
        .unwrap();
        assert!(user.url().as_str().ends_with("?x=1&api-version=2019-08-01&resource=https%3A%2F%2Fstorage.azure.com%2F&client_id=1234-abcd"));
        assert!(user.describe().contains("1234-abcd"));
        assert!(ManagedIdentity::new("not a url", "h", None, "r").is_err());
        assert!(ManagedIdentity::new("http://x/", " ", None, "r").is_err());
    }

    #[test]
    fn error_answers_keep_the_endpoints_message() {
        assert_eq!(
            error_text(
                br#"{"statusCode":400,"message":"No managed identity with client id x.\nmore"}"#
            ),
            ": No managed identity with client id x."
        );
        assert_eq!(
            error_text(br#"{"error":"invalid_request","error_description":"bad resource"}"#),
            ": bad resource"
        );
        assert_eq!(error_text(b"oops"), "");
    }
}
