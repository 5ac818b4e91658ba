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
use super::keys::{
    compare, cut_evenly, extend_prefix, successor, CutKinds, KeyRange, Lower, Upper,
};
use super::pending::PendingPage;
use super::reader::{PageRequest, ReadScope, TableReader};
use super::seek::{chain_pieces, query_cost, KeysPace, CHAINS};
use crate::storage::table::entity::Entity;
use crate::storage::table::filter::Filter;
use crate::storage::table::query::{Continuation, Page, MAX_PAGE_SIZE};
use crate::storage::StorageError;
use std::time::Duration;

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
    if item.task.is_import() {
        return Err(StepError::Options(
            "the work item reads an export's blobs, not a table".into(),
        ));
    }
    let max_queries = options.max_queries_at(item.depth);
    let budget = max_queries.saturating_mul(u32::from(options.page_size));
    let fans_out = options.mode == ReadMode::PartitionKeys
        && options.seek_partitions
        && options.strategy == Strategy::Prefix;
    // A partition-keys step reads alone until its pages show large partitions; then the rest of
    // its range is read as a few pieces side by side, seeking (see `scan::seek`).
    let first = run_chain(
        reader,
        item,
        item.task.clone(),
        options,
        budget,
        fans_out,
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
    let pieces = chain_pieces(&rest, CHAINS);
    let share = left.div_ceil(pieces.len() as u32).max(1);
    let shared = tokio::sync::Mutex::new(sink);
    let chains: Vec<_> = pieces
        .iter()
        .cloned()
        .map(|piece| {
            let shared = &shared;
            async move {
                let mut sink = ChainSink {
                    shared,
                    stopping: false,
                };
                run_chain(reader, item, piece, options, share, false, clock, &mut sink).await
            }
        })
        .collect();
    for (chain, piece) in join_all(chains).await.into_iter().zip(pieces.iter()) {
        let report = match chain {
            Ok(chain) => chain.report,
            // A piece whose first read was refused for a while: handed on untouched (the queue
            // is the back-off; the step has made progress, as a lone step that hands its rest
            // on after a refused read).
            Err(StepError::Read(e)) if e.is_transient() => {
                total.queries += 1;
                total.follow_ups.push(item.follow_up(piece.clone()));
                total.stopped = StopReason::Throttled;
                continue;
            }
            Err(e) => return Err(e),
        };
        total.rows_read += report.rows_read;
        total.rows_delivered += report.rows_delivered;
        total.queries += report.queries;
        total.partitions_started += report.partitions_started;
        total.follow_ups.extend(report.follow_ups);
        if total.stopped == StopReason::Finished {
            total.stopped = report.stopped;
        }
    }
    Ok(total)
}

/// How a chain of reads ended.
struct ChainEnd {
    report: StepReport,
    /// Budget spent, in rows (see [`query_cost`]).
    spent: u32,
    /// With `fan_out`: the rest of the range, unread and fresh, left for pieces read side by
    /// side once the pages showed large partitions.
    rest: Option<Task>,
}

/// A sink shared by the chains of one step, one page at a time.
struct ChainSink<'a, 'b, S> {
    shared: &'a tokio::sync::Mutex<&'b mut S>,
    /// What the shared sink said after this chain's last page.
    stopping: bool,
}

impl<S> RowSink for ChainSink<'_, '_, S>
where
    S: RowSink + Send,
{
    type Error = S::Error;

    async fn accept(&mut self, rows: Vec<Entity>, deadline: Duration) -> Result<usize, S::Error> {
        let mut sink = self.shared.lock().await;
        let finished = sink.accept(rows, deadline).await;
        self.stopping = sink.stopping();
        finished
    }

    fn stopping(&self) -> bool {
        self.stopping
    }
}

/// Runs the futures side by side; their outputs in order.
async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *output = Some(value),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// Reads `task` (the item's range, or a piece of it) until it ends or `budget_rows` of the
/// budget are spent (a page costs `page_size`, a seek a fraction of it: `scan::seek`). With
/// `fan_out`, stops as soon as a partition-keys scan starts seeking and leaves the rest of the
/// range in [`ChainEnd::rest`].
#[allow(clippy::too_many_arguments)]
async fn run_chain<R, S, C>(
    reader: &R,
    item: &WorkItem,
    task: Task,
    options: &ScanOptions,
    budget_rows: u32,
    fan_out: bool,
    clock: &C,
    sink: &mut S,
) -> Result<ChainEnd, StepError<S::Error>>
where
    R: TableReader,
    S: RowSink,
    S::Error: std::fmt::Display,
    C: Clock,
{
    let seeking = options.mode == ReadMode::PartitionKeys && options.seek_partitions;
    let mut keys_pace = KeysPace::new(options.page_size);
    let mut spent_rows = 0u32;
    let mut rest = None;
    let started = clock.now();
    let mut report = StepReport {
        rows_read: 0,
        rows_delivered: 0,
        queries: 0,
        partitions_started: 0,
        follow_ups: Vec::new(),
        stopped: StopReason::Finished,
    };
    let mut current = Some(task.clone());
    let columns = columns_for(options);
    // The PartitionKey of the row read just before the next one, when known.
    let mut previous_partition = match &task {
        Task::Range { last_partition, .. } => last_partition.clone(),
        Task::Partition {
            partition_key,
            unstarted,
            ..
        } => (!unstarted).then(|| partition_key.clone()),
        Task::ExportPart { .. } | Task::ExportBlob { .. } => None,
    };

    // The action works on one page while the next is being read, so a copy step takes about as
    // long as its reads or its writes, whichever is slower, rather than their sum. Nothing of a
    // page counts until the action is done with it (see `PendingPage`).
    let deadline = started + options.budget.action_deadline();
    let mut pending: Option<(PendingPage, Vec<Entity>)> = None;

    while let Some(task) = current.take() {
        let (waiting, rows) = match pending.take() {
            Some((page, rows)) => (Some(page), Some(rows)),
            None => (None, None),
        };
        let top = if seeking {
            keys_pace.top()
        } else {
            options.page_size
        };
        let (page, accepted) = tokio::join!(
            read(reader, &task, options, top, columns.as_deref()),
            accept(sink, rows, deadline)
        );
        report.queries += 1;
        spent_rows = spent_rows.saturating_add(query_cost(top, options.page_size));
        if let Some(waiting) = waiting {
            let finished = accepted.map_err(StepError::Action)?;
            if settle(&mut report, item, waiting, finished, options.mode) {
                // The action ran out of time inside the page: the rest of it, and the page
                // just read, are handed on from the last finished row.
                report.stopped = StopReason::TimeBudget;
                break;
            }
            if sink.stopping() {
                // The sink finished the page whole and stops (its scan is paused): the page
                // just read is not acted on, its task is handed on as it was.
                report.stopped = StopReason::TimeBudget;
                report.follow_ups.push(item.follow_up(task));
                break;
            }
        }
        let page = match page {
            Ok(page) => page,
            Err(e) if e.is_transient() && report.queries > 1 => {
                // The queue is the back-off: whoever takes the rest tries again later.
                report.stopped = StopReason::Throttled;
                report.follow_ups.push(item.follow_up(task));
                break;
            }
            Err(e) => return Err(e.into()),
        };
        let last_keys = page
            .entities
            .last()
            .map(|e| (e.partition_key.clone(), e.row_key.clone()));
        let dense = options.split == SplitPolicy::Dense && within_one_child(&task, &page.entities);
        let mut waiting = PendingPage::new(
            task.clone(),
            &page.entities,
            previous_partition.as_deref(),
            options.mode,
        );
        let returned = page.entities.len();
        let rows = match options.mode {
            ReadMode::Rows => page.entities,
            ReadMode::PartitionKeys => distinct_partitions(page.entities),
        };
        if seeking {
            keys_pace.observe(top, returned, rows.len());
        }
        if let Some((pk, _)) = &last_keys {
            previous_partition = Some(pk.clone());
        }

        let Some(token) = page.continuation else {
            pending = hand_to_sink(&mut report, item, waiting, rows, options.mode);
            break;
        };
        let elapsed = clock.now().saturating_sub(started);
        let spent = if spent_rows >= budget_rows {
            Some(StopReason::QueryBudget)
        } else if elapsed >= options.budget.max_duration {
            Some(StopReason::TimeBudget)
        } else {
            None
        };
        let wants_split = options.strategy == Strategy::Prefix
            && (spent.is_some() || options.split == SplitPolicy::EveryPage || dense);

        let next = match last_keys {
            // An empty page with a continuation (a filtered scan where no row matches for a
            // while): the token's position is where the service stopped looking, so everything
            // before it is done. A step that splits cuts the rest there, as after a row.
            None if wants_split && options.split_at_positions => {
                let mut emitted = Vec::new();
                match split_at_position(
                    &task,
                    &token,
                    previous_partition.as_deref(),
                    options.mode,
                    &mut |t| emitted.push(t),
                ) {
                    Some(rest) => {
                        waiting.after.extend(emitted);
                        rest
                    }
                    None => Some(with_cursor(task, token, previous_partition.clone())),
                }
            }
            None => Some(with_cursor(task, token, previous_partition.clone())),
            Some((pk, rk)) => advance(task, token, &pk, &rk, options.mode, wants_split, &mut |t| {
                waiting.after.push(t);
            }),
        };
        if let Some(reason) = spent {
            report.stopped = reason;
            if let Some(rest) = next {
                let kinds = seen_kinds(&rest, &rows, options.mode);
                waiting
                    .after
                    .extend(subdivide(rest, options.fan_out, kinds));
            }
            pending = hand_to_sink(&mut report, item, waiting, rows, options.mode);
            break;
        }
        pending = hand_to_sink(&mut report, item, waiting, rows, options.mode);
        if fan_out && keys_pace.seeking() && matches!(next, Some(Task::Range { cursor: None, .. }))
        {
            rest = next;
            break;
        }
        current = next;
    }
    if let Some((waiting, rows)) = pending {
        let finished = accept(sink, Some(rows), deadline)
            .await
            .map_err(StepError::Action)?;
        if settle(&mut report, item, waiting, finished, options.mode) {
            report.stopped = StopReason::TimeBudget;
            // The page was cut short: its follow-ups cover everything after the cut, the rest
            // included.
            rest = None;
        }
    }
    Ok(ChainEnd {
        report,
        spent: spent_rows,
        rest,
    })
}

/// Keeps a page for the sink, or settles it at once when the sink has nothing to do with it.
fn hand_to_sink(
    report: &mut StepReport,
    item: &WorkItem,
    page: PendingPage,
    rows: Vec<Entity>,
    mode: ReadMode,
) -> Option<(PendingPage, Vec<Entity>)> {
    if rows.is_empty() {
        settle(report, item, page, 0, mode);
        None
    } else {
        Some((page, rows))
    }
}

/// Counts what the sink finished of `page` and adds the follow-ups that cover the rest;
/// returns whether the sink stopped inside the page.
fn settle(
    report: &mut StepReport,
    item: &WorkItem,
    page: PendingPage,
    finished: usize,
    mode: ReadMode,
) -> bool {
    let settled = page.settle(finished, mode);
    report.rows_read += settled.rows_read;
    report.rows_delivered += settled.rows_delivered;
    report.partitions_started += settled.partitions_started;
    for task in settled.follow_ups {
        report.follow_ups.push(item.follow_up(task));
    }
    settled.cut_short
}

/// Hands `rows`, if any, to the sink; returns how many it finished.
async fn accept<S: RowSink>(
    sink: &mut S,
    rows: Option<Vec<Entity>>,
    deadline: Duration,
) -> Result<usize, S::Error> {
    match rows {
        Some(rows) => sink.accept(rows, deadline).await,
        None => Ok(0),
    }
}

/// Cuts a fresh range (no cursor) whose keys share `prefix` and which starts at `prefix + c`
/// into up to `pieces` ranges at `prefix + d` for evenly chosen cut points `d` above `c`. The
/// remainder of a range is usually most of it (the published scanner walked it one next
/// character per step); cutting it lets the pieces be read side by side at once.
fn subdivide(task: Task, pieces: usize, kinds: CutKinds) -> Vec<Task> {
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
                unstarted: false,
            },
            // Never reached: `run_step` refuses an import's items.
            other @ (Task::ExportPart { .. } | Task::ExportBlob { .. }) => other.clone(),
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
fn seen_kinds(rest: &Task, rows: &[Entity], mode: ReadMode) -> CutKinds {
    if mode == ReadMode::PartitionKeys {
        return CutKinds::default();
    }
    match rest {
        Task::Range { prefix, .. } => {
            CutKinds::after_prefix(prefix, rows.iter().map(|e| e.partition_key.as_str()))
        }
        Task::Partition { prefix, .. } => {
            CutKinds::after_prefix(prefix, rows.iter().map(|e| e.row_key.as_str()))
        }
        Task::ExportPart { .. } | Task::ExportBlob { .. } => CutKinds::default(),
    }
}

/// Whether every row of a full page lies under the same child prefix of the task's prefix.
fn within_one_child(task: &Task, rows: &[Entity]) -> bool {
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return false;
    };
    let (prefix, a, b) = match task {
        Task::Range { prefix, .. } => (prefix, &first.partition_key, &last.partition_key),
        Task::Partition { prefix, .. } => (prefix, &first.row_key, &last.row_key),
        Task::ExportPart { .. } | Task::ExportBlob { .. } => return false,
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
    top: u16,
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
        Task::ExportPart { .. } | Task::ExportBlob { .. } => {
            return Err(StorageError::new(
                "query entities",
                "an export's blobs",
                crate::storage::ErrorKind::InvalidRequest(
                    "the work item reads an export's blobs, not a table".into(),
                ),
            ))
        }
    };
    let request = PageRequest {
        scope,
        top,
        columns,
        cursor,
        filter: options.filter.as_ref(),
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
            // Started if a row of it was delivered (then it is the last row delivered).
            unstarted: last_partition.as_deref() != Some(partition_key.as_str()),
            partition_key,
            row_keys,
            prefix,
            cursor: Some(token),
        },
        other @ (Task::ExportPart { .. } | Task::ExportBlob { .. }) => other,
    }
}

/// Cuts what remains of `task` at the position of `token`, after an empty page: the rest of
/// the position's partition from its RowKey on, emitted, and (for a range) the prefix of the
/// position's PartitionKey, emitted, and what follows it, returned (inside `Some`). `None` when
/// the position cannot be used (the partition-keys mode, a token that is not a position in
/// the task's keys, a partition not started yet, which is never split): the caller goes on
/// with the cursor.
fn split_at_position(
    task: &Task,
    token: &Continuation,
    previous_partition: Option<&str>,
    mode: ReadMode,
    emit: &mut dyn FnMut(Task),
) -> Option<Option<Task>> {
    if mode != ReadMode::Rows {
        return None;
    }
    let partition_key = token.next_partition_key.as_str();
    let row_key = token.next_row_key.as_deref()?;
    // A position not beyond where the task already stood would read rows again, or cut where
    // nothing was gained: it is not used.
    let cursor = match task {
        Task::Range { cursor, .. } | Task::Partition { cursor, .. } => cursor.as_ref(),
        Task::ExportPart { .. } | Task::ExportBlob { .. } => return None,
    };
    if let Some(cursor) = cursor {
        let ahead = match compare(partition_key, &cursor.next_partition_key) {
            std::cmp::Ordering::Less => false,
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Equal => {
                compare(row_key, cursor.next_row_key.as_deref().unwrap_or("")).is_gt()
            }
        };
        if !ahead {
            return None;
        }
    }
    // Nor is the very start of the task: nothing was looked at, cutting there gains nothing.
    let at_start = match task {
        Task::Range { partition_keys, .. } => {
            row_key.is_empty() && partition_keys.lower == Lower::Included(partition_key.to_string())
        }
        Task::Partition { row_keys, .. } => row_keys.lower == Lower::Included(row_key.to_string()),
        Task::ExportPart { .. } | Task::ExportBlob { .. } => return None,
    };
    if cursor.is_none() && at_start {
        return None;
    }
    let started = previous_partition == Some(partition_key);
    match task {
        Task::Range {
            partition_keys,
            prefix,
            ..
        } => {
            if !partition_keys.contains(partition_key) {
                return None;
            }
            emit(Task::Partition {
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
        Task::Partition {
            partition_key: own,
            row_keys,
            prefix,
            ..
        } => {
            if own != partition_key || !row_keys.contains(row_key) || !started {
                return None;
            }
            let child_prefix = extend_prefix(prefix, row_key)?;
            let rest = KeyRange {
                lower: Lower::Included(row_key.to_string()),
                upper: row_keys.upper.clone(),
            };
            let (child, parent) = cut_at_prefix(&rest, &child_prefix);
            emit(Task::Partition {
                partition_key: own.clone(),
                row_keys: child,
                prefix: child_prefix,
                cursor: None,
                unstarted: false,
            });
            Some(parent.map(|row_keys| Task::Partition {
                partition_key: own.clone(),
                row_keys,
                prefix: prefix.clone(),
                cursor: None,
                unstarted: false,
            }))
        }
        Task::ExportPart { .. } | Task::ExportBlob { .. } => None,
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
                unstarted: false,
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
                    unstarted: false,
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
                unstarted: false,
            });
            parent.map(|row_keys| Task::Partition {
                partition_key,
                row_keys,
                prefix,
                cursor: None,
                unstarted: false,
            })
        }
        (Task::ExportPart { .. } | Task::ExportBlob { .. }, _) => None,
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

#[cfg(test)]
#[path = "step_tests.rs"]
mod tests;
