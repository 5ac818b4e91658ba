//! Authorises a request as it will go on the wire: the request is built first, and its Shared
//! Key signature is then worked out from the built request's own method, URL, headers and body.
//!
//! Signing a description of the request and building the request separately let the two
//! disagree (a header value the HTTP library would not send was left out of the request and
//! kept in the signature), and the only symptom was a 403 from the service. A header value that
//! cannot be sent as text is refused before anything is signed ([`header_value`]).

use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};

use super::credential::{AccountKey, Credential};
use super::signing::{self, QueueRequestParts, TableRequestParts};
use super::token::AccessToken;

/// Which service a pipeline talks to; the signature layout depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Service {
    Table,
    Queue,
    Blob,
}

/// Which Shared Key scheme signs Table requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TableAuthScheme {
    /// Shared Key: verb, content headers, date and resource.
    #[default]
    SharedKey,
    /// Shared Key Lite: date and resource only.
    SharedKeyLite,
}

/// `value` as a header value, if it can be sent and read back as the same text: visible ASCII,
/// spaces and tabs. (The HTTP library takes other bytes too, but a signature is computed over
/// text, so those could not be signed as sent.)
pub(crate) fn header_value(value: &str) -> Option<HeaderValue> {
    let header = HeaderValue::from_str(value).ok()?;
    (header.to_str().ok()? == value).then_some(header)
}

/// What authorises one attempt beside the request itself: the token fetched for it, for a
/// bearer credential.
pub(crate) enum Authority<'a> {
    /// The credential alone (Shared Key signs, a SAS is in the URL already).
    Credential(&'a Credential),
    /// A bearer token to send.
    Token(&'a AccessToken),
}

/// Adds the `Authorization` header that `authority` gives `request` (built, with its
/// `x-ms-date`); nothing for a SAS, which is in the URL already.
pub(crate) fn authorize(
    request: &mut reqwest::Request,
    authority: Authority<'_>,
    service: Service,
    table_auth: TableAuthScheme,
) -> Result<(), String> {
    let (account, key) = match authority {
        Authority::Token(token) => {
            let value = header_value(&format!("Bearer {}", token.secret()))
                .ok_or("the token from the identity endpoint is not plain text")?;
            request.headers_mut().insert(AUTHORIZATION, value);
            return Ok(());
        }
        Authority::Credential(Credential::SharedKey { account, key }) => (account, key),
        Authority::Credential(_) => return Ok(()),
    };
    let authorization = match service {
        Service::Table => table_shared_key(request, account, key, table_auth),
        // Blob requests are signed as Queue requests are (the Blob, Queue and File layout).
        Service::Queue | Service::Blob => queue_shared_key(request, account, key),
    };
    let value = header_value(&authorization)
        .ok_or("the account name cannot be sent in a header (it must be plain text)")?;
    request.headers_mut().insert(AUTHORIZATION, value);
    Ok(())
}

/// The text of header `name` of `request` (every value was checked to read back as text when
/// the request was built); empty when it has none.
fn header_text<'a>(request: &'a reqwest::Request, name: &str) -> &'a str {
    request
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// The `Authorization` value of a Table request, signed with Shared Key or Shared Key Lite.
fn table_shared_key(
    request: &reqwest::Request,
    account: &str,
    key: &AccountKey,
    table_auth: TableAuthScheme,
) -> String {
    let url = request.url();
    let comp = url
        .query_pairs()
        .find(|(k, _)| k == "comp")
        .map(|(_, v)| v.into_owned());
    let parts = TableRequestParts {
        method: request.method().as_str(),
        content_md5: header_text(request, "content-md5"),
        content_type: header_text(request, CONTENT_TYPE.as_str()),
        date: header_text(request, "x-ms-date"),
        path: url.path(),
        comp: comp.as_deref(),
    };
    match table_auth {
        TableAuthScheme::SharedKey => format!(
            "SharedKey {account}:{}",
            signing::sign(key, &signing::table_shared_key_string(account, &parts))
        ),
        TableAuthScheme::SharedKeyLite => format!(
            "SharedKeyLite {account}:{}",
            signing::sign(key, &signing::table_shared_key_lite_string(account, &parts))
        ),
    }
}

/// The `Authorization` value of a Queue or Blob request, signed with Shared Key.
fn queue_shared_key(request: &reqwest::Request, account: &str, key: &AccountKey) -> String {
    let url = request.url();
    let query: Vec<(String, String)> = url
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let ms_headers: Vec<(&str, &str)> = request
        .headers()
        .iter()
        .filter(|(name, _)| name.as_str().starts_with("x-ms-"))
        .map(|(name, value)| (name.as_str(), value.to_str().unwrap_or("")))
        .collect();
    let content_length = request
        .body()
        .and_then(|body| body.as_bytes())
        .map_or(0, <[u8]>::len);
    let parts = QueueRequestParts {
        method: request.method().as_str(),
        content_length,
        content_type: header_text(request, CONTENT_TYPE.as_str()),
        ms_headers: &ms_headers,
        path: url.path(),
        query: &query,
    };
    format!(
        "SharedKey {account}:{}",
        signing::sign(key, &signing::queue_shared_key_string(account, &parts))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection_string::{EMULATOR_ACCOUNT as ACCOUNT, EMULATOR_KEY};
    use crate::credential::AccountKey;
    use reqwest::Method;

    const DATE: &str = "Mon, 27 Jun 2016 15:25:14 GMT";

    fn credential() -> Credential {
        Credential::SharedKey {
            account: ACCOUNT.to_string(),
            key: AccountKey::from_base64(EMULATOR_KEY).unwrap(),
        }
    }

    /// The `Authorization` header of a request built with `headers` and `body`.
    fn authorized(
        method: Method,
        url: &str,
        headers: &[(&'static str, &str)],
        body: &[u8],
        service: Service,
        scheme: TableAuthScheme,
    ) -> String {
        let client = reqwest::Client::new();
        let mut builder = client.request(method, url).body(body.to_vec());
        for (name, value) in headers {
            builder = builder.header(*name, header_value(value).unwrap());
        }
        let mut request = builder.build().unwrap();
        authorize(
            &mut request,
            Authority::Credential(&credential()),
            service,
            scheme,
        )
        .unwrap();
        request.headers()[AUTHORIZATION]
            .to_str()
            .unwrap()
            .to_string()
    }

    // The signing vectors V1 to V5 of `signing`, reached through built requests.

    #[test]
    fn v1_table_shared_key_lite_query() {
        let header = authorized(
            Method::GET,
            "http://127.0.0.1:10002/devstoreaccount1/ordertest()",
            &[("x-ms-date", DATE)],
            b"",
            Service::Table,
            TableAuthScheme::SharedKeyLite,
        );
        assert_eq!(
            header,
            "SharedKeyLite devstoreaccount1:HytqZso6x5dbpnechVCF4JnMkVmJjFDpHWyISUwHNzs="
        );
    }

    #[test]
    fn v2_table_shared_key_insert() {
        let header = authorized(
            Method::POST,
            "http://127.0.0.1:10002/devstoreaccount1/ordertest",
            &[("x-ms-date", DATE), ("content-type", "application/json")],
            b"{}",
            Service::Table,
            TableAuthScheme::SharedKey,
        );
        assert_eq!(
            header,
            "SharedKey devstoreaccount1:TJIyZoXMEIxdO1moQm3BzEg8EX9LtllllpUCND8oh30="
        );
    }

    #[test]
    fn v3_table_shared_key_with_comp() {
        let header = authorized(
            Method::GET,
            "http://127.0.0.1:10002/devstoreaccount1/ordertest?comp=acl",
            &[("x-ms-date", DATE)],
            b"",
            Service::Table,
            TableAuthScheme::SharedKey,
        );
        assert_eq!(
            header,
            "SharedKey devstoreaccount1:IzLsOJNCryKk3G+Hdroq7Ol6f9wHqWCDq0AoV4fmKTs="
        );
    }

    #[test]
    fn v4_queue_create() {
        let header = authorized(
            Method::PUT,
            "http://127.0.0.1:10001/devstoreaccount1/vecqueue",
            &[("x-ms-version", "2019-02-02"), ("x-ms-date", DATE)],
            b"",
            Service::Queue,
            TableAuthScheme::SharedKey,
        );
        assert_eq!(
            header,
            "SharedKey devstoreaccount1:7PlMa0sKg++icuXeluzBg6kYjfuLOeT/0QajBdnJpU4="
        );
    }

    #[test]
    fn v5_queue_put_message_with_query() {
        let header = authorized(
            Method::POST,
            "http://127.0.0.1:10001/devstoreaccount1/vecqueue/messages?visibilitytimeout=0&messagettl=-1",
            &[
                ("x-ms-date", DATE),
                ("x-ms-version", "2019-02-02"),
                ("content-type", "application/xml"),
            ],
            &[b'x'; 64],
            Service::Queue,
            TableAuthScheme::SharedKey,
        );
        assert_eq!(
            header,
            "SharedKey devstoreaccount1:jgaygIdfvW1B5KFxuVaOc6IzDV2yQpaEyimOnb+AkEc="
        );
    }

    #[test]
    fn values_that_cannot_go_out_as_the_same_text_are_refused() {
        assert!(header_value("W/\"datetime'2026-11-25T05%3A00%3A00Z'\"").is_some());
        assert!(header_value("with\ttab and space").is_some());
        assert!(header_value("line\nbreak").is_none());
        assert!(header_value("é").is_none());
        assert!(header_value("nul\0").is_none());
    }

    #[test]
    fn a_sas_adds_no_header() {
        let client = reqwest::Client::new();
        let mut request = client
            .get("http://127.0.0.1:10002/devstoreaccount1/t()?sig=x")
            .build()
            .unwrap();
        let sas = Credential::Sas(crate::credential::SasToken::parse("sig=x").unwrap());
        authorize(
            &mut request,
            Authority::Credential(&sas),
            Service::Table,
            TableAuthScheme::SharedKey,
        )
        .unwrap();
        assert!(request.headers().get(AUTHORIZATION).is_none());
    }

    #[test]
    fn a_token_goes_as_a_bearer_header_and_one_that_is_not_text_is_refused() {
        let now = std::time::SystemTime::now();
        let later = now + std::time::Duration::from_secs(3600);
        let client = reqwest::Client::new();
        let mut request = client
            .get("https://127.0.0.1:10001/devstoreaccount1/q/messages")
            .build()
            .unwrap();
        let token = AccessToken::new("eyJ.a.b".into(), now, later);
        authorize(
            &mut request,
            Authority::Token(&token),
            Service::Queue,
            TableAuthScheme::SharedKey,
        )
        .unwrap();
        assert_eq!(request.headers()[AUTHORIZATION], "Bearer eyJ.a.b");

        let broken = AccessToken::new("eyJ\nInjected: 1".into(), now, later);
        let error = authorize(
            &mut request,
            Authority::Token(&broken),
            Service::Queue,
            TableAuthScheme::SharedKey,
        )
        .unwrap_err();
        assert!(error.contains("not plain text"), "{error}");
        assert!(!error.contains("eyJ"), "{error}");
    }
}
