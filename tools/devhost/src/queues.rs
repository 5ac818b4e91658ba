//! The queue trigger: polls a queue for one function on one instance, runs each message as an
//! invocation, and completes it as the Queues extension does (delete on success; on failure make
//! it visible again after visibilityTimeout, or move it to `<queue>-poison` at maxDequeueCount).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use tablescan::storage::queue::ReceivedMessage;
use tablescan::storage::QueueClient;
use tokio::sync::Notify;

use crate::config::{Function, QueueSettings};
use crate::dispatch::Dispatcher;
use crate::invocation::{queue_request, Answer, QueueMessage};
use crate::process::Handler;
use crate::say::{say, say_err};

/// Messages are received with a 10-minute lease, as the host does.
const LEASE: Duration = Duration::from_secs(600);

pub struct Listener {
    pub function: Function,
    pub handler: Arc<Handler>,
    pub dispatcher: Arc<Dispatcher>,
    pub settings: QueueSettings,
}

/// The message as a queue trigger's invocation describes it, its text decoded from `raw`.
fn invocation_message(message: &ReceivedMessage, raw: &[u8]) -> QueueMessage {
    QueueMessage {
        id: message.id.clone(),
        pop_receipt: message.pop_receipt.clone(),
        dequeue_count: message.dequeue_count,
        insertion_time: message.insertion_time.clone(),
        expiration_time: message.expiration_time.clone(),
        next_visible_time: message.time_next_visible.clone(),
        text: String::from_utf8_lossy(raw).into_owned(),
    }
}

impl Listener {
    pub async fn run(self: Arc<Self>) {
        let Some(trigger) = self.function.trigger().cloned() else {
            return;
        };
        let Some(queue_name) = trigger.queue_name.clone() else {
            return;
        };
        let queue = match self
            .dispatcher
            .queues(&trigger.connection)
            .and_then(|q| q.queue(&queue_name).map_err(|e| e.to_string()))
        {
            Ok(queue) => queue,
            Err(why) => {
                say_err!(
                    "[devhost] {}: cannot listen on {queue_name}: {why}",
                    self.function.name
                );
                return;
            }
        };
        let woken = self.dispatcher.watcher(self.handler.instance, &queue_name);
        let in_flight = Arc::new(AtomicUsize::new(0));
        let finished = Arc::new(Notify::new());
        let mut empty_polls: u32 = 0;
        loop {
            while in_flight.load(Ordering::SeqCst) > self.settings.new_batch_threshold {
                finished.notified().await;
            }
            // A missing queue or a storage hiccup backs off like an empty poll.
            let received = queue
                .receive(self.settings.batch_size, LEASE)
                .await
                .unwrap_or_default();
            if received.is_empty() {
                empty_polls += 1;
                tokio::select! {
                    _ = tokio::time::sleep(backoff(empty_polls, self.settings.max_polling_interval)) => {}
                    _ = woken.notified() => empty_polls = 0,
                }
                continue;
            }
            empty_polls = 0;
            for message in received {
                in_flight.fetch_add(1, Ordering::SeqCst);
                let this = self.clone();
                let queue = queue.clone();
                let (in_flight, finished) = (in_flight.clone(), finished.clone());
                tokio::spawn(async move {
                    this.process(&queue, message).await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    finished.notify_waiters();
                });
            }
        }
    }

    async fn process(&self, queue: &QueueClient, message: ReceivedMessage) {
        let started = Instant::now();
        let trigger = self
            .function
            .trigger()
            .expect("a queue function has a trigger");
        let max = self.settings.max_dequeue_count;
        let log = |outcome: &str| {
            say!(
                "[devhost] {} id={} dequeue={} {}ms {outcome}",
                self.function.name,
                message.id,
                message.dequeue_count,
                started.elapsed().as_millis()
            );
        };
        if message.dequeue_count > max {
            self.poison(queue, &message).await;
            log("poisoned before invoking (dequeue count over the limit)");
            return;
        }
        let raw = if self.settings.base64 {
            match base64::engine::general_purpose::STANDARD.decode(message.text.trim()) {
                Ok(bytes) => bytes,
                Err(_) => {
                    self.poison(queue, &message).await;
                    log("poisoned: not valid base64");
                    return;
                }
            }
        } else {
            message.text.clone().into_bytes()
        };
        let invocation = invocation_message(&message, &raw);
        let body = queue_request(
            &self.function.name,
            &trigger.name,
            trigger.binary,
            &invocation,
            &raw,
        );
        match self
            .dispatcher
            .invoke(&self.handler, &self.function, &body)
            .await
        {
            Answer::Success { outputs, logs } => {
                for line in logs {
                    say!("[handler {}] {line}", self.handler.instance);
                }
                match self
                    .dispatcher
                    .write_outputs(self.handler.instance, &self.function, &outputs)
                    .await
                {
                    Ok(written) => {
                        let _ = queue
                            .delete_message(&message.id, &message.pop_receipt)
                            .await;
                        log(&format!("succeeded, {written} output messages"));
                    }
                    Err(why) => {
                        self.release_or_poison(queue, &message).await;
                        log(&format!("failed writing outputs: {why}"));
                    }
                }
            }
            Answer::Failure(why) => {
                let poisoned = self.release_or_poison(queue, &message).await;
                log(&format!(
                    "failed{}: {why}",
                    if poisoned { ", moved to poison" } else { "" }
                ));
            }
            Answer::Hang => unreachable!("dispatch turns a hang into a failure"),
        }
    }

    /// After a failure: poison at the dequeue limit, else visible again after visibilityTimeout.
    async fn release_or_poison(&self, queue: &QueueClient, message: &ReceivedMessage) -> bool {
        if message.dequeue_count >= self.settings.max_dequeue_count {
            self.poison(queue, message).await;
            true
        } else {
            let _ = queue
                .update_message(
                    &message.id,
                    &message.pop_receipt,
                    self.settings.visibility_timeout,
                    None,
                )
                .await;
            false
        }
    }

    /// Copies the message to `<queue>-poison` (if that name is valid) and deletes it.
    async fn poison(&self, queue: &QueueClient, message: &ReceivedMessage) {
        let name = format!("{}-poison", queue.name());
        let trigger = self
            .function
            .trigger()
            .expect("a queue function has a trigger");
        if !queue.name().ends_with("-poison")
            && tablescan::storage::names::validate_queue_name(&name).is_ok()
        {
            // The stored text is copied as it is (it is already encoded as the queue stores it).
            let client = self
                .dispatcher
                .queues(&trigger.connection)
                .and_then(|q| q.queue(&name).map_err(|e| e.to_string()));
            if let Ok(poison) = client {
                let _ = poison.create().await;
                let options = tablescan::storage::queue::PutOptions {
                    encoding: tablescan::storage::queue::MessageEncoding::Text,
                    ..Default::default()
                };
                let _ = poison.put_message(message.text.as_bytes(), &options).await;
            }
        }
        let _ = queue
            .delete_message(&message.id, &message.pop_receipt)
            .await;
    }
}

/// The polling delay after `empty` empty polls in a row: from 100 ms, doubling with ±20%
/// jitter, up to the maximum polling interval.
pub fn backoff(empty: u32, max: Duration) -> Duration {
    let jitter = 0.8 + 0.4 * (uuid::Uuid::new_v4().as_u128() % 1000) as f64 / 1000.0;
    let millis = 100.0 * 2f64.powi(empty.saturating_sub(1).min(20) as i32) * jitter;
    Duration::from_secs_f64(millis / 1000.0)
        .min(max)
        .max(Duration::from_millis(100).min(max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polling_backs_off_to_the_maximum() {
        assert!(backoff(1, Duration::from_secs(2)) <= Duration::from_millis(120));
        assert!(backoff(1, Duration::from_secs(2)) >= Duration::from_millis(80));
        assert_eq!(backoff(30, Duration::from_secs(2)), Duration::from_secs(2));
    }
}
