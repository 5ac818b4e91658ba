//! Stopping a devhost process from a test or a benchmark: ask it to stop with SIGINT (it then
//! stops its handler processes), and kill it if it has not ended within five seconds.
//! (Included by path from the tests and the end-to-end benchmark.)

use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub fn stop_devhost(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}
