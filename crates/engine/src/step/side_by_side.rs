//! The rest of a partition-keys step read as a few pieces side by side: once a step's pages
//! show large partitions, what is left of its range is cut into pieces (`scan::seek`), each read
//! by a chain of its own, the chains sharing the step's sink one page at a time.

use super::chain::run_chain;
use super::{RowSink, ScanOptions, StepError, StepReport, StopReason};
use crate::budget::Clock;
use crate::item::{ReadRange, WorkItem};
use crate::reader::TableReader;
use crate::seek::{chain_pieces, CHAINS};
use std::time::Duration;
use tablescan_storage::table::entity::Entity;

/// Reads `rest`, the fresh rest of `item`'s range, as pieces side by side, sharing `left` of the
/// budget (in rows) among them; adds what they did to `total`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn read_side_by_side<R, S, C>(
    reader: &R,
    item: &WorkItem,
    rest: &ReadRange,
    options: &ScanOptions,
    left: u32,
    clock: &C,
    sink: &mut S,
    mut total: StepReport,
) -> Result<StepReport, StepError<S::Error>>
where
    R: TableReader,
    S: RowSink + Send,
    S::Error: std::fmt::Display,
    C: Clock,
{
    let pieces = chain_pieces(rest, CHAINS);
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
                total.stopped = StopReason::Transient;
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
