//! A chain of reads: one task read page after page, the sink acting on each page while the
//! next is read, until the task ends, the budget is spent or the sink stops. A step is one
//! chain, or (a partition-keys step that starts seeking) a first chain and a few side by side
//! (`side_by_side`). Where a chain cuts what it leaves is decided in `cut`.

use super::cut::{
    advance, seen_kinds, split_at_position, subdivide, with_cursor, within_one_child,
};
use super::pending::PendingPage;
use super::{
    ReadMode, RowSink, ScanOptions, SplitPolicy, StepError, StepReport, StopReason, Strategy,
};
use crate::budget::Clock;
use crate::item::{ReadRange, WorkItem};
use crate::reader::{PageRequest, ReadScope, TableReader};
use crate::seek::{query_cost, KeysPace};
use std::time::Duration;
use tablescan_storage::table::entity::Entity;
use tablescan_storage::table::query::{Continuation, Page};
use tablescan_storage::StorageError;

/// How a chain of reads ended.
pub(super) struct ChainEnd {
    pub(super) report: StepReport,
    /// Budget spent, in rows (see [`query_cost`]).
    pub(super) spent: u32,
    /// With `reads_side_by_side`: the rest of the range, unread and fresh, left for pieces read
    /// side by side once the pages showed large partitions.
    pub(super) rest: Option<ReadRange>,
}

/// Reads `task` (the item's range, or a piece of it) until it ends or `budget_rows` of the
/// budget are spent (a page costs `page_size`, a seek a fraction of it: `scan::seek`). With
/// `reads_side_by_side`, stops as soon as a partition-keys scan starts seeking and leaves the
/// rest of the range in [`ChainEnd::rest`].
#[allow(clippy::too_many_arguments)]
pub(super) async fn run_chain<R, S, C>(
    reader: &R,
    item: &WorkItem,
    task: ReadRange,
    options: &ScanOptions,
    budget_rows: u32,
    reads_side_by_side: bool,
    clock: &C,
    sink: &mut S,
) -> Result<ChainEnd, StepError<S::Error>>
where
    R: TableReader,
    S: RowSink,
    S::Error: std::fmt::Display,
    C: Clock,
{
    let mut chain = Chain::new(reader, item, &task, options, budget_rows, clock);
    let mut current = Some(task);
    let mut rest = None;
    while let Some(task) = current.take() {
        match chain.step(sink, task).await? {
            Flow::Next(next) => {
                if reads_side_by_side
                    && chain.keys_pace.seeking()
                    && matches!(next, Some(ReadRange::Range { cursor: None, .. }))
                {
                    rest = next;
                    break;
                }
                current = next;
            }
            Flow::Stop => break,
        }
    }
    chain.finish(sink, rest).await
}

/// What a chain does after a page.
enum Flow {
    /// Reads on: the task that follows, if any is left.
    Next(Option<ReadRange>),
    /// Stops: what is left is in the follow-ups (or the page kept for the sink).
    Stop,
}

/// How the read of a page ended, with the sink's work on the page before it.
enum Read {
    Page(Page),
    /// The chain stops for `StopReason` and hands the task on whole, unread.
    HandOn(StopReason),
    /// The sink stopped inside the page before: its follow-ups cover everything after the cut.
    CutShort,
}

/// A page read and taken apart, waiting to be cut.
struct Taken {
    /// The keys of its last row, if it has any rows.
    last_keys: Option<(String, String)>,
    /// Whether its rows lie under one child prefix (see [`SplitPolicy::Dense`]).
    dense: bool,
    /// What the sink is to finish of it, and what follows it.
    waiting: PendingPage,
    /// The rows for the sink (in partition-keys mode, one per partition).
    rows: Vec<Entity>,
    continuation: Option<Continuation>,
}

/// The state of one chain between its pages.
struct Chain<'a, R, C> {
    reader: &'a R,
    item: &'a WorkItem,
    options: &'a ScanOptions,
    clock: &'a C,
    budget_rows: u32,
    /// Whether a partition-keys scan sizes its queries to what the pages show.
    seeking: bool,
    keys_pace: KeysPace,
    columns: Option<Vec<String>>,
    /// When the chain began, on the step's clock.
    started: Duration,
    /// When the sink's time is up, on the step's clock.
    deadline: Duration,
    spent_rows: u32,
    /// The PartitionKey of the row read just before the next one, when known.
    previous_partition: Option<String>,
    report: StepReport,
    /// The page the sink works on while the next is being read. The action works on one page
    /// while the next is being read, so a copy step takes about as long as its reads or its
    /// writes, whichever is slower, rather than their sum. Nothing of a page counts until the
    /// action is done with it (see `PendingPage`).
    pending: Option<(PendingPage, Vec<Entity>)>,
}

impl<'a, R, C> Chain<'a, R, C>
where
    R: TableReader,
    C: Clock,
{
    fn new(
        reader: &'a R,
        item: &'a WorkItem,
        task: &ReadRange,
        options: &'a ScanOptions,
        budget_rows: u32,
        clock: &'a C,
    ) -> Self {
        let started = clock.now();
        let previous_partition = match task {
            ReadRange::Range { last_partition, .. } => last_partition.clone(),
            ReadRange::Partition {
                partition_key,
                unstarted,
                ..
            } => (!unstarted).then(|| partition_key.clone()),
        };
        Chain {
            reader,
            item,
            options,
            clock,
            budget_rows,
            seeking: options.mode == ReadMode::PartitionKeys && options.seek_partitions,
            keys_pace: KeysPace::new(options.page_size),
            columns: columns_for(options),
            started,
            deadline: started + options.budget.action_deadline(),
            spent_rows: 0,
            previous_partition,
            report: StepReport {
                rows_read: 0,
                rows_delivered: 0,
                queries: 0,
                partitions_started: 0,
                follow_ups: Vec::new(),
                stopped: StopReason::Finished,
            },
            pending: None,
        }
    }

    /// Reads one page of `task` and decides what follows it.
    async fn step<S>(&mut self, sink: &mut S, task: ReadRange) -> Result<Flow, StepError<S::Error>>
    where
        S: RowSink,
        S::Error: std::fmt::Display,
    {
        let top = if self.seeking {
            self.keys_pace.top()
        } else {
            self.options.page_size
        };
        let page = match self.read_while_acting(sink, &task, top).await? {
            Read::Page(page) => page,
            Read::HandOn(reason) => {
                self.report.stopped = reason;
                self.report.follow_ups.push(self.item.follow_up(task));
                return Ok(Flow::Stop);
            }
            Read::CutShort => {
                self.report.stopped = StopReason::TimeBudget;
                return Ok(Flow::Stop);
            }
        };
        let Taken {
            last_keys,
            dense,
            mut waiting,
            rows,
            continuation,
        } = self.take_apart(&task, page, top);
        let Some(token) = continuation else {
            self.keep_for_sink(waiting, rows);
            return Ok(Flow::Stop);
        };
        let spent = self.budget_spent();
        let wants_split = self.options.strategy == Strategy::Prefix
            && !self.options.hand_on_whole
            && (spent.is_some() || self.options.split == SplitPolicy::EveryPage || dense);
        let next = self.rest_of(task, token, last_keys, wants_split, &mut waiting);
        if let Some(reason) = spent {
            self.report.stopped = reason;
            if let Some(rest) = next {
                let kinds = seen_kinds(&rest, &rows, self.options.mode);
                // A rows scan's rest here carries its cursor and goes on whole anyway; a
                // partition-keys rest is fresh and would be cut into `fan_out` pieces.
                let pieces = if self.options.hand_on_whole {
                    1
                } else {
                    self.options.fan_out
                };
                waiting.after.extend(subdivide(rest, pieces, kinds));
            }
            self.keep_for_sink(waiting, rows);
            return Ok(Flow::Stop);
        }
        self.keep_for_sink(waiting, rows);
        Ok(Flow::Next(next))
    }

    /// Reads the next page of `task` while the sink works on the page before it, and settles
    /// that page.
    async fn read_while_acting<S>(
        &mut self,
        sink: &mut S,
        task: &ReadRange,
        top: u16,
    ) -> Result<Read, StepError<S::Error>>
    where
        S: RowSink,
        S::Error: std::fmt::Display,
    {
        let (waiting, rows) = match self.pending.take() {
            Some((page, rows)) => (Some(page), Some(rows)),
            None => (None, None),
        };
        let cost = query_cost(top, self.options.page_size);
        let last = self.spent_rows.saturating_add(cost) >= self.budget_rows;
        let (page, accepted) = tokio::join!(
            read(
                self.reader,
                task,
                self.options,
                (top, last),
                self.columns.as_deref()
            ),
            accept(sink, rows, self.deadline)
        );
        self.report.queries += 1;
        self.spent_rows = self.spent_rows.saturating_add(cost);
        if let Some(waiting) = waiting {
            let finished = accepted.map_err(StepError::Action)?;
            if settle(
                &mut self.report,
                self.item,
                waiting,
                finished,
                self.options.mode,
            ) {
                // The action ran out of time inside the page: the rest of it, and the page
                // just read, are handed on from the last finished row.
                return Ok(Read::CutShort);
            }
            if sink.stopping() {
                // The sink finished the page whole and stops (its scan is paused): the page
                // just read is not acted on, its task is handed on as it was.
                return Ok(Read::HandOn(StopReason::TimeBudget));
            }
        }
        match page {
            Ok(page) => Ok(Read::Page(page)),
            // The queue is the back-off: whoever takes the rest tries again later.
            Err(e) if e.is_transient() && self.report.queries > 1 => {
                Ok(Read::HandOn(StopReason::Transient))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Takes a page of `task` apart: its rows for the sink, and what is known from it.
    fn take_apart(&mut self, task: &ReadRange, page: Page, top: u16) -> Taken {
        let last_keys = page
            .entities
            .last()
            .map(|e| (e.partition_key.clone(), e.row_key.clone()));
        let dense =
            self.options.split == SplitPolicy::Dense && within_one_child(task, &page.entities);
        let waiting = PendingPage::new(
            task.clone(),
            &page.entities,
            self.previous_partition.as_deref(),
            self.options.mode,
        );
        let returned = page.entities.len();
        let rows = match self.options.mode {
            ReadMode::Rows => page.entities,
            ReadMode::PartitionKeys => distinct_partitions(page.entities),
        };
        if self.seeking {
            self.keys_pace.observe(top, returned, rows.len());
        }
        if let Some((pk, _)) = &last_keys {
            self.previous_partition = Some(pk.clone());
        }
        Taken {
            last_keys,
            dense,
            waiting,
            rows,
            continuation: page.continuation,
        }
    }

    /// Which budget is spent, if one is.
    fn budget_spent(&self) -> Option<StopReason> {
        let elapsed = self.clock.now().saturating_sub(self.started);
        if self.spent_rows >= self.budget_rows {
            Some(StopReason::QueryBudget)
        } else if elapsed >= self.options.budget.max_duration {
            Some(StopReason::TimeBudget)
        } else {
            None
        }
    }

    /// What remains of `task` after a page that ended with `token`; pieces split off go to
    /// `waiting`, to be handed on once the sink has finished the page.
    fn rest_of(
        &self,
        task: ReadRange,
        token: Continuation,
        last_keys: Option<(String, String)>,
        wants_split: bool,
        waiting: &mut PendingPage,
    ) -> Option<ReadRange> {
        let mode = self.options.mode;
        match last_keys {
            // An empty page with a continuation (a filtered scan where no row matches for a
            // while): the token's position is where the service stopped looking, so everything
            // before it is done. A step that splits cuts the rest there, as after a row.
            None if wants_split && self.options.split_at_positions => {
                let mut emitted = Vec::new();
                match split_at_position(
                    &task,
                    &token,
                    self.previous_partition.as_deref(),
                    mode,
                    &mut |t| emitted.push(t),
                ) {
                    Some(rest) => {
                        waiting.after.extend(emitted);
                        rest
                    }
                    None => Some(with_cursor(task, token, self.previous_partition.clone())),
                }
            }
            None => Some(with_cursor(task, token, self.previous_partition.clone())),
            Some((pk, rk)) => advance(task, token, &pk, &rk, mode, wants_split, &mut |t| {
                waiting.after.push(t);
            }),
        }
    }

    /// Keeps a page for the sink, or settles it at once when the sink has nothing to do.
    fn keep_for_sink(&mut self, waiting: PendingPage, rows: Vec<Entity>) {
        self.pending = hand_to_sink(
            &mut self.report,
            self.item,
            waiting,
            rows,
            self.options.mode,
        );
    }

    /// Has the sink finish the last page kept for it, and ends the chain.
    async fn finish<S>(
        mut self,
        sink: &mut S,
        mut rest: Option<ReadRange>,
    ) -> Result<ChainEnd, StepError<S::Error>>
    where
        S: RowSink,
        S::Error: std::fmt::Display,
    {
        if let Some((waiting, rows)) = self.pending.take() {
            let finished = accept(sink, Some(rows), self.deadline)
                .await
                .map_err(StepError::Action)?;
            if settle(
                &mut self.report,
                self.item,
                waiting,
                finished,
                self.options.mode,
            ) {
                self.report.stopped = StopReason::TimeBudget;
                // The page was cut short: its follow-ups cover everything after the cut, the
                // rest included.
                rest = None;
            }
        }
        Ok(ChainEnd {
            report: self.report,
            spent: self.spent_rows,
            rest,
        })
    }
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

/// The page request for a task: `top` rows at most, and whether the step's budget ends with it.
async fn read<R: TableReader>(
    reader: &R,
    task: &ReadRange,
    options: &ScanOptions,
    (top, last): (u16, bool),
    columns: Option<&[String]>,
) -> Result<Page, StorageError> {
    let (scope, cursor) = match task {
        ReadRange::Range {
            partition_keys,
            cursor,
            ..
        } => (ReadScope::Range(partition_keys), cursor.as_ref()),
        ReadRange::Partition {
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
        top,
        columns,
        cursor,
        filter: options.filter.as_ref(),
        last,
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
