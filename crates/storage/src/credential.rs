//! Secrets that authorize requests, kept out of every `Debug` and `Display`.

use std::fmt;
use std::sync::Arc;

use base64::Engine;

use super::token::TokenCredential;

/// How requests to an account are authorized.
#[derive(Clone)]
pub enum Credential {
    /// Shared Key: every request is signed with the account key.
    SharedKey {
        /// The account name that goes into the signature.
        account: String,
        /// The decoded account key.
        key: AccountKey,
    },
    /// A shared access signature appended to every URL.
    Sas(SasToken),
    /// A Microsoft Entra token (a managed identity's) in an `Authorization: Bearer` header.
    Bearer(Arc<TokenCredential>),
}

impl Credential {
    /// What to check when the account refuses this credential, for error messages.
    pub fn refusal_hint(&self) -> String {
        match self {
            Credential::SharedKey { .. } => "check the AccountKey in that setting".into(),
            Credential::Sas(_) => {
                "check the SharedAccessSignature in that setting: its expiry, and that it allows \
                 this"
                    .into()
            }
            Credential::Bearer(token) => format!(
                "check that {} has a data role on the account for this (Storage Table Data \
                 Contributor for tables, Storage Queue Data Contributor for queues), and that \
                 its tokens are issued for {}",
                token.describe(),
                super::token::STORAGE_RESOURCE
            ),
        }
    }
}

/// A decoded storage account key.
#[derive(Clone)]
pub struct AccountKey(Vec<u8>);

impl AccountKey {
    /// Decodes a base64 account key as the portal shows it.
    pub fn from_base64(text: &str) -> Option<Self> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .ok()?;
        (!bytes.is_empty()).then_some(AccountKey(bytes))
    }

    /// The raw key bytes (the HMAC key).
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// A SAS token: the query string that authorizes requests, without a leading `?`.
#[derive(Clone)]
pub struct SasToken(String);

impl SasToken {
    /// Accepts a token with or without a leading `?`; it must carry a `sig` field.
    pub fn parse(text: &str) -> Option<Self> {
        let token = text.trim().trim_start_matches('?');
        let has_sig = token.split('&').any(|field| field.starts_with("sig="));
        has_sig.then(|| SasToken(token.to_string()))
    }

    /// The token as it is appended to a URL's query.
    pub fn query(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::SharedKey { account, .. } => f
                .debug_struct("SharedKey")
                .field("account", account)
                .finish_non_exhaustive(),
            Credential::Sas(_) => f.write_str("Sas(<redacted>)"),
            Credential::Bearer(token) => f.debug_tuple("Bearer").field(token).finish(),
        }
    }
}

impl fmt::Debug for AccountKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AccountKey(<redacted>)")
    }
}

impl fmt::Debug for SasToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SasToken(<redacted>)")
    }
}
