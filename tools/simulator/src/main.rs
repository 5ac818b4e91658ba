//! The tablescan simulator: deterministic, virtual time. Runs the real scan engine and the real
//! copy planner over synthetic tables of Azure size, with a model of Azure Storage's throughput
//! targets and of the Functions platform's scaling (every parameter is a flag; see params.rs).
//!
//!     simulator [--case NAME]... [--plan consumption|flex] [--csv DIR] [--param value]...
//!
//! Cases: count-3.5m copy-3.5m count-7m copy-7m count-35m copy-35m count-5m-partition
//! copy-5m-partition (default: all), each with the prefix and the serial strategy.

mod params;
mod sim;
mod storage;
mod table;

use std::io::Write;

use tablescan::scan::Strategy;

use params::Params;
use sim::{simulate, Action, Outcome, WINDOW};
use table::SyntheticTable;

/// Published figures for the same kind of table (NuGet copy, Consumption plan), seconds.
fn published(case: &str) -> Option<&'static str> {
    match case {
        "copy-3.5m" => Some("prefix 5 min, serial 6 min"),
        "copy-7m" => Some("prefix 6 min, serial did not finish"),
        "copy-35m" => Some("prefix 28 min, longest execution 2 min 57 s"),
        _ => None,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut params = Params::default();
    let rest = match params.apply_flags(&args) {
        Ok(rest) => rest,
        Err(why) => {
            eprintln!("simulator: {why}");
            std::process::exit(2);
        }
    };
    let mut cases: Vec<String> = Vec::new();
    let mut csv: Option<std::path::PathBuf> = None;
    let mut strategies = vec![Strategy::Prefix, Strategy::Serial];
    let mut i = 0;
    while i < rest.len() {
        match rest[i].as_str() {
            "--case" => cases.push(rest.get(i + 1).cloned().unwrap_or_default()),
            "--csv" => csv = rest.get(i + 1).map(Into::into),
            "--plan" => match rest.get(i + 1).map(String::as_str) {
                Some("flex") => params.max_instances = 1000,
                Some("consumption") => params.max_instances = 100,
                other => {
                    eprintln!("simulator: --plan takes consumption or flex, not {other:?}");
                    std::process::exit(2);
                }
            },
            "--prefix-only" => {
                strategies = vec![Strategy::Prefix];
                i += 1;
                continue;
            }
            other => {
                eprintln!("simulator: unknown argument {other:?}");
                std::process::exit(2);
            }
        }
        i += 2;
    }
    if cases.is_empty() {
        cases = [
            "count-3.5m",
            "copy-3.5m",
            "count-7m",
            "copy-7m",
            "count-35m",
            "copy-35m",
            "count-5m-partition",
            "copy-5m-partition",
        ]
        .map(String::from)
        .to_vec();
    }
    println!("| case | strategy | minutes | bound (min) | x bound | rows/s | steps | queries | writes | longest step (s) | critical path | peak instances | bound by | published |");
    println!(
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for case in &cases {
        let (action, table) = match case.as_str() {
            "count-3.5m" => (Action::Count, SyntheticTable::nuget_like(3_500_000, 1)),
            "copy-3.5m" => (Action::Copy, SyntheticTable::nuget_like(3_500_000, 1)),
            "count-7m" => (Action::Count, SyntheticTable::nuget_like(7_000_000, 2)),
            "copy-7m" => (Action::Copy, SyntheticTable::nuget_like(7_000_000, 2)),
            "count-35m" => (Action::Count, SyntheticTable::nuget_like(35_000_000, 3)),
            "copy-35m" => (Action::Copy, SyntheticTable::nuget_like(35_000_000, 3)),
            "count-5m-partition" => (Action::Count, SyntheticTable::one_partition(5_000_000)),
            "copy-5m-partition" => (Action::Copy, SyntheticTable::one_partition(5_000_000)),
            other => {
                eprintln!("simulator: unknown case {other:?}");
                std::process::exit(2);
            }
        };
        for strategy in &strategies {
            let started = std::time::Instant::now();
            let outcome = simulate(&table, action, *strategy, &params);
            eprintln!(
                "simulator: {case} {strategy:?} simulated in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            print_row(case, *strategy, &outcome);
            if let Some(dir) = &csv {
                write_csv(dir, case, *strategy, &outcome);
            }
        }
    }
}

fn print_row(case: &str, strategy: Strategy, o: &Outcome) {
    println!(
        "| {case} | {} | {:.2} | {:.2} | {:.2} | {:.0} | {} | {} | {} | {:.1} | {} | {} | {} | {} |",
        format!("{strategy:?}").to_lowercase(),
        o.seconds / 60.0,
        o.bound / 60.0,
        o.seconds / o.bound.max(1e-9),
        o.rows as f64 / o.seconds.max(1e-9),
        o.steps,
        o.queries,
        o.writes,
        o.longest_step,
        o.critical_path,
        o.peak_instances,
        o.bound_by,
        if strategy == Strategy::Prefix {
            published(case).unwrap_or("")
        } else {
            ""
        },
    );
}

fn write_csv(dir: &std::path::Path, case: &str, strategy: Strategy, o: &Outcome) {
    let _ = std::fs::create_dir_all(dir);
    let path = dir.join(format!(
        "{case}-{}.csv",
        format!("{strategy:?}").to_lowercase()
    ));
    if let Ok(mut file) = std::fs::File::create(path) {
        let _ = writeln!(file, "seconds,rows_per_second,writes_per_second");
        let windows = o.rows_per_window.len().max(o.writes_per_window.len());
        for i in 0..windows {
            let rows = o.rows_per_window.get(i).copied().unwrap_or(0);
            let writes = o.writes_per_window.get(i).copied().unwrap_or(0);
            let _ = writeln!(
                file,
                "{},{:.1},{:.1}",
                i as f64 * WINDOW,
                rows as f64 / WINDOW,
                writes as f64 / WINDOW
            );
        }
    }
}
