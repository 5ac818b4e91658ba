//! OData `$filter` expressions, built from typed parts so that no caller concatenates a filter
//! by hand. A string literal is always quoted with inner quotes doubled, so a key such as
//! `x' or 'a' eq 'a` stays one literal and can never change the meaning of the query.

use std::fmt;

use super::entity::EdmDateTime;
use crate::encoding::odata_string_literal;

/// The service refuses filters with more than this many comparisons.
pub const MAX_COMPARISONS: usize = 15;

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
}

impl Comparison {
    fn keyword(self) -> &'static str {
        match self {
            Comparison::Eq => "eq",
            Comparison::Ne => "ne",
            Comparison::Gt => "gt",
            Comparison::Ge => "ge",
            Comparison::Lt => "lt",
            Comparison::Le => "le",
        }
    }
}

/// A constant on the right of a comparison.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    String(String),
    Int32(i32),
    Int64(i64),
    /// Must be finite: OData has no literal for NaN or the infinities.
    Double(f64),
    Boolean(bool),
    DateTime(EdmDateTime),
    Guid(uuid::Uuid),
    Binary(Vec<u8>),
}

impl From<&str> for Literal {
    fn from(value: &str) -> Self {
        Literal::String(value.to_string())
    }
}

impl From<String> for Literal {
    fn from(value: String) -> Self {
        Literal::String(value)
    }
}

/// A property name usable on the left of a comparison: a C#-style identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Property(String);

/// Why a filter could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error("'{0}' is not a valid property name (letters, digits and '_', not starting with a digit, at most 255)")]
    InvalidProperty(String),
    #[error("a Double literal must be finite")]
    NonFiniteDouble,
}

impl Property {
    pub fn new(name: &str) -> Result<Self, FilterError> {
        let valid = !name.is_empty()
            && name.len() <= 255
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if valid {
            Ok(Property(name.to_string()))
        } else {
            Err(FilterError::InvalidProperty(
                name.chars().take(64).collect(),
            ))
        }
    }

    pub fn partition_key() -> Self {
        Property("PartitionKey".into())
    }

    pub fn row_key() -> Self {
        Property("RowKey".into())
    }
}

/// A filter expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    text: String,
    /// The same expression as a tree, for tables evaluated in memory (see `matching`).
    pub(crate) expr: Expr,
    comparisons: usize,
    /// True when the expression is one comparison and needs no parentheses to be combined.
    atomic: bool,
}

/// A filter's structure, kept beside its text so that an in-memory table can evaluate it
/// without parsing OData.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    Compare(String, Comparison, Literal),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
}

impl Filter {
    /// `property op literal`.
    pub fn compare(
        property: Property,
        op: Comparison,
        value: Literal,
    ) -> Result<Self, FilterError> {
        let literal = format_literal(&value)?;
        Ok(Filter {
            text: format!("{} {} {}", property.0, op.keyword(), literal),
            expr: Expr::Compare(property.0, op, value),
            comparisons: 1,
            atomic: true,
        })
    }

    /// A comparison of PartitionKey with a string; cannot fail.
    pub fn partition_key(op: Comparison, value: &str) -> Self {
        Self::key(Property::partition_key(), op, value)
    }

    /// A comparison of RowKey with a string; cannot fail.
    pub fn row_key(op: Comparison, value: &str) -> Self {
        Self::key(Property::row_key(), op, value)
    }

    fn key(property: Property, op: Comparison, value: &str) -> Self {
        Filter {
            text: format!(
                "{} {} {}",
                property.0,
                op.keyword(),
                odata_string_literal(value)
            ),
            expr: Expr::Compare(property.0, op, Literal::String(value.to_string())),
            comparisons: 1,
            atomic: true,
        }
    }

    /// Both must hold.
    pub fn and(self, other: Filter) -> Filter {
        self.combine("and", other)
    }

    /// Either may hold.
    pub fn or(self, other: Filter) -> Filter {
        self.combine("or", other)
    }

    /// The negation.
    #[allow(clippy::should_implement_trait)]
    pub fn not(self) -> Filter {
        Filter {
            text: format!("not ({})", self.text),
            expr: Expr::Not(Box::new(self.expr)),
            comparisons: self.comparisons,
            atomic: true,
        }
    }

    /// Joins filters with `and`; `None` when the list is empty.
    pub fn all(filters: impl IntoIterator<Item = Filter>) -> Option<Filter> {
        filters.into_iter().reduce(Filter::and)
    }

    fn combine(self, keyword: &str, other: Filter) -> Filter {
        let wrap = |f: &Filter| {
            if f.atomic {
                f.text.clone()
            } else {
                format!("({})", f.text)
            }
        };
        let text = format!("{} {keyword} {}", wrap(&self), wrap(&other));
        let (left, right) = (Box::new(self.expr), Box::new(other.expr));
        Filter {
            text,
            expr: if keyword == "and" {
                Expr::And(left, right)
            } else {
                Expr::Or(left, right)
            },
            comparisons: self.comparisons + other.comparisons,
            atomic: false,
        }
    }

    /// The expression as the service parses it (before URL encoding).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// How many comparisons it holds (the service allows [`MAX_COMPARISONS`]).
    pub fn comparisons(&self) -> usize {
        self.comparisons
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn format_literal(value: &Literal) -> Result<String, FilterError> {
    Ok(match value {
        Literal::String(s) => odata_string_literal(s),
        Literal::Int32(n) => n.to_string(),
        Literal::Int64(n) => format!("{n}L"),
        Literal::Double(d) if !d.is_finite() => return Err(FilterError::NonFiniteDouble),
        // Debug formatting always shows a decimal point or an exponent, so the literal is
        // read as a Double and not an Int32.
        Literal::Double(d) => format!("{d:?}"),
        Literal::Boolean(b) => b.to_string(),
        Literal::DateTime(t) => format!("datetime'{t}'"),
        Literal::Guid(g) => format!("guid'{}'", g.hyphenated()),
        Literal::Binary(bytes) => {
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            format!("X'{hex}'")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use Comparison::*;

    #[test]
    fn key_ranges_read_naturally() {
        let f = Filter::partition_key(Ge, "a").and(Filter::partition_key(Lt, "b"));
        assert_eq!(f.as_str(), "PartitionKey ge 'a' and PartitionKey lt 'b'");
        assert_eq!(f.comparisons(), 2);
    }

    #[test]
    fn compound_operands_are_parenthesised() {
        let range = Filter::partition_key(Gt, "a").and(Filter::partition_key(Lt, "b"));
        let f = range.clone().or(Filter::row_key(Eq, "x")).and(range.not());
        assert_eq!(
            f.as_str(),
            "((PartitionKey gt 'a' and PartitionKey lt 'b') or RowKey eq 'x') and \
             not (PartitionKey gt 'a' and PartitionKey lt 'b')"
        );
        assert_eq!(f.comparisons(), 5);
    }

    #[test]
    fn quotes_cannot_escape_the_literal() {
        let f = Filter::row_key(Eq, "x' or 'a' eq 'a");
        assert_eq!(f.as_str(), "RowKey eq 'x'' or ''a'' eq ''a'");
    }

    #[test]
    fn every_literal_type_has_its_odata_form() {
        let p = || Property::new("v").unwrap();
        let cases = [
            (Literal::Int32(-3), "v eq -3"),
            (
                Literal::Int64(9223372036854775807),
                "v eq 9223372036854775807L",
            ),
            (Literal::Double(1.0), "v eq 1.0"),
            (Literal::Double(2.5e-8), "v eq 2.5e-8"),
            (Literal::Boolean(true), "v eq true"),
            (
                Literal::DateTime(EdmDateTime::parse("2008-07-10T00:00:00Z").unwrap()),
                "v eq datetime'2008-07-10T00:00:00.0000000Z'",
            ),
            (
                Literal::Guid(
                    uuid::Uuid::parse_str("4185404A-5818-48C3-B9BE-F217DF0DBA6F").unwrap(),
                ),
                "v eq guid'4185404a-5818-48c3-b9be-f217df0dba6f'",
            ),
            (Literal::Binary(vec![1, 2, 0xab]), "v eq X'0102ab'"),
        ];
        for (literal, expected) in cases {
            assert_eq!(
                Filter::compare(p(), Eq, literal).unwrap().as_str(),
                expected
            );
        }
        assert_eq!(
            Filter::compare(p(), Eq, Literal::Double(f64::NAN)),
            Err(FilterError::NonFiniteDouble)
        );
    }

    #[test]
    fn property_names_are_identifiers() {
        for bad in ["", "1a", "a b", "a'b", "a)or(b", &"x".repeat(256)] {
            assert!(Property::new(bad).is_err(), "{bad}");
        }
        assert!(Property::new("_Name_1").is_ok());
    }
}
