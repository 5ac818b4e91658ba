//! Runs a scan's tree of work items to completion in one process: for tests, benchmarks and
//! the simulator. (In production the Functions host runs the steps, one per queue message.)

use std::collections::VecDeque;
use std::convert::Infallible;

use super::budget::Clock;
use super::item::WorkItem;
use super::reader::TableReader;
use super::step::{run_step, RowSink, ScanOptions, StepError};
use crate::storage::table::entity::Entity;

/// A sink that keeps every row.
#[derive(Default)]
pub struct CollectingSink {
    pub rows: Vec<Entity>,
}

impl RowSink for CollectingSink {
    type Error = Infallible;

    async fn accept(&mut self, rows: Vec<Entity>) -> Result<(), Infallible> {
        self.rows.extend(rows);
        Ok(())
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
    let mut report = RunReport::default();
    let mut pending = VecDeque::from([root]);
    while let Some(item) = pending.pop_front() {
        if report.steps == max_steps {
            return Err(RunError::TooManySteps(max_steps));
        }
        let mut sink = CollectingSink::default();
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
        report.rows.extend(sink.rows);
        pending.extend(step.follow_ups);
    }
    Ok(report)
}
