//! Handlers killed at chosen points of a step: before a query, after the action wrote, after
//! the ledger recorded the step (so before its outputs reach the host). A proxy in front of
//! Azurite sees the handler's requests and kills it (SIGKILL) at the chosen moment; devhost
//! restarts it and redelivers the message. Twice per scan, for each point (devhost gives up on
//! the third failure within 30 minutes, as the real host does). After each scan the copy must be
//! identical to its source and every count exact.
//!
//! Then many kills in one scan: handlers killed at random storage requests of every kind, two
//! per devhost, and devhost itself killed and started again between them (as the platform
//! replaces a host that gave up), six rounds in one copy.

mod common;
#[path = "../../../tests/common/fault_proxy.rs"]
mod fault_proxy;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use fault_proxy::{FaultProxy, Moment};
use serde_json::json;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Point {
    /// The handler dies as it sends a query of the source table.
    BeforeQuery,
    /// The handler dies once the copy's transaction into the target was done.
    AfterActionWrote,
    /// The handler dies once the ledger recorded the step: its outputs never reach the host.
    AfterLedgerWrote,
}

/// The handler devhost started last (one instance: the one making the requests).
fn newest_handler(lines: &Mutex<Vec<String>>) -> Option<u32> {
    handler_pids_in(lines).last().copied()
}

/// A copy scan whose ledger (AzureWebJobsStorage) and data (DATA) reach Azurite through two
/// proxies, so that a transaction of the ledger and one of the copy can be told apart.
struct ProxiedCopy {
    rows: Vec<tablescan::storage::table::entity::Entity>,
    source: tablescan::storage::TableClient,
    ledger_proxy: FaultProxy,
    data_proxy: FaultProxy,
    host: Host,
    target_name: String,
    id: String,
}

impl ProxiedCopy {
    async fn start(instances: usize, page_size: u32) -> ProxiedCopy {
        let rows = rows();
        let source = table_with(&rows).await;
        let (origin, account) = endpoint("TableEndpoint");
        let ledger_proxy = FaultProxy::start(origin.clone()).await;
        let data_proxy = FaultProxy::start(origin).await;
        let through = |proxy: &FaultProxy| {
            storage_with(&[(
                "TableEndpoint",
                &format!("http://{}{account}", proxy.address),
            )])
        };
        let (app_storage, data) = (through(&ledger_proxy), through(&data_proxy));
        let host = Host::start(
            instances,
            &[
                ("AzureWebJobsStorage", app_storage.as_str()),
                ("DATA", data.as_str()),
                ("TABLESCAN_STEP_MAX_QUERIES", "2"),
                ("TABLESCAN_STEP_LEASE_SECONDS", "3"),
                ("TABLESCAN_REDRIVE_AFTER_SECONDS", "2"),
            ],
        );
        let target_name = unique("crashed");
        let id = host
            .start_scan(json!({
                "table": source.name(), "connection": "DATA", "pageSize": page_size,
                "action": {"type": "copy", "table": target_name, "connection": "DATA"}
            }))
            .await;
        ProxiedCopy {
            rows,
            source,
            ledger_proxy,
            data_proxy,
            host,
            target_name,
            id,
        }
    }

    /// Waits for the copy to end; asserts it succeeded, exact and identical to its source.
    async fn assert_exact(&self, what: &str) {
        let done = self.host.wait(&self.id, Duration::from_secs(300)).await;
        assert_eq!(
            done["state"],
            "succeeded",
            "{what}: {done}\n{}",
            self.host.log()
        );
        assert_eq!(
            done["progress"]["rowsActed"],
            self.rows.len() as u64,
            "{what}: {done}"
        );
        let target = tables().table(&self.target_name).unwrap();
        assert_same_rows(
            &target,
            &self.source,
            &format!("{what}: the copy is identical"),
        )
        .await;
    }
}

async fn copy_with_kills(point: Point) {
    let copy = ProxiedCopy::start(1, 20).await;
    let (data_proxy, ledger_proxy, host) = (&copy.data_proxy, &copy.ledger_proxy, &copy.host);

    // Armed only now, so the scan's own creation is not hit: every fifth matching request,
    // until two handler processes were killed (requests already in flight from a killed one
    // do not count).
    let killed: Arc<Mutex<Vec<u32>>> = Arc::default();
    let seen = Arc::new(AtomicU32::new(0));
    let lines = host.lines.clone();
    let (proxy, method, path_has, moment) = match point {
        Point::BeforeQuery => (data_proxy, "GET", "$top=", Moment::Before),
        Point::AfterActionWrote => (data_proxy, "POST", "$batch", Moment::After),
        Point::AfterLedgerWrote => (ledger_proxy, "POST", "$batch", Moment::After),
    };
    let (killed_in, lines_in) = (killed.clone(), lines.clone());
    proxy.on(
        Box::new(move |m, path| {
            let matches = m == method && path.contains(path_has);
            if !matches || seen.fetch_add(1, Ordering::SeqCst) % 5 != 4 {
                return None;
            }
            let killed = killed_in.lock().unwrap();
            let alive = newest_handler(&lines_in).filter(|pid| !killed.contains(pid));
            (killed.len() < 2 && alive.is_some()).then_some(moment)
        }),
        Box::new(move || {
            let mut killed = killed.lock().unwrap();
            if let Some(pid) = newest_handler(&lines).filter(|pid| !killed.contains(pid)) {
                if killed.len() < 2 {
                    let _ = std::process::Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status();
                    killed.push(pid);
                }
            }
        }),
    );

    copy.assert_exact(&format!("{point:?}")).await;
    assert_eq!(
        host.handler_pids().len(),
        3,
        "{point:?}: two handlers killed, each restarted"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_killed_before_its_query_loses_nothing() {
    copy_with_kills(Point::BeforeQuery).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_killed_after_its_action_wrote_doubles_nothing() {
    copy_with_kills(Point::AfterActionWrote).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_killed_after_the_ledger_recorded_its_step_loses_no_follow_up() {
    copy_with_kills(Point::AfterLedgerWrote).await;
}

/// A small seeded generator (SplitMix64), so a failing run can be replayed with its seed.
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn one_in(&mut self, n: u64) -> bool {
        self.next() % n == 0
    }
}

/// A process that is still running (not gone, not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Kills allowed so far and the handlers killed, shared with the proxies' hooks.
#[derive(Default)]
struct Killing {
    allowed: usize,
    killed: Vec<u32>,
    /// Which kind of request each kill happened at.
    points: Vec<&'static str>,
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copy_survives_a_dozen_handler_kills_and_five_devhost_crashes() {
    const ROUNDS: usize = 6;
    const KILLS_PER_ROUND: usize = 2;
    let seed = std::env::var("TABLESCAN_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261122u64);
    let mut copy = ProxiedCopy::start(2, 10).await;

    // Every storage request of a step is a candidate point: a query of the source, a copy
    // transaction once done, a claim in the ledger before it is made, the ledger's record of a
    // step once made (its outputs then never reach the host). A candidate kills a live handler
    // of the current devhost with the odds given (the rarer requests get better odds), while
    // kills are allowed.
    let killing: Arc<Mutex<Killing>> = Arc::default();
    let dice = Arc::new(Mutex::new(Dice(seed)));
    let data_points = [
        ("GET", "$top=", Moment::Before, "before a source query", 6),
        (
            "POST",
            "$batch",
            Moment::After,
            "after a copy transaction",
            8,
        ),
    ];
    let ledger_points = [
        ("PUT", "pending", Moment::Before, "before a ledger claim", 3),
        (
            "POST",
            "$batch",
            Moment::After,
            "after the ledger recorded a step",
            2,
        ),
    ];
    for (proxy, points) in [
        (&copy.data_proxy, data_points),
        (&copy.ledger_proxy, ledger_points),
    ] {
        let chosen: Arc<Mutex<VecDeque<&'static str>>> = Arc::default();
        let trigger = {
            let (killing, dice, chosen) = (killing.clone(), dice.clone(), chosen.clone());
            Box::new(move |method: &str, path: &str| {
                let (_, _, moment, point, odds) = points
                    .iter()
                    .find(|(m, has, ..)| method == *m && path.contains(has))?;
                let killing = killing.lock().unwrap();
                if killing.killed.len() >= killing.allowed || !dice.lock().unwrap().one_in(*odds) {
                    return None;
                }
                chosen.lock().unwrap().push_back(point);
                Some(*moment)
            })
        };
        let act = {
            let (killing, dice, lines) = (killing.clone(), dice.clone(), copy.host.lines.clone());
            Box::new(move || {
                let point = chosen.lock().unwrap().pop_front().unwrap_or("?");
                let mut killing = killing.lock().unwrap();
                let live: Vec<u32> = handler_pids_in(&lines)
                    .into_iter()
                    .filter(|pid| !killing.killed.contains(pid) && alive(*pid))
                    .collect();
                if killing.killed.len() >= killing.allowed || live.is_empty() {
                    return;
                }
                let pid = live[(dice.lock().unwrap().next() % live.len() as u64) as usize];
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
                killing.killed.push(pid);
                killing.points.push(point);
            })
        };
        proxy.on(trigger, act);
    }

    let mut devhost_crashes = 0;
    for round in 1..=ROUNDS {
        killing.lock().unwrap().allowed = round * KILLS_PER_ROUND;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while killing.lock().unwrap().killed.len() < round * KILLS_PER_ROUND
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Two handler failures: a third would make devhost give up, as the real host does.
        // Kill it and start a new one, as the platform replaces a host that stopped.
        if round < ROUNDS {
            tokio::time::sleep(Duration::from_millis(300)).await;
            copy.host.crash_and_restart();
            devhost_crashes += 1;
        }
    }
    let (kills, points) = {
        let killing = killing.lock().unwrap();
        (killing.killed.len(), killing.points.clone())
    };
    let summary = format!(
        "seed {seed}: {kills} handler kills ({points:?}), {devhost_crashes} devhost crashes"
    );
    println!("{summary}");
    copy.assert_exact(&summary).await;
    assert!(
        kills >= 10,
        "the scan should have outlived most of the planned kills: {summary}"
    );
    assert_eq!(devhost_crashes, ROUNDS - 1);
}

/// The whole host killed mid-copy and started again: the messages it had taken stay out of
/// sight for its 10-minute hold, but the ledger knows their claims lapsed. The re-drive sweep
/// (every minute) sends those items again as soon as their lease has run out, so the copy
/// finishes within a couple of minutes, unobserved (no status read helps it), with nothing lost
/// or doubled. (Before: the copy waited out the 10-minute hold.)
#[tokio::test(flavor = "multi_thread")]
async fn a_host_killed_mid_copy_resumes_within_two_minutes_not_ten() {
    let rows = rows();
    let source = table_with(&rows).await;
    let mut host = Host::start(
        2,
        &[
            ("TABLESCAN_STEP_MAX_QUERIES", "1"),
            ("TABLESCAN_STEP_LEASE_SECONDS", "10"),
        ],
    );
    let target_name = unique("resumed");
    let id = host
        .start_scan(json!({
            "table": source.name(), "pageSize": 10, "maxRowsPerSecond": 400,
            "action": {"type": "copy", "table": target_name}
        }))
        .await;
    let running = host.wait_for_steps(&id, 3).await;
    assert_eq!(running["state"], "running", "{running}");
    host.crash_and_restart();
    let crashed = std::time::Instant::now();
    let done = host.wait_unobserved(&id, Duration::from_secs(150)).await;
    let took = crashed.elapsed();
    assert_eq!(done["state"], "succeeded", "{done}\n{}", host.log());
    assert_eq!(done["progress"]["rowsActed"], rows.len() as u64, "{done}");
    assert!(
        done["progress"]["stepsRedriven"].as_u64().unwrap_or(0) > 0,
        "the abandoned steps were sent again: {done}"
    );
    println!("finished {} s after the crash", took.as_secs());
    let target = tables().table(&target_name).unwrap();
    assert_same_rows(&target, &source, "the resumed copy is identical").await;
}
