//! `tablescan schedule`'s subcommands and flags: `set` takes the flags of `start` for the scan
//! each occurrence starts. Part of [`super`] (the command line), so that the flags of every
//! command are declared below the commands that run them.

use clap::{ArgGroup, Args, Subcommand};

use super::StartArgs;

#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Create or replace a schedule: a timetable and the scan it starts (start's flags)
    Set(Box<SetArgs>),
    /// Every schedule, with its next and last run
    List,
    /// One schedule: its timetable, next runs, and last runs with their scans' outcomes
    Show { name: String },
    /// Stop starting occurrences (a scan in flight goes on)
    Pause { name: String },
    /// Start occurrences again, from the next one (those missed while paused are not run)
    Resume { name: String },
    /// Start the schedule's scan now (refused while its last scan is in flight)
    Run { name: String },
    /// Start a dry run of the scan the next occurrence would start: what it would act on
    Preview { name: String },
    /// Delete a schedule (the scans it started stay)
    Delete { name: String },
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("timetable").required(true).args(["cron", "every"])))]
pub struct SetArgs {
    /// The schedule's name: lowercase letters, digits and dashes
    pub name: String,
    /// A cron expression: five fields (minute hour day-of-month month day-of-week), or six
    /// with seconds first; "0 3 * * *" is 03:00 every day
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    /// The IANA time zone of --cron (default UTC), such as Europe/Berlin
    #[arg(long, value_name = "ZONE")]
    pub time_zone: Option<String>,
    /// A fixed interval from now, an ISO 8601 duration such as PT15M or P1D
    #[arg(long, value_name = "DURATION")]
    pub every: Option<String>,
    /// Set it paused
    #[arg(long)]
    pub paused: bool,
    #[command(flatten)]
    pub scan: StartArgs,
}
