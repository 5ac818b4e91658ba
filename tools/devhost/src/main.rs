//! devhost: a local stand-in for the Azure Functions host, for machines where Azure Functions
//! Core Tools cannot be installed. It reads the same host.json and function.json files as
//! `func start`, runs the custom handler, serves HTTP triggers and polls Azurite queues, and
//! calls the handler exactly as the real host does, quirks included (see docs/devhost.md).
//!
//!     devhost [--instances N] [--port 7071] [--script-root DIR] [--function-key KEY]

mod config;
mod dispatch;
mod http;
mod invocation;
mod process;
mod queues;
mod say;
mod schedule;
mod timers;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::say::{say, say_err};
use tokio::sync::Notify;

/// A local stand-in for the Azure Functions host: runs the custom handler of the app in
/// --script-root, serves its HTTP triggers and polls Azurite queues for its queue triggers.
#[derive(clap::Parser)]
#[command(name = "devhost", version)]
struct Args {
    /// Handler processes to run, each with its own queue polling (as instances of a scaled-out
    /// app)
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    instances: u16,
    /// The port the HTTP triggers answer on
    #[arg(long, default_value_t = 7071)]
    port: u16,
    /// The app's folder: host.json, the handler, one folder per function
    #[arg(long, default_value = "target/app", value_name = "DIR")]
    script_root: PathBuf,
    /// Require this function key of HTTP triggers that are not anonymous (x-functions-key or
    /// ?code=), as Azure does; without it none is checked, as under `func start`
    #[arg(
        long,
        value_name = "KEY",
        env = "DEVHOST_FUNCTION_KEY",
        hide_env_values = true
    )]
    function_key: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    use clap::Parser;
    Args::try_parse().map_err(|error| {
        // --help and --version print and succeed; a mistake names the flag and exits 2.
        let _ = error.print();
        std::process::exit(if error.use_stderr() { 2 } else { 0 });
    })
}

#[tokio::main]
async fn main() {
    if let Err(why) = run().await {
        say_err!("devhost: {why}");
        std::process::exit(1);
    }
}

/// App settings: local.settings.json (or .example), with the environment winning for
/// AzureWebJobsStorage so tests and scripts can point at their own Azurite.
fn app_settings(root: &std::path::Path) -> HashMap<String, String> {
    let mut settings: HashMap<String, String> = config::load_settings(root).into_iter().collect();
    if let Ok(storage) = std::env::var("AzureWebJobsStorage") {
        settings.insert("AzureWebJobsStorage".into(), storage);
    }
    for (k, v) in std::env::vars() {
        settings.entry(k).or_insert(v);
    }
    settings
}

/// How each handler process is started, from host.json.
fn launch_of(
    root: &std::path::Path,
    host: &config::HostConfig,
    settings: &HashMap<String, String>,
) -> process::Launch {
    let executable = {
        let relative = root.join(&host.executable);
        if relative.is_file() {
            relative
        } else {
            PathBuf::from(&host.executable)
        }
    };
    process::Launch {
        executable,
        arguments: host.arguments.clone(),
        working_directory: root.join(&host.working_directory),
        app_root: root.to_path_buf(),
        settings: settings
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        // The host waits 30 s; tests shorten it with DEVHOST_INITIALIZATION_TIMEOUT (hh:mm:ss).
        readiness_timeout: std::env::var("DEVHOST_INITIALIZATION_TIMEOUT")
            .ok()
            .and_then(|t| config::parse_timespan(&t))
            .unwrap_or(Duration::from_secs(30)),
    }
}

/// Starts a listener per queue-triggered function and instance.
fn listen_to_queues(
    functions: &[config::Function],
    handlers: &[Arc<process::Handler>],
    dispatcher: &Arc<dispatch::Dispatcher>,
    host: &config::HostConfig,
) {
    for handler in handlers {
        for function in functions
            .iter()
            .filter(|f| f.trigger().is_some_and(|t| t.kind == "queueTrigger"))
        {
            let listener = Arc::new(queues::Listener {
                function: function.clone(),
                handler: handler.clone(),
                dispatcher: dispatcher.clone(),
                settings: host.queues.clone(),
            });
            tokio::spawn(listener.run());
        }
    }
}

/// Starts the timer-triggered functions (once per app, not once per instance); those whose
/// schedule is invalid are reported and not run, as the host does.
fn start_timers(
    functions: &[config::Function],
    dispatcher: &Arc<dispatch::Dispatcher>,
) -> std::collections::BTreeMap<String, Arc<timers::Timer>> {
    let mut timers = std::collections::BTreeMap::new();
    for function in functions
        .iter()
        .filter(|f| f.trigger().is_some_and(|t| t.kind == "timerTrigger"))
    {
        let trigger = function.trigger().expect("filtered on the trigger");
        let text = trigger.schedule.clone().unwrap_or_default();
        match schedule::Schedule::parse(&text) {
            Ok(schedule) => {
                let timer = Arc::new(timers::Timer {
                    function: function.clone(),
                    schedule,
                    run_on_startup: trigger.run_on_startup,
                    dispatcher: dispatcher.clone(),
                });
                timers.insert(function.name.clone(), timer.clone());
                tokio::spawn(timer.run());
            }
            // The host reports the function in error and runs the others.
            Err(why) => say_err!(
                "[devhost] {}: the timer's schedule is invalid, the function will not run: {why}",
                function.name
            ),
        }
    }
    timers
}

async fn run() -> Result<(), String> {
    let args = parse_args()?;
    let root = std::fs::canonicalize(&args.script_root).map_err(|e| {
        format!(
            "script root {}: {e} (scripts/dev assembles target/app)",
            args.script_root.display()
        )
    })?;
    let host = config::HostConfig::load(&root)?;
    let functions = config::load_functions(&root)?;
    if functions.is_empty() {
        return Err(format!(
            "no function folders with a function.json under {}",
            root.display()
        ));
    }
    if host.forwarding && functions.iter().any(config::Function::is_http_in_and_out) {
        return Err(
            "enableForwardingHttpRequest is set; devhost speaks only the payload protocol".into(),
        );
    }

    let settings = app_settings(&root);
    let launch = launch_of(&root, &host, &settings);
    let fatal = Arc::new(Notify::new());
    let handlers: Vec<_> = (0..usize::from(args.instances))
        .map(|i| process::Handler::start(i, launch.clone(), fatal.clone()))
        .collect();
    let dispatcher = Arc::new(dispatch::Dispatcher::new(
        handlers.clone(),
        host.function_timeout,
        settings,
        host.queues.base64,
    ));

    listen_to_queues(&functions, &handlers, &dispatcher, &host);
    // Timer functions run once per app, not once per instance.
    let timers = start_timers(&functions, &dispatcher);

    let front = Arc::new(http::HttpFront {
        functions: functions.clone(),
        route_prefix: host.route_prefix.clone(),
        dispatcher: dispatcher.clone(),
        port: args.port,
        timers,
        function_key: args.function_key.clone(),
    });
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port))
        .await
        .map_err(|e| format!("cannot listen on 127.0.0.1:{}: {e}", args.port))?;
    let app = axum::Router::new().fallback(http::handle).with_state(front);
    say!(
        "[devhost] {} functions from {}, {} instance(s), HTTP on http://127.0.0.1:{}/{}",
        functions.len(),
        root.display(),
        args.instances,
        args.port,
        host.route_prefix
    );
    for function in &functions {
        let trigger = function.trigger().map(|t| t.kind.as_str()).unwrap_or("?");
        say!("[devhost]   {} ({trigger})", function.name);
    }
    tokio::select! {
        result = axum::serve(listener, app) => result.map_err(|e| format!("the HTTP server stopped: {e}")),
        _ = tokio::signal::ctrl_c() => { say!("[devhost] stopping"); Ok(()) }
        _ = fatal.notified() => Err("a handler could not be kept running".into()),
    }
}
