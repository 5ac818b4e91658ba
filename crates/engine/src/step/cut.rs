//! Where a step cuts what it leaves: the rest of a task after a page (`advance`), after an
//! empty page at the continuation's position (`split_at_position`), and the rest of a range
//! handed on in pieces at the end of the budget (`subdivide`). Pure functions over tasks.

use super::ReadMode;
use crate::item::ReadRange;
use crate::keys::{
    compare, cut_evenly, extend_prefix, successor, CutKinds, KeyRange, Lower, Upper,
};
use tablescan_storage::table::entity::Entity;
use tablescan_storage::table::query::Continuation;

/// Cuts a fresh range (no cursor) whose keys share `prefix` and which starts at `prefix + c`
/// into up to `pieces` ranges at `prefix + d` for evenly chosen cut points `d` above `c`. The
/// remainder of a range is usually most of it (the published scanner walked it one next
/// character per step); cutting it lets the pieces be read side by side at once.
pub(super) fn subdivide(task: ReadRange, pieces: usize, kinds: CutKinds) -> Vec<ReadRange> {
    let (range, prefix) = match &task {
        ReadRange::Range {
            partition_keys,
            prefix,
            cursor: None,
            ..
        } => (partition_keys.clone(), prefix.clone()),
        ReadRange::Partition {
            row_keys,
            prefix,
            cursor: None,
            unstarted: false,
            ..
        } => (row_keys.clone(), prefix.clone()),
        _ => return vec![task],
    };
    let Lower::Included(low) = &range.lower else {
        return vec![task];
    };
    let Some(first) = low
        .strip_prefix(prefix.as_str())
        .and_then(|rest| rest.chars().next())
    else {
        return vec![task];
    };
    // When none of the kinds seen is left in the rest (a step that read digits, handing on
    // what follows `9`), the rest goes on whole, and the step that reads it cuts it among the
    // kinds it finds there. Cutting it among every kind instead costs queries for the pieces that
    // turn out empty: 122 queries against 115 for the benchmark's count (e2e_bench --only count).
    let candidates: Vec<String> = kinds
        .candidates()
        .filter(|c| compare(&c.to_string(), &first.to_string()) == std::cmp::Ordering::Greater)
        .map(|c| format!("{prefix}{c}"))
        .filter(|key| range.below_upper(key))
        .collect();
    let Some(ranges) = cut_evenly(&range, &candidates, pieces) else {
        return vec![task];
    };
    ranges
        .into_iter()
        .map(|keys| match &task {
            ReadRange::Range { .. } => ReadRange::Range {
                partition_keys: keys,
                prefix: prefix.clone(),
                cursor: None,
                last_partition: None,
            },
            ReadRange::Partition { partition_key, .. } => ReadRange::Partition {
                partition_key: partition_key.clone(),
                row_keys: keys,
                prefix: prefix.clone(),
                cursor: None,
                unstarted: false,
            },
        })
        .collect()
}

/// The kinds of character that follow the prefix of `rest` in the keys of `rows` (the page
/// just read): PartitionKeys for a range, RowKeys for a partition. A partition-keys scan cuts
/// among every kind, as before: each fresh piece it reads starts with small probing queries
/// (`scan::seek`), so the more even pieces of narrowed cuts cost it more queries than they
/// save (narrowed, the model's table of one-row partitions with hexadecimal keys broke the
/// bound of 1.3 times the queries of paging in tests/scan_model.rs,
/// `partition_keys_seek_through_large_partitions_and_page_through_small_ones`).
pub(super) fn seen_kinds(rest: &ReadRange, rows: &[Entity], mode: ReadMode) -> CutKinds {
    if mode == ReadMode::PartitionKeys {
        return CutKinds::default();
    }
    match rest {
        ReadRange::Range { prefix, .. } => {
            CutKinds::after_prefix(prefix, rows.iter().map(|e| e.partition_key.as_str()))
        }
        ReadRange::Partition { prefix, .. } => {
            CutKinds::after_prefix(prefix, rows.iter().map(|e| e.row_key.as_str()))
        }
    }
}

/// Whether every row of a full page lies under the same child prefix of the task's prefix.
pub(super) fn within_one_child(task: &ReadRange, rows: &[Entity]) -> bool {
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return false;
    };
    let (prefix, a, b) = match task {
        ReadRange::Range { prefix, .. } => (prefix, &first.partition_key, &last.partition_key),
        ReadRange::Partition { prefix, .. } => (prefix, &first.row_key, &last.row_key),
    };
    match (extend_prefix(prefix, a), extend_prefix(prefix, b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

pub(super) fn with_cursor(
    task: ReadRange,
    token: Continuation,
    last_partition: Option<String>,
) -> ReadRange {
    match task {
        ReadRange::Range {
            partition_keys,
            prefix,
            ..
        } => ReadRange::Range {
            partition_keys,
            prefix,
            cursor: Some(token),
            last_partition,
        },
        ReadRange::Partition {
            partition_key,
            row_keys,
            prefix,
            ..
        } => ReadRange::Partition {
            // Started if a row of it was delivered (then it is the last row delivered).
            unstarted: last_partition.as_deref() != Some(partition_key.as_str()),
            partition_key,
            row_keys,
            prefix,
            cursor: Some(token),
        },
    }
}

/// Cuts what remains of `task` at the position of `token`, after an empty page: the rest of
/// the position's partition from its RowKey on, emitted, and (for a range) the prefix of the
/// position's PartitionKey, emitted, and what follows it, returned (inside `Some`). `None` when
/// the position cannot be used (the partition-keys mode, a token that is not a position in
/// the task's keys, a partition not started yet, which is never split): the caller goes on
/// with the cursor.
pub(super) fn split_at_position(
    task: &ReadRange,
    token: &Continuation,
    previous_partition: Option<&str>,
    mode: ReadMode,
    emit: &mut dyn FnMut(ReadRange),
) -> Option<Option<ReadRange>> {
    if mode != ReadMode::Rows {
        return None;
    }
    let partition_key = token.next_partition_key.as_str();
    let row_key = token.next_row_key.as_deref()?;
    if !position_gains(task, partition_key, row_key) {
        return None;
    }
    let started = previous_partition == Some(partition_key);
    match task {
        ReadRange::Range {
            partition_keys,
            prefix,
            ..
        } => split_range_at(
            partition_keys,
            prefix,
            partition_key,
            row_key,
            started,
            emit,
        ),
        ReadRange::Partition {
            partition_key: own,
            row_keys,
            prefix,
            ..
        } => {
            if own != partition_key || !started {
                return None;
            }
            split_partition_at(own, row_keys, prefix, row_key, emit)
        }
    }
}

/// Whether cutting `task` at position (`partition_key`, `row_key`) gains anything. A position
/// not beyond where the task already stood (its cursor) would read rows again, or cut where
/// nothing was gained; nor is the very start of a task without a cursor any use: nothing was
/// looked at.
fn position_gains(task: &ReadRange, partition_key: &str, row_key: &str) -> bool {
    let (cursor, at_start) = match task {
        ReadRange::Range {
            cursor,
            partition_keys,
            ..
        } => (
            cursor.as_ref(),
            row_key.is_empty()
                && partition_keys.lower == Lower::Included(partition_key.to_string()),
        ),
        ReadRange::Partition {
            cursor, row_keys, ..
        } => (
            cursor.as_ref(),
            row_keys.lower == Lower::Included(row_key.to_string()),
        ),
    };
    match cursor {
        Some(cursor) => match compare(partition_key, &cursor.next_partition_key) {
            std::cmp::Ordering::Less => false,
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Equal => {
                compare(row_key, cursor.next_row_key.as_deref().unwrap_or("")).is_gt()
            }
        },
        None => !at_start,
    }
}

/// [`split_at_position`] for a range of PartitionKeys: the rest of the position's partition
/// from its RowKey on, emitted (`started`: a row of it was delivered), and the range past that
/// partition cut at prefixes, the pieces emitted and the rest returned (inside `Some`). `None`
/// when the position lies outside the range.
fn split_range_at(
    partition_keys: &KeyRange,
    prefix: &str,
    partition_key: &str,
    row_key: &str,
    started: bool,
    emit: &mut dyn FnMut(ReadRange),
) -> Option<Option<ReadRange>> {
    if !partition_keys.contains(partition_key) {
        return None;
    }
    emit(ReadRange::Partition {
        partition_key: partition_key.to_string(),
        row_keys: KeyRange {
            lower: Lower::Included(row_key.to_string()),
            upper: Upper::Unbounded,
        },
        prefix: String::new(),
        cursor: None,
        unstarted: !started,
    });
    let rest = KeyRange {
        lower: Lower::Excluded(partition_key.to_string()),
        upper: partition_keys.upper.clone(),
    };
    Some(split_range(&rest, prefix, partition_key, emit))
}

/// [`split_at_position`] within partition `own`, already started: the RowKeys from `row_key`
/// on under the child prefix `row_key` extends `prefix` to, emitted, and the rest returned
/// (inside `Some`). `None` when the position lies outside `row_keys` or extends no prefix.
fn split_partition_at(
    own: &str,
    row_keys: &KeyRange,
    prefix: &str,
    row_key: &str,
    emit: &mut dyn FnMut(ReadRange),
) -> Option<Option<ReadRange>> {
    if !row_keys.contains(row_key) {
        return None;
    }
    let child_prefix = extend_prefix(prefix, row_key)?;
    let rest = KeyRange {
        lower: Lower::Included(row_key.to_string()),
        upper: row_keys.upper.clone(),
    };
    let (child, parent) = cut_at_prefix(&rest, &child_prefix);
    emit(ReadRange::Partition {
        partition_key: own.to_string(),
        row_keys: child,
        prefix: child_prefix,
        cursor: None,
        unstarted: false,
    });
    Some(parent.map(|row_keys| ReadRange::Partition {
        partition_key: own.to_string(),
        row_keys,
        prefix: prefix.to_string(),
        cursor: None,
        unstarted: false,
    }))
}

/// What remains of `task` after a page that ended on row (`pk`, `rk`) with a continuation.
/// Split-off pieces go to `emit`; the returned task is what this step would read next.
pub(super) fn advance(
    task: ReadRange,
    token: Continuation,
    pk: &str,
    rk: &str,
    mode: ReadMode,
    split: bool,
    emit: &mut dyn FnMut(ReadRange),
) -> Option<ReadRange> {
    match (task, mode) {
        (
            ReadRange::Range {
                partition_keys,
                prefix,
                ..
            },
            ReadMode::PartitionKeys,
        ) => {
            // Skip the rest of partition `pk`: its key is known, which is all this mode wants.
            let rest = KeyRange {
                lower: Lower::Excluded(pk.to_string()),
                upper: partition_keys.upper.clone(),
            };
            if split {
                split_range(&rest, &prefix, pk, emit)
            } else {
                non_empty_range(rest, prefix)
            }
        }
        (
            ReadRange::Range {
                partition_keys,
                prefix,
                ..
            },
            ReadMode::Rows,
        ) => {
            if !split {
                return Some(ReadRange::Range {
                    partition_keys,
                    prefix,
                    cursor: Some(token),
                    last_partition: Some(pk.to_string()),
                });
            }
            emit(ReadRange::Partition {
                partition_key: pk.to_string(),
                row_keys: KeyRange::between(Some(rk), None),
                prefix: String::new(),
                cursor: None,
                unstarted: false,
            });
            let rest = KeyRange {
                lower: Lower::Excluded(pk.to_string()),
                upper: partition_keys.upper.clone(),
            };
            split_range(&rest, &prefix, pk, emit)
        }
        (
            ReadRange::Partition {
                partition_key,
                row_keys,
                prefix,
                ..
            },
            _,
        ) => advance_partition(partition_key, row_keys, prefix, token, rk, split, emit),
    }
}

/// What remains of a partition task (of `partition_key`, `row_keys`, `prefix`) after a page
/// that ended on RowKey `rk` with a continuation; split-off pieces go to `emit`.
fn advance_partition(
    partition_key: String,
    row_keys: KeyRange,
    prefix: String,
    token: Continuation,
    rk: &str,
    split: bool,
    emit: &mut dyn FnMut(ReadRange),
) -> Option<ReadRange> {
    let child_prefix = if split {
        extend_prefix(&prefix, rk)
    } else {
        None
    };
    let Some(child_prefix) = child_prefix else {
        return Some(ReadRange::Partition {
            partition_key,
            row_keys,
            prefix,
            cursor: Some(token),
            unstarted: false,
        });
    };
    let rest = KeyRange {
        lower: Lower::Excluded(rk.to_string()),
        upper: row_keys.upper.clone(),
    };
    let (child, parent) = cut_at_prefix(&rest, &child_prefix);
    emit(ReadRange::Partition {
        partition_key: partition_key.clone(),
        row_keys: child,
        prefix: child_prefix,
        cursor: None,
        unstarted: false,
    });
    parent.map(|row_keys| ReadRange::Partition {
        partition_key,
        row_keys,
        prefix,
        cursor: None,
        unstarted: false,
    })
}

/// Splits the PartitionKey range `rest` (which starts just after `last`, a key under `prefix`)
/// into the rest of `prefix + next char of last`, emitted, and what follows it, returned.
fn split_range(
    rest: &KeyRange,
    prefix: &str,
    last: &str,
    emit: &mut dyn FnMut(ReadRange),
) -> Option<ReadRange> {
    let Some(child_prefix) = extend_prefix(prefix, last) else {
        // `last` is the prefix itself: everything after it is still under `prefix`.
        return non_empty_range(rest.clone(), prefix.to_string());
    };
    let (child, parent) = cut_at_prefix(rest, &child_prefix);
    emit(ReadRange::Range {
        partition_keys: child,
        prefix: child_prefix,
        cursor: None,
        last_partition: None,
    });
    parent.and_then(|range| non_empty_range(range, prefix.to_string()))
}

/// Cuts `rest` at the successor of `child_prefix`: the part below it (every key there starts
/// with `child_prefix`) and, if any, the part from it on.
fn cut_at_prefix(rest: &KeyRange, child_prefix: &str) -> (KeyRange, Option<KeyRange>) {
    match successor(child_prefix) {
        Some(next) if rest.below_upper(&next) => (
            rest.capped(&Upper::Excluded(next.clone())),
            Some(KeyRange {
                lower: Lower::Included(next),
                upper: rest.upper.clone(),
            }),
        ),
        _ => (rest.clone(), None),
    }
}

fn non_empty_range(partition_keys: KeyRange, prefix: String) -> Option<ReadRange> {
    (!partition_keys.is_empty()).then_some(ReadRange::Range {
        partition_keys,
        prefix,
        cursor: None,
        last_partition: None,
    })
}
