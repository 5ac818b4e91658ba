//! The cases: an action over a table of a given size, and the bound the storage targets set.

use crate::params::{Params, Shape};
use crate::published::{Message, Published};
use crate::sim::{simulate, World};
use crate::stats::Stats;
use crate::storage::{Role, Storage};
use crate::table::SyntheticTable;
use crate::tablescan::{Action, Tablescan};
use crate::DesignName;

#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub action: Action,
    /// The copy writes into the account it reads from.
    pub within: bool,
    /// Rows of the NuGet-like table, or `None` for one partition of 5 million rows.
    pub rows: Option<u64>,
}

impl Case {
    /// Parses ACTION-SIZE (see `simulator --help`).
    pub fn parse(name: &str) -> Result<Case, String> {
        let (action, within, size) = [
            ("copy-within-", Action::Copy, true),
            ("count-", Action::Count, false),
            ("copy-", Action::Copy, false),
            ("delete-", Action::Delete, false),
            ("export-", Action::Export, false),
            ("update-", Action::Update, false),
            ("partition-keys-", Action::PartitionKeys, false),
        ]
        .into_iter()
        .find_map(|(prefix, action, within)| {
            name.strip_prefix(prefix).map(|size| (action, within, size))
        })
        .ok_or_else(|| {
            format!(
                "{name:?}: the action is count, copy, copy-within, delete, export, update or \
                 partition-keys"
            )
        })?;
        let rows = match size {
            "3.5m" => Some(3_500_000),
            "7m" => Some(7_000_000),
            "35m" => Some(35_000_000),
            "350m" => Some(350_000_000),
            "5m-partition" => None,
            other => {
                return Err(format!(
                    "{name:?}: the size {other:?} is not 3.5m, 7m, 35m, 350m or 5m-partition"
                ))
            }
        };
        Ok(Case {
            name: name.to_string(),
            action,
            within,
            rows,
        })
    }

    /// Whether `design` can run the case: the published design only copies.
    pub fn check(&self, design: DesignName) -> Result<(), String> {
        if design == DesignName::Published && self.action != Action::Copy {
            return Err(format!(
                "--case {}: the published design only copies (copy-SIZE or copy-within-SIZE)",
                self.name
            ));
        }
        Ok(())
    }

    fn table(&self, params: &Params) -> SyntheticTable {
        let seed = params.seed;
        match (self.rows, params.shape) {
            (None, _) => SyntheticTable::one_partition(5_000_000),
            (Some(rows), Shape::Catalog) => SyntheticTable::nuget_like(rows, seed),
            (Some(rows), Shape::Ids) => SyntheticTable::nuget_ids(rows, seed, 4),
        }
    }
}

/// A simulated scan, with what the report needs.
pub struct Outcome {
    pub case: String,
    pub design: DesignName,
    pub params: Params,
    pub table_rows: u64,
    pub table_partitions: u64,
    pub action: Action,
    pub stats: Stats,
    pub bound: Bound,
    /// The share of the application's entities the scanned account refused.
    pub app_refused_share: f64,
}

impl Outcome {
    /// What the scan should act on once each: its table's rows, or for partition keys its
    /// partitions; and what they are.
    pub fn acted_expected(&self) -> (u64, &'static str) {
        if self.action == Action::PartitionKeys {
            (self.table_partitions, "partitions")
        } else {
            (self.table_rows, "rows")
        }
    }
}

/// The shortest run the storage targets allow, whatever the design: every row read once (and
/// written or deleted once) at its account's target, and the largest partition at its target;
/// for partition keys, one entity read and one message put per partition (see
/// [`partition_keys_bound`]). The scan's bookkeeping is left out: it is overhead a design adds.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub seconds: f64,
    pub by: &'static str,
}

/// What the bound needs to know of a table.
#[derive(Debug, Clone, Copy)]
pub struct TableSize {
    pub rows: u64,
    /// Rows of the largest partition.
    pub largest: u64,
    pub partitions: u64,
}

impl TableSize {
    pub fn of(table: &SyntheticTable) -> Self {
        TableSize {
            rows: table.rows(),
            largest: table.largest_partition(),
            partitions: table.partitions() as u64,
        }
    }
}

/// The longest of `(seconds, what bounds them)`.
fn longest(terms: impl IntoIterator<Item = (f64, &'static str)>) -> Bound {
    terms.into_iter().fold(
        Bound {
            seconds: 0.0,
            by: "",
        },
        |best, (seconds, by)| {
            if seconds > best.seconds {
                Bound { seconds, by }
            } else {
                best
            }
        },
    )
}

fn bound(case: &Case, size: TableSize, params: &Params) -> Bound {
    if case.action == Action::PartitionKeys {
        return partition_keys_bound(size, params);
    }
    let rows = size.rows as f64;
    let account = params.account_entities_per_second;
    // The application's load is served first: the scan has what is left.
    let account = (account - params.app_load).max(1.0);
    let writes = if case.action.writes_rows() { rows } else { 0.0 };
    let same_account = case.action.writes_source() || case.within;
    let (source, target) = if same_account {
        (rows + writes, 0.0)
    } else {
        (rows, writes)
    };
    // A delete or an update reads and writes in the same partition; a copy writes into another
    // table.
    let partition_factor = if case.action.writes_source() {
        2.0
    } else {
        1.0
    };
    let partition = size.largest as f64 * partition_factor / params.partition_entities_per_second;
    // A cap counts every entity the scan moves: rows read, and rows written or deleted.
    let capped = if params.cap > 0.0 {
        (rows + writes) / params.cap
    } else {
        0.0
    };
    longest([
        (capped, "cap"),
        (source / account, "source account"),
        (target / account, "target account"),
        (partition, "largest partition"),
    ])
}

/// A partition-keys scan cannot do with less than one entity read per partition (the seek that
/// finds it) and one message put per partition on its output queue, which takes 2,000 messages
/// a second (`--queue-messages-per-second`); the queue is in the scanned account, so the puts
/// count against the account's target too. A cap counts the entities read (the action writes
/// no table). No partition is read past its first two rows, so the largest partition bounds
/// nothing: on one partition the bound is milliseconds, and the scan's fixed costs (its first
/// invocation, the ledger) are all there is.
fn partition_keys_bound(size: TableSize, params: &Params) -> Bound {
    let partitions = size.partitions as f64;
    let account = (params.account_entities_per_second - params.app_load).max(1.0);
    let capped = if params.cap > 0.0 {
        partitions / params.cap
    } else {
        0.0
    };
    longest([
        (capped, "cap"),
        (2.0 * partitions / account, "source account"),
        (
            partitions / params.queue_messages_per_second,
            "output queue",
        ),
        (
            size.largest.min(2) as f64 / params.partition_entities_per_second,
            "largest partition",
        ),
    ])
}

/// Simulates `case` with `design`.
pub fn run(case: &Case, design: DesignName, params: &Params) -> Result<Outcome, String> {
    run_on(case, design, params, case.table(params), None)
}

/// Simulates a partition-keys `case` with tablescan on `table`, keeping the PartitionKeys it
/// puts on its output queue (in `stats.partition_keys`).
#[cfg(test)]
pub fn run_collecting_keys(
    case: &Case,
    params: &Params,
    table: SyntheticTable,
) -> Result<Outcome, String> {
    run_on(case, DesignName::Tablescan, params, table, Some(Vec::new()))
}

fn run_on(
    case: &Case,
    design: DesignName,
    params: &Params,
    table: SyntheticTable,
    keys: Option<Vec<String>>,
) -> Result<Outcome, String> {
    let size = TableSize::of(&table);
    let storage = Storage::new(params.clone(), case.within || case.action == Action::Delete);
    let mut world = World::new(params.clone(), storage);
    world.stats.partition_keys = keys;
    let world = match design {
        DesignName::Tablescan => crate::engine::simulate(
            std::sync::Arc::new(table),
            case.action,
            case.within,
            world,
            Tablescan::options(params, case.action),
        )?,
        DesignName::Published => {
            let mut scan = Published::new(&table);
            simulate(&mut scan, Message::Start, 1, world)?
        }
    };
    Ok(outcome(case, design, params, size, world))
}

fn outcome(
    case: &Case,
    design: DesignName,
    params: &Params,
    size: TableSize,
    world: World,
) -> Outcome {
    let source = world.storage.account_of(Role::Source);
    let source = &world.storage.accounts[source];
    let mut stats = world.stats;
    // The platform starts with the instance the start request woke (`Platform::new`); the peak
    // is recorded at scaling decisions, the first of them 30 s in, which a short scan never
    // reaches.
    stats.peak_instances = stats.peak_instances.max(1);
    Outcome {
        case: case.name.clone(),
        design,
        params: params.clone(),
        table_rows: size.rows,
        table_partitions: size.partitions,
        action: case.action,
        bound: bound(case, size, params),
        app_refused_share: source.app_refused / (source.app_served + source.app_refused).max(1.0),
        stats,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(args: &[&str]) -> Params {
        crate::params::parse(args).expect("valid parameters")
    }

    #[test]
    fn names_parse_and_bad_ones_say_why() {
        let case = Case::parse("copy-within-35m").unwrap();
        assert!(case.within && case.action == Action::Copy && case.rows == Some(35_000_000));
        assert!(Case::parse("delete-5m-partition").unwrap().rows.is_none());
        assert!(Case::parse("move-35m").unwrap_err().contains("action"));
        assert!(Case::parse("count-12m").unwrap_err().contains("size"));
        let count = Case::parse("count-3.5m").unwrap();
        assert!(count.check(DesignName::Published).is_err());
    }

    #[test]
    fn the_bound_counts_entities_on_each_account() {
        let p = params(&[]);
        let size = TableSize::of(&SyntheticTable::nuget_ids(1_000_000, 1, 4));
        let count = bound(&Case::parse("count-3.5m").unwrap(), size, &p);
        assert!((count.seconds - 50.0).abs() < 1e-9, "{count:?}");
        let within = bound(&Case::parse("copy-within-3.5m").unwrap(), size, &p);
        assert!((within.seconds - 100.0).abs() < 1e-9, "{within:?}");
        let other = bound(&Case::parse("copy-3.5m").unwrap(), size, &p);
        assert!((other.seconds - 50.0).abs() < 1e-9, "{other:?}");
        // A cap counts the rows read and the rows written.
        let capped = bound(
            &Case::parse("copy-3.5m").unwrap(),
            size,
            &params(&["--cap", "10000"]),
        );
        assert_eq!(capped.by, "cap");
        assert!((capped.seconds - 200.0).abs() < 1e-9, "{capped:?}");
        let huge = TableSize::of(&SyntheticTable::one_partition(5_000_000));
        let delete = bound(&Case::parse("delete-5m-partition").unwrap(), huge, &p);
        assert_eq!(delete.by, "largest partition");
        assert!((delete.seconds - 5_000.0).abs() < 1e-9);
    }

    /// Every row is acted on exactly once when nothing fails for good, and a small scan on
    /// an idle account finishes within a small multiple of its bound.
    #[test]
    fn a_small_copy_acts_on_every_row() {
        let p = params(&["--status-poll-s", "0"]);
        let case = Case {
            name: "copy-within-small".into(),
            action: Action::Copy,
            within: true,
            rows: Some(200_000),
        };
        for design in [DesignName::Tablescan, DesignName::Published] {
            let outcome = run(&case, design, &p).unwrap();
            assert_eq!(outcome.stats.failed_for_good, 0, "{design:?}");
            assert_eq!(outcome.stats.rows_acted, outcome.table_rows, "{design:?}");
            assert!(outcome.stats.seconds > outcome.bound.seconds, "{design:?}");
        }
    }

    /// At a tenth of the account target the same scan takes longer, is refused and backs off,
    /// and still acts on every row: nothing fails for good.
    #[test]
    fn a_smaller_account_target_slows_the_scan_without_losing_work() {
        let case = Case {
            rows: Some(200_000),
            ..Case::parse("count-3.5m").unwrap()
        };
        let fast = run(&case, DesignName::Tablescan, &params(&[])).unwrap();
        let slow = run(
            &case,
            DesignName::Tablescan,
            &params(&["--account-entities-per-second", "2000"]),
        )
        .unwrap();
        assert!(slow.stats.seconds > 1.5 * fast.stats.seconds);
        assert!(slow.stats.seconds >= 200_000.0 / 2000.0);
        assert_eq!(fast.stats.rows_acted, 200_000);
        assert_eq!(slow.stats.rows_acted, 200_000);
        assert_eq!(slow.stats.failed_for_good, 0);
    }

    fn small(action: &str) -> Case {
        Case {
            rows: Some(100_000),
            ..Case::parse(&format!("{action}-3.5m")).unwrap()
        }
    }

    /// An instance cannot act on rows faster than its core: a handler ten thousand times
    /// slower per row makes the same count far slower.
    #[test]
    fn the_cpu_of_an_instance_caps_its_rows_per_second() {
        let fast = run(&small("count"), DesignName::Tablescan, &params(&[])).unwrap();
        let slow = run(
            &small("count"),
            DesignName::Tablescan,
            &params(&["--count-cpu-ms-per-1000", "500"]),
        )
        .unwrap();
        assert!(slow.stats.seconds > 2.0 * fast.stats.seconds);
        assert_eq!(slow.stats.rows_acted, 100_000);
    }

    /// Every step pays the ledger at least its begin and its finish; a client polling the
    /// status pays the same per read whatever the scan's size.
    #[test]
    fn steps_and_status_reads_pay_the_ledger() {
        let polled = run(
            &small("count"),
            DesignName::Tablescan,
            &params(&["--status-poll-s", "0.5"]),
        )
        .unwrap();
        let s = &polled.stats;
        assert!(s.status_reads > 10);
        let per_step = crate::ledger_costs::BEGIN.requests + crate::ledger_costs::FINISH.requests;
        assert!(s.ledger_requests >= per_step * s.executions_done_ok);
    }

    /// An outage of ten minutes is waited out: the items fail and come back, none for good.
    #[test]
    fn an_outage_shorter_than_the_window_loses_nothing() {
        let outage = run(
            &small("count"),
            DesignName::Tablescan,
            &params(&["--outage-at-s", "5", "--outage-s", "600"]),
        )
        .unwrap();
        assert_eq!(outage.stats.failed_for_good, 0);
        assert_eq!(outage.stats.rows_acted, 100_000);
        assert!(outage.stats.seconds > 600.0);
        let window = run(
            &small("count"),
            DesignName::Tablescan,
            &params(&[
                "--outage-at-s",
                "5",
                "--outage-s",
                "900",
                "--outage-window-s",
                "300",
            ]),
        )
        .unwrap();
        assert!(window.stats.failed_for_good > 0);
    }

    /// A cap holds the scan near it: the scan takes about rows / cap.
    #[test]
    fn a_capped_scan_runs_at_its_cap() {
        let capped = run(
            &small("count"),
            DesignName::Tablescan,
            &params(&["--cap", "2000", "--status-poll-s", "0"]),
        )
        .unwrap();
        let at_cap = 100_000.0 / 2000.0;
        assert!(
            capped.stats.seconds > 0.95 * at_cap && capped.stats.seconds < 1.6 * at_cap,
            "{} s",
            capped.stats.seconds
        );
        assert_eq!(capped.stats.rows_acted, 100_000);
    }
}

#[cfg(test)]
mod update_and_keys_tests;

#[cfg(test)]
mod determinism_tests;
