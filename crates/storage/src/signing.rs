//! Shared Key signatures for the Table and Queue services.
//!
//! The three string-to-sign layouts differ per service (Authorize with Shared Key, Azure Storage
//! REST docs): Table Shared Key signs verb, Content-MD5, Content-Type, date and resource; Table
//! Shared Key Lite only date and resource; Queue Shared Key twelve standard headers, every
//! `x-ms-` header and the resource with its decoded, sorted query parameters. The canonicalized
//! resource is `/account` followed by the URL path exactly as sent, so for the path-style
//! emulator URLs the account name appears twice (`/devstoreaccount1/devstoreaccount1/t()`).

use base64::Engine;
use ring::hmac;
use time::{format_description::FormatItem, macros::format_description, OffsetDateTime};

use super::credential::AccountKey;

/// The RFC 1123 date format the service expects in `x-ms-date`, with a literal `GMT`.
const RFC1123: &[FormatItem<'static>] = format_description!(
    "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
);

/// Formats a UTC time as an `x-ms-date` value.
pub fn rfc1123(time: OffsetDateTime) -> String {
    time.to_offset(time::UtcOffset::UTC)
        .format(RFC1123)
        .expect("an RFC 1123 date always formats")
}

/// `Base64(HMAC-SHA256(key, string_to_sign))`.
pub fn sign(key: &AccountKey, string_to_sign: &str) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key.bytes());
    let tag = hmac::sign(&key, string_to_sign.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
}

/// The parts of a request that a Table signature covers.
pub struct TableRequestParts<'a> {
    pub method: &'a str,
    pub content_md5: &'a str,
    pub content_type: &'a str,
    pub date: &'a str,
    /// The URL path as sent (percent-encoded), e.g. `/devstoreaccount1/orders()`.
    pub path: &'a str,
    /// The value of a `comp` query parameter, the only one Table signatures include.
    pub comp: Option<&'a str>,
}

fn table_canonical_resource(account: &str, parts: &TableRequestParts<'_>) -> String {
    match parts.comp {
        Some(comp) => format!("/{account}{}?comp={comp}", parts.path),
        None => format!("/{account}{}", parts.path),
    }
}

/// The string to sign for Table Shared Key.
pub fn table_shared_key_string(account: &str, parts: &TableRequestParts<'_>) -> String {
    format!(
        "{}\n{}\n{}\n{}\n{}",
        parts.method,
        parts.content_md5,
        parts.content_type,
        parts.date,
        table_canonical_resource(account, parts)
    )
}

/// The string to sign for Table Shared Key Lite.
pub fn table_shared_key_lite_string(account: &str, parts: &TableRequestParts<'_>) -> String {
    format!(
        "{}\n{}",
        parts.date,
        table_canonical_resource(account, parts)
    )
}

/// The parts of a request that a Queue (blob/file style) signature covers.
pub struct QueueRequestParts<'a> {
    pub method: &'a str,
    /// Body length in bytes; 0 signs as an empty line.
    pub content_length: usize,
    pub content_type: &'a str,
    /// Every `x-ms-*` header sent, in any order and case.
    pub ms_headers: &'a [(&'a str, &'a str)],
    /// The URL path as sent (percent-encoded).
    pub path: &'a str,
    /// The query parameters, already percent-decoded.
    pub query: &'a [(String, String)],
}

/// The string to sign for Queue Shared Key (version 2015-02-21 and later).
pub fn queue_shared_key_string(account: &str, parts: &QueueRequestParts<'_>) -> String {
    let content_length = match parts.content_length {
        0 => String::new(),
        n => n.to_string(),
    };
    // Verb, then Content-Encoding, Content-Language, Content-Length, Content-MD5, Content-Type,
    // Date, If-Modified-Since, If-Match, If-None-Match, If-Unmodified-Since, Range. We never send
    // the ones left empty; Date stays empty because x-ms-date is used.
    let mut text = format!(
        "{}\n\n\n{}\n\n{}\n\n\n\n\n\n\n",
        parts.method, content_length, parts.content_type
    );

    let mut headers: Vec<(String, String)> = parts
        .ms_headers
        .iter()
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), collapse_whitespace(value)))
        .collect();
    headers.sort();
    for (name, value) in headers {
        text.push_str(&name);
        text.push(':');
        text.push_str(&value);
        text.push('\n');
    }

    text.push('/');
    text.push_str(account);
    text.push_str(parts.path);
    let mut query: Vec<(String, String)> = parts
        .query
        .iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), value.clone()))
        .collect();
    query.sort();
    let mut index = 0;
    while index < query.len() {
        let name = &query[index].0;
        let values: Vec<&str> = query[index..]
            .iter()
            .take_while(|(other, _)| other == name)
            .map(|(_, value)| value.as_str())
            .collect();
        text.push('\n');
        text.push_str(name);
        text.push(':');
        text.push_str(&values.join(","));
        index += values.len();
    }
    text
}

fn collapse_whitespace(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    //! The five vectors below were each accepted by Azurite 3.37.0 (see docs/storage.md), so they
    //! pin both the string-to-sign layouts and the HMAC.

    use super::*;
    use crate::connection_string::{EMULATOR_ACCOUNT as ACCOUNT, EMULATOR_KEY};

    const DATE: &str = "Mon, 27 Jun 2016 15:25:14 GMT";

    fn key() -> AccountKey {
        AccountKey::from_base64(EMULATOR_KEY).unwrap()
    }

    #[test]
    fn v1_table_shared_key_lite_query() {
        let parts = TableRequestParts {
            method: "GET",
            content_md5: "",
            content_type: "",
            date: DATE,
            path: "/devstoreaccount1/ordertest()",
            comp: None,
        };
        let text = table_shared_key_lite_string(ACCOUNT, &parts);
        assert_eq!(
            text,
            format!("{DATE}\n/devstoreaccount1/devstoreaccount1/ordertest()")
        );
        assert_eq!(
            sign(&key(), &text),
            "HytqZso6x5dbpnechVCF4JnMkVmJjFDpHWyISUwHNzs="
        );
    }

    #[test]
    fn v2_table_shared_key_insert() {
        let parts = TableRequestParts {
            method: "POST",
            content_md5: "",
            content_type: "application/json",
            date: DATE,
            path: "/devstoreaccount1/ordertest",
            comp: None,
        };
        let text = table_shared_key_string(ACCOUNT, &parts);
        assert_eq!(
            text,
            format!(
                "POST\n\napplication/json\n{DATE}\n/devstoreaccount1/devstoreaccount1/ordertest"
            )
        );
        assert_eq!(
            sign(&key(), &text),
            "TJIyZoXMEIxdO1moQm3BzEg8EX9LtllllpUCND8oh30="
        );
    }

    #[test]
    fn v3_table_shared_key_with_comp() {
        let parts = TableRequestParts {
            method: "GET",
            content_md5: "",
            content_type: "",
            date: DATE,
            path: "/devstoreaccount1/ordertest",
            comp: Some("acl"),
        };
        let text = table_shared_key_string(ACCOUNT, &parts);
        assert_eq!(
            text,
            format!("GET\n\n\n{DATE}\n/devstoreaccount1/devstoreaccount1/ordertest?comp=acl")
        );
        assert_eq!(
            sign(&key(), &text),
            "IzLsOJNCryKk3G+Hdroq7Ol6f9wHqWCDq0AoV4fmKTs="
        );
    }

    #[test]
    fn v4_queue_create() {
        let headers = [("x-ms-version", "2019-02-02"), ("x-ms-date", DATE)];
        let parts = QueueRequestParts {
            method: "PUT",
            content_length: 0,
            content_type: "",
            ms_headers: &headers,
            path: "/devstoreaccount1/vecqueue",
            query: &[],
        };
        let text = queue_shared_key_string(ACCOUNT, &parts);
        assert_eq!(
            text,
            format!(
                "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{DATE}\nx-ms-version:2019-02-02\n\
                 /devstoreaccount1/devstoreaccount1/vecqueue"
            )
        );
        assert_eq!(
            sign(&key(), &text),
            "7PlMa0sKg++icuXeluzBg6kYjfuLOeT/0QajBdnJpU4="
        );
    }

    #[test]
    fn v5_queue_put_message_with_query() {
        let headers = [("x-ms-date", DATE), ("X-MS-Version", "2019-02-02")];
        let query = [
            ("visibilitytimeout".to_string(), "0".to_string()),
            ("messagettl".to_string(), "-1".to_string()),
        ];
        let parts = QueueRequestParts {
            method: "POST",
            content_length: 64,
            content_type: "application/xml",
            ms_headers: &headers,
            path: "/devstoreaccount1/vecqueue/messages",
            query: &query,
        };
        let text = queue_shared_key_string(ACCOUNT, &parts);
        assert_eq!(
            text,
            format!(
                "POST\n\n\n64\n\napplication/xml\n\n\n\n\n\n\nx-ms-date:{DATE}\nx-ms-version:2019-02-02\n\
                 /devstoreaccount1/devstoreaccount1/vecqueue/messages\nmessagettl:-1\nvisibilitytimeout:0"
            )
        );
        assert_eq!(
            sign(&key(), &text),
            "jgaygIdfvW1B5KFxuVaOc6IzDV2yQpaEyimOnb+AkEc="
        );
    }

    #[test]
    fn repeated_query_parameters_are_sorted_and_comma_joined() {
        let query = [
            ("b".to_string(), "2".to_string()),
            ("A".to_string(), "z".to_string()),
            ("b".to_string(), "1".to_string()),
        ];
        let parts = QueueRequestParts {
            method: "GET",
            content_length: 0,
            content_type: "",
            ms_headers: &[],
            path: "/q",
            query: &query,
        };
        assert!(queue_shared_key_string("acct", &parts).ends_with("/acct/q\na:z\nb:1,2"));
    }

    #[test]
    fn rfc1123_dates_end_in_gmt() {
        let t = time::macros::datetime!(2016-06-27 15:25:14 UTC);
        assert_eq!(rfc1123(t), DATE);
    }
}
