//! `tablescan schedule ...`: scans on a timetable, kept and run by the app (docs/schedules.md).
//! `set` takes the flags of `start` for the scan each occurrence starts.

use reqwest::Method;
use serde_json::{json, Value};

use crate::api::{Api, ApiError};
use crate::args::{ScheduleCommand, SetArgs};

/// The request body of `schedule set`.
pub fn set_body(args: &SetArgs) -> Result<Value, String> {
    if args.scan.wait {
        return Err(
            "--wait does not apply to a schedule: each occurrence starts its own scan; \
                    `tablescan schedule show NAME` shows their outcomes"
                .into(),
        );
    }
    if args.scan.idempotency_key.is_some() {
        return Err(
            "--idempotency-key does not apply to a schedule: each occurrence has its own".into(),
        );
    }
    if args.time_zone.is_some() && args.cron.is_none() {
        return Err("--time-zone goes with --cron, not --every".into());
    }
    let scan = crate::request::start_request(&args.scan)?;
    let mut body = json!({ "scan": scan });
    if let Some(cron) = &args.cron {
        body["cron"] = json!(cron);
    }
    if let Some(zone) = &args.time_zone {
        body["timeZone"] = json!(zone);
    }
    if let Some(every) = &args.every {
        body["every"] = json!(every);
    }
    if args.paused {
        body["paused"] = json!(true);
    }
    Ok(body)
}

fn timetable(s: &Value) -> String {
    match (s["cron"].as_str(), s["every"].as_str()) {
        (Some(cron), _) => format!(
            "cron \"{cron}\" ({})",
            s["timeZone"].as_str().unwrap_or("UTC")
        ),
        (None, Some(every)) => format!("every {every}"),
        _ => "?".into(),
    }
}

/// A run in a few words: its occurrence, what became of it, and its scan's outcome if known.
fn run_line(run: &Value) -> String {
    let mut line = run["occurrence"].as_str().unwrap_or("?").to_string();
    if run["manual"] == true {
        line.push_str(" (by hand)");
    }
    if run["late"] == true {
        let missed = run["missed"].as_u64().unwrap_or(0);
        line.push_str(&format!(" late ({missed} missed before it)"));
    }
    if let Some(why) = run["skipped"].as_str() {
        line.push_str(&format!(": skipped, {why}"));
    } else if let Some(why) = run["error"].as_str() {
        line.push_str(&format!(": not started, {why}"));
    } else if let Some(scan) = run["scan"].as_str() {
        line.push_str(&format!(": scan {scan}"));
        if let Some(state) = run["state"].as_str() {
            line.push_str(&format!(" {state}"));
        }
        if let Some(rows) = run["rowsActed"].as_u64() {
            line.push_str(&format!(", {} rows acted on", crate::show::thousands(rows)));
        }
        if let Some(seconds) = run["seconds"].as_f64() {
            line.push_str(&format!(", {seconds} s"));
        }
        if let Some(why) = run["failedBecause"].as_str() {
            line.push_str(&format!(" ({why})"));
        }
    }
    line
}

/// A schedule in text.
pub fn text(s: &Value) -> String {
    let name = s["name"].as_str().unwrap_or("?");
    let mut out = format!("schedule {name}: {}", timetable(s));
    if s["paused"] == true {
        out.push_str(", paused");
    }
    out.push('\n');
    out.push_str(&format!("  scan      {}\n", s["scan"]));
    let next: Vec<&str> = s["nextRuns"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !next.is_empty() {
        out.push_str(&format!("  next      {}\n", next.join(", ")));
    }
    if let Some(runs) = s["runs"].as_array() {
        for run in runs.iter().rev() {
            out.push_str(&format!("  ran       {}\n", run_line(run)));
        }
    }
    out
}

/// The list in text: a line per schedule.
pub fn list_text(answer: &Value) -> String {
    let schedules = answer["schedules"].as_array().cloned().unwrap_or_default();
    let mut out = String::new();
    if schedules.is_empty() {
        out.push_str("no schedules\n");
    }
    for s in &schedules {
        let next = s["nextRuns"][0].as_str().unwrap_or("-");
        let last = if s["lastRun"].is_null() {
            "never ran".to_string()
        } else {
            format!("last {}", run_line(&s["lastRun"]))
        };
        let paused = if s["paused"] == true { " paused" } else { "" };
        out.push_str(&format!(
            "{}  {}{paused}  next {next}  {last}\n",
            s["name"].as_str().unwrap_or("?"),
            timetable(s)
        ));
    }
    for bad in answer["unreadableSchedules"]
        .as_array()
        .into_iter()
        .flatten()
    {
        out.push_str(&format!(
            "{}  cannot be read: {}\n",
            bad["name"].as_str().unwrap_or("?"),
            bad["error"].as_str().unwrap_or("")
        ));
    }
    out
}

/// Runs a `schedule` command; the exit code.
pub async fn run(api: &Api, command: &ScheduleCommand, json: bool) -> Result<i32, ApiError> {
    let print = |value: &Value, text: String| {
        if json {
            println!(
                "{}",
                serde_json::to_string_pretty(value).unwrap_or_default()
            );
        } else {
            print!("{text}");
        }
    };
    match command {
        ScheduleCommand::Set(args) => {
            let body = match set_body(args) {
                Ok(body) => body,
                Err(why) => {
                    eprintln!("tablescan: {why}");
                    return Ok(3);
                }
            };
            let answer = api.schedules(Method::PUT, &args.name, Some(&body)).await?;
            print(&answer, format!("set {}", text(&answer)));
        }
        ScheduleCommand::List => {
            let answer = api.schedules(Method::GET, "", None).await?;
            print(&answer, list_text(&answer));
        }
        ScheduleCommand::Show { name } => {
            let answer = api.schedules(Method::GET, name, None).await?;
            print(&answer, text(&answer));
        }
        ScheduleCommand::Pause { name } | ScheduleCommand::Resume { name } => {
            let action = if matches!(command, ScheduleCommand::Pause { .. }) {
                "pause"
            } else {
                "resume"
            };
            let answer = api
                .schedules(Method::POST, &format!("{name}/{action}"), None)
                .await?;
            print(&answer, text(&answer));
        }
        ScheduleCommand::Run { name } | ScheduleCommand::Preview { name } => {
            let action = if matches!(command, ScheduleCommand::Run { .. }) {
                "run"
            } else {
                "preview"
            };
            let answer = api
                .schedules(Method::POST, &format!("{name}/{action}"), None)
                .await?;
            let scan = answer["scan"].as_str().unwrap_or("?");
            let what = if action == "run" {
                "started"
            } else {
                "started a dry run,"
            };
            print(
                &answer,
                format!(
                    "schedule {name}: {what} scan {scan}; `tablescan status {scan} --watch` follows it\n"
                ),
            );
        }
        ScheduleCommand::Delete { name } => {
            let answer = api.schedules(Method::DELETE, name, None).await?;
            print(
                &answer,
                format!("schedule {name} deleted (the scans it started stay)\n"),
            );
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn set(args: &[&str]) -> Result<Value, String> {
        let mut all = vec!["tablescan", "schedule", "set"];
        all.extend_from_slice(args);
        let cli = crate::args::Cli::try_parse_from(all).map_err(|e| e.to_string())?;
        match cli.command {
            crate::args::Command::Schedule {
                command: ScheduleCommand::Set(args),
            } => set_body(&args),
            _ => Err("not set".into()),
        }
    }

    #[test]
    fn set_sends_the_timetable_and_the_scan_as_start_would() {
        let body = set(&[
            "logs-retention",
            "--cron",
            "0 3 * * *",
            "--time-zone",
            "Europe/Berlin",
            "--table",
            "logs",
            "--older-than",
            "P90D",
            "--delete",
        ])
        .unwrap();
        assert_eq!(body["cron"], "0 3 * * *");
        assert_eq!(body["timeZone"], "Europe/Berlin");
        assert_eq!(body["scan"]["table"], "logs");
        assert_eq!(body["scan"]["olderThan"], "P90D");
        assert_eq!(body["scan"]["action"]["type"], "delete");
        let every = set(&["n", "--every", "PT15M", "--table", "t", "--count"]).unwrap();
        assert_eq!(every["every"], "PT15M");
    }

    #[test]
    fn set_refuses_what_does_not_apply() {
        let none = set(&["n", "--table", "t", "--count"]).unwrap_err();
        assert!(
            none.contains("--cron") || none.contains("timetable"),
            "{none}"
        );
        let both = set(&[
            "n",
            "--cron",
            "* * * * *",
            "--every",
            "PT1M",
            "--table",
            "t",
            "--count",
        ]);
        assert!(both.is_err());
        let wait = set(&["n", "--every", "PT1M", "--table", "t", "--count", "--wait"]).unwrap_err();
        assert!(wait.contains("--wait does not apply"), "{wait}");
        let zone = set(&[
            "n",
            "--every",
            "PT1M",
            "--time-zone",
            "UTC",
            "--table",
            "t",
            "--count",
        ]);
        assert!(zone.is_err());
        let flag = set(&[
            "n", "--every", "PT1M", "--table", "t", "--count", "--mode", "merge",
        ])
        .unwrap_err();
        assert!(flag.contains("--mode"), "{flag}");
    }
}
