//! `tablescan`: start, watch and manage the scans of a tablescan function app over its HTTP
//! API, without curl and polling loops. See docs/cli.md.

mod api;
mod args;
mod azure;
mod request;
mod show;
mod watch;

use clap::Parser;
use serde_json::Value;

use api::{Api, ApiError};
use args::{Cli, Command, StartArgs};
use watch::Followed;

/// The exit code of a request refused before or by the app (bad flags included).
const REFUSED: i32 = 3;
/// The exit code after Ctrl-C stopped the watching (the scan goes on).
const INTERRUPTED: i32 = 130;

#[tokio::main]
async fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // --help and --version print and succeed; a mistake is a refused request.
            let _ = error.print();
            std::process::exit(if error.use_stderr() { REFUSED } else { 0 });
        }
    };
    std::process::exit(run(cli).await);
}

async fn run(cli: Cli) -> i32 {
    let api = match connect(&cli).await {
        Ok(api) => api,
        Err(why) => {
            eprintln!("tablescan: {why}");
            return 4;
        }
    };
    let json = cli.json;
    let outcome = match cli.command {
        Command::Start(args) => start(&api, &args, json).await,
        Command::Status { id, watch } => status(&api, &id, watch, json).await,
        Command::List { state, limit } => {
            let page = api.list(state.map(|s| s.as_str()), limit, None).await;
            page.map(|page| {
                print_json_or(json, &page, || show::list(&page));
                0
            })
        }
        Command::Cancel { id } => api.cancel(&id).await.map(|answer| {
            print_json_or(json, &answer, || {
                format!(
                    "scan {id}: {} (running steps stop at their next page)\n",
                    answer["state"].as_str().unwrap_or("cancelling")
                )
            });
            0
        }),
        Command::Retry { id } => api.retry(&id).await.map(|answer| {
            print_json_or(json, &answer, || {
                let more = if answer["more"] == true {
                    "; more remain: run retry again"
                } else {
                    ""
                };
                format!(
                    "scan {id}: {} failed work items sent again{more}\n",
                    answer["retried"].as_u64().unwrap_or(0)
                )
            });
            0
        }),
    };
    outcome.unwrap_or_else(|error| {
        eprintln!("tablescan: {error}");
        error.exit_code()
    })
}

/// The API client for the app the flags name.
async fn connect(cli: &Cli) -> Result<Api, String> {
    let args = &cli.app;
    match (&args.app, &args.resource_group) {
        (Some(app), Some(group)) => {
            let (url, key) = azure::find_app(app, group).await?;
            Ok(Api::new(&url, args.key.clone().or(Some(key))))
        }
        _ => Ok(Api::new(&args.url, args.key.clone())),
    }
}

async fn start(api: &Api, args: &StartArgs, json: bool) -> Result<i32, ApiError> {
    let body = match request::start_request(args) {
        Ok(body) => body,
        Err(why) => {
            eprintln!("tablescan: {why}");
            return Ok(REFUSED);
        }
    };
    let answer = api.start(&body, args.idempotency_key.as_deref()).await?;
    let id = answer["id"].as_str().unwrap_or_default().to_string();
    if !json {
        // What the scan was started with, as the app recorded it (its defaults filled in).
        if let Ok(status) = api.status(&id).await {
            let earlier = watch::earlier_count(api, &status["spec"]).await;
            eprintln!("{}", show::pace_line(&status["spec"], earlier));
        }
    }
    if !args.wait {
        print_json_or(json, &answer, || format!("{id}\n"));
        if !json {
            eprintln!(
                "started scan {id}: `tablescan status {id} --watch` follows it, `tablescan \
                 cancel {id}` stops it"
            );
        }
        return Ok(0);
    }
    eprintln!("started scan {id}");
    follow_to_end(api, &id, json).await
}

async fn status(api: &Api, id: &str, watch: bool, json: bool) -> Result<i32, ApiError> {
    if watch {
        return follow_to_end(api, id, json).await;
    }
    let status = api.status(id).await?;
    print_json_or(json, &status, || show::summary(&status));
    Ok(if watch::has_ended(&status) {
        watch::exit_code(&status)
    } else {
        0
    })
}

/// Follows scan `id` to its end and prints its summary (or its status as JSON).
async fn follow_to_end(api: &Api, id: &str, json: bool) -> Result<i32, ApiError> {
    let first = api.status(id).await?;
    let scope_rows = if watch::has_ended(&first) {
        None
    } else {
        watch::rows_in_scope(api, &first["spec"]).await
    };
    match watch::follow(api, id, scope_rows).await? {
        Followed::Ended(status) => {
            print_json_or(json, &status, || show::summary(&status));
            Ok(watch::exit_code(&status))
        }
        Followed::Interrupted => {
            eprintln!(
                "stopped watching; scan {id} goes on: `tablescan status {id} --watch` follows \
                 it again, `tablescan cancel {id}` stops it"
            );
            Ok(INTERRUPTED)
        }
    }
}

/// Prints `value` as JSON for scripts, or `text()` for people.
fn print_json_or(json: bool, value: &Value, text: impl FnOnce() -> String) {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_default()
        );
    } else {
        print!("{}", text());
    }
}
