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
//!
//! This file holds what a step is given and what it returns, and `run_step`; `chain` reads one
//! task page after page with the sink, `cut` decides where what is left is cut, and
//! `side_by_side` reads the rest of a partition-keys step as pieces at once.

mod chain;
mod cut;
mod pending;
mod side_by_side;

use super::budget::{Budget, Clock};
use super::item::WorkItem;
use super::keys::compare;
use super::reader::TableReader;
use chain::run_chain;
use side_by_side::read_side_by_side;
use std::time::Duration;
use tablescan_storage::table::entity::Entity;
use tablescan_storage::table::filter::Filter;
use tablescan_storage::table::query::MAX_PAGE_SIZE;
use tablescan_storage::StorageError;

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
    /// to this many pieces, cut at next characters of the kinds the step saw (see `subdivide`);
    /// 1 hands it on whole.
    pub fan_out: usize,
    /// Whether this step splits nothing off: no piece cut at a page's last key, none at the
    /// budget's end, no partition-keys range read as pieces side by side; what it does not read
    /// is handed on as one item (two when its action stops inside a page of a range: the rest
    /// of that page's partition, and the partitions after it). For a step of a scan that
    /// already has more items than its pace runs at once (the handler's `pacing::crowded`):
    /// more items would only wait, and a queue made longer by them brings the platform
    /// instances that split the same rate further.
    pub hand_on_whole: bool,
    /// Queries the first step of a prefix scan may make; each level of the work tree below may
    /// make twice as many as the level above, up to the budget's `max_queries`. A scan starts as
    /// one step, so the steps near the root decide how soon many steps can run side by side:
    /// short ones there spread the work in seconds, at the cost of a few more short queries.
    pub first_step_queries: u32,
    /// Only rows that satisfy this are read (the service applies it in every query).
    pub filter: Option<Filter>,
    /// Whether a step that splits after an empty page (a filter matching nothing for a while)
    /// cuts at the continuation's position; `false` keeps the cursor and hands the rest on whole
    /// (the engine before it could, kept to compare the two in the scan-efficiency benchmark).
    pub split_at_positions: bool,
    /// Whether a partition-keys scan sizes its queries to what the pages show, seeking from
    /// partition to partition where partitions are large, and reads a fresh range as a few
    /// pieces side by side (see `scan::seek`); `false` reads pages of `page_size` one after the
    /// other (the engine before, kept to compare the two in the scan-efficiency benchmark).
    pub seek_partitions: bool,
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
            hand_on_whole: false,
            first_step_queries: 4,
            filter: None,
            split_at_positions: true,
            seek_partitions: true,
        }
    }
}

impl ScanOptions {
    /// The query budget of a step `depth` levels below the first (see `first_step_queries`).
    pub fn max_queries_at(&self, depth: u32) -> u32 {
        let cap = self.budget.max_queries;
        if self.strategy == Strategy::Serial {
            return cap;
        }
        let ramp = u64::from(self.first_step_queries.max(1)) << depth.min(32);
        ramp.min(u64::from(cap)) as u32
    }
}

/// Receives the rows a step reads, page by page and in order. The step reads the next page
/// while the sink works on one, and waits for both; the sink's time counts against the budget.
pub trait RowSink {
    type Error;
    /// Acts on one page of rows and returns how many of them, from the first, it finished:
    /// all of them, unless `deadline` (on the step's clock) passes while it works. Then it
    /// starts nothing new, finishes what it started, and the step hands the rest on from the
    /// last finished row. It always finishes at least the first row, so every step progresses.
    fn accept(
        &mut self,
        rows: Vec<Entity>,
        deadline: Duration,
    ) -> impl std::future::Future<Output = Result<usize, Self::Error>> + Send;

    /// Whether the step should stop after the pages the sink has finished (a paused scan's
    /// step): it hands the rest of its range on, as a step whose time is up does. A sink stops
    /// a step at a page of many rows by finishing fewer of them; a page of one row (a
    /// partition-keys page, a sparse filter's) cannot be cut, so it says so here.
    fn stopping(&self) -> bool {
        false
    }
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
    /// A read failed with a transient error of any kind (throttling, a timeout, a connection
    /// reset, a 5xx, a token endpoint out of reach) after the step had made progress: the rest
    /// was handed on rather than the step failing and its pages being read again.
    Transient,
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
    S: RowSink + Send,
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
    let max_queries = options.max_queries_at(item.depth);
    let budget = max_queries.saturating_mul(u32::from(options.page_size));
    let reads_side_by_side = options.mode == ReadMode::PartitionKeys
        && options.seek_partitions
        && options.strategy == Strategy::Prefix
        && !options.hand_on_whole;
    // A partition-keys step reads alone until its pages show large partitions; then the rest of
    // its range is read as a few pieces side by side, seeking (see `scan::seek`).
    let first = run_chain(
        reader,
        item,
        item.task.clone(),
        options,
        budget,
        reads_side_by_side,
        clock,
        sink,
    )
    .await?;
    let Some(rest) = first.rest else {
        return Ok(first.report);
    };
    let mut total = first.report;
    if sink.stopping() {
        // The rest, unread, is handed on instead of read side by side.
        total.follow_ups.push(item.follow_up(rest));
        total.stopped = StopReason::TimeBudget;
        return Ok(total);
    }
    let left = budget.saturating_sub(first.spent);
    read_side_by_side(reader, item, &rest, options, left, clock, sink, total).await
}

/// Whether `a` sorts before `b` by (PartitionKey, RowKey) in the service's order.
pub fn row_order(a: &(String, String), b: &(String, String)) -> std::cmp::Ordering {
    compare(&a.0, &b.0).then_with(|| compare(&a.1, &b.1))
}

#[cfg(test)]
mod tests;
