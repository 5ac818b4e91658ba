//! The Azure Functions custom handler.
//!
//! Until the function handlers land, this serves only what the Functions host needs to see a
//! healthy worker: it listens on 127.0.0.1 at `FUNCTIONS_CUSTOMHANDLER_PORT` and answers `GET /`.

use std::net::{Ipv4Addr, SocketAddr};

use axum::routing::get;
use axum::Router;

#[tokio::main]
async fn main() {
    let port = match std::env::var("FUNCTIONS_CUSTOMHANDLER_PORT") {
        Ok(text) => match text.parse::<u16>() {
            Ok(port) => port,
            Err(_) => {
                eprintln!("handler: FUNCTIONS_CUSTOMHANDLER_PORT must be a port number");
                std::process::exit(2);
            }
        },
        Err(_) => 8080,
    };
    let app = Router::new().route("/", get(|| async { "tablescan handler" }));
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let listener = match tokio::net::TcpListener::bind(address).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("handler: cannot listen on {address}: {e}");
            std::process::exit(1);
        }
    };
    eprintln!("handler: listening on {address}");
    if let Err(e) = axum::serve(listener, app).await {
        eprintln!("handler: server stopped: {e}");
        std::process::exit(1);
    }
}
