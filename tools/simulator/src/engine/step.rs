//! One invocation of a queue-triggered function, as `functions::step` runs it: admitted by the
//! scan's pace (or given back to the queue), the item begun in the ledger, the real `run_step`
//! with its claim renewed every third of the lease, the finish recorded on a counter shard
//! (read again and resubmitted when another finish took the shard first), and a transient
//! failure handled as `step::failure::on_failure` does: tried again on the host's next delivery,
//! handed on in a fresh message at the last one, failed for good only once it has kept failing
//! for the outage window.

use std::sync::Arc;
use std::time::Duration;

use tablescan::functions::pacing::park::{parks, unpark_room};
use tablescan::functions::pacing::{give_back_delay, shape_for_admission};
use tablescan::scan::item::WorkItem;
use tablescan::scan::run_step;
use tablescan::scan::{StepError, StepReport};

use super::io::{ledger_request, Reader, Sink, StepClock};
use super::{lock, Engine, Message};
use crate::ledger_costs::{
    self, BEGIN, FAIL, RENEW, SHARD_CONFLICT_PAUSE_GROWTH_MS, SHARD_CONFLICT_PAUSE_MS,
};
use crate::sim::batch_latency;
use crate::tablescan::Action;

/// How an invocation ended.
enum Outcome {
    /// Its follow-ups, and the room it left in its scan's pace on its instance.
    Done(Vec<tablescan::scan::item::WorkItem>, usize),
    /// Not admitted in time: given back to its queue for a moment later.
    GivenBack,
    /// Not admitted, given back often enough before: parked in the ledger.
    Parked,
    /// Failed transiently; `recorded` if the ledger took the failure.
    Failed { recorded: bool },
}

/// Runs one delivered message on `instance` and hands its follow-ups on.
pub async fn invoke(engine: Arc<Engine>, instance: usize, queue: usize, message: Message) {
    let started = engine.now();
    let outcome = run(&engine, instance, &message).await;
    let end = engine.now();
    match outcome {
        Outcome::Done(follow_ups, room) => {
            send_follow_ups(&engine, started, end, follow_ups);
            super::parking::unpark_for_room(&engine, instance, end, room);
        }
        Outcome::GivenBack => give_back(&engine, end, queue, message),
        Outcome::Parked => super::parking::park(&engine, end, message),
        Outcome::Failed { recorded } => failed(&engine, started, end, queue, message, recorded),
    }
    engine.invocation_ended(instance, queue);
}

/// A step done: its follow-ups go to their queues.
fn send_follow_ups(engine: &Arc<Engine>, started: f64, end: f64, follow_ups: Vec<WorkItem>) {
    let mut world = engine.world();
    world.stats.executions_done_ok += 1;
    world.stats.longest_execution = world.stats.longest_execution.max(end - started);
    let mut queued = Vec::new();
    for item in follow_ups {
        world.stats.queue_operations += 1;
        let q = if matches!(item.task, tablescan::scan::item::ReadRange::Range { .. }) {
            0
        } else {
            1
        };
        queued.push((world.storage.put_message(end, q), item));
    }
    drop(world);
    for (at, item) in queued {
        let message = Message {
            item,
            deliveries: 0,
            failing_since: None,
        };
        engine.enqueue(message, at + engine.params.poll_ms / 1000.0);
    }
}

/// As the handler's `step::admission::give_back` does: out of sight for longer each time in a
/// row, in a fresh message.
fn give_back(engine: &Arc<Engine>, end: f64, queue: usize, message: Message) {
    let spread = engine.world().storage.unit();
    let delay = give_back_delay(message.item.given_back, spread).as_secs_f64();
    let at = engine.world().storage.put_message(end, queue);
    engine.world().stats.given_back += 1;
    engine.world().stats.queue_operations += 1;
    let item = WorkItem {
        given_back: message.item.given_back.saturating_add(1),
        ..message.item
    };
    let message = Message {
        item,
        deliveries: 0,
        failing_since: message.failing_since,
    };
    engine.enqueue(message, at + delay);
}

/// A step failed transiently: the host's retry, a hand-on in a fresh message, the re-drive, or
/// (past the outage window) failed for good.
fn failed(
    engine: &Arc<Engine>,
    started: f64,
    end: f64,
    queue: usize,
    message: Message,
    recorded: bool,
) {
    let p = &engine.params;
    let since = message.failing_since.unwrap_or(started);
    let deliveries = message.deliveries + 1;
    let mut world = engine.world();
    world.stats.longest_execution = world.stats.longest_execution.max(end - started);
    if end - since >= p.outage_window_s {
        world.stats.failed_for_good += 1;
        return;
    }
    if deliveries < p.max_dequeue_count {
        drop(world);
        let message = Message {
            deliveries,
            failing_since: Some(since),
            ..message
        };
        engine.enqueue(message, end + p.visibility_timeout_s);
        return;
    }
    let visible = if recorded {
        // Handed on in a fresh message, invisible for twice the host's pause.
        world.stats.handed_on += 1;
        world.storage.put_message(end, queue) + 2.0 * p.visibility_timeout_s
    } else {
        // The failure could not be recorded: the host's answer fails, the message goes to the
        // poison queue, and the re-drive sends the item again at its next look.
        world.stats.redriven += 1;
        (end / p.sweep_s).ceil() * p.sweep_s + p.poll_ms / 1000.0
    };
    drop(world);
    // A fresh message (handed on), or the one the ledger keeps (re-driven): the give-backs
    // before it are over either way.
    let message = Message {
        item: message.item.as_first_sent(),
        deliveries: 0,
        failing_since: Some(since),
    };
    engine.enqueue(message, visible);
}

async fn run(engine: &Arc<Engine>, instance: usize, message: &Message) -> Outcome {
    let p = &engine.params;
    tokio::time::sleep(Duration::from_secs_f64(p.invocation_ms / 1000.0)).await;
    let pace = engine.pacing.instance(engine, instance);
    let Some(crowded) = pace.admit(engine).await else {
        if parks(message.item.given_back) {
            return Outcome::Parked;
        }
        return Outcome::GivenBack;
    };
    let outcome = match claimed(engine, instance, message, &pace, crowded).await {
        Outcome::Done(follow_ups, _) => {
            let (slots, running, waiting) = pace.occupancy();
            let room = unpark_room(slots, running, waiting, follow_ups.len());
            Outcome::Done(follow_ups, room)
        }
        other => other,
    };
    pace.step_ended(engine.now());
    outcome
}

async fn claimed(
    engine: &Arc<Engine>,
    instance: usize,
    message: &Message,
    pace: &Arc<super::pace::InstancePace>,
    crowded: bool,
) -> Outcome {
    if begin(engine).await.is_err() {
        pace.ledger_strained();
        engine.world().stats.failed_on_ledger += 1;
        return Outcome::Failed { recorded: false };
    }
    let report = match run_renewing(engine, instance, message, pace, crowded).await {
        Ok(report) => report,
        Err(error) => {
            {
                let mut world = engine.world();
                match error {
                    StepError::Action(_) => world.stats.failed_on_write += 1,
                    _ => world.stats.failed_on_read += 1,
                }
            }
            let recorded = record_failure(engine, message).await;
            return Outcome::Failed { recorded };
        }
    };
    if engine.action == Action::Export {
        upload_export_blob(engine, report.rows_delivered).await;
    }
    if finish(engine, message, pace, report.follow_ups.len())
        .await
        .is_err()
    {
        pace.ledger_strained();
        engine.world().stats.failed_on_ledger += 1;
        let recorded = record_failure(engine, message).await;
        return Outcome::Failed { recorded };
    }
    {
        let mut world = engine.world();
        world.stats.rows_acted += report.rows_delivered;
        world.stats.queries += u64::from(report.queries);
    }
    Outcome::Done(report.follow_ups, 0)
}

/// `Ledger::begin`: the scan row, the pending row, the claim, one after another.
async fn begin(engine: &Engine) -> Result<(), ()> {
    let p = &engine.params;
    for _ in 0..BEGIN.requests {
        ledger_request(engine, 1.0, p.entity_ms / 1000.0)
            .await
            .map_err(|_| ())?;
    }
    let _ = BEGIN.entities;
    Ok(())
}

/// The real `run_step` on the simulated account, its claim renewed every third of the lease
/// while it runs (as the handler's step does).
async fn run_renewing(
    engine: &Arc<Engine>,
    instance: usize,
    message: &Message,
    pace: &Arc<super::pace::InstancePace>,
    crowded: bool,
) -> Result<StepReport, StepError<String>> {
    let p = &engine.params;
    let mut options = engine.options.clone();
    shape_for_admission(&mut options, crowded);
    let clock = StepClock(engine);
    let reader = Reader {
        engine: engine.clone(),
        pace: pace.clone(),
    };
    let mut sink = Sink {
        engine: engine.clone(),
        pace: pace.clone(),
        instance,
        within: engine.within,
    };
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let work = async {
        let report = run_step(&reader, &message.item, &options, &clock, &mut sink).await;
        let _ = stop.send(true);
        report
    };
    let renewal = async {
        let period = Duration::from_secs_f64(p.lease_s / 3.0);
        loop {
            // In this order when both are ready, run after run (`select!` picks at random
            // otherwise): a step that ended renews no more.
            tokio::select! {
                biased;
                _ = stopped.changed() => return,
                _ = tokio::time::sleep(period) => {}
            }
            let _ = ledger_request(engine, RENEW.entities as f64, p.entity_ms / 1000.0).await;
            engine.world().stats.renewals += 1;
        }
    };
    let (report, ()) = tokio::join!(work, renewal);
    report
}

/// An export step's blob: one upload of its rows (gzip JSON lines, 8 bytes a row as benches
/// measured), 50 ms plus 60 MB/s.
async fn upload_export_blob(engine: &Engine, rows: u64) {
    let bytes = rows as f64 * 8.0;
    tokio::time::sleep(Duration::from_secs_f64(0.05 + bytes / 60e6)).await;
    engine.world().stats.blob_writes += 1;
}

/// `Ledger::fail` of a transient failure: `true` if recorded.
async fn record_failure(engine: &Engine, _message: &Message) -> bool {
    let p = &engine.params;
    for _ in 0..FAIL.requests {
        if ledger_request(engine, 1.5, p.entity_ms / 1000.0)
            .await
            .is_err()
        {
            return false;
        }
    }
    true
}

/// The finish: its counter shard read, then one transaction with it; again, on another shard,
/// while another finish took the shard between the two (`Ledger::commit_counted`).
async fn finish(
    engine: &Engine,
    message: &Message,
    pace: &super::pace::InstancePace,
    children: usize,
) -> Result<(), ()> {
    let p = &engine.params;
    let id = message.item.id();
    let mut shard = tablescan::job::rows::shard_of(&id);
    let cost = ledger_costs::finish(children);
    let transaction = (cost.entities - 1) as f64;
    for conflict in 0..=30u32 {
        ledger_request(engine, 1.0, p.entity_ms / 1000.0).await?;
        let seen = lock(&engine.shards)[usize::from(shard)];
        ledger_request(engine, transaction, batch_latency(p, transaction)).await?;
        let committed = {
            let mut shards = lock(&engine.shards);
            let free = shards[usize::from(shard)] == seen;
            if free {
                shards[usize::from(shard)] += 1;
            }
            free
        };
        if committed {
            return Ok(());
        }
        engine.world().stats.shard_conflicts += 1;
        pace.ledger_strained();
        shard = tablescan::job::rows::next_shard(shard, &id, conflict);
        let pause =
            SHARD_CONFLICT_PAUSE_MS + SHARD_CONFLICT_PAUSE_GROWTH_MS * f64::from(conflict.min(10));
        tokio::time::sleep(Duration::from_secs_f64(pause / 1000.0)).await;
    }
    Err(())
}
