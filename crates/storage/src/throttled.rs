//! Counting the answers that say the service is too busy (503 Server Busy, 500 Operation Timed
//! Out) within one unit of work, a step, without threading a counter through every call: the
//! pipeline notes each such answer, retried or not, in a task-local counter that
//! [`counting_throttled`] sets up around the work, and [`carrying_count`] carries into the tasks
//! the work spawns (a copy's writes run in tasks of their own). Outside such a scope nothing is
//! counted.
//!
//! The count feeds the scan's status (how hard the account pushed back) and, with pacing, the
//! signal to slow down.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

tokio::task_local! {
    static THROTTLED: Arc<AtomicU64>;
}

/// Runs `work`; its output and how many of its storage requests were answered "too busy".
/// Futures joined inside `work` run in its task and are counted; tasks it spawns are counted
/// if their futures are wrapped in [`carrying_count`].
pub async fn counting_throttled<F: Future>(work: F) -> (F::Output, u64) {
    let counter = Arc::new(AtomicU64::new(0));
    let output = THROTTLED.scope(counter.clone(), work).await;
    (output, counter.load(Ordering::Relaxed))
}

/// `work`, counting into the current scope's count wherever it runs: for a future about to be
/// spawned as a task of its own.
pub fn carrying_count<F: Future>(work: F) -> impl Future<Output = F::Output> {
    let counter = THROTTLED.try_with(Arc::clone).ok();
    async move {
        match counter {
            Some(counter) => THROTTLED.scope(counter, work).await,
            None => work.await,
        }
    }
}

/// Whether an answer says the service is too busy: throttling, or a server-side timeout,
/// which the service answers when it is over its targets too.
pub(crate) fn is_throttling(status: u16, code: Option<&str>) -> bool {
    status == 503 || (status == 500 && code == Some("OperationTimedOut"))
}

/// Counts one such answer in the current scope, if any.
pub(crate) fn note_throttled() {
    let _ = THROTTLED.try_with(|count| count.fetch_add(1, Ordering::Relaxed));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_are_counted_in_their_scope_only() {
        note_throttled();
        let ((), counted) = counting_throttled(async {
            note_throttled();
            tokio::join!(async { note_throttled() }, async {
                tokio::task::yield_now().await;
                note_throttled()
            });
        })
        .await;
        assert_eq!(counted, 3);
        let ((), none) = counting_throttled(async {}).await;
        assert_eq!(none, 0);
    }

    #[tokio::test]
    async fn tasks_spawned_with_the_count_carried_are_counted() {
        let ((), counted) = counting_throttled(async {
            let carried = tokio::spawn(carrying_count(async { note_throttled() }));
            let lost = tokio::spawn(async { note_throttled() });
            carried.await.unwrap();
            lost.await.unwrap();
        })
        .await;
        assert_eq!(counted, 1);
        // Outside any scope, carrying changes nothing.
        tokio::spawn(carrying_count(async { note_throttled() }))
            .await
            .unwrap();
    }

    #[test]
    fn busy_and_server_timeouts_are_throttling() {
        assert!(is_throttling(503, Some("ServerBusy")));
        assert!(is_throttling(503, None));
        assert!(is_throttling(500, Some("OperationTimedOut")));
        assert!(!is_throttling(500, Some("InternalError")));
        assert!(!is_throttling(409, Some("EntityAlreadyExists")));
    }
}
