//! Runs one handler process as the host does: a free port in FUNCTIONS_CUSTOMHANDLER_PORT, the
//! app settings in its environment, `GET /` every 25 ms until it answers (30 s at most), its
//! output forwarded, and a restart when it dies. Exit code 0 is not restarted; the third failure
//! within 30 minutes stops devhost ("Exceeded http worker restart retry count").

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::say::{say, say_err};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::{watch, Notify};

/// How the host reacts to handler failures.
#[derive(Debug)]
pub struct RestartPolicy {
    window: Duration,
    max_failures: usize,
    failures: VecDeque<Instant>,
}

/// What to do after the handler stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum AfterExit {
    Restart,
    /// Exit code 0: the host leaves it down.
    StayDown,
    /// Too many failures: the host shuts down.
    GiveUp,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            window: Duration::from_secs(30 * 60),
            max_failures: 3,
            failures: VecDeque::new(),
        }
    }
}

impl RestartPolicy {
    /// Records an exit (`None` code: killed by a signal) or a failed start.
    pub fn after_exit(&mut self, code: Option<i32>, now: Instant) -> AfterExit {
        if code == Some(0) {
            return AfterExit::StayDown;
        }
        self.failures.push_back(now);
        while self
            .failures
            .front()
            .is_some_and(|t| now.duration_since(*t) > self.window)
        {
            self.failures.pop_front();
        }
        if self.failures.len() >= self.max_failures {
            AfterExit::GiveUp
        } else {
            AfterExit::Restart
        }
    }
}

/// What starts the handler.
#[derive(Debug, Clone)]
pub struct Launch {
    pub executable: PathBuf,
    pub arguments: Vec<String>,
    pub working_directory: PathBuf,
    pub app_root: PathBuf,
    pub settings: Vec<(String, String)>,
    pub readiness_timeout: Duration,
}

/// One supervised handler process.
pub struct Handler {
    pub instance: usize,
    url: watch::Receiver<Option<String>>,
    kill: Notify,
}

impl Handler {
    /// Starts supervising; returns at once. `fatal` is notified when the host would shut down.
    pub fn start(instance: usize, launch: Launch, fatal: Arc<Notify>) -> Arc<Handler> {
        let (url_tx, url) = watch::channel(None);
        let handler = Arc::new(Handler {
            instance,
            url,
            kill: Notify::new(),
        });
        let supervised = handler.clone();
        tokio::spawn(async move { supervised.supervise(launch, url_tx, fatal).await });
        handler
    }

    /// The handler's base URL, waiting up to `wait` for it to be ready.
    pub async fn url(&self, wait: Duration) -> Option<String> {
        let mut receiver = self.url.clone();
        let ready = tokio::time::timeout(wait, receiver.wait_for(Option::is_some)).await;
        match ready {
            Ok(Ok(url)) => url.clone(),
            _ => None,
        }
    }

    /// Kills the process (it is then restarted), as the host does after a function timeout.
    pub fn restart(&self) {
        self.kill.notify_one();
    }

    /// Waits until the started handler `child` is ready at `url`, serves it (its URL in
    /// `url_tx`) until it exits or is restarted, and returns its exit code: `None` when it was
    /// killed (never ready in time, or restarted) or ended by a signal.
    async fn run_until_exit(
        &self,
        child: &mut tokio::process::Child,
        url: String,
        launch: &Launch,
        url_tx: &watch::Sender<Option<String>>,
    ) -> Option<i32> {
        let ready = tokio::select! {
            ready = wait_ready(&url, launch.readiness_timeout) => ready,
            status = child.wait() => {
                say_err!("[devhost] instance {}: handler exited before it was ready: {status:?}", self.instance);
                false
            }
        };
        if !ready {
            say_err!(
                "[devhost] instance {}: handler did not answer GET / within {:?}",
                self.instance,
                launch.readiness_timeout
            );
            let _ = child.start_kill();
            let _ = child.wait().await;
            return None;
        }
        let _ = url_tx.send(Some(url));
        let code = tokio::select! {
            status = child.wait() => status.ok().and_then(|s| s.code()),
            _ = self.kill.notified() => {
                say_err!("[devhost] instance {}: restarting the handler", self.instance);
                let _ = child.start_kill();
                let _ = child.wait().await;
                None
            }
        };
        let _ = url_tx.send(None);
        code
    }

    async fn supervise(
        &self,
        launch: Launch,
        url_tx: watch::Sender<Option<String>>,
        fatal: Arc<Notify>,
    ) {
        let mut policy = RestartPolicy::default();
        loop {
            let port = match free_port() {
                Ok(port) => port,
                Err(e) => {
                    say_err!("[devhost] instance {}: no free port: {e}", self.instance);
                    fatal.notify_waiters();
                    return;
                }
            };
            let mut command = handler_command(&launch, port);
            die_with_parent(&mut command);
            let mut child = match command.spawn() {
                Ok(child) => child,
                Err(e) => {
                    say_err!(
                        "[devhost] instance {}: cannot start {}: {e}",
                        self.instance,
                        launch.executable.display()
                    );
                    fatal.notify_waiters();
                    return;
                }
            };
            let pid = child.id();
            say!(
                "[devhost] instance {}: started handler pid {} on port {port}",
                self.instance,
                pid.unwrap_or(0)
            );
            forward(child.stdout.take(), self.instance, false);
            forward(child.stderr.take(), self.instance, true);

            let url = format!("http://127.0.0.1:{port}");
            let code = self.run_until_exit(&mut child, url, &launch, &url_tx).await;
            match policy.after_exit(code, Instant::now()) {
                AfterExit::Restart => say_err!(
                    "[devhost] instance {}: handler stopped (exit {code:?}); restarting",
                    self.instance
                ),
                AfterExit::StayDown => {
                    say_err!("[devhost] instance {}: handler exited with code 0; not restarted (as the Functions host does)", self.instance);
                    return;
                }
                AfterExit::GiveUp => {
                    say_err!("[devhost] instance {}: Exceeded http worker restart retry count. Shutting down", self.instance);
                    fatal.notify_waiters();
                    return;
                }
            }
        }
    }
}

/// The command that starts a handler listening on `port`, as the host starts it: the app's
/// settings and the custom handler's variables in its environment, its output piped.
fn handler_command(launch: &Launch, port: u16) -> Command {
    let mut command = Command::new(&launch.executable);
    command
        .args(&launch.arguments)
        .current_dir(&launch.working_directory)
        .envs(
            launch
                .settings
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        )
        .env("FUNCTIONS_CUSTOMHANDLER_PORT", port.to_string())
        .env("FUNCTIONS_HTTPWORKER_PORT", port.to_string())
        .env(
            "FUNCTIONS_CUSTOMHANDLER_WORKER_ID",
            uuid::Uuid::new_v4().to_string(),
        )
        .env("FUNCTIONS_APP_ROOT_PATH", &launch.app_root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Makes the handler die when devhost dies, however devhost ends (even by SIGKILL), so no
/// handler is ever left running without its host.
#[cfg(target_os = "linux")]
fn die_with_parent(command: &mut Command) {
    const PR_SET_PDEATHSIG: std::os::raw::c_int = 1;
    const SIGKILL: std::os::raw::c_ulong = 9;
    extern "C" {
        fn prctl(
            option: std::os::raw::c_int,
            arg2: std::os::raw::c_ulong,
            ...
        ) -> std::os::raw::c_int;
    }
    // SAFETY: runs in the forked child before exec; prctl is async-signal-safe and touches no
    // memory of ours.
    unsafe {
        command.pre_exec(|| {
            if prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_command: &mut Command) {}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Polls `GET /` every 25 ms until any HTTP answer arrives.
async fn wait_ready(url: &str, timeout: Duration) -> bool {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if client
            .get(format!("{url}/"))
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .is_ok()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

fn forward<R: tokio::io::AsyncRead + Unpin + Send + 'static>(
    stream: Option<R>,
    instance: usize,
    stderr: bool,
) {
    let Some(stream) = stream else { return };
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if stderr {
                say_err!("[handler {instance}] {line}");
            } else {
                say!("[handler {instance}] {line}");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_zero_stays_down_and_the_third_failure_in_30_minutes_gives_up() {
        let mut policy = RestartPolicy::default();
        let start = Instant::now();
        assert_eq!(policy.after_exit(Some(0), start), AfterExit::StayDown);
        assert_eq!(policy.after_exit(Some(1), start), AfterExit::Restart);
        assert_eq!(
            policy.after_exit(None, start + Duration::from_secs(60)),
            AfterExit::Restart
        );
        assert_eq!(
            policy.after_exit(Some(101), start + Duration::from_secs(120)),
            AfterExit::GiveUp
        );
        let mut spread = RestartPolicy::default();
        assert_eq!(spread.after_exit(Some(1), start), AfterExit::Restart);
        assert_eq!(
            spread.after_exit(Some(1), start + Duration::from_secs(1000)),
            AfterExit::Restart
        );
        assert_eq!(
            spread.after_exit(Some(1), start + Duration::from_secs(2000)),
            AfterExit::Restart,
            "the first fell out of the window"
        );
    }
}
