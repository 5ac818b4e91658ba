//! The Azure Functions custom handler: serves the function app on
//! 127.0.0.1:$FUNCTIONS_CUSTOMHANDLER_PORT, as the Functions host (or tools/devhost) expects.

use std::net::{Ipv4Addr, SocketAddr};

use tablescan_handler::config::log_filter;
use tablescan_handler::{router, AppState, Settings};
use tracing_subscriber::fmt::writer::MakeWriterExt;

#[tokio::main]
async fn main() {
    let settings = Settings::from_env();
    // A bad filter is reported once logging is up; `info` meanwhile (no function depends on it).
    let (filter, bad_filter) = match log_filter(&settings) {
        Ok(filter) => (filter, None),
        Err(bad) => (tracing_subscriber::EnvFilter::new("info"), Some(bad)),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        // The host logs the handler's stderr lines as errors and its stdout lines as
        // information: warnings and errors go to stderr, the rest to stdout.
        .with_writer(
            std::io::stderr
                .with_max_level(tracing::Level::WARN)
                .or_else(std::io::stdout),
        )
        .init();
    if let Some(bad) = bad_filter {
        tracing::error!("{bad}; logging at info until it is mended");
    }
    let port = match std::env::var("FUNCTIONS_CUSTOMHANDLER_PORT") {
        Ok(text) => match text.trim().parse::<u16>() {
            Ok(port) => port,
            Err(_) => {
                eprintln!("handler: FUNCTIONS_CUSTOMHANDLER_PORT must be a port number");
                std::process::exit(2);
            }
        },
        Err(_) => 8080,
    };
    let state = AppState::new(settings);
    if let Err(why) = &state.ledger {
        tracing::error!("every function will fail until this is fixed: {why}");
    }
    // Loopback only: the host calls the handler on 127.0.0.1, and nothing else should.
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let listener = match tokio::net::TcpListener::bind(address).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("handler: cannot listen on {address}: {e}");
            std::process::exit(1);
        }
    };
    tracing::info!("listening on {address}");
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    if let Err(e) = axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
    {
        eprintln!("handler: server stopped: {e}");
        std::process::exit(1);
    }
}
