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
        ]
        .into_iter()
        .find_map(|(prefix, action, within)| {
            name.strip_prefix(prefix).map(|size| (action, within, size))
        })
        .ok_or_else(|| {
            format!("{name:?}: the action is count, copy, copy-within, delete or export")
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
    pub stats: Stats,
    pub bound: Bound,
    /// The share of the application's entities the scanned account refused.
    pub app_refused_share: f64,
}

/// The shortest run the storage targets allow, whatever the design: every row read once (and
/// written or deleted once) at its account's target, and the largest partition at its target.
/// The scan's bookkeeping is left out: it is overhead a design adds.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub seconds: f64,
    pub by: &'static str,
}

fn bound(case: &Case, rows: u64, largest: u64, params: &Params) -> Bound {
    let rows = rows as f64;
    let account = params.account_entities_per_second;
    // The application's load is served first: the scan has what is left.
    let account = (account - params.app_load).max(1.0);
    let writes = match case.action {
        Action::Count | Action::Export => 0.0,
        _ => rows,
    };
    let same_account = case.action == Action::Delete || case.within;
    let (source, target) = if same_account {
        (rows + writes, 0.0)
    } else {
        (rows, writes)
    };
    // A delete reads and deletes in the same partition; a copy writes into another table.
    let partition_factor = if case.action == Action::Delete {
        2.0
    } else {
        1.0
    };
    let partition = largest as f64 * partition_factor / params.partition_entities_per_second;
    // A cap counts every entity the scan moves: rows read, and rows written or deleted.
    let capped = if params.cap > 0.0 {
        (rows + writes) / params.cap
    } else {
        0.0
    };
    [
        (capped, "cap"),
        (source / account, "source account"),
        (target / account, "target account"),
        (partition, "largest partition"),
    ]
    .into_iter()
    .fold(
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

/// Simulates `case` with `design`.
pub fn run(case: &Case, design: DesignName, params: &Params) -> Result<Outcome, String> {
    let table = case.table(params);
    let storage = Storage::new(params.clone(), case.within || case.action == Action::Delete);
    let world = World::new(params.clone(), storage);
    let world = match design {
        DesignName::Tablescan => {
            let rows = table.rows();
            let largest = table.largest_partition();
            let table = std::sync::Arc::new(table);
            let world = crate::engine::simulate(
                table,
                case.action,
                case.within,
                world,
                Tablescan::options(params),
            )?;
            return Ok(outcome(case, design, params, rows, largest, world));
        }
        DesignName::Published => {
            let mut scan = Published::new(&table);
            simulate(&mut scan, Message::Start, 1, world)?
        }
    };
    Ok(outcome(
        case,
        design,
        params,
        table.rows(),
        table.largest_partition(),
        world,
    ))
}

fn outcome(
    case: &Case,
    design: DesignName,
    params: &Params,
    rows: u64,
    largest: u64,
    world: World,
) -> Outcome {
    let source = world.storage.account_of(Role::Source);
    let source = &world.storage.accounts[source];
    Outcome {
        case: case.name.clone(),
        design,
        params: params.clone(),
        table_rows: rows,
        bound: bound(case, rows, largest, params),
        app_refused_share: source.app_refused / (source.app_served + source.app_refused).max(1.0),
        stats: world.stats,
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
        let table = SyntheticTable::nuget_ids(1_000_000, 1, 4);
        let (rows, largest) = (table.rows(), table.largest_partition());
        let count = bound(&Case::parse("count-3.5m").unwrap(), rows, largest, &p);
        assert!((count.seconds - 50.0).abs() < 1e-9, "{count:?}");
        let within = bound(&Case::parse("copy-within-3.5m").unwrap(), rows, largest, &p);
        assert!((within.seconds - 100.0).abs() < 1e-9, "{within:?}");
        let other = bound(&Case::parse("copy-3.5m").unwrap(), rows, largest, &p);
        assert!((other.seconds - 50.0).abs() < 1e-9, "{other:?}");
        // A cap counts the rows read and the rows written.
        let capped = bound(
            &Case::parse("copy-3.5m").unwrap(),
            rows,
            largest,
            &params(&["--cap", "10000"]),
        );
        assert_eq!(capped.by, "cap");
        assert!((capped.seconds - 200.0).abs() < 1e-9, "{capped:?}");
        let huge = SyntheticTable::one_partition(5_000_000);
        let delete = bound(
            &Case::parse("delete-5m-partition").unwrap(),
            huge.rows(),
            huge.largest_partition(),
            &p,
        );
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
