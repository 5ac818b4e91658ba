//! The ledger's claim protocol against Azurite: a work item is run by one delivery at a time,
//! finished once, and failures show in the status.

mod common;

use common::{tables, unique_name};
use tablescan::job::activity::CLAIMS_WINDOW;
use tablescan::job::spec::ScanSpec;
use tablescan::job::{Begin, FailureRecord, Finish, Ledger, State, StepCounts};
use tablescan::job::{ReadRange, WorkItem};
use tablescan::scan::keys::KeyRange;
use time::{Duration, OffsetDateTime};

async fn ledger_with_scan() -> (Ledger, WorkItem) {
    let table = tables().table(&unique_name("ledger")).unwrap();
    let ledger = Ledger::new(table);
    ledger.ensure().await.unwrap();
    let spec = ScanSpec::parse(
        r#"{"table":"source","action":{"type":"count"}}"#,
        &|name: &str| {
            (name == "AzureWebJobsStorage").then(|| "UseDevelopmentStorage=true".to_string())
        },
    )
    .unwrap();
    let root = WorkItem::root(tablescan::job::ledger::new_scan_id(), KeyRange::all(), "");
    ledger
        .create_scan(&spec, &root, OffsetDateTime::now_utc())
        .await
        .unwrap();
    (ledger, root)
}

fn claim(begin: Begin) -> Box<tablescan::job::Claim> {
    match begin {
        Begin::Run(claim) => claim,
        other => panic!("expected a claim, got {other:?}"),
    }
}

#[tokio::test]
async fn one_delivery_at_a_time_and_a_lost_claim_is_noticed() {
    let (ledger, root) = ledger_with_scan().await;
    let now = OffsetDateTime::now_utc();
    let lease = Duration::seconds(60);
    let first = claim(ledger.begin(&root, now, lease).await.unwrap());
    assert_eq!(first.attempt, 1);
    assert!(matches!(
        ledger.begin(&root, now, lease).await.unwrap(),
        Begin::Busy(left) if left <= std::time::Duration::from_secs(60)
    ));

    // After the lease runs out another delivery may take over; the first one's finish is then
    // refused and its effects are not counted.
    let later = now + Duration::seconds(61);
    let second = claim(ledger.begin(&root, later, lease).await.unwrap());
    assert_eq!(second.attempt, 2);
    let counts = StepCounts {
        rows_read: 5,
        rows_acted: 5,
        ..StepCounts::default()
    };
    assert_eq!(
        ledger
            .finish(&root, &first, counts, &[], later)
            .await
            .unwrap(),
        Finish::ClaimLost
    );
    let child = root.follow_up(ReadRange::Partition {
        partition_key: "p".into(),
        row_keys: KeyRange::between(Some("r"), None),
        prefix: String::new(),
        cursor: None,
        unstarted: false,
    });
    assert_eq!(
        ledger
            .finish(&root, &second, counts, std::slice::from_ref(&child), later)
            .await
            .unwrap(),
        Finish::Recorded
    );

    match ledger.begin(&root, later, lease).await.unwrap() {
        Begin::AlreadyDone(children) => assert_eq!(children, vec![child.id()]),
        other => panic!("{other:?}"),
    }
    let status = ledger.status(&root.scan, later).await.unwrap().unwrap();
    assert_eq!(status.progress.rows_read, 5, "counted once");
    assert_eq!(status.progress.steps_pending, 1, "the child is pending");
    assert_eq!(status.state, State::Running);
}

#[tokio::test]
async fn failures_release_the_claim_and_the_last_one_fails_the_scan() {
    let (ledger, root) = ledger_with_scan().await;
    let now = OffsetDateTime::now_utc();
    let lease = Duration::seconds(60);
    let attempt = claim(ledger.begin(&root, now, lease).await.unwrap());
    ledger
        .fail(
            &root,
            &attempt,
            "table went away",
            FailureRecord::Retry {
                failing_since: None,
            },
            4,
            now,
        )
        .await
        .unwrap();
    let status = ledger.status(&root.scan, now).await.unwrap().unwrap();
    assert_eq!(status.progress.attempts_failed, 1);
    assert_eq!(status.progress.requests_throttled, 4);
    assert_eq!(status.progress.steps_pending, 1);
    assert_eq!(status.state, State::Running);

    // Released: the retry can claim at once.
    let retry = claim(ledger.begin(&root, now, lease).await.unwrap());
    ledger
        .fail(
            &root,
            &retry,
            "table went away for good",
            FailureRecord::Final,
            2,
            now,
        )
        .await
        .unwrap();
    let status = ledger.status(&root.scan, now).await.unwrap().unwrap();
    assert_eq!(status.state, State::Failed);
    assert_eq!(status.progress.steps_failed, 1);
    assert_eq!(status.progress.requests_throttled, 6);
    assert_eq!(status.errors[0].error, "table went away for good");
    assert_eq!(status.errors[0].attempts, 2);
    assert!(matches!(
        ledger.begin(&root, now, lease).await.unwrap(),
        Begin::FailedForGood
    ));
}

#[tokio::test]
async fn unknown_scans_and_cancelled_scans() {
    let (ledger, root) = ledger_with_scan().await;
    let now = OffsetDateTime::now_utc();
    let stranger = WorkItem::root(tablescan::job::ledger::new_scan_id(), KeyRange::all(), "");
    assert!(matches!(
        ledger
            .begin(&stranger, now, Duration::MINUTE)
            .await
            .unwrap(),
        Begin::UnknownScan
    ));
    assert!(ledger.cancel(&stranger.scan, now).await.unwrap().is_none());
    ledger.cancel(&root.scan, now).await.unwrap().unwrap();
    assert!(matches!(
        ledger.begin(&root, now, Duration::MINUTE).await.unwrap(),
        Begin::Cancelled
    ));
    let status = ledger.status(&root.scan, now).await.unwrap().unwrap();
    assert_eq!(status.state, State::Cancelled);
    assert_eq!(
        status.progress.steps_pending, 0,
        "the dropped item is no longer pending"
    );
}

/// A cancel while a step holds its claim: `cancelling` until the step records itself (or its
/// claim runs out), then `cancelled` with the step's counts.
#[tokio::test]
async fn a_cancelled_scan_is_cancelling_while_a_step_holds_a_claim() {
    let (ledger, root) = ledger_with_scan().await;
    let now = OffsetDateTime::now_utc();
    let running = claim(ledger.begin(&root, now, Duration::MINUTE).await.unwrap());
    ledger.cancel(&root.scan, now).await.unwrap().unwrap();
    let status = ledger.status(&root.scan, now).await.unwrap().unwrap();
    assert_eq!(status.state, State::Cancelling);
    assert_eq!(status.finished_at, None);
    let counts = StepCounts {
        rows_read: 7,
        rows_acted: 7,
        ..StepCounts::default()
    };
    ledger
        .finish(&root, &running, counts, &[], now)
        .await
        .unwrap();
    let status = ledger.status(&root.scan, now).await.unwrap().unwrap();
    assert_eq!(status.state, State::Cancelled);
    assert_eq!(status.progress.rows_acted, 7);
}

fn partition_child(root: &WorkItem, n: usize) -> WorkItem {
    root.follow_up(ReadRange::Partition {
        partition_key: format!("p{n:04}"),
        row_keys: KeyRange::all(),
        prefix: String::new(),
        cursor: None,
        unstarted: false,
    })
}

async fn run_to_done(ledger: &Ledger, item: &WorkItem, children: &[WorkItem]) {
    let now = OffsetDateTime::now_utc();
    let claim = claim(ledger.begin(item, now, Duration::MINUTE).await.unwrap());
    let counts = StepCounts {
        rows_read: 1,
        rows_acted: 1,
        ..StepCounts::default()
    };
    assert_eq!(
        ledger
            .finish(item, &claim, counts, children, now)
            .await
            .unwrap(),
        Finish::Recorded
    );
}

/// A redelivered message of a finished item sends again only its children that have not
/// started: none once they are all done, so one duplicate of the root never re-walks the tree.
#[tokio::test]
async fn a_redelivered_finished_item_sends_only_its_unstarted_children() {
    let (ledger, root) = ledger_with_scan().await;
    let children: Vec<WorkItem> = (0..3).map(|n| partition_child(&root, n)).collect();
    run_to_done(&ledger, &root, &children).await;
    let now = OffsetDateTime::now_utc();
    let again = |ledger: Ledger, root: WorkItem| async move {
        match ledger.begin(&root, now, Duration::MINUTE).await.unwrap() {
            Begin::AlreadyDone(ids) => ledger.unstarted(&root.scan, &ids, now).await.unwrap(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(again(ledger.clone(), root.clone()).await.len(), 3);
    run_to_done(&ledger, &children[0], &[]).await;
    // A running child is not sent again either.
    let _running = claim(
        ledger
            .begin(&children[1], now, Duration::MINUTE)
            .await
            .unwrap(),
    );
    assert_eq!(
        again(ledger.clone(), root.clone()).await,
        vec![children[2].encode()]
    );
    run_to_done(&ledger, &children[2], &[]).await;
    let status = ledger.status(&root.scan, now).await.unwrap().unwrap();
    assert_eq!(status.progress.steps_pending, 1, "{status:?}");
    assert_eq!(status.state, State::Running);
}

/// More children than one transaction holds: those written ahead count once the parent's
/// finish lists them; a finish that died after writing them ahead and chose other children
/// when it ran again leaves orphans that are dropped, never run.
#[tokio::test]
async fn children_written_ahead_count_only_when_their_parent_lists_them() {
    let (ledger, root) = ledger_with_scan().await;
    let now = OffsetDateTime::now_utc();
    let many: Vec<WorkItem> = (0..250).map(|n| partition_child(&root, n)).collect();
    run_to_done(&ledger, &root, &many).await;
    let status = ledger.status(&root.scan, now).await.unwrap().unwrap();
    assert_eq!(status.progress.steps_pending, 250);
    for child in [&many[0], &many[200]] {
        assert!(matches!(
            ledger.begin(child, now, Duration::MINUTE).await.unwrap(),
            Begin::Run(_)
        ));
    }

    // An orphan: a pending row written ahead by `root`, which its done row does not list.
    let orphan = partition_child(&root, 9999);
    let row = tablescan::job::rows::PendingRow {
        parent: Some(root.id()),
        ..tablescan::job::rows::PendingRow::new(orphan.encode(), 1)
    };
    ledger
        .table()
        .upsert(
            &row.to_entity(&root.scan, &orphan.id()),
            tablescan::storage::table::WriteMode::Replace,
        )
        .await
        .unwrap();
    assert!(matches!(
        ledger.begin(&orphan, now, Duration::MINUTE).await.unwrap(),
        Begin::Orphan
    ));
    assert!(matches!(
        ledger.begin(&orphan, now, Duration::MINUTE).await.unwrap(),
        Begin::UnknownItem
    ));
    let status = ledger.status(&root.scan, now).await.unwrap().unwrap();
    assert_eq!(
        status.progress.steps_pending, 250,
        "the orphan never counted"
    );
}

/// Finishes racing for the same counter shards all count: the totals are exact, and the scan
/// is complete exactly when the last item is done.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_finishes_count_exactly_and_completion_is_exact() {
    let (ledger, root) = ledger_with_scan().await;
    let children: Vec<WorkItem> = (0..60).map(|n| partition_child(&root, n)).collect();
    run_to_done(&ledger, &root, &children).await;
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in children.chunks(6) {
        let (ledger, chunk) = (ledger.clone(), chunk.to_vec());
        tasks.spawn(async move {
            for child in &chunk {
                run_to_done(&ledger, child, &[]).await;
            }
        });
    }
    let status = ledger
        .status(&root.scan, OffsetDateTime::now_utc())
        .await
        .unwrap()
        .unwrap();
    assert_ne!(status.state, State::Succeeded, "finishes are still running");
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let status = ledger
        .status(&root.scan, OffsetDateTime::now_utc())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.state, State::Succeeded, "{status:?}");
    assert_eq!(status.progress.steps_done, 61);
    assert_eq!(status.progress.rows_read, 61);
    assert_eq!(status.result.unwrap().rows, 61);
}

#[tokio::test]
async fn a_claim_is_seen_by_any_claimed_until_it_ends() {
    let (ledger, root) = ledger_with_scan().await;
    let now = OffsetDateTime::now_utc();
    assert!(!ledger.any_claimed(&root.scan, now).await.unwrap());
    let _claim = claim(ledger.begin(&root, now, Duration::MINUTE).await.unwrap());
    assert!(ledger.any_claimed(&root.scan, now).await.unwrap());
    assert!(!ledger
        .any_claimed(&root.scan, now + Duration::seconds(61))
        .await
        .unwrap());
}

/// Live claims count as running; claims that ran out without a finish or a release (the step's
/// process died) count as abandoned.
#[tokio::test]
async fn claims_are_counted_as_running_or_abandoned() {
    let (ledger, root) = ledger_with_scan().await;
    let now = OffsetDateTime::now_utc();
    let children: Vec<WorkItem> = (0..3).map(|n| partition_child(&root, n)).collect();
    run_to_done(&ledger, &root, &children).await;
    let none = ledger
        .claims(&root.scan, 3, CLAIMS_WINDOW, now)
        .await
        .unwrap();
    assert_eq!((none.running, none.abandoned), (0, 0));
    let _running = claim(
        ledger
            .begin(&children[0], now, Duration::MINUTE)
            .await
            .unwrap(),
    );
    let long_ago = now - Duration::minutes(5);
    let _died = claim(
        ledger
            .begin(&children[1], long_ago, Duration::MINUTE)
            .await
            .unwrap(),
    );
    let claims = ledger
        .claims(&root.scan, 3, CLAIMS_WINDOW, now)
        .await
        .unwrap();
    assert_eq!((claims.running, claims.abandoned), (1, 1));
    assert!(!claims.estimated, "three pending items are seen whole");
    // Both written moments ago (by the service's clock).
    let now_ms = tablescan::job::rows::millis(OffsetDateTime::now_utc());
    let oldest = claims.oldest_touched_ms.expect("an oldest pending item");
    assert!(now_ms.abs_diff(oldest) < 120_000, "{oldest} vs {now_ms}");
    let abandoned_at = claims
        .abandoned_touched_ms
        .expect("an abandoned claim's last write");
    assert!(
        now_ms.abs_diff(abandoned_at) < 120_000,
        "{abandoned_at} vs {now_ms}"
    );
}
