//! The kinds of action, by the names a request's `action.type` gives them: one list for the
//! API's parser and the CLI (its `start` flags and `list --action`).

/// A kind of action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActionKind {
    Count,
    Copy,
    Enqueue,
    Delete,
    Update,
    PartitionKeys,
    Export,
}

impl ActionKind {
    pub const ALL: [ActionKind; 7] = [
        ActionKind::Count,
        ActionKind::Copy,
        ActionKind::Enqueue,
        ActionKind::Delete,
        ActionKind::Update,
        ActionKind::PartitionKeys,
        ActionKind::Export,
    ];

    /// The kind's name in the API, as `action.type` spells it (`partition-keys`).
    pub fn name(self) -> &'static str {
        match self {
            ActionKind::Count => "count",
            ActionKind::Copy => "copy",
            ActionKind::Enqueue => "enqueue",
            ActionKind::Delete => "delete",
            ActionKind::Update => "update",
            ActionKind::PartitionKeys => "partition-keys",
            ActionKind::Export => "export",
        }
    }

    /// The kind `name` names, if any.
    pub fn named(name: &str) -> Option<ActionKind> {
        ActionKind::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_named_by_its_own_name_once() {
        for kind in ActionKind::ALL {
            assert_eq!(ActionKind::named(kind.name()), Some(kind));
        }
        assert_eq!(ActionKind::named("Count"), None);
        assert_eq!(ActionKind::named("partition_keys"), None);
    }
}
