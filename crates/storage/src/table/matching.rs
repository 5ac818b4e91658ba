//! Evaluating a [`Filter`] against an entity, the way the Table service does, for tables held
//! in memory (the ledger's race tests and its in-memory benchmark).
//!
//! The service's rules that matter here: keys and strings compare by UTF-16 code units; a
//! property the entity lacks, or holds with another type, makes its comparison false; `Timestamp` is the time of the entity's last write; integers of either width
//! compare as numbers.

use std::cmp::Ordering;

use super::entity::{Entity, Value};
use super::filter::{Comparison, Expr, Filter, Literal};

impl Filter {
    /// Whether `entity` satisfies the filter.
    pub fn matches(&self, entity: &Entity) -> bool {
        evaluate(&self.expr, entity)
    }

    /// The key range a query with this filter scans, when its top-level conjunction names one
    /// partition (`PartitionKey eq`): that partition, the lowest row key it can select
    /// (`RowKey ge`/`gt`, else the partition's start) and the row key it stops before
    /// (`RowKey lt`/`le`, if any). The service scans that range and no more; an in-memory
    /// table does the same, and counts what it scanned as the service counts.
    pub(crate) fn key_bounds(&self) -> Option<KeyBounds<'_>> {
        let mut partition = None;
        let mut lowest_row = "";
        let mut highest_row: Option<(&str, bool)> = None;
        let units = |text: &str| text.encode_utf16().collect::<Vec<u16>>();
        let mut stack = vec![&self.expr];
        while let Some(expr) = stack.pop() {
            match expr {
                Expr::And(a, b) => stack.extend([a.as_ref(), b.as_ref()]),
                Expr::Compare(property, op, Literal::String(value)) => {
                    match (property.as_str(), op) {
                        ("PartitionKey", Comparison::Eq) => partition = Some(value.as_str()),
                        ("RowKey", Comparison::Ge | Comparison::Gt)
                            if units(value) > units(lowest_row) =>
                        {
                            lowest_row = value;
                        }
                        ("RowKey", Comparison::Lt | Comparison::Le)
                            if highest_row.is_none_or(|(h, _)| units(value) < units(h)) =>
                        {
                            highest_row = Some((value, *op == Comparison::Le));
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        partition.map(|partition| KeyBounds {
            partition,
            lowest_row,
            highest_row,
        })
    }
}

/// The key range a filter confines a query to (see [`Filter::key_bounds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyBounds<'a> {
    pub partition: &'a str,
    pub lowest_row: &'a str,
    /// The highest row key, and whether it is included.
    pub highest_row: Option<(&'a str, bool)>,
}

impl KeyBounds<'_> {
    /// Whether a row key (in UTF-16 units) of the partition lies at or below the upper bound.
    pub(crate) fn below_top(&self, row_key: &[u16]) -> bool {
        match self.highest_row {
            None => true,
            Some((high, included)) => {
                let high: Vec<u16> = high.encode_utf16().collect();
                if included {
                    row_key <= high.as_slice()
                } else {
                    row_key < high.as_slice()
                }
            }
        }
    }
}

fn evaluate(expr: &Expr, entity: &Entity) -> bool {
    match expr {
        Expr::And(a, b) => evaluate(a, entity) && evaluate(b, entity),
        Expr::Or(a, b) => evaluate(a, entity) || evaluate(b, entity),
        Expr::Not(a) => !evaluate(a, entity),
        Expr::Compare(property, op, literal) => {
            let ordering = match property.as_str() {
                "PartitionKey" => compare_text(&entity.partition_key, literal),
                "RowKey" => compare_text(&entity.row_key, literal),
                "Timestamp" => match (entity.timestamp, literal) {
                    (Some(t), Literal::DateTime(l)) => Some(t.cmp(l)),
                    _ => None,
                },
                name => entity
                    .properties
                    .get(name)
                    .and_then(|value| compare_value(value, literal)),
            };
            ordering.is_some_and(|o| holds(*op, o))
        }
    }
}

fn holds(op: Comparison, ordering: Ordering) -> bool {
    match op {
        Comparison::Eq => ordering.is_eq(),
        Comparison::Ne => ordering.is_ne(),
        Comparison::Gt => ordering.is_gt(),
        Comparison::Ge => ordering.is_ge(),
        Comparison::Lt => ordering.is_lt(),
        Comparison::Le => ordering.is_le(),
    }
}

fn compare_text(text: &str, literal: &Literal) -> Option<Ordering> {
    match literal {
        Literal::String(l) => Some(text.encode_utf16().cmp(l.encode_utf16())),
        _ => None,
    }
}

/// How a property's value compares with a literal; `None` when their types differ.
fn compare_value(value: &Value, literal: &Literal) -> Option<Ordering> {
    let integer = |v: &Value| match v {
        Value::Int32(n) => Some(i64::from(*n)),
        Value::Int64(n) => Some(*n),
        _ => None,
    };
    let literal_integer = match literal {
        Literal::Int32(n) => Some(i64::from(*n)),
        Literal::Int64(n) => Some(*n),
        _ => None,
    };
    if let (Some(a), Some(b)) = (integer(value), literal_integer) {
        return Some(a.cmp(&b));
    }
    match (value, literal) {
        (Value::String(a), Literal::String(_)) => compare_text(a, literal),
        (Value::Double(a), Literal::Double(b)) => a.partial_cmp(b),
        (Value::Boolean(a), Literal::Boolean(b)) => Some(a.cmp(b)),
        (Value::DateTime(a), Literal::DateTime(b)) => Some(a.cmp(b)),
        (Value::Guid(a), Literal::Guid(b)) => Some(a.cmp(b)),
        (Value::Binary(a), Literal::Binary(b)) => Some(a.cmp(b)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::entity::EdmDateTime;
    use crate::table::filter::Property;
    use Comparison::*;

    fn entity() -> Entity {
        let mut e = Entity::new("scan", "p:item")
            .with("leaseUntil", Value::Int64(500))
            .with("name", Value::String("\u{ff61}".into()));
        e.timestamp = EdmDateTime::parse("2026-01-01T00:00:00Z");
        e
    }

    fn lease(op: Comparison, n: i64) -> Filter {
        Filter::compare(Property::new("leaseUntil").unwrap(), op, Literal::Int64(n)).unwrap()
    }

    #[test]
    fn a_partition_and_its_lowest_row_bound_the_read() {
        let range = Filter::partition_key(Eq, "scan")
            .and(Filter::row_key(Ge, "p:"))
            .and(Filter::row_key(Lt, "p;"));
        assert_eq!(
            range.key_bounds(),
            Some(KeyBounds {
                partition: "scan",
                lowest_row: "p:",
                highest_row: Some(("p;", false)),
            })
        );
        assert_eq!(Filter::row_key(Ge, "p:").key_bounds(), None);
        let either = Filter::partition_key(Eq, "a").or(Filter::partition_key(Eq, "b"));
        assert_eq!(either.key_bounds(), None);
    }

    #[test]
    fn key_ranges_select_their_rows() {
        let range = Filter::partition_key(Eq, "scan")
            .and(Filter::row_key(Ge, "p:"))
            .and(Filter::row_key(Lt, "p;"));
        assert!(range.matches(&entity()));
        assert!(!range.matches(&Entity::new("scan", "d:item")));
        assert!(!range.matches(&Entity::new("other", "p:item")));
    }

    #[test]
    fn integers_compare_across_widths_and_missing_properties_never_match() {
        assert!(lease(Gt, 499).matches(&entity()));
        assert!(!lease(Gt, 500).matches(&entity()));
        let int32 = Filter::compare(
            Property::new("leaseUntil").unwrap(),
            Le,
            Literal::Int32(500),
        )
        .unwrap();
        assert!(int32.matches(&entity()));
        let bare = Entity::new("scan", "p:x");
        assert!(!lease(Gt, 0).matches(&bare));
        assert!(!lease(Le, 0).matches(&bare));
    }

    #[test]
    fn strings_order_by_utf16_code_units() {
        // U+FF61 is one unit above the surrogates that encode U+10000; code points order the
        // other way round.
        let name = |op| {
            Filter::compare(
                Property::new("name").unwrap(),
                op,
                Literal::String("\u{10000}".into()),
            )
            .unwrap()
        };
        assert!(name(Gt).matches(&entity()));
        assert!(!name(Lt).matches(&entity()));
    }

    #[test]
    fn timestamp_is_the_last_write() {
        let at = |text| Literal::DateTime(EdmDateTime::parse(text).unwrap());
        let ts = |op, text| Filter::compare(Property::new("Timestamp").unwrap(), op, at(text));
        assert!(ts(Le, "2026-01-01T00:00:00Z").unwrap().matches(&entity()));
        assert!(!ts(Lt, "2026-01-01T00:00:00Z").unwrap().matches(&entity()));
        assert!(ts(Gt, "2025-12-31T23:59:59Z")
            .unwrap()
            .or(lease(Eq, 1))
            .matches(&entity()));
    }

    #[test]
    fn other_types_never_match_a_literal_of_another_type() {
        let as_text = Filter::compare(
            Property::new("leaseUntil").unwrap(),
            Eq,
            Literal::String("500".into()),
        )
        .unwrap();
        assert!(!as_text.matches(&entity()));
    }
}
