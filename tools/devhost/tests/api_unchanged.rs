//! The HTTP API answers as an earlier build answers (issue 35: the crate split changed nothing
//! for users). Opt in: `TABLESCAN_OLD_HANDLER` names the handler binary of the build to compare
//! with (the last build before the split is 8accf34; docs/architecture.md says how to build
//! it); without it the test does nothing.
//!
//! Both handlers run under devhost on Azurite, side by side, each with its own ledger, queues
//! and tables, and are sent the same requests: starts (one that runs, several refused), the
//! idempotent start, statuses, list pages and their refusals, cancel, pause, resume, retry,
//! remove and the refused messages' removal, each in a state where it works and in one where
//! it is refused. Every answer's status, `Location` and JSON are compared, with what differs
//! from run to run masked: scan ids (numbered in the order the scans started) and table names
//! (by role), times, rates, and the figures of a scan in flight (which depend on when the
//! request came).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tablescan::storage::table::entity::{Entity, Value as Edm};

mod common;
use common::*;

/// An answer of the API, masked.
#[derive(Debug, PartialEq)]
struct Exchange {
    label: &'static str,
    status: u16,
    location: Option<String>,
    body: Value,
}

/// Keys whose values are times.
const TIMES: &[&str] = &[
    "createdAt",
    "startedAt",
    "finishedAt",
    "pausedAt",
    "resumedAt",
    "lastStepAt",
    "manifestWrittenAt",
    "abandonedReturnBy",
];

/// Keys whose values are rates or durations measured as the scan ran.
const RATES: &[&str] = &["rowsPerSecond", "recentRowsPerSecond", "longestStepSeconds"];

/// Keys whose values say how a scan in flight moves now.
const IN_FLIGHT: &[&str] = &["activity", "pace", "history", "next"];

/// Keys whose values are ids made from a scan's id (a work item's).
const ITEM_IDS: &[&str] = &["step"];

/// What the storage service puts in an error: a request id of its own, each time another.
const REQUEST_ID: &str = "request id ";

/// Whether an exchange's figures depend on when it was sent (a scan in flight).
#[derive(Clone, Copy, PartialEq)]
enum Figures {
    Exact,
    /// Numbers masked, and a state that is still settling named by what it settles to.
    Timed,
}

/// One handler under devhost, its tables, and the masks of its names.
struct Run {
    host: Host,
    http: reqwest::Client,
    /// Literal text and what it stands for (ids and table names, by role).
    names: Vec<(String, String)>,
    exchanges: Vec<Exchange>,
}

impl Run {
    fn new(handler: &std::path::Path) -> Run {
        Run {
            host: Host::start_with(handler, 1, &[]),
            http: reqwest::Client::new(),
            names: Vec::new(),
            exchanges: Vec::new(),
        }
    }

    fn name(&mut self, literal: &str, role: &str) {
        self.names.push((literal.to_string(), format!("<{role}>")));
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/api/{path}", self.host.port)
    }

    /// Sends a request, records its answer masked, and returns it unmasked.
    async fn send(
        &mut self,
        label: &'static str,
        figures: Figures,
        request: reqwest::RequestBuilder,
    ) -> (u16, Value) {
        let answer = request.send().await.unwrap();
        let status = answer.status().as_u16();
        let location = answer
            .headers()
            .get("location")
            .map(|l| l.to_str().unwrap().to_string());
        let text = answer.text().await.unwrap();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        // A scan's id, named in the order the scans were started.
        if let Some(id) = body["id"].as_str() {
            if !self.names.iter().any(|(literal, _)| literal == id) {
                let n = self
                    .names
                    .iter()
                    .filter(|(_, r)| r.starts_with("<scan"))
                    .count();
                self.name(id, &format!("scan {}", n + 1));
            }
        }
        self.exchanges.push(Exchange {
            label,
            status,
            location: location.map(|l| self.masked_text(&l)),
            body: self.masked(&body, figures),
        });
        (status, body)
    }

    async fn start(&mut self, label: &'static str, body: &str) -> (u16, Value) {
        let request = self
            .http
            .post(self.url("scans"))
            .header("content-type", "application/json")
            .body(body.to_string());
        self.send(label, Figures::Exact, request).await
    }

    async fn post(&mut self, label: &'static str, figures: Figures, path: &str) -> (u16, Value) {
        let request = self.http.post(self.url(path));
        self.send(label, figures, request).await
    }

    async fn get(&mut self, label: &'static str, figures: Figures, path: &str) -> (u16, Value) {
        let request = self.http.get(self.url(path));
        self.send(label, figures, request).await
    }

    async fn delete(&mut self, label: &'static str, figures: Figures, path: &str) -> (u16, Value) {
        let request = self.http.delete(self.url(path));
        self.send(label, figures, request).await
    }

    /// `text` with the names replaced by their roles, the longest first (a table's name may
    /// begin with another's).
    fn masked_text(&self, text: &str) -> String {
        let mut names: Vec<&(String, String)> = self.names.iter().collect();
        names.sort_by_key(|(literal, _)| std::cmp::Reverse(literal.len()));
        let named = names
            .into_iter()
            .fold(text.to_string(), |text, (literal, role)| {
                text.replace(literal, role)
            });
        without_request_ids(&named)
    }

    fn masked(&self, value: &Value, figures: Figures) -> Value {
        match value {
            Value::String(text) => {
                let text = self.masked_text(text);
                match (figures, text.as_str()) {
                    (Figures::Timed, "pausing" | "paused") => json!("pausing or paused"),
                    (Figures::Timed, "cancelling" | "cancelled") => {
                        json!("cancelling or cancelled")
                    }
                    _ => Value::String(text),
                }
            }
            Value::Number(_) if figures == Figures::Timed => json!("<n>"),
            Value::Array(items) => items.iter().map(|i| self.masked(i, figures)).collect(),
            Value::Object(fields) => {
                let mut out = Map::new();
                for (key, field) in fields {
                    let masked = match key.as_str() {
                        _ if field.is_null() => Value::Null,
                        key if TIMES.contains(&key) => json!("<time>"),
                        key if RATES.contains(&key) => json!("<rate>"),
                        key if IN_FLIGHT.contains(&key) => json!("<in flight>"),
                        key if ITEM_IDS.contains(&key) => json!("<item>"),
                        _ => self.masked(field, figures),
                    };
                    out.insert(self.masked_text(key), masked);
                }
                Value::Object(out)
            }
            other => other.clone(),
        }
    }

    /// Waits until scan `id`'s state is one of `states`.
    async fn wait_for(&self, id: &str, states: &[&str]) -> Value {
        self.wait_until(id, |status| states.iter().any(|s| status["state"] == *s))
            .await
    }

    /// Waits until scan `id`'s status is `done`.
    async fn wait_until(&self, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status = self.host.status(id).await;
            if done(&status) {
                return status;
            }
            assert!(Instant::now() < deadline, "{status}\n{}", self.host.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// `text` with the storage service's request ids (a UUID after "request id ") masked.
fn without_request_ids(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(REQUEST_ID) {
        let after = at + REQUEST_ID.len();
        out.push_str(&rest[..after]);
        let id_len = rest[after..]
            .find(|c: char| !(c.is_ascii_hexdigit() || c == '-'))
            .unwrap_or(rest.len() - after);
        out.push_str("<request>");
        rest = &rest[after + id_len..];
    }
    out.push_str(rest);
    out
}

fn rows(partitions: usize, per_partition: usize) -> Vec<Entity> {
    (0..partitions)
        .flat_map(|p| {
            (0..per_partition).map(move |r| {
                Entity::new(format!("p{p}"), format!("r{r:03}")).with("n", Edm::Int64(r as i64))
            })
        })
        .collect()
}

/// An id no scan has.
const NO_SCAN: &str = "00000000000000000000000000000000";

/// The requests, in order, and their answers.
async fn converse(run: &mut Run) {
    use Figures::*;
    let small = table_with(&rows(3, 10)).await;
    let slow = table_with(&rows(4, 50)).await;
    let doomed = table_with(&rows(1, 20)).await;
    let copy = unique("cmpcopy");
    for (table, role) in [
        (small.name(), "small"),
        (slow.name(), "slow"),
        (doomed.name(), "doomed"),
        (copy.as_str(), "copy"),
    ] {
        run.name(table, role);
    }
    let (small, slow, doomed) = (small.name(), slow.name(), doomed.name().to_string());

    // Starts, and starts refused.
    let count = format!(r#"{{"table": "{small}", "action": {{"type": "count"}}}}"#);
    let request = run
        .http
        .post(run.url("scans"))
        .header("Idempotency-Key", "compare-1")
        .body(count.clone());
    let (_, started) = run.send("start: a count", Exact, request).await;
    let counted = started["id"].as_str().unwrap().to_string();
    let again = run
        .http
        .post(run.url("scans"))
        .header("Idempotency-Key", "compare-1")
        .body(count);
    run.send("start: the same idempotency key", Exact, again)
        .await;
    for (label, body) in [
        ("start: bad JSON", r#"{"table": "#.to_string()),
        ("start: no body", String::new()),
        ("start: not an object", "[1, 2]".to_string()),
        (
            "start: an unknown field",
            format!(r#"{{"table": "{small}", "action": {{"type": "count"}}, "colour": "red"}}"#),
        ),
        (
            "start: pageSize out of range",
            format!(r#"{{"table": "{small}", "action": {{"type": "count"}}, "pageSize": 5000}}"#),
        ),
        (
            "start: pageSize of the wrong type",
            format!(r#"{{"table": "{small}", "action": {{"type": "count"}}, "pageSize": "ten"}}"#),
        ),
        (
            "start: no table",
            r#"{"action": {"type": "count"}}"#.to_string(),
        ),
        ("start: no action", format!(r#"{{"table": "{small}"}}"#)),
        (
            "start: an unknown action",
            format!(r#"{{"table": "{small}", "action": {{"type": "shred"}}}}"#),
        ),
        (
            "start: a bad table name",
            r#"{"table": "no such!", "action": {"type": "count"}}"#.to_string(),
        ),
        (
            "start: a missing table",
            r#"{"table": "tablescannosuchtable", "action": {"type": "count"}}"#.to_string(),
        ),
        (
            "start: a copy without its target",
            format!(r#"{{"table": "{small}", "action": {{"type": "copy"}}}}"#),
        ),
        (
            "start: queue and queues",
            format!(
                r#"{{"table": "{small}", "action": {{"type": "enqueue", "queue": "a", "queues": ["b", "c"]}}}}"#
            ),
        ),
        (
            "start: a bad olderThan",
            format!(
                r#"{{"table": "{small}", "olderThan": "yesterday", "action": {{"type": "delete"}}}}"#
            ),
        ),
        (
            "start: a bad maxRowsPerSecond",
            format!(
                r#"{{"table": "{small}", "maxRowsPerSecond": "fast", "action": {{"type": "count"}}}}"#
            ),
        ),
        (
            "start: a bad scope",
            format!(
                r#"{{"table": "{small}", "scope": {{"prefix": "p", "after": "a"}}, "action": {{"type": "count"}}}}"#
            ),
        ),
        (
            "start: an unknown connection",
            format!(
                r#"{{"table": "{small}", "connection": "Nowhere", "action": {{"type": "count"}}}}"#
            ),
        ),
    ] {
        run.start(label, &body).await;
    }

    // The count's status, and what is refused on a finished scan.
    run.wait_for(&counted, &["succeeded"]).await;
    run.get(
        "status: a count that succeeded",
        Exact,
        &format!("scans/{counted}"),
    )
    .await;
    run.get("status: no such scan", Exact, &format!("scans/{NO_SCAN}"))
        .await;
    run.get("status: not an id", Exact, "scans/nope").await;
    for (label, verb) in [
        ("cancel: a finished scan", "cancel"),
        ("pause: a finished scan", "pause"),
        ("resume: a finished scan", "resume"),
        ("retry: a succeeded scan", "retry"),
    ] {
        run.post(label, Exact, &format!("scans/{counted}/{verb}"))
            .await;
    }
    for (label, verb) in [
        ("cancel: no such scan", "cancel"),
        ("pause: no such scan", "pause"),
        ("resume: no such scan", "resume"),
        ("retry: no such scan", "retry"),
    ] {
        run.post(label, Exact, &format!("scans/{NO_SCAN}/{verb}"))
            .await;
    }
    run.delete("remove: no such scan", Exact, &format!("scans/{NO_SCAN}"))
        .await;

    // A slow copy: paused, paused again, resumed, cancelled, removed.
    let body = format!(
        r#"{{"table": "{slow}", "pageSize": 10, "maxRowsPerSecond": 20,
             "action": {{"type": "copy", "table": "{copy}"}}}}"#
    );
    let (_, started) = run.start("start: a slow copy", &body).await;
    let copying = started["id"].as_str().unwrap().to_string();
    run.wait_for(&copying, &["running"]).await;
    run.post(
        "pause: a running copy",
        Timed,
        &format!("scans/{copying}/pause"),
    )
    .await;
    run.post("pause: again", Timed, &format!("scans/{copying}/pause"))
        .await;
    run.wait_for(&copying, &["paused"]).await;
    run.get("status: a paused copy", Timed, &format!("scans/{copying}"))
        .await;
    run.post(
        "retry: a paused scan",
        Exact,
        &format!("scans/{copying}/retry"),
    )
    .await;
    run.delete("remove: a paused scan", Exact, &format!("scans/{copying}"))
        .await;
    run.post(
        "resume: the paused copy",
        Timed,
        &format!("scans/{copying}/resume"),
    )
    .await;
    run.wait_for(&copying, &["running"]).await;
    run.post(
        "resume: a running scan",
        Exact,
        &format!("scans/{copying}/resume"),
    )
    .await;
    run.get("list: the running scans", Timed, "scans?state=running")
        .await;
    run.post(
        "cancel: the running copy",
        Timed,
        &format!("scans/{copying}/cancel"),
    )
    .await;
    run.wait_for(&copying, &["cancelled"]).await;
    run.get(
        "status: a cancelled copy",
        Timed,
        &format!("scans/{copying}"),
    )
    .await;
    run.post(
        "pause: a cancelled scan",
        Exact,
        &format!("scans/{copying}/pause"),
    )
    .await;
    run.delete(
        "remove: the cancelled copy",
        Timed,
        &format!("scans/{copying}"),
    )
    .await;
    run.get("status: a removed scan", Exact, &format!("scans/{copying}"))
        .await;

    // A slow count whose table goes away: it fails, is retried, and fails again.
    let body = format!(
        r#"{{"table": "{doomed}", "pageSize": 1, "maxRowsPerSecond": 1,
             "action": {{"type": "count"}}}}"#
    );
    let (_, started) = run.start("start: a slow count", &body).await;
    let failing = started["id"].as_str().unwrap().to_string();
    // Gone under its first step, or before it: a missing table fails the item for good.
    run.wait_for(&failing, &["running"]).await;
    tables().delete_table(&doomed).await.unwrap();
    run.wait_for(&failing, &["failed"]).await;
    run.get(
        "status: a count that failed",
        Timed,
        &format!("scans/{failing}"),
    )
    .await;
    run.post(
        "retry: the failed count",
        Exact,
        &format!("scans/{failing}/retry"),
    )
    .await;
    run.wait_for(&failing, &["failed"]).await;
    run.delete(
        "remove: the failed count",
        Timed,
        &format!("scans/{failing}"),
    )
    .await;

    // The list, its filters, and its refusals.
    run.get("list: every scan", Timed, "scans").await;
    run.get("list: the first scan", Timed, "scans?limit=1")
        .await;
    run.get(
        "list: succeeded counts",
        Exact,
        "scans?state=succeeded&action=count",
    )
    .await;
    run.get(
        "list: a table's scans",
        Exact,
        &format!("scans?table={small}"),
    )
    .await;
    for (label, query) in [
        ("list: limit 0", "scans?limit=0"),
        ("list: limit not a number", "scans?limit=many"),
        ("list: an unknown state", "scans?state=sleeping"),
        ("list: an unknown action", "scans?action=shred"),
        ("list: a bad place", "scans?after=nowhere"),
        ("list: a bad table name", "scans?table=no%20such"),
    ] {
        run.get(label, Exact, query).await;
    }
    run.delete("rejected: cleared", Exact, "rejected").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_as_the_earlier_build_answers() {
    let Some(old) = std::env::var_os("TABLESCAN_OLD_HANDLER").map(PathBuf::from) else {
        eprintln!("TABLESCAN_OLD_HANDLER names no handler binary: nothing compared");
        return;
    };
    assert!(old.is_file(), "no handler at {}", old.display());
    let mut earlier = Run::new(&old);
    let mut this = Run::new(&handler_binary());
    tokio::join!(converse(&mut earlier), converse(&mut this));

    let mut differences = Vec::new();
    for (before, now) in earlier.exchanges.iter().zip(&this.exchanges) {
        assert_eq!(before.label, now.label, "the conversations went apart");
        println!(
            "{}: {} {}",
            now.label,
            now.status,
            serde_json::to_string(&now.body).unwrap()
        );
        if before != now {
            differences.push(format!(
                "{}:\n  before: {} {:?} {}\n  now:    {} {:?} {}",
                now.label,
                before.status,
                before.location,
                serde_json::to_string(&before.body).unwrap(),
                now.status,
                now.location,
                serde_json::to_string(&now.body).unwrap()
            ));
        }
    }
    assert_eq!(
        earlier.exchanges.len(),
        this.exchanges.len(),
        "the conversations have different lengths"
    );
    assert!(
        differences.is_empty(),
        "{} of {} answers differ:\n{}",
        differences.len(),
        this.exchanges.len(),
        differences.join("\n")
    );
    println!("{} answers alike", this.exchanges.len());
}
