//! One bounded step of a scan: read a work item's range until it ends or the budget runs out,
//! hand every page to the action, and return the follow-up work items that cover the rest.
//!
//! With the `prefix` strategy the step reads its range serially, following the service's
//! continuation, until the budget is spent; there it splits what is left by prefix discovery
//! instead of handing on one serial continuation. If the last page ended on row (L, r) inside a
//! range whose keys share prefix p, and p' is p extended by the next character of L:
//!
//! - the rest of partition L (RowKey after r) becomes a partition work item;
//! - the rest of p' (PartitionKey after L, below the successor of p') becomes a range item;
//! - the range continues from the successor of p'.
//!
//! The three are disjoint and cover exactly what was not read. A partition work item splits the
//! same way on RowKey, so one huge partition is read in parallel too. Splitting only at the
//! budget keeps queries close to the serial count: a split costs about two extra, short queries,
//! and happens once per step of up to `max_queries` full pages.
//!
//! With [`SplitPolicy::EveryPage`] the step splits after every page and keeps going, as the
//! published implementation did; it discovers prefixes fastest and issues the most queries.

use super::budget::{Budget, Clock};
use super::item::{Task, WorkItem};
use super::keys::{compare, extend_prefix, successor, KeyRange, Lower, Upper};
use super::reader::{PageRequest, ReadScope, TableReader};
use crate::storage::table::entity::Entity;
use crate::storage::table::query::{Continuation, Page, MAX_PAGE_SIZE};
use crate::storage::StorageError;

/// How a scan cuts its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Prefix discovery: the range splits into independent pieces as it is read.
    #[default]
    Prefix,
    /// The baseline: one serial page-through, checkpointed from step to step.
    Serial,
}

/// What a scan reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadMode {
    /// Every row.
    #[default]
    Rows,
    /// One row per distinct PartitionKey; the rest of each partition is skipped.
    PartitionKeys,
}

/// When the prefix strategy splits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SplitPolicy {
    /// When the step's budget is spent (the default: queries stay near the serial count).
    #[default]
    AtBudget,
    /// After every page that has a continuation (the published behaviour).
    EveryPage,
    /// When the budget is spent, and also after any page whose rows all lie under one child
    /// prefix (the range's prefix plus one character): that child holds at least a page of
    /// data, so reading it in parallel is worth the split's two extra queries, while pages
    /// that span several small children keep being read serially.
    Dense,
}

/// Everything a step needs to know about its scan.
#[derive(Debug, Clone)]
pub struct ScanOptions {
    pub strategy: Strategy,
    pub mode: ReadMode,
    pub split: SplitPolicy,
    /// Rows per query, 1 to 1000.
    pub page_size: u16,
    /// Properties to read besides the keys; `None` for all.
    pub columns: Option<Vec<String>>,
    pub budget: Budget,
    /// When a step splits at the end of its budget, the rest of its range is handed on in up
    /// to this many pieces, cut at fixed next characters (see `subdivide`); 1 hands it on whole.
    pub fan_out: usize,
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            strategy: Strategy::Prefix,
            mode: ReadMode::Rows,
            split: SplitPolicy::AtBudget,
            page_size: MAX_PAGE_SIZE,
            columns: None,
            budget: Budget::default(),
            fan_out: 4,
        }
    }
}

/// Receives the rows a step reads, page by page. Its time counts against the step's budget.
pub trait RowSink {
    type Error;
    fn accept(
        &mut self,
        rows: Vec<Entity>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send;
}

/// What one step did.
#[derive(Debug, Clone, PartialEq)]
pub struct StepReport {
    /// Rows returned by the service (in partition-keys mode, more than were passed on).
    pub rows_read: u64,
    /// Rows passed to the sink.
    pub rows_delivered: u64,
    pub queries: u32,
    /// Partitions whose first row this step read: summed over a scan, the exact number of
    /// distinct PartitionKeys in its scope.
    pub partitions_started: u64,
    /// Work items that together cover exactly what this step did not read.
    pub follow_ups: Vec<WorkItem>,
    pub stopped: StopReason,
}

/// Why a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// Its range is fully read (its follow-ups, if any, came from splits).
    Finished,
    /// It spent its query budget.
    QueryBudget,
    /// It spent its time budget.
    TimeBudget,
    /// A read failed transiently (throttling, a timeout) after the step had made progress: the
    /// rest was handed on rather than the step failing and its pages being read again.
    Throttled,
}

/// Why a step failed. Nothing it produced should be kept: running it again is safe.
#[derive(Debug, thiserror::Error)]
pub enum StepError<E: std::fmt::Display> {
    #[error("reading the table failed: {0}")]
    Read(#[from] StorageError),
    #[error("the action failed: {0}")]
    Action(E),
    #[error("the scan options are invalid: {0}")]
    Options(String),
}

/// Runs one step of `item`.
pub async fn run_step<R, S, C>(
    reader: &R,
    item: &WorkItem,
    options: &ScanOptions,
    clock: &C,
    sink: &mut S,
) -> Result<StepReport, StepError<S::Error>>
where
    R: TableReader,
    S: RowSink,
    S::Error: std::fmt::Display,
    C: Clock,
{
    if !(1..=MAX_PAGE_SIZE).contains(&options.page_size) {
        return Err(StepError::Options(format!(
            "the page size must be 1 to {MAX_PAGE_SIZE}"
        )));
    }
    if options.budget.max_queries == 0 {
        return Err(StepError::Options(
            "the query budget must be at least 1".into(),
        ));
    }
    let started = clock.now();
    let mut report = StepReport {
        rows_read: 0,
        rows_delivered: 0,
        queries: 0,
        partitions_started: 0,
        follow_ups: Vec::new(),
        stopped: StopReason::Finished,
    };
    let mut current = Some(item.task.clone());
    let columns = columns_for(options);
    // The PartitionKey of the row read just before the next one, when known.
    let mut previous_partition = match &item.task {
        Task::Range { last_partition, .. } => last_partition.clone(),
        Task::Partition { partition_key, .. } => Some(partition_key.clone()),
    };

    while let Some(task) = current.take() {
        let page = match read(reader, &task, options, columns.as_deref()).await {
            Ok(page) => page,
            Err(e) if e.is_transient() && report.queries > 0 => {
                // The queue is the back-off: whoever takes the rest tries again later.
                report.queries += 1;
                report.stopped = StopReason::Throttled;
                report.follow_ups.push(item.follow_up(task));
                break;
            }
            Err(e) => return Err(e.into()),
        };
        report.queries += 1;
        report.rows_read += page.entities.len() as u64;
        for row in &page.entities {
            if previous_partition.as_deref() != Some(row.partition_key.as_str()) {
                report.partitions_started += 1;
                previous_partition = Some(row.partition_key.clone());
            }
        }
        let last_keys = page
            .entities
            .last()
            .map(|e| (e.partition_key.clone(), e.row_key.clone()));
        let dense = options.split == SplitPolicy::Dense && within_one_child(&task, &page.entities);
        let rows = match options.mode {
            ReadMode::Rows => page.entities,
            ReadMode::PartitionKeys => distinct_partitions(page.entities),
        };
        report.rows_delivered += rows.len() as u64;
        if !rows.is_empty() {
            sink.accept(rows).await.map_err(StepError::Action)?;
        }

        let Some(token) = page.continuation else {
            break;
        };
        let elapsed = clock.now().saturating_sub(started);
        let spent = if report.queries >= options.budget.max_queries {
            Some(StopReason::QueryBudget)
        } else if elapsed >= options.budget.max_duration {
            Some(StopReason::TimeBudget)
        } else {
            None
        };
        let wants_split = options.strategy == Strategy::Prefix
            && (spent.is_some() || options.split == SplitPolicy::EveryPage || dense);

        let next = match last_keys {
            // An empty page with a continuation: only the token knows where to go on.
            None => Some(with_cursor(task, token, previous_partition.clone())),
            Some((pk, rk)) => advance(task, token, &pk, &rk, options.mode, wants_split, &mut |t| {
                report.follow_ups.push(item.follow_up(t));
            }),
        };
        if let Some(reason) = spent {
            report.stopped = reason;
            if let Some(rest) = next {
                for piece in subdivide(rest, options.fan_out) {
                    report.follow_ups.push(item.follow_up(piece));
                }
            }
            break;
        }
        current = next;
    }
    Ok(report)
}

/// Characters at which a range's remainder may be cut: digits and ASCII letters, the usual
/// material of keys. Pieces that turn out empty cost one query each.
const CUT_POINTS: &str = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Cuts a fresh range (no cursor) whose keys share `prefix` and which starts at `prefix + c`
/// into up to `pieces` ranges at `prefix + d` for evenly chosen cut points `d` above `c`. The
/// remainder of a range is usually most of it (the published scanner walked it one next
/// character per step); cutting it lets the pieces be read side by side at once.
fn subdivide(task: Task, pieces: usize) -> Vec<Task> {
    let (range, prefix) = match &task {
        Task::Range {
            partition_keys,
            prefix,
            cursor: None,
            ..
        } => (partition_keys.clone(), prefix.clone()),
        Task::Partition {
            row_keys,
            prefix,
            cursor: None,
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
    let candidates: Vec<String> = CUT_POINTS
        .chars()
        .filter(|c| compare(&c.to_string(), &first.to_string()) == std::cmp::Ordering::Greater)
        .map(|c| format!("{prefix}{c}"))
        .filter(|key| range.below_upper(key))
        .collect();
    let cuts = pieces.saturating_sub(1).min(candidates.len());
    if cuts == 0 {
        return vec![task];
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
    lowers
        .into_iter()
        .zip(uppers)
        .map(|(lower, upper)| {
            let keys = KeyRange { lower, upper };
            match &task {
                Task::Range { .. } => Task::Range {
                    partition_keys: keys,
                    prefix: prefix.clone(),
                    cursor: None,
                    last_partition: None,
                },
                Task::Partition { partition_key, .. } => Task::Partition {
                    partition_key: partition_key.clone(),
                    row_keys: keys,
                    prefix: prefix.clone(),
                    cursor: None,
                },
            }
        })
        .collect()
}

/// Whether every row of a full page lies under the same child prefix of the task's prefix.
fn within_one_child(task: &Task, rows: &[Entity]) -> bool {
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return false;
    };
    let (prefix, a, b) = match task {
        Task::Range { prefix, .. } => (prefix, &first.partition_key, &last.partition_key),
        Task::Partition { prefix, .. } => (prefix, &first.row_key, &last.row_key),
    };
    match (extend_prefix(prefix, a), extend_prefix(prefix, b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// The page request for a task.
async fn read<R: TableReader>(
    reader: &R,
    task: &Task,
    options: &ScanOptions,
    columns: Option<&[String]>,
) -> Result<Page, StorageError> {
    let (scope, cursor) = match task {
        Task::Range {
            partition_keys,
            cursor,
            ..
        } => (ReadScope::Range(partition_keys), cursor.as_ref()),
        Task::Partition {
            partition_key,
            row_keys,
            cursor,
            ..
        } => (
            ReadScope::Partition {
                partition_key,
                row_keys,
            },
            cursor.as_ref(),
        ),
    };
    let request = PageRequest {
        scope,
        top: options.page_size,
        columns,
        cursor,
    };
    reader.read_page(&request).await
}

fn columns_for(options: &ScanOptions) -> Option<Vec<String>> {
    match options.mode {
        // Keys only: the point is to learn the partition keys, not to move the rows.
        ReadMode::PartitionKeys => Some(Vec::new()),
        ReadMode::Rows => options.columns.clone(),
    }
}

/// The first row of each PartitionKey, in order.
fn distinct_partitions(rows: Vec<Entity>) -> Vec<Entity> {
    let mut distinct: Vec<Entity> = Vec::new();
    for row in rows {
        if distinct
            .last()
            .is_none_or(|d| d.partition_key != row.partition_key)
        {
            distinct.push(row);
        }
    }
    distinct
}

fn with_cursor(task: Task, token: Continuation, last_partition: Option<String>) -> Task {
    match task {
        Task::Range {
            partition_keys,
            prefix,
            ..
        } => Task::Range {
            partition_keys,
            prefix,
            cursor: Some(token),
            last_partition,
        },
        Task::Partition {
            partition_key,
            row_keys,
            prefix,
            ..
        } => Task::Partition {
            partition_key,
            row_keys,
            prefix,
            cursor: Some(token),
        },
    }
}

/// What remains of `task` after a page that ended on row (`pk`, `rk`) with a continuation.
/// Split-off pieces go to `emit`; the returned task is what this step would read next.
fn advance(
    task: Task,
    token: Continuation,
    pk: &str,
    rk: &str,
    mode: ReadMode,
    split: bool,
    emit: &mut dyn FnMut(Task),
) -> Option<Task> {
    match (task, mode) {
        (
            Task::Range {
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
            Task::Range {
                partition_keys,
                prefix,
                ..
            },
            ReadMode::Rows,
        ) => {
            if !split {
                return Some(Task::Range {
                    partition_keys,
                    prefix,
                    cursor: Some(token),
                    last_partition: Some(pk.to_string()),
                });
            }
            emit(Task::Partition {
                partition_key: pk.to_string(),
                row_keys: KeyRange::between(Some(rk), None),
                prefix: String::new(),
                cursor: None,
            });
            let rest = KeyRange {
                lower: Lower::Excluded(pk.to_string()),
                upper: partition_keys.upper.clone(),
            };
            split_range(&rest, &prefix, pk, emit)
        }
        (
            Task::Partition {
                partition_key,
                row_keys,
                prefix,
                ..
            },
            _,
        ) => {
            let child_prefix = if split {
                extend_prefix(&prefix, rk)
            } else {
                None
            };
            let Some(child_prefix) = child_prefix else {
                return Some(Task::Partition {
                    partition_key,
                    row_keys,
                    prefix,
                    cursor: Some(token),
                });
            };
            let rest = KeyRange {
                lower: Lower::Excluded(rk.to_string()),
                upper: row_keys.upper.clone(),
            };
            let (child, parent) = cut_at_prefix(&rest, &child_prefix);
            emit(Task::Partition {
                partition_key: partition_key.clone(),
                row_keys: child,
                prefix: child_prefix,
                cursor: None,
            });
            parent.map(|row_keys| Task::Partition {
                partition_key,
                row_keys,
                prefix,
                cursor: None,
            })
        }
    }
}

/// Splits the PartitionKey range `rest` (which starts just after `last`, a key under `prefix`)
/// into the rest of `prefix + next char of last`, emitted, and what follows it, returned.
fn split_range(
    rest: &KeyRange,
    prefix: &str,
    last: &str,
    emit: &mut dyn FnMut(Task),
) -> Option<Task> {
    let Some(child_prefix) = extend_prefix(prefix, last) else {
        // `last` is the prefix itself: everything after it is still under `prefix`.
        return non_empty_range(rest.clone(), prefix.to_string());
    };
    let (child, parent) = cut_at_prefix(rest, &child_prefix);
    emit(Task::Range {
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

fn non_empty_range(partition_keys: KeyRange, prefix: String) -> Option<Task> {
    (!partition_keys.is_empty()).then_some(Task::Range {
        partition_keys,
        prefix,
        cursor: None,
        last_partition: None,
    })
}

/// Whether `a` sorts before `b` by (PartitionKey, RowKey) in the service's order.
pub fn row_order(a: &(String, String), b: &(String, String)) -> std::cmp::Ordering {
    compare(&a.0, &b.0).then_with(|| compare(&a.1, &b.1))
}
