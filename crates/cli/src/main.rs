//! `tablescan`: start, watch and manage the scans of a tablescan function app over its HTTP
//! API, without curl and polling loops. See docs/cli.md.

mod api;
mod applies;
mod args;
mod azure;
mod describe;
mod list;
mod remove;
mod request;
mod resume;
mod schedule;
mod set;
mod show;
mod summary;
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
    // A start's flags are checked before anything is asked of the app.
    let body = match &cli.command {
        Command::Start(args) => match request::start_request(args) {
            Ok(body) => Some(body),
            Err(why) => {
                eprintln!("tablescan: {why}");
                return REFUSED;
            }
        },
        _ => None,
    };
    // And the request they make, as the app would check it.
    if let Some(Err(refused)) = body.as_ref().map(request::check) {
        report(&refused, cli.json);
        return refused.exit_code();
    }
    let api = match connect(&cli).await {
        Ok(api) => api,
        Err(why) => {
            eprintln!("tablescan: {why}");
            return 4;
        }
    };
    let json = cli.json;
    let outcome = match &cli.command {
        Command::Start(args) => start(&api, args, body.unwrap_or_default(), json).await,
        Command::Status { id, watch } => status(&api, id, *watch, json).await,
        Command::List(args) => list::read(&api, args).await.map(|listing| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            print_json_or(json, &list::json(&listing), || {
                list::text(&listing, args, now)
            });
            0
        }),
        Command::Cancel { id } => api.cancel(id).await.map(|answer| {
            print_json_or(json, &answer.json, || {
                let state = match answer.read.state.as_str() {
                    "" => "cancelling",
                    state => state,
                };
                format!("scan {id}: {state} (running steps stop at their next page)\n")
            });
            0
        }),
        Command::Pause { id } => pause(&api, id, json).await,
        Command::Resume { id } => resume(&api, id, json).await,
        Command::Schedule { command } => schedule::run(&api, command, json).await,
        Command::Retry { id } => retry(&api, id, json).await,
        Command::Remove { id } => remove(&api, id, json).await,
        Command::Ui { without_key } => Ok(ui(&api, *without_key, json).await),
    };
    outcome.unwrap_or_else(|error| {
        report(&error, json);
        error.exit_code()
    })
}

/// Says why a call failed (stderr), with the app's JSON answer on stdout for --json.
fn report(error: &ApiError, json: bool) {
    if json {
        if let Some(body) = error.json() {
            println!(
                "{}",
                serde_json::to_string_pretty(&body).unwrap_or_default()
            );
        }
    }
    eprintln!("tablescan: {error}");
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

async fn start(api: &Api, args: &StartArgs, body: Value, json: bool) -> Result<i32, ApiError> {
    // One key per start, so that the command's own retry after a lost answer, or the user's
    // with --idempotency-key, answers the scan the first attempt started instead of a second.
    let key = args
        .idempotency_key
        .clone()
        .unwrap_or_else(|| format!("tablescan-cli-{}", uuid::Uuid::new_v4().simple()));
    let answer = match api.start(&body, &key).await {
        Ok(answer) => answer,
        // No answer came back (the command sent the start again and gave up): it may have
        // started a scan, which the same key finds.
        Err(error) if error.worth_another_try() => {
            report(&error, json);
            eprintln!(
                "tablescan: the start may have reached the app; run the same command with \
                 --idempotency-key {key} to get its scan rather than start a second one"
            );
            return Ok(error.exit_code());
        }
        Err(error) => return Err(error),
    };
    let id = answer.read.id.clone();
    if !json {
        // What the scan was started with, as the app recorded it (its defaults filled in).
        if let Ok(status) = api.status(&id).await {
            let spec = &status.read.spec;
            let earlier = watch::earlier_count(api, spec)
                .await
                .map(|e| (e.rows, e.seconds));
            eprintln!("{}", show::pace_line(spec, earlier));
        }
    }
    if !args.wait {
        print_json_or(json, &answer.json, || format!("{id}\n"));
        if json {
            // The answer on stdout is the API's; the key, for a script that wants it, here.
            eprintln!("started scan {id} (idempotency key {key})");
        } else {
            eprintln!(
                "started scan {id} (idempotency key {key}): `tablescan status {id} --watch` \
                 follows it, `tablescan cancel {id}` stops it"
            );
        }
        return Ok(0);
    }
    eprintln!("started scan {id} (idempotency key {key})");
    follow_to_end(api, &id, json).await
}

async fn status(api: &Api, id: &str, watch: bool, json: bool) -> Result<i32, ApiError> {
    if watch {
        return follow_to_end(api, id, json).await;
    }
    let status = api.status(id).await?;
    print_json_or(json, &status.json, || summary::summary(&status.read));
    let state = &status.read.state;
    Ok(if show::has_ended(state) {
        watch::exit_code(state)
    } else {
        0
    })
}

/// Follows scan `id` to its end and prints its summary (or its status as JSON).
async fn follow_to_end(api: &Api, id: &str, json: bool) -> Result<i32, ApiError> {
    let first = api.status(id).await?.read;
    let total = if show::has_ended(&first.state) {
        None
    } else {
        watch::earlier_count(api, &first.spec)
            .await
            .and_then(|earlier| earlier.total_for(&first))
    };
    match watch::follow(api, id, total).await? {
        Followed::Ended(status) => {
            print_json_or(json, &status.json, || summary::summary(&status.read));
            Ok(watch::exit_code(&status.read.state))
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

/// `tablescan resume`: calls the resume until its rounds are done, saying how far it got.
async fn resume(api: &Api, id: &str, json: bool) -> Result<i32, ApiError> {
    let resumed = resume::until_done(
        || async { api.resume(id).await.map(|answer| answer.read) },
        |sent| {
            eprintln!(
                "scan {id}: {} paused work items sent again so far; going on",
                show::thousands(sent)
            )
        },
    )
    .await?;
    let answer = serde_json::to_value(resumed.as_answer(id)).unwrap_or_default();
    print_json_or(json, &answer, || resume::text(id, &resumed));
    Ok(0)
}

/// `tablescan pause`: the scan's state, and how to go on.
async fn pause(api: &Api, id: &str, json: bool) -> Result<i32, ApiError> {
    let answer = api.pause(id).await?;
    print_json_or(json, &answer.json, || {
        let state = match answer.read.state.as_str() {
            "" => "pausing",
            state => state,
        };
        let how = if state == "paused" {
            "no step runs"
        } else {
            "running steps stop at their next page"
        };
        format!("scan {id}: {state} ({how}); `tablescan resume {id}` goes on from there\n")
    });
    Ok(0)
}

/// `tablescan retry`: how many failed work items were sent again, and whether more remain.
async fn retry(api: &Api, id: &str, json: bool) -> Result<i32, ApiError> {
    let answer = api.retry(id).await?;
    print_json_or(json, &answer.json, || {
        let more = if answer.read.more {
            format!("; more remain: run `tablescan retry {id}` again")
        } else {
            String::new()
        };
        format!(
            "scan {id}: {} failed work items sent again{more}\n",
            answer.read.retried
        )
    });
    Ok(0)
}

/// `tablescan ui`: the page's address, printed whatever the check of the page finds (the app
/// may be starting); what the check found goes to stderr.
async fn ui(api: &Api, without_key: bool, json: bool) -> i32 {
    if let Err(why) = api.page_served().await {
        eprintln!("tablescan: {why}");
    }
    let address = api.page_address(!without_key);
    print_json_or(json, &serde_json::json!({ "address": address }), || {
        format!("{address}\n")
    });
    0
}

/// `tablescan remove`: calls the removal until it is done, saying how far it got.
async fn remove(api: &Api, id: &str, json: bool) -> Result<i32, ApiError> {
    let removed = remove::until_done(
        || async { api.remove(id).await.map(|answer| answer.read) },
        |rows| {
            eprintln!(
                "scan {id}: {} ledger rows removed so far; going on",
                show::thousands(rows)
            )
        },
    )
    .await;
    let removed = match removed {
        Err(ApiError::Refused {
            status: 409,
            field,
            message,
            body,
        }) => {
            return Err(ApiError::Refused {
                status: 409,
                field,
                message: format!("{message} (`tablescan cancel {id}`)"),
                body,
            })
        }
        other => other?,
    };
    let answer = serde_json::to_value(removed.as_answer(id)).unwrap_or_default();
    print_json_or(json, &answer, || {
        if removed.more {
            format!(
                "scan {id}: {} ledger rows removed, more are left: run `tablescan remove {id}` again\n",
                show::thousands(removed.rows)
            )
        } else {
            format!(
                "scan {id} removed: {} ledger rows (its status and counts; what it wrote stays)\n",
                show::thousands(removed.rows)
            )
        }
    });
    Ok(0)
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
