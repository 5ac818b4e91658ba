//! A queue's back-off fed by its puts: a queue takes about 2,000 messages a second (its
//! documented target), and the service holds a put that finds it over that for a while before
//! it answers (refusing it with 503 Server Busy only once it would wait longer still). The
//! steps putting on one queue from many processes then see their puts slow down long before
//! any is refused, and each process's [`Governor`] of the queue would stay unlimited while
//! they all wait in the queue's backlog. A put answered this slowly is taken as a refusal.

use std::time::Duration;

use super::Governor;

/// A put answered after this long waited in the queue's backlog: one answers in tens of
/// milliseconds when the queue has room.
pub const SLOW_PUT: Duration = Duration::from_secs(1);

/// Feeds the queue's back-off with how long a put (with its retries) took: one that waited
/// [`SLOW_PUT`] or more cuts it as a refusal does (cuts within a second of each other count
/// once, see [`Governor::throttled`]).
pub fn put_answered(queue: &Governor, took: Duration) {
    if took >= SLOW_PUT {
        queue.throttled();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_slow_put_cuts_the_queues_back_off_and_a_quick_one_does_not() {
        let queue = Governor::default();
        put_answered(&queue, Duration::from_millis(30));
        assert_eq!(queue.rate(), None);
        put_answered(&queue, Duration::from_millis(1_500));
        let cut = queue.rate().expect("a slow put cuts");
        assert!(cut < 1_000.0, "{cut}");
        assert_eq!(queue.cuts(), 1);
        // Put the rate in use, then a slow put a while later cuts again.
        tokio::time::advance(Duration::from_secs(2)).await;
        put_answered(&queue, SLOW_PUT);
        assert_eq!(queue.cuts(), 2);
    }
}
