//! Connections by identity, end to end on this machine: an Azurite that takes OAuth tokens
//! (`--oauth basic`, which needs HTTPS: it runs with a certificate made for the test, signed by
//! a certificate authority made with it, which only the test's clients trust), and a stand-in
//! for the platform's managed identity endpoint that issues tokens.
//!
//! Azurite's basic OAuth decodes a token without checking its signature, and checks its times
//! (`nbf`, `exp`, `iat`), its issuer (a Microsoft Entra prefix such as
//! `https://sts.windows.net/`) and its audience (`https://storage.azure.com` among others): so
//! the stand-in's unsigned tokens pass, and one for another audience or past its expiry fails
//! exactly as Azure would refuse it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;

use super::{free_port, stop};

/// A certificate authority and a server certificate for 127.0.0.1 signed by it, as PEM files.
pub struct Certificates {
    pub authority: PathBuf,
    pub server: PathBuf,
    pub server_key: PathBuf,
}

impl Certificates {
    pub fn make(dir: &Path) -> Certificates {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let authority_key = KeyPair::generate().unwrap();
        let mut authority = CertificateParams::new(Vec::<String>::new()).unwrap();
        authority.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        authority
            .distinguished_name
            .push(rcgen::DnType::CommonName, "tablescan test authority");
        let authority_cert = authority.self_signed(&authority_key).unwrap();
        let issuer = Issuer::new(authority, authority_key);
        let server_key = KeyPair::generate().unwrap();
        let server = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".into()])
            .unwrap()
            .signed_by(&server_key, &issuer)
            .unwrap();
        std::fs::create_dir_all(dir).unwrap();
        let write = |name: &str, text: String| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        Certificates {
            authority: write("authority.pem", authority_cert.pem()),
            server: write("server.pem", server.pem()),
            server_key: write("server-key.pem", server_key.serialize_pem()),
        }
    }
}

/// An Azurite of the test's own, in memory, over HTTPS, with basic OAuth on.
pub struct OAuthAzurite {
    child: Option<Child>,
    pub table: String,
    pub queue: String,
    pub blob: String,
    pub certificates: Certificates,
    dir: PathBuf,
}

impl OAuthAzurite {
    pub fn start() -> OAuthAzurite {
        let dir = std::env::temp_dir().join(format!(
            "azurite-oauth-{}",
            super::unique("").replace('x', "-")
        ));
        let certificates = Certificates::make(&dir);
        let [blob, queue, table] = [free_port(), free_port(), free_port()];
        let entry = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../azurite/node_modules/azurite/dist/src/azurite.js");
        let child = Command::new("node")
            .arg(entry)
            .args([
                "--inMemoryPersistence",
                "--disableTelemetry",
                "--silent",
                "--skipApiVersionCheck",
                "--oauth",
                "basic",
                "--cert",
            ])
            .arg(&certificates.server)
            .arg("--key")
            .arg(&certificates.server_key)
            .args(["--blobHost", "127.0.0.1", "--queueHost", "127.0.0.1"])
            .args(["--tableHost", "127.0.0.1"])
            .args(["--blobPort", &blob.to_string()])
            .args(["--queuePort", &queue.to_string()])
            .args(["--tablePort", &table.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("node runs the pinned Azurite (scripts/test installs it)");
        let deadline = Instant::now() + Duration::from_secs(30);
        for port in [blob, queue, table] {
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(Instant::now() < deadline, "Azurite did not come up");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        OAuthAzurite {
            child: Some(child),
            table: format!("https://127.0.0.1:{table}/devstoreaccount1"),
            queue: format!("https://127.0.0.1:{queue}/devstoreaccount1"),
            blob: format!("https://127.0.0.1:{blob}/devstoreaccount1"),
            certificates,
            dir,
        }
    }

    /// A key-based connection string to it, for the test's own setup and checks (the app under
    /// test gets none).
    pub fn key_connection_string(&self) -> String {
        format!(
            "DefaultEndpointsProtocol=https;AccountName=devstoreaccount1;AccountKey={};\
             TableEndpoint={};QueueEndpoint={};",
            tablescan::storage::connection_string::EMULATOR_KEY,
            self.table,
            self.queue
        )
    }

    /// The account by key, trusting the test's authority.
    pub fn key_account(&self) -> tablescan::storage::StorageAccount {
        let pem = std::fs::read(&self.certificates.authority).unwrap();
        tablescan::storage::StorageAccount::from_connection_string(&self.key_connection_string())
            .unwrap()
            .trusting(tablescan::storage::connection_string::TrustedRoots::from_pem(&pem).unwrap())
    }
}

impl Drop for OAuthAzurite {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop::signal_and_wait(&mut child, "-KILL", Duration::from_secs(10));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One token request the stand-in received.
#[derive(Debug, Clone, Default)]
pub struct TokenRequest {
    pub client_id: Option<String>,
    pub resource: Option<String>,
    pub api_version: Option<String>,
    /// For the client credentials grant: the tenant in the path and the form's fields.
    pub tenant: Option<String>,
    pub form: HashMap<String, String>,
}

/// What the stand-in issues, per client id (`None`: the system-assigned identity).
#[derive(Debug, Clone)]
pub struct Issuing {
    pub audience: String,
    pub lifetime: Duration,
}

impl Default for Issuing {
    fn default() -> Self {
        Issuing {
            audience: "https://storage.azure.com".into(),
            lifetime: Duration::from_secs(3600),
        }
    }
}

#[derive(Default)]
struct Issuer {
    default: Issuing,
    per_client: HashMap<String, Issuing>,
    /// App registrations and their secrets, for the client credentials grant.
    registrations: HashMap<String, String>,
    requests: Vec<TokenRequest>,
}

/// A stand-in for the managed identity endpoint (`IDENTITY_ENDPOINT`), on loopback, with the
/// platform's contract: `GET ?api-version=2019-08-01&resource=...[&client_id=...]` with the
/// header `X-IDENTITY-HEADER`, answered with `access_token` and `expires_on` (seconds since
/// the epoch, as a string). It is also an authority for the client credentials grant:
/// `POST /{tenant}/oauth2/v2.0/token` with a form, answered with `access_token` and
/// `expires_in` (its base URL is [`IdentityEndpoint::authority`]).
pub struct IdentityEndpoint {
    pub url: String,
    pub header: String,
    issuer: Arc<Mutex<Issuer>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl IdentityEndpoint {
    pub fn start(default: Issuing) -> IdentityEndpoint {
        let issuer = Arc::new(Mutex::new(Issuer {
            default,
            ..Issuer::default()
        }));
        let header = uuid::Uuid::new_v4().to_string();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}/msi/token", listener.local_addr().unwrap());
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = {
            let issuer = issuer.clone();
            let registrations = issuer.clone();
            let expected = header.clone();
            axum::Router::new()
                .route(
                    "/msi/token",
                    axum::routing::get(
                        move |headers: axum::http::HeaderMap,
                              query: axum::extract::Query<HashMap<String, String>>| {
                            let issuer = issuer.clone();
                            let expected = expected.clone();
                            async move { issue(&issuer, &expected, &headers, &query.0) }
                        },
                    ),
                )
                .route(
                    "/{tenant}/oauth2/v2.0/token",
                    axum::routing::post(
                        move |tenant: axum::extract::Path<String>,
                              form: axum::extract::Form<HashMap<String, String>>| {
                            let issuer = registrations.clone();
                            async move { grant(&issuer, tenant.0, form.0) }
                        },
                    ),
                )
        };
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await
                    .unwrap();
            });
        });
        IdentityEndpoint {
            url,
            header,
            issuer,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }

    /// Issue `issuing` to the user-assigned identity `client_id`.
    pub fn issue_to(&self, client_id: &str, issuing: Issuing) {
        self.issuer
            .lock()
            .unwrap()
            .per_client
            .insert(client_id.to_string(), issuing);
    }

    /// Registers an app with a secret, for the client credentials grant.
    pub fn register(&self, client_id: &str, secret: &str) {
        self.issuer
            .lock()
            .unwrap()
            .registrations
            .insert(client_id.to_string(), secret.to_string());
    }

    /// The base URL of the stand-in as an authority (`AZURE_AUTHORITY_HOST`).
    pub fn authority(&self) -> String {
        self.url.trim_end_matches("/msi/token").to_string()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<TokenRequest> {
        self.issuer.lock().unwrap().requests.clone()
    }

    /// The settings the platform gives a process with an identity.
    pub fn settings(&self) -> [(&'static str, String); 2] {
        [
            ("IDENTITY_ENDPOINT", self.url.clone()),
            ("IDENTITY_HEADER", self.header.clone()),
        ]
    }
}

impl Drop for IdentityEndpoint {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn issue(
    issuer: &Mutex<Issuer>,
    expected_header: &str,
    headers: &axum::http::HeaderMap,
    query: &HashMap<String, String>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let mut issuer = issuer.lock().unwrap();
    let request = TokenRequest {
        client_id: query.get("client_id").cloned(),
        resource: query.get("resource").cloned(),
        api_version: query.get("api-version").cloned(),
        ..TokenRequest::default()
    };
    issuer.requests.push(request.clone());
    let header_ok = headers
        .get("x-identity-header")
        .is_some_and(|h| h == expected_header);
    if !header_ok || request.api_version.as_deref() != Some("2019-08-01") {
        return (
            axum::http::StatusCode::BAD_REQUEST,
            axum::Json(serde_json::json!({"statusCode": 400, "message": "bad request"})),
        )
            .into_response();
    }
    let issuing = match &request.client_id {
        Some(id) => match issuer.per_client.get(id) {
            Some(issuing) => issuing.clone(),
            None => {
                return (
                    axum::http::StatusCode::BAD_REQUEST,
                    axum::Json(serde_json::json!({
                        "statusCode": 400,
                        "message": format!("No user-assigned identity with client id {id}")
                    })),
                )
                    .into_response()
            }
        },
        None => issuer.default.clone(),
    };
    let (token, expires) = token_for(&issuing, request.client_id.as_deref());
    axum::Json(serde_json::json!({
        "access_token": token,
        "expires_on": expires.to_string(),
        "resource": request.resource,
        "token_type": "Bearer",
        "client_id": request.client_id.as_deref().unwrap_or("system"),
    }))
    .into_response()
}

/// A token for `issuing`, and when it expires (seconds since the epoch).
fn token_for(issuing: &Issuing, subject: Option<&str>) -> (String, u64) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let expires = now + issuing.lifetime.as_secs();
    let token = jwt(&serde_json::json!({
        "aud": issuing.audience,
        "iss": "https://sts.windows.net/72f988bf-86f1-41af-91ab-2d7cd011db47/",
        "iat": now,
        "nbf": now,
        "exp": expires,
        "oid": subject.unwrap_or("system-assigned"),
        "tid": "72f988bf-86f1-41af-91ab-2d7cd011db47",
    }));
    (token, expires)
}

/// The client credentials grant: a registered client with its secret gets a storage token.
fn grant(
    issuer: &Mutex<Issuer>,
    tenant: String,
    form: HashMap<String, String>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let mut issuer = issuer.lock().unwrap();
    issuer.requests.push(TokenRequest {
        client_id: form.get("client_id").cloned(),
        tenant: Some(tenant),
        form: form.clone(),
        ..TokenRequest::default()
    });
    let client = form.get("client_id").cloned().unwrap_or_default();
    let known = issuer.registrations.get(&client);
    let valid = form.get("grant_type").map(String::as_str) == Some("client_credentials")
        && form.get("scope").map(String::as_str) == Some("https://storage.azure.com/.default")
        && known.is_some()
        && known == form.get("client_secret");
    if !valid {
        return (
            axum::http::StatusCode::UNAUTHORIZED,
            axum::Json(serde_json::json!({
                "error": "invalid_client",
                "error_description": "AADSTS7000215: Invalid client secret provided.\r\nTrace ID: x"
            })),
        )
            .into_response();
    }
    let (token, _) = token_for(&issuer.default, Some(&client));
    axum::Json(serde_json::json!({
        "token_type": "Bearer",
        "expires_in": issuer.default.lifetime.as_secs(),
        "access_token": token,
    }))
    .into_response()
}

/// An unsigned JWT (the signature part is filler: Azurite does not check it).
fn jwt(claims: &serde_json::Value) -> String {
    let encode = |value: &serde_json::Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value.to_string())
    };
    format!(
        "{}.{}.{}",
        encode(&serde_json::json!({"alg": "RS256", "typ": "JWT"})),
        encode(claims),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("not-signed")
    )
}
