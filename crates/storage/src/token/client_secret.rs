//! Tokens for an app registration (service principal) with a client secret: the OAuth 2.0
//! client credentials grant of the Microsoft identity platform, for running against real
//! storage where no managed identity exists (a developer's machine, a CI job).
//!
//! The contract (Microsoft identity platform documentation, "client credentials flow"; the
//! Azure SDKs' `ClientSecretCredential`):
//! `POST {authority}/{tenant}/oauth2/v2.0/token` with the form `grant_type=client_credentials`,
//! `client_id`, `client_secret` and `scope=<resource>/.default`; the answer is JSON with
//! `access_token` and `expires_in` (seconds). The authority is `https://login.microsoftonline.com`
//! unless `AZURE_AUTHORITY_HOST` names another (a national cloud), as for the SDKs.

use super::exchange::{exchange, retrying};
use super::{AccessToken, TokenError};

/// The public cloud's authority.
pub const DEFAULT_AUTHORITY: &str = "https://login.microsoftonline.com";

/// One app registration with a secret, for one audience.
pub struct ClientSecret {
    authority: reqwest::Url,
    tenant: String,
    client_id: String,
    /// A secret, never shown.
    secret: String,
    scope: String,
}

impl std::fmt::Debug for ClientSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientSecret")
            .field("authority", &self.authority.as_str())
            .field("tenant", &self.tenant)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

impl ClientSecret {
    /// The registration `client_id` of `tenant` (an id or a domain name), authenticated with
    /// `secret`, asking `authority` (https, or http on loopback for tests) for tokens for
    /// `resource`.
    pub fn new(
        authority: &str,
        tenant: &str,
        client_id: &str,
        secret: &str,
        resource: &str,
    ) -> Result<ClientSecret, String> {
        let authority = reqwest::Url::parse(authority.trim())
            .ok()
            .filter(|url| {
                url.scheme() == "https"
                    || (url.scheme() == "http"
                        && matches!(url.host_str(), Some("127.0.0.1" | "localhost")))
            })
            .ok_or("is not an https URL")?;
        let tenant = tenant.trim();
        let valid_tenant = !tenant.is_empty()
            && tenant
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
        if !valid_tenant {
            return Err("tenantId is not a tenant id or domain name".into());
        }
        if client_id.trim().is_empty() || secret.trim().is_empty() {
            return Err("clientId and clientSecret must not be empty".into());
        }
        Ok(ClientSecret {
            authority,
            tenant: tenant.to_string(),
            client_id: client_id.trim().to_string(),
            secret: secret.trim().to_string(),
            scope: format!("{}/.default", resource.trim_end_matches('/')),
        })
    }

    pub(super) fn describe(&self) -> String {
        format!(
            "the app registration with client id {} in tenant {}",
            self.client_id, self.tenant
        )
    }

    /// Tells sources apart for the shared cache: two connections of one registration with
    /// different secrets must not share tokens (one secret may be wrong, or revoked). The
    /// secret enters as a digest, so the key holds nothing that could be used.
    pub(super) fn key(&self) -> String {
        let digest = ring::digest::digest(&ring::digest::SHA256, self.secret.as_bytes());
        let fingerprint: String = digest.as_ref()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!(
            "client secret {} {} {} {} {fingerprint}",
            self.authority, self.tenant, self.client_id, self.scope
        )
    }

    fn token_url(&self) -> String {
        format!(
            "{}/{}/oauth2/v2.0/token",
            self.authority.as_str().trim_end_matches('/'),
            self.tenant
        )
    }

    /// Asks the authority for a token, trying again when it is unreachable or busy.
    pub(super) async fn fetch(&self, http: &reqwest::Client) -> Result<AccessToken, TokenError> {
        retrying(|| {
            let request = http.post(self.token_url()).form(&[
                ("grant_type", "client_credentials"),
                ("client_id", self.client_id.as_str()),
                ("client_secret", self.secret.as_str()),
                ("scope", self.scope.as_str()),
            ]);
            exchange(request, |transient, what| TokenError {
                message: format!(
                    "{} got no token from {} ({what})",
                    self.describe(),
                    self.authority.as_str().trim_end_matches('/')
                ),
                transient,
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_goes_to_the_tenants_token_endpoint_for_the_default_scope() {
        let source = ClientSecret::new(
            DEFAULT_AUTHORITY,
            "contoso.onmicrosoft.com",
            "app-1",
            "s3cr3t",
            "https://storage.azure.com/",
        )
        .unwrap();
        assert_eq!(
            source.token_url(),
            "https://login.microsoftonline.com/contoso.onmicrosoft.com/oauth2/v2.0/token"
        );
        assert_eq!(source.scope, "https://storage.azure.com/.default");
        assert!(!format!("{source:?}").contains("s3cr3t"));
        assert!(source.describe().contains("app-1"));
        let other = ClientSecret::new(
            DEFAULT_AUTHORITY,
            "contoso.onmicrosoft.com",
            "app-1",
            "other",
            "https://storage.azure.com/",
        )
        .unwrap();
        assert_ne!(source.key(), other.key(), "another secret, another cache");
        assert!(!source.key().contains("s3cr3t"));
    }

    #[test]
    fn what_cannot_work_is_refused() {
        let storage = "https://storage.azure.com/";
        for (authority, tenant, id, secret) in [
            ("http://login.example.com", "t", "a", "s"),
            ("not a url", "t", "a", "s"),
            (DEFAULT_AUTHORITY, "t/../x", "a", "s"),
            (DEFAULT_AUTHORITY, "t", "", "s"),
            (DEFAULT_AUTHORITY, "t", "a", " "),
        ] {
            assert!(
                ClientSecret::new(authority, tenant, id, secret, storage).is_err(),
                "{authority} {tenant} {id:?} {secret:?}"
            );
        }
        assert!(ClientSecret::new("http://127.0.0.1:9/", "t", "a", "s", storage).is_ok());
    }
}
