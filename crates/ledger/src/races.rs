//! The ledger's races as unit tests, on the in-memory table: two deliveries claiming one item,
//! a lease running out under a slow step, a renewed lease outliving the old fixed one,
//! finishes contending for one counter shard, a finish dying between its transactions, and a
//! model-based property test that delivers a tree of items with duplicates, crashes and
//! concurrent steps and checks that every item counted exactly once.
//!
//! Time is the `now` the ledger is given and the table's clock, both moved by the tests; every
//! table request yields to the runtime first, so `join!` interleaves concurrent calls request
//! by request, as they would interleave against the service.

use std::collections::VecDeque;

use futures_util::future::join_all;
use proptest::prelude::*;
use time::{Duration, OffsetDateTime};

use super::ledger::{Begin, Claim, FailureRecord, Finish, Ledger, StepCounts};
use super::rows::Tallies;
use super::status::State;
use crate::work_item::{ReadRange, Task, WorkItem};
use tablescan_api::ScanSpec;
use tablescan_engine::keys::KeyRange;
use tablescan_storage::table::in_memory::{InMemoryTable, Retry};

const LEASE: Duration = Duration::seconds(60);

fn t0() -> OffsetDateTime {
    time::macros::datetime!(2026-11-23 00:00 UTC)
}

fn at(seconds: i64) -> OffsetDateTime {
    t0() + Duration::seconds(seconds)
}

fn spec() -> ScanSpec {
    ScanSpec::parse(
        r#"{"table":"source","action":{"type":"count"}}"#,
        &|name: &str| (name == "AzureWebJobsStorage").then(|| "UseDevelopmentStorage=true".into()),
    )
    .expect("a valid spec")
}

fn child(parent: &WorkItem, n: usize) -> WorkItem {
    let parent_key = match &parent.task {
        Task::Table(ReadRange::Partition { partition_key, .. }) => partition_key.clone(),
        _ => String::new(),
    };
    parent.follow_up(ReadRange::Partition {
        partition_key: format!("{parent_key}/{n}"),
        row_keys: KeyRange::all(),
        prefix: String::new(),
        cursor: None,
        unstarted: false,
    })
}

fn reading(rows: u64) -> StepCounts {
    StepCounts {
        rows_read: rows,
        rows_acted: rows,
        queries: 1,
        ..StepCounts::default()
    }
}

/// A ledger in memory with one scan started at `t0`; its root item.
async fn started() -> (Ledger, InMemoryTable, WorkItem) {
    let table = InMemoryTable::new("ledger");
    table.set_now(t0());
    let ledger = Ledger::in_memory(table.clone());
    ledger.ensure().await.unwrap();
    let root = WorkItem::root(super::ledger::new_scan_id(), KeyRange::all(), "");
    ledger.create_scan(&spec(), &root, t0()).await.unwrap();
    (ledger, table, root)
}

async fn claim(ledger: &Ledger, item: &WorkItem, now: OffsetDateTime) -> Box<Claim> {
    match ledger.begin(item, now, LEASE).await.unwrap() {
        Begin::Run(claim) => claim,
        other => panic!("expected to run {}, got {other:?}", item.id()),
    }
}

async fn totals(ledger: &Ledger, root: &WorkItem) -> Tallies {
    ledger.totals(&root.scan).await.unwrap().0
}

#[tokio::test]
async fn two_deliveries_at_once_run_the_item_once() {
    let (ledger, _, root) = started().await;
    let (a, b) = tokio::join!(
        ledger.begin(&root, at(1), LEASE),
        ledger.begin(&root, at(1), LEASE)
    );
    let outcomes = [a.unwrap(), b.unwrap()];
    let runs = outcomes
        .iter()
        .filter(|o| matches!(o, Begin::Run(_)))
        .count();
    let busy = outcomes
        .iter()
        .filter(|o| matches!(o, Begin::Busy(_)))
        .count();
    assert_eq!((runs, busy), (1, 1), "{outcomes:?}");
}

#[tokio::test]
async fn a_claim_whose_lease_ran_out_is_lost_and_its_finish_does_not_count() {
    let (ledger, table, root) = started().await;
    let mut slow = claim(&ledger, &root, at(0)).await;
    table.set_now(at(61));
    let fast = claim(&ledger, &root, at(61)).await;
    assert_eq!(fast.attempt, 2);
    assert!(!ledger.renew(&root, &mut slow, at(62), LEASE).await.unwrap());
    let late = ledger
        .finish(&root, &slow, reading(7), &[child(&root, 1)], at(63))
        .await
        .unwrap();
    assert_eq!(late, Finish::ClaimLost);
    let on_time = ledger
        .finish(&root, &fast, reading(5), &[child(&root, 2)], at(64))
        .await
        .unwrap();
    assert_eq!(on_time, Finish::Recorded);
    let sum = totals(&ledger, &root).await;
    assert_eq!((sum.done, sum.created, sum.rows_read), (1, 2, 5));
    // The slow step's child was never recorded: it cannot run.
    assert!(matches!(
        ledger.begin(&child(&root, 1), at(65), LEASE).await.unwrap(),
        Begin::UnknownItem
    ));
}

#[tokio::test]
async fn a_renewed_claim_outlives_the_old_fixed_lease() {
    let (ledger, table, root) = started().await;
    let mut step = claim(&ledger, &root, at(0)).await;
    for (renewed_at, other_delivery_at) in [(40, 50), (80, 90), (120, 130)] {
        table.set_now(at(renewed_at));
        assert!(ledger
            .renew(&root, &mut step, at(renewed_at), LEASE)
            .await
            .unwrap());
        assert!(matches!(
            ledger
                .begin(&root, at(other_delivery_at), LEASE)
                .await
                .unwrap(),
            Begin::Busy(_)
        ));
    }
    let finished = ledger
        .finish(&root, &step, reading(3), &[], at(150))
        .await
        .unwrap();
    assert_eq!(finished, Finish::Recorded);
    assert!(matches!(
        ledger.begin(&root, at(400), LEASE).await.unwrap(),
        Begin::AlreadyDone(children) if children.is_empty()
    ));
}

#[tokio::test]
async fn finishes_contending_for_the_counter_shards_all_count() {
    let (ledger, _, root) = started().await;
    let children: Vec<WorkItem> = (0..60).map(|n| child(&root, n)).collect();
    let first = claim(&ledger, &root, at(0)).await;
    ledger
        .finish(&root, &first, reading(1), &children, at(1))
        .await
        .unwrap();
    let mut claims = Vec::new();
    for item in &children {
        claims.push(claim(&ledger, item, at(2)).await);
    }
    // Sixty finishes over sixteen shards at once: most lose their shard to another at least
    // once and must read it again.
    let finishes = children
        .iter()
        .zip(&claims)
        .enumerate()
        .map(|(n, (item, claim))| ledger.finish(item, claim, reading(n as u64), &[], at(3)));
    for outcome in join_all(finishes).await {
        assert_eq!(outcome.unwrap(), Finish::Recorded);
    }
    let sum = totals(&ledger, &root).await;
    assert_eq!((sum.created, sum.done), (61, 61));
    assert_eq!(sum.rows_read, 1 + (0..60).sum::<u64>());
    let status = ledger.status(&root.scan, at(4)).await.unwrap().unwrap();
    assert_eq!(status.state, State::Succeeded);
}

#[tokio::test]
async fn a_finish_that_dies_between_its_transactions_leaves_children_that_never_act() {
    let (ledger, table, root) = started().await;
    let many: Vec<WorkItem> = (0..250).map(|n| child(&root, n)).collect();
    let first = claim(&ledger, &root, at(0)).await;
    // 153 children are written ahead in two transactions; then the shard is read and the last
    // transaction (97 children, the item done, the shard) fails, as if the process died.
    table.fail_request(4);
    assert!(ledger
        .finish(&root, &first, reading(10), &many, at(1))
        .await
        .is_err());
    // A child written ahead waits while its parent may still list it...
    assert!(matches!(
        ledger.begin(&many[0], at(2), LEASE).await.unwrap(),
        Begin::Busy(_)
    ));
    // ...and the step runs again once the lease ends, choosing other children this time.
    table.set_now(at(70));
    let again = claim(&ledger, &root, at(70)).await;
    let few: Vec<WorkItem> = (1000..1003).map(|n| child(&root, n)).collect();
    ledger
        .finish(&root, &again, reading(10), &few, at(71))
        .await
        .unwrap();
    for early in [&many[0], &many[152]] {
        assert!(matches!(
            ledger.begin(early, at(72), LEASE).await.unwrap(),
            Begin::Orphan
        ));
    }
    assert!(matches!(
        ledger.begin(&many[200], at(72), LEASE).await.unwrap(),
        Begin::UnknownItem
    ));
    for item in &few {
        let c = claim(&ledger, item, at(73)).await;
        ledger
            .finish(item, &c, reading(1), &[], at(74))
            .await
            .unwrap();
    }
    let sum = totals(&ledger, &root).await;
    assert_eq!((sum.created, sum.done, sum.rows_read), (4, 4, 13));
    let status = ledger.status(&root.scan, at(75)).await.unwrap().unwrap();
    assert_eq!(status.state, State::Succeeded);
}

#[tokio::test]
async fn children_written_ahead_count_once_the_rerun_lists_them() {
    let (ledger, table, root) = started().await;
    let many: Vec<WorkItem> = (0..150).map(|n| child(&root, n)).collect();
    let first = claim(&ledger, &root, at(0)).await;
    table.fail_request(3);
    assert!(ledger
        .finish(&root, &first, reading(10), &many, at(1))
        .await
        .is_err());
    table.set_now(at(70));
    let again = claim(&ledger, &root, at(70)).await;
    ledger
        .finish(&root, &again, reading(10), &many, at(71))
        .await
        .unwrap();
    for item in &many {
        let c = claim(&ledger, item, at(72)).await;
        ledger
            .finish(item, &c, reading(1), &[], at(73))
            .await
            .unwrap();
    }
    let sum = totals(&ledger, &root).await;
    assert_eq!((sum.created, sum.done, sum.rows_read), (151, 151, 160));
}

#[tokio::test]
async fn a_cancelled_scan_drops_its_items_and_settles_exactly() {
    let (ledger, _, root) = started().await;
    let children: Vec<WorkItem> = (0..5).map(|n| child(&root, n)).collect();
    let first = claim(&ledger, &root, at(0)).await;
    ledger
        .finish(&root, &first, reading(2), &children, at(1))
        .await
        .unwrap();
    let running = claim(&ledger, &children[0], at(2)).await;
    ledger.cancel(&root.scan, at(3)).await.unwrap();
    for item in &children[1..] {
        assert!(matches!(
            ledger.begin(item, at(4), LEASE).await.unwrap(),
            Begin::Cancelled
        ));
    }
    let status = ledger.status(&root.scan, at(5)).await.unwrap().unwrap();
    assert_eq!(
        status.state,
        State::Cancelling,
        "a step still holds a claim"
    );
    ledger
        .finish(&children[0], &running, reading(4), &[], at(6))
        .await
        .unwrap();
    let status = ledger.status(&root.scan, at(7)).await.unwrap().unwrap();
    assert_eq!(status.state, State::Cancelled);
    assert_eq!(status.progress.rows_read, 6);
    assert_eq!(status.progress.steps_pending, 0);
}

#[tokio::test]
async fn a_redelivered_root_of_a_finished_thousand_item_scan_sends_nothing() {
    let (ledger, table, root) = started().await;
    // The root, 9 children, 110 grandchildren each: 1,000 items, all finished.
    let mut level = vec![root.clone()];
    let mut items = 0;
    for fan_out in [9, 110, 0] {
        let mut next = Vec::new();
        for item in &level {
            let children: Vec<WorkItem> = (0..fan_out).map(|n| child(item, n)).collect();
            let c = claim(&ledger, item, at(1)).await;
            ledger
                .finish(item, &c, reading(1), &children, at(1))
                .await
                .unwrap();
            items += 1;
            next.extend(children);
        }
        level = next;
    }
    assert_eq!(items, 1000);
    let status = ledger.status(&root.scan, at(2)).await.unwrap().unwrap();
    assert_eq!(status.state, State::Succeeded);

    // The root's message delivered again: its children are all done, so nothing is sent, and
    // the look costs a request per child, not per item of the tree.
    let requests = table.requests();
    let sent = deliver(&ledger, &root, at(3)).await;
    assert!(sent.is_empty(), "{} messages sent again", sent.len());
    assert!(
        table.requests() - requests <= 3 + 9,
        "{} requests",
        table.requests() - requests
    );
    // Every message of the scan delivered again sends nothing either.
    let sent = deliver(&ledger, &child(&root, 4), at(3)).await;
    assert!(sent.is_empty());
}

/// A finish whose transaction applied but whose answer was lost, sent again by the client's
/// retry: the retry's delete finds nothing, and the done row says the finish was this
/// delivery's own. (Failed before: reported "already finished", so the step sent none of its
/// children and the scan waited for a re-drive.)
#[tokio::test]
async fn a_finish_applied_whose_answer_was_lost_is_recorded() {
    let (ledger, table, root) = started().await;
    let c = claim(&ledger, &root, at(1)).await;
    let children = [child(&root, 1), child(&root, 2)];
    table.lose_answer(2, Retry::Yes); // the shard read, then the transaction
    let finish = ledger
        .finish(&root, &c, reading(3), &children, at(2))
        .await
        .unwrap();
    assert_eq!(finish, Finish::Recorded);
    let sum = totals(&ledger, &root).await;
    assert_eq!((sum.created, sum.done, sum.rows_read), (3, 1, 3));
}

/// A renewal applied but answered an error (its retry met its own new etag): the claim is
/// still this delivery's, the renewal says so, and the finish counts. (Failed before: the
/// renewal said the claim was lost, and the step stopped acting.)
#[tokio::test]
async fn a_renewal_applied_whose_answer_was_lost_keeps_the_claim() {
    let (ledger, table, root) = started().await;
    let mut c = claim(&ledger, &root, at(1)).await;
    table.lose_answer(1, Retry::Yes);
    assert!(ledger.renew(&root, &mut c, at(20), LEASE).await.unwrap());
    // Lost with no retry: the caller saw an error, and its etag is stale.
    table.lose_answer(1, Retry::No);
    assert!(ledger.renew(&root, &mut c, at(40), LEASE).await.is_err());
    let finish = ledger
        .finish(&root, &c, reading(2), &[child(&root, 1)], at(41))
        .await
        .unwrap();
    assert_eq!(finish, Finish::Recorded);
    assert_eq!(totals(&ledger, &root).await.done, 1);
}

/// A claim applied whose answer was lost is this delivery's: it runs, rather than waiting for
/// its own lease as if another delivery held the item. (Failed before: `Busy`.)
#[tokio::test]
async fn a_claim_applied_whose_answer_was_lost_is_taken() {
    let (ledger, table, root) = started().await;
    // The scan row, the pending row, then the claim's write.
    table.lose_answer(3, Retry::Yes);
    let begin = ledger.begin(&root, at(1), LEASE).await.unwrap();
    assert!(matches!(begin, Begin::Run(_)), "{begin:?}");
}

/// A failed attempt's release applied whose answer was lost, sent again by the client's retry:
/// the retry meets its own write, and the attempt counts once. (Failed before: the claim still
/// carried this delivery's mark, so the release was written again and `attemptsFailed` was 2.)
#[tokio::test]
async fn a_release_applied_whose_answer_was_lost_counts_one_failed_attempt() {
    let (ledger, table, root) = started().await;
    let c = claim(&ledger, &root, at(1)).await;
    table.lose_answer(2, Retry::Yes); // the shard read, then the transaction
    let retry = FailureRecord::Retry {
        failing_since: None,
    };
    ledger
        .fail(&root, &c, "a timeout", retry, 1, at(2))
        .await
        .unwrap();
    let sum = totals(&ledger, &root).await;
    assert_eq!((sum.attempts_failed, sum.throttled), (1, 1));
    // The item is free for the next delivery, which runs it.
    let again = claim(&ledger, &root, at(3)).await;
    assert_eq!(again.attempt, 2);
}

/// A delivery whose lease ran out finishes after another delivery finished the item: it is
/// told so, with the children that delivery recorded (to send those not started yet).
#[tokio::test]
async fn a_finish_after_another_deliverys_finish_gets_its_children() {
    let (ledger, table, root) = started().await;
    let slow = claim(&ledger, &root, at(0)).await;
    table.set_now(at(61));
    let fast = claim(&ledger, &root, at(61)).await;
    let chosen = [child(&root, 1), child(&root, 2)];
    let on_time = ledger
        .finish(&root, &fast, reading(5), &chosen, at(62))
        .await
        .unwrap();
    assert_eq!(on_time, Finish::Recorded);
    let late = ledger
        .finish(&root, &slow, reading(7), &[child(&root, 3)], at(63))
        .await
        .unwrap();
    let ids: Vec<String> = chosen.iter().map(WorkItem::id).collect();
    assert_eq!(late, Finish::FinishedByAnother(ids));
    let sum = totals(&ledger, &root).await;
    assert_eq!((sum.created, sum.done, sum.rows_read), (3, 1, 5));
}

/// The message of an item whose claim was abandoned comes back after the item was sent again
/// and claimed by the newer message's delivery: it is a leftover and is dropped at once, not
/// held for two leases waiting for a claim it must not take.
#[tokio::test]
async fn an_old_message_of_an_item_sent_again_is_superseded_while_the_new_one_runs() {
    let (ledger, table, root) = started().await;
    let sent = at(0);
    let _dead = claim(&ledger, &root, at(1)).await;
    // The claim lapses; a re-drive marks the item and sends it again at 70 s.
    table.set_now(at(70));
    let stranded = ledger
        .stranded(&root.scan, at(70), Duration::minutes(15), None, None)
        .await
        .unwrap();
    assert_eq!(stranded.len(), 1, "abandoned, so stranded at once");
    assert!(stranded[0].abandoned);
    assert!(ledger
        .mark_redriven(&root.scan, &stranded[0], at(70))
        .await
        .unwrap());
    // The new message's delivery claims it.
    let begin = ledger
        .begin_sent(&root, Some(at(70)), at(71), LEASE)
        .await
        .unwrap();
    assert!(matches!(begin, Begin::Run(_)), "{begin:?}");
    // The old message returns while the new delivery runs.
    let old = ledger
        .begin_sent(&root, Some(sent), at(72), LEASE)
        .await
        .unwrap();
    assert!(matches!(old, Begin::Superseded), "{old:?}");
    // A message not older than the re-drive waits as any duplicate does.
    let twin = ledger
        .begin_sent(&root, Some(at(70)), at(72), LEASE)
        .await
        .unwrap();
    assert!(matches!(twin, Begin::Busy(_)), "{twin:?}");
}

/// A stalled scan (no step finished for a while, no live claim in the window): its unclaimed
/// items, whose messages a dead host took but never started, count as stranded after the
/// stall time instead of the re-drive's 15 minutes; a live claim in the window says somebody
/// is working, and they wait.
#[tokio::test]
async fn a_stalled_scans_unclaimed_items_are_stranded_after_the_stall_time() {
    let (ledger, table, root) = started().await;
    let c = claim(&ledger, &root, at(1)).await;
    let children = [child(&root, 1), child(&root, 2)];
    ledger
        .finish(&root, &c, reading(1), &children, at(2))
        .await
        .unwrap();
    let long = Duration::minutes(15);
    let stall = Some(Duration::seconds(20));
    table.set_now(at(40));
    let found = ledger
        .stranded(&root.scan, at(40), long, stall, None)
        .await
        .unwrap();
    assert_eq!(found.len(), 2, "stalled and nobody working");
    assert!(found.iter().all(|s| !s.abandoned));
    assert!(ledger
        .stranded(&root.scan, at(40), long, None, None)
        .await
        .unwrap()
        .is_empty());
    // One child claimed and live: the other waits for the usual time.
    let _running = claim(&ledger, &children[0], at(40)).await;
    let found = ledger
        .stranded(&root.scan, at(41), long, stall, None)
        .await
        .unwrap();
    assert!(found.is_empty(), "{found:?}");
}

/// A step that chose one child twice is refused before anything is written, for good: with
/// more children than one transaction holds, the repeat would otherwise be written in two
/// transactions as one row counted twice, and the scan would never settle.
#[tokio::test]
async fn a_child_chosen_twice_is_refused_before_anything_is_written() {
    let (ledger, table, root) = started().await;
    let c = claim(&ledger, &root, at(1)).await;
    let mut children: Vec<WorkItem> = (0..150).map(|n| child(&root, n)).collect();
    children.push(child(&root, 3));
    let rows_before = table.len();
    let refused = ledger
        .finish(&root, &c, reading(1), &children, at(2))
        .await
        .unwrap_err();
    assert!(refused.refused_for_good(), "{refused}");
    assert!(refused.to_string().contains("twice"), "{refused}");
    assert_eq!(table.len(), rows_before, "nothing written");
}

/// What happens to one delivered message in the property test.
#[derive(Debug, Clone, Copy)]
enum Delivery {
    /// The step runs and finishes.
    Step,
    /// The message is delivered twice at once.
    Twice,
    /// The step claims the item and dies; the message comes back after the lease.
    Crash,
}

/// The children of an item in the model's tree: up to four, down to depth three, chosen by
/// the item's id so that every run of the same item chooses the same ones.
fn model_children(item: &WorkItem) -> Vec<WorkItem> {
    if item.depth >= 3 {
        return Vec::new();
    }
    let spread = item.id().bytes().map(u64::from).sum::<u64>();
    (0..(spread % 5) as usize).map(|n| child(item, n)).collect()
}

fn model_rows(item: &WorkItem) -> u64 {
    u64::from(item.depth) + 1
}

/// Runs one delivery of `item`; returns the messages it sends.
async fn deliver(ledger: &Ledger, item: &WorkItem, now: OffsetDateTime) -> Vec<WorkItem> {
    match ledger.begin(item, now, LEASE).await.unwrap() {
        Begin::Run(claim) => {
            let children = model_children(item);
            ledger
                .finish(item, &claim, reading(model_rows(item)), &children, now)
                .await
                .unwrap();
            children
        }
        Begin::AlreadyDone(children) => {
            let unstarted = ledger.unstarted(&item.scan, &children, now).await.unwrap();
            unstarted
                .iter()
                .map(|m| WorkItem::decode(m).unwrap())
                .collect()
        }
        // Held by another delivery: the message comes back later.
        Begin::Busy(_) => vec![item.clone()],
        // Dropped: the item stays pending for the resume to send.
        Begin::Paused
        | Begin::Cancelled
        | Begin::UnknownScan
        | Begin::UnknownItem
        | Begin::FailedForGood
        | Begin::Orphan
        | Begin::Superseded => Vec::new(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// However messages are duplicated, crashed and run side by side, every item of the tree
    /// is done exactly once and the totals are exactly the tree's.
    #[test]
    fn every_item_counts_once_under_duplicates_crashes_and_concurrency(
        deliveries in prop::collection::vec(
            prop_oneof![
                6 => Just(Delivery::Step),
                2 => Just(Delivery::Twice),
                1 => Just(Delivery::Crash),
            ],
            1..120,
        ),
        side_by_side in 1usize..5,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        runtime.block_on(async {
            let (ledger, table, root) = started().await;
            let mut clock = 0i64;
            let mut queue: VecDeque<WorkItem> = VecDeque::from([root.clone()]);
            let mut plan = deliveries.into_iter();
            while !queue.is_empty() {
                clock += 1;
                table.set_now(at(clock));
                let now = at(clock);
                let batch: Vec<WorkItem> =
                    (0..side_by_side).filter_map(|_| queue.pop_front()).collect();
                let mut steps = Vec::new();
                for item in &batch {
                    match plan.next().unwrap_or(Delivery::Step) {
                        Delivery::Step => steps.push(item.clone()),
                        Delivery::Twice => {
                            steps.push(item.clone());
                            steps.push(item.clone());
                        }
                        Delivery::Crash => {
                            if let Begin::Run(_) = ledger.begin(item, now, LEASE).await.unwrap() {
                                // The lease must run out before the message is seen again.
                                clock += LEASE.whole_seconds() + 1;
                            }
                            queue.push_back(item.clone());
                        }
                    }
                }
                let sent = join_all(steps.iter().map(|item| deliver(&ledger, item, now))).await;
                queue.extend(sent.into_iter().flatten());
            }
            // The model's own walk of the tree.
            let mut expected_items = 0u64;
            let mut expected_rows = 0u64;
            let mut walk = vec![root.clone()];
            while let Some(item) = walk.pop() {
                expected_items += 1;
                expected_rows += model_rows(&item);
                walk.extend(model_children(&item));
            }
            let sum = totals(&ledger, &root).await;
            assert_eq!((sum.created, sum.done), (expected_items, expected_items));
            assert_eq!(sum.rows_read, expected_rows);
            let status = ledger.status(&root.scan, at(clock + 1)).await.unwrap().unwrap();
            assert_eq!(status.state, State::Succeeded);
        });
    }
}

/// Status readers of one scan in several processes race for the re-drive look: of those that
/// read the same scan row, one takes the turn; the next turn comes a minute later.
#[tokio::test]
async fn one_status_reader_a_minute_takes_the_re_drive_look() {
    use super::redrive::{look_due, LOOK_EVERY};
    let table = InMemoryTable::new("ledger");
    let ledger = Ledger::in_memory(table.clone());
    ledger.ensure().await.unwrap();
    let root = WorkItem::root(super::ledger::new_scan_id(), KeyRange::all(), "");
    ledger.create_scan(&spec(), &root, t0()).await.unwrap();
    let after = Duration::minutes(15);
    let now = at(20 * 60);
    let readers = join_all((0..4).map(|_| ledger.read_status(&root.scan, now))).await;
    let mut won = 0;
    for read in readers {
        let read = read.unwrap().unwrap();
        assert!(look_due(
            read.created_at,
            read.redrive_looked_at,
            now,
            after,
            LOOK_EVERY
        ));
        let before = table.requests();
        won += usize::from(
            ledger
                .take_look_turn(&root.scan, &read.scan_etag, now)
                .await
                .unwrap(),
        );
        assert_eq!(table.requests() - before, 1, "a turn costs one request");
    }
    assert_eq!(won, 1, "one reader of the same row takes the turn");
    // A second later the turn is taken; a minute later it is due again.
    let read = ledger.read_status(&root.scan, now).await.unwrap().unwrap();
    let second = now + Duration::SECOND;
    assert!(!look_due(
        read.created_at,
        read.redrive_looked_at,
        second,
        after,
        LOOK_EVERY
    ));
    let minute = now + LOOK_EVERY;
    assert!(look_due(
        read.created_at,
        read.redrive_looked_at,
        minute,
        after,
        LOOK_EVERY
    ));
    assert!(ledger
        .take_look_turn(&root.scan, &read.scan_etag, minute)
        .await
        .unwrap());
}

/// What a status read says it cost is at least what it cost: the scan row and one read of the
/// shards while items are unsettled, a second read to settle once none is.
#[tokio::test]
async fn a_status_read_costs_no_more_than_it_reports() {
    let table = InMemoryTable::new("ledger");
    let ledger = Ledger::in_memory(table.clone());
    ledger.ensure().await.unwrap();
    let root = WorkItem::root(super::ledger::new_scan_id(), KeyRange::all(), "");
    ledger.create_scan(&spec(), &root, t0()).await.unwrap();
    let read_costing = |expected_requests: u32, state: State| {
        let (ledger, table, id) = (ledger.clone(), table.clone(), root.scan.clone());
        async move {
            let before = (table.requests(), table.entities());
            let read = ledger.read_status(&id, at(2)).await.unwrap().unwrap();
            let spent = (table.requests() - before.0, table.entities() - before.1);
            assert_eq!(read.status.state, state);
            assert_eq!(read.cost.requests, expected_requests);
            assert!(
                spent.0 <= u64::from(read.cost.requests),
                "{spent:?} {:?}",
                read.cost
            );
            assert!(
                spent.1 <= u64::from(read.cost.entities),
                "{spent:?} {:?}",
                read.cost
            );
        }
    };
    read_costing(2, State::Pending).await;
    let claim = claim(&ledger, &root, at(1)).await;
    ledger
        .finish(&root, &claim, reading(1), &[], at(1))
        .await
        .unwrap();
    read_costing(3, State::Succeeded).await;
}

#[path = "pause_races.rs"]
mod pause_races;
