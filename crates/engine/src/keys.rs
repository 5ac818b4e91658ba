//! Key order, prefix successors and key ranges: the one place that compares keys.
//!
//! The Table service orders keys by UTF-16 code units. That is not Rust's `str` order, which
//! compares code points: a character outside the BMP (encoded as a surrogate pair D800-DBFF,
//! DC00-DFFF) sorts *before* U+E000-U+FFFF in UTF-16 but after them by code point. Viewed one
//! character at a time, UTF-16 order ranks characters as U+0000..U+D7FF, then U+10000..U+10FFFF,
//! then U+E000..U+FFFF; strings compare lexicographically by that rank.
//!
//! The exclusive upper bound of "every key that starts with `p`" is the *successor* of `p`: drop
//! the trailing U+FFFF characters (nothing ranks above them), then replace the last character by
//! the next one in rank. It is the least valid string above every extension of `p`, and it never
//! splits a surrogate pair. The published scanner used `p + U+FFFF` instead, which is below
//! `p + U+FFFF + anything`: keys containing U+FFFF were lost or read again forever.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use tablescan_storage::table::filter::{Comparison, Filter};

mod cut_kinds;
pub use cut_kinds::{CutKinds, CUT_POINTS};

/// Compares two keys as the service does: by UTF-16 code units.
///
/// Keys are mostly ASCII and compared by the million (sorting a simulated table, seeking a
/// page's start), so the bytes are compared first: where the first differing bytes are both
/// ASCII, or one key is a prefix of the other, UTF-8 bytes and UTF-16 units agree (everything
/// before is the same whole characters, and an ASCII byte is one unit). Only a difference at a
/// non-ASCII character goes through UTF-16.
pub fn compare(a: &str, b: &str) -> Ordering {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    match first_difference(x, y) {
        None => x.len().cmp(&y.len()),
        Some(i) if x[i].is_ascii() && y[i].is_ascii() => x[i].cmp(&y[i]),
        Some(_) => a.encode_utf16().cmp(b.encode_utf16()),
    }
}

/// Where `x` and `y` first differ, within the shorter. Eight bytes at a time: keys compared
/// with their neighbours share long prefixes (package ids, dates), and this runs for every row
/// a step reads.
fn first_difference(x: &[u8], y: &[u8]) -> Option<usize> {
    let common = x.len().min(y.len());
    let mut at = 0;
    while let (Some(p), Some(q)) = (
        x[at..common].first_chunk::<8>(),
        y[at..common].first_chunk::<8>(),
    ) {
        let differ = u64::from_le_bytes(*p) ^ u64::from_le_bytes(*q);
        if differ != 0 {
            // Little-endian: the lowest set bit is in the first byte that differs.
            return Some(at + (differ.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    (at..common).find(|&i| x[i] != y[i])
}

/// The next character in UTF-16 rank, or `None` for U+FFFF, which ranks highest.
pub fn next_char(c: char) -> Option<char> {
    match c as u32 {
        0xD7FF => Some('\u{10000}'),
        0x10FFFF => Some('\u{E000}'),
        0xFFFF => None,
        // Every other code point's successor is a valid scalar value in the same block.
        n => char::from_u32(n + 1),
    }
}

/// The least string greater than every string that starts with `prefix`; `None` when no string
/// is (the prefix is empty or consists only of U+FFFF).
pub fn successor(prefix: &str) -> Option<String> {
    let trimmed = prefix.trim_end_matches('\u{FFFF}');
    let last = trimmed.chars().next_back()?;
    let mut next = trimmed[..trimmed.len() - last.len_utf8()].to_string();
    next.push(next_char(last)?);
    Some(next)
}

/// `prefix` extended by the next whole character of `key`, which must start with `prefix`.
/// `None` when `key` does not start with `prefix` or equals it.
pub fn extend_prefix(prefix: &str, key: &str) -> Option<String> {
    let rest = key.strip_prefix(prefix)?;
    let next = rest.chars().next()?;
    let mut extended = String::with_capacity(prefix.len() + next.len_utf8());
    extended.push_str(prefix);
    extended.push(next);
    Some(extended)
}

/// The lower end of a key range.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Lower {
    /// From the smallest key (the empty one) on.
    #[serde(rename = "min")]
    Unbounded,
    /// Keys at or above this one.
    #[serde(rename = "ge")]
    Included(String),
    /// Keys above this one.
    #[serde(rename = "gt")]
    Excluded(String),
}

/// The upper end of a key range; always exclusive.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Upper {
    #[serde(rename = "max")]
    Unbounded,
    /// Keys below this one.
    #[serde(rename = "lt")]
    Excluded(String),
}

/// A contiguous range of keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KeyRange {
    #[serde(rename = "lo")]
    pub lower: Lower,
    #[serde(rename = "hi")]
    pub upper: Upper,
}

impl KeyRange {
    /// Every key.
    pub fn all() -> Self {
        KeyRange {
            lower: Lower::Unbounded,
            upper: Upper::Unbounded,
        }
    }

    /// Every key that starts with `prefix`.
    pub fn with_prefix(prefix: &str) -> Self {
        KeyRange {
            lower: if prefix.is_empty() {
                Lower::Unbounded
            } else {
                Lower::Included(prefix.to_string())
            },
            upper: successor(prefix).map_or(Upper::Unbounded, Upper::Excluded),
        }
    }

    /// Keys strictly between `lower` and `upper` (either may be absent).
    pub fn between(lower: Option<&str>, upper: Option<&str>) -> Self {
        KeyRange {
            lower: lower.map_or(Lower::Unbounded, |k| Lower::Excluded(k.to_string())),
            upper: upper.map_or(Upper::Unbounded, |k| Upper::Excluded(k.to_string())),
        }
    }

    /// Whether `key` lies in the range.
    pub fn contains(&self, key: &str) -> bool {
        self.above_lower(key) && self.below_upper(key)
    }

    /// Whether `key` is not below the lower end.
    pub fn above_lower(&self, key: &str) -> bool {
        match &self.lower {
            Lower::Unbounded => true,
            Lower::Included(lo) => compare(key, lo) != Ordering::Less,
            Lower::Excluded(lo) => compare(key, lo) == Ordering::Greater,
        }
    }

    /// Whether `key` is below the upper end.
    pub fn below_upper(&self, key: &str) -> bool {
        match &self.upper {
            Upper::Unbounded => true,
            Upper::Excluded(hi) => compare(key, hi) == Ordering::Less,
        }
    }

    /// Whether no key at all lies in the range.
    pub fn is_empty(&self) -> bool {
        let Upper::Excluded(hi) = &self.upper else {
            return false;
        };
        match &self.lower {
            Lower::Unbounded => hi.is_empty(),
            Lower::Included(lo) => compare(lo, hi) != Ordering::Less,
            // The least key above `lo` is `lo` followed by U+0000, so the range is empty
            // exactly when that key is not below `hi`.
            Lower::Excluded(lo) => compare(&format!("{lo}\u{0}"), hi) != Ordering::Less,
        }
    }

    /// The keys in both ranges.
    pub fn intersect(&self, other: &KeyRange) -> KeyRange {
        KeyRange {
            lower: max_lower(&self.lower, &other.lower),
            upper: min_upper(&self.upper, &other.upper),
        }
    }

    /// The same range with its upper end lowered to `upper` if that is lower.
    pub fn capped(&self, upper: &Upper) -> KeyRange {
        KeyRange {
            lower: self.lower.clone(),
            upper: min_upper(&self.upper, upper),
        }
    }

    /// The OData filter that selects this range of `property`, or `None` for every key.
    pub fn filter(&self, property: KeyProperty) -> Option<Filter> {
        let make = |op, key: &str| match property {
            KeyProperty::PartitionKey => Filter::partition_key(op, key),
            KeyProperty::RowKey => Filter::row_key(op, key),
        };
        let lower = match &self.lower {
            Lower::Unbounded => None,
            // Every key is at least the empty key: no clause needed.
            Lower::Included(lo) if lo.is_empty() => None,
            Lower::Included(lo) => Some(make(Comparison::Ge, lo)),
            Lower::Excluded(lo) => Some(make(Comparison::Gt, lo)),
        };
        let upper = match &self.upper {
            Upper::Unbounded => None,
            Upper::Excluded(hi) => Some(make(Comparison::Lt, hi)),
        };
        Filter::all(lower.into_iter().chain(upper))
    }
}

/// Which key a range applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyProperty {
    PartitionKey,
    RowKey,
}

/// The filter for a PartitionKey range.
pub fn range_filter(partition_keys: &KeyRange) -> Option<Filter> {
    partition_keys.filter(KeyProperty::PartitionKey)
}

/// The filter for a RowKey range inside one partition.
pub fn partition_filter(partition_key: &str, row_keys: &KeyRange) -> Filter {
    let partition = Filter::partition_key(Comparison::Eq, partition_key);
    match row_keys.filter(KeyProperty::RowKey) {
        Some(rows) => partition.and(rows),
        None => partition,
    }
}

fn max_lower(a: &Lower, b: &Lower) -> Lower {
    let key = |l: &Lower| match l {
        Lower::Unbounded => None,
        Lower::Included(k) | Lower::Excluded(k) => Some(k.clone()),
    };
    match (key(a), key(b)) {
        (None, _) => b.clone(),
        (_, None) => a.clone(),
        (Some(ka), Some(kb)) => match compare(&ka, &kb) {
            Ordering::Greater => a.clone(),
            Ordering::Less => b.clone(),
            // Same key: exclusive is the tighter bound.
            Ordering::Equal => {
                if matches!(a, Lower::Excluded(_)) {
                    a.clone()
                } else {
                    b.clone()
                }
            }
        },
    }
}

fn min_upper(a: &Upper, b: &Upper) -> Upper {
    match (a, b) {
        (Upper::Unbounded, _) => b.clone(),
        (_, Upper::Unbounded) => a.clone(),
        (Upper::Excluded(ka), Upper::Excluded(kb)) => {
            if compare(ka, kb) == Ordering::Greater {
                b.clone()
            } else {
                a.clone()
            }
        }
    }
}

/// `range` cut at up to `pieces - 1` of `candidates` (keys inside it, in order), chosen evenly:
/// disjoint ranges that cover it, in order; `None` when there is nothing to cut at.
pub fn cut_evenly(range: &KeyRange, candidates: &[String], pieces: usize) -> Option<Vec<KeyRange>> {
    let cuts = pieces.saturating_sub(1).min(candidates.len());
    if cuts == 0 {
        return None;
    }
    let chosen: Vec<&String> = (1..=cuts)
        .map(|i| &candidates[i * candidates.len() / (cuts + 1)])
        .collect();
    let mut lowers = vec![range.lower.clone()];
    lowers.extend(chosen.iter().map(|k| Lower::Included((*k).clone())));
    let mut uppers: Vec<Upper> = chosen
        .iter()
        .map(|k| Upper::Excluded((*k).clone()))
        .collect();
    uppers.push(range.upper.clone());
    Some(
        lowers
            .into_iter()
            .zip(uppers)
            .map(|(lower, upper)| KeyRange { lower, upper })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SUPPLEMENTARY: char = '\u{1F600}';

    #[test]
    fn utf16_order_puts_supplementary_characters_before_the_private_use_area() {
        assert_eq!(compare("\u{1F600}", "\u{E000}"), Ordering::Less);
        assert_eq!(
            "\u{1F600}".cmp("\u{E000}"),
            Ordering::Greater,
            "Rust's str order differs"
        );
        assert_eq!(compare("\u{D7FF}", "\u{10000}"), Ordering::Less);
        assert_eq!(compare("\u{FFFF}", "\u{10FFFF}"), Ordering::Greater);
        assert_eq!(compare("", "\u{0}"), Ordering::Less);
    }

    #[test]
    fn successors_are_exact_and_never_split_surrogates() {
        assert_eq!(successor(""), None);
        assert_eq!(successor("\u{FFFF}\u{FFFF}"), None);
        assert_eq!(successor("a").as_deref(), Some("b"));
        assert_eq!(successor("a\u{FFFF}").as_deref(), Some("b"));
        assert_eq!(successor("ab\u{FFFF}\u{FFFF}").as_deref(), Some("ac"));
        assert_eq!(successor("\u{D7FF}").as_deref(), Some("\u{10000}"));
        assert_eq!(successor("x\u{1F600}").as_deref(), Some("x\u{1F601}"));
        assert_eq!(successor("\u{10FFFF}").as_deref(), Some("\u{E000}"));
        assert_eq!(successor("\u{FFFE}").as_deref(), Some("\u{FFFF}"));
    }

    #[test]
    fn prefix_extension_takes_whole_characters() {
        assert_eq!(extend_prefix("", "😀x").as_deref(), Some("😀"));
        assert_eq!(extend_prefix("a", "ab").as_deref(), Some("ab"));
        assert_eq!(extend_prefix("a", "a"), None);
        assert_eq!(extend_prefix("b", "a"), None);
    }

    #[test]
    fn ranges_become_filters() {
        assert_eq!(range_filter(&KeyRange::all()), None);
        assert_eq!(
            range_filter(&KeyRange::with_prefix("D")).unwrap().as_str(),
            "PartitionKey ge 'D' and PartitionKey lt 'E'"
        );
        assert_eq!(
            range_filter(&KeyRange::between(Some("Davis"), Some("E")))
                .unwrap()
                .as_str(),
            "PartitionKey gt 'Davis' and PartitionKey lt 'E'"
        );
        let rest = KeyRange::between(Some("Gemma"), None);
        assert_eq!(
            partition_filter("Davis", &rest).as_str(),
            "PartitionKey eq 'Davis' and RowKey gt 'Gemma'"
        );
        assert_eq!(
            partition_filter("", &KeyRange::all()).as_str(),
            "PartitionKey eq ''"
        );
        let empty_lower = KeyRange {
            lower: Lower::Included(String::new()),
            upper: Upper::Unbounded,
        };
        assert_eq!(range_filter(&empty_lower), None);
    }

    #[test]
    fn emptiness_and_intersection() {
        assert!(!KeyRange::all().is_empty());
        assert!(KeyRange::between(Some("b"), Some("a")).is_empty());
        assert!(KeyRange::between(Some("a"), Some("a\u{0}")).is_empty());
        assert!(!KeyRange::between(Some("a"), Some("a\u{1}")).is_empty());
        assert!(KeyRange::between(None, Some("")).is_empty());
        let both = KeyRange::with_prefix("a").intersect(&KeyRange::between(Some("ab"), None));
        assert_eq!(both.lower, Lower::Excluded("ab".into()));
        assert_eq!(both.upper, Upper::Excluded("b".into()));
    }

    fn key_strategy() -> impl Strategy<Value = String> {
        let chars = prop::sample::select(vec![
            'A',
            'B',
            '\u{D7FF}',
            '\u{E000}',
            '\u{FFFF}',
            SUPPLEMENTARY,
            '\u{10FFFF}',
        ]);
        prop::collection::vec(chars, 0..5).prop_map(|cs| cs.into_iter().collect())
    }

    proptest! {
        #[test]
        fn the_successor_bounds_exactly_the_keys_with_the_prefix(prefix in key_strategy(), key in key_strategy()) {
            let range = KeyRange::with_prefix(&prefix);
            prop_assert_eq!(range.contains(&key), key.starts_with(&prefix));
        }

        #[test]
        fn nothing_lies_between_a_prefix_range_and_its_successor(prefix in key_strategy()) {
            if let Some(next) = successor(&prefix) {
                prop_assert!(!next.starts_with(&prefix));
                prop_assert_eq!(compare(&prefix, &next), Ordering::Less);
            }
        }

        #[test]
        fn utf16_order_matches_comparing_by_utf16_rank(a in key_strategy(), b in key_strategy()) {
            let rank = |c: char| -> u32 {
                match c as u32 {
                    n if n < 0xD800 => n,
                    n if n >= 0x10000 => n - 0x10000 + 0xD800,
                    n => n + 0x100000 - 0x800,
                }
            };
            let ra: Vec<u32> = a.chars().map(rank).collect();
            let rb: Vec<u32> = b.chars().map(rank).collect();
            prop_assert_eq!(compare(&a, &b), ra.cmp(&rb));
        }

        #[test]
        fn comparing_bytes_first_agrees_with_utf16_units(
            a in "[a-c\u{7f}\u{80}\u{d7ff}\u{e000}\u{ffff}\u{10000}\u{10ffff}]{0,6}",
            b in "[a-c\u{7f}\u{80}\u{d7ff}\u{e000}\u{ffff}\u{10000}\u{10ffff}]{0,6}",
        ) {
            prop_assert_eq!(compare(&a, &b), a.encode_utf16().cmp(b.encode_utf16()));
            let (a, b) = (format!("same{a}"), format!("same{b}"));
            prop_assert_eq!(compare(&a, &b), a.encode_utf16().cmp(b.encode_utf16()));
            // Past a whole eight bytes in common, and across the next eight.
            let (a, b) = (format!("a longer prefix {a}"), format!("a longer prefix {b}"));
            prop_assert_eq!(compare(&a, &b), a.encode_utf16().cmp(b.encode_utf16()));
        }

        #[test]
        fn intersection_contains_exactly_the_common_keys(
            a in key_strategy(), b in key_strategy(), c in key_strategy(), d in key_strategy(), key in key_strategy()
        ) {
            let r1 = KeyRange::between(Some(&a), Some(&b));
            let r2 = KeyRange { lower: Lower::Included(c), upper: Upper::Excluded(d) };
            prop_assert_eq!(r1.intersect(&r2).contains(&key), r1.contains(&key) && r2.contains(&key));
        }

        #[test]
        fn a_range_is_empty_exactly_when_it_contains_no_probe_key(a in key_strategy(), b in key_strategy()) {
            let range = KeyRange::between(Some(&a), Some(&b));
            // The least key above `a` is `a + U+0000`; if that is outside, so is every key.
            let least = format!("{a}\u{0}");
            prop_assert_eq!(range.is_empty(), !range.contains(&least));
        }
    }
}
