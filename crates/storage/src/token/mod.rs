//! Access tokens for Microsoft Entra (bearer) authorization: fetched from a token source,
//! cached, refreshed before they expire, and fetched once for all the requests that wait.
//!
//! A process sends thousands of storage requests a second at full speed, and every one needs a
//! valid token; the identity endpoint must see a handful of requests an hour. So a token is
//! kept until it nears its end:
//! - while it is *fresh* (before [`AccessToken::refresh_at`]) it is used as it is;
//! - when it is *ageing* (past `refresh_at`, still usable) it is used, and one task fetches its
//!   successor in the background; a failed refresh is logged and tried again later;
//! - when it is *spent* (past [`AccessToken::usable_until`], a margin before its expiry for
//!   clocks that differ) or there is none, the requests wait for one fetch that they share.
//!
//! A token the service refuses is dropped ([`TokenCredential::forget`]) so the next request
//! fetches a new one: a token revoked or issued with a skewed clock heals at once.

mod client_secret;
mod exchange;
mod managed_identity;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

pub use client_secret::{ClientSecret, DEFAULT_AUTHORITY};
pub use managed_identity::ManagedIdentity;

/// The resource (audience) of tokens for Azure Storage, the same for every account and service.
pub const STORAGE_RESOURCE: &str = "https://storage.azure.com/";

/// A token and when it stops being good.
#[derive(Clone)]
pub struct AccessToken {
    secret: Arc<str>,
    /// After this, a successor is fetched in the background.
    refresh_at: SystemTime,
    /// After this, the token is not sent any more.
    usable_until: SystemTime,
}

impl AccessToken {
    /// A token that expires at `expires_at`, received at `now`. It is refreshed at half its
    /// lifetime, but never later than five minutes before its end (Entra tokens live an hour
    /// or more: refreshed 5 minutes early, as the Azure SDKs do); it is not used in its last
    /// tenth, at most its last 30 seconds.
    pub fn new(secret: String, now: SystemTime, expires_at: SystemTime) -> AccessToken {
        let lifetime = expires_at.duration_since(now).unwrap_or_default();
        let refresh_at = if lifetime > Duration::from_secs(600) {
            expires_at - Duration::from_secs(300)
        } else {
            now + lifetime / 2
        };
        let usable_until = expires_at - (lifetime / 10).min(Duration::from_secs(30));
        AccessToken {
            secret: secret.into(),
            refresh_at,
            usable_until,
        }
    }

    /// The bearer token itself.
    pub fn secret(&self) -> &str {
        &self.secret
    }
}

impl std::fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessToken")
            .field("refresh_at", &self.refresh_at)
            .field("usable_until", &self.usable_until)
            .finish_non_exhaustive()
    }
}

/// Why no token could be had. The message names the token source and what it answered, never
/// a token or the endpoint's secret header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TokenError {
    /// What went wrong, for the person who configures the identity.
    pub message: String,
    /// Whether asking again later may work (the endpoint was unreachable or busy), as opposed
    /// to a refusal (no such identity, a bad request).
    pub transient: bool,
}

/// Where tokens come from.
#[derive(Debug)]
pub enum TokenSource {
    /// The platform's managed identity endpoint (App Service, Functions, Container Apps).
    ManagedIdentity(ManagedIdentity),
    /// An app registration with a client secret (where there is no managed identity).
    ClientSecret(ClientSecret),
}

impl TokenSource {
    async fn fetch(&self, http: &reqwest::Client) -> Result<AccessToken, TokenError> {
        match self {
            TokenSource::ManagedIdentity(source) => source.fetch(http).await,
            TokenSource::ClientSecret(source) => source.fetch(http).await,
        }
    }

    /// What the source is, for messages: "the managed identity (client id ...)".
    pub fn describe(&self) -> String {
        match self {
            TokenSource::ManagedIdentity(source) => source.describe(),
            TokenSource::ClientSecret(source) => source.describe(),
        }
    }

    /// Identifies the source, so that a [`TokenCredentials`] keeps one cache per source.
    fn key(&self) -> String {
        match self {
            TokenSource::ManagedIdentity(source) => source.key(),
            TokenSource::ClientSecret(source) => source.key(),
        }
    }
}

/// The token credentials of the identities one process uses: one per identity (token source),
/// shared by every account resolved with the same registry, so a process fetches a token once
/// however many clients and connections it has.
///
/// The process that resolves connections owns this and hands it to
/// [`crate::connection::resolve`], as object_store takes credentials it is given: the
/// handler's state keeps one for the process; a caller that only checks a connection, or a
/// test, passes a registry of its own.
#[derive(Clone, Default)]
pub struct TokenCredentials(Arc<Mutex<HashMap<String, Arc<TokenCredential>>>>);

impl TokenCredentials {
    /// The credential of `source`'s identity: the one made earlier for it, or a new one.
    pub fn for_source(&self, source: TokenSource) -> Arc<TokenCredential> {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.entry(source.key())
            .or_insert_with(|| Arc::new(TokenCredential::new(source)))
            .clone()
    }
}

impl std::fmt::Debug for TokenCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let identities = self.0.lock().map_or(0, |all| all.len());
        f.debug_struct("TokenCredentials")
            .field("identities", &identities)
            .finish()
    }
}

/// A token source with its cache: what a bearer [`super::credential::Credential`] holds.
pub struct TokenCredential {
    source: TokenSource,
    http: std::sync::OnceLock<reqwest::Client>,
    cached: Mutex<Option<AccessToken>>,
    /// Held by the one task that fetches; the others wait on it (spent token) or go on with the
    /// token they have (ageing token).
    fetching: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for TokenCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCredential")
            .field("source", &self.source.describe())
            .finish_non_exhaustive()
    }
}

impl TokenCredential {
    /// A credential with a cache of its own; [`TokenCredentials::for_source`] shares one per
    /// identity. Its HTTP client is built at the first fetch: a connection resolved only to be
    /// checked (a scan request's) costs nothing.
    pub fn new(source: TokenSource) -> TokenCredential {
        TokenCredential {
            source,
            http: std::sync::OnceLock::new(),
            cached: Mutex::new(None),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    fn http(&self) -> &reqwest::Client {
        self.http.get_or_init(|| {
            reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .connect_timeout(Duration::from_secs(5))
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default()
        })
    }

    /// What the source is, for messages.
    pub fn describe(&self) -> String {
        self.source.describe()
    }

    /// A token to send now.
    pub async fn token(self: &Arc<Self>) -> Result<AccessToken, TokenError> {
        if let Some(token) = self.cached_token() {
            let now = SystemTime::now();
            if now < token.refresh_at {
                return Ok(token);
            }
            if now < token.usable_until {
                self.refresh_in_background();
                return Ok(token);
            }
        }
        let _fetching = self.fetching.lock().await;
        // Another task may have fetched while this one waited.
        if let Some(token) = self.cached_token() {
            if SystemTime::now() < token.usable_until {
                return Ok(token);
            }
        }
        self.fetch_and_keep().await
    }

    /// Drops `token` if it is still the cached one: the service refused it.
    pub fn forget(&self, token: &AccessToken) {
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if cached
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(&c.secret, &token.secret))
        {
            *cached = None;
        }
    }

    fn cached_token(&self) -> Option<AccessToken> {
        self.cached
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Starts one background fetch of the successor of an ageing token, unless one is running.
    fn refresh_in_background(self: &Arc<Self>) {
        let Ok(fetching) = self.fetching.try_lock() else {
            return;
        };
        drop(fetching);
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let Ok(_fetching) = this.fetching.try_lock() else {
                return;
            };
            let still_ageing = this
                .cached_token()
                .is_some_and(|t| SystemTime::now() >= t.refresh_at);
            if still_ageing {
                if let Err(error) = this.fetch_and_keep().await {
                    tracing::warn!(
                        source = %this.describe(),
                        "could not refresh a storage token before it expires (the current one \
                         is used while it lasts): {error}"
                    );
                }
            }
        });
    }

    async fn fetch_and_keep(&self) -> Result<AccessToken, TokenError> {
        let token = self.source.fetch(self.http()).await?;
        *self.cached.lock().unwrap_or_else(|e| e.into_inner()) = Some(token.clone());
        Ok(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// An identity endpoint on loopback that counts its requests, answers after `delay`, and
    /// issues tokens `t1`, `t2`, ... that expire `lifetime` after they are issued.
    async fn endpoint(lifetime: Duration, delay: Duration) -> (String, Arc<AtomicU32>) {
        let issued = Arc::new(AtomicU32::new(0));
        let counter = issued.clone();
        let app = axum::Router::new().route(
            "/msi/token",
            axum::routing::get(move |headers: axum::http::HeaderMap| {
                let counter = counter.clone();
                async move {
                    assert_eq!(headers["x-identity-header"], "h");
                    tokio::time::sleep(delay).await;
                    let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                    let expires = SystemTime::now() + lifetime;
                    let on = expires.duration_since(std::time::UNIX_EPOCH).unwrap();
                    axum::Json(serde_json::json!({
                        "access_token": format!("t{n}"),
                        "expires_on": on.as_secs().to_string(),
                    }))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/msi/token", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, issued)
    }

    fn credential(url: &str) -> Arc<TokenCredential> {
        let source = ManagedIdentity::new(url, "h", None, STORAGE_RESOURCE).unwrap();
        Arc::new(TokenCredential::new(TokenSource::ManagedIdentity(source)))
    }

    #[test]
    fn one_credential_per_identity_within_one_registry() {
        let source = |client: Option<&str>| {
            let identity = ManagedIdentity::new(
                "http://127.0.0.1:1/msi/token",
                "h",
                client,
                STORAGE_RESOURCE,
            )
            .unwrap();
            TokenSource::ManagedIdentity(identity)
        };
        let tokens = TokenCredentials::default();
        let first = tokens.for_source(source(None));
        assert!(Arc::ptr_eq(
            &first,
            &tokens.clone().for_source(source(None))
        ));
        assert!(!Arc::ptr_eq(
            &first,
            &tokens.for_source(source(Some("other")))
        ));
        let apart = TokenCredentials::default().for_source(source(None));
        assert!(!Arc::ptr_eq(&first, &apart));
    }

    /// Many requests that find no token share one fetch; later ones use the cached token.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiting_requests_share_one_fetch() {
        let (url, issued) = endpoint(Duration::from_secs(3600), Duration::from_millis(200)).await;
        let credential = credential(&url);
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let credential = credential.clone();
                tokio::spawn(async move { credential.token().await.unwrap().secret().to_string() })
            })
            .collect();
        for task in tasks {
            assert_eq!(task.await.unwrap(), "t1");
        }
        assert_eq!(credential.token().await.unwrap().secret(), "t1");
        assert_eq!(issued.load(Ordering::SeqCst), 1);
    }

    /// An ageing token is still used while its successor is fetched in the background; a
    /// spent one is not used at all.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tokens_are_refreshed_before_they_expire() {
        // Refreshed after 2 s (half of 4 s), unusable after 3.6 s.
        let (url, issued) = endpoint(Duration::from_secs(4), Duration::from_millis(300)).await;
        let credential = credential(&url);
        assert_eq!(credential.token().await.unwrap().secret(), "t1");
        tokio::time::sleep(Duration::from_millis(2200)).await;
        // Ageing: answered with t1 (a request that waited for the fetch would get t2), and t2
        // is on its way.
        assert_eq!(credential.token().await.unwrap().secret(), "t1");
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(credential.token().await.unwrap().secret(), "t2");
        assert_eq!(issued.load(Ordering::SeqCst), 2);
        // Never refreshed in time (nobody asked): spent, so the next request waits for t3.
        tokio::time::sleep(Duration::from_millis(4500)).await;
        assert_eq!(credential.token().await.unwrap().secret(), "t3");
    }

    #[tokio::test]
    async fn a_refused_token_is_forgotten_once() {
        let (url, issued) = endpoint(Duration::from_secs(3600), Duration::ZERO).await;
        let credential = credential(&url);
        let first = credential.token().await.unwrap();
        credential.forget(&first);
        let second = credential.token().await.unwrap();
        assert_eq!(second.secret(), "t2");
        // A late refusal of the first token does not drop the second.
        credential.forget(&first);
        assert_eq!(credential.token().await.unwrap().secret(), "t2");
        assert_eq!(issued.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_endpoint_that_refuses_is_a_permanent_error_naming_the_identity() {
        let app = axum::Router::new().route(
            "/msi/token",
            axum::routing::get(|| async {
                (
                    axum::http::StatusCode::BAD_REQUEST,
                    axum::Json(serde_json::json!({"statusCode": 400, "message": "No identity with client id abc"})),
                )
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/msi/token", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let source = ManagedIdentity::new(&url, "h", Some("abc"), STORAGE_RESOURCE).unwrap();
        let credential = Arc::new(TokenCredential::new(TokenSource::ManagedIdentity(source)));
        let error = credential.token().await.unwrap_err();
        assert!(!error.transient);
        assert!(error.message.contains("client id abc"), "{error}");
        assert!(error.message.contains("status 400: No identity"), "{error}");
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_is_transient() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/msi/token", closed.local_addr().unwrap());
        drop(closed);
        let credential = credential(&url);
        let error = crate::deadline::within(
            tokio::time::Instant::now() + Duration::from_millis(200),
            credential.token(),
        )
        .await
        .unwrap_err();
        assert!(error.transient, "{error}");
        assert!(error.message.contains("could not connect"), "{error}");
    }
}
