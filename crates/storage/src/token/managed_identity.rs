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

use super::exchange::{exchange, retrying};
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
        retrying(|| {
            let request = http
                .get(self.url())
                .header("X-IDENTITY-HEADER", &self.header);
            exchange(request, |transient, what| TokenError {
                message: format!(
                    "{} gave no token from {} ({what})",
                    self.describe(),
                    self.endpoint_for_messages()
                ),
                transient,
            })
        })
        .await
    }

    /// The endpoint without its query, which is all a message needs.
    fn endpoint_for_messages(&self) -> String {
        let mut url = self.endpoint.clone();
        url.set_query(None);
        url.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
