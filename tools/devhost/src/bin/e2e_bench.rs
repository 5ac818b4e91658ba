//! End-to-end benchmark on Azurite: what a new user would compare, in one run on the same
//! 100,000-row NuGet-like table.
//!
//! - The official Python SDK (azure-data-tables, benches/python) pages serially through the
//!   whole table, every property (the baseline for a count), and copies it serially into a new
//!   table: pages of 1,000, upserted in transactions of up to 100 rows of one PartitionKey (the
//!   baseline for a copy).
//! - tablescan, through devhost at its default settings (no `maxRowsPerSecond`, no strategy:
//!   what a user gets who does not tune anything), counts the table on 1 and on 3 instances and
//!   copies it within the same account on 1 and on 3 instances.
//!
//! Every case runs `--rounds` times (3 by default), the cases of a job alternating within each
//! round, so that a slow minute of the shared machine falls on all of them alike; the table
//! reports each case's median, its ratio to its SDK baseline, and its rate after the first 10
//! seconds. The counts run first (after one unmeasured run of each, which warms the emulator's
//! JIT), then the copies, whose written rows leave the emulator slower. The SDK is timed inside
//! Python after its clients are created; tablescan from the start request to the time its
//! last step's finish stamped (the status's `finishedAt`, taken just before that finish's
//! ledger transaction; the status is read every second).
//!
//! Then, as before: a count through a selective filter beside the unfiltered count (3
//! instances; `n eq 7` matches 0.1% of the rows), and the handler's peak resident memory while
//! it runs 24 step invocations at once. Those two measure the engine and keep
//! `"maxRowsPerSecond": "unlimited"`, so that no cap shapes them.
//!
//! `--service-latency` runs the same cases with every table request of both, the SDK's and
//! tablescan's (its reads, writes and ledger; its queues stay direct), through a proxy that
//! answers each no sooner than the Table service would (`ServiceLatency::PUBLISHED`, the
//! simulator's model: a full page 137 ms), counted from the request's arrival. On this machine
//! the single-threaded emulator, not the reader, sets the ratio of the bare runs; against the
//! service a serial reader waits on latency, which parallel readers overlap (docs/performance.md,
//! "With the service's latency"). Writes target/bench/end_to_end_latency.md.
//!
//! Run by `scripts/bench`, which passes TABLESCAN_BENCH_STORAGE, TABLESCAN_BENCH_PYTHON,
//! TABLESCAN_BENCH_APP (an assembled function app folder) and TABLESCAN_BENCH_EMULATOR_PID (the
//! Azurite it started); writes target/bench/end_to_end.md (not with `--only`).

#[path = "../bench.rs"]
mod bench;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

#[path = "../../../../tests/common/fault_proxy.rs"]
mod fault_proxy;

use bench::{load, scan, scan_observed, start_devhost};
use fault_proxy::{FaultProxy, ServiceLatency};
use serde_json::{json, Value};
use tablescan::storage::{ClientOptions, StorageAccount, TableServiceClient};

const ROWS: usize = 100_000;
const TABLE: &str = "benche2e";
/// The start of a run that the steady rate leaves out (as benches/python/timing.py).
const WARM_UP_SECONDS: f64 = 10.0;
/// Fewer seconds than this after the warm-up give no steady rate (as timing.py).
const MIN_STEADY_SECONDS: f64 = 5.0;

/// End to end: tablescan at its defaults against the official Python SDK, count and copy.
#[derive(clap::Parser)]
#[command(name = "e2e_bench")]
struct Args {
    /// A connection string to the Azurite to use (scripts/bench starts one)
    #[arg(long, env = "TABLESCAN_BENCH_STORAGE", hide_env_values = true)]
    storage: String,
    /// The Python interpreter with azure-data-tables (scripts/bench prepares a venv)
    #[arg(long, env = "TABLESCAN_BENCH_PYTHON")]
    python: String,
    /// The assembled function app to run with devhost
    #[arg(long, env = "TABLESCAN_BENCH_APP", value_name = "DIR")]
    app: String,
    /// Rounds of every case; the table reports medians (1 for a quick check)
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Only the cases of this job, and nothing after them; the table is printed, not written
    /// to target/bench (a quick look while changing the engine)
    #[arg(long, value_enum)]
    only: Option<Job>,
    /// With --only: leave the SDK's case out (to profile tablescan's runs alone)
    #[arg(long, requires = "only")]
    without_sdk: bool,
    /// The emulator's process id: each case then reports the processor time the emulator
    /// spent on it, which says whether the emulator was the bottleneck (scripts/bench passes
    /// the Azurite it started)
    #[arg(long, env = "TABLESCAN_BENCH_EMULATOR_PID")]
    emulator_pid: Option<u32>,
    /// Every table request of the SDK and of tablescan through a proxy that adds the Table
    /// service's latency for it (a full page 137 ms); writes end_to_end_latency.md
    #[arg(long)]
    service_latency: bool,
}

/// What a case does with the table; a count is compared with the SDK's page-through, a copy
/// with the SDK's copy.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Job {
    Count,
    Copy,
}

/// Who does it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Runner {
    Sdk,
    Tablescan { instances: usize },
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct Case {
    job: Job,
    runner: Runner,
}

/// The cases in the order each round runs them.
const CASES: [Case; 6] = [
    Case {
        job: Job::Count,
        runner: Runner::Sdk,
    },
    Case {
        job: Job::Count,
        runner: Runner::Tablescan { instances: 1 },
    },
    Case {
        job: Job::Count,
        runner: Runner::Tablescan { instances: 3 },
    },
    Case {
        job: Job::Copy,
        runner: Runner::Sdk,
    },
    Case {
        job: Job::Copy,
        runner: Runner::Tablescan { instances: 1 },
    },
    Case {
        job: Job::Copy,
        runner: Runner::Tablescan { instances: 3 },
    },
];

impl Case {
    fn name(&self) -> String {
        match (self.job, self.runner) {
            (Job::Count, Runner::Sdk) => "azure-data-tables, serial page-through".into(),
            (Job::Copy, Runner::Sdk) => "azure-data-tables, serial copy".into(),
            (job, Runner::Tablescan { instances }) => format!(
                "tablescan {}, devhost, {instances} instance{}",
                if job == Job::Count { "count" } else { "copy" },
                if instances == 1 { "" } else { "s" }
            ),
        }
    }
}

/// One run of one case.
#[derive(Clone, Copy)]
struct Run {
    seconds: f64,
    /// Rows per second after the first 10 seconds, for runs long enough to have one.
    steady: Option<f64>,
    /// Queries sent (the SDK's pages).
    queries: u64,
    /// The share of the run's time the emulator was busy (its processor time over the same
    /// span), when its process is known.
    emulator_busy: Option<f64>,
}

/// What every case needs: where the table is, the SDK and the app.
struct Bench {
    storage: String,
    python: String,
    app: String,
    tables: TableServiceClient,
    emulator_pid: Option<u32>,
}

#[tokio::main]
async fn main() {
    let Args {
        storage,
        python,
        app,
        rounds,
        only,
        without_sdk,
        emulator_pid,
        service_latency,
    } = clap::Parser::parse();
    let account = StorageAccount::from_connection_string(&storage).unwrap();
    let tables = TableServiceClient::new(&account, ClientOptions::default()).unwrap();
    load(&tables, TABLE, ROWS).await;
    // The proxy lives as long as the runs; the SDK and devhost are given its address.
    let (storage, _proxy) = if service_latency {
        let (storage, proxy) = through_latency_proxy(&storage).await;
        (storage, Some(proxy))
    } else {
        (storage, None)
    };
    let bench = Bench {
        storage,
        python,
        app,
        tables,
        emulator_pid,
    };

    // The code as it was when the runs began: an edit during them is not what ran.
    let code = commit();
    // The command line as run, for the report.
    let mut flags = format!(" --rounds {rounds}");
    if let Some(job) = only {
        flags += match job {
            Job::Count => " --only count",
            Job::Copy => " --only copy",
        };
    }
    if without_sdk {
        flags += " --without-sdk";
    }
    if service_latency {
        flags += " --service-latency";
    }
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); CASES.len()];
    let chosen = |case: &Case| {
        only.is_none_or(|job| job == case.job) && !(without_sdk && case.runner == Runner::Sdk)
    };
    // The counts first, all their rounds, then the copies: the copies leave the emulator
    // slower (e2e_bench --rounds 3 at ad7a3af, the cases alternating: counts of 2.4 s in the
    // round after one round of copies, 3.5 and 3.9 s after two).
    for job in [Job::Count, Job::Copy] {
        let cases: Vec<(usize, &Case)> = CASES
            .iter()
            .enumerate()
            .filter(|(_, case)| case.job == job && chosen(case))
            .collect();
        if job == Job::Count || only == Some(Job::Copy) {
            // One run of each case of the first job unmeasured: the emulator's JIT compiles its
            // query paths during the first queries of a kind (e2e_bench --rounds 3 at ad7a3af,
            // on a fresh Azurite: a first count 3.4 s, the next 2.4 s).
            for (index, case) in &cases {
                let run = bench.run(case, &format!("{TABLE}warm{index}")).await;
                eprintln!("warm-up, {}: {:.1} s", case.name(), run.seconds);
            }
        }
        for round in 1..=rounds {
            for (index, case) in &cases {
                let run = bench
                    .run(case, &format!("{TABLE}copy{round}x{index}"))
                    .await;
                eprintln!("round {round}, {}: {:.1} s", case.name(), run.seconds);
                runs[*index].push(run);
            }
        }
    }
    if only.is_some() || service_latency {
        let report = format!(
            "{}\n\n{}\n",
            provenance(&code, &flags),
            comparison(&runs, rounds)
        );
        println!("{report}");
        if only.is_none() {
            write_report("end_to_end_latency.md", &report);
        }
        return;
    }
    let filtered = bench.filter_counts().await;
    let memory = bench.handler_memory().await;
    let report = format!(
        "{}\n\n{}\n\n{filtered}\n\n{memory}\n",
        provenance(&code, &flags),
        comparison(&runs, rounds)
    );
    println!("{report}");
    write_report("end_to_end.md", &report);
}

/// Writes `report` to target/bench/`name`.
fn write_report(name: &str, report: &str) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/bench");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(format!("{dir}/{name}"), report).unwrap();
}

/// A proxy in front of the table endpoint of `storage` (a connection string with an explicit
/// `TableEndpoint`, as scripts/azurite prints) adding the service's latency, and `storage` with
/// its table endpoint moved to the proxy.
async fn through_latency_proxy(storage: &str) -> (String, FaultProxy) {
    let endpoint = storage
        .split(';')
        .find_map(|part| part.strip_prefix("TableEndpoint="))
        .expect("--service-latency needs a connection string with a TableEndpoint");
    let (scheme, rest) = endpoint
        .split_once("://")
        .expect("an absolute TableEndpoint");
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let proxy = FaultProxy::start(format!("{scheme}://{host}")).await;
    proxy.set_latency(Some(ServiceLatency::PUBLISHED));
    let proxied = storage.replace(
        &format!("TableEndpoint={endpoint}"),
        &format!("TableEndpoint=http://{}/{path}", proxy.address),
    );
    (proxied, proxy)
}

impl Bench {
    /// Runs one case; a copy writes into `target`, which is checked and deleted afterwards so
    /// that the emulator holds one copy at a time.
    async fn run(&self, case: &Case, target: &str) -> Run {
        let run = match (case.job, case.runner) {
            (Job::Count, Runner::Sdk) => self.sdk("page_through.py", &[TABLE]),
            (Job::Copy, Runner::Sdk) => self.sdk("sdk_copy.py", &[TABLE, target]),
            (job, Runner::Tablescan { instances }) => self.tablescan(job, instances, target).await,
        };
        if case.job == Job::Copy {
            self.tables.delete_table(target).await.unwrap();
        }
        run
    }

    /// Runs one of benches/python's scripts against the table; its own timing.
    fn sdk(&self, script: &str, args: &[&str]) -> Run {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../benches/python")
            .join(script);
        let watch = EmulatorWatch::start(self.emulator_pid);
        let output = Command::new(&self.python)
            .arg(path)
            .arg(&self.storage)
            .args(args)
            .output()
            .expect("python runs");
        assert!(
            output.status.success(),
            "{script} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let result: Value = serde_json::from_slice(&output.stdout).expect("the script prints JSON");
        assert_eq!(
            result["rows"].as_u64(),
            Some(ROWS as u64),
            "{script}: {result}"
        );
        Run {
            seconds: result["seconds"].as_f64().unwrap(),
            steady: result["steady_rows_per_second"].as_f64(),
            queries: result["pages"].as_u64().unwrap(),
            emulator_busy: watch.busy(),
        }
    }

    /// A scan at tablescan's defaults through a devhost of its own, started before the clock
    /// and stopped after it (an idle devhost still polls its queues).
    async fn tablescan(&self, job: Job, instances: usize, target: &str) -> Run {
        let host = start_devhost(
            &self.app,
            &self.storage,
            instances,
            &format!("ledgere2e{instances}"),
        );
        let (action, counter) = match job {
            Job::Count => (json!({ "type": "count" }), "rowsRead"),
            Job::Copy => (json!({ "type": "copy", "table": target }), "rowsActed"),
        };
        let mut progress = Vec::new();
        let watch = EmulatorWatch::start(self.emulator_pid);
        let (seconds, status) = scan_observed(
            &host,
            json!({ "table": TABLE, "action": action }),
            |at, status| progress.push((at, status["progress"][counter].as_u64().unwrap_or(0))),
        )
        .await;
        let p = &status["progress"];
        assert_eq!(p[counter].as_u64(), Some(ROWS as u64), "{status}");
        assert_eq!(p["rowsFailed"].as_u64(), Some(0), "{status}");
        Run {
            seconds,
            steady: steady_rate(&progress),
            queries: p["queries"].as_u64().unwrap(),
            emulator_busy: watch.busy_over(seconds),
        }
    }

    /// A selective filter beside the unfiltered count, same instances, same table.
    async fn filter_counts(&self) -> String {
        let mut lines = Vec::new();
        for (name, filter) in [
            ("every row", None),
            ("filter n eq 7 (0.1%)", Some("n eq 7")),
        ] {
            let host = start_devhost(
                &self.app,
                &self.storage,
                3,
                &format!("ledgerfilter{}", filter.is_some() as u8),
            );
            let mut request = json!({ "table": TABLE, "maxRowsPerSecond": "unlimited",
                "action": { "type": "count" } });
            if let Some(filter) = filter {
                request["filter"] = json!(filter);
            }
            let (seconds, status) = scan(&host, request).await;
            let p = &status["progress"];
            let expected = if filter.is_some() { ROWS / 1000 } else { ROWS };
            assert_eq!(p["rowsRead"].as_u64(), Some(expected as u64), "{status}");
            eprintln!("{name}: {seconds:.1} s");
            lines.push(format!(
                "| {name} | {} | {seconds:.1} | {} | {:.2} | {} |",
                p["rowsRead"],
                p["stepsDone"],
                p["longestStepSeconds"].as_f64().unwrap_or(0.0),
                p["queries"]
            ));
        }
        format!(
            "A selective filter, side by side with the unfiltered count (3 instances, the same \
             table, no cap: `\"maxRowsPerSecond\": \"unlimited\"`; Azurite looks at every row of \
             a query's range and never returns an empty page, so the model's table in \
             docs/scan.md, Filters, is the one that shows how filtered scans split):\n\n\
             | count | rows matched | seconds | steps | longest step (s) | queries |\n\
             | --- | --- | --- | --- | --- | --- |\n{}",
            lines.join("\n")
        )
    }

    /// The handler's peak resident memory while one instance runs 24 copy scans at once, each
    /// over its own 10,000-row table (24 step invocations: the host's default concurrency per
    /// function). The scans are started together and followed side by side.
    async fn handler_memory(&self) -> String {
        let host = start_devhost(&self.app, &self.storage, 1, "ledgermemory");
        let mut names = Vec::new();
        for i in 0..24 {
            let name = format!("benchmem{i}");
            load(&self.tables, &name, 10_000).await;
            names.push(name);
        }
        let scans: Vec<_> = names
            .iter()
            .map(|name| {
                scan(
                    &host,
                    json!({ "table": name, "maxRowsPerSecond": "unlimited",
                        "action": { "type": "copy", "table": format!("{name}copy") } }),
                )
            })
            .collect();
        futures_util::future::join_all(scans).await;
        // VmHWM is each process's own high-water mark: read once, at the end, it holds the peak.
        let peak = handler_peak_kib(host.port);
        format!(
            "Handler memory: peak resident set {:.1} MiB while one handler ran 24 copy scans at \
             once (24 tables of 10,000 rows, pages of 1,000, no cap).",
            peak as f64 / 1024.0
        )
    }
}

/// The highest peak resident set (VmHWM, KiB) of the handlers whose parent is the devhost
/// listening on `port` (its command line names the port): other engineers' handlers on a shared
/// machine are not ours to measure.
fn handler_peak_kib(port: u16) -> u64 {
    let ours = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
            .unwrap_or_default()
            .contains(&format!("--port\0{port}\0"))
    };
    let mut peak = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read_to_string(entry.path().join("cmdline")).unwrap_or_default();
        if !cmdline
            .split('\0')
            .next()
            .is_some_and(|exe| exe.ends_with("/handler"))
        {
            continue;
        }
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .map(str::to_string)
        };
        if !field("PPid:").is_some_and(|parent| ours(&parent)) {
            continue;
        }
        if let Some(kib) = field("VmHWM:").and_then(|kib| kib.parse::<u64>().ok()) {
            peak = peak.max(kib);
        }
    }
    peak
}

/// Rows per second from the first reading at or after the warm-up to the last, given
/// `(seconds, rows)` readings in order; `None` for a run with too little time after the warm-up.
fn steady_rate(readings: &[(f64, u64)]) -> Option<f64> {
    let (end, rows) = *readings.last()?;
    let &(from, rows_then) = readings.iter().find(|(at, _)| *at >= WARM_UP_SECONDS)?;
    let span = end - from;
    (span >= MIN_STEADY_SECONDS).then(|| rows.saturating_sub(rows_then) as f64 / span)
}

/// The median (the mean of the middle two for an even count); `None` for no values.
fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut values: Vec<f64> = values.into_iter().collect();
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// The comparison table: one line per case, medians over the rounds, and each case's speed
/// against its SDK baseline (the baseline's median seconds over the case's).
fn comparison(runs: &[Vec<Run>], rounds: u32) -> String {
    let seconds = |index: usize| median(runs[index].iter().map(|r| r.seconds));
    let baseline = |job: Job| {
        let index = CASES
            .iter()
            .position(|c| c.job == job && c.runner == Runner::Sdk)
            .expect("every job has an SDK case");
        seconds(index)
    };
    let emulator_known = runs.iter().flatten().any(|r| r.emulator_busy.is_some());
    let mut lines = Vec::new();
    for (index, case) in CASES.iter().enumerate() {
        let Some(median_seconds) = seconds(index) else {
            continue;
        };
        let each: Vec<String> = runs[index]
            .iter()
            .map(|r| format!("{:.1}", r.seconds))
            .collect();
        let steady = median(runs[index].iter().filter_map(|r| r.steady))
            .map_or("-".to_string(), |rate| format!("{rate:.0}"));
        let queries = median(runs[index].iter().map(|r| r.queries as f64)).unwrap_or_default();
        let speed = match baseline(case.job) {
            Some(baseline) if case.runner == Runner::Sdk => {
                format!("{:.2} (baseline)", baseline / median_seconds)
            }
            Some(baseline) => format!("{:.2}", baseline / median_seconds),
            None => "-".to_string(),
        };
        let emulator = if emulator_known {
            let busy =
                median(runs[index].iter().filter_map(|r| r.emulator_busy)).map(|b| 100.0 * b);
            format!(
                " {} |",
                busy.map_or("-".to_string(), |busy| format!("{busy:.0}%"))
            )
        } else {
            String::new()
        };
        lines.push(format!(
            "| {} | {median_seconds:.1} | {} | {:.0} | {steady} | {queries:.0} | {speed} |{emulator}",
            case.name(),
            each.join(", "),
            ROWS as f64 / median_seconds,
        ));
    }
    let (emulator_head, emulator_rule, emulator_note) = if emulator_known {
        (
            " emulator busy |",
            " --- |",
            " Emulator busy: the processor time Azurite spent (its process's user and system \
             time) over the same span of wall-clock time: the Python process from its start to \
             its end, tablescan's scan from the start request to its last step's finish; \
             near 100% the emulator, one Node.js thread, was the bottleneck.",
        )
    } else {
        ("", "", "")
    };
    format!(
        "| run | seconds (median) | each round | rows/s | rows/s after the first 10 s | queries | \
         speed vs the SDK |{emulator_head}\n\
         | --- | --- | --- | --- | --- | --- | --- |{emulator_rule}\n{}\n\n\
         {ROWS} NuGet-like rows (package ids as PartitionKey, versions as RowKey, one Int32 \
         property); {rounds} round{}, the cases of a job in this order in each round, the counts' \
         rounds first (after one unmeasured run of each count), then the copies'. Speed vs the SDK: \
         the SDK's median seconds over the case's, a count against the page-through, a copy \
         against the SDK's copy (pages of 1,000 upserted in transactions of up to 100 rows of \
         one partition, one at a time). tablescan ran at its defaults (no `maxRowsPerSecond`, \
         prefix strategy), a devhost of its own per run; its copies wrote into a new table of \
         the same account. Seconds for the SDK from after client creation to the last row \
         (the copy's include creating its target, as tablescan's do); for tablescan from the \
         start request to the time its last step's finish stamped (the status's finishedAt, \
         taken just before that finish's ledger transaction; read every second). Rows/s after the \
         first 10 s: rows read (a count) or written (a copy) from the first reading past 10 s \
         to the end, for runs with 5 s or more of it (the median over the rounds that had \
         it).{emulator_note}",
        lines.join("\n"),
        if rounds == 1 { "" } else { "s" }
    )
}

/// The emulator's processor time over a span of wall-clock time.
struct EmulatorWatch {
    pid: Option<u32>,
    start: Option<(f64, Instant)>,
}

impl EmulatorWatch {
    fn start(pid: Option<u32>) -> Self {
        let start = pid
            .and_then(processor_seconds)
            .map(|cpu| (cpu, Instant::now()));
        if pid.is_some() && start.is_none() {
            eprintln!("the emulator's processor time cannot be read from /proc; no busy share");
        }
        EmulatorWatch { pid, start }
    }

    /// The emulator's processor time since `start` over the wall-clock time since then.
    fn busy(&self) -> Option<f64> {
        self.busy_over(self.start?.1.elapsed().as_secs_f64())
    }

    /// The emulator's processor time since `start` over `seconds` (a run timed to its end,
    /// which the reading of the processor time can follow by up to a status read's interval).
    fn busy_over(&self, seconds: f64) -> Option<f64> {
        let (cpu, _) = self.start?;
        let now = processor_seconds(self.pid?)?;
        Some((now - cpu) / seconds.max(f64::EPSILON))
    }
}

/// The processor seconds (user and system) a process has used, from /proc; `None` when it
/// cannot be read. Linux counts them in ticks of 1/100 s (USER_HZ, fixed at 100 on the
/// architectures this runs on).
fn processor_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let after_name = stat.get(stat.rfind(')')? + 1..)?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of the line (utime, stime) are the 12th and 13th after the name.
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// Which commit (`code`, as the runs began), when, on what machine and with what command the
/// figures were measured.
fn provenance(code: &str, flags: &str) -> String {
    let now = time::OffsetDateTime::now_utc();
    let date = now
        .format(time::macros::format_description!(
            "[year]-[month]-[day] [hour]:[minute] UTC"
        ))
        .unwrap_or_default();
    format!(
        "Commit {}, {date}, {}. Command: `scripts/bench`, which starts a private Azurite and \
         runs `target/release/e2e_bench{flags}`.",
        code,
        machine()
    )
}

/// The checked-out commit, and whether the work tree differed from it.
fn commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(hash) => {
            // A change of the docs alone is not a change of what was measured.
            let dirty = git(&[
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ".",
                ":(exclude)docs",
                ":(exclude)*.md",
            ])
            .is_some_and(|changes| !changes.is_empty());
            let note = if dirty {
                " (with uncommitted changes)"
            } else {
                ""
            };
            format!("`{hash}`{note}")
        }
        None => "unknown (no git)".to_string(),
    }
}

/// Cores, processor, memory and kernel, from /proc.
fn machine() -> String {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let processor = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
        .map_or("unknown processor", |(_, name)| name.trim());
    let memory_gib = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1_048_576.0);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!(
        "{cores} cores ({processor}), {memory_gib:.1} GiB memory, Linux {}",
        read("/proc/sys/kernel/osrelease").trim()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_steady_rate_starts_at_the_first_reading_past_the_warm_up() {
        let readings = [(5.0, 100), (9.9, 200), (10.2, 300), (15.2, 800)];
        assert_eq!(steady_rate(&readings), Some(100.0));
    }

    #[test]
    fn a_run_with_less_than_five_seconds_after_the_warm_up_has_no_steady_rate() {
        assert_eq!(steady_rate(&[(10.0, 1), (14.9, 2)]), None);
        assert_eq!(steady_rate(&[(3.0, 1), (9.0, 2)]), None);
        assert_eq!(steady_rate(&[]), None);
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median([3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median([4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median([]), None);
    }
}
