//! The handler's own app settings (`TABLESCAN_*`), read once when it starts into a typed
//! [`Config`].
//!
//! A setting that is present must hold a good value: a bad one is never replaced by the default
//! or clamped into range, since a scan run with a value its operator did not mean (15-second
//! steps for `15s`, 1,000 queries for `5000`) is worse than one that waits. Each bad value is a
//! [`SettingError`] naming the setting, quoting the value (except where a pasted connection
//! string may stand instead of a name: the list of connections and the ledger's connection are
//! never echoed) and saying what it must be. An empty value is no value: the default.
//!
//! What the handler does with them (`AppState::new`, `routes::router`): it starts anyway, so that
//! the host sees a healthy worker; it logs the reasons as an error; every function answers with
//! them (500) until the setting is mended. `TABLESCAN_LOG` alone only logs: a bad filter
//! leaves the handler logging at `info` (see [`log_filter`]).

use std::fmt;
use std::time::Duration;

use crate::allowlist::{Allowlist, AllowlistError, CONNECTIONS_SETTING};
use crate::names::STORAGE_CONNECTION;
use tablescan_api::{
    is_connection_name, DEFAULT_MAX_ROWS_PER_SECOND, MAX_RATE_CAP, MAX_ROWS_PER_SECOND_SETTING,
};
use tablescan_engine::Budget;
use tablescan_ledger::ledger::DEFAULT_LEDGER_TABLE;
use tablescan_storage::connection::TRUSTED_CA_SETTING;
use tablescan_storage::connection_string::TrustedRoots;
use tablescan_storage::SettingLookup;

/// The setting that names the connection (an app setting's name, like `AzureWebJobsStorage`)
/// of the account that holds the ledger; the app's own account when absent.
pub const LEDGER_CONNECTION_SETTING: &str = "TABLESCAN_LEDGER_CONNECTION";

/// How many of its budgets (15 s by default) a step's storage requests may retry for: past the
/// action's deadline (1.5 budgets) with room for the writes started before it. Here, beside
/// the budget it multiplies, because the state opens the ledger with it (how long after a pause
/// a step may still act) as well as the steps set their deadlines by it.
pub const STORAGE_DEADLINE_BUDGETS: u32 = 3;

/// The handler's settings, as the app gives them or their defaults.
#[derive(Debug, Clone)]
pub struct Config {
    /// How much one step may do (`TABLESCAN_STEP_MAX_QUERIES`, `TABLESCAN_STEP_MAX_SECONDS`).
    pub budget: Budget,
    /// How long a step's claim on its work item lasts (`TABLESCAN_STEP_LEASE_SECONDS`).
    pub lease: Duration,
    /// How long a pending work item may go untouched before a status read or the sweep sends
    /// its message again (`TABLESCAN_REDRIVE_AFTER_SECONDS`).
    pub redrive_after: Duration,
    /// How long a work item may keep failing for transient reasons (throttling, an outage)
    /// before it is failed for good (`TABLESCAN_OUTAGE_WINDOW_SECONDS`).
    pub outage_window: Duration,
    /// The ledger's table (`TABLESCAN_LEDGER_TABLE`).
    pub ledger_table: String,
    /// The connection that reaches the ledger's account ([`LEDGER_CONNECTION_SETTING`]): the
    /// app's own unless the setting names another, so that a source or target sharing the
    /// app's account cannot starve the ledger.
    pub ledger_connection: String,
    /// The cap of a scan whose request names none (`TABLESCAN_MAX_ROWS_PER_SECOND`).
    pub default_cap: Option<u32>,
    /// The connections scans may use (`TABLESCAN_CONNECTIONS`): `None` for every one.
    pub connections: Option<Allowlist>,
    /// Root certificates trusted beside the built-in ones for every connection
    /// (`TABLESCAN_TRUSTED_CA_FILE`).
    pub trusted_roots: Option<TrustedRoots>,
}

impl Default for Config {
    /// The defaults docs/functions.md lists.
    fn default() -> Self {
        Config {
            budget: Budget::default(),
            lease: tablescan_ledger::DEFAULT_STEP_LEASE,
            // Past the host's 10-minute hold on a message being processed and the function
            // timeout, so a message that still exists has surely been delivered by then.
            redrive_after: Duration::from_secs(15 * 60),
            outage_window: Duration::from_secs(30 * 60),
            ledger_table: DEFAULT_LEDGER_TABLE.to_string(),
            ledger_connection: STORAGE_CONNECTION.to_string(),
            default_cap: DEFAULT_MAX_ROWS_PER_SECOND,
            connections: None,
            trusted_roots: None,
        }
    }
}

impl Config {
    /// Reads every setting: the config, or every bad value among them.
    pub fn parse(settings: &dyn SettingLookup) -> Result<Config, ConfigError> {
        let mut bad = Vec::new();
        let defaults = Config::default();
        let mut seconds = |setting: Setting, default: Duration| {
            let read = whole(settings, setting).map(|n| n.map(Duration::from_secs));
            noted(&mut bad, read).unwrap_or(default)
        };
        let max_duration = seconds(Setting::StepMaxSeconds, defaults.budget.max_duration);
        let lease = seconds(Setting::StepLeaseSeconds, defaults.lease);
        let redrive_after = seconds(Setting::RedriveAfterSeconds, defaults.redrive_after);
        let outage_window = seconds(Setting::OutageWindowSeconds, defaults.outage_window);
        let max_queries = whole(settings, Setting::StepMaxQueries)
            .map(|n| n.map(|n| u32::try_from(n).expect("at most 1,000")));
        let config = Config {
            budget: Budget {
                max_queries: noted(&mut bad, max_queries).unwrap_or(defaults.budget.max_queries),
                max_duration,
            },
            lease,
            redrive_after,
            outage_window,
            ledger_table: noted(&mut bad, ledger_table(settings)).unwrap_or(defaults.ledger_table),
            ledger_connection: noted(&mut bad, ledger_connection(settings))
                .unwrap_or(defaults.ledger_connection),
            default_cap: noted(&mut bad, default_cap(settings)).unwrap_or(defaults.default_cap),
            connections: noted(&mut bad, connections(settings)).flatten(),
            trusted_roots: noted(&mut bad, trusted_roots(settings)).flatten(),
        };
        match bad.is_empty() {
            true => Ok(config),
            false => Err(ConfigError(bad)),
        }
    }
}

/// A setting's value when it was set and good; its error noted in `bad` when it was not good.
fn noted<T>(bad: &mut Vec<SettingError>, read: Result<Option<T>, SettingError>) -> Option<T> {
    read.unwrap_or_else(|error| {
        bad.push(error);
        None
    })
}

/// The handler's log filter: `TABLESCAN_LOG`, or `info` when it is not set. A bad one is
/// reported by the handler and `info` used instead: no function depends on it.
pub fn log_filter(
    settings: &dyn SettingLookup,
) -> Result<tracing_subscriber::EnvFilter, SettingError> {
    let Some(text) = present(settings, Setting::Log)? else {
        return Ok(tracing_subscriber::EnvFilter::new("info"));
    };
    tracing_subscriber::EnvFilter::try_new(&text)
        .map_err(|e| Setting::Log.error(&text, Problem::NotALogFilter(e.to_string())))
}

/// A setting's value, trimmed: `None` when it is not set, or set to nothing (deployment
/// templates and the portal leave optional settings empty, meaning "not set"; the list of
/// connections alone refuses an empty value, see [`connections`]).
fn present(settings: &dyn SettingLookup, setting: Setting) -> Result<Option<String>, SettingError> {
    match settings.setting(setting.name()) {
        Some(text) if !text.trim().is_empty() => Ok(Some(text.trim().to_string())),
        _ => Ok(None),
    }
}

/// A whole-number setting (see [`Setting::range`]).
fn whole(settings: &dyn SettingLookup, setting: Setting) -> Result<Option<u64>, SettingError> {
    let Some(text) = present(settings, setting)? else {
        return Ok(None);
    };
    let (_, max) = setting.range().expect("a whole-number setting");
    match text.parse::<u64>() {
        Ok(0) => Err(setting.error(&text, Problem::Zero)),
        Ok(n) if n <= max => Ok(Some(n)),
        // Past the range, or past what a u64 holds: digits all the same.
        Ok(_) => Err(setting.error(&text, Problem::OutOfRange { min: 1, max })),
        Err(_) if text.bytes().all(|b| b.is_ascii_digit()) => {
            Err(setting.error(&text, Problem::OutOfRange { min: 1, max }))
        }
        Err(_) => Err(setting.error(&text, Problem::NotANumber)),
    }
}

fn ledger_table(settings: &dyn SettingLookup) -> Result<Option<String>, SettingError> {
    let Some(name) = present(settings, Setting::LedgerTable)? else {
        return Ok(None);
    };
    tablescan_storage::names::validate_table_name(&name)
        .map(|()| Some(name.clone()))
        .map_err(|e| Setting::LedgerTable.error(&name, Problem::NotATableName { rule: e.rule }))
}

fn ledger_connection(settings: &dyn SettingLookup) -> Result<Option<String>, SettingError> {
    let Some(name) = present(settings, Setting::LedgerConnection)? else {
        return Ok(None);
    };
    match is_connection_name(&name) {
        true => Ok(Some(name)),
        // Not quoted: what is here instead of a name is most often a pasted connection string.
        false => Err(SettingError {
            value: None,
            ..Setting::LedgerConnection.error(&name, Problem::NotAConnectionName)
        }),
    }
}

/// `Some(cap)`, where `None` inside is `unlimited`.
fn default_cap(settings: &dyn SettingLookup) -> Result<Option<Option<u32>>, SettingError> {
    match present(settings, Setting::MaxRowsPerSecond)? {
        Some(text) if text.eq_ignore_ascii_case("unlimited") => Ok(Some(None)),
        Some(_) => whole(settings, Setting::MaxRowsPerSecond)
            .map(|n| n.map(|n| Some(u32::try_from(n).expect("at most MAX_RATE_CAP")))),
        None => Ok(None),
    }
}

/// `Some(list)` when the setting is present. Its own parser judges an empty value (and says
/// why one is refused: a list cleared by mistake must not open every connection).
fn connections(settings: &dyn SettingLookup) -> Result<Option<Option<Allowlist>>, SettingError> {
    match settings.setting(CONNECTIONS_SETTING) {
        None => Ok(None),
        Some(text) => Allowlist::parse(&text)
            .map(|list| Some(Some(list)))
            .map_err(|e| SettingError {
                setting: Setting::Connections,
                value: None,
                problem: Problem::NotAnAllowlist(e),
            }),
    }
}

fn trusted_roots(
    settings: &dyn SettingLookup,
) -> Result<Option<Option<TrustedRoots>>, SettingError> {
    let Some(path) = present(settings, Setting::TrustedCaFile)? else {
        return Ok(None);
    };
    let fail = |problem| Setting::TrustedCaFile.error(&path, problem);
    let pem = std::fs::read(&path).map_err(|e| fail(Problem::Unreadable(e.kind())))?;
    match TrustedRoots::from_pem(&pem) {
        Some(roots) => Ok(Some(Some(roots))),
        None => Err(fail(Problem::NoCertificate)),
    }
}

/// One of the handler's own settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    StepMaxQueries,
    StepMaxSeconds,
    StepLeaseSeconds,
    RedriveAfterSeconds,
    OutageWindowSeconds,
    LedgerTable,
    LedgerConnection,
    MaxRowsPerSecond,
    Connections,
    TrustedCaFile,
    Log,
}

impl Setting {
    /// Every one of them.
    pub const ALL: [Setting; 11] = [
        Setting::StepMaxQueries,
        Setting::StepMaxSeconds,
        Setting::StepLeaseSeconds,
        Setting::RedriveAfterSeconds,
        Setting::OutageWindowSeconds,
        Setting::LedgerTable,
        Setting::LedgerConnection,
        Setting::MaxRowsPerSecond,
        Setting::Connections,
        Setting::TrustedCaFile,
        Setting::Log,
    ];

    /// The app setting's name.
    pub fn name(self) -> &'static str {
        match self {
            Setting::StepMaxQueries => "TABLESCAN_STEP_MAX_QUERIES",
            Setting::StepMaxSeconds => "TABLESCAN_STEP_MAX_SECONDS",
            Setting::StepLeaseSeconds => "TABLESCAN_STEP_LEASE_SECONDS",
            Setting::RedriveAfterSeconds => "TABLESCAN_REDRIVE_AFTER_SECONDS",
            Setting::OutageWindowSeconds => "TABLESCAN_OUTAGE_WINDOW_SECONDS",
            Setting::LedgerTable => "TABLESCAN_LEDGER_TABLE",
            Setting::LedgerConnection => LEDGER_CONNECTION_SETTING,
            Setting::MaxRowsPerSecond => MAX_ROWS_PER_SECOND_SETTING,
            Setting::Connections => CONNECTIONS_SETTING,
            Setting::TrustedCaFile => TRUSTED_CA_SETTING,
            Setting::Log => "TABLESCAN_LOG",
        }
    }

    /// A whole-number setting's range. The step's limits keep a step well inside the 230 s
    /// an HTTP call gets and the function timeout; the others stop where a longer time means
    /// nothing (a claim held for an hour by a dead step, a message untouched for a week, the
    /// queue's own time to live), and keep the arithmetic on them from overflowing.
    pub fn range(self) -> Option<(u64, u64)> {
        match self {
            Setting::StepMaxQueries => Some((1, 1000)),
            Setting::StepMaxSeconds => Some((1, 300)),
            Setting::StepLeaseSeconds => Some((1, 3600)),
            Setting::RedriveAfterSeconds | Setting::OutageWindowSeconds => Some((1, 7 * 86_400)),
            Setting::MaxRowsPerSecond => Some((1, u64::from(MAX_RATE_CAP))),
            _ => None,
        }
    }

    /// What a good value is, for messages.
    fn expected(self) -> String {
        let (min, max) = self.range().unwrap_or_default();
        match self {
            Setting::StepMaxQueries => format!("a whole number of queries from {min} to {max}"),
            Setting::MaxRowsPerSecond => format!(
                "a whole number of entities per second from {min} to {max}, or \"unlimited\""
            ),
            Setting::LedgerTable => {
                "a table name: 3 to 63 ASCII letters and digits, starting with a letter".into()
            }
            Setting::LedgerConnection => "the name of a connection (an app setting's name: \
                 letters, digits, '_', '.', ':', '-')"
                .into(),
            Setting::Connections => "a list of Name:ro or Name:rw, separated by commas".into(),
            Setting::TrustedCaFile => "the path of a PEM file of root certificates".into(),
            Setting::Log => "a log filter, such as info or info,tablescan=debug".into(),
            _ => format!("a whole number of seconds from {min} to {max}"),
        }
    }

    fn error(self, value: &str, problem: Problem) -> SettingError {
        SettingError {
            setting: self,
            value: Some(value.to_string()),
            problem,
        }
    }
}

/// What is wrong with a setting's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    NotANumber,
    /// 0 where at least 1 is needed.
    Zero,
    /// A whole number outside the range (`min..=max`).
    OutOfRange {
        min: u64,
        max: u64,
    },
    /// A name the Table service refuses, by `rule`.
    NotATableName {
        rule: &'static str,
    },
    NotAConnectionName,
    /// The list of connections cannot be read, as it says (naming entries by place only).
    NotAnAllowlist(AllowlistError),
    /// A file that cannot be read.
    Unreadable(std::io::ErrorKind),
    /// A file without a PEM certificate in it.
    NoCertificate,
    /// Not a filter `tracing` reads, as its parser says.
    NotALogFilter(String),
}

/// A setting whose value the handler cannot use, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingError {
    pub setting: Setting,
    /// The value as given; `None` where it may hold a secret (the list of connections).
    pub value: Option<String>,
    pub problem: Problem,
}

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the app setting {}", self.setting.name())?;
        if let Problem::NotAnAllowlist(why) = &self.problem {
            return write!(f, " {why}");
        }
        if let Some(value) = &self.value {
            write!(f, " is {:?}", shortened(value))?;
        }
        match &self.problem {
            Problem::NotANumber => write!(f, ", not a whole number")?,
            Problem::Zero => write!(f, ", and 0 is not allowed")?,
            Problem::OutOfRange { min, max } => write!(f, ", outside {min} to {max}")?,
            Problem::NotATableName { rule } => write!(f, ", not a valid table name ({rule})")?,
            Problem::NotAConnectionName => write!(f, ", not a connection's name")?,
            Problem::Unreadable(kind) => write!(f, ", a file that cannot be read ({kind})")?,
            Problem::NoCertificate => write!(f, ", a file without a PEM certificate")?,
            Problem::NotALogFilter(why) => write!(f, ", not a log filter ({why})")?,
            Problem::NotAnAllowlist(_) => {}
        }
        write!(
            f,
            ": it must be {} (or be removed, for its default)",
            self.setting.expected()
        )
    }
}

/// A value as shown in a message: at most 100 characters, control characters escaped by
/// `{:?}`.
fn shortened(value: &str) -> String {
    match value.char_indices().nth(100) {
        Some((end, _)) => format!("{}…", &value[..end]),
        None => value.to_string(),
    }
}

/// Every setting whose value the handler cannot use (at least one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub Vec<SettingError>);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
