//! Schedules through devhost on Azurite, the schedules' timer every second: a retention
//! schedule deletes, at each occurrence, exactly the rows that had expired then (checked row
//! by row against the rows' own timestamps); each occurrence starts one scan with two handler
//! instances; a run still in flight makes the next occurrences skip; a downtime gives one late
//! run; pause, resume, run now, preview, list and delete from the CLI; bad schedules refused
//! naming the field.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use tablescan::storage::table::entity::{Entity, Value as Edm};
use tablescan::storage::table::query::Query;
use tablescan::storage::TableClient;

mod common;
use common::cli::*;
use common::*;

async fn cli(url: &str, args: &[&str]) -> std::process::Output {
    tablescan(url, args, &[]).await
}

async fn cli_ok(url: &str, args: &[&str]) -> String {
    let out = cli(url, args).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

async fn show(url: &str, name: &str) -> Value {
    serde_json::from_str(&cli_ok(url, &["--json", "schedule", "show", name]).await).unwrap()
}

/// The service's timestamp of each row of `table`, by key.
async fn stamps(table: &TableClient) -> BTreeMap<(String, String), String> {
    table
        .query_all(&Query::default())
        .await
        .unwrap()
        .into_iter()
        .map(|e| {
            let ts = e.timestamp.map(|t| t.to_string()).unwrap_or_default();
            ((e.partition_key, e.row_key), ts)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retention_schedule_deletes_exactly_what_expired_at_each_occurrence() {
    let logs = table_with(&[]).await;
    let host = Host::start(2, &[]);
    let url = url(&host);
    // Rows arrive for 9 s, five every 300 ms; their timestamps are read as they land.
    let writer = {
        let logs = logs.clone();
        tokio::spawn(async move {
            let mut seen = BTreeMap::new();
            for batch in 0..30u32 {
                let rows: Vec<Entity> = (0..5)
                    .map(|n| {
                        Entity::new(format!("p{}", batch % 3), format!("{batch:03}-{n}"))
                            .with("Level", Edm::String("Debug".into()))
                    })
                    .collect();
                load(&logs, &rows).await;
                for (key, ts) in stamps(&logs).await {
                    seen.entry(key).or_insert(ts);
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            seen
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let set = cli_ok(
        &url,
        &[
            "schedule",
            "set",
            "retention",
            "--every",
            "PT2S",
            "--table",
            logs.name(),
            "--older-than",
            "PT1S",
            "--delete",
        ],
    )
    .await;
    assert!(
        set.starts_with("set schedule retention: every PT2S"),
        "{set}"
    );
    let inserted = writer.await.unwrap();
    cli_ok(&url, &["schedule", "pause", "retention"]).await;
    // Every run's scan ends.
    let deadline = Instant::now() + Duration::from_secs(60);
    let schedule = loop {
        let schedule = show(&url, "retention").await;
        let runs = schedule["runs"].as_array().unwrap().clone();
        if runs
            .iter()
            .filter(|r| r["scan"].is_string())
            .all(|r| r["state"] == "succeeded")
        {
            break schedule;
        }
        assert!(Instant::now() < deadline, "{schedule}\n{}", host.log());
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let runs: Vec<Value> = schedule["runs"].as_array().unwrap().clone();
    let started: Vec<&Value> = runs.iter().filter(|r| r["scan"].is_string()).collect();
    assert!(started.len() >= 3, "{schedule}");
    assert!(runs.len() < 10, "every run is kept: {schedule}");
    // Each occurrence once, in order; one scan per run, and no other delete scan of the table.
    let occurrences: Vec<&str> = runs
        .iter()
        .map(|r| r["occurrence"].as_str().unwrap())
        .collect();
    assert!(
        occurrences.windows(2).all(|w| w[0] < w[1]),
        "{occurrences:?}"
    );
    let list: Value = serde_json::from_str(
        &cli_ok(
            &url,
            &[
                "--json",
                "list",
                "--action",
                "delete",
                "--table",
                logs.name(),
                "--limit",
                "100",
            ],
        )
        .await,
    )
    .unwrap();
    assert_eq!(
        list["scans"].as_array().unwrap().len(),
        started.len(),
        "{list}"
    );
    // Each run deleted exactly the rows whose timestamps were before its olderThan moment and
    // after the previous run's.
    let ledger = tablescan::job::Ledger::new(tables().table(&host.ledger).unwrap());
    let mut previous = String::new();
    for run in &started {
        let id = run["scan"].as_str().unwrap();
        let record = ledger.scan(id).await.unwrap().unwrap();
        let before = record.spec.older_than.unwrap().before;
        let expected = inserted
            .values()
            .filter(|ts| **ts >= previous && **ts < before)
            .count() as u64;
        assert_eq!(run["rowsActed"], expected, "run {run} before {before}");
        previous = before;
    }
    let left = stamps(&logs).await;
    let expected_left: Vec<_> = inserted
        .iter()
        .filter(|(_, ts)| **ts >= previous)
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(left.keys().cloned().collect::<Vec<_>>(), expected_left);
    assert!(
        !left.is_empty() && left.len() < inserted.len(),
        "{} of {}",
        left.len(),
        inserted.len()
    );
    cli_ok(&url, &["schedule", "delete", "retention"]).await;
    tables().delete_table(logs.name()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlaps_skip_a_downtime_runs_once_late_and_the_cli_manages_schedules() {
    let rows: Vec<Entity> = (0..300)
        .map(|n| Entity::new(format!("p{}", n % 5), format!("r{n:03}")))
        .collect();
    let source = table_with(&rows).await;
    let copy = unique("slow");
    let mut host = Host::start(2, &[]);
    let url = url(&host);

    // Bad schedules: 400s naming the field, nothing stored.
    for (args, field) in [
        (vec!["--cron", "61 * * * *"], "cron: "),
        (
            vec!["--cron", "0 3 * * *", "--time-zone", "Mars/Olympus"],
            "timeZone: ",
        ),
        (vec!["--every", "P1M"], "every: "),
        (
            vec!["--every", "PT1M", "--page-size", "5000"],
            "scan.pageSize: ",
        ),
    ] {
        let mut all = vec!["schedule", "set", "bad"];
        all.extend(args.iter().copied());
        all.extend(["--table", source.name(), "--count"]);
        let out = cli(&url, &all).await;
        assert_eq!(out.status.code(), Some(3), "{all:?}");
        assert!(
            text(&out.stderr).contains(field),
            "{all:?}: {}",
            text(&out.stderr)
        );
    }
    assert_eq!(cli_ok(&url, &["schedule", "list"]).await, "no schedules\n");

    // A copy slower than its interval: the occurrences meanwhile are skipped.
    cli_ok(
        &url,
        &[
            "schedule",
            "set",
            "slowcopy",
            "--every",
            "PT1S",
            "--table",
            source.name(),
            "--copy",
            &copy,
            "--max-rows-per-second",
            "60",
        ],
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let schedule = loop {
        let schedule = show(&url, "slowcopy").await;
        let runs = schedule["runs"].as_array().unwrap();
        if runs.iter().filter(|r| r["skipped"].is_string()).count() >= 2 {
            break schedule;
        }
        assert!(Instant::now() < deadline, "{schedule}\n{}", host.log());
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let runs = schedule["runs"].as_array().unwrap();
    assert_eq!(
        runs.iter().filter(|r| r["scan"].is_string()).count(),
        1,
        "{schedule}"
    );
    assert!(
        runs.iter().any(|r| r["skipped"]
            .as_str()
            .is_some_and(|s| s.contains("is still running"))),
        "{schedule}"
    );
    let refused = cli(&url, &["schedule", "run", "slowcopy"]).await;
    assert_eq!(refused.status.code(), Some(3));
    assert!(
        text(&refused.stderr).contains("still"),
        "{}",
        text(&refused.stderr)
    );
    let paused = cli_ok(&url, &["schedule", "pause", "slowcopy"]).await;
    assert!(paused.contains(", paused"), "{paused}");
    let listed = cli_ok(&url, &["schedule", "list"]).await;
    assert!(
        listed.starts_with("slowcopy  every PT1S paused  next -  last "),
        "{listed}"
    );

    // A quick schedule across a downtime of several occurrences: one late run, then on time.
    cli_ok(
        &url,
        &[
            "schedule",
            "set",
            "tick",
            "--every",
            "PT1S",
            "--table",
            source.name(),
            "--count",
        ],
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    host.down_for(Duration::from_secs(5));
    let url = common::cli::url(&host);
    // The downtime's run: late, counting the occurrences the 5 s down missed. A timer tick
    // held up a second or two on a loaded machine makes a run late too (missed 1 or 2; CI on
    // 7386bd4 met one), as it would under the real host: those are not the downtime's.
    let caught_up = |r: &&Value| r["late"] == true && r["missed"].as_u64().is_some_and(|m| m >= 3);
    // Waited for rather than slept on: the host's timer comes back when its first handler
    // answers, which took over 3 s on a loaded CI machine (5b27497).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let tick = show(&url, "tick").await;
        if tick["runs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| caught_up(&r))
        {
            break;
        }
        assert!(Instant::now() < deadline, "{tick}\n{}", host.log());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Paused before it is read, so that its runs stay under the ten kept.
    cli_ok(&url, &["schedule", "pause", "tick"]).await;
    let tick = show(&url, "tick").await;
    let runs = tick["runs"].as_array().unwrap();
    let downtime: Vec<&Value> = runs.iter().filter(caught_up).collect();
    assert_eq!(downtime.len(), 1, "{tick}");
    // (Another late run that missed 3 or more would be a second catch-up: counted above.)
    // Runs are on time when the timer keeps time: at least one, before the downtime or after
    // (started, or skipped as its previous run's scan was still in flight).
    assert!(
        runs.iter().any(|r| r["late"] != true),
        "no run on time: {tick}"
    );
    let occurrences: Vec<&str> = runs
        .iter()
        .map(|r| r["occurrence"].as_str().unwrap())
        .collect();
    assert!(
        occurrences.windows(2).all(|w| w[0] < w[1]),
        "{occurrences:?}"
    );
    assert!(runs.len() < 10, "every run is kept: {tick}");

    // The host and its handlers were killed mid-tick and started again: still one scan per
    // run, none for a missed occurrence (a start the timer was making at the pause is
    // recorded within moments).
    assert_every_scan_is_a_run(&url, source.name(), &["tick"]).await;

    // By hand: run now (a count, quick), preview (a dry run), resume, delete. A run now while
    // the schedule's last run is still in flight is refused (409, naming its scan) as an
    // overlap; the last run (started by the timer just before the pause, perhaps, or the late
    // one after the downtime) ends within seconds, and then the run now starts. A run whose
    // step was claimed by a handler the downtime killed goes on once the claim's lease (60 s)
    // is over: hence the minute and a half.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let ran = loop {
        let out = cli(&url, &["schedule", "run", "tick"]).await;
        if out.status.code() == Some(0) {
            break text(&out.stdout);
        }
        let why = text(&out.stderr);
        assert!(
            out.status.code() == Some(3)
                && why.contains("refused (409)")
                && why.contains("the previous run's scan")
                && std::time::Instant::now() < deadline,
            "schedule run tick: {why}\n{}",
            host.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(ran.starts_with("schedule tick: started scan "), "{ran}");
    let preview = cli_ok(&url, &["schedule", "preview", "slowcopy"]).await;
    assert!(preview.contains("started a dry run, scan "), "{preview}");
    let resumed = cli_ok(&url, &["schedule", "resume", "tick"]).await;
    assert!(
        !resumed.contains(", paused") && resumed.contains("  next "),
        "{resumed}"
    );
    for name in ["tick", "slowcopy"] {
        let gone = cli_ok(&url, &["schedule", "delete", name]).await;
        assert_eq!(
            gone,
            format!("schedule {name} deleted (the scans it started stay)\n")
        );
    }
    assert_eq!(cli_ok(&url, &["schedule", "list"]).await, "no schedules\n");
    let missing = cli(&url, &["schedule", "show", "tick"]).await;
    assert_eq!(missing.status.code(), Some(3));
    tables().delete_table(source.name()).await.unwrap();
    let _ = tables().delete_table(&copy).await;
}

/// Every count scan of `table` is the scan of exactly one run of `schedules` (read after the
/// scans are listed; tried again for a few seconds, as a start the timer was making may be
/// recorded just after the list). The schedules are paused, or their runs would pass the
/// ten kept.
async fn assert_every_scan_is_a_run(url: &str, table: &str, schedules: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let listed: Value = serde_json::from_str(
            &cli_ok(
                url,
                &[
                    "--json", "list", "--action", "count", "--table", table, "--limit", "100",
                ],
            )
            .await,
        )
        .unwrap();
        let mut run_scans = Vec::new();
        for name in schedules {
            let schedule = show(url, name).await;
            run_scans.extend(
                schedule["runs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|r| r["scan"].as_str().map(str::to_string)),
            );
        }
        let mut scans: Vec<String> = listed["scans"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect();
        scans.sort();
        run_scans.sort();
        if scans == run_scans {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "scans {scans:?}, runs' scans {run_scans:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A process killed between an occurrence's start and its record leaves the occurrence marked
/// on the schedule's row and, perhaps, its scan started. Both states are made here by hand
/// (the mark written, the scan started with the occurrence's idempotency key): the next tick
/// records the scan as that occurrence's run, and then handles the due occurrence; a mark with
/// no scan behind it is a missed occurrence; a paused schedule's interrupted start is recorded,
/// from the request its scan stored though the schedule's was replaced since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_interrupted_before_its_record_is_recorded_by_the_next_tick() {
    use tablescan::storage::table::batch::IfMatch;
    use tablescan::storage::table::entity::EdmDateTime;
    use tablescan::storage::table::WriteMode;

    let rows: Vec<Entity> = (0..50)
        .map(|n| Entity::new("p", format!("r{n:02}")))
        .collect();
    let source = table_with(&rows).await;
    let host = Host::start(1, &[]);
    let url = url(&host);
    let ledger_table = tables().table(&host.ledger).unwrap();
    let ledger = tablescan::job::Ledger::new(ledger_table.clone());
    let mut interrupted = BTreeMap::new();
    for name in ["started", "paused", "marked"] {
        cli_ok(
            &url,
            &[
                "schedule",
                "set",
                name,
                // Yearly: nothing comes due while the test runs.
                "--cron",
                "0 0 1 1 *",
                "--table",
                source.name(),
                "--count",
            ],
        )
        .await;
        let schedule = ledger.schedule(name).await.unwrap().unwrap();
        let last = schedule.last_occurrence.unwrap();
        let before = |t: time::OffsetDateTime| {
            schedule
                .timetable
                .latest_at_or_before(t - time::Duration::SECOND)
                .unwrap()
        };
        let (one, two) = (before(last), before(before(last)));
        interrupted.insert(name, ([two, one, last], schedule.request));
    }
    cli_ok(&url, &["schedule", "pause", "paused"]).await;
    // "started" and "paused": the scan of the occurrence before the last was started...
    let mut started = BTreeMap::new();
    for name in ["started", "paused"] {
        let ([_, occurrence, _], request) = &interrupted[name];
        let answer = reqwest::Client::new()
            .post(format!("{url}/api/scans"))
            .header("content-type", "application/json")
            .header(
                "Idempotency-Key",
                format!("schedule {name} {}", occurrence.unix_timestamp()),
            )
            .body(request.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 202);
        let answer: Value = answer.json().await.unwrap();
        started.insert(name, answer["id"].as_str().unwrap().to_string());
    }
    // "paused" has had its request replaced since (a copy now): its start is finished from the
    // request its scan stored, and the copy's target is never created.
    let never_made = unique("never");
    cli_ok(
        &url,
        &[
            "schedule",
            "set",
            "paused",
            "--cron",
            "0 0 1 1 *",
            "--table",
            source.name(),
            "--copy",
            &never_made,
        ],
    )
    .await;
    cli_ok(&url, &["schedule", "pause", "paused"]).await;
    let occurrence = interrupted["started"].0[1];
    // ...and the schedules' rows say so: marked, with the occurrence before unrecorded.
    for (name, ([two_before, one_before, _], _)) in &interrupted {
        let row = Entity::new("~schedules", *name)
            .with(
                "lastOccurrence",
                Edm::DateTime(EdmDateTime::new(*two_before)),
            )
            .with(
                "startingOccurrence",
                Edm::DateTime(EdmDateTime::new(*one_before)),
            );
        ledger_table
            .update(&row, WriteMode::Merge, &IfMatch::Any)
            .await
            .unwrap();
    }

    let stamp = |t: time::OffsetDateTime| EdmDateTime::new(t).to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    let (recovered, missed) = loop {
        let (recovered, missed) = (show(&url, "started").await, show(&url, "marked").await);
        let paused = show(&url, "paused").await;
        let handled_last = |schedule: &Value, last| {
            schedule["runs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["occurrence"] == stamp(last))
        };
        let paused_recorded = paused["runs"].as_array().unwrap().len() == 1;
        if handled_last(&recovered, interrupted["started"].0[2])
            && handled_last(&missed, interrupted["marked"].0[2])
            && paused_recorded
        {
            break (recovered, missed);
        }
        assert!(
            Instant::now() < deadline,
            "{recovered}\n{missed}\n{}",
            host.log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let runs = recovered["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{recovered}");
    assert_eq!(runs[0]["occurrence"], stamp(occurrence), "{recovered}");
    assert_eq!(runs[0]["scan"], started["started"].as_str(), "{recovered}");
    assert_eq!(runs[1]["missed"], Value::Null, "none missed: {recovered}");
    let runs = missed["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{missed}");
    assert_eq!(runs[0]["missed"], 1, "the marked occurrence: {missed}");
    assert_eq!(runs[0]["late"], true, "{missed}");
    assert!(runs[0]["scan"].is_string(), "{missed}");
    // A paused schedule's interrupted start is recorded too (its overlap check must see it);
    // nothing else runs.
    let paused = show(&url, "paused").await;
    assert_eq!(paused["paused"], true, "{paused}");
    assert_eq!(
        paused["runs"][0]["scan"],
        started["paused"].as_str(),
        "{paused}"
    );
    let target = tables().table(&never_made).unwrap();
    let read = target.query_all(&Query::default()).await;
    assert!(
        read.as_ref().is_err_and(|e| e.is_not_found()),
        "the replaced request's copy target was created: {read:?}"
    );
    for name in ["started", "marked"] {
        cli_ok(&url, &["schedule", "pause", name]).await;
    }
    assert_every_scan_is_a_run(&url, source.name(), &["started", "paused", "marked"]).await;
    for name in ["started", "paused", "marked"] {
        cli_ok(&url, &["schedule", "delete", name]).await;
    }
    tables().delete_table(source.name()).await.unwrap();
}
