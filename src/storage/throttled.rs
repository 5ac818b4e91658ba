//! Counting the answers that say the service is too busy (503 Server Busy, 500 Operation Timed
//! Out) within one unit of work, a step, without threading a counter through every call: the
//! pipeline notes each such answer, retried or not, in a task-local cell that
//! [`counting_throttled`] sets up around the work. Outside such a scope nothing is counted.
//!
//! The count feeds the scan's status (how hard the account pushed back) and, with pacing, the
//! signal to slow down.

use std::cell::Cell;
use std::future::Future;

tokio::task_local! {
    static THROTTLED: Cell<u64>;
}

/// Runs `work`; its output and how many of its storage requests were answered "too busy".
/// Futures joined inside `work` run in its task and are counted; tasks it spawns are not.
pub async fn counting_throttled<F: Future>(work: F) -> (F::Output, u64) {
    THROTTLED
        .scope(Cell::new(0), async {
            let output = work.await;
            (output, THROTTLED.with(Cell::get))
        })
        .await
}

/// Whether an answer says the service is too busy: throttling, or a server-side timeout,
/// which the service answers when it is over its targets too.
pub(crate) fn is_throttling(status: u16, code: Option<&str>) -> bool {
    status == 503 || (status == 500 && code == Some("OperationTimedOut"))
}

/// Counts one such answer in the current scope, if any.
pub(crate) fn note_throttled() {
    let _ = THROTTLED.try_with(|count| count.set(count.get() + 1));
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

    #[test]
    fn busy_and_server_timeouts_are_throttling() {
        assert!(is_throttling(503, Some("ServerBusy")));
        assert!(is_throttling(503, None));
        assert!(is_throttling(500, Some("OperationTimedOut")));
        assert!(!is_throttling(500, Some("InternalError")));
        assert!(!is_throttling(409, Some("EntityAlreadyExists")));
    }
}
