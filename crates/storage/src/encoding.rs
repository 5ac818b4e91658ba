//! Percent-encoding as Azure Storage expects it on the wire.
//!
//! Every value we put into a path or a query string (key literals, `$filter`, continuation tokens,
//! pop receipts, SAS fields) goes through [`encode_component`], which leaves only RFC 3986
//! unreserved characters (`A-Z a-z 0-9 - . _ ~`) as they are. Form encoding (space as `+`) is
//! never used: the service and Azurite read a literal `+` in a query as a space or a plus
//! depending on the API, and the queue signature check in Azurite breaks on it.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// Everything except the unreserved characters of RFC 3986.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes a value for use inside one path segment or one query value.
pub fn encode_component(value: &str) -> String {
    utf8_percent_encode(value, COMPONENT).to_string()
}

/// Quotes a string as an OData literal: wrapped in single quotes, inner quotes doubled.
///
/// The result is not yet percent-encoded; it is the text of the literal as the service parses
/// it after decoding the URL.
pub fn odata_string_literal(value: &str) -> String {
    let mut quoted = String::with_capacity(value.len() + 2);
    quoted.push('\'');
    for ch in value.chars() {
        if ch == '\'' {
            quoted.push('\'');
        }
        quoted.push(ch);
    }
    quoted.push('\'');
    quoted
}

/// The path segment that addresses one entity: `table(PartitionKey='..',RowKey='..')`.
///
/// Quotes are doubled before the key is percent-encoded, so `it's` becomes `it%27%27s`.
pub fn entity_path(table: &str, partition_key: &str, row_key: &str) -> String {
    format!(
        "{table}(PartitionKey='{}',RowKey='{}')",
        encode_component(&partition_key.replace('\'', "''")),
        encode_component(&row_key.replace('\'', "''")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn component_encoding_keeps_only_unreserved_characters() {
        assert_eq!(encode_component("aZ09-._~"), "aZ09-._~");
        assert_eq!(encode_component("a b+c"), "a%20b%2Bc");
        assert_eq!(encode_component("x/y?z#&="), "x%2Fy%3Fz%23%26%3D");
        assert_eq!(encode_component("é"), "%C3%A9");
        assert_eq!(encode_component("\u{FFFF}"), "%EF%BF%BF");
        assert_eq!(encode_component("😀"), "%F0%9F%98%80");
    }

    #[test]
    fn odata_literal_doubles_quotes() {
        assert_eq!(odata_string_literal("o'clock"), "'o''clock'");
        assert_eq!(odata_string_literal(""), "''");
        assert_eq!(odata_string_literal("''"), "''''''");
    }

    #[test]
    fn entity_path_doubles_quotes_then_encodes() {
        // The form verified against Azurite in the storage reference: `it's 50%`.
        assert_eq!(
            entity_path("t", "p", "it's 50%"),
            "t(PartitionKey='p',RowKey='it%27%27s%2050%25')"
        );
        assert_eq!(entity_path("t", "", ""), "t(PartitionKey='',RowKey='')");
    }
}
