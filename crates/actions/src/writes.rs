//! How the actions write: rows grouped by partition into transactions of at most 100, and
//! writes run a few at a time, within a cap shared by every step of the process, stopping when
//! the step says so. Shared by copy, delete, update and enqueue; uses none of them.

use tablescan_storage::table::entity::Entity;
use tablescan_storage::StorageError;

use crate::report::{Applied, GoOn};

/// Splits rows (in table order) into runs that share a PartitionKey.
pub(crate) fn by_partition(rows: Vec<Entity>) -> Vec<Vec<Entity>> {
    let mut groups: Vec<Vec<Entity>> = Vec::new();
    for row in rows {
        match groups.last_mut() {
            Some(group) if group[0].partition_key == row.partition_key => group.push(row),
            _ => groups.push(vec![row]),
        }
    }
    groups
}

/// A partition's rows per chunk, at most a transaction's 100 each, in table order, each row
/// made into its operation by `operation`.
pub(crate) fn partition_chunks<T>(
    rows: Vec<Entity>,
    mut operation: impl FnMut(Entity) -> T,
) -> Vec<Vec<T>> {
    let mut chunks = Vec::new();
    for group in by_partition(rows) {
        let mut group = group.into_iter().peekable();
        while group.peek().is_some() {
            chunks.push(
                group
                    .by_ref()
                    .take(tablescan_storage::table::batch::MAX_OPERATIONS)
                    .map(&mut operation)
                    .collect(),
            );
        }
    }
    chunks
}

/// Sends the transactions in order, at most `limit` at once, until `go_on` says no; what they
/// did added up, with `finished` the rows of the transactions started (all of them finished).
pub(crate) async fn send_transactions<T, F, Fut>(
    transactions: Vec<Vec<T>>,
    limit: usize,
    go_on: GoOn<'_>,
    send: F,
) -> Result<Applied, StorageError>
where
    F: Fn(Vec<T>) -> Fut,
    Fut: std::future::Future<Output = Result<Applied, StorageError>> + Send + 'static,
{
    let sizes: Vec<usize> = transactions.iter().map(Vec::len).collect();
    let futures: Vec<Fut> = transactions.into_iter().map(send).collect();
    let results = bounded(futures, limit, go_on).await;
    let mut applied = Applied {
        finished: sizes[..results.len()].iter().sum(),
        ..Applied::default()
    };
    for result in results {
        applied.absorb(result?);
    }
    Ok(applied)
}

/// Runs the writes in order, at most `limit` at once, until `go_on` says no; returns how many
/// were started (all finished), or the first failure.
pub(crate) async fn write_until<F>(
    writes: Vec<F>,
    limit: usize,
    go_on: GoOn<'_>,
) -> Result<usize, StorageError>
where
    F: std::future::Future<Output = Result<(), StorageError>> + Send + 'static,
{
    let results = bounded(writes, limit, go_on).await;
    let started = results.len();
    results.into_iter().collect::<Result<(), _>>()?;
    Ok(started)
}

/// Writes one handler process keeps in flight across all its steps. On the Consumption plan an
/// instance may hold 600 active outbound connections; 24 steps at once, each with up to
/// [`crate::COPY_CONCURRENCY`] transactions, would ask for more. 384 leaves room for the reads, the
/// ledger and the queue outputs, and at ~30 ms a request still allows ~12,000 writes/s per
/// instance, more than half an account's target.
pub const PROCESS_WRITES_IN_FLIGHT: usize = 384;

static WRITES_IN_FLIGHT: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(PROCESS_WRITES_IN_FLIGHT);

/// Runs the futures in order, at most `limit` at once (and, with every other step of the
/// process, at most [`PROCESS_WRITES_IN_FLIGHT`]), starting the next only while `go_on` says
/// so (the first always starts); returns the results of those started, in order.
pub(crate) async fn bounded<T, F>(futures: Vec<F>, limit: usize, go_on: GoOn<'_>) -> Vec<T>
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let mut results: Vec<Option<T>> = (0..futures.len()).map(|_| None).collect();
    let mut set = tokio::task::JoinSet::new();
    let mut queue = futures.into_iter().enumerate();
    let mut started = 0;
    loop {
        while set.len() < limit.max(1) && (started == 0 || go_on()) {
            match queue.next() {
                Some((index, future)) => {
                    started += 1;
                    // Its refusals count in the step's status like the step's own, and its
                    // retries end by the step's deadline.
                    let write = tablescan_storage::deadline::carrying(async move {
                        // The semaphore is never closed, so acquiring cannot fail; without a
                        // permit the write would still be correct, only less polite.
                        let _permit = WRITES_IN_FLIGHT.acquire().await.ok();
                        (index, future.await)
                    });
                    set.spawn(tablescan_storage::throttled::carrying_count(write));
                }
                None => break,
            }
        }
        match set.join_next().await {
            Some(Ok((index, value))) => results[index] = Some(value),
            // A panicking task is a bug; propagate it rather than lose a result.
            Some(Err(e)) => std::panic::resume_unwind(e.into_panic()),
            None => break,
        }
    }
    results.truncate(started);
    results
        .into_iter()
        .map(|r| r.expect("every started task finished"))
        .collect()
}

/// Never stops: for callers that must finish everything.
#[cfg(test)]
pub(crate) fn always() -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_group_by_consecutive_partition() {
        let rows = vec![
            Entity::new("a", "1"),
            Entity::new("a", "2"),
            Entity::new("b", "1"),
            Entity::new("c", "1"),
        ];
        let groups = by_partition(rows);
        assert_eq!(groups.iter().map(Vec::len).collect::<Vec<_>>(), [2, 1, 1]);
    }

    #[tokio::test]
    async fn bounded_keeps_order() {
        let futures: Vec<_> = (0..20u64)
            .map(|i| async move {
                tokio::time::sleep(std::time::Duration::from_millis(20 - i)).await;
                i
            })
            .collect();
        assert_eq!(
            bounded(futures, 4, &always).await,
            (0..20).collect::<Vec<_>>()
        );
    }

    #[tokio::test]
    async fn told_to_stop_it_starts_nothing_new_and_finishes_what_it_started() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let ran = Arc::new(AtomicUsize::new(0));
        let futures: Vec<_> = (0..50u64)
            .map(|i| {
                let ran = ran.clone();
                async move {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    ran.fetch_add(1, Ordering::SeqCst);
                    i
                }
            })
            .collect();
        let asked = AtomicUsize::new(0);
        // Says yes for the first 9 questions (the first future starts without asking).
        let go_on = || asked.fetch_add(1, Ordering::SeqCst) < 9;
        let results = bounded(futures, 4, &go_on).await;
        assert_eq!(results, (0..10).collect::<Vec<_>>());
        assert_eq!(
            ran.load(Ordering::SeqCst),
            10,
            "every started write finished"
        );
        // Even a sink told to stop at once finishes its first row.
        let first: Vec<_> = (0..3u64).map(|i| async move { i }).collect();
        assert_eq!(bounded(first, 4, &|| false).await, vec![0]);
    }

    #[tokio::test]
    async fn the_steps_of_one_process_share_a_cap_on_writes_in_flight() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let now = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        // 20 steps of 32 writes each would put 640 in flight without the shared cap.
        let steps = (0..20).map(|_| {
            let futures: Vec<_> = (0..32)
                .map(|_| {
                    let (now, most) = (now.clone(), most.clone());
                    async move {
                        let in_flight = now.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(in_flight, Ordering::SeqCst);
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        now.fetch_sub(1, Ordering::SeqCst);
                    }
                })
                .collect();
            tokio::spawn(bounded(futures, 32, &always))
        });
        let mut done = 0;
        for step in steps.collect::<Vec<_>>() {
            done += step.await.expect("a step").len();
        }
        assert_eq!(done, 20 * 32);
        let most = most.load(Ordering::SeqCst);
        assert!(most <= PROCESS_WRITES_IN_FLIGHT, "{most} in flight");
        assert!(most > 32, "steps write side by side ({most})");
    }
}
