//! Runs a scan's tree of work items to completion in one process: for tests, benchmarks and
//! the simulator. (In production the Functions host runs the steps, one per queue message.)

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use super::budget::Clock;
use super::item::WorkItem;
use super::reader::TableReader;
use super::step::{run_step, RowSink, ScanOptions, StepError};
use tablescan_storage::table::entity::Entity;

/// A sink that keeps the rows it finishes. With `cut_percent` above 0 it acts like an action
/// whose time ran out: that share of pages it finishes only partly (at least the first row).
#[derive(Default)]
pub struct CollectingSink {
    pub rows: Vec<Entity>,
    pub cut_percent: u8,
    pub random: u64,
    /// Pages finished only partly.
    pub pages_cut: u64,
}

impl RowSink for CollectingSink {
    type Error = Infallible;

    async fn accept(
        &mut self,
        mut rows: Vec<Entity>,
        _deadline: Duration,
    ) -> Result<usize, Infallible> {
        if self.cut_percent > 0 && rows.len() > 1 {
            self.random ^= self.random << 13;
            self.random ^= self.random >> 7;
            self.random ^= self.random << 17;
            if self.random % 100 < u64::from(self.cut_percent) {
                rows.truncate(1 + (self.random / 100) as usize % (rows.len() - 1));
                self.pages_cut += 1;
            }
        }
        let finished = rows.len();
        self.rows.extend(rows);
        Ok(finished)
    }
}

/// What a whole scan did.
#[derive(Debug, Default)]
pub struct RunReport {
    /// Every row delivered, in the order the steps ran.
    pub rows: Vec<Entity>,
    pub steps: u64,
    pub queries: u64,
    /// Distinct PartitionKeys read, summed from the steps' counts.
    pub partitions: u64,
    /// The longest chain of steps that each waited for the one before (the critical path).
    pub longest_chain: u32,
    /// The most queries one step issued.
    pub most_queries_in_a_step: u32,
    /// Steps that failed transiently and were run again.
    pub failed_attempts: u64,
    /// Pages the sink finished only partly (see [`run_cutting_pages`]).
    pub pages_cut: u64,
}

/// Why a run did not finish.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("a step failed: {0}")]
    Step(#[from] StepError<Infallible>),
    #[error("the scan did not finish within {0} steps")]
    TooManySteps(u64),
}

/// Runs `root` and every follow-up, first in first out, stopping after `max_steps`.
pub async fn run_to_completion<R: TableReader, C: Clock>(
    reader: &R,
    root: WorkItem,
    options: &ScanOptions,
    clock: &C,
    max_steps: u64,
) -> Result<RunReport, RunError> {
    run_cutting_pages(reader, root, options, clock, max_steps, 0, 0).await
}

/// As [`run_to_completion`], with a sink that finishes `cut_percent` of pages only partly (at
/// random, from `seed`), as an action does when its step's time runs out.
pub async fn run_cutting_pages<R: TableReader, C: Clock>(
    reader: &R,
    root: WorkItem,
    options: &ScanOptions,
    clock: &C,
    max_steps: u64,
    cut_percent: u8,
    seed: u64,
) -> Result<RunReport, RunError> {
    let mut random = seed | 1;
    let mut report = RunReport::default();
    let mut pending = VecDeque::from([root]);
    while let Some(item) = pending.pop_front() {
        if report.steps == max_steps {
            return Err(RunError::TooManySteps(max_steps));
        }
        let mut sink = CollectingSink {
            rows: Vec::new(),
            cut_percent,
            random,
            pages_cut: 0,
        };
        let step = match run_step(reader, &item, options, clock, &mut sink).await {
            Ok(step) => step,
            // As the Functions host does: the message comes back and the step runs again.
            Err(StepError::Read(e)) if e.is_transient() => {
                report.steps += 1;
                report.failed_attempts += 1;
                pending.push_back(item);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        report.steps += 1;
        report.queries += u64::from(step.queries);
        report.partitions += step.partitions_started;
        report.longest_chain = report.longest_chain.max(item.depth + 1);
        report.most_queries_in_a_step = report.most_queries_in_a_step.max(step.queries);
        random = sink.random;
        report.pages_cut += sink.pages_cut;
        report.rows.extend(sink.rows);
        pending.extend(step.follow_ups);
    }
    Ok(report)
}
