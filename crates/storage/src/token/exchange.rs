//! One token request and its answer, shared by the token sources: sending, retrying what may
//! pass, and reading the OAuth answer (`access_token` with `expires_on` or `expires_in`).

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{AccessToken, TokenError};

/// How many times one fetch asks, and the first wait between (doubling).
const ATTEMPTS: u32 = 4;
const FIRST_WAIT: Duration = Duration::from_millis(500);

/// Runs `attempt` until it gives a token or a permanent error, up to [`ATTEMPTS`] times, 0.5,
/// 1 and 2 s apart, never waiting past the caller's deadline.
pub(super) async fn retrying<F, Fut>(mut attempt: F) -> Result<AccessToken, TokenError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<AccessToken, TokenError>>,
{
    let mut wait = FIRST_WAIT;
    let mut tries = 1;
    loop {
        match attempt().await {
            Ok(token) => return Ok(token),
            Err(error) if !error.transient || tries >= ATTEMPTS => return Err(error),
            Err(error) => {
                let past_deadline = crate::deadline::current()
                    .is_some_and(|d| tokio::time::Instant::now() + wait > d);
                if past_deadline {
                    return Err(error);
                }
                tracing::debug!(tries, "asking for a token again: {error}");
            }
        }
        tokio::time::sleep(wait).await;
        wait *= 2;
        tries += 1;
    }
}

/// Sends one token request and reads its answer; `fail` words an error (transient or not, and
/// what happened) for the source.
pub(super) async fn exchange(
    request: reqwest::RequestBuilder,
    fail: impl Fn(bool, String) -> TokenError,
) -> Result<AccessToken, TokenError> {
    let response = request.send().await.map_err(|e| {
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
        // 404 and 410 come while a managed identity endpoint itself starts (the SDKs retry
        // them too); 429 and 5xx are the service being busy.
        let transient = matches!(status, 404 | 408 | 410 | 429 | 500..=599);
        return Err(fail(
            transient,
            format!("status {status}{}", error_text(&body)),
        ));
    }
    parse_answer(&body, SystemTime::now()).map_err(|why| fail(false, why))
}

/// `: <message>` from an error answer's JSON (`message`, `error_description` or `error`), or
/// nothing.
pub(super) fn error_text(body: &[u8]) -> String {
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
pub(super) fn parse_answer(body: &[u8], now: SystemTime) -> Result<AccessToken, String> {
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
