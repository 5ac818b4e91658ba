//! The command line: subcommands and flags, parsed by clap (which gives `--help` everywhere,
//! `--flag=value` as well as `--flag value`, and errors that name the flag).

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use tablescan_api::answers::State;
use tablescan_api::ActionKind;

mod schedule_args;
pub use schedule_args::{ScheduleCommand, SetArgs};

#[derive(Debug, Parser)]
#[command(
    name = "tablescan",
    version,
    about = "Start, watch and manage scans of a tablescan function app",
    long_about = "Start, watch and manage scans of a tablescan function app over its HTTP API.\n\n\
                  The app is found at --url (http://localhost:7071 by default, where `scripts/dev \
                  --serve` and `func start` listen), or with --app and --resource-group through \
                  the Azure CLI. Exit codes: 0 done (a scan that succeeded), 1 the scan failed, \
                  2 it was cancelled, 3 the request was refused (bad request, key, no such scan), \
                  4 the app could not be reached or answered something unexpected, 130 stopped \
                  watching (Ctrl-C; the scan goes on)."
)]
pub struct Cli {
    #[command(flatten)]
    pub app: AppArgs,
    /// Print the API's JSON answers instead of text, for scripts
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// Where the app is, and how to call it.
#[derive(Debug, Args)]
pub struct AppArgs {
    /// The function app's base URL
    #[arg(
        long,
        global = true,
        env = "TABLESCAN_URL",
        default_value = "http://localhost:7071"
    )]
    pub url: String,
    /// A function key, sent as x-functions-key (Azure needs one; local hosts do not)
    #[arg(
        long,
        global = true,
        env = "TABLESCAN_FUNCTION_KEY",
        hide_env_values = true
    )]
    pub key: Option<String>,
    /// The function app's name in Azure: its URL and a key come from the Azure CLI (az)
    #[arg(long, global = true, value_name = "NAME", requires = "resource_group")]
    pub app: Option<String>,
    /// The resource group of --app
    #[arg(long, global = true, value_name = "GROUP")]
    pub resource_group: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a scan (one action), and with --wait follow it to its end
    Start(Box<StartArgs>),
    /// Show a scan's status; --watch follows it to its end
    Status {
        /// The scan's id
        id: String,
        /// Follow the scan with a live line until it ends (Ctrl-C stops watching, not the scan)
        #[arg(long)]
        watch: bool,
    },
    /// List scans, newest first, a page at a time
    List(ListArgs),
    /// Cancel a scan: running steps stop at their next page
    Cancel {
        /// The scan's id
        id: String,
    },
    /// Scans on a timetable: set, list, show, pause, resume, run now, preview, delete
    Schedule {
        #[command(subcommand)]
        command: ScheduleCommand,
    },
    /// Pause a scan: running steps stop at their next page, recording where they stopped
    Pause {
        /// The scan's id
        id: String,
    },
    /// Resume a paused scan from where its steps stopped
    Resume {
        /// The scan's id
        id: String,
    },
    /// Run a failed scan's failed work items again (once their cause is fixed)
    Retry {
        /// The scan's id
        id: String,
    },
    /// Delete a finished scan's records from the ledger (its status and counts; not what the
    /// scan wrote)
    Remove {
        /// The scan's id
        id: String,
    },
    /// Print the address of the app's page to watch and start scans in a browser, with the
    /// function key in its fragment (which browsers never send)
    Ui {
        /// Print the address without the key (the page asks for it): for a browser whose
        /// history others see or is synced, which keeps the address as it was opened
        #[arg(long)]
        without_key: bool,
    },
}

/// `tablescan list`: one page of scans, and filters applied to it.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only scans in this state
    #[arg(long, value_parser = state_parser())]
    pub state: Option<State>,
    /// Only scans with this action
    #[arg(long, value_parser = action_parser())]
    pub action: Option<ActionKind>,
    /// Only scans that read or write this table (its source, or a copy's or an import's
    /// target)
    #[arg(long)]
    pub table: Option<String>,
    /// How many scans (1 to 100)
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub limit: u32,
    /// Start after this place: the one the "more" line of the previous page gives
    #[arg(long, value_name = "PLACE")]
    pub after: Option<String>,
}

#[derive(Debug, Args)]
#[command(group(
    ArgGroup::new("action")
        .required(true)
        .args(["count", "copy", "enqueue", "delete", "update", "partition_keys", "export"])
))]
pub struct StartArgs {
    /// The table to scan
    #[arg(long, required_unless_present = "import", conflicts_with = "import")]
    pub table: Option<String>,
    /// Read the rows of an export (CONTAINER or CONTAINER/PREFIX) instead of a table: with
    /// --copy to restore it, with --count to read and check every blob
    #[arg(long, value_name = "CONTAINER[/PREFIX]")]
    pub import: Option<String>,
    /// The connection of the table's account, or of an --import's (an app setting, or
    /// identity settings C__...)
    #[arg(long, value_name = "CONNECTION")]
    pub connection: Option<String>,

    /// Count rows and partitions
    #[arg(long, help_heading = "Action (one)")]
    pub count: bool,
    /// Copy every row into table TARGET (created if missing)
    #[arg(long, value_name = "TARGET", help_heading = "Action (one)")]
    pub copy: Option<String>,
    /// Put one message per row on QUEUE (several, comma-separated: spread by PartitionKey)
    #[arg(
        long,
        value_name = "QUEUE",
        value_delimiter = ',',
        help_heading = "Action (one)"
    )]
    pub enqueue: Option<Vec<String>>,
    /// Delete every row (each only if unchanged since it was read); try --dry-run first
    #[arg(long, help_heading = "Action (one)")]
    pub delete: bool,
    /// Change every row in place: with --set and/or --remove
    #[arg(long, help_heading = "Action (one)")]
    pub update: bool,
    /// Put one message per distinct PartitionKey on QUEUE
    #[arg(long, value_name = "QUEUE", help_heading = "Action (one)")]
    pub partition_keys: Option<String>,
    /// Write every row into blobs under CONTAINER/PREFIX, with a manifest (a backup that
    /// --import restores)
    #[arg(long, value_name = "CONTAINER[/PREFIX]", help_heading = "Action (one)")]
    pub export: Option<String>,

    /// The connection of the copy's target table or the queue's account
    #[arg(long, value_name = "CONNECTION", help_heading = "Action options")]
    pub to_connection: Option<String>,
    /// How a copy treats a row the target holds already
    #[arg(long, value_enum, help_heading = "Action options")]
    pub mode: Option<CopyMode>,
    /// Properties an update writes, as entity JSON: '{"Status":"archived","Level":3}'.
    /// Types are read as the Table service reads JSON: a string is Edm.String, true/false
    /// Edm.Boolean, a number with a fraction Edm.Double, a whole number Edm.Int32, and a whole
    /// number beyond Int32 (-2147483648 to 2147483647) is sent as Edm.Int64 (not as a Double).
    /// Other types take an annotation: '{"At":"2026-01-01T00:00:00Z","At@odata.type":
    /// "Edm.DateTime"}'. null is refused: --remove takes a property away
    #[arg(long, value_name = "JSON", help_heading = "Action options")]
    pub set: Option<String>,
    /// A property an update removes (repeat for several)
    #[arg(long, value_name = "PROPERTY", help_heading = "Action options")]
    pub remove: Vec<String>,
    /// One message per row or per partition (enqueue)
    #[arg(long, value_enum, help_heading = "Action options")]
    pub per: Option<Per>,
    /// Message encoding (enqueue, partition-keys)
    #[arg(long, value_enum, help_heading = "Action options")]
    pub encoding: Option<Encoding>,
    /// Rows per message, 1 to 1000 (enqueue)
    #[arg(long, value_name = "N", help_heading = "Action options")]
    pub rows_per_message: Option<u32>,
    /// How an export's blobs are compressed
    #[arg(long, value_enum, help_heading = "Action options")]
    pub compression: Option<Compression>,

    /// Only PartitionKeys starting with this
    #[arg(long, help_heading = "Scope")]
    pub prefix: Option<String>,
    /// Only PartitionKeys strictly after this
    #[arg(long, help_heading = "Scope")]
    pub after: Option<String>,
    /// Only PartitionKeys strictly before this
    #[arg(long, help_heading = "Scope")]
    pub before: Option<String>,
    /// Only RowKeys starting with this
    #[arg(long, help_heading = "Scope")]
    pub row_prefix: Option<String>,
    /// Only RowKeys strictly after this
    #[arg(long, help_heading = "Scope")]
    pub row_after: Option<String>,
    /// Only RowKeys strictly before this
    #[arg(long, help_heading = "Scope")]
    pub row_before: Option<String>,
    /// Only rows matching this OData filter: "Level eq 'Debug' and Size gt 1000"
    #[arg(long, help_heading = "Scope")]
    pub filter: Option<String>,
    /// Only rows last written longer ago than this ISO 8601 duration: P90D, PT12H
    #[arg(long, value_name = "DURATION", help_heading = "Scope")]
    pub older_than: Option<String>,

    /// Properties to read besides the keys (comma-separated)
    #[arg(long, value_delimiter = ',', value_name = "PROPERTIES")]
    pub select: Vec<String>,
    /// Rows per query, 1 to 1000
    #[arg(long, value_name = "N")]
    pub page_size: Option<u32>,
    /// prefix (parallel) or serial (the baseline page-through)
    #[arg(long, value_enum)]
    pub strategy: Option<Strategy>,
    /// The scan's cap in entities per second (rows read plus rows written), or "unlimited".
    /// Default: none, unless the app sets TABLESCAN_MAX_ROWS_PER_SECOND: the scan goes as fast
    /// as the account takes and then holds just under where it refused
    #[arg(long, value_name = "N|unlimited")]
    pub max_rows_per_second: Option<String>,
    /// How many rows may fail before the scan ends failed (0: none)
    #[arg(long, value_name = "N")]
    pub max_row_failures: Option<u64>,
    /// Read and count what the action would do; write nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Makes a repeated start answer the scan the first one started. Without it, each start
    /// sends a key of its own (printed), so that the command's retry after a lost answer does
    /// not start a second scan
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// Follow the scan to its end with a live line, then print a summary
    #[arg(long)]
    pub wait: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CopyMode {
    Replace,
    Merge,
    Insert,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Per {
    Row,
    Partition,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Encoding {
    Base64,
    None,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Compression {
    Gzip,
    None,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Strategy {
    Prefix,
    Serial,
}

/// `--state`: one of the API's states, by the name the API gives it.
fn action_parser() -> impl TypedValueParser<Value = ActionKind> {
    PossibleValuesParser::new(ActionKind::ALL.map(ActionKind::name))
        .try_map(|name| ActionKind::named(&name).ok_or("not an action"))
}

fn state_parser() -> impl TypedValueParser<Value = State> {
    PossibleValuesParser::new(State::ALL.map(State::name))
        .try_map(|name| State::named(&name).ok_or("not a state"))
}

/// The name clap gives a value of a `ValueEnum` (what the API takes too).
pub fn value_name(value: impl ValueEnum) -> String {
    value
        .to_possible_value()
        .map(|v| v.get_name().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn a_start_needs_exactly_one_action() {
        let none = Cli::try_parse_from(["tablescan", "start", "--table", "t"]);
        assert!(none.is_err());
        let two =
            Cli::try_parse_from(["tablescan", "start", "--table", "t", "--count", "--delete"]);
        let error = two.unwrap_err().to_string();
        assert!(
            error.contains("--count") && error.contains("--delete"),
            "{error}"
        );
        let one = Cli::try_parse_from(["tablescan", "start", "--table=t", "--copy=t2", "--wait"]);
        assert!(one.is_ok());
    }

    #[test]
    fn an_import_reads_an_export_instead_of_a_table() {
        let import = Cli::try_parse_from(["tablescan", "start", "--import=b/p", "--copy=t2"]);
        assert!(import.is_ok());
        let both = Cli::try_parse_from([
            "tablescan",
            "start",
            "--import=b/p",
            "--table=t",
            "--copy=t2",
        ]);
        let error = both.unwrap_err().to_string();
        assert!(
            error.contains("--table") && error.contains("--import"),
            "{error}"
        );
        let neither = Cli::try_parse_from(["tablescan", "start", "--copy=t2"]);
        assert!(neither.unwrap_err().to_string().contains("--table"));
    }

    #[test]
    fn bad_values_name_the_flag() {
        let error = Cli::try_parse_from(["tablescan", "list", "--limit", "500"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("--limit"), "{error}");
        let error = Cli::try_parse_from(["tablescan", "list", "--state=sleeping"])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("--state") && error.contains("running"),
            "{error}"
        );
    }

    /// `list --state` takes the API's states by their names (the values it took when the
    /// command had a state type of its own), and only those.
    #[test]
    fn list_takes_the_apis_states_by_name() {
        let state = |value: &str| {
            let cli = Cli::try_parse_from(["tablescan", "list", "--state", value])
                .map_err(|e| e.kind())?;
            match cli.command {
                Command::List(args) => Ok(args.state),
                _ => panic!("not a list"),
            }
        };
        for (name, wanted) in [
            ("pending", State::Pending),
            ("running", State::Running),
            ("succeeded", State::Succeeded),
            ("failed", State::Failed),
            ("cancelling", State::Cancelling),
            ("cancelled", State::Cancelled),
            ("pausing", State::Pausing),
            ("paused", State::Paused),
        ] {
            assert_eq!(state(name), Ok(Some(wanted)), "{name}");
        }
        for wrong in ["Running", "RUNNING", "sleeping", ""] {
            assert_eq!(
                state(wrong),
                Err(clap::error::ErrorKind::InvalidValue),
                "{wrong}"
            );
        }
        let command = Cli::command();
        let list = command.find_subcommand("list").unwrap();
        let flag = list
            .get_arguments()
            .find(|a| a.get_long() == Some("state"))
            .unwrap();
        let values: Vec<String> = flag
            .get_possible_values()
            .iter()
            .map(|v| v.get_name().to_string())
            .collect();
        assert_eq!(
            values,
            [
                "pending",
                "running",
                "succeeded",
                "failed",
                "cancelling",
                "cancelled",
                "pausing",
                "paused"
            ]
        );
    }

    /// The help of --max-rows-per-second and of --set says what happens when they are left
    /// out or given a large number.
    #[test]
    fn the_help_gives_the_default_pace_and_how_set_types_numbers() {
        let mut command = Cli::command();
        let start = command.find_subcommand_mut("start").unwrap();
        let help = start.render_long_help().to_string();
        let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains("Default: none, unless the app sets TABLESCAN_MAX_ROWS_PER_SECOND"),
            "{help}"
        );
        assert!(
            flat.contains(
                "a whole number beyond Int32 (-2147483648 to 2147483647) is sent as Edm.Int64"
            ),
            "{help}"
        );
        assert!(
            flat.contains("null is refused: --remove takes a property away"),
            "{help}"
        );
    }
}
