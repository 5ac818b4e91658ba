//! `tablescan remove ID`: deletes a finished scan's records from the ledger. The app removes a
//! large scan in rounds (each call works for at most 20 s and answers `"more": true` while rows
//! are left), so the command calls until it is done, saying how far it got.

use std::future::Future;

use tablescan_api::answers::RemovalRound;

use crate::api::ApiError;

/// The most rounds one `remove` asks for: a scan of millions of work items takes a few dozen.
const MOST_ROUNDS: u32 = 1_000;

/// How a removal ended.
#[derive(Debug, PartialEq)]
pub struct Removed {
    /// Ledger rows deleted over every round.
    pub rows: u64,
    /// Rounds called.
    pub rounds: u32,
    /// Whether rows are still left (only when [`MOST_ROUNDS`] ran out).
    pub more: bool,
}

/// Calls `round` (one `DELETE /api/scans/{id}`) until it answers `"more": false`, telling
/// `progress` the rows removed so far after each round that leaves more.
pub async fn until_done<F, Fut>(
    mut round: F,
    mut progress: impl FnMut(u64),
) -> Result<Removed, ApiError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<RemovalRound, ApiError>>,
{
    let mut removed = Removed {
        rows: 0,
        rounds: 0,
        more: true,
    };
    while removed.more && removed.rounds < MOST_ROUNDS {
        let answer = round().await?;
        removed.rounds += 1;
        removed.rows += answer.removed_rows;
        removed.more = answer.more;
        if removed.more {
            progress(removed.rows);
        }
    }
    Ok(removed)
}

impl Removed {
    /// The rounds' total as `--json` prints it: the answer of one round, with every round's
    /// rows.
    pub fn as_answer(&self, id: &str) -> RemovalRound {
        RemovalRound {
            id: id.to_string(),
            removed_rows: self.rows,
            more: self.more,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};
    use std::collections::VecDeque;
    use std::sync::Mutex;

    #[tokio::test]
    async fn a_removal_is_called_again_while_the_app_says_there_is_more() {
        let answers = Mutex::new(VecDeque::from([
            json!({"removedRows": 4000, "more": true}),
            json!({"removedRows": 3500, "more": true}),
            json!({"removedRows": 12, "more": false}),
        ]));
        let mut seen = Vec::new();
        let removed = until_done(
            || {
                let next = answers.lock().unwrap().pop_front();
                let next = next.expect("no call after the last round");
                async move { Ok(serde_json::from_value(next).unwrap()) }
            },
            |rows| seen.push(rows),
        )
        .await
        .unwrap();
        assert_eq!(
            removed,
            Removed {
                rows: 7512,
                rounds: 3,
                more: false
            }
        );
        assert_eq!(seen, [4000, 7500]);
        assert_eq!(
            serde_json::to_value(removed.as_answer("s1")).unwrap(),
            json!({"id": "s1", "removedRows": 7512, "more": false})
        );
    }

    #[tokio::test]
    async fn a_refused_round_ends_the_removal_with_its_error() {
        let result = until_done(
            || async {
                Err(ApiError::Refused {
                    status: 409,
                    field: None,
                    message: "only a finished scan can be removed".into(),
                    body: Value::Null,
                })
            },
            |_| panic!("no progress"),
        )
        .await;
        assert!(matches!(result, Err(ApiError::Refused { status: 409, .. })));
    }
}
