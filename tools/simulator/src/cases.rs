//! The cases: an action over a table of a given size, and the bound the storage targets set.

use crate::params::{Params, Shape};
use crate::published::{Message, Published};
use crate::sim::{simulate, World};
use crate::stats::Stats;
use crate::storage::{Role, Storage};
use crate::table::SyntheticTable;
use crate::tablescan::{Action, Tablescan, QUEUES};
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
        ]
        .into_iter()
        .find_map(|(prefix, action, within)| {
            name.strip_prefix(prefix).map(|size| (action, within, size))
        })
        .ok_or_else(|| format!("{name:?}: the action is count, copy, copy-within or delete"))?;
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
    /// Entities served by the account that holds the ledger, and of those the ledger's.
    pub app_account_entities: f64,
    pub throttled: u64,
}

/// The shortest run the storage targets allow, whatever the design: every row read once (and
/// written or deleted once) at its account's target, and the largest partition at its target.
/// The scan's bookkeeping is left out: it is overhead a design adds.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub seconds: f64,
    pub by: &'static str,
}

fn bound(case: &Case, table: &SyntheticTable, params: &Params) -> Bound {
    let rows = table.rows() as f64;
    let account = params.account_entities_per_second;
    let writes = match case.action {
        Action::Count => 0.0,
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
    let partition =
        table.largest_partition() as f64 * partition_factor / params.partition_entities_per_second;
    [
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
            let mut scan = Tablescan::new(&table, case.action, &world);
            simulate(&mut scan, Tablescan::first(), QUEUES, world)?
        }
        DesignName::Published => {
            let mut scan = Published::new(&table);
            simulate(&mut scan, Message::Start, 1, world)?
        }
    };
    let app = world.storage.account_of(Role::App);
    Ok(Outcome {
        case: case.name.clone(),
        design,
        params: params.clone(),
        table_rows: table.rows(),
        bound: bound(case, &table, params),
        app_account_entities: world.storage.accounts[app].entities,
        throttled: world.storage.accounts.iter().map(|a| a.throttled).sum(),
        stats: world.stats,
    })
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
        let count = bound(&Case::parse("count-3.5m").unwrap(), &table, &p);
        assert!((count.seconds - 50.0).abs() < 1e-9, "{count:?}");
        let within = bound(&Case::parse("copy-within-3.5m").unwrap(), &table, &p);
        assert!((within.seconds - 100.0).abs() < 1e-9, "{within:?}");
        let other = bound(&Case::parse("copy-3.5m").unwrap(), &table, &p);
        assert!((other.seconds - 50.0).abs() < 1e-9, "{other:?}");
        let huge = SyntheticTable::one_partition(5_000_000);
        let delete = bound(&Case::parse("delete-5m-partition").unwrap(), &huge, &p);
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

    /// At a tenth of the account target the same scan takes longer, is throttled, and rows go
    /// unacted only through items that failed for good.
    #[test]
    fn a_smaller_account_target_slows_the_scan_and_throttles() {
        let case = Case::parse("count-3.5m").unwrap();
        let case = Case {
            rows: Some(400_000),
            ..case
        };
        let fast = run(&case, DesignName::Tablescan, &params(&[])).unwrap();
        let slow = run(
            &case,
            DesignName::Tablescan,
            &params(&["--account-entities-per-second", "2000"]),
        )
        .unwrap();
        assert!(slow.stats.seconds > 1.5 * fast.stats.seconds);
        assert!(slow.stats.seconds >= 400_000.0 / 2000.0);
        assert!(slow.throttled > 0);
        assert_eq!(fast.stats.rows_acted, 400_000);
        assert_eq!(
            slow.stats.rows_acted == 400_000,
            slow.stats.failed_for_good == 0,
            "{} rows acted, {} items failed for good",
            slow.stats.rows_acted,
            slow.stats.failed_for_good
        );
    }

    fn small(action: &str) -> Case {
        Case {
            rows: Some(200_000),
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
        assert_eq!(slow.stats.rows_acted, 200_000);
    }

    /// Status reads read the ledger partition whole: each costs about one entity per work item,
    /// and polling more often costs more of the account.
    #[test]
    fn status_reads_cost_the_whole_ledger_partition() {
        let quiet = run(
            &small("count"),
            DesignName::Tablescan,
            &params(&["--status-poll-s", "0"]),
        )
        .unwrap();
        assert_eq!(quiet.stats.status_reads, 0);
        let polled = run(
            &small("count"),
            DesignName::Tablescan,
            &params(&["--status-poll-s", "0.5"]),
        )
        .unwrap();
        assert!(polled.stats.status_reads > 10);
        let per_read = polled.stats.status_entities as f64 / polled.stats.status_reads as f64;
        assert!(per_read > 1.0 && per_read <= 1.0 + polled.stats.executions as f64);
        assert!(polled.stats.step_ledger_entities >= 5 * polled.stats.executions_done_ok);
    }
}
