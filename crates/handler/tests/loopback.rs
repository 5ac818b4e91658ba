//! The handler listens on 127.0.0.1 only: the Functions host calls it there, and nothing from
//! outside the machine should reach it. The kernel's socket table says which address a port is
//! bound to, so this holds whatever interfaces the machine has.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Local addresses (hex, as /proc/net/tcp* write them) listening on `port`.
fn listening_addresses(port: u16) -> Vec<String> {
    let port_hex = format!("{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    let (address, local_port) = fields.get(1)?.split_once(':')?;
                    // State 0A is LISTEN.
                    (local_port == port_hex && fields.get(3) == Some(&"0A"))
                        .then(|| address.to_string())
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn the_handler_listens_on_loopback_only() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut handler = Command::new(env!("CARGO_BIN_EXE_handler"))
        .env("FUNCTIONS_CUSTOMHANDLER_PORT", port.to_string())
        .env("AzureWebJobsStorage", "UseDevelopmentStorage=true")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the handler did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let addresses = listening_addresses(port);
    let _ = handler.kill();
    let _ = handler.wait();
    // 127.0.0.1 in /proc/net/tcp's little-endian hex.
    assert_eq!(addresses, vec!["0100007F".to_string()]);
}
