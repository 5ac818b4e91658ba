//! The handler's states of one case: served on loopback over one in-memory ledger, with the
//! case's own queues on Azurite.

use std::sync::Arc;
use std::time::Duration;

use tablescan::functions::app::ItemQueues;
use tablescan::functions::{AppState, Settings};
use tablescan::job::Ledger;
use tablescan::storage::table::in_memory::InMemoryTable;

use crate::common::host::TestHost;
use crate::common::{self, unique_name};

/// The lease of the delivering states' claims: short, so that a duplicate waiting for a claim,
/// or a redelivery after a finish that failed, waits half a second rather than a minute.
pub(crate) const LEASE: Duration = Duration::from_millis(500);

/// The handler's states of one case, over one in-memory ledger and the case's own queues on
/// Azurite (where the re-drive and a step's hand-on send messages).
pub(crate) struct World {
    pub(crate) table: InMemoryTable,
    pub(crate) ledger: Ledger,
    pub(crate) queues: ItemQueues,
    /// Served states whose steps run 1 query and 3 queries.
    pub(crate) hosts: [Arc<TestHost>; 2],
    /// A state as deployed (a one-minute lease, the 15-minute re-drive) for the API calls and
    /// the timer's sweep, served.
    pub(crate) watcher: Arc<TestHost>,
    pub(crate) watcher_state: Arc<AppState>,
    /// A state whose re-drive sends items untouched for a second: the sweep after a loss.
    pub(crate) drill: Arc<AppState>,
}

impl World {
    pub(crate) async fn new() -> World {
        let table = InMemoryTable::new(&unique_name("hmledger"));
        table.create_if_missing().await.unwrap();
        let ledger = Ledger::in_memory(table.clone());
        let queues = ItemQueues {
            range: unique_name("hmr"),
            partition: unique_name("hmp"),
            export: unique_name("hme"),
        };
        for name in queues.all() {
            common::queues()
                .queue(name)
                .unwrap()
                .create()
                .await
                .unwrap();
        }
        let state = |queries: u32, lease: Duration, redrive_after: Duration| {
            let mut state = AppState::new(Settings::from_pairs([
                (
                    "AzureWebJobsStorage".to_string(),
                    common::connection_string(),
                ),
                (
                    "TABLESCAN_LEDGER_TABLE".to_string(),
                    ledger.table().name().to_string(),
                ),
                (
                    "TABLESCAN_STEP_MAX_QUERIES".to_string(),
                    queries.to_string(),
                ),
            ]));
            let mutable = Arc::get_mut(&mut state).expect("not shared yet");
            mutable.ledger = Ok(ledger.clone());
            mutable.item_queues = queues.clone();
            mutable.config.lease = lease;
            mutable.config.redrive_after = redrive_after;
            // A step's hand-on at the last delivery comes back in 2 s, not a minute.
            mutable.host_queues.visibility_timeout = Duration::from_secs(1);
            state
        };
        let deployed = Duration::from_secs(15 * 60);
        let watcher_state = state(20, Duration::from_secs(60), deployed);
        World {
            hosts: [
                Arc::new(TestHost::serve(state(1, LEASE, deployed)).await),
                Arc::new(TestHost::serve(state(3, LEASE, deployed)).await),
            ],
            watcher: Arc::new(TestHost::serve(watcher_state.clone()).await),
            watcher_state,
            drill: state(20, LEASE, Duration::from_secs(1)),
            table,
            ledger,
            queues,
        }
    }
}
