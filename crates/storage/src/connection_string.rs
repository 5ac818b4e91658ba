//! Azure Storage connection strings.
//!
//! Four forms are accepted: the account key form (`AccountName`, `AccountKey`, optional
//! `DefaultEndpointsProtocol` and `EndpointSuffix`), the same with explicit `TableEndpoint` /
//! `QueueEndpoint` / `BlobEndpoint`, the SAS form (`SharedAccessSignature` with explicit endpoints), and
//! `UseDevelopmentStorage=true` for the local emulator (path-style endpoints on 127.0.0.1).
//! Each `;`-separated pair is split at its first `=` only, since base64 keys and SAS tokens
//! contain `=`. Names are matched without regard to case; unknown names are ignored, as the
//! official SDKs do. Errors name the problem, never the value.

use std::fmt;

use super::credential::{AccountKey, Credential, SasToken};

/// The account name and key of the local storage emulator (public, documented values).
pub const EMULATOR_ACCOUNT: &str = "devstoreaccount1";
/// The well-known key of [`EMULATOR_ACCOUNT`].
pub const EMULATOR_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// A storage account: where its services live and how to sign requests to them.
#[derive(Clone, Debug)]
pub struct StorageAccount {
    name: Option<String>,
    credential: Credential,
    table_endpoint: Option<Endpoint>,
    queue_endpoint: Option<Endpoint>,
    blob_endpoint: Option<Endpoint>,
    /// The endpoints the connection string does not give, made from its account name (e.g.
    /// `QueueEndpoint`): when one cannot be reached, the error says it was made up.
    derived: Vec<&'static str>,
    /// The settings that give (or would give) the Table and Queue endpoints, as the user wrote
    /// them: `TableEndpoint` in a connection string, `C__tableServiceUri` for a connection by
    /// identity (see [`StorageAccount::setting_name`]).
    endpoint_settings: [String; 3],
    /// Certificates trusted as roots beside the built-in ones (an emulator's over HTTPS).
    trusted_roots: TrustedRoots,
}

/// Root certificates added to the built-in ones for one account's endpoints.
#[derive(Clone, Default)]
pub struct TrustedRoots(std::sync::Arc<Vec<reqwest::Certificate>>);

impl TrustedRoots {
    /// Every certificate of a PEM file's text.
    pub fn from_pem(pem: &[u8]) -> Option<TrustedRoots> {
        let certificates = reqwest::Certificate::from_pem_bundle(pem).ok()?;
        (!certificates.is_empty()).then(|| TrustedRoots(std::sync::Arc::new(certificates)))
    }

    /// The certificates.
    pub fn certificates(&self) -> &[reqwest::Certificate] {
        &self.0
    }
}

impl fmt::Debug for TrustedRoots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TrustedRoots({})", self.0.len())
    }
}

/// The base URL of one storage service, without a trailing slash, for example
/// `https://acct.table.core.windows.net` or `http://127.0.0.1:10002/devstoreaccount1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint(String);

impl Endpoint {
    fn parse(value: &str, setting: &'static str) -> Result<Self, ConnectionStringError> {
        Self::from_url(value).ok_or(ConnectionStringError::InvalidEndpoint(setting))
    }

    /// An http(s) URL with a host and without query or fragment, as an endpoint.
    pub(crate) fn from_url(value: &str) -> Option<Self> {
        let url = reqwest::Url::parse(value.trim()).ok()?;
        let usable = matches!(url.scheme(), "http" | "https")
            && url.host_str().is_some()
            && url.query().is_none()
            && url.fragment().is_none();
        usable.then(|| Endpoint(url.as_str().trim_end_matches('/').to_string()))
    }

    /// Whether requests to it go over TLS.
    pub fn is_https(&self) -> bool {
        self.0.starts_with("https://")
    }

    /// The base URL as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The URL of a resource below this endpoint; `path` must already be percent-encoded.
    pub(crate) fn join(&self, path: &str) -> String {
        format!("{}/{}", self.0, path)
    }
}

/// Why a connection string was refused. The message names the setting, never its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionStringError {
    #[error("the connection string is empty")]
    Empty,
    #[error("part {0} of the connection string is not a Name=Value pair")]
    NotAPair(usize),
    #[error("the connection string sets {0} more than once")]
    Duplicate(String),
    #[error("the connection string has no AccountName")]
    MissingAccountName,
    #[error("the connection string has neither AccountKey nor SharedAccessSignature")]
    MissingCredential,
    #[error("the AccountKey in the connection string is not valid base64")]
    InvalidAccountKey,
    #[error("the SharedAccessSignature in the connection string has no sig field")]
    InvalidSas,
    #[error("DefaultEndpointsProtocol must be http or https")]
    InvalidProtocol,
    #[error("{0} in the connection string is not an http(s) URL without query")]
    InvalidEndpoint(&'static str),
    #[error("UseDevelopmentStorage must be true when present")]
    InvalidDevelopmentStorage,
    #[error(
        "a SAS connection string needs an explicit TableEndpoint, QueueEndpoint or BlobEndpoint"
    )]
    SasWithoutEndpoint,
}

impl StorageAccount {
    /// Parses a connection string.
    pub fn from_connection_string(text: &str) -> Result<Self, ConnectionStringError> {
        let pairs = split_pairs(text)?;
        let get = |name: &str| {
            pairs
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(name))
                .map(|(_, value)| value.as_str())
        };
        if let Some(flag) = get("UseDevelopmentStorage") {
            if !flag.eq_ignore_ascii_case("true") {
                return Err(ConnectionStringError::InvalidDevelopmentStorage);
            }
            return Self::development_storage(get("DevelopmentStorageProxyUri"));
        }

        let name = get("AccountName").map(str::to_string);
        let credential = match (get("SharedAccessSignature"), get("AccountKey")) {
            (Some(sas), _) => {
                Credential::Sas(SasToken::parse(sas).ok_or(ConnectionStringError::InvalidSas)?)
            }
            (None, Some(key)) => {
                let account = name
                    .clone()
                    .ok_or(ConnectionStringError::MissingAccountName)?;
                let key =
                    AccountKey::from_base64(key).ok_or(ConnectionStringError::InvalidAccountKey)?;
                Credential::SharedKey { account, key }
            }
            (None, None) => return Err(ConnectionStringError::MissingCredential),
        };

        let protocol = get("DefaultEndpointsProtocol").unwrap_or("https");
        if !matches!(protocol, "http" | "https") {
            return Err(ConnectionStringError::InvalidProtocol);
        }
        let suffix = get("EndpointSuffix").unwrap_or("core.windows.net");
        let mut derived = Vec::new();
        let mut endpoint = |setting: &'static str,
                            service: &str|
         -> Result<Option<Endpoint>, ConnectionStringError> {
            match (get(setting), &name) {
                (Some(url), _) => Endpoint::parse(url, setting).map(Some),
                (None, Some(account)) => {
                    derived.push(setting);
                    Endpoint::parse(
                        &format!("{protocol}://{account}.{service}.{suffix}"),
                        setting,
                    )
                    .map(Some)
                }
                (None, None) => Ok(None),
            }
        };
        let table_endpoint = endpoint("TableEndpoint", "table")?;
        let queue_endpoint = endpoint("QueueEndpoint", "queue")?;
        let blob_endpoint = endpoint("BlobEndpoint", "blob")?;
        if table_endpoint.is_none() && queue_endpoint.is_none() && blob_endpoint.is_none() {
            return Err(ConnectionStringError::SasWithoutEndpoint);
        }
        Ok(StorageAccount {
            name,
            credential,
            table_endpoint,
            queue_endpoint,
            blob_endpoint,
            derived,
            endpoint_settings: Self::connection_string_settings(),
            trusted_roots: TrustedRoots::default(),
        })
    }

    /// How a connection string names its endpoints.
    fn connection_string_settings() -> [String; 3] {
        ["TableEndpoint", "QueueEndpoint", "BlobEndpoint"].map(String::from)
    }

    /// An account reached by a token: `endpoint_settings` name the settings that gave the
    /// Table and Queue endpoints, `derived` those of them made from an account name.
    pub(crate) fn by_token(
        name: Option<String>,
        credential: Credential,
        endpoints: [Option<Endpoint>; 3],
        derived: Vec<&'static str>,
        endpoint_settings: [String; 3],
    ) -> Self {
        let [table_endpoint, queue_endpoint, blob_endpoint] = endpoints;
        StorageAccount {
            name,
            credential,
            table_endpoint,
            queue_endpoint,
            blob_endpoint,
            derived,
            endpoint_settings,
            trusted_roots: TrustedRoots::default(),
        }
    }

    /// The same account with `roots` trusted beside the built-in root certificates.
    pub fn trusting(mut self, roots: TrustedRoots) -> Self {
        self.trusted_roots = roots;
        self
    }

    /// The root certificates trusted beside the built-in ones.
    pub fn trusted_roots(&self) -> &TrustedRoots {
        &self.trusted_roots
    }

    /// The setting the user writes for an endpoint named by its connection string name
    /// (`TableEndpoint`, `QueueEndpoint`): that name, or `C__tableServiceUri` /
    /// `C__queueServiceUri` for a connection `C` by identity.
    pub fn setting_name<'a>(&'a self, endpoint: &'a str) -> &'a str {
        match endpoint {
            "TableEndpoint" => &self.endpoint_settings[0],
            "QueueEndpoint" => &self.endpoint_settings[1],
            "BlobEndpoint" => &self.endpoint_settings[2],
            other => other,
        }
    }

    /// The local emulator's account on its default ports, or behind `proxy` (scheme and host).
    fn development_storage(proxy: Option<&str>) -> Result<Self, ConnectionStringError> {
        let origin = match proxy {
            None => "http://127.0.0.1".to_string(),
            Some(uri) => {
                let url = reqwest::Url::parse(uri).map_err(|_| {
                    ConnectionStringError::InvalidEndpoint("DevelopmentStorageProxyUri")
                })?;
                let host = url
                    .host_str()
                    .ok_or(ConnectionStringError::InvalidEndpoint(
                        "DevelopmentStorageProxyUri",
                    ))?;
                format!("{}://{}", url.scheme(), host)
            }
        };
        let key = AccountKey::from_base64(EMULATOR_KEY).expect("the emulator key is valid base64");
        Ok(StorageAccount {
            name: Some(EMULATOR_ACCOUNT.to_string()),
            credential: Credential::SharedKey {
                account: EMULATOR_ACCOUNT.to_string(),
                key,
            },
            table_endpoint: Some(Endpoint::parse(
                &format!("{origin}:10002/{EMULATOR_ACCOUNT}"),
                "TableEndpoint",
            )?),
            queue_endpoint: Some(Endpoint::parse(
                &format!("{origin}:10001/{EMULATOR_ACCOUNT}"),
                "QueueEndpoint",
            )?),
            blob_endpoint: Some(Endpoint::parse(
                &format!("{origin}:10000/{EMULATOR_ACCOUNT}"),
                "BlobEndpoint",
            )?),
            derived: Vec::new(),
            endpoint_settings: Self::connection_string_settings(),
            trusted_roots: TrustedRoots::default(),
        })
    }

    /// The account name, when the connection string gives one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// How requests are authorized.
    pub fn credential(&self) -> &Credential {
        &self.credential
    }

    /// Whether the endpoint named by `setting` (`TableEndpoint`, `QueueEndpoint`) was not in
    /// the connection string but made from its account name and endpoint suffix.
    pub fn is_derived(&self, setting: &str) -> bool {
        self.derived.contains(&setting)
    }

    /// The Table service endpoint, if the connection string has one.
    pub fn table_endpoint(&self) -> Option<&Endpoint> {
        self.table_endpoint.as_ref()
    }

    /// The Queue service endpoint, if the connection string has one.
    pub fn queue_endpoint(&self) -> Option<&Endpoint> {
        self.queue_endpoint.as_ref()
    }

    /// The Blob service endpoint, if the connection string has one.
    pub fn blob_endpoint(&self) -> Option<&Endpoint> {
        self.blob_endpoint.as_ref()
    }

    /// A connection string for the emulator account at explicit endpoints (free ports in tests).
    pub fn emulator_connection_string(table_port: u16, queue_port: u16) -> String {
        format!(
            "DefaultEndpointsProtocol=http;AccountName={EMULATOR_ACCOUNT};AccountKey={EMULATOR_KEY};\
             TableEndpoint=http://127.0.0.1:{table_port}/{EMULATOR_ACCOUNT};\
             QueueEndpoint=http://127.0.0.1:{queue_port}/{EMULATOR_ACCOUNT};"
        )
    }
}

fn split_pairs(text: &str) -> Result<Vec<(String, String)>, ConnectionStringError> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for (index, segment) in text.split(';').enumerate() {
        let segment = segment.trim();
        if segment.is_empty() {
            continue;
        }
        let (key, value) = segment
            .split_once('=')
            .ok_or(ConnectionStringError::NotAPair(index + 1))?;
        let key = key.trim();
        if key.is_empty() {
            return Err(ConnectionStringError::NotAPair(index + 1));
        }
        if pairs.iter().any(|(k, _)| k.eq_ignore_ascii_case(key)) {
            return Err(ConnectionStringError::Duplicate(key.to_string()));
        }
        pairs.push((key.to_string(), value.trim().to_string()));
    }
    if pairs.is_empty() {
        return Err(ConnectionStringError::Empty);
    }
    Ok(pairs)
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "a2V5LWJ5dGVzLWZvci10ZXN0cw==";

    #[test]
    fn account_key_form_builds_default_endpoints() {
        let account = StorageAccount::from_connection_string(&format!(
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={KEY};EndpointSuffix=core.windows.net"
        ))
        .unwrap();
        assert_eq!(account.name(), Some("acct"));
        assert_eq!(
            account.table_endpoint().unwrap().as_str(),
            "https://acct.table.core.windows.net"
        );
        assert_eq!(
            account.queue_endpoint().unwrap().as_str(),
            "https://acct.queue.core.windows.net"
        );
        assert!(matches!(account.credential(), Credential::SharedKey { .. }));
    }

    #[test]
    fn values_keep_their_equals_signs_and_explicit_endpoints_win() {
        let account = StorageAccount::from_connection_string(&format!(
            " AccountName = acct ; AccountKey={KEY};TableEndpoint=http://localhost:1234/acct/;"
        ))
        .unwrap();
        assert_eq!(
            account.table_endpoint().unwrap().as_str(),
            "http://localhost:1234/acct"
        );
        match account.credential() {
            Credential::SharedKey { key, .. } => assert_eq!(key.bytes(), b"key-bytes-for-tests"),
            other => panic!("{other:?}"),
        }
        // The queue endpoint was not given: made from the account name, and known to be.
        assert!(!account.is_derived("TableEndpoint"));
        assert!(account.is_derived("QueueEndpoint"));
        assert_eq!(
            account.queue_endpoint().unwrap().as_str(),
            "https://acct.queue.core.windows.net"
        );
    }

    #[test]
    fn sas_form_needs_explicit_endpoints() {
        let account = StorageAccount::from_connection_string(
            "TableEndpoint=https://acct.table.core.windows.net;SharedAccessSignature=sv=2019-02-02&sig=a%2Bb%3D",
        )
        .unwrap();
        assert!(account.queue_endpoint().is_none());
        assert!(matches!(account.credential(), Credential::Sas(_)));
        assert_eq!(
            StorageAccount::from_connection_string("SharedAccessSignature=sv=1&sig=x").unwrap_err(),
            ConnectionStringError::SasWithoutEndpoint
        );
        assert_eq!(
            StorageAccount::from_connection_string(
                "TableEndpoint=http://h/a;SharedAccessSignature=sv=1"
            )
            .unwrap_err(),
            ConnectionStringError::InvalidSas
        );
    }

    #[test]
    fn development_storage_expands_to_path_style_loopback() {
        let account = StorageAccount::from_connection_string("UseDevelopmentStorage=true").unwrap();
        assert_eq!(
            account.table_endpoint().unwrap().as_str(),
            "http://127.0.0.1:10002/devstoreaccount1"
        );
        assert_eq!(
            account.queue_endpoint().unwrap().as_str(),
            "http://127.0.0.1:10001/devstoreaccount1"
        );
        let proxied = StorageAccount::from_connection_string(
            "UseDevelopmentStorage=true;DevelopmentStorageProxyUri=http://myproxy",
        )
        .unwrap();
        assert_eq!(
            proxied.table_endpoint().unwrap().as_str(),
            "http://myproxy:10002/devstoreaccount1"
        );
    }

    #[test]
    fn errors_name_the_problem_and_never_the_key() {
        let secret = "c2VjcmV0LXNlY3JldC1zZWNyZXQ!!";
        let cases = [
            ("", ConnectionStringError::Empty),
            ("AccountName=a;garbage", ConnectionStringError::NotAPair(2)),
            (
                "AccountName=a;accountname=b",
                ConnectionStringError::Duplicate("accountname".into()),
            ),
            (
                &format!("AccountKey={KEY}") as &str,
                ConnectionStringError::MissingAccountName,
            ),
            ("AccountName=a", ConnectionStringError::MissingCredential),
            (
                &format!("AccountName=a;AccountKey={secret}"),
                ConnectionStringError::InvalidAccountKey,
            ),
            (
                &format!("AccountName=a;AccountKey={KEY};DefaultEndpointsProtocol=ftp"),
                ConnectionStringError::InvalidProtocol,
            ),
            (
                &format!("AccountName=a;AccountKey={KEY};TableEndpoint=127.0.0.1:10002"),
                ConnectionStringError::InvalidEndpoint("TableEndpoint"),
            ),
            (
                "UseDevelopmentStorage=false",
                ConnectionStringError::InvalidDevelopmentStorage,
            ),
        ];
        for (text, expected) in cases {
            let err = StorageAccount::from_connection_string(text).unwrap_err();
            assert_eq!(err, expected, "{text}");
            let message = err.to_string();
            assert!(
                !message.contains(secret) && !message.contains(KEY),
                "{message}"
            );
        }
    }

    #[test]
    fn debug_output_redacts_the_key() {
        let account =
            StorageAccount::from_connection_string(&format!("AccountName=acct;AccountKey={KEY}"))
                .unwrap();
        let debug = format!("{account:?}");
        assert!(!debug.contains(KEY), "{debug}");
        assert!(!debug.contains("key-bytes"), "{debug}");
    }
}
