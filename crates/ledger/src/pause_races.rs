//! Pause and resume against the ledger's model (`job::races`): however pauses and resumes
//! fall between deliveries, duplicated, crashed or side by side, every item of the tree is
//! done exactly once, nothing runs while the scan is paused, and a resume sends every item
//! the pause left behind, in rounds smaller than the tree.

use std::collections::{BTreeSet, VecDeque};

use futures_util::future::join_all;
use proptest::prelude::*;

use super::*;

/// What happens next in a case.
#[derive(Debug, Clone, Copy)]
enum Event {
    Step,
    Twice,
    Crash,
    Pause,
    /// A resume, with rounds of this many pending rows; a second caller's rounds run beside
    /// the first's when `racing`.
    Resume {
        rows: u16,
        racing: bool,
    },
}

/// Runs the resume's rounds until none is left; the messages they sent.
async fn resume_rounds(
    ledger: &Ledger,
    scan: &str,
    now: OffsetDateTime,
    rows: u16,
) -> Vec<WorkItem> {
    let mut sent = Vec::new();
    for _ in 0..1000 {
        let round = ledger.resume_round(scan, now, rows).await.unwrap();
        sent.extend(round.messages.iter().map(|m| WorkItem::decode(m).unwrap()));
        if !round.more {
            return sent;
        }
    }
    panic!("the rounds did not end");
}

/// A started scan whose root step finished at 1 s with `n` children, all pending.
async fn root_done_with(n: usize) -> (Ledger, InMemoryTable, String, Vec<WorkItem>) {
    let (ledger, table, root) = started().await;
    let c = claim(&ledger, &root, at(1)).await;
    let children: Vec<WorkItem> = (0..n).map(|n| child(&root, n)).collect();
    ledger
        .finish(&root, &c, reading(1), &children, at(1))
        .await
        .unwrap();
    (ledger, table, root.scan, children)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn a_paused_scan_runs_nothing_and_resumes_to_an_exact_finish(
        events in prop::collection::vec(
            prop_oneof![
                6 => Just(Event::Step),
                1 => Just(Event::Twice),
                1 => Just(Event::Crash),
                1 => Just(Event::Pause),
                1 => (1u16..5, any::<bool>()).prop_map(|(rows, racing)| Event::Resume { rows, racing }),
            ],
            1..120,
        ),
        side_by_side in 1usize..5,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        runtime.block_on(async {
            let (ledger, table, root) = started().await;
            let scan = root.scan.clone();
            let mut clock = 0i64;
            let mut queue: VecDeque<WorkItem> = VecDeque::from([root.clone()]);
            let mut plan = events.into_iter();
            let mut resumes = 0;
            loop {
                if queue.is_empty() {
                    let record = ledger.scan(&scan).await.unwrap().unwrap();
                    if !record.is_paused() {
                        break;
                    }
                    // Everything delivered while paused was dropped: the user resumes. (A
                    // pause after the last finish finds nothing left to pause.)
                    // Read once a step running at the pause would surely have stopped (with
                    // more pending items than the claims window, `pausing` until then).
                    let settled = at(clock) + ledger.steps_stop_within();
                    let status = ledger.status(&scan, settled).await.unwrap().unwrap();
                    if status.state == State::Succeeded {
                        break;
                    }
                    assert_eq!(status.state, State::Paused, "{status:?}");
                    resumes += 1;
                    assert!(resumes < 100, "resumed {resumes} times");
                    ledger.resume(&scan, at(clock)).await.unwrap();
                    queue.extend(resume_rounds(&ledger, &scan, at(clock), 3).await);
                    continue;
                }
                clock += 1;
                table.set_now(at(clock));
                let now = at(clock);
                let batch: Vec<WorkItem> =
                    (0..side_by_side).filter_map(|_| queue.pop_front()).collect();
                let mut steps = Vec::new();
                for item in &batch {
                    match plan.next().unwrap_or(Event::Step) {
                        Event::Step => steps.push(item.clone()),
                        Event::Twice => {
                            steps.push(item.clone());
                            steps.push(item.clone());
                        }
                        Event::Crash => {
                            if let Begin::Run(_) = ledger.begin(item, now, LEASE).await.unwrap() {
                                clock += LEASE.whole_seconds() + 1;
                            }
                            queue.push_back(item.clone());
                        }
                        Event::Pause => {
                            ledger.pause(&scan, now).await.unwrap();
                            steps.push(item.clone());
                        }
                        Event::Resume { rows, racing } => {
                            ledger.resume(&scan, now).await.unwrap();
                            let callers = if racing { 2 } else { 1 };
                            let sent = join_all(
                                (0..callers).map(|_| resume_rounds(&ledger, &scan, now, rows)),
                            )
                            .await;
                            queue.extend(sent.into_iter().flatten());
                            steps.push(item.clone());
                        }
                    }
                }
                let paused = ledger.scan(&scan).await.unwrap().unwrap().is_paused();
                let done_before = totals(&ledger, &root).await.done;
                let sent = join_all(steps.iter().map(|item| deliver(&ledger, item, now))).await;
                if paused {
                    assert_eq!(
                        totals(&ledger, &root).await.done,
                        done_before,
                        "a step ran while the scan was paused"
                    );
                }
                queue.extend(sent.into_iter().flatten());
            }
            let mut expected_items = 0u64;
            let mut expected_rows = 0u64;
            let mut walk = vec![root.clone()];
            let mut ids = BTreeSet::new();
            while let Some(item) = walk.pop() {
                expected_items += 1;
                expected_rows += model_rows(&item);
                ids.insert(item.id());
                walk.extend(model_children(&item));
            }
            let sum = totals(&ledger, &root).await;
            assert_eq!((sum.created, sum.done), (expected_items, expected_items));
            assert_eq!(sum.rows_read, expected_rows);
            let status = ledger.status(&scan, at(clock + 1)).await.unwrap().unwrap();
            assert_eq!(status.state, State::Succeeded);
            assert!(!status.resuming, "no round is left once every item is done");
        });
    }
}

/// A pause and a resume come in the order they were made, and a resume of a scan that is not
/// paused, or a pause of a cancelled one, writes nothing.
#[tokio::test]
async fn pause_and_resume_write_only_what_changes() {
    let (ledger, table, root) = started().await;
    let scan = root.scan.clone();
    let before = table.requests();
    let record = ledger.resume(&scan, at(1)).await.unwrap().unwrap();
    assert!(!record.is_paused() && record.resumed_at.is_none());
    assert_eq!(table.requests() - before, 1, "one read, no write");
    assert!(ledger
        .pause(&scan, at(2))
        .await
        .unwrap()
        .unwrap()
        .is_paused());
    // The resume's clock is behind the pause's: it still comes after it.
    let resumed = ledger.resume(&scan, at(1)).await.unwrap().unwrap();
    assert!(!resumed.is_paused());
    assert!(resumed.resumed_at.unwrap() > resumed.paused_at.unwrap());
    assert!(!ledger.scan(&scan).await.unwrap().unwrap().is_paused());
    ledger.cancel(&scan, at(3)).await.unwrap();
    let cancelled = ledger.pause(&scan, at(4)).await.unwrap().unwrap();
    assert!(!cancelled.is_paused(), "a cancelled scan is not paused");
    let status = ledger.status(&scan, at(5)).await.unwrap().unwrap();
    assert_eq!(status.state, State::Cancelled);
}

/// A round whose marks applied with their answer lost (the client's retry met its own
/// marks) still sends every message it marked.
#[tokio::test]
async fn a_round_whose_answer_was_lost_still_sends_what_it_marked() {
    let (ledger, table, scan, _) = root_done_with(4).await;
    ledger.pause(&scan, at(2)).await.unwrap();
    ledger.resume(&scan, at(3)).await.unwrap();
    // The round reads the scan row, then a page, then marks in one transaction.
    table.lose_answer(3, Retry::Yes);
    let round = ledger.resume_round(&scan, at(3), 10).await.unwrap();
    assert_eq!(round.messages.len(), 4, "{round:?}");
    assert!(!round.more);
}

/// A round costs the scan row, its pages of pending rows, a transaction per 100 marks and the
/// write of where it stopped: however many items the scan has, one round of 500 takes 8
/// requests.
#[tokio::test]
async fn a_round_costs_a_read_a_page_a_transaction_per_hundred_and_a_write() {
    let (ledger, table, scan, _) = root_done_with(700).await;
    ledger.pause(&scan, at(2)).await.unwrap();
    ledger.resume(&scan, at(3)).await.unwrap();
    let before = table.requests();
    let first = ledger
        .resume_round(&scan, at(3), super::super::pause::RESUME_ROWS_PER_ROUND)
        .await
        .unwrap();
    assert_eq!((first.messages.len(), first.more), (500, true));
    assert_eq!(table.requests() - before, 8, "1 + 1 + 5 + 1");
    let second = ledger
        .resume_round(&scan, at(3), super::super::pause::RESUME_ROWS_PER_ROUND)
        .await
        .unwrap();
    assert_eq!((second.messages.len(), second.more), (200, false));
    let status = ledger.status(&scan, at(4)).await.unwrap().unwrap();
    assert!(!status.resuming, "{status:?}");
    let ids: std::collections::BTreeSet<_> =
        first.messages.iter().chain(&second.messages).collect();
    assert_eq!(ids.len(), 700, "every item once");
}

/// A paused scan with more pending items than the claims window holds (any scan of some size)
/// reads `paused` once no step can still be running, not `pausing` for ever; a live claim
/// seen in the window still reads `pausing`. (Failed before the fix: more pending rows than
/// the window counted as a step still running, as for a cancel whose drops are under way, so
/// `status --watch` never ended.)
#[tokio::test]
async fn a_paused_scan_larger_than_the_claims_window_ends_paused() {
    let (ledger, _table, scan, children) = root_done_with(40).await;
    // One child runs when the pause comes.
    let running = claim(&ledger, &children[39], at(2)).await;
    ledger.pause(&scan, at(2)).await.unwrap();
    let state = |seconds| {
        let (ledger, scan) = (ledger.clone(), scan.clone());
        async move {
            ledger
                .status(&scan, at(seconds))
                .await
                .unwrap()
                .unwrap()
                .state
        }
    };
    assert_eq!(
        state(3).await,
        State::Pausing,
        "a step may still be stopping"
    );
    ledger
        .finish(&children[39], &running, reading(1), &[], at(4))
        .await
        .unwrap();
    let settles = ledger.steps_stop_within().whole_seconds();
    assert_eq!(state(3 + settles).await, State::Paused);
    assert_eq!(state(3600).await, State::Paused);
}

/// A round that was under way when the scan was paused and resumed again writes where it
/// stopped after the new resume has sent its rounds back to the first pending row: that late
/// write must not move the new resume past items whose messages the pause dropped. (Failed
/// before the fix: the round's write, unconditional, put the new resume after the first four
/// items, whose messages were never sent again: 6 of 10 sent.)
#[tokio::test]
async fn a_round_overtaken_by_a_pause_and_a_resume_does_not_move_the_new_resume_on() {
    use std::future::Future;
    let (ledger, table, scan, children) = root_done_with(10).await;
    ledger.pause(&scan, at(2)).await.unwrap();
    ledger.resume(&scan, at(3)).await.unwrap();
    // Round A reads the scan row and a page of four, marks them, and stops before it writes
    // where it stopped. (Its messages arrive while the scan is paused again: dropped.)
    let before = table.requests();
    let mut late = std::pin::pin!(ledger.resume_round(&scan, at(3), 4));
    let waker = futures_util::task::noop_waker();
    let mut context = std::task::Context::from_waker(&waker);
    while table.requests() < before + 3 {
        assert!(late.as_mut().poll(&mut context).is_pending());
    }
    ledger.pause(&scan, at(4)).await.unwrap();
    ledger.resume(&scan, at(5)).await.unwrap();
    let overtaken = late.await.unwrap();
    assert_eq!(overtaken.messages.len(), 4);
    let sent: BTreeSet<String> = resume_rounds(&ledger, &scan, at(5), 4)
        .await
        .iter()
        .map(WorkItem::id)
        .collect();
    let pending: BTreeSet<String> = children.iter().map(WorkItem::id).collect();
    assert_eq!(sent.len(), 10, "every paused item sent again: {sent:?}");
    assert_eq!(sent, pending);
}

/// A round whose write of where it stopped applied with its answer lost still answers with
/// the messages it marked (the next round goes on from there, or, if the write did not apply,
/// sends them again). (Failed before the fix: the round answered an error and its four
/// messages were lost, the next rounds going on after them: 6 of 10 sent.)
#[tokio::test]
async fn a_round_whose_cursor_write_lost_its_answer_still_sends_what_it_marked() {
    let (ledger, table, scan, _) = root_done_with(10).await;
    ledger.pause(&scan, at(2)).await.unwrap();
    ledger.resume(&scan, at(3)).await.unwrap();
    // The scan row, a page, the marks, then where it stopped: applied, the answer lost.
    table.lose_answer(4, Retry::No);
    let mut sent = BTreeSet::new();
    if let Ok(round) = ledger.resume_round(&scan, at(3), 4).await {
        assert!(round.more, "{round:?}");
        sent.extend(
            round
                .messages
                .iter()
                .map(|m| WorkItem::decode(m).unwrap().id()),
        );
    }
    sent.extend(
        resume_rounds(&ledger, &scan, at(3), 4)
            .await
            .iter()
            .map(WorkItem::id),
    );
    assert_eq!(sent.len(), 10, "every paused item sent: {sent:?}");
}

/// After a pause longer than the re-drive's 15 minutes, every pending item looks stranded.
/// While a resume's rounds are still under way, those they have not reached are theirs: the
/// re-drive (sweep and status reads) leaves them alone, instead of sending each one now and
/// the rounds sending it again a minute later. (Failed before the fix: the look found up to
/// 200 of the 200 items the first round had not reached stranded.)
#[tokio::test]
async fn the_re_drive_leaves_the_items_a_resume_has_not_reached_to_its_rounds() {
    let (ledger, table, scan, _) = root_done_with(250).await;
    ledger.pause(&scan, at(2)).await.unwrap();
    let later = at(2) + Duration::minutes(30);
    table.set_now(later);
    ledger.resume(&scan, later).await.unwrap();
    let look = |now| {
        let (ledger, scan) = (ledger.clone(), scan.clone());
        async move {
            ledger
                .status_and_stranded(&scan, now, Duration::minutes(15), LEASE)
                .await
                .unwrap()
                .unwrap()
        }
    };
    let (status, stranded) = look(later).await;
    assert!(status.resuming, "{status:?}");
    assert_eq!(stranded.len(), 0, "before the first round");
    let first = ledger.resume_round(&scan, later, 50).await.unwrap();
    assert_eq!((first.messages.len(), first.more), (50, true));
    let (_, stranded) = look(later).await;
    assert_eq!(
        stranded.len(),
        0,
        "after the first round: {}",
        stranded.len()
    );
    // Once the rounds are done, an item nobody ran for 15 minutes is stranded again.
    resume_rounds(&ledger, &scan, later, 100).await;
    let (status, stranded) = look(later + Duration::minutes(16)).await;
    assert!(!status.resuming);
    assert_eq!(stranded.len(), 200, "a window of the 250 items");
}

/// A paused scan is read as often as a running one (a watch reads once a second, and a pause
/// may last hours): once no step can still be stopping, its status costs what a running
/// scan's does, the scan row and the counter shards, and not the claims window as well.
/// (Failed before the fix: 3 requests and 42 entities for every read of a scan paused an hour
/// ago.)
#[tokio::test]
async fn a_scan_paused_long_ago_reads_no_claims_window() {
    let (ledger, table, scan, _) = root_done_with(40).await;
    ledger.pause(&scan, at(2)).await.unwrap();
    let before = (table.requests(), table.entities());
    let read = ledger.read_status(&scan, at(3600)).await.unwrap().unwrap();
    let spent = (table.requests() - before.0, table.entities() - before.1);
    assert_eq!(read.status.state, State::Paused);
    assert_eq!(spent, (2, 17), "the scan row and one read of the 16 shards");
    assert_eq!(read.cost.requests, 2);
}
