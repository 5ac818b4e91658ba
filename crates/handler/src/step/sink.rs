//! The action's side of a step, and the step's reader: `ActionSink` passes each page to the
//! action (or previews it in a dry run) and stops acting once the scan is cancelled or paused;
//! `PacedReader` reads the source at the scan's pace.

use std::time::Duration;

use crate::app::AppState;
use crate::pacing::{Reservation, StepPace};
use tablescan_actions::{Action, ActionCounts, Applied, RowFailure, FAILURES_KEPT};
use tablescan_engine::reader::{PageRequest, TableReader};
use tablescan_engine::{Clock, RowSink, SystemClock};
use tablescan_ledger::notes::{NotedRow, RowNotes};
use tablescan_storage::table::entity::Entity;
use tablescan_storage::table::query::Page;
use tablescan_storage::StorageError;

/// Passes each page to the action and adds up what it did; stops acting once the scan is
/// cancelled.
pub(crate) struct ActionSink<'a> {
    pub(super) action: Action,
    pub(crate) counts: ActionCounts,
    /// Rows the action could not act on (up to [`FAILURES_KEPT`]) and, in a dry run, rows it
    /// would have acted on (as many).
    pub(crate) notes: RowNotes,
    /// Counts what the action would do and writes nothing.
    dry_run: bool,
    /// The step's clock, to tell the action when its time is up.
    clock: SystemClock,
    state: &'a AppState,
    scan: &'a str,
    /// Set when the step's claim was lost: another delivery may be running the item.
    lost: &'a std::sync::atomic::AtomicBool,
    /// Set when a page was refused because the scan was cancelled or the claim lost.
    pub(crate) cancelled: bool,
    /// Set once the scan is seen paused: every page from then on is cut to its first row, so
    /// the step stops as a step whose time is up does, exactly where it stopped.
    pausing: bool,
    /// Writes wait for their share of the scan's cap and the target's back-off.
    pace: &'a StepPace,
    /// Whether the action finished rows in this step: a later write that fails ends the step
    /// after them instead of failing it ([`RowSink::accept`]).
    acted: bool,
}

impl<'a> ActionSink<'a> {
    pub(crate) fn new(
        action: Action,
        dry_run: bool,
        clock: SystemClock,
        state: &'a AppState,
        scan: &'a str,
        lost: &'a std::sync::atomic::AtomicBool,
        pace: &'a StepPace,
    ) -> Self {
        ActionSink {
            action,
            counts: ActionCounts::default(),
            notes: RowNotes::default(),
            dry_run,
            clock,
            state,
            scan,
            lost,
            cancelled: false,
            pausing: false,
            pace,
            acted: false,
        }
    }
}

/// The step's source, read at its scan's pace: each page waits for the rows it asks for (sized
/// to the step's share of the rate), and what a short page did not use is given back.
pub(super) struct PacedReader<'a, R = tablescan_storage::TableClient> {
    table: &'a R,
    pace: &'a StepPace,
    /// The share reserved for the next page while this one is on its way (given back if the
    /// step reads no more).
    next: std::sync::Mutex<Option<Reservation>>,
}

impl<'a, R> PacedReader<'a, R> {
    pub(super) fn new(table: &'a R, pace: &'a StepPace) -> Self {
        PacedReader {
            table,
            pace,
            next: Default::default(),
        }
    }

    fn take_next(&self) -> Option<Reservation> {
        self.next.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn release_next(&self) {
        if let Some(reserved) = self.take_next() {
            self.pace.release(reserved);
        }
    }
}

impl<R: TableReader> TableReader for PacedReader<'_, R> {
    async fn read_page(&self, request: &PageRequest<'_>) -> Result<Page, StorageError> {
        let top = self.pace.page_size(request.top);
        let reserved = self.take_next();
        let wait = self.pace.before_reserved_read(u64::from(top), reserved);
        let ticket = tokio::time::timeout(crate::pacing::SHARE_WAIT, wait)
            .await
            .map_err(|_| crate::pacing::no_share("query entities", self.pace.scan()))?;
        // A step reads page after page: the next one's share is earned while this one is on
        // its way, so a step alone is not held to a page per wait plus request. Not after
        // the step's last page: kept to the step's end, that place would be earned and
        // forfeit.
        if !request.last {
            let next = self.pace.reserve_read(u64::from(top));
            // The pieces of a partition-keys step read side by side through one reader: a
            // place another piece reserved and nobody took is given back, not dropped.
            let replaced = self
                .next
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .replace(next);
            if let Some(replaced) = replaced {
                self.pace.release(replaced);
            }
        }
        let paced = PageRequest { top, ..*request };
        let page = self.table.read_page(&paced).await;
        if matches!(&page, Ok(page) if page.continuation.is_none()) {
            // The query is over (its partition or range read to the end), and with it, most
            // often, the step. The next page's place, kept until the step ends, would by then
            // be earned and forfeit, a page of the cap lost at every such end (5,758 entities
            // of the 80,002 a devhost capped copy moved: docs/scan.md, "Pacing"). Given up now,
            // it is mostly not yet earned, and goes to the takers behind; a step that reads on
            // pays afresh. Given up before a short page gives back what it did not read, so
            // that this goes to the takers behind too, not into the place given up.
            self.release_next();
        }
        // A refused or failed request took nothing from the account.
        let used = page.as_ref().map_or(0, |page| page.entities.len() as u64);
        self.pace
            .after_read(ticket, used, u64::from(top).saturating_sub(used));
        page
    }
}

impl<R> Drop for PacedReader<'_, R> {
    fn drop(&mut self) {
        self.release_next();
    }
}

impl RowSink for ActionSink<'_> {
    type Error = StorageError;

    async fn accept(
        &mut self,
        rows: Vec<Entity>,
        deadline: Duration,
    ) -> Result<usize, StorageError> {
        if self.cancelled
            || self.lost.load(std::sync::atomic::Ordering::SeqCst)
            || self.state.cancelled(self.scan).await
        {
            // Nothing of this page is done: the step ends, and its rest is dropped.
            self.cancelled = true;
            return Ok(0);
        }
        let mut rows = rows;
        if self.pausing || self.state.paused(self.scan).await {
            // The first row, never none: a step that finished nothing would hand on its own
            // task, and its child would be itself.
            self.pausing = true;
            rows.truncate(1);
        }
        if self.dry_run {
            let applied = self.action.preview(&rows);
            self.note_sample(&rows, &applied.failures);
            return Ok(self.note(applied));
        }
        // Rows written to a table are cut to what the share pays for within its wait; an
        // enqueue's are not (its share is charged per message, and a piece would cut its
        // messages' groups of rows), nor a count's or an export's (nothing paced to write).
        let most = match self.action.table_writes(&rows) {
            Some(_) => self.pace.write_size().unwrap_or(usize::MAX).max(1),
            None => usize::MAX,
        };
        let mut finished = 0;
        let mut rest = rows;
        loop {
            let after = if rest.len() > most {
                rest.split_off(most)
            } else {
                Vec::new()
            };
            let count = rest.len();
            let done = match self.act(rest, deadline).await {
                Ok(done) => done,
                // Rows of this page or of an earlier one were written: the step ends after
                // them and hands on the rest (0 of this page: its whole task), rather than
                // fail and write them again when its item runs again (an enqueue would send
                // their messages twice). The next step meets the error again if it lasts.
                Err(e) if finished > 0 || self.acted => {
                    tracing::warn!(
                        scan = self.scan,
                        "the step ends after the rows it wrote, the rest handed on: {e}"
                    );
                    return Ok(finished);
                }
                Err(e) => return Err(e),
            };
            finished += done;
            self.acted |= done > 0;
            if done < count || after.is_empty() {
                return Ok(finished);
            }
            // Between pieces, as between pages: the step's time, its claim, a cancel, a pause.
            if self.clock.now() >= deadline || self.lost.load(std::sync::atomic::Ordering::SeqCst) {
                return Ok(finished);
            }
            if self.state.cancelled(self.scan).await {
                // The rest of a cancelled scan is dropped, as at a page's start.
                self.cancelled = true;
                return Ok(finished);
            }
            if self.state.paused(self.scan).await {
                self.pausing = true;
                return Ok(finished);
            }
            rest = after;
        }
    }

    /// Once the scan is seen paused: a page of one row cannot be cut, so the step is told to
    /// stop after it.
    fn stopping(&self) -> bool {
        self.pausing
    }
}

impl ActionSink<'_> {
    /// Writes `rows` (as many as one write of the step carries) at the scan's pace; how many
    /// were finished.
    async fn act(&mut self, rows: Vec<Entity>, deadline: Duration) -> Result<usize, StorageError> {
        if let Some((entities, target)) = self.action.table_writes(&rows) {
            self.pace.before_write(entities, &target).await?;
        }
        for (messages, queue) in self.action.queue_writes(&rows) {
            self.pace.before_put(messages, &queue).await?;
        }
        let clock = self.clock;
        let go_on = move || clock.now() < deadline;
        let applied = self.action.apply(rows, &go_on).await?;
        for failure in &applied.failures {
            tracing::warn!(
                partition_key = %failure.partition_key,
                row_key = %failure.row_key,
                "a row failed: {}",
                failure.reason
            );
        }
        Ok(self.note(applied))
    }

    /// Adds a page's counts and failed rows; returns how many of its rows were finished.
    fn note(&mut self, applied: Applied) -> usize {
        self.counts += applied.counts;
        let room = FAILURES_KEPT.saturating_sub(self.notes.failed.len());
        self.notes
            .failed
            .extend(applied.failures.into_iter().take(room).map(|f| NotedRow {
                partition_key: f.partition_key,
                row_key: f.row_key,
                reason: Some(f.reason),
            }));
        applied.finished
    }

    /// Keeps the first rows a dry run would act on (those not failed).
    fn note_sample(&mut self, rows: &[Entity], failures: &[RowFailure]) {
        let room = FAILURES_KEPT.saturating_sub(self.notes.sample.len());
        let acted = rows.iter().filter(|row| {
            !failures
                .iter()
                .any(|f| f.partition_key == row.partition_key && f.row_key == row.row_key)
        });
        self.notes
            .sample
            .extend(acted.take(room).map(|row| NotedRow {
                partition_key: row.partition_key.clone(),
                row_key: row.row_key.clone(),
                reason: None,
            }));
    }
}
