//! How a scan presses on the accounts it reads and writes, with and without tablescan's
//! back-off: a model on virtual time (tokio's paused clock) that runs the real
//! `tablescan::storage::pacing::Governor` in each simulated instance.
//!
//! The model: every instance runs a number of steps at once; each step takes the next page of
//! the table from a shared counter, reads it from the source account, and acts on it (a copy
//! writes it to the target account in transactions of 100 rows, 32 at once; an enqueue puts one
//! message per row into the queue a hash of the row picks, 16 at once, counted in batches of 100
//! messages). An account (or queue) is a token bucket of its target per second holding at most a
//! second's worth, charged with what each request it lets through touches; a request that finds
//! it empty is answered 503 Server Busy (as the test proxy does). A refused request waits as the
//! step's retry policy says and is sent again.
//!
//! Without back-off (`--backoff off`, tablescan before its pacing work), steps send as fast as
//! they can and only their retry delays slow them down. With back-off, each instance's steps take
//! from one governor per account and per queue, cut by every refusal the instance sees, and the
//! instance runs only as many steps at once as the source's rate gives 300 entities a second
//! each, as the handler does.
//!
//! Prints one Markdown row: makespan, the bound the targets set, their ratio, requests sent and
//! refused.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use tablescan::storage::pacing::Governor;
use tablescan::storage::retry::RetryPolicy;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ActionKind {
    /// Copy to a table in another account.
    Copy,
    /// One message per row.
    Enqueue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Switch {
    On,
    Off,
}

#[derive(Debug, Parser)]
#[command(
    name = "pacing",
    about = "Models a scan's pressure on its accounts with and without back-off; prints one Markdown row",
    after_help = "Example: pacing --action copy --rows 35000000 --backoff on"
)]
struct Cli {
    #[arg(long, value_enum, default_value_t = ActionKind::Copy)]
    action: ActionKind,
    #[arg(long, default_value_t = 35_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    rows: u64,
    #[arg(long, value_enum, default_value_t = Switch::On)]
    backoff: Switch,
    /// Entities per second each account takes (its documented target).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..))]
    account_entities_per_second: u32,
    /// Messages per second each queue takes (its documented target).
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u32).range(1..))]
    queue_messages_per_second: u32,
    /// Queues an enqueue spreads its rows over.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    queues: u32,
    /// Instances running the scan.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    instances: u32,
    /// Steps each instance runs at once.
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u32).range(1..=64))]
    steps_per_instance: u32,
    /// Latency of a request the account serves, milliseconds.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..))]
    latency_ms: u32,
    /// Latency of a 503 answer, milliseconds.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    busy_reply_ms: u32,
    #[arg(long)]
    no_header: bool,
}

/// A target that takes `rate` units a second, holding at most a second's worth.
struct Bucket {
    rate: f64,
    tokens: f64,
    at: Instant,
    served: u64,
    refused: u64,
}

impl Bucket {
    fn new(rate: f64) -> Self {
        Bucket {
            rate,
            tokens: rate,
            at: Instant::now(),
            served: 0,
            refused: 0,
        }
    }

    /// Lets `units` through, or refuses them if the bucket is empty.
    fn admit(&mut self, units: f64) -> bool {
        let now = Instant::now();
        let earned = now.saturating_duration_since(self.at).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + earned).min(self.rate);
        self.at = now;
        if self.tokens <= 0.0 {
            self.refused += 1;
            return false;
        }
        self.tokens -= units;
        self.served += 1;
        true
    }
}

/// The model's accounts and queues, and each instance's governors.
struct Model {
    cli: Cli,
    targets: HashMap<String, Bucket>,
    governors: HashMap<(u32, String), Arc<Governor>>,
    /// Steps of each instance working on a page now.
    running: HashMap<u32, usize>,
    pages_left: u64,
}

/// How many steps an instance runs at once under back-off, as the handler decides it
/// (`functions::pacing`): enough to give each 300 entities a second of the source's rate, plus
/// one; all of them while the source has no limit.
fn slots(rate: Option<f64>) -> usize {
    match rate {
        Some(rate) => ((rate / 300.0).ceil() as usize + 1).clamp(2, 64),
        None => usize::MAX,
    }
}

/// Waits for a slot of `instance` (under back-off), and takes it.
async fn enter(model: &Shared, instance: u32) {
    loop {
        {
            let mut m = model.borrow_mut();
            let limit = if m.cli.backoff == Switch::On {
                let governor = m
                    .governors
                    .entry((instance, "source".to_string()))
                    .or_default()
                    .clone();
                slots(governor.rate())
            } else {
                usize::MAX
            };
            let running = m.running.entry(instance).or_default();
            if *running < limit {
                *running += 1;
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

type Shared = Rc<RefCell<Model>>;

/// One request of `units` to `target`, retried after refusals as a step's reads are: when it
/// is done.
async fn send(model: &Shared, instance: u32, target: &str, units: u64) {
    let (backoff, latency, busy) = {
        let m = model.borrow();
        (
            m.cli.backoff == Switch::On,
            Duration::from_millis(u64::from(m.cli.latency_ms)),
            Duration::from_millis(u64::from(m.cli.busy_reply_ms)),
        )
    };
    let governor = backoff.then(|| {
        model
            .borrow_mut()
            .governors
            .entry((instance, target.to_string()))
            .or_default()
            .clone()
    });
    let policy = RetryPolicy {
        max_retries: u32::MAX,
        ..tablescan::scan::budget::read_retry_policy()
    };
    let mut attempt = 0;
    let mut jitter = u64::from(instance).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    loop {
        if let Some(governor) = &governor {
            governor.take(units).await;
        }
        let admitted = model
            .borrow_mut()
            .targets
            .get_mut(target)
            .expect("every target is modelled")
            .admit(units as f64);
        if admitted {
            tokio::time::sleep(latency).await;
            return;
        }
        tokio::time::sleep(busy).await;
        if let Some(governor) = &governor {
            governor.throttled();
        }
        attempt += 1;
        jitter ^= jitter << 13;
        jitter ^= jitter >> 7;
        jitter ^= jitter << 17;
        let unit = (jitter % 1_000_000) as f64 / 1_000_000.0;
        tokio::time::sleep(policy.delay(attempt.min(8), unit, None)).await;
    }
}

/// Runs `futures` on this thread, at most `limit` at once.
async fn bounded(futures: Vec<impl std::future::Future<Output = ()> + 'static>, limit: usize) {
    let mut running = tokio::task::JoinSet::new();
    for future in futures {
        if running.len() >= limit {
            running.join_next().await;
        }
        running.spawn_local(future);
    }
    while running.join_next().await.is_some() {}
}

/// One step slot of an instance: pages until none is left.
async fn step(model: Shared, instance: u32, slot: u32) {
    const PAGE: u64 = 1_000;
    let mut spread = (u64::from(instance) << 32 | u64::from(slot)) | 1;
    loop {
        enter(&model, instance).await;
        let rows = {
            let mut m = model.borrow_mut();
            if m.pages_left == 0 {
                *m.running.entry(instance).or_default() -= 1;
                return;
            }
            m.pages_left -= 1;
            PAGE.min(m.cli.rows - m.pages_left * PAGE).clamp(1, PAGE)
        };
        send(&model, instance, "source", rows).await;
        let (action, queues) = {
            let m = model.borrow();
            (m.cli.action, m.cli.queues)
        };
        match action {
            ActionKind::Copy => {
                let writes: Vec<_> = (0..rows.div_ceil(100))
                    .map(|i| {
                        let model = model.clone();
                        let n = (rows - i * 100).min(100);
                        async move { send(&model, instance, "target", n).await }
                    })
                    .collect();
                bounded(writes, 32).await;
            }
            ActionKind::Enqueue => {
                // Rows spread by hash: each batch of 100 messages to one queue, 16 at once.
                let puts: Vec<_> = (0..rows.div_ceil(100))
                    .map(|i| {
                        let model = model.clone();
                        let n = (rows - i * 100).min(100);
                        spread ^= spread << 13;
                        spread ^= spread >> 7;
                        spread ^= spread << 17;
                        let queue = spread % u64::from(queues);
                        async move { send(&model, instance, &format!("queue{queue}"), n).await }
                    })
                    .collect();
                bounded(puts, 16).await;
            }
        }
        *model.borrow_mut().running.entry(instance).or_default() -= 1;
    }
}

/// The model's storage targets: the source account, and the copy's target account or the
/// enqueue's queues.
fn targets(cli: &Cli) -> HashMap<String, Bucket> {
    let account = f64::from(cli.account_entities_per_second);
    let queue_rate = f64::from(cli.queue_messages_per_second);
    let mut targets = HashMap::new();
    targets.insert("source".to_string(), Bucket::new(account));
    match cli.action {
        ActionKind::Copy => {
            targets.insert("target".to_string(), Bucket::new(account));
        }
        ActionKind::Enqueue => {
            for q in 0..cli.queues {
                targets.insert(format!("queue{q}"), Bucket::new(queue_rate));
            }
        }
    }
    targets
}

/// The least time the case can take, seconds: the rows at the slowest target's rate.
fn bound(cli: &Cli) -> f64 {
    let account = f64::from(cli.account_entities_per_second);
    let queue_rate = f64::from(cli.queue_messages_per_second);
    match cli.action {
        ActionKind::Copy => cli.rows as f64 / account,
        ActionKind::Enqueue => {
            let queues = f64::from(cli.queues) * queue_rate;
            (cli.rows as f64 / account).max(cli.rows as f64 / queues)
        }
    }
}

/// The case, in the report's words.
fn describe(cli: &Cli) -> String {
    format!(
        "{} {}M rows{}, {} instances x {} steps, back-off {}",
        match cli.action {
            ActionKind::Copy => "copy to another account",
            ActionKind::Enqueue => "enqueue",
        },
        cli.rows as f64 / 1e6,
        match cli.action {
            ActionKind::Enqueue => format!(" into {} queue(s)", cli.queues),
            ActionKind::Copy => String::new(),
        },
        cli.instances,
        cli.steps_per_instance,
        if cli.backoff == Switch::On {
            "on"
        } else {
            "off"
        },
    )
}

/// Prints the model's state every 50 simulated seconds (PACING_TRACE).
fn spawn_trace(model: Shared, start: Instant) {
    tokio::task::spawn_local(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(50)).await;
            let m = model.borrow();
            let rates: Vec<String> = (0..3)
                .map(|i| {
                    format!(
                        "{:?}",
                        m.governors
                            .get(&(i, "source".to_string()))
                            .map(|g| g.rate())
                    )
                })
                .collect();
            eprintln!(
                "{:.0} s: {} pages left, running {:?}, refused {:?}, rates {rates:?}",
                start.elapsed().as_secs_f64(),
                m.pages_left,
                m.running.values().sum::<usize>(),
                m.targets.values().map(|b| b.refused).collect::<Vec<_>>(),
            );
        }
    });
}

fn main() {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    let header = !cli.no_header;
    let row = runtime.block_on(async move {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async move {
                let targets = targets(&cli);
                let bound = bound(&cli);
                let describe = describe(&cli);
                let (instances, slots) = (cli.instances, cli.steps_per_instance);
                let model: Shared = Rc::new(RefCell::new(Model {
                    pages_left: cli.rows.div_ceil(1_000),
                    cli,
                    targets,
                    governors: HashMap::new(),
                    running: HashMap::new(),
                }));
                let start = Instant::now();
                if std::env::var_os("PACING_TRACE").is_some() {
                    spawn_trace(model.clone(), start);
                }
                let mut tasks = Vec::new();
                for instance in 0..instances {
                    for slot in 0..slots {
                        tasks.push(tokio::task::spawn_local(step(
                            model.clone(),
                            instance,
                            slot,
                        )));
                    }
                }
                for task in tasks {
                    task.await.expect("a step of the model");
                }
                let makespan = start.elapsed().as_secs_f64();
                let m = model.borrow();
                let served: u64 = m.targets.values().map(|b| b.served).sum();
                let refused: u64 = m.targets.values().map(|b| b.refused).sum();
                format!(
                    "| {describe} | {:.0} s | {:.0} s | {:.2} | {} | {} ({:.1}%) |",
                    makespan,
                    bound,
                    makespan / bound,
                    served + refused,
                    refused,
                    refused as f64 / (served + refused).max(1) as f64 * 100.0
                )
            })
            .await
    });
    if header {
        println!("| case | makespan | bound | ratio | requests | refused (503) |");
        println!("| --- | --- | --- | --- | --- | --- |");
    }
    println!("{row}");
}
