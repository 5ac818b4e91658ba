//! The service's naming rules for tables, queues and entity keys, checked before a request is
//! sent so that the error names the offending value instead of a bare `400 InvalidInput`.

use std::fmt;

/// The longest key the service accepts: 1 KiB, which is 512 UTF-16 code units (the emulator
/// enforces exactly this: 512 units are accepted, 513 refused).
pub const MAX_KEY_UTF16_UNITS: usize = 512;

/// Which key of an entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    PartitionKey,
    RowKey,
}

impl fmt::Display for KeyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyKind::PartitionKey => "PartitionKey",
            KeyKind::RowKey => "RowKey",
        })
    }
}

/// Why a key cannot be stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("{kind} '{shown}' is {units} UTF-16 code units long; the limit is {MAX_KEY_UTF16_UNITS} (1 KiB)")]
    TooLong {
        kind: KeyKind,
        shown: String,
        units: usize,
    },
    #[error("{kind} '{shown}' contains {character}, which keys may not contain")]
    ForbiddenCharacter {
        kind: KeyKind,
        shown: String,
        character: String,
    },
}

/// Characters the service refuses in keys: `/ \ # ?` and the control characters
/// U+0000 to U+001F and U+007F to U+009F.
pub fn is_forbidden_key_char(c: char) -> bool {
    matches!(c, '/' | '\\' | '#' | '?' | '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
}

/// Checks a PartitionKey or RowKey. The empty key is valid.
pub fn validate_key(kind: KeyKind, key: &str) -> Result<(), KeyError> {
    let shown = || shorten(key);
    if let Some(c) = key.chars().find(|c| is_forbidden_key_char(*c)) {
        return Err(KeyError::ForbiddenCharacter {
            kind,
            shown: shown(),
            character: describe_char(c),
        });
    }
    let units = key.encode_utf16().count();
    if units > MAX_KEY_UTF16_UNITS {
        return Err(KeyError::TooLong {
            kind,
            shown: shown(),
            units,
        });
    }
    Ok(())
}

fn describe_char(c: char) -> String {
    if c.is_control() {
        format!("the control character U+{:04X}", c as u32)
    } else {
        format!("'{c}' (U+{:04X})", c as u32)
    }
}

/// Shortens a key for messages and makes control characters visible.
fn shorten(key: &str) -> String {
    let visible: String = key.chars().flat_map(char::escape_debug).collect();
    if visible.chars().count() <= 60 {
        visible
    } else {
        visible.chars().take(60).chain("…".chars()).collect()
    }
}

/// Why a table or queue name is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{name}' is not a valid {what} name: {rule}")]
pub struct NameError {
    pub what: &'static str,
    pub name: String,
    pub rule: &'static str,
}

/// Table names: 3 to 63 ASCII letters and digits, starting with a letter, not `tables`.
pub fn validate_table_name(name: &str) -> Result<(), NameError> {
    let fail = |rule| {
        Err(NameError {
            what: "table",
            name: shorten(name),
            rule,
        })
    };
    if !(3..=63).contains(&name.len()) {
        return fail("it must be 3 to 63 characters long");
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return fail("it may contain only ASCII letters and digits");
    }
    if !name.as_bytes()[0].is_ascii_alphabetic() {
        return fail("it must start with a letter");
    }
    if name.eq_ignore_ascii_case("tables") {
        return fail("'tables' is reserved");
    }
    Ok(())
}

/// Queue names: 3 to 63 lowercase letters, digits and single dashes, starting and ending with a
/// letter or digit.
pub fn validate_queue_name(name: &str) -> Result<(), NameError> {
    lowercase_dashed("queue", name)
}

/// Blob container names follow the queue rules (3 to 63 lowercase letters, digits and single
/// dashes, starting and ending with a letter or digit).
pub fn validate_container_name(name: &str) -> Result<(), NameError> {
    lowercase_dashed("container", name)
}

/// Blob names: 1 to 1,024 characters, no control characters, not ending with `.` or `/` (the
/// service would drop or misread those).
pub fn validate_blob_name(name: &str) -> Result<(), NameError> {
    let fail = |rule| {
        Err(NameError {
            what: "blob",
            name: shorten(name),
            rule,
        })
    };
    if !(1..=1024).contains(&name.chars().count()) {
        return fail("it must be 1 to 1,024 characters long");
    }
    if name.chars().any(char::is_control) {
        return fail("it may not contain control characters");
    }
    if first_dot_segment(name).is_some() {
        return fail(
            "it may not hold a '.' or '..' segment (also percent-encoded, as %2e): URL parsing \
             removes those, so the request would address another blob or leave its container",
        );
    }
    if name.ends_with('.') || name.ends_with('/') {
        return fail("it may not end with a dot or a slash");
    }
    Ok(())
}

/// The first segment of a blob name or prefix that URL parsing would take for `.` or `..` and
/// remove (with the segment before it, for `..`), so that the URL no longer addresses the blob
/// the name says and may leave its container: `..`, `.`, and the same with dots
/// percent-encoded (`%2e%2E`, `.%2e`), also encoded more than once (`%252e`). A backslash
/// separates segments too, as URL parsers read it in http(s) URLs. `None` when there is none.
pub fn first_dot_segment(path: &str) -> Option<&str> {
    path.split(['/', '\\'])
        .find(|segment| is_dot_segment(segment))
}

/// Whether a path segment reads as `.` or `..` once percent-decoded, as many times as it
/// decodes to something new.
fn is_dot_segment(segment: &str) -> bool {
    let mut text = segment.to_string();
    // Each round removes at least one `%25` level; a segment of a blob name is short.
    for _ in 0..8 {
        if text == "." || text == ".." {
            return true;
        }
        let decoded = percent_encoding::percent_decode_str(&text)
            .decode_utf8_lossy()
            .into_owned();
        if decoded == text {
            return false;
        }
        text = decoded;
    }
    false
}

fn lowercase_dashed(what: &'static str, name: &str) -> Result<(), NameError> {
    let fail = |rule| {
        Err(NameError {
            what,
            name: shorten(name),
            rule,
        })
    };
    if !(3..=63).contains(&name.len()) {
        return fail("it must be 3 to 63 characters long");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return fail("it may contain only lowercase letters, digits and dashes");
    }
    if name.starts_with('-') || name.ends_with('-') {
        return fail("it must start and end with a letter or digit");
    }
    if name.contains("--") {
        return fail("it may not contain two dashes in a row");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_keys_include_empty_ffff_and_supplementary_characters() {
        for key in [
            "",
            "a b",
            "it's",
            "\u{FFFF}",
            "😀",
            "é中",
            "x+y&z=w",
            &"k".repeat(512),
            &"😀".repeat(256),
        ] {
            assert_eq!(validate_key(KeyKind::RowKey, key), Ok(()), "{key}");
        }
    }

    #[test]
    fn one_kib_plus_one_unit_is_too_long() {
        let err = validate_key(KeyKind::PartitionKey, &"k".repeat(513)).unwrap_err();
        assert!(matches!(err, KeyError::TooLong { units: 513, .. }));
        // A supplementary character counts as two units.
        let err =
            validate_key(KeyKind::PartitionKey, &format!("{}😀", "k".repeat(511))).unwrap_err();
        assert!(matches!(err, KeyError::TooLong { units: 513, .. }));
    }

    #[test]
    fn forbidden_characters_are_named() {
        for (key, shown) in [
            ("a/b", "'/' (U+002F)"),
            ("a\\b", "'\\' (U+005C)"),
            ("#", "'#' (U+0023)"),
            ("?", "'?' (U+003F)"),
            ("\t", "the control character U+0009"),
            ("\u{7f}", "the control character U+007F"),
            ("\u{85}", "the control character U+0085"),
            ("\u{9f}", "the control character U+009F"),
        ] {
            let err = validate_key(KeyKind::RowKey, key).unwrap_err();
            assert!(err.to_string().contains(shown), "{err}");
            assert!(err.to_string().starts_with("RowKey"), "{err}");
        }
    }

    #[test]
    fn table_names() {
        for ok in ["abc", "Orders2024", &"a".repeat(63)] {
            assert!(validate_table_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "ab",
            "1abc",
            "ab-c",
            "tables",
            "TABLES",
            &"a".repeat(64),
            "ünï",
        ] {
            assert!(validate_table_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn blob_names_with_dot_segments_are_refused_in_every_spelling() {
        for bad in [
            "../$web/x",
            "a/../../b",
            "./x",
            "a/./b",
            "..",
            "%2e%2e/x",
            "%2E%2E/x",
            ".%2e/x",
            "%2e./x",
            "%2e/x",
            "%252e%252e/x",
            "a/..\\b",
            "..\\$web\\x",
        ] {
            let error = validate_blob_name(bad).expect_err(bad);
            assert!(error.rule.contains("'..' segment"), "{bad}: {error}");
        }
        for ok in [
            "a..b/c",
            "...x/y",
            "backups/2026-11-25/data/1.ndjson.gz",
            "a/.hidden/b",
            "%2e%2ex/y",
            "x/..y",
        ] {
            assert_eq!(validate_blob_name(ok), Ok(()), "{ok}");
        }
        assert_eq!(first_dot_segment("a/%2E./b"), Some("%2E."));
        assert_eq!(first_dot_segment("a/b/"), None);
    }

    #[test]
    fn queue_names() {
        for ok in ["abc", "scan-prefix", "a1-b2", &"q".repeat(63)] {
            assert!(validate_queue_name(ok).is_ok(), "{ok}");
        }
        for bad in ["ab", "Abc", "-abc", "abc-", "a--b", "a_b", &"q".repeat(64)] {
            assert!(validate_queue_name(bad).is_err(), "{bad}");
        }
    }
}
