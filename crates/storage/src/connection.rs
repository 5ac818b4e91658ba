//! A storage connection by name, resolved from app settings the way the Functions host resolves
//! the `connection` of a storage binding:
//! - an app setting named `C` holds a connection string (account key, SAS, or
//!   `UseDevelopmentStorage=true`);
//! - or settings under the prefix `C__` describe a connection by identity: `C__accountName`, or
//!   the service URIs `C__tableServiceUri`, `C__queueServiceUri` and `C__blobServiceUri`;
//!   `C__credential` = `managedidentity` (the default); `C__clientId` for a
//!   user-assigned identity. `:` separates as well as `__` (`C:accountName`), as in
//!   local.settings.json.
//!
//! A connection by identity takes its tokens from the platform's managed identity endpoint
//! (`IDENTITY_ENDPOINT`, `IDENTITY_HEADER`, read from the same settings), or, where there is
//! none (a developer's machine), from an app registration's secret: `C__tenantId`,
//! `C__clientId` and `C__clientSecret`, the settings the Functions host reads for local
//! development. A setting
//! [`TRUSTED_CA_SETTING`] may name a PEM file of root certificates to trust beside the
//! built-in ones, for an emulator or a private endpoint with a certificate of its own.
//! Errors name settings, never their values.

use super::connection_string::{ConnectionStringError, Endpoint, StorageAccount, TrustedRoots};
use super::credential::Credential;
use super::token::{
    ClientSecret, ManagedIdentity, TokenCredentials, TokenSource, DEFAULT_AUTHORITY,
    STORAGE_RESOURCE,
};

/// App settings by name: the environment in the handler, local.settings.json in devhost.
pub trait SettingLookup {
    fn setting(&self, name: &str) -> Option<String>;
}

impl<F: Fn(&str) -> Option<String>> SettingLookup for F {
    fn setting(&self, name: &str) -> Option<String> {
        self(name)
    }
}

/// The app setting that names a PEM file of extra root certificates for storage endpoints.
pub const TRUSTED_CA_SETTING: &str = "TABLESCAN_TRUSTED_CA_FILE";

/// Why a connection name gives no usable account. Messages name settings, never values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionError {
    #[error(
        "no app setting named {0:?} exists (a connection string), nor {0}__accountName or \
         {0}__tableServiceUri (a connection by identity)"
    )]
    NotSet(String),
    #[error("app setting {setting:?} is not a usable connection string: {error}")]
    ConnectionString {
        setting: String,
        error: ConnectionStringError,
    },
    #[error("app setting {setting:?} {why}")]
    Identity { setting: String, why: String },
    #[error(
        "connection {connection:?} is by identity, and this process has no managed identity \
         endpoint ({why}); identity connections work where the platform gives the app an \
         identity (IDENTITY_ENDPOINT and IDENTITY_HEADER), elsewhere use a connection string"
    )]
    NoIdentityEndpoint { connection: String, why: String },
    #[error("app setting {TRUSTED_CA_SETTING} {0}")]
    TrustedRoots(String),
}

/// The account that connection `name` reaches, from `settings`, trusting the extra root
/// certificates [`TRUSTED_CA_SETTING`] names (read from its file on every call). A connection
/// by identity takes its token credential from `tokens` (one per identity).
pub fn resolve(
    name: &str,
    settings: &dyn SettingLookup,
    tokens: &TokenCredentials,
) -> Result<StorageAccount, ConnectionError> {
    let account = resolve_without_extra_roots(name, settings, tokens)?;
    Ok(match trusted_roots(settings)? {
        Some(roots) => account.trusting(roots),
        None => account,
    })
}

/// The account that connection `name` reaches, from `settings`, trusting the built-in root
/// certificates only: for a caller that read [`TRUSTED_CA_SETTING`] once itself and adds its
/// roots with [`StorageAccount::trusting`].
pub fn resolve_without_extra_roots(
    name: &str,
    settings: &dyn SettingLookup,
    tokens: &TokenCredentials,
) -> Result<StorageAccount, ConnectionError> {
    Ok(
        match settings.setting(name).filter(|v| !v.trim().is_empty()) {
            Some(text) => StorageAccount::from_connection_string(&text).map_err(|error| {
                ConnectionError::ConnectionString {
                    setting: name.to_string(),
                    error,
                }
            })?,
            None => by_identity(name, settings, tokens)?,
        },
    )
}

/// The value of `C__property` (or `C:property`) and the name it was found under.
fn property(name: &str, property: &str, settings: &dyn SettingLookup) -> Option<(String, String)> {
    ["__", ":"].iter().find_map(|separator| {
        let setting = format!("{name}{separator}{property}");
        let value = settings.setting(&setting)?;
        let value = value.trim();
        (!value.is_empty()).then(|| (setting, value.to_string()))
    })
}

fn by_identity(
    name: &str,
    settings: &dyn SettingLookup,
    tokens: &TokenCredentials,
) -> Result<StorageAccount, ConnectionError> {
    let get = |p: &str| property(name, p, settings);
    let account_name = get("accountName");
    let uris = [
        get("tableServiceUri"),
        get("queueServiceUri"),
        get("blobServiceUri"),
    ];
    if account_name.is_none() && uris.iter().all(Option::is_none) {
        if let Some((setting, _)) = get("serviceUri") {
            return Err(ConnectionError::Identity {
                setting,
                why: format!(
                    "names one service, and a scan's connection needs to know which: set \
                     {name}__tableServiceUri (and {name}__queueServiceUri where queues are \
                     used) instead"
                ),
            });
        }
        return Err(ConnectionError::NotSet(name.to_string()));
    }
    let client_secret = get("clientSecret");
    refuse_what_cannot_work(&get, &account_name, &client_secret)?;
    let (endpoints, derived, endpoint_settings) = service_endpoints(name, &account_name, uris)?;
    let source = match client_secret {
        Some((secret_setting, secret)) => {
            client_secret_source(name, &secret_setting, &secret, &get, settings)?
        }
        None => managed_identity_source(name, get("clientId").map(|(_, id)| id), settings)?,
    };
    let credential = Credential::Bearer(tokens.for_source(source));
    Ok(StorageAccount::by_token(
        account_name.map(|(_, account)| account),
        credential,
        endpoints,
        derived,
        endpoint_settings,
    ))
}

/// A setting `C__property` (with the name it was found under) and its value.
type Found = Option<(String, String)>;

fn refuse(setting: String, why: &str) -> ConnectionError {
    ConnectionError::Identity {
        setting,
        why: why.to_string(),
    }
}

/// Refuses the settings of a connection by identity that cannot work: a resource id, a
/// credential other than a managed identity or contradicted by a client secret, an account
/// name that is not one.
fn refuse_what_cannot_work(
    get: &dyn Fn(&str) -> Found,
    account_name: &Found,
    client_secret: &Found,
) -> Result<(), ConnectionError> {
    if let Some((setting, _)) = get("managedIdentityResourceId") {
        return Err(refuse(
            setting,
            "is not supported: name a user-assigned identity by its client id (clientId)",
        ));
    }
    if let Some((setting, credential)) = get("credential") {
        if !credential.eq_ignore_ascii_case("managedidentity") {
            return Err(refuse(setting, "must be managedidentity"));
        }
        if let Some((secret_setting, _)) = client_secret {
            return Err(refuse(
                secret_setting.clone(),
                &format!("and {setting} contradict each other: set one of them"),
            ));
        }
    }
    if let Some((setting, account)) = account_name {
        let valid = (3..=24).contains(&account.len())
            && account
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        if !valid {
            return Err(refuse(
                setting.clone(),
                "is not a storage account name (3 to 24 lower-case letters and digits)",
            ));
        }
    }
    Ok(())
}

/// The Table, Queue and Blob endpoints of a connection by identity (what
/// [`StorageAccount::by_token`] takes): each endpoint, the connection-string keys of those made
/// from the account name (`TableEndpoint`...), and the setting that names (or would name) each.
type ServiceEndpoints = ([Option<Endpoint>; 3], Vec<&'static str>, [String; 3]);

/// The [`ServiceEndpoints`] of a connection by identity, each from its
/// `C__<service>ServiceUri` (https only: tokens are only sent over HTTPS) or else made from the
/// account name.
fn service_endpoints(
    name: &str,
    account_name: &Found,
    uris: [Found; 3],
) -> Result<ServiceEndpoints, ConnectionError> {
    const SERVICES: [(&str, &str, &str); 3] = [
        ("TableEndpoint", "tableServiceUri", "table"),
        ("QueueEndpoint", "queueServiceUri", "queue"),
        ("BlobEndpoint", "blobServiceUri", "blob"),
    ];
    let mut derived = Vec::new();
    let mut endpoints: [Option<Endpoint>; 3] = [None, None, None];
    let mut settings: [String; 3] = Default::default();
    for (i, (given, (generic, property, service))) in uris.into_iter().zip(SERVICES).enumerate() {
        (endpoints[i], settings[i]) = match (given, account_name) {
            (Some((setting, uri)), _) => {
                let endpoint = Endpoint::from_url(&uri)
                    .filter(Endpoint::is_https)
                    .ok_or_else(|| {
                        refuse(
                            setting.clone(),
                            "is not an https URL without query (tokens are only sent over \
                             HTTPS)",
                        )
                    })?;
                (Some(endpoint), setting)
            }
            (None, Some((_, account))) => {
                derived.push(generic);
                let endpoint =
                    Endpoint::from_url(&format!("https://{account}.{service}.core.windows.net"));
                (endpoint, format!("{name}__{property}"))
            }
            (None, None) => (None, format!("{name}__{property}")),
        };
    }
    Ok((endpoints, derived, settings))
}

/// The platform's managed identity (`clientId` picks a user-assigned one).
fn managed_identity_source(
    name: &str,
    client_id: Option<String>,
    settings: &dyn SettingLookup,
) -> Result<TokenSource, ConnectionError> {
    let no_endpoint = |why: &str| ConnectionError::NoIdentityEndpoint {
        connection: name.to_string(),
        why: why.to_string(),
    };
    let identity_endpoint = settings
        .setting("IDENTITY_ENDPOINT")
        .ok_or_else(|| no_endpoint("IDENTITY_ENDPOINT is not set"))?;
    let identity_header = settings
        .setting("IDENTITY_HEADER")
        .ok_or_else(|| no_endpoint("IDENTITY_HEADER is not set"))?;
    let identity = ManagedIdentity::new(
        &identity_endpoint,
        &identity_header,
        client_id.as_deref(),
        STORAGE_RESOURCE,
    )
    .map_err(|why| no_endpoint(&why))?;
    Ok(TokenSource::ManagedIdentity(identity))
}

/// An app registration with a secret: `C__tenantId`, `C__clientId`, `C__clientSecret`, as the
/// Functions host reads them for local development; the authority from `AZURE_AUTHORITY_HOST`.
fn client_secret_source(
    name: &str,
    secret_setting: &str,
    secret: &str,
    get: &dyn Fn(&str) -> Option<(String, String)>,
    settings: &dyn SettingLookup,
) -> Result<TokenSource, ConnectionError> {
    let refuse = |why: String| ConnectionError::Identity {
        setting: secret_setting.to_string(),
        why,
    };
    let (Some((_, tenant)), Some((_, client_id))) = (get("tenantId"), get("clientId")) else {
        return Err(refuse(format!(
            "needs {name}__tenantId and {name}__clientId beside it (an app registration)"
        )));
    };
    let authority = settings
        .setting(AUTHORITY_SETTING)
        .filter(|a| !a.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_AUTHORITY.to_string());
    let source = ClientSecret::new(&authority, &tenant, &client_id, secret, STORAGE_RESOURCE)
        .map_err(|why| {
            if why.starts_with("is not") {
                ConnectionError::Identity {
                    setting: AUTHORITY_SETTING.to_string(),
                    why,
                }
            } else {
                refuse(format!("cannot be used: {why}"))
            }
        })?;
    Ok(TokenSource::ClientSecret(source))
}

/// The setting that names another Microsoft Entra authority (a national cloud), as for the
/// Azure SDKs.
pub const AUTHORITY_SETTING: &str = "AZURE_AUTHORITY_HOST";

/// The extra root certificates [`TRUSTED_CA_SETTING`] names, if it is set.
fn trusted_roots(settings: &dyn SettingLookup) -> Result<Option<TrustedRoots>, ConnectionError> {
    let Some(path) = settings
        .setting(TRUSTED_CA_SETTING)
        .filter(|p| !p.trim().is_empty())
    else {
        return Ok(None);
    };
    let pem = std::fs::read(path.trim()).map_err(|e| {
        ConnectionError::TrustedRoots(format!("names a file that cannot be read ({e})"))
    })?;
    TrustedRoots::from_pem(&pem).map(Some).ok_or_else(|| {
        ConnectionError::TrustedRoots("names a file without a PEM certificate".to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name: &str| map.get(name).cloned()
    }

    const PLATFORM: [(&str, &str); 2] = [
        ("IDENTITY_ENDPOINT", "http://127.0.0.1:41000/msi/token"),
        ("IDENTITY_HEADER", "secret-header"),
    ];

    fn with_platform<'a>(pairs: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut all = PLATFORM.to_vec();
        all.extend_from_slice(pairs);
        all
    }

    #[test]
    fn an_account_name_gives_every_endpoint_and_a_token_credential() {
        let settings = lookup(&with_platform(&[("Src__accountName", "acct1")]));
        let account = resolve("Src", &settings, &TokenCredentials::default()).unwrap();
        assert_eq!(
            account.table_endpoint().unwrap().as_str(),
            "https://acct1.table.core.windows.net"
        );
        assert_eq!(
            account.queue_endpoint().unwrap().as_str(),
            "https://acct1.queue.core.windows.net"
        );
        assert!(account.is_derived("TableEndpoint"));
        assert_eq!(
            account.setting_name("TableEndpoint"),
            "Src__tableServiceUri"
        );
        assert!(matches!(account.credential(), Credential::Bearer(_)));
        // The header is a secret: not in Debug.
        assert!(!format!("{account:?}").contains("secret-header"));
    }

    #[test]
    fn service_uris_win_and_colons_separate_too() {
        let settings = lookup(&with_platform(&[
            ("Src:accountName", "acct1"),
            (
                "Src:tableServiceUri",
                "https://127.0.0.1:10002/devstoreaccount1/",
            ),
            ("Src__clientId", "0000-1111"),
            ("Src__credential", "ManagedIdentity"),
        ]));
        let account = resolve("Src", &settings, &TokenCredentials::default()).unwrap();
        assert_eq!(
            account.table_endpoint().unwrap().as_str(),
            "https://127.0.0.1:10002/devstoreaccount1"
        );
        assert!(!account.is_derived("TableEndpoint"));
        assert_eq!(account.setting_name("TableEndpoint"), "Src:tableServiceUri");
        let Credential::Bearer(token) = account.credential() else {
            panic!("not a token credential");
        };
        assert!(token.describe().contains("0000-1111"));
    }

    #[test]
    fn a_client_secret_needs_no_identity_endpoint() {
        let settings = lookup(&[
            (
                "Src__tableServiceUri",
                "https://acct1.table.core.windows.net",
            ),
            ("Src__tenantId", "contoso.onmicrosoft.com"),
            ("Src__clientId", "app-1"),
            ("Src__clientSecret", "s3cr3t"),
        ]);
        let account = resolve("Src", &settings, &TokenCredentials::default()).unwrap();
        let Credential::Bearer(token) = account.credential() else {
            panic!("not a token credential");
        };
        assert!(token.describe().contains("app-1"), "{}", token.describe());
        assert!(!format!("{account:?}").contains("s3cr3t"));
    }

    #[test]
    fn a_connection_string_setting_comes_first() {
        let settings = lookup(&with_platform(&[
            ("Src", "UseDevelopmentStorage=true"),
            ("Src__accountName", "acct1"),
        ]));
        let account = resolve("Src", &settings, &TokenCredentials::default()).unwrap();
        assert!(matches!(account.credential(), Credential::SharedKey { .. }));
    }

    #[test]
    fn what_cannot_work_is_refused_naming_the_setting() {
        let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
            (with_platform(&[]), "no app setting named \"Src\""),
            (
                with_platform(&[("Src__serviceUri", "https://a.queue.core.windows.net")]),
                "Src__tableServiceUri",
            ),
            (
                with_platform(&[("Src__tableServiceUri", "http://a.table.core.windows.net")]),
                "\"Src__tableServiceUri\" is not an https URL",
            ),
            (
                with_platform(&[("Src__tableServiceUri", "https://a/?sv=1")]),
                "\"Src__tableServiceUri\" is not an https URL",
            ),
            (
                with_platform(&[("Src__accountName", "Not_An_Account")]),
                "\"Src__accountName\" is not a storage account name",
            ),
            (
                with_platform(&[("Src__accountName", "acct1"), ("Src__credential", "secret")]),
                "\"Src__credential\" must be managedidentity",
            ),
            (
                with_platform(&[
                    ("Src__accountName", "acct1"),
                    ("Src__managedIdentityResourceId", "/subscriptions/x"),
                ]),
                "clientId",
            ),
            (
                with_platform(&[
                    ("Src__accountName", "acct1"),
                    ("Src__clientSecret", "s3cr3t"),
                ]),
                "\"Src__clientSecret\" needs Src__tenantId and Src__clientId",
            ),
            (
                with_platform(&[
                    ("Src__accountName", "acct1"),
                    ("Src__clientSecret", "s3cr3t"),
                    ("Src__credential", "managedidentity"),
                    ("Src__tenantId", "t"),
                    ("Src__clientId", "c"),
                ]),
                "contradict each other",
            ),
            (
                with_platform(&[
                    ("Src__accountName", "acct1"),
                    ("Src__clientSecret", "s3cr3t"),
                    ("Src__tenantId", "t"),
                    ("Src__clientId", "c"),
                    (AUTHORITY_SETTING, "http://login.example.com"),
                ]),
                "\"AZURE_AUTHORITY_HOST\" is not an https URL",
            ),
            (
                vec![("Src__accountName", "acct1")],
                "no managed identity endpoint (IDENTITY_ENDPOINT is not set)",
            ),
            (
                with_platform(&[("Src", "AccountName=a;AccountKey=!!")]),
                "\"Src\" is not a usable connection string",
            ),
            (
                with_platform(&[
                    ("Src__accountName", "acct1"),
                    (TRUSTED_CA_SETTING, "/nonexistent/ca.pem"),
                ]),
                "TABLESCAN_TRUSTED_CA_FILE names a file that cannot be read",
            ),
        ];
        for (pairs, expected) in cases {
            let error = resolve("Src", &lookup(&pairs), &TokenCredentials::default())
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{pairs:?}: {error}");
            assert!(
                !error.contains("s3cr3t") && !error.contains("secret-header"),
                "{error}"
            );
        }
    }
}
