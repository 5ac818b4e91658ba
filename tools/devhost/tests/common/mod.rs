//! What the end-to-end tests share: Azurite access, a devhost over a private copy of the
//! function app, and a table of difficult rows.

#![allow(dead_code)]

#[path = "../../src/stop.rs"]
pub mod stop;

pub mod app_load;
pub mod cli;
pub mod identity;

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
use tablescan::storage::{
    ClientOptions, QueueServiceClient, StorageAccount, TableClient, TableServiceClient,
};

/// A port nobody listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn storage() -> String {
    std::env::var("TABLESCAN_TEST_STORAGE")
        .expect("run the tests with scripts/test (TABLESCAN_TEST_STORAGE is not set)")
}

/// The value of `name=` in the test connection string.
pub fn storage_setting(name: &str) -> String {
    storage()
        .split(';')
        .find_map(|part| part.strip_prefix(&format!("{name}=")).map(str::to_string))
        .unwrap_or_else(|| panic!("no {name} in the test connection string"))
}

/// The test storage's `TableEndpoint` or `QueueEndpoint`, split into its origin
/// (`http://host:port`, what a proxy forwards to) and its account path.
pub fn endpoint(name: &str) -> (String, String) {
    let endpoint = storage_setting(name);
    let after_scheme = endpoint.find("://").map_or(0, |i| i + 3);
    let slash = endpoint[after_scheme..]
        .find('/')
        .map_or(endpoint.len(), |i| after_scheme + i);
    (endpoint[..slash].to_string(), endpoint[slash..].to_string())
}

/// The test connection string with some settings replaced, e.g. an endpoint by a proxy's.
pub fn storage_with(replaced: &[(&str, &str)]) -> String {
    storage()
        .split(';')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let name = part.split('=').next().unwrap_or("");
            match replaced.iter().find(|(n, _)| *n == name) {
                Some((n, value)) => format!("{n}={value}"),
                None => part.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// Process ids of the handlers devhost logged starting, in order.
pub fn handler_pids_in(lines: &Mutex<Vec<String>>) -> Vec<u32> {
    lines
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

pub fn unique(prefix: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!(
        "{prefix}{}x{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

pub fn tables() -> TableServiceClient {
    TableServiceClient::new(
        &StorageAccount::from_connection_string(&storage()).unwrap(),
        ClientOptions::default(),
    )
    .unwrap()
}

pub fn queues() -> QueueServiceClient {
    QueueServiceClient::new(
        &StorageAccount::from_connection_string(&storage()).unwrap(),
        ClientOptions::default(),
    )
    .unwrap()
}

/// The handler binary built beside devhost (cargo builds every binary of the workspace's
/// packages before their integration tests run).
pub fn handler_binary() -> PathBuf {
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
pub struct Host {
    pub child: Child,
    pub port: u16,
    pub lines: Arc<Mutex<Vec<String>>>,
    /// The ledger table of this host's app.
    pub ledger: String,
    instances: usize,
    settings: Vec<(String, String)>,
    pub _dir: TempDir,
}

pub struct TempDir(pub PathBuf);

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

/// Copies the function app into a fresh folder, with this test's own queue names, quicker
/// retries (1 s instead of 30 s before a failed message is visible again), the re-drive
/// timer every 2 seconds instead of every minute, and the schedules' timer every second.
pub fn assemble(dir: &Path, suffix: &str) {
    assemble_with(dir, suffix, &handler_binary());
}

/// [`assemble`] with the handler binary `handler` (another build's, say).
pub fn assemble_with(dir: &Path, suffix: &str, handler: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut host: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("host.json")).unwrap()).unwrap();
    host["extensions"]["queues"]["visibilityTimeout"] = json!("00:00:01");
    host["extensions"]["queues"]["maxPollingInterval"] = json!("00:00:00.2");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("host.json"), host.to_string()).unwrap();
    std::fs::copy(handler, dir.join("handler")).unwrap();
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
            .replace("tablescan-partition", &format!("tsp-{suffix}"))
            .replace("tablescan-export", &format!("tse-{suffix}"))
            // The schedules' first: the re-drive's is the end of it.
            .replace("30 */1 * * * *", "* * * * * *")
            .replace("0 */1 * * * *", "*/2 * * * * *");
        let folder = dir.join(entry.file_name());
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("function.json"), text).unwrap();
    }
}

impl Host {
    pub fn start(instances: usize, settings: &[(&str, &str)]) -> Host {
        Self::start_with(&handler_binary(), instances, settings)
    }

    /// [`Host::start`] with the handler binary `handler` (another build's, say).
    pub fn start_with(handler: &Path, instances: usize, settings: &[(&str, &str)]) -> Host {
        let suffix = unique("").replace('x', "-");
        let dir = std::env::temp_dir().join(format!("devhost-e2e-{suffix}"));
        assemble_with(&dir, &suffix, handler);
        Self::start_app(dir, instances, settings)
    }

    /// Runs devhost over an app folder the test prepared (removed when the host is dropped).
    pub fn start_app(dir: PathBuf, instances: usize, settings: &[(&str, &str)]) -> Host {
        let ledger = unique("ledger");
        let settings: Vec<(String, String)> = settings
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (child, port) = launch(&dir, &ledger, instances, &settings, &lines);
        let host = Host {
            child,
            port,
            lines,
            ledger,
            instances,
            settings,
            _dir: TempDir(dir),
        };
        host.wait_for_handlers(0);
        host
    }

    /// Kills devhost as a crash would (its handlers die with it) and starts it again over the
    /// same app, ledger and settings, on a new port.
    pub fn crash_and_restart(&mut self) {
        self.down_for(Duration::ZERO);
    }

    /// Kills devhost as a crash would, leaves the app down for `down`, and starts it again
    /// over the same app, ledger and settings, on a new port.
    pub fn down_for(&mut self, down: Duration) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(down);
        let before = self.handler_pids().len();
        let (child, port) = launch(
            &self._dir.0,
            &self.ledger,
            self.instances,
            &self.settings,
            &self.lines,
        );
        self.child = child;
        self.port = port;
        self.wait_for_handlers(before);
    }

    /// Waits until `already` + this host's instances handlers were started and it listens.
    fn wait_for_handlers(&self, already: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.handler_pids().len() < already + self.instances
            || std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err()
        {
            assert!(
                Instant::now() < deadline,
                "devhost did not come up:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Process ids of every handler devhost started, in order.
    pub fn handler_pids(&self) -> Vec<u32> {
        handler_pids_in(&self.lines)
    }

    /// Waits until at least `steps` steps of scan `id` are done (or it ended); its status.
    pub async fn wait_for_steps(&self, id: &str, steps: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status = self.status(id).await;
            let done = status["progress"]["stepsDone"].as_u64().unwrap_or(0);
            if done >= steps || !matches!(status["state"].as_str(), Some("pending" | "running")) {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the scan did not get going: {status}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Posts a scan request and returns the answer's status and JSON body (`null` if none),
    /// whatever the status.
    pub async fn post_scan(&self, request: &Value) -> (u16, Value) {
        let answer = reqwest::Client::new()
            .post(format!("http://127.0.0.1:{}/api/scans", self.port))
            .json(request)
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        (status, answer.json().await.unwrap_or(Value::Null))
    }

    pub async fn start_scan(&self, request: Value) -> String {
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
    pub async fn status(&self, id: &str) -> Value {
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
    pub async fn wait(&self, id: &str, limit: Duration) -> Value {
        self.wait_with(id, limit, || self.status(id)).await
    }

    /// Waits until the scan is no longer pending or running, reading its status from the
    /// ledger directly: unlike `GET /api/scans/{id}`, that read never re-drives anything.
    pub async fn wait_unobserved(&self, id: &str, limit: Duration) -> Value {
        let ledger = tablescan::job::Ledger::new(tables().table(&self.ledger).unwrap());
        let read = || async {
            let status = ledger
                .status(id, time::OffsetDateTime::now_utc())
                .await
                .unwrap()
                .expect("the scan exists");
            serde_json::to_value(status).unwrap()
        };
        self.wait_with(id, limit, read).await
    }

    async fn wait_with<F, R>(&self, id: &str, limit: Duration, read: R) -> Value
    where
        R: Fn() -> F,
        F: std::future::Future<Output = Value>,
    {
        let deadline = Instant::now() + limit;
        loop {
            let status = read().await;
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

    pub async fn run(&self, request: Value) -> Value {
        let id = self.start_scan(request).await;
        self.wait(&id, Duration::from_secs(240)).await
    }
}

/// Keys that break naive scanners: empty, spaces and quotes, non-ASCII, a supplementary
/// character, U+FFFF (the published sentinel) alone and inside, U+E000 (sorts after
/// supplementary characters in UTF-16).
pub const DIFFICULT_KEYS: [&str; 9] = [
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

/// Rows with difficult keys, two large partitions and many small ones.
pub fn rows() -> Vec<Entity> {
    let keys = DIFFICULT_KEYS;
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

pub async fn load(table: &TableClient, rows: &[Entity]) {
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

pub async fn table_with(rows: &[Entity]) -> TableClient {
    let service = tables();
    let name = unique("src");
    service.create_table(&name, false).await.unwrap();
    let table = service.table(&name).unwrap();
    load(&table, rows).await;
    table
}

pub fn keys(entities: &[Entity]) -> BTreeSet<(String, String)> {
    entities
        .iter()
        .map(|e| (e.partition_key.clone(), e.row_key.clone()))
        .collect()
}

/// Every message of a queue, decoded (they are taken off the queue).
pub async fn drain_queue(name: &str, encoding: MessageEncoding) -> Vec<Value> {
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

/// Starts devhost over the app in `dir` on a free port; its output goes to `lines`.
fn launch(
    dir: &Path,
    ledger: &str,
    instances: usize,
    settings: &[(String, String)],
    lines: &Arc<Mutex<Vec<String>>>,
) -> (Child, u16) {
    let port = free_port();
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
        .env("TABLESCAN_LEDGER_TABLE", ledger)
        .envs(settings.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
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
    (child, port)
}

/// Asserts that `target` holds exactly the rows of `source`, every property alike (the
/// service's timestamps and etags aside).
pub async fn assert_same_rows(target: &TableClient, source: &TableClient, what: &str) {
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
    let everything = tablescan::storage::table::query::Query::default();
    assert_eq!(
        plain(target.query_all(&everything).await.unwrap()),
        plain(source.query_all(&everything).await.unwrap()),
        "{what}"
    );
}
