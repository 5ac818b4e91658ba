//! The ledger's claim protocol against Azurite: a work item is run by one delivery at a time,
//! finished once, and failures show in the status.

mod common;

use common::{tables, unique_name};
use tablescan::job::spec::ScanSpec;
use tablescan::job::{Begin, Finish, Ledger, State, StepCounts};
use tablescan::scan::item::{Task, WorkItem};
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
        Finish::AlreadyFinished
    );
    let child = root.follow_up(Task::Partition {
        partition_key: "p".into(),
        row_keys: KeyRange::between(Some("r"), None),
        prefix: String::new(),
        cursor: None,
    });
    assert_eq!(
        ledger
            .finish(&root, &second, counts, std::slice::from_ref(&child), later)
            .await
            .unwrap(),
        Finish::Recorded
    );

    match ledger.begin(&root, later, lease).await.unwrap() {
        Begin::AlreadyDone(children) => assert_eq!(children, vec![child.encode()]),
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
        .fail(&root, &attempt, "table went away", false, now)
        .await
        .unwrap();
    let status = ledger.status(&root.scan, now).await.unwrap().unwrap();
    assert_eq!(status.progress.steps_retrying, 1);
    assert_eq!(status.state, State::Running);

    // Released: the retry can claim at once.
    let retry = claim(ledger.begin(&root, now, lease).await.unwrap());
    ledger
        .fail(&root, &retry, "table went away for good", true, now)
        .await
        .unwrap();
    let status = ledger.status(&root.scan, now).await.unwrap().unwrap();
    assert_eq!(status.state, State::Failed);
    assert_eq!(status.progress.steps_failed, 1);
    assert_eq!(status.errors[0].error, "table went away for good");
    assert_eq!(status.errors[0].attempts, 2);
    assert!(matches!(
        ledger.begin(&root, now, lease).await.unwrap(),
        Begin::UnknownItem
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
