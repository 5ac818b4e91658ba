//! Whether a scan's request fits the ledger: it is stored whole, as JSON, in one string
//! property of the scan's row (`job::rows::ScanRow`), and the Table service keeps at most
//! 64 KiB of UTF-16 in one string property. A request valid field by field can exceed that
//! (an update that sets two strings of 20,000 characters, each a valid value): it is refused
//! before anything is written, naming the field that makes it large, instead of failing in the
//! ledger's transaction with the service's own error.

use serde_json::Value;

use tablescan_api::{ScanSpec, SpecError};

/// The most bytes the Table service stores in one string property (64 KiB of UTF-16).
pub const MAX_STRING_PROPERTY_BYTES: usize = 64 * 1024;

/// The bytes `text` takes as a string property's value: two per UTF-16 code unit.
pub fn stored_bytes(text: &str) -> usize {
    text.encode_utf16().count() * 2
}

/// Refuses a request the ledger could not store, naming the field that makes it large.
pub fn check_stored_size(spec: &ScanSpec) -> Result<(), SpecError> {
    let value = serde_json::to_value(spec).expect("a spec serialises");
    let total = stored_bytes(&value.to_string());
    if total <= MAX_STRING_PROPERTY_BYTES {
        return Ok(());
    }
    let (field, bytes) = heaviest_field(&value);
    Err(SpecError {
        field: if field.is_empty() {
            "body".into()
        } else {
            field
        },
        message: format!(
            "the scan's request takes {} bytes as the ledger stores it (UTF-16), more than \
             the {} (64 KiB) one property holds; this field takes {} of them: make it smaller",
            thousands(total),
            thousands(MAX_STRING_PROPERTY_BYTES),
            thousands(bytes)
        ),
    })
}

/// The field (dotted path) that holds most of `value`'s stored bytes, and its bytes: the
/// largest member, followed down while one member of an object holds more than half of it.
fn heaviest_field(value: &Value) -> (String, usize) {
    let mut path = Vec::new();
    let mut node = value;
    let mut bytes = stored_bytes(&value.to_string());
    while let Value::Object(members) = node {
        let Some((name, member, size)) = members
            .iter()
            .map(|(name, member)| (name, member, stored_bytes(&member.to_string())))
            .max_by_key(|(_, _, size)| *size)
        else {
            break;
        };
        // Several members share the bulk (or none dominates): the object is the field.
        if !path.is_empty() && size * 2 <= bytes {
            break;
        }
        path.push(name.as_str());
        node = member;
        bytes = size;
    }
    (path.join("."), bytes)
}

/// `n` with thousands separators.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_heaviest_field_is_followed_while_one_member_dominates() {
        let shared = json!({"table": "t", "action": {"type": "update",
            "set": {"A": "a".repeat(100), "B": "b".repeat(100)}}});
        assert_eq!(heaviest_field(&shared).0, "action.set");
        let one = json!({"table": "t", "action": {"type": "update",
            "set": {"Big": "x".repeat(1000), "Small": 1}}});
        assert_eq!(heaviest_field(&one).0, "action.set.Big");
        let list = json!({"table": "t", "select": ["a", "b", "c", "d"], "action": {}});
        assert_eq!(heaviest_field(&list).0, "select");
    }

    #[test]
    fn sizes_count_utf16_units_and_read_easily() {
        assert_eq!(stored_bytes("ab"), 4);
        assert_eq!(stored_bytes("é"), 2);
        assert_eq!(stored_bytes("😀"), 4);
        assert_eq!(thousands(65_536), "65,536");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000_000), "1,000,000");
    }
}
