//! Timer triggers. The host runs a timer function on one instance at a time (a singleton lock
//! in the host's storage), at each occurrence of its schedule, and also at start-up when
//! `runOnStartup` is set. The invocation carries the timer's information under the trigger's
//! binding name, as the JSON object of the host's `TimerInfo` (DERIVED: the host sends
//! objects of other bindings this way; no capture of a timer request has been published).
//! A failed timer invocation is logged and not retried; the next occurrence runs as usual.

use std::sync::Arc;

use serde_json::{json, Value};
use tablescan::storage::table::entity::EdmDateTime;
use time::OffsetDateTime;

use crate::config::Function;
use crate::dispatch::Dispatcher;
use crate::invocation::{sys, Answer};
use crate::say::{say, say_err};
use crate::schedule::Schedule;

pub struct Timer {
    pub function: Function,
    pub schedule: Schedule,
    pub run_on_startup: bool,
    pub dispatcher: Arc<Dispatcher>,
}

fn host_time(time: OffsetDateTime) -> String {
    EdmDateTime::new(time).to_string()
}

/// The invocation body of one timer occurrence.
pub fn timer_request(
    function: &str,
    binding: &str,
    last: Option<OffsetDateTime>,
    next: Option<OffsetDateTime>,
    past_due: bool,
) -> Value {
    let now = OffsetDateTime::now_utc();
    let status = json!({
        "Last": last.map(host_time),
        "Next": next.map(host_time),
        "LastUpdated": host_time(now),
    });
    json!({
        "Data": { binding: { "Schedule": { "AdjustForDST": true }, "ScheduleStatus": status, "IsPastDue": past_due } },
        "Metadata": { "sys": sys(function) },
    })
}

impl Timer {
    /// Fires the function at each occurrence, for as long as devhost runs. Occurrences that
    /// pass while an invocation is still running are skipped, as the host's singleton lock does.
    pub async fn run(self: Arc<Self>) {
        let mut last = None;
        if self.run_on_startup {
            last = Some(self.fire(None).await);
        }
        loop {
            let now = OffsetDateTime::now_utc();
            let Some(next) = self.schedule.next_after(now) else {
                say_err!(
                    "[devhost] {}: the schedule never fires again",
                    self.function.name
                );
                return;
            };
            let wait = (next - now).try_into().unwrap_or_default();
            tokio::time::sleep(wait).await;
            last = Some(self.fire(last).await);
        }
    }

    /// One invocation; returns when it started.
    pub async fn fire(&self, last: Option<OffsetDateTime>) -> OffsetDateTime {
        let started = OffsetDateTime::now_utc();
        let Some(trigger) = self.function.trigger() else {
            return started;
        };
        let next = self.schedule.next_after(started);
        let body = timer_request(&self.function.name, &trigger.name, last, next, false);
        let handler = self.dispatcher.any_handler();
        let name = &self.function.name;
        match self
            .dispatcher
            .invoke(&handler, &self.function, &body)
            .await
        {
            Answer::Success { outputs, logs } => {
                for line in logs {
                    say!("[handler {}] {line}", handler.instance);
                }
                match self
                    .dispatcher
                    .write_outputs(handler.instance, &self.function, &outputs)
                    .await
                {
                    Ok(written) => {
                        say!("[devhost] {name} (timer): succeeded, {written} output messages")
                    }
                    Err(why) => say!("[devhost] {name} (timer): failed writing outputs: {why}"),
                }
            }
            Answer::Failure(why) => say!("[devhost] {name} (timer): failed: {why}"),
            Answer::Hang => unreachable!("dispatch turns a hang into a failure"),
        }
        started
    }
}
