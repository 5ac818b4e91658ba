//! The table of flags and actions (`crate::applies`): every flag either reaches the request or
//! is refused.

use super::start_request;
use crate::applies::Action::{self, *};
use crate::applies::{check, flag as flag_of};
use crate::args::{Cli, Command, StartArgs};
use clap::{CommandFactory, Parser};

/// The flags that choose the action, each with a value where it takes one.
fn action_args(action: Action) -> Vec<&'static str> {
    match action {
        Count => vec!["--count"],
        Copy => vec!["--copy=target"],
        Enqueue => vec!["--enqueue=rows"],
        Delete => vec!["--delete"],
        Update => vec!["--update"],
        PartitionKeys => vec!["--partition-keys=keys"],
        Export => vec!["--export=backups/day"],
    }
}

/// Every flag of `start` that is not an action, with a value that is not its default.
const FLAGS: &[&str] = &[
    "--connection=OTHER",
    "--to-connection=BACKUP",
    "--mode=merge",
    "--set={\"A\":1}",
    "--remove=B",
    "--per=partition",
    "--encoding=none",
    "--rows-per-message=5",
    "--compression=none",
    "--prefix=p",
    "--after=a",
    "--before=z",
    "--row-prefix=r",
    "--row-after=ra",
    "--row-before=rz",
    "--filter=N eq 1",
    "--older-than=P1D",
    "--select=A",
    "--page-size=10",
    "--strategy=serial",
    "--max-rows-per-second=100",
    "--max-row-failures=3",
    "--dry-run",
];

/// Which actions take which flag: written out here, not derived from [`crate::applies::RULES`], so that a
/// change to the rules shows up as a failing row. `None`: every action.
fn expected(flag: &str) -> Option<&'static [Action]> {
    let name = flag.split('=').next().unwrap();
    match name {
        "--to-connection" => Some(&[Copy, Enqueue, PartitionKeys, Export]),
        "--mode" => Some(&[Copy]),
        "--set" | "--remove" => Some(&[Update]),
        "--per" | "--rows-per-message" => Some(&[Enqueue]),
        "--encoding" => Some(&[Enqueue, PartitionKeys]),
        "--compression" => Some(&[Export]),
        "--dry-run" => Some(&[Copy, Enqueue, Delete, Update, PartitionKeys, Export]),
        "--select" => Some(&[Count, Copy, Enqueue, PartitionKeys, Export]),
        _ => None,
    }
}

fn start(args: &[&str]) -> Box<StartArgs> {
    let mut all = vec!["tablescan", "start"];
    all.extend_from_slice(args);
    match Cli::try_parse_from(&all) {
        Ok(Cli {
            command: Command::Start(start),
            ..
        }) => start,
        Ok(_) => panic!("not a start: {all:?}"),
        Err(e) => panic!("{all:?} does not parse: {e}"),
    }
}

#[test]
fn every_flag_is_refused_by_the_actions_that_do_not_use_it_and_reaches_the_request_of_the_others() {
    let mut refused = 0;
    for action in Action::ALL {
        let mut base = vec!["--table=t"];
        base.extend(action_args(action));
        let without = start_request(&start(&base)).unwrap();
        for flag in FLAGS {
            let mut args = base.clone();
            args.push(flag);
            let parsed = start(&args);
            let applies = expected(flag).is_none_or(|actions| actions.contains(&action));
            match check(&parsed) {
                Ok(()) => {
                    assert!(applies, "{flag} with {} was let through", flag_of(action));
                    let with = start_request(&parsed).unwrap();
                    assert_ne!(with, without, "{flag} with {} was dropped", flag_of(action));
                }
                Err(why) => {
                    assert!(
                        !applies,
                        "{flag} with {} was refused: {why}",
                        flag_of(action)
                    );
                    let name = flag.split('=').next().unwrap();
                    assert!(
                        why.starts_with(&format!("{name} does not apply to {}", flag_of(action))),
                        "{why}"
                    );
                    refused += 1;
                }
            }
        }
    }
    // 4 actions without --to-connection, 6 without --mode, ...: the table above, counted.
    assert_eq!(refused, 3 + 6 + 6 + 6 + 6 + 6 + 5 + 6 + 1 + 2);
}

#[test]
fn an_import_takes_a_copy_or_a_count_over_the_whole_export() {
    assert_eq!(check(&start(&["--import=b/p", "--copy=t"])), Ok(()));
    assert_eq!(check(&start(&["--import=b/p", "--count"])), Ok(()));
    assert_eq!(
        check(&start(&["--import=b/p", "--copy=t", "--mode=insert"])),
        Ok(())
    );
    let why = check(&start(&["--import=b/p", "--delete"])).unwrap_err();
    assert!(
        why.starts_with("--delete does not apply to --import"),
        "{why}"
    );
    for flag in [
        "--prefix=p",
        "--after=a",
        "--before=b",
        "--row-prefix=r",
        "--row-after=a",
        "--row-before=b",
        "--filter=A eq 1",
        "--older-than=P1D",
        "--select=A",
        "--page-size=5",
        "--strategy=serial",
    ] {
        let why = check(&start(&["--import=b/p", "--copy=t", flag])).unwrap_err();
        let name = flag.split('=').next().unwrap();
        assert!(
            why.starts_with(&format!("{name} does not apply to --import")),
            "{why}"
        );
    }
}

/// A flag added to `start` later must be placed in the table above (or be one of those that
/// steer the command rather than the scan).
#[test]
fn the_table_names_every_flag_of_start() {
    let command = Cli::command();
    let start = command.find_subcommand("start").unwrap();
    let steering = [
        "--wait",
        "--idempotency-key",
        "--table",
        "--import",
        "--json",
        "--url",
        "--key",
        "--app",
        "--resource-group",
        "--help",
    ];
    for arg in start.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        let flag = format!("--{long}");
        let action = Action::ALL.iter().any(|a| flag_of(*a) == flag);
        let listed = FLAGS
            .iter()
            .any(|f| f.split('=').next() == Some(flag.as_str()));
        assert!(
            action || listed || steering.contains(&flag.as_str()),
            "{flag} is in no table: say which actions it applies to"
        );
    }
}
