//! Parking on the in-memory table: the rows, the race of two unparkers, and a property test that
//! parks, unparks (racing, crashing between the delete and the send), redelivers, and then lets
//! the safety nets (the sweep of old parked rows, the re-drive of stranded items) bring back
//! whatever was lost: every item finishes exactly once.

use std::collections::VecDeque;

use proptest::prelude::*;
use time::{Duration, OffsetDateTime};

use super::*;
use crate::ledger::{Begin, Finish, StepCounts};
use crate::work_item::{ReadRange, WorkItem};
use tablescan_api::ScanSpec;
use tablescan_engine::keys::KeyRange;
use tablescan_storage::table::in_memory::InMemoryTable;

const LEASE: Duration = Duration::seconds(60);

fn t0() -> OffsetDateTime {
    time::macros::datetime!(2026-11-26 00:00 UTC)
}

fn spec() -> ScanSpec {
    ScanSpec::parse(
        r#"{"table":"source","action":{"type":"count"}}"#,
        &|name: &str| (name == "AzureWebJobsStorage").then(|| "UseDevelopmentStorage=true".into()),
    )
    .expect("a valid spec")
}

/// A scan whose root finished with `n` children, all pending: the ledger, its table, the
/// children.
async fn scan_of(n: usize) -> (Ledger, InMemoryTable, Vec<WorkItem>) {
    let table = InMemoryTable::new("ledger");
    table.set_now(t0());
    let ledger = Ledger::in_memory(table.clone());
    ledger.ensure().await.unwrap();
    let root = WorkItem::root(crate::ledger::new_scan_id(), KeyRange::all(), "");
    ledger.create_scan(&spec(), &root, t0()).await.unwrap();
    let Begin::Run(claim) = ledger.begin(&root, t0(), LEASE).await.unwrap() else {
        panic!("the root runs");
    };
    let children: Vec<WorkItem> = (0..n)
        .map(|i| {
            root.follow_up(ReadRange::Partition {
                partition_key: format!("p{i}"),
                row_keys: KeyRange::all(),
                prefix: String::new(),
                cursor: None,
                unstarted: false,
            })
        })
        .collect();
    let finish = ledger
        .finish(&root, &claim, StepCounts::default(), &children, t0())
        .await
        .unwrap();
    assert!(matches!(finish, Finish::Recorded));
    (ledger, table, children)
}

#[tokio::test]
async fn a_parked_item_comes_back_once_and_oldest_first() {
    let (ledger, _, items) = scan_of(3).await;
    let scan = items[0].scan.clone();
    for (n, item) in items.iter().enumerate() {
        let at = t0() + Duration::seconds(n as i64);
        assert!(ledger
            .park(&scan, &item.id(), &item.encode(), at)
            .await
            .unwrap());
    }
    let first = ledger.unpark(&scan, 2, None).await.unwrap();
    assert_eq!(first, vec![items[0].encode(), items[1].encode()]);
    // Only those parked before a time: the last was parked at 2 s.
    let none = ledger
        .unpark(&scan, 4, Some(t0() + Duration::seconds(2)))
        .await
        .unwrap();
    assert!(none.is_empty());
    let rest = ledger.unpark(&scan, 4, None).await.unwrap();
    assert_eq!(rest, vec![items[2].encode()]);
    assert!(ledger.unpark(&scan, 4, None).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_oldest_parked_row_says_when_it_was_parked() {
    let (ledger, _table, children) = scan_of(2).await;
    let scan = children[0].scan.clone();
    assert_eq!(ledger.oldest_parked_ms(&scan).await.unwrap(), None);
    for (i, child) in children.iter().enumerate().rev() {
        let at = t0() + Duration::seconds(i as i64);
        assert!(ledger
            .park(&scan, &child.id(), &child.encode(), at)
            .await
            .unwrap());
    }
    let oldest = ledger.oldest_parked_ms(&scan).await.unwrap();
    assert_eq!(oldest, Some(super::millis(t0())));
    ledger.unpark(&scan, 1, None).await.unwrap();
    let next = ledger.oldest_parked_ms(&scan).await.unwrap();
    assert_eq!(next, Some(super::millis(t0() + Duration::seconds(1))));
}

#[tokio::test]
async fn two_unparkers_never_both_send_a_row() {
    let (ledger, _, items) = scan_of(4).await;
    let scan = items[0].scan.clone();
    for item in &items {
        ledger
            .park(&scan, &item.id(), &item.encode(), t0())
            .await
            .unwrap();
    }
    let (a, b) = tokio::join!(ledger.unpark(&scan, 3, None), ledger.unpark(&scan, 3, None));
    let (a, b) = (a.unwrap(), b.unwrap());
    // Both read the same three oldest; one transaction deletes them, the other loses on an etag.
    assert_eq!(a.len() + b.len(), 3, "{a:?} {b:?}");
    assert_eq!(ledger.unpark(&scan, 4, None).await.unwrap().len(), 1);
}

#[tokio::test]
async fn an_item_no_longer_pending_is_not_parked() {
    let (ledger, _, items) = scan_of(1).await;
    let item = &items[0];
    let Begin::Run(claim) = ledger.begin(item, t0(), LEASE).await.unwrap() else {
        panic!("runs");
    };
    ledger
        .finish(item, &claim, StepCounts::default(), &[], t0())
        .await
        .unwrap();
    let parked = ledger
        .park(&item.scan, &item.id(), &item.encode(), t0())
        .await
        .unwrap();
    assert!(!parked);
    assert!(ledger.unpark(&item.scan, 4, None).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_parked_item_is_not_stranded_while_its_row_stands() {
    let (ledger, _, items) = scan_of(1).await;
    let item = &items[0];
    let later = t0() + Duration::minutes(20);
    let stranded = |now| ledger.stranded(&item.scan, now, Duration::minutes(15), None, None);
    assert_eq!(
        stranded(later).await.unwrap().len(),
        1,
        "untouched 20 minutes"
    );
    ledger
        .park(&item.scan, &item.id(), &item.encode(), later)
        .await
        .unwrap();
    let soon = later + Duration::minutes(2);
    assert!(stranded(soon).await.unwrap().is_empty(), "parked just now");
}

/// One step of the property test's world.
#[derive(Debug, Clone)]
enum Op {
    /// The next message of the queue is delivered: run, or parked (not admitted).
    Deliver { park: bool },
    /// A step with room unparks up to `top`; `crash`: its host dies before sending them.
    Unpark { top: u16, crash: bool },
    /// Two steps unpark at once.
    Race { top: u16 },
    /// The re-drive sweep sends one page of up to `top` items parked over a minute ago and
    /// leaves the rest parked (the handler's sweep sends `SWEEP_PAGES` pages a look).
    Sweep { top: u16 },
    /// The queue delivers a copy of its next message (an answer lost, a host's retry).
    Duplicate,
    /// A message is lost (expired, deleted by hand).
    Lose,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<bool>().prop_map(|park| Op::Deliver { park }),
        2 => (1u16..5, any::<bool>()).prop_map(|(top, crash)| Op::Unpark { top, crash }),
        1 => (1u16..5).prop_map(|top| Op::Race { top }),
        1 => (1u16..3).prop_map(|top| Op::Sweep { top }),
        1 => Just(Op::Duplicate),
        1 => Just(Op::Lose),
    ]
}

/// The world: the queue's messages, and how many times each item's finish was recorded.
struct World {
    ledger: Ledger,
    table: InMemoryTable,
    scan: String,
    queue: VecDeque<String>,
    finished: std::collections::HashMap<String, u32>,
    now: OffsetDateTime,
}

impl World {
    async fn deliver(&mut self, park: bool) {
        let Some(message) = self.queue.pop_front() else {
            return;
        };
        let item = WorkItem::decode(&message).unwrap();
        if park {
            let first = item.as_first_sent().encode();
            if !self
                .ledger
                .park(&self.scan, &item.id(), &first, self.now)
                .await
                .unwrap()
            {
                // Not pending any more: given back, as the handler does; its delivery drops it.
                self.queue.push_back(message);
            }
            return;
        }
        if let Begin::Run(claim) = self.ledger.begin(&item, self.now, LEASE).await.unwrap() {
            let finish = self
                .ledger
                .finish(&item, &claim, StepCounts::default(), &[], self.now)
                .await
                .unwrap();
            if matches!(finish, Finish::Recorded) {
                *self.finished.entry(item.id()).or_default() += 1;
            }
        }
    }

    async fn unpark(&mut self, top: u16, crash: bool) {
        let messages = self.ledger.unpark(&self.scan, top, None).await.unwrap();
        if !crash {
            self.queue.extend(messages);
        }
    }

    /// One look of the sweep: a page of up to `top` rows parked over a minute ago.
    async fn sweep(&mut self, top: u16) {
        let before = Some(self.now - Duration::minutes(1));
        let swept = self.ledger.unpark(&self.scan, top, before).await.unwrap();
        self.queue.extend(swept);
    }

    async fn apply(&mut self, op: Op) {
        self.now += Duration::seconds(1);
        self.table.set_now(self.now);
        match op {
            Op::Deliver { park } => self.deliver(park).await,
            Op::Unpark { top, crash } => self.unpark(top, crash).await,
            Op::Race { top } => {
                let (a, b) = tokio::join!(
                    self.ledger.unpark(&self.scan, top, None),
                    self.ledger.unpark(&self.scan, top, None)
                );
                self.queue.extend(a.unwrap());
                self.queue.extend(b.unwrap());
            }
            Op::Sweep { top } => self.sweep(top).await,
            Op::Duplicate => {
                if let Some(message) = self.queue.front().cloned() {
                    self.queue.push_back(message);
                }
            }
            Op::Lose => {
                self.queue.pop_front();
            }
        }
    }

    /// The safety nets, then every message run until the queue is empty, as long as the
    /// scan has pending items: the sweep sends one small page of parked rows older than a
    /// minute a round (the rest wait for the next round, as a scan's parked items wait for the
    /// next minute's look), the re-drive sends stranded items (untouched for 15 minutes).
    async fn drain(&mut self) {
        for _ in 0..10 {
            self.now += Duration::minutes(20);
            self.table.set_now(self.now);
            self.sweep(2).await;
            let stranded = self
                .ledger
                .stranded(&self.scan, self.now, Duration::minutes(15), None, None)
                .await
                .unwrap();
            for item in stranded {
                if self
                    .ledger
                    .mark_redriven(&self.scan, &item, self.now)
                    .await
                    .unwrap()
                {
                    self.queue.push_back(item.message);
                }
            }
            while !self.queue.is_empty() {
                self.deliver(false).await;
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn parked_items_each_finish_exactly_once(
        items in 1usize..8,
        ops in prop::collection::vec(op(), 0..60),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let (ledger, table, children) = scan_of(items).await;
            let scan = children[0].scan.clone();
            let mut world = World {
                ledger,
                table,
                scan,
                queue: children.iter().map(WorkItem::encode).collect(),
                finished: Default::default(),
                now: t0(),
            };
            for op in ops {
                world.apply(op).await;
            }
            world.drain().await;
            for child in &children {
                assert_eq!(world.finished.get(&child.id()), Some(&1), "{}", child.id());
            }
            assert!(world.ledger.unpark(&world.scan, 99, None).await.unwrap().is_empty());
        });
    }
}
