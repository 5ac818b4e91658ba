//! Which of `tablescan start`'s flags apply to which action. The request is built from the
//! flags the action uses; a flag the action has no use for would be dropped without a word
//! (`--count --set ...` counting as if `--set` were not there), so it is refused instead,
//! naming the flag and the action, before anything is sent. The HTTP API refuses unknown
//! fields for the same reason: a typo must not turn a filtered delete into a full one.

use crate::args::StartArgs;

/// The action a start names (exactly one: clap's `action` group makes sure): the API's kinds.
pub use tablescan_api::ActionKind as Action;

/// The flag that chose `action`.
pub fn flag(action: Action) -> &'static str {
    match action {
        Action::Count => "--count",
        Action::Copy => "--copy",
        Action::Enqueue => "--enqueue",
        Action::Delete => "--delete",
        Action::Update => "--update",
        Action::PartitionKeys => "--partition-keys",
        Action::Export => "--export",
    }
}

/// The action of a parsed start.
pub fn action_of(args: &StartArgs) -> Action {
    if args.copy.is_some() {
        Action::Copy
    } else if args.enqueue.is_some() {
        Action::Enqueue
    } else if args.delete {
        Action::Delete
    } else if args.update {
        Action::Update
    } else if args.partition_keys.is_some() {
        Action::PartitionKeys
    } else if args.export.is_some() {
        Action::Export
    } else {
        Action::Count
    }
}

/// Whether a flag was given.
type Given = fn(&StartArgs) -> bool;

/// A flag that only some actions use.
pub struct Rule {
    pub flag: &'static str,
    pub given: Given,
    /// The actions that use it.
    pub applies_to: &'static [Action],
}

use Action::*;

/// Every flag that not every action uses. Flags not listed here (the scope, `--filter`,
/// `--page-size`, `--max-rows-per-second`, ...) go into the request for every action.
pub const RULES: &[Rule] = &[
    Rule {
        flag: "--to-connection",
        given: |a| a.to_connection.is_some(),
        applies_to: &[Copy, Enqueue, PartitionKeys, Export],
    },
    Rule {
        flag: "--mode",
        given: |a| a.mode.is_some(),
        applies_to: &[Copy],
    },
    Rule {
        flag: "--set",
        given: |a| a.set.is_some(),
        applies_to: &[Update],
    },
    Rule {
        flag: "--remove",
        given: |a| !a.remove.is_empty(),
        applies_to: &[Update],
    },
    Rule {
        flag: "--per",
        given: |a| a.per.is_some(),
        applies_to: &[Enqueue],
    },
    Rule {
        flag: "--encoding",
        given: |a| a.encoding.is_some(),
        applies_to: &[Enqueue, PartitionKeys],
    },
    Rule {
        flag: "--rows-per-message",
        given: |a| a.rows_per_message.is_some(),
        applies_to: &[Enqueue],
    },
    Rule {
        flag: "--compression",
        given: |a| a.compression.is_some(),
        applies_to: &[Export],
    },
    // The app refuses these too; refusing them here says it before anything is sent.
    Rule {
        flag: "--dry-run",
        given: |a| a.dry_run,
        applies_to: &[Copy, Enqueue, Delete, Update, PartitionKeys, Export],
    },
    Rule {
        flag: "--select",
        given: |a| !a.select.is_empty(),
        applies_to: &[Count, Copy, Enqueue, PartitionKeys, Export],
    },
];

/// Flags an `--import` has no use for: it restores (or checks) every row of an export, read
/// from blobs, not a table.
const NOT_WITH_IMPORT: &[(&str, Given)] = &[
    ("--prefix", |a| a.prefix.is_some()),
    ("--after", |a| a.after.is_some()),
    ("--before", |a| a.before.is_some()),
    ("--row-prefix", |a| a.row_prefix.is_some()),
    ("--row-after", |a| a.row_after.is_some()),
    ("--row-before", |a| a.row_before.is_some()),
    ("--filter", |a| a.filter.is_some()),
    ("--older-than", |a| a.older_than.is_some()),
    ("--select", |a| !a.select.is_empty()),
    ("--page-size", |a| a.page_size.is_some()),
    ("--strategy", |a| a.strategy.is_some()),
];

/// Why the flags do not make one request: the first flag the chosen action has no use for,
/// named with the action.
pub fn check(args: &StartArgs) -> Result<(), String> {
    let action = action_of(args);
    if args.import.is_some() {
        if !matches!(action, Copy | Count) {
            return Err(format!(
                "{} does not apply to --import: an import restores an export with --copy TARGET, \
                 or checks it with --count",
                flag(action)
            ));
        }
        if let Some((flag, _)) = NOT_WITH_IMPORT.iter().find(|(_, given)| given(args)) {
            return Err(format!(
                "{flag} does not apply to --import, which restores every row of the export; to \
                 restore part of it, import into a new table and copy the part from there"
            ));
        }
    }
    for rule in RULES {
        if (rule.given)(args) && !rule.applies_to.contains(&action) {
            let users: Vec<&str> = rule.applies_to.iter().map(|a| flag(*a)).collect();
            return Err(format!(
                "{} does not apply to {}: it is for {}",
                rule.flag,
                flag(action),
                or_list(&users)
            ));
        }
    }
    Ok(())
}

/// `a`, `a or b`, `a, b or c`.
fn or_list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => one.to_string(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}
