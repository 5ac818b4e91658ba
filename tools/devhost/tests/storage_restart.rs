//! The storage emulator stopped in the middle of a copy and started again over its data on
//! disk: the handler's requests fail for a while (connection refused), devhost's polls too;
//! then everything resumes and the copy ends identical to its source, with exact counts.
//!
//! This test runs its own Azurite (persistent, in a temporary folder, on fixed free ports),
//! not the shared one of `scripts/test`, which it must not stop.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, rows, Host};
use serde_json::json;
use tablescan::storage::{ClientOptions, StorageAccount, TableServiceClient};

const EMULATOR_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// An Azurite of this test's own, persisting to `location`.
struct Emulator {
    child: Option<Child>,
    location: PathBuf,
    ports: [u16; 3],
}

impl Emulator {
    fn start() -> Emulator {
        // One folder per emulator: tests of one process (under `cargo test`) run side by side.
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let location =
            std::env::temp_dir().join(format!("azurite-restart-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&location).unwrap();
        let mut emulator = Emulator {
            child: None,
            location,
            ports: [free_port(), free_port(), free_port()],
        };
        emulator.run();
        emulator
    }

    fn entry() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../azurite/node_modules/azurite/dist/src/azurite.js")
    }

    fn run(&mut self) {
        let [blob, queue, table] = self.ports.map(|p| p.to_string());
        let child = Command::new("node")
            .arg(Self::entry())
            .args([
                "--disableTelemetry",
                "--silent",
                "--skipApiVersionCheck",
                "--location",
            ])
            .arg(&self.location)
            .args([
                "--blobHost",
                "127.0.0.1",
                "--queueHost",
                "127.0.0.1",
                "--tableHost",
                "127.0.0.1",
                "--blobPort",
                &blob,
                "--queuePort",
                &queue,
                "--tablePort",
                &table,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("node runs the pinned Azurite (scripts/test installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        for port in [self.ports[1], self.ports[2]] {
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(Instant::now() < deadline, "Azurite did not come up");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Stops it as a service shutdown would (SIGTERM: it writes its data out), and waits.
    fn stop(&mut self) {
        self.signal("-TERM");
    }

    /// Kills it without warning (SIGKILL): what it acknowledged since its last save (it saves
    /// every 5 seconds) is lost.
    fn kill(&mut self) {
        self.signal("-KILL");
    }

    fn signal(&mut self, signal: &str) {
        if let Some(mut child) = self.child.take() {
            common::stop::signal_and_wait(&mut child, signal, Duration::from_secs(10));
        }
    }

    /// Waits until Azurite next writes its table store to disk (it rewrites one file whole, by a
    /// rename, every 5 seconds while something changed).
    async fn wait_for_a_save_of_the_tables(&self) {
        let file = self.location.join("__azurite_db_table__.json");
        let saved = || std::fs::metadata(&file).and_then(|m| m.modified()).ok();
        let last = saved();
        let deadline = Instant::now() + Duration::from_secs(15);
        while saved() == last {
            assert!(
                Instant::now() < deadline,
                "Azurite saved no tables for 15 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn connection_string(&self) -> String {
        format!(
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={EMULATOR_KEY};\
             TableEndpoint=http://127.0.0.1:{}/devstoreaccount1;\
             QueueEndpoint=http://127.0.0.1:{}/devstoreaccount1;",
            self.ports[2], self.ports[1]
        )
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.location);
    }
}

/// How long after a save of the tables the test kills Azurite: past the claims' renewals (every
/// second with the lease of 3 s below, so every step acting since the save has renewed its
/// claim since), before the next save (5 s).
const KILL_AFTER_A_SAVE: Duration = Duration::from_millis(3_500);

async fn copy_across_a_storage_restart(kill: bool) {
    let mut emulator = Emulator::start();
    let connection = emulator.connection_string();
    let tables = TableServiceClient::new(
        &StorageAccount::from_connection_string(&connection).unwrap(),
        ClientOptions::default(),
    )
    .unwrap();
    let rows = rows();
    let source = tables.table("restartsource").unwrap();
    source.create_if_missing().await.unwrap();
    common::load(&source, &rows).await;

    let host = Host::start(
        2,
        &[
            ("AzureWebJobsStorage", connection.as_str()),
            ("TABLESCAN_STEP_MAX_QUERIES", "1"),
            ("TABLESCAN_STEP_LEASE_SECONDS", "3"),
            ("TABLESCAN_REDRIVE_AFTER_SECONDS", "5"),
        ],
    );
    let id = host
        .start_scan(json!({
            "table": "restartsource", "pageSize": 10,
            // 960 rows read and 960 written at 100 entities/s take about 19 s, so the kill
            // below (at most 10 s in) lands mid-copy however fast the machine is.
            "maxRowsPerSecond": 100,
            "action": {"type": "copy", "table": "restarttarget"}
        }))
        .await;
    host.wait_for_steps(&id, 10).await;
    if kill {
        // Just before Azurite's next save: see the test's doc for why the moment matters.
        emulator.wait_for_a_save_of_the_tables().await;
        tokio::time::sleep(KILL_AFTER_A_SAVE).await;
        let status = host.status(&id).await;
        assert_eq!(status["state"], "running", "killed mid-copy: {status}");
        emulator.kill();
        let before = status["progress"]["stepsDone"].as_u64().unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        emulator.run();
        let after = host.status(&id).await["progress"]["stepsDone"].clone();
        // What the kill took back: the steps done since the save.
        println!("steps done when Azurite was killed: {before}; after it started again: {after}");
    } else {
        emulator.stop();
        tokio::time::sleep(Duration::from_secs(3)).await;
        emulator.run();
    }

    let done = host.wait(&id, Duration::from_secs(240)).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", host.log());
    assert_eq!(done["progress"]["rowsActed"], rows.len() as u64, "{done}");
    let target = tables.table("restarttarget").unwrap();
    common::assert_same_rows(&target, &source, "the copy is identical").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copy_survives_the_storage_stopping_and_starting_again_over_its_data() {
    copy_across_a_storage_restart(false).await;
}

/// Azurite keeps its data in memory and writes it out every 5 seconds, each service (tables,
/// queues) on its own, so a SIGKILL takes the tables and the queues back to two different
/// moments of the past, losing writes it had acknowledged. The ledger, the source and the copy
/// live in one table store, so they go back together, to a state the scan had really been in:
/// steps recorded done then had written their rows; later ones come back pending and run again
/// (re-driven once their claims run out); messages sent later are gone or find no item (then
/// they are listed as rejected and change nothing); messages deleted later come back and find
/// their item done.
///
/// A step still running across the kill is told by its claim: its claim's etag changes at
/// every renewal, so if a renewal since the save was lost, the step's next renewal or its
/// finish fails and the step runs again whole. What no client can tell is a store that forgot
/// acknowledged writes and nothing else: a step whose writes since the save were lost but
/// whose claim was last written before it finishes with a claim that still matches, and counts
/// rows the store no longer holds (found in CI, and made to happen one run in six with a lease
/// of 30 s and kills within a second of a save). Azure Storage acknowledges a write only once
/// it is durable, so this is a fault of the emulator killed, not of the service; the test kills
/// Azurite at a moment when every step acting since the save has renewed since, and the copy
/// must then end identical, with exact counts.
#[tokio::test(flavor = "multi_thread")]
async fn a_copy_survives_the_storage_killed_without_warning_and_started_again() {
    copy_across_a_storage_restart(true).await;
}
