//! End to end: the real handler run by devhost against Azurite. Results are checked by reading
//! the tables and queues directly, not by trusting the handler's own counts.

#[path = "../src/stop.rs"]
mod stop;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tablescan::storage::queue::MessageEncoding;
use tablescan::storage::table::batch::Operation;
use tablescan::storage::table::entity::{Entity, Value as Edm};
use tablescan::storage::table::query::Query;
use tablescan::storage::{
    ClientOptions, QueueServiceClient, StorageAccount, TableClient, TableServiceClient,
};

fn storage() -> String {
    std::env::var("TABLESCAN_TEST_STORAGE")
        .expect("run the tests with scripts/test (TABLESCAN_TEST_STORAGE is not set)")
}

fn unique(prefix: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!(
        "{prefix}{}x{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

fn tables() -> TableServiceClient {
    TableServiceClient::new(
        &StorageAccount::from_connection_string(&storage()).unwrap(),
        ClientOptions::default(),
    )
    .unwrap()
}

fn queues() -> QueueServiceClient {
    QueueServiceClient::new(
        &StorageAccount::from_connection_string(&storage()).unwrap(),
        ClientOptions::default(),
    )
    .unwrap()
}

/// The handler binary built beside devhost (cargo builds every binary of the workspace's
/// packages before their integration tests run).
fn handler_binary() -> PathBuf {
    let devhost = PathBuf::from(env!("CARGO_BIN_EXE_devhost"));
    let handler = devhost.with_file_name("handler");
    assert!(
        handler.is_file(),
        "no handler at {}: build it with `cargo build --bin handler`",
        handler.display()
    );
    handler
}

/// A running devhost over a private copy of the function app.
struct Host {
    child: Child,
    port: u16,
    lines: Arc<Mutex<Vec<String>>>,
    _dir: TempDir,
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        stop::stop_devhost(&mut self.child);
    }
}

/// Copies the function app into a fresh folder, with this test's own queue names and quicker
/// retries (1 s instead of 30 s before a failed message is visible again).
fn assemble(dir: &Path, suffix: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut host: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("host.json")).unwrap()).unwrap();
    host["extensions"]["queues"]["visibilityTimeout"] = json!("00:00:01");
    host["extensions"]["queues"]["maxPollingInterval"] = json!("00:00:00.2");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("host.json"), host.to_string()).unwrap();
    std::fs::copy(handler_binary(), dir.join("handler")).unwrap();
    for entry in std::fs::read_dir(root.join("function_app"))
        .unwrap()
        .flatten()
    {
        let file = entry.path().join("function.json");
        if !file.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&file)
            .unwrap()
            .replace("tablescan-range", &format!("tsr-{suffix}"))
            .replace("tablescan-partition", &format!("tsp-{suffix}"));
        let folder = dir.join(entry.file_name());
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("function.json"), text).unwrap();
    }
}

impl Host {
    fn start(instances: usize, settings: &[(&str, &str)]) -> Host {
        let suffix = unique("").replace('x', "-");
        let dir = std::env::temp_dir().join(format!("devhost-e2e-{suffix}"));
        assemble(&dir, &suffix);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_devhost"))
            .args([
                "--script-root",
                dir.to_str().unwrap(),
                "--port",
                &port.to_string(),
                "--instances",
                &instances.to_string(),
            ])
            .env("AzureWebJobsStorage", storage())
            .env("TABLESCAN_LEDGER_TABLE", unique("ledger"))
            .envs(settings.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line);
                }
            });
        }
        let host = Host {
            child,
            port,
            lines,
            _dir: TempDir(dir),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while host.handler_pids().len() < instances
            || std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
        {
            assert!(
                Instant::now() < deadline,
                "devhost did not come up:\n{}",
                host.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        host
    }

    fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Process ids of every handler devhost started, in order.
    fn handler_pids(&self) -> Vec<u32> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| {
                l.split("started handler pid ")
                    .nth(1)?
                    .split(' ')
                    .next()?
                    .parse()
                    .ok()
            })
            .collect()
    }

    async fn start_scan(&self, request: Value) -> String {
        let answer = reqwest::Client::new()
            .post(format!("http://127.0.0.1:{}/api/scans", self.port))
            .json(&request)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 202, "{}", answer.text().await.unwrap());
        let body: Value = answer.json().await.unwrap();
        body["id"].as_str().unwrap().to_string()
    }

    /// The scan's status. A request that lands on a handler being restarted fails with 500,
    /// as it would under the real host, so a failed read is tried again for a few seconds.
    async fn status(&self, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let answer =
                reqwest::get(format!("http://127.0.0.1:{}/api/scans/{id}", self.port)).await;
            if let Ok(response) = answer {
                if response.status() == 200 {
                    if let Ok(status) = response.json::<Value>().await {
                        return status;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "no status for scan {id}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the scan is no longer pending or running.
    async fn wait(&self, id: &str, limit: Duration) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let status = self.status(id).await;
            if !matches!(status["state"].as_str(), Some("pending") | Some("running")) {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "scan {id} did not finish: {status}\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn run(&self, request: Value) -> Value {
        let id = self.start_scan(request).await;
        self.wait(&id, Duration::from_secs(240)).await
    }
}

/// Rows with difficult keys, two large partitions and many small ones.
fn rows() -> Vec<Entity> {
    let keys = [
        "",
        "a b",
        "it's",
        "é中",
        "😀",
        "a\u{FFFF}b",
        "\u{FFFF}",
        "\u{E000}",
        "z",
    ];
    let mut rows = Vec::new();
    for big in ["big1", "big\u{FFFF}"] {
        for r in 0..300 {
            rows.push(
                Entity::new(
                    big,
                    format!("{:04}{}", (r * 37) % 1000, keys[r % keys.len()]),
                )
                .with("n", Edm::Int64(r as i64)),
            );
        }
    }
    for (i, pk) in keys.iter().enumerate() {
        for j in 0..40 {
            rows.push(
                Entity::new(format!("{pk}{j:02}"), keys[(i + j) % keys.len()])
                    .with("d", Edm::Double(j as f64 / 3.0)),
            );
        }
    }
    rows
}

async fn load(table: &TableClient, rows: &[Entity]) {
    let mut by_partition: BTreeMap<&str, Vec<Operation>> = BTreeMap::new();
    for e in rows {
        by_partition
            .entry(&e.partition_key)
            .or_default()
            .push(Operation::Insert(e.clone()));
    }
    for ops in by_partition.values() {
        for chunk in ops.chunks(100) {
            table.submit_transaction(chunk).await.unwrap();
        }
    }
}

async fn table_with(rows: &[Entity]) -> TableClient {
    let service = tables();
    let name = unique("src");
    service.create_table(&name, false).await.unwrap();
    let table = service.table(&name).unwrap();
    load(&table, rows).await;
    table
}

fn keys(entities: &[Entity]) -> BTreeSet<(String, String)> {
    entities
        .iter()
        .map(|e| (e.partition_key.clone(), e.row_key.clone()))
        .collect()
}

/// Every message of a queue, decoded (they are taken off the queue).
async fn drain_queue(name: &str, encoding: MessageEncoding) -> Vec<Value> {
    let queue = queues().queue(name).unwrap();
    let mut all = Vec::new();
    loop {
        let batch = queue.receive(32, Duration::from_secs(300)).await.unwrap();
        if batch.is_empty() {
            return all;
        }
        for m in batch {
            all.push(serde_json::from_slice(&encoding.decode(&m.text).unwrap()).unwrap());
        }
    }
}

async fn every_action(instances: usize) {
    let rows = rows();
    let source = table_with(&rows).await;
    let host = Host::start(instances, &[("TABLESCAN_STEP_MAX_QUERIES", "2")]);
    let small_pages =
        |action: Value| json!({ "table": source.name(), "pageSize": 25, "action": action });
    let distinct: BTreeSet<&str> = rows.iter().map(|e| e.partition_key.as_str()).collect();

    let count = host.run(small_pages(json!({"type": "count"}))).await;
    assert_eq!(count["state"], "succeeded", "{count}");
    assert_eq!(
        count["result"],
        json!({"rows": rows.len(), "partitions": distinct.len()})
    );
    assert!(
        count["progress"]["stepsDone"].as_u64().unwrap() > 10,
        "many steps: {count}"
    );

    let copy_name = unique("copy");
    let copy = host
        .run(small_pages(json!({"type": "copy", "table": copy_name})))
        .await;
    assert_eq!(copy["state"], "succeeded", "{copy}");
    let target = tables().table(&copy_name).unwrap();
    let plain = |entities: Vec<Entity>| -> Vec<String> {
        entities
            .into_iter()
            .map(|e| {
                Entity {
                    timestamp: None,
                    etag: None,
                    ..e
                }
                .to_json()
            })
            .collect()
    };
    assert_eq!(
        plain(target.query_all(&Query::default()).await.unwrap()),
        plain(source.query_all(&Query::default()).await.unwrap()),
        "the copy is identical"
    );

    let row_queue = unique("rows-");
    let enqueue = host
        .run(small_pages(json!({"type": "enqueue", "queue": row_queue})))
        .await;
    assert_eq!(enqueue["state"], "succeeded", "{enqueue}");
    let messages = drain_queue(&row_queue, MessageEncoding::Base64).await;
    let enqueued: Vec<(String, String)> = messages
        .iter()
        .map(|m| {
            (
                m["PartitionKey"].as_str().unwrap().to_string(),
                m["RowKey"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        enqueued.len(),
        rows.len(),
        "one message per row, none twice"
    );
    assert_eq!(enqueued.into_iter().collect::<BTreeSet<_>>(), keys(&rows));

    let key_queue = unique("keys-");
    let partitions = host
        .run(small_pages(
            json!({"type": "partition-keys", "queue": key_queue, "encoding": "none"}),
        ))
        .await;
    assert_eq!(partitions["state"], "succeeded", "{partitions}");
    let sent: Vec<String> = drain_queue(&key_queue, MessageEncoding::Text)
        .await
        .iter()
        .map(|m| m["PartitionKey"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sent.len(), distinct.len(), "one message per partition");
    assert_eq!(
        sent.iter().map(String::as_str).collect::<BTreeSet<_>>(),
        distinct
    );

    let delete = host
        .run(json!({ "table": copy_name, "pageSize": 25, "action": {"type": "delete"} }))
        .await;
    assert_eq!(delete["state"], "succeeded", "{delete}");
    assert_eq!(delete["progress"]["rowsActed"], rows.len() as u64);
    assert!(
        target
            .query_all(&Query::default())
            .await
            .unwrap()
            .is_empty(),
        "every row deleted"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_action_through_devhost_with_one_instance() {
    every_action(1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_action_through_devhost_with_three_instances() {
    every_action(3).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_handler_loses_and_doubles_nothing() {
    let rows = rows();
    let source = table_with(&rows).await;
    let host = Host::start(
        2,
        &[
            ("TABLESCAN_STEP_MAX_QUERIES", "2"),
            ("TABLESCAN_STEP_LEASE_SECONDS", "2"),
        ],
    );
    // A copy: its upserts make a step that runs again after the kill harmless, so the target
    // must end up exactly the source. (The enqueue action is at-least-once under crashes: a queue
    // put cannot share a transaction with the ledger; see docs/functions.md.)
    let target_name = unique("killcopy");
    let id = host
        .start_scan(json!({"table": source.name(), "pageSize": 10, "action": {"type": "copy", "table": target_name}}))
        .await;
    // Kill one handler as soon as the scan is under way, with work still pending.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = host.status(&id).await;
        if status["progress"]["stepsDone"].as_u64().unwrap_or(0) >= 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the scan did not start: {status}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let victim = host.handler_pids()[0];
    Command::new("kill")
        .args(["-9", &victim.to_string()])
        .status()
        .unwrap();
    let status = host.wait(&id, Duration::from_secs(240)).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert!(
        host.handler_pids().len() >= 3,
        "devhost restarted the killed handler:\n{}",
        host.log()
    );
    assert_eq!(
        status["progress"]["rowsRead"],
        rows.len() as u64,
        "{status}"
    );
    assert_eq!(
        status["progress"]["rowsActed"],
        rows.len() as u64,
        "counted once: {status}"
    );
    let target = tables().table(&target_name).unwrap();
    let copied = target.query_all(&Query::default()).await.unwrap();
    assert_eq!(copied.len(), rows.len(), "nothing lost, nothing doubled");
    assert_eq!(keys(&copied), keys(&rows));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_that_always_fails_ends_in_poison_and_in_the_status() {
    let mut rows: Vec<Entity> = (0..200)
        .map(|i| Entity::new(format!("p{:03}", i), "r"))
        .collect();
    // Its message cannot fit a queue message (64 KiB): the enqueue fails every time.
    // (Each string property may hold 64 KiB, 32,768 UTF-16 units; two make a 60 KB row.)
    rows.push(
        Entity::new("p100x", "huge")
            .with("blob1", Edm::String("x".repeat(30_000)))
            .with("blob2", Edm::String("y".repeat(30_000))),
    );
    let source = table_with(&rows).await;
    let host = Host::start(1, &[("TABLESCAN_STEP_MAX_QUERIES", "1")]);
    let queue = unique("poison-");
    let status = host.run(json!({"table": source.name(), "pageSize": 10, "action": {"type": "enqueue", "queue": queue}})).await;
    assert_eq!(status["state"], "failed", "{status}");
    assert_eq!(status["progress"]["stepsFailed"], 1, "{status}");
    assert_eq!(status["progress"]["stepsPending"], 0, "{status}");
    assert!(
        status["progress"]["stepsDone"].as_u64().unwrap() > 5,
        "the rest completed: {status}"
    );
    let error = status["errors"][0]["error"].as_str().unwrap();
    assert!(error.contains("65536"), "{error}");
    assert_eq!(status["errors"][0]["attempts"], 5);
    let poison = queues()
        .queue(&format!("{}-poison", poison_queue_of(&host)))
        .unwrap();
    // The handler records the last failure just before devhost moves the message.
    let deadline = Instant::now() + Duration::from_secs(20);
    while poison.approximate_count().await.unwrap_or(0) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        poison.approximate_count().await.unwrap(),
        1,
        "{}",
        host.log()
    );
}

/// The range queue of this host's app (its name carries the test's suffix).
fn poison_queue_of(host: &Host) -> String {
    let text = std::fs::read_to_string(host._dir.0.join("ScanRange/function.json")).unwrap();
    let json: Value = serde_json::from_str(&text).unwrap();
    json["bindings"][0]["queueName"]
        .as_str()
        .unwrap()
        .to_string()
}
