//! The deadline of the work a storage request serves, so that its retries stop in time.
//!
//! A step has a budget; a storage request deep inside it knows nothing of it, and a request
//! whose retries outlast the step only delays the failure that hands the work on. The work sets
//! its deadline once with [`within`] (a task-local value, as the throttling count is), every
//! request sent inside reads it, and the pipeline starts no retry whose wait would end past it.
//! Tasks the work spawns carry it with [`carrying`].

use std::future::Future;
use tokio::time::Instant;

tokio::task_local! {
    static DEADLINE: Instant;
}

/// Runs `work` with `deadline` for its storage requests (the earlier one, inside another
/// deadline).
pub async fn within<F: Future>(deadline: Instant, work: F) -> F::Output {
    let deadline = current().map_or(deadline, |outer| outer.min(deadline));
    DEADLINE.scope(deadline, work).await
}

/// `work`, under the current deadline wherever it runs: for a future about to be spawned.
pub fn carrying<F: Future>(work: F) -> impl Future<Output = F::Output> {
    let deadline = current();
    async move {
        match deadline {
            Some(deadline) => DEADLINE.scope(deadline, work).await,
            None => work.await,
        }
    }
}

/// The deadline of the work running now, if it set one.
pub(crate) fn current() -> Option<Instant> {
    DEADLINE.try_with(|deadline| *deadline).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn the_earlier_deadline_holds_and_spawned_work_carries_it() {
        assert_eq!(current(), None);
        let soon = Instant::now() + Duration::from_secs(5);
        let later = soon + Duration::from_secs(5);
        within(soon, async {
            assert_eq!(current(), Some(soon));
            within(later, async { assert_eq!(current(), Some(soon)) }).await;
            let spawned = tokio::spawn(carrying(async { current() }));
            assert_eq!(spawned.await.unwrap(), Some(soon));
            let bare = tokio::spawn(async { current() });
            assert_eq!(bare.await.unwrap(), None);
        })
        .await;
    }
}
