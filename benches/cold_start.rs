//! Cold start: the time from starting the handler process to its first answered `GET /`, the
//! request the Functions host polls (every 25 ms, for up to 30 s) before it sends any
//! invocation. The handler should answer within 100 ms.
//!
//!     cargo bench --bench cold_start [-- HANDLER...]
//!
//! Measures each handler binary named (default: the packaged one, target/package/app/handler,
//! and target/release/handler), 50 starts each, interleaved so both see the same machine, and
//! polls every millisecond, as finely as this clock is worth. Prints min, median, p95 and max.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const STARTS: usize = 50;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `GET /` answered with 200, or why not.
fn health_check(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    if stream
        .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

/// One start: process spawn to the first 200.
fn start_once(handler: &PathBuf) -> Duration {
    let port = free_port();
    let started = Instant::now();
    let mut child = Command::new(handler)
        .env("FUNCTIONS_CUSTOMHANDLER_PORT", port.to_string())
        .env("AzureWebJobsStorage", "UseDevelopmentStorage=true")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", handler.display()));
    let elapsed = loop {
        if health_check(port) {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{} did not answer",
            handler.display()
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    let _ = child.kill();
    let _ = child.wait();
    elapsed
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

mod common;

/// Time from starting a handler process to its first answered `GET /`.
#[derive(clap::Parser)]
#[command(name = "cold_start")]
struct Args {
    #[command(flatten)]
    cargo: common::CargoBench,
    /// Handler binaries to measure (default: target/package/app/handler and
    /// target/release/handler, those that exist)
    handlers: Vec<PathBuf>,
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let Args { mut handlers, .. } = clap::Parser::parse();
    if handlers.is_empty() {
        handlers = ["target/package/app/handler", "target/release/handler"]
            .iter()
            .map(|p| root.join(p))
            .filter(|p| p.is_file())
            .collect();
    }
    assert!(
        !handlers.is_empty(),
        "no handler to measure: run scripts/package or cargo build --release"
    );
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); handlers.len()];
    for _ in 0..STARTS {
        for (i, handler) in handlers.iter().enumerate() {
            times[i].push(start_once(handler));
        }
    }
    println!("| handler | size | min ms | median ms | p95 ms | max ms |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (handler, mut t) in handlers.iter().zip(times) {
        t.sort();
        let size = std::fs::metadata(handler).map(|m| m.len()).unwrap_or(0);
        println!(
            "| {} | {:.1} MiB | {} | {} | {} | {} |",
            handler.strip_prefix(&root).unwrap_or(handler).display(),
            size as f64 / 1048576.0,
            ms(t[0]),
            ms(t[t.len() / 2]),
            ms(t[t.len() * 95 / 100]),
            ms(t[t.len() - 1])
        );
    }
}
