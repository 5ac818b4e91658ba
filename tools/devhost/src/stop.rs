//! Stopping a child process from a test or a benchmark: send it a signal, wait for it to end,
//! and kill it if it has not ended in time. devhost is asked with SIGINT (it then stops its
//! handler processes). (Included by path from the tests and the end-to-end benchmark.)

use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub fn stop_devhost(child: &mut Child) {
    signal_and_wait(child, "-INT", Duration::from_secs(5));
}

/// Sends `signal` (as `kill` spells it, e.g. `-TERM`), waits up to `grace` for the process to
/// end, then kills it; either way it is reaped.
pub fn signal_and_wait(child: &mut Child, signal: &str, grace: Duration) {
    let _ = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status();
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}
