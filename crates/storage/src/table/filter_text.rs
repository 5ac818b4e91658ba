//! Filters as users write them: the Table service's `$filter` grammar, parsed into a typed
//! [`Filter`] before anything is sent, so that a mistake is a clear error at the start of a
//! scan (where, and why) and not a 400 from the service in the middle of one, and what is sent
//! is the filter as this client writes it (every literal re-quoted), never the user's text.
//!
//! The grammar (the subset of OData the Table service supports):
//!
//! ```text
//! filter     = or
//! or         = and *( "or" and )
//! and        = unary *( "and" unary )
//! unary      = "not" unary / "(" or ")" / comparison
//! comparison = property ( "eq" / "ne" / "gt" / "ge" / "lt" / "le" ) literal
//! literal    = 'text' ('' inside for a quote) / 42 (Int32) / 42L (Int64) / 4.2, 4e2 (Double)
//!            / true / false / datetime'2025-01-01T00:00:00Z' / guid'…' / X'0a1b' / binary'0a1b'
//! ```
//!
//! Keywords are lowercase, as the service reads them. The property comes first (`Age gt 30`,
//! not `30 lt Age`).

use super::entity::EdmDateTime;
use super::filter::{Comparison, Filter, Literal, Property};

/// The most comparisons a user's filter may hold: the service takes 15 per query, and a scan
/// adds up to 4 of its own to bound each query's keys.
pub const MAX_USER_COMPARISONS: usize = 11;
/// How deeply parentheses and `not` may nest.
const MAX_DEPTH: usize = 32;

/// A filter that could not be read: where (a character position, from 1) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at character {position}: {message}")]
pub struct FilterTextError {
    pub position: usize,
    pub message: String,
}

/// Reads a filter as the Table service would; see the module documentation for the grammar.
pub fn parse_filter(text: &str) -> Result<Filter, FilterTextError> {
    let tokens = tokenize(text)?;
    let mut parser = Parser {
        tokens,
        next: 0,
        end: text.chars().count() + 1,
        depth: 0,
    };
    if parser.tokens.is_empty() {
        return Err(parser.error_at(1, "the filter is empty"));
    }
    let filter = parser.or()?;
    if let Some(token) = parser.peek() {
        let at = token.position;
        let what = token.kind.describe();
        return Err(parser.error_at(
            at,
            format!("expected \"and\", \"or\" or the end of the filter, found {what}"),
        ));
    }
    if filter.comparisons() > MAX_USER_COMPARISONS {
        return Err(parser.error_at(
            1,
            format!(
                "the filter holds {} comparisons; at most {MAX_USER_COMPARISONS} are allowed (the \
                 service takes 15 per query and the scan adds its own key bounds)",
                filter.comparisons()
            ),
        ));
    }
    Ok(filter)
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Open,
    Close,
    /// A name: a property, a keyword, or `true`/`false`.
    Word(String),
    /// A quoted string, unescaped.
    Text(String),
    /// A number as written, sign included.
    Number(String),
    /// A typed literal: its prefix (`datetime`, `guid`, `X`, `binary`) and quoted content.
    Typed(String, String),
}

impl Kind {
    fn describe(&self) -> String {
        match self {
            Kind::Open => "\"(\"".into(),
            Kind::Close => "\")\"".into(),
            Kind::Word(w) => format!("\"{}\"", shorten(w)),
            Kind::Text(t) => format!("the string '{}'", shorten(t)),
            Kind::Number(n) => format!("the number {}", shorten(n)),
            Kind::Typed(prefix, t) => format!("{prefix}'{}'", shorten(t)),
        }
    }
}

fn shorten(text: &str) -> String {
    if text.chars().count() > 40 {
        format!("{}…", text.chars().take(40).collect::<String>())
    } else {
        text.to_string()
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Token {
    kind: Kind,
    /// Character position of its first character, from 1.
    position: usize,
}

fn tokenize(text: &str) -> Result<Vec<Token>, FilterTextError> {
    let chars: Vec<char> = text.chars().collect();
    let error = |position: usize, message: String| FilterTextError { position, message };
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let position = i + 1;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let kind = if c == '(' {
            i += 1;
            Kind::Open
        } else if c == ')' {
            i += 1;
            Kind::Close
        } else if c == '\'' {
            let (content, next) = quoted(&chars, i).ok_or_else(|| {
                error(
                    position,
                    "this string has no closing quote (write '' for a quote inside)".into(),
                )
            })?;
            i = next;
            Kind::Text(content)
        } else if c.is_ascii_digit()
            || (c == '-' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            let start = i;
            i += 1;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric()
                    || chars[i] == '.'
                    || ((chars[i] == '-' || chars[i] == '+') && matches!(chars[i - 1], 'e' | 'E')))
            {
                i += 1;
            }
            Kind::Number(chars[start..i].iter().collect())
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            if chars.get(i) == Some(&'\'') {
                let (content, next) = quoted(&chars, i)
                    .ok_or_else(|| error(position, format!("{word}'…' has no closing quote")))?;
                i = next;
                Kind::Typed(word, content)
            } else {
                Kind::Word(word)
            }
        } else {
            return Err(error(
                position,
                format!("{c:?} cannot appear here (strings go in single quotes)"),
            ));
        };
        tokens.push(Token { kind, position });
    }
    Ok(tokens)
}

/// The content of the quoted string starting at `chars[start]` (a quote), with `''` read as one
/// quote, and the index after its closing quote.
fn quoted(chars: &[char], start: usize) -> Option<(String, usize)> {
    let mut content = String::new();
    let mut i = start + 1;
    while i < chars.len() {
        if chars[i] == '\'' {
            if chars.get(i + 1) == Some(&'\'') {
                content.push('\'');
                i += 2;
                continue;
            }
            return Some((content, i + 1));
        }
        content.push(chars[i]);
        i += 1;
    }
    None
}

struct Parser {
    tokens: Vec<Token>,
    next: usize,
    /// The position just after the text, for errors at its end.
    end: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.next)
    }

    fn take(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.next).cloned();
        self.next += 1;
        token
    }

    fn error_at(&self, position: usize, message: impl Into<String>) -> FilterTextError {
        FilterTextError {
            position,
            message: message.into(),
        }
    }

    fn at_word(&self, keyword: &str) -> bool {
        matches!(self.peek(), Some(Token { kind: Kind::Word(w), .. }) if w == keyword)
    }

    fn or(&mut self) -> Result<Filter, FilterTextError> {
        let mut filter = self.and()?;
        while self.at_word("or") {
            self.take();
            filter = filter.or(self.and()?);
        }
        Ok(filter)
    }

    fn and(&mut self) -> Result<Filter, FilterTextError> {
        let mut filter = self.unary()?;
        while self.at_word("and") {
            self.take();
            filter = filter.and(self.unary()?);
        }
        Ok(filter)
    }

    fn unary(&mut self) -> Result<Filter, FilterTextError> {
        let Some(token) = self.take() else {
            return Err(self.error_at(self.end, "the filter ends where a comparison should be"));
        };
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error_at(
                token.position,
                format!("parentheses and \"not\" nest more than {MAX_DEPTH} deep"),
            ));
        }
        let filter = match token.kind {
            Kind::Word(w) if w == "not" => self.unary()?.not(),
            Kind::Open => {
                let inner = self.or()?;
                match self.take() {
                    Some(Token {
                        kind: Kind::Close, ..
                    }) => inner,
                    Some(other) => {
                        return Err(self.error_at(
                            other.position,
                            format!(
                                "expected \")\" to close the \"(\" at character {}, found {}",
                                token.position,
                                other.kind.describe()
                            ),
                        ))
                    }
                    None => {
                        return Err(self.error_at(
                            self.end,
                            format!("the \"(\" at character {} is never closed", token.position),
                        ))
                    }
                }
            }
            Kind::Word(name) => self.comparison(name, token.position)?,
            other => {
                let hint = if matches!(other, Kind::Close) {
                    ""
                } else {
                    " (the property comes first, as in Age gt 30)"
                };
                return Err(self.error_at(
                    token.position,
                    format!(
                        "expected a property name, \"not\" or \"(\", found {}{hint}",
                        other.describe()
                    ),
                ));
            }
        };
        self.depth -= 1;
        Ok(filter)
    }

    fn comparison(&mut self, name: String, position: usize) -> Result<Filter, FilterTextError> {
        if matches!(
            name.as_str(),
            "and" | "or" | "eq" | "ne" | "gt" | "ge" | "lt" | "le" | "true" | "false"
        ) {
            return Err(self.error_at(
                position,
                format!("expected a property name, found the keyword \"{name}\""),
            ));
        }
        let property = Property::new(&name).map_err(|e| self.error_at(position, e.to_string()))?;
        let op = match self.take() {
            Some(Token {
                kind: Kind::Word(w),
                position,
            }) => match w.as_str() {
                "eq" => Comparison::Eq,
                "ne" => Comparison::Ne,
                "gt" => Comparison::Gt,
                "ge" => Comparison::Ge,
                "lt" => Comparison::Lt,
                "le" => Comparison::Le,
                other => {
                    let hint = if ["eq", "ne", "gt", "ge", "lt", "le"]
                        .contains(&other.to_ascii_lowercase().as_str())
                    {
                        " (operators are lowercase)"
                    } else {
                        ""
                    };
                    return Err(self.error_at(
                        position,
                        format!(
                            "expected a comparison (eq, ne, gt, ge, lt, le) after {name}, found \"{}\"{hint}",
                            shorten(other)
                        ),
                    ));
                }
            },
            Some(other) => {
                return Err(self.error_at(
                    other.position,
                    format!(
                        "expected a comparison (eq, ne, gt, ge, lt, le) after {name}, found {}",
                        other.kind.describe()
                    ),
                ))
            }
            None => {
                return Err(self.error_at(
                    self.end,
                    format!("the filter ends after {name}; expected a comparison such as eq"),
                ))
            }
        };
        let Some(token) = self.take() else {
            return Err(self.error_at(
                self.end,
                format!("the filter ends where the value to compare {name} with should be"),
            ));
        };
        let literal = literal(&token).map_err(|message| self.error_at(token.position, message))?;
        let typed_key = matches!(name.as_str(), "PartitionKey" | "RowKey");
        if typed_key && !matches!(literal, Literal::String(_)) {
            return Err(self.error_at(
                token.position,
                format!("{name} is a string: compare it with a quoted value, as in {name} eq 'a'"),
            ));
        }
        if name == "Timestamp" && !matches!(literal, Literal::DateTime(_)) {
            return Err(self.error_at(
                token.position,
                "Timestamp is a date: compare it with datetime'2025-01-01T00:00:00Z'",
            ));
        }
        Filter::compare(property, op, literal)
            .map_err(|e| self.error_at(token.position, e.to_string()))
    }
}

/// The literal a value token stands for, or why it is none.
fn literal(token: &Token) -> Result<Literal, String> {
    match &token.kind {
        Kind::Text(text) => Ok(Literal::String(text.clone())),
        Kind::Word(w) if w == "true" => Ok(Literal::Boolean(true)),
        Kind::Word(w) if w == "false" => Ok(Literal::Boolean(false)),
        Kind::Number(n) => number(n),
        Kind::Typed(prefix, content) => match prefix.as_str() {
            "datetime" => EdmDateTime::parse(content)
                .map(Literal::DateTime)
                .ok_or_else(|| {
                    format!(
                    "datetime'{}' is not a date and time such as datetime'2025-01-01T00:00:00Z' \
                     (ISO 8601, with a Z or an offset)",
                    shorten(content)
                )
                }),
            "guid" => uuid::Uuid::parse_str(content)
                .map(Literal::Guid)
                .map_err(|_| format!("guid'{}' is not a GUID", shorten(content))),
            "X" | "binary" => hex(content).map(Literal::Binary).ok_or_else(|| {
                format!(
                    "{prefix}'{}' is not hexadecimal bytes (pairs of 0-9, a-f)",
                    shorten(content)
                )
            }),
            other => Err(format!(
                "{other}'…' is not a kind of value; use datetime'…', guid'…', X'…' or binary'…'"
            )),
        },
        Kind::Word(w) => Err(format!(
            "expected a value, found \"{}\" (strings go in single quotes: '{}')",
            shorten(w),
            shorten(w)
        )),
        other => Err(format!("expected a value, found {}", other.describe())),
    }
}

/// An Int32 (`42`), Int64 (`42L`) or Double (`4.2`, `4e2`, `4.2d`).
fn number(text: &str) -> Result<Literal, String> {
    if let Some(digits) = text.strip_suffix(['L', 'l']) {
        return digits
            .parse::<i64>()
            .map(Literal::Int64)
            .map_err(|_| format!("{text} is not a whole number that fits 64 bits"));
    }
    let double = text.strip_suffix(['d', 'D']).unwrap_or(text);
    if double.contains(['.', 'e', 'E']) || double.len() < text.len() {
        return match double.parse::<f64>() {
            Ok(d) if d.is_finite() => Ok(Literal::Double(d)),
            _ => Err(format!("{text} is not a number")),
        };
    }
    match text.parse::<i64>() {
        Ok(n) => i32::try_from(n).map(Literal::Int32).map_err(|_| {
            format!("{text} does not fit an Int32; write {text}L to compare with an Int64")
        }),
        Err(_) => Err(format!("{text} is not a number")),
    }
}

fn hex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 || !text.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_read_and_written_back_in_the_services_form() {
        let cases = [
            (
                "Timestamp lt datetime'2025-01-01T00:00:00Z' and Level eq 'Debug'",
                "Timestamp lt datetime'2025-01-01T00:00:00.0000000Z' and Level eq 'Debug'",
            ),
            ("Name eq 'it''s'", "Name eq 'it''s'"),
            ("Age gt 30 or Age le -2", "Age gt 30 or Age le -2"),
            ("Big ge 5000000000L", "Big ge 5000000000L"),
            ("Ratio lt 0.5", "Ratio lt 0.5"),
            ("Ratio lt 2e3", "Ratio lt 2000.0"),
            ("Ratio lt 2d", "Ratio lt 2.0"),
            ("Active eq true", "Active eq true"),
            (
                "Id eq guid'4185404A-5818-48C3-B9BE-F217DF0DBA6F'",
                "Id eq guid'4185404a-5818-48c3-b9be-f217df0dba6f'",
            ),
            ("Data eq X'0a1B'", "Data eq X'0a1b'"),
            ("Data eq binary'ff'", "Data eq X'ff'"),
            (
                "not (A eq 1 or B eq 2) and (C eq 3)",
                "not (A eq 1 or B eq 2) and C eq 3",
            ),
            ("  PartitionKey ge 'a'  ", "PartitionKey ge 'a'"),
            ("not not A eq 1", "not (not (A eq 1))"),
        ];
        for (text, expected) in cases {
            let filter = parse_filter(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(filter.as_str(), expected, "{text}");
            // What is written back reads as the same filter.
            assert_eq!(parse_filter(filter.as_str()).unwrap(), filter, "{text}");
        }
    }

    #[test]
    fn and_binds_tighter_than_or() {
        let filter = parse_filter("A eq 1 or B eq 2 and C eq 3").unwrap();
        assert_eq!(filter.as_str(), "A eq 1 or (B eq 2 and C eq 3)");
    }

    #[test]
    fn mistakes_say_where_and_why() {
        let cases: [(&str, usize, &str); 20] = [
            ("", 1, "empty"),
            ("Name", 5, "ends after Name"),
            ("Name eq", 8, "value to compare"),
            ("Name equals 'a'", 6, "expected a comparison"),
            ("Name EQ 'a'", 6, "lowercase"),
            ("Name eq 'a", 9, "no closing quote"),
            ("Name eq a", 9, "single quotes"),
            ("'a' eq Name", 1, "property comes first"),
            ("(Name eq 'a'", 13, "never closed"),
            ("Name eq 'a')", 12, "end of the filter"),
            ("Name eq 'a' and", 16, "comparison should be"),
            ("Name eq 'a' xor B eq 1", 13, "\"and\", \"or\""),
            ("Age gt 3000000000", 8, "write 3000000000L"),
            ("Age gt 1.2.3", 8, "not a number"),
            ("T lt datetime'yesterday'", 6, "not a date"),
            ("G eq guid'123'", 6, "not a GUID"),
            ("B eq X'abc'", 6, "hexadecimal"),
            ("PartitionKey eq 5", 17, "is a string"),
            ("Timestamp lt '2025-01-01'", 14, "is a date"),
            ("Name eq 'a' ; drop", 13, "cannot appear"),
        ];
        for (text, position, words) in cases {
            let error = parse_filter(text).expect_err(text);
            assert_eq!(error.position, position, "{text}: {error}");
            assert!(error.message.contains(words), "{text}: {error}");
        }
    }

    #[test]
    fn a_filter_keeps_room_for_the_scans_own_bounds_and_nests_only_so_deep() {
        let many = (0..12)
            .map(|n| format!("A eq {n}"))
            .collect::<Vec<_>>()
            .join(" or ");
        assert!(parse_filter(&many)
            .unwrap_err()
            .message
            .contains("at most 11"));
        let deep = format!("{}A eq 1{}", "(".repeat(40), ")".repeat(40));
        assert!(parse_filter(&deep).unwrap_err().message.contains("nest"));
        let eleven = (0..11)
            .map(|n| format!("A eq {n}"))
            .collect::<Vec<_>>()
            .join(" or ");
        assert_eq!(parse_filter(&eleven).unwrap().comparisons(), 11);
    }
}
