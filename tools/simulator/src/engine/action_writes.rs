//! The writes of the actions that differ from a copy's, planned by the actions crate's own code:
//! an update's transactions are `actions::Change::transactions` (a partition's rows per merge
//! transaction of at most 100, `UPDATE_CONCURRENCY` in flight a step), a copy's and a delete's
//! are `actions::plan_transactions` (`COPY_CONCURRENCY`); a partition-keys step puts one
//! message per PartitionKey on the scan's output queue, `ENQUEUE_CONCURRENCY` in flight, as
//! `actions::EnqueueRows` with `MessageBody::PartitionKey` does, the page's messages first
//! waiting for the queue's back-off and the scan's share through the handler's own
//! `StepPace::before_put` (as `ActionSink::accept` does with `Action::queue_writes`), and a
//! refused put cutting the queue's back-off (as the storage pipeline does).

use std::time::Duration;
use tablescan::actions::{
    plan_transactions, COPY_CONCURRENCY, ENQUEUE_CONCURRENCY, PROCESS_WRITES_IN_FLIGHT,
    UPDATE_CONCURRENCY,
};
use tablescan::storage::pacing::queue::{put_answered, SLOW_PUT};
use tablescan::storage::retry::RetryPolicy;
use tablescan::storage::table::batch::Operation;
use tablescan::storage::table::entity::Entity;

use super::pace::InstancePace;
use super::{Engine, QUEUES};
use crate::sim::World;
use crate::storage::Limit;
use crate::tablescan::{Action, Tablescan};

/// The output queue's index among the storage model's queues: after the work queues.
pub const OUTPUT_QUEUE: usize = QUEUES;

/// The transactions that write `rows` for `action`, and how many a step keeps in flight.
pub fn transactions(action: Action, rows: Vec<Entity>) -> (Vec<Vec<Operation>>, usize) {
    match action {
        Action::Update => (Tablescan::change().transactions(rows), UPDATE_CONCURRENCY),
        _ => (plan_transactions(rows), COPY_CONCURRENCY),
    }
}

/// Puts one message per row (each the first row of a partition) on the output queue once the
/// queue's back-off and the scan's share allow all of them (`InstancePace::before_put`), then
/// on `ENQUEUE_CONCURRENCY` lanes within the process's `PROCESS_WRITES_IN_FLIGHT`, none started
/// after `deadline` (but the first), each sent again after refusals as the storage pipeline's
/// `RetryPolicy` says; waits for the last and returns how many were put, or an error once a
/// message was refused after every retry (the step fails and runs again, as the handler's).
pub async fn put_partition_keys(
    engine: &Engine,
    pace: &InstancePace,
    instance: usize,
    rows: Vec<Entity>,
    deadline: f64,
) -> Result<usize, String> {
    pace.before_put(rows.len() as u64)
        .await
        .map_err(|e| e.to_string())?;
    let start = engine.now();
    let mut lanes = vec![start; ENQUEUE_CONCURRENCY];
    let put_s = (engine.params.queue_put_ms / 1000.0).max(1e-3);
    let cap_rate = PROCESS_WRITES_IN_FLIGHT as f64 / put_s;
    let mut put = 0;
    let mut gave_up = None;
    let mut refused = false;
    {
        let mut world = engine.world();
        for row in rows {
            let lane = lanes
                .iter_mut()
                .min_by(|a, b| a.total_cmp(b))
                .expect("at least one lane");
            if put > 0 && *lane >= deadline {
                break;
            }
            let admitted = world
                .write_caps
                .entry(instance)
                .or_insert_with(|| Limit::new(cap_rate))
                .admit(*lane, 1.0);
            world.stats.queue_operations += 1;
            let (answer, retried) = put_with_retries(&mut world, admitted);
            // A put refused, or answered after `SLOW_PUT` in the queue's backlog, cuts the
            // queue's back-off (`pacing::queue::put_answered`, as `EnqueueRows::apply` does).
            let took = answer.unwrap_or_else(|last| last) - admitted;
            refused |= retried || Duration::from_secs_f64(took.max(0.0)) >= SLOW_PUT;
            match answer {
                Ok(done) => *lane = done,
                Err(last) => {
                    gave_up = Some(last);
                    break;
                }
            }
            if let Some(keys) = &mut world.stats.partition_keys {
                keys.push(row.partition_key);
            }
            put += 1;
        }
    }
    if refused {
        // The pipeline cuts the queue's back-off at each refusal, the action at each slow put
        // (`Governor::throttled`; cuts this close together count once).
        put_answered(&pace.queue, SLOW_PUT);
    }
    let end = lanes.into_iter().fold(start, f64::max);
    if let Some(last) = gave_up {
        engine.until(last.max(end)).await;
        return Err("a message was refused after every retry".into());
    }
    engine.until(end).await;
    Ok(put)
}

/// One put on the output queue at `t`, sent again after each refusal: when it is on the
/// queue, or `Err(when)` the last refusal came back; and whether it was refused at all.
fn put_with_retries(world: &mut World, t: f64) -> (Result<f64, f64>, bool) {
    let policy = RetryPolicy::default();
    let mut now = t;
    let mut retry = 0;
    loop {
        match world.storage.put_output_message(now, OUTPUT_QUEUE) {
            Ok(done) => return (Ok(done), retry > 0),
            Err(refused) if retry < policy.max_retries => {
                retry += 1;
                let unit = world.storage.unit();
                now = refused + policy.delay(retry, unit, None).as_secs_f64();
            }
            Err(refused) => return (Err(refused), true),
        }
    }
}
