//! The handler's shared state: its settings and config, the clients of its accounts, the
//! ledger, the pacing and what a process knows of each scan. Every function uses it; it uses no
//! function's module (the router is `routes`), only the settings, names and caches below it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::allowlist::{Allowlist, Refused};
use crate::config::{Config, ConfigError, LEDGER_CONNECTION_SETTING, STORAGE_DEADLINE_BUDGETS};
use crate::names::*;
use crate::record_reads::ScanReads;
use tablescan_api::{ScanSpec, SettingLookup};
use tablescan_engine::Budget;
use tablescan_ledger::{Ledger, ScanRecord};
use tablescan_storage::pacing::Governors;
use tablescan_storage::token::TokenCredentials;
use tablescan_storage::{
    BlobServiceClient, ClientOptions, QueueServiceClient, StorageAccount, StorageError,
    TableServiceClient,
};

/// App settings (the environment the host gives the handler), looked up by name.
#[derive(Clone, Default)]
pub struct Settings(Arc<HashMap<String, String>>);

impl Settings {
    pub fn from_env() -> Self {
        Settings(Arc::new(std::env::vars().collect()))
    }

    pub fn from_pairs(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        Settings(Arc::new(pairs.into_iter().collect()))
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
}

impl SettingLookup for Settings {
    fn setting(&self, name: &str) -> Option<String> {
        self.get(name).map(str::to_string)
    }
}

/// Clients of one storage account: of its Table and Queue services, each as far as its app
/// setting gives an endpoint for it (a SAS connection string may give only one).
#[derive(Clone)]
pub struct Clients {
    tables: Result<TableServiceClient, String>,
    queues: Result<QueueServiceClient, String>,
    blobs: Result<BlobServiceClient, String>,
}

impl Clients {
    /// The Table service client, or why the setting gives none.
    pub fn tables(&self) -> Result<&TableServiceClient, String> {
        self.tables.as_ref().map_err(Clone::clone)
    }

    /// The Queue service client, or why the setting gives none.
    pub fn queues(&self) -> Result<&QueueServiceClient, String> {
        self.queues.as_ref().map_err(Clone::clone)
    }

    /// The Blob service client (exports and imports), or why the setting gives none.
    pub fn blobs(&self) -> Result<&BlobServiceClient, String> {
        self.blobs.as_ref().map_err(Clone::clone)
    }
}

/// Why a connection gives no client for a service: it names no endpoint for it.
fn no_endpoint(
    connection: &str,
    account: &StorageAccount,
    endpoint: &str,
    error: StorageError,
) -> String {
    let named = account.setting_name(endpoint);
    if named == endpoint {
        format!(
            "app setting {connection:?} gives no {endpoint} (nor an AccountName to make one \
             from), and this needs one: add {endpoint}=<url> to it ({error})"
        )
    } else {
        format!(
            "connection {connection:?} gives no {endpoint} (nor an accountName to make one \
             from), and this needs one: set {named} ({error})"
        )
    }
}

/// How stale a process's knowledge of a scan (its cap, whether it was cancelled) may be: a
/// cancel stops the steps of other processes within this long. One read of the scan row per
/// scan per process this often. Defined in the ledger, beside the read.
pub use tablescan_ledger::CANCEL_CHECK_EVERY;

/// How long one removal call works before it answers `"more": true`: well inside the 230 s
/// Azure's front end gives an HTTP call.
pub const REMOVAL_TIME: Duration = Duration::from_secs(20);

/// Everything the functions share.
pub struct AppState {
    pub settings: Settings,
    /// The handler's own settings, read once (`functions::config`). When some cannot be used
    /// these are the defaults, and no function runs with them: see `bad_settings`.
    pub config: Config,
    /// The settings whose values cannot be used, and why: then every function answers with
    /// this (`routes::router`), and the ledger is not opened.
    pub bad_settings: Option<ConfigError>,
    /// The ledger, or why it is unavailable (then every function fails with that reason).
    pub ledger: Result<Ledger, String>,
    /// How long one call of `DELETE /api/scans/{id}` (or `DELETE /api/rejected`) removes rows
    /// before it answers `"more": true` ([`REMOVAL_TIME`]; tests shorten it to see many rounds).
    pub removal_time: Duration,
    /// The queues of range and partition work items, as the app's function.json files name
    /// them (see [`item_queues`]).
    pub item_queues: ItemQueues,
    /// How the host retries queue messages, from the app's host.json (see [`host_queues`]).
    pub host_queues: HostQueues,
    /// This process's share of each running scan's cap, and the slots of its steps.
    pub pacing: crate::pacing::Pacing,
    /// The back-off of each storage target, given to every client this state builds: one
    /// per account's table service (or queue) for the whole process.
    governors: Governors,
    /// The token credentials of the identity connections, one per identity for the process.
    tokens: TokenCredentials,
    clients: Mutex<HashMap<String, Clients>>,
    /// Per scan, its record as last read and when (see [`AppState::scan_record`]), and
    /// whether it was cancelled through this process.
    cancels: Mutex<HashMap<String, Known>>,
    /// Per scan, its record's reads, one at a time (see [`AppState::scan_record`]).
    scan_reads: Mutex<HashMap<String, Arc<ScanReads>>>,
}

/// What a process knows of a scan (see [`AppState::scan_record`]).
#[derive(Clone)]
struct Known {
    read_at: std::time::Instant,
    record: Option<Arc<ScanRecord>>,
    /// Cancelled through this process: known at once, whatever the last read said.
    noted_cancelled: bool,
}

/// The queues the two queue-triggered functions listen on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemQueues {
    pub range: String,
    pub partition: String,
    /// An import's items.
    pub export: String,
}

impl ItemQueues {
    /// The queue a work item of `task`'s kind goes to.
    pub fn of(&self, task: &tablescan_ledger::Task) -> &str {
        use tablescan_ledger::{ReadRange, Task};
        match task {
            Task::Table(ReadRange::Range { .. }) => &self.range,
            Task::Table(ReadRange::Partition { .. }) => &self.partition,
            Task::Import(_) => &self.export,
        }
    }

    /// Every queue of work items.
    pub fn all(&self) -> [&str; 3] {
        [&self.range, &self.partition, &self.export]
    }
}

/// Reads the trigger queue names from `<dir>/ScanRange/function.json` and
/// `<dir>/ScanPartition/function.json` (the host runs the handler in the app's folder), so
/// that an app whose queues were renamed there still re-drives into the right ones; the
/// built-in names where a file is missing or unreadable.
pub fn item_queues(dir: &std::path::Path) -> ItemQueues {
    let read = |function: &str, default: &str| -> String {
        std::fs::read_to_string(dir.join(function).join("function.json"))
            .ok()
            .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
            .and_then(|json| {
                json["bindings"]
                    .as_array()?
                    .iter()
                    .find(|b| b["type"] == "queueTrigger")?["queueName"]
                    .as_str()
                    .map(str::to_string)
            })
            .unwrap_or_else(|| default.to_string())
    };
    ItemQueues {
        range: read(SCAN_RANGE, RANGE_QUEUE),
        partition: read(SCAN_PARTITION, PARTITION_QUEUE),
        export: read(SCAN_EXPORT, EXPORT_QUEUE),
    }
}

/// How the host retries a failing queue message: visible again after `visibility_timeout`,
/// moved to the poison queue on delivery `max_dequeue_count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostQueues {
    pub visibility_timeout: Duration,
    pub max_dequeue_count: u32,
}

impl Default for HostQueues {
    /// The values of this project's host.json.
    fn default() -> Self {
        HostQueues {
            visibility_timeout: Duration::from_secs(30),
            max_dequeue_count: MAX_DEQUEUE_COUNT,
        }
    }
}

/// Reads `extensions.queues.visibilityTimeout` (`hh:mm:ss`) and `maxDequeueCount` from
/// `<dir>/host.json`, so that the handler knows which delivery of a message is its last
/// whatever the app's settings; this project's values where the file or a value is missing.
pub fn host_queues(dir: &std::path::Path) -> HostQueues {
    let defaults = HostQueues::default();
    let Some(json) = std::fs::read_to_string(dir.join("host.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
    else {
        return defaults;
    };
    let queues = &json["extensions"]["queues"];
    let visibility_timeout = queues["visibilityTimeout"]
        .as_str()
        .and_then(parse_time_span)
        .unwrap_or(defaults.visibility_timeout);
    let max_dequeue_count = queues["maxDequeueCount"]
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n > 0)
        .unwrap_or(defaults.max_dequeue_count);
    HostQueues {
        visibility_timeout,
        max_dequeue_count,
    }
}

/// `hh:mm:ss` (a .NET TimeSpan without days or fractions) as a duration.
fn parse_time_span(text: &str) -> Option<Duration> {
    let parts: Vec<u64> = text
        .split(':')
        .map(|p| p.trim().parse().ok())
        .collect::<Option<_>>()?;
    match parts[..] {
        [h, m, s] if m < 60 && s < 60 => Some(Duration::from_secs(h * 3600 + m * 60 + s)),
        _ => None,
    }
}

/// How long after a pause a step that was running then may still act: it sees the pause at
/// its next page, its work ends at its storage deadline (`STORAGE_DEADLINE_BUDGETS` budgets
/// after it started) at the latest, and its finish takes a few requests more.
fn steps_stop_within(budget: Budget) -> time::Duration {
    let work = budget.max_duration * STORAGE_DEADLINE_BUDGETS;
    time::Duration::try_from(work).unwrap_or(time::Duration::MINUTE) + time::Duration::seconds(15)
}

impl AppState {
    /// Builds the state from app settings. Never fails: a bad setting (or a missing or bad
    /// storage setting) is reported by every invocation instead, so the host still sees a
    /// healthy worker, and logged by the handler at start-up (`state.ledger`'s reason).
    pub fn new(settings: Settings) -> Arc<AppState> {
        let (config, bad_settings) = match Config::parse(&settings) {
            Ok(config) => (config, None),
            Err(bad) => (Config::default(), Some(bad)),
        };
        let here = std::env::current_dir().unwrap_or_default();
        let state = AppState {
            pacing: crate::pacing::Pacing::new(tablescan_pace::SystemClock),
            governors: Governors::default(),
            tokens: TokenCredentials::default(),
            settings,
            config,
            bad_settings,
            ledger: Err(String::new()),
            removal_time: REMOVAL_TIME,
            item_queues: item_queues(&here),
            host_queues: host_queues(&here),
            clients: Mutex::new(HashMap::new()),
            cancels: Mutex::new(HashMap::new()),
            scan_reads: Mutex::new(HashMap::new()),
        };
        let ledger = match &state.bad_settings {
            Some(bad) => Err(bad.to_string()),
            None => state.open_ledger(),
        };
        Arc::new(AppState { ledger, ..state })
    }

    /// The ledger in the table and account the config names.
    fn open_ledger(&self) -> Result<Ledger, String> {
        let (connection, table) = (&self.config.ledger_connection, &self.config.ledger_table);
        self.clients(connection)
            .and_then(|c| c.tables()?.table(table).map_err(|e| e.to_string()))
            .map(|table| {
                Ledger::new(table).with_steps_stop_within(steps_stop_within(self.config.budget))
            })
            .map_err(|why| match connection.as_str() {
                STORAGE_CONNECTION => why,
                named => format!(
                    "{why} (the ledger's connection {named:?}, which the app setting \
                     {LEDGER_CONNECTION_SETTING} names)"
                ),
            })
    }

    /// Scan `id`'s record as read from the ledger at most [`CANCEL_CHECK_EVERY`] ago: the steps
    /// of one process running for the same scan share one read, so checking between pages
    /// (and admitting steps by the scan's cap) costs the ledger a read per scan per process
    /// every few seconds, not per page. The steps that start together (a batch of messages,
    /// 16 by default, when a scan starts or its read has aged) wait for one read rather than
    /// each making its own (`functions::record_reads`). `None` for a scan not found or a read
    /// that failed (the next call after it tries again).
    pub async fn scan_record(&self, id: &str) -> Option<Arc<ScanRecord>> {
        if let Some(fresh) = self.fresh_record(id) {
            return fresh;
        }
        let reads = self.scan_reads_of(id);
        let turn = match reads.answer_or_turn().await {
            Ok(answer) => return answer,
            Err(turn) => turn,
        };
        let started = tokio::time::Instant::now();
        let read = match self.ledger() {
            Ok(ledger) => ledger.scan(id).await.map(|r| r.map(Arc::new)).ok(),
            Err(_) => None,
        };
        let record = read.clone().flatten();
        if let Some(record) = &record {
            // A cap learned, lowered or raised by another process applies here within this
            // read's period, also to steps that run long.
            self.pacing.read(record, started).await;
        }
        // A read that failed is not remembered, nor one a pause or resume through this
        // process overtook: the next call reads again.
        if turn.done(record.clone()) && read.is_some() {
            self.remember_record(id, record.clone());
        }
        record
    }

    fn remember_record(&self, id: &str, record: Option<Arc<ScanRecord>>) {
        if let Ok(mut cancels) = self.cancels.lock() {
            if cancels.len() > 10_000 {
                cancels.clear();
            }
            let noted = cancels.get(id).is_some_and(|k| k.noted_cancelled);
            cancels.insert(
                id.to_string(),
                Known {
                    read_at: std::time::Instant::now(),
                    record,
                    noted_cancelled: noted,
                },
            );
        }
    }

    /// Scan `id`'s record if it was read less than [`CANCEL_CHECK_EVERY`] ago.
    fn fresh_record(&self, id: &str) -> Option<Option<Arc<ScanRecord>>> {
        let known = self.cancels.lock().ok().and_then(|c| c.get(id).cloned());
        known
            .filter(|k| k.read_at.elapsed() < CANCEL_CHECK_EVERY)
            .map(|k| k.record)
    }

    /// Scan `id`'s record reads in this process.
    fn scan_reads_of(&self, id: &str) -> Arc<ScanReads> {
        let mut reads = self.scan_reads.lock().unwrap_or_else(|p| p.into_inner());
        if reads.len() > 10_000 {
            // Those of scans long over; one still in use keeps working through its Arc.
            reads.retain(|_, r| Arc::strong_count(r) > 1);
        }
        reads.entry(id.to_string()).or_default().clone()
    }

    /// Whether scan `id` was cancelled, as far as this process knows (see
    /// [`AppState::scan_record`]). A read that fails counts as not cancelled.
    pub async fn cancelled(&self, id: &str) -> bool {
        let noted = self
            .cancels
            .lock()
            .ok()
            .is_some_and(|c| c.get(id).is_some_and(|k| k.noted_cancelled));
        noted
            || self
                .scan_record(id)
                .await
                .is_some_and(|r| r.cancelled_at.is_some())
    }

    /// Whether scan `id` is paused, as far as this process knows (see
    /// [`AppState::scan_record`]): its steps stop at their next page. A read that fails counts
    /// as not paused.
    pub async fn paused(&self, id: &str) -> bool {
        self.scan_record(id)
            .await
            .is_some_and(|record| record.is_paused())
    }

    /// Forgets this process's read of scan `id` (after a pause or resume through it), so that
    /// its own steps see the change at their next page.
    pub fn forget_record(&self, id: &str) {
        self.scan_reads_of(id).forget();
        if let Ok(mut known) = self.cancels.lock() {
            if known.get(id).is_some_and(|k| !k.noted_cancelled) {
                known.remove(id);
            }
        }
    }

    /// Remembers that scan `id` was cancelled through this process, so that its own steps stop
    /// at their next page without waiting for the next read.
    pub fn note_cancelled(&self, id: &str) {
        if let Ok(mut cancels) = self.cancels.lock() {
            let known = cancels.entry(id.to_string()).or_insert(Known {
                read_at: std::time::Instant::now(),
                record: None,
                noted_cancelled: true,
            });
            known.noted_cancelled = true;
        }
    }

    /// The clients for the account named by an app setting (cached).
    pub fn clients(&self, setting: &str) -> Result<Clients, String> {
        self.clients_with(setting, ClientOptions::default(), "")
    }

    /// The table client a step reads its source with: short retries that fit the step's budget
    /// (see `scan::budget::read_retry_policy`).
    pub fn scan_source(
        &self,
        setting: &str,
        table: &str,
    ) -> Result<tablescan_storage::TableClient, String> {
        let options = ClientOptions {
            retry: tablescan_engine::budget::read_retry_policy(),
            ..ClientOptions::default()
        };
        self.clients_with(setting, options, "#scan-reads")?
            .tables()?
            .table(table)
            .map_err(|e| e.to_string())
    }

    /// Clients that give up fast, for the checks a start makes of the accounts a scan will
    /// use: a caller waits for the answer, and an account that does not answer within a few
    /// seconds is better reported than waited for (see `functions::reach`).
    pub fn probe_clients(&self, setting: &str) -> Result<Clients, String> {
        let options = ClientOptions {
            retry: crate::reach::check_retries(),
            attempt_timeout: crate::reach::ATTEMPT_TIMEOUT,
            ..ClientOptions::default()
        };
        self.clients_with(setting, options, "#probe")
    }

    /// The storage account a connection names (an app setting with a connection string, or
    /// settings `C__...` of a connection by identity: see [`tablescan_storage::connection`]).
    pub fn account(&self, connection: &str) -> Result<StorageAccount, String> {
        let account = tablescan_storage::connection::resolve_without_extra_roots(
            connection,
            &self.settings,
            &self.tokens,
        )
        .map_err(|e| e.to_string())?;
        Ok(match &self.config.trusted_roots {
            Some(roots) => account.trusting(roots.clone()),
            None => account,
        })
    }

    fn clients_with(
        &self,
        setting: &str,
        options: ClientOptions,
        purpose: &str,
    ) -> Result<Clients, String> {
        let key = format!("{setting}{purpose}");
        let mut cache = self
            .clients
            .lock()
            .map_err(|_| "client cache poisoned".to_string())?;
        if let Some(clients) = cache.get(&key) {
            return Ok(clients.clone());
        }
        let account = self.account(setting)?;
        let options = ClientOptions {
            governors: self.governors.clone(),
            ..options
        };
        let clients = Clients {
            tables: TableServiceClient::new(&account, options.clone())
                .map_err(|e| no_endpoint(setting, &account, "TableEndpoint", e)),
            queues: QueueServiceClient::new(&account, options.clone())
                .map_err(|e| no_endpoint(setting, &account, "QueueEndpoint", e)),
            blobs: BlobServiceClient::new(&account, options)
                .map_err(|e| no_endpoint(setting, &account, "BlobEndpoint", e)),
        };
        cache.insert(key, clients.clone());
        Ok(clients)
    }

    /// The connections scans may use: `None` for every one; an error naming the settings that
    /// cannot be used (this one or another: nothing runs then).
    pub fn allowlist(&self) -> Result<Option<&Allowlist>, String> {
        self.usable_config()
            .map(|config| config.connections.as_ref())
    }

    /// The cap a scan gets when its request names none, or why the settings cannot be used.
    pub fn default_cap(&self) -> Result<Option<u32>, String> {
        self.usable_config().map(|config| config.default_cap)
    }

    /// The config, or why some of its settings cannot be used.
    fn usable_config(&self) -> Result<&Config, String> {
        match &self.bad_settings {
            None => Ok(&self.config),
            Some(bad) => Err(bad.to_string()),
        }
    }

    /// A start's request, parsed and its connections checked under the app's list: without
    /// one, each must give an account and a refusal says why; with one, each must be allowed
    /// for what the scan does and give an account, and a refusal says only that it is not
    /// usable.
    pub fn parse_start(&self, text: &str, default_cap: Option<u32>) -> Result<ScanSpec, Refused> {
        let now = time::OffsetDateTime::now_utc();
        match self.allowlist().map_err(Refused::Setting)? {
            None => {
                ScanSpec::parse_at(text, &self.settings, default_cap, now).map_err(Refused::Request)
            }
            Some(allowlist) => {
                let spec = ScanSpec::parse_unresolved_at(text, default_cap, now)
                    .map_err(Refused::Request)?;
                allowlist
                    .check(&spec, &self.settings)
                    .map_err(Refused::NotUsable)?;
                Ok(spec)
            }
        }
    }

    pub fn ledger(&self) -> Result<&Ledger, String> {
        self.ledger
            .as_ref()
            .map_err(|why| format!("the scan ledger is unavailable: {why}"))
    }
}

#[cfg(test)]
mod queue_name_tests {
    use super::*;

    #[test]
    fn item_queues_come_from_the_apps_function_json_files() {
        let app = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../function_app");
        assert_eq!(
            item_queues(&app),
            ItemQueues {
                range: RANGE_QUEUE.into(),
                partition: PARTITION_QUEUE.into(),
                export: EXPORT_QUEUE.into(),
            }
        );
        // A queue renamed in function.json is followed; a missing function falls back.
        let dir = std::env::temp_dir().join(format!("tablescan-queues-{}", std::process::id()));
        std::fs::create_dir_all(dir.join(SCAN_RANGE)).unwrap();
        std::fs::write(
            dir.join(SCAN_RANGE).join("function.json"),
            r#"{"bindings":[{"type":"queueTrigger","name":"item","queueName":"renamed-range"}]}"#,
        )
        .unwrap();
        let queues = item_queues(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(queues.range, "renamed-range");
        assert_eq!(queues.partition, PARTITION_QUEUE);
    }
}

#[cfg(test)]
mod host_queue_tests {
    use super::*;

    #[test]
    fn host_json_queue_settings_are_read_and_bad_ones_fall_back() {
        let dir = std::env::temp_dir().join(format!("tablescan-hostjson-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(host_queues(&dir), HostQueues::default(), "no host.json");
        std::fs::write(
            dir.join("host.json"),
            r#"{"extensions":{"queues":{"visibilityTimeout":"00:01:05","maxDequeueCount":3}}}"#,
        )
        .unwrap();
        assert_eq!(
            host_queues(&dir),
            HostQueues {
                visibility_timeout: Duration::from_secs(65),
                max_dequeue_count: 3
            }
        );
        std::fs::write(
            dir.join("host.json"),
            r#"{"extensions":{"queues":{"visibilityTimeout":"soon","maxDequeueCount":0}}}"#,
        )
        .unwrap();
        assert_eq!(host_queues(&dir), HostQueues::default());
        std::fs::remove_dir_all(&dir).unwrap();
        let project = &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        assert_eq!(
            host_queues(project),
            HostQueues::default(),
            "this project's host.json"
        );
    }
}

#[cfg(test)]
mod settings_tests {
    use super::*;
    use crate::config::Setting;

    /// A handler whose settings are bad opens no ledger and refuses starts and steps with the
    /// reason, naming the setting (the router answers every function so: `routes::router`).
    #[test]
    fn a_state_with_a_bad_setting_refuses_with_its_name() {
        let state = AppState::new(Settings::from_pairs([
            (
                "AzureWebJobsStorage".to_string(),
                "UseDevelopmentStorage=true".to_string(),
            ),
            ("TABLESCAN_STEP_MAX_SECONDS".to_string(), "15s".to_string()),
        ]));
        let bad = state.bad_settings.as_ref().expect("a bad setting");
        assert_eq!(bad.0[0].setting, Setting::StepMaxSeconds);
        for why in [
            state.ledger().err().expect("no ledger"),
            state.default_cap().expect_err("no start"),
            state.allowlist().expect_err("no step"),
        ] {
            assert!(
                why.contains("TABLESCAN_STEP_MAX_SECONDS") && why.contains("\"15s\""),
                "{why}"
            );
        }
    }
}
