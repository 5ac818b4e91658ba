//! `tablescan resume ID`: resumes a paused scan. The app sends the messages of the items the
//! pause left pending in rounds (each answers `"more": true` while rows are left to look at),
//! so the command calls until it is done; if it stops early, the app's re-drive sweep goes on
//! with the rounds every minute.

use std::future::Future;

use tablescan_api::answers::ResumeRound;

use crate::api::ApiError;

/// The most rounds one `resume` asks for: 500 pending items a round.
const MOST_ROUNDS: u32 = 1_000;

/// How a resume ended.
#[derive(Debug, PartialEq)]
pub struct Resumed {
    /// Messages sent over every round.
    pub sent: u64,
    pub rounds: u32,
    /// The scan's state as the last round answered it.
    pub state: String,
    /// Whether rounds are still left (only when [`MOST_ROUNDS`] ran out).
    pub more: bool,
}

/// Calls `round` (one `POST /api/scans/{id}/resume`) until it answers `"more": false`, telling
/// `progress` the messages sent so far after each round that leaves more.
pub async fn until_done<F, Fut>(
    mut round: F,
    mut progress: impl FnMut(u64),
) -> Result<Resumed, ApiError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<ResumeRound<String>, ApiError>>,
{
    let mut resumed = Resumed {
        sent: 0,
        rounds: 0,
        state: String::new(),
        more: true,
    };
    while resumed.more && resumed.rounds < MOST_ROUNDS {
        let answer = round().await?;
        resumed.rounds += 1;
        resumed.sent += answer.sent;
        resumed.more = answer.more;
        resumed.state = match answer.state {
            state if state.is_empty() => "running".to_string(),
            state => state,
        };
        if resumed.more {
            progress(resumed.sent);
        }
    }
    Ok(resumed)
}

impl Resumed {
    /// The rounds' total as `--json` prints it: the answer of one round, with every round's
    /// messages.
    pub fn as_answer(&self, id: &str) -> ResumeRound<String> {
        ResumeRound {
            id: id.to_string(),
            state: self.state.clone(),
            sent: self.sent,
            more: self.more,
        }
    }
}

/// What the command prints once the rounds are done.
pub fn text(id: &str, resumed: &Resumed) -> String {
    let items = if resumed.sent == 1 {
        "1 paused work item".to_string()
    } else {
        format!("{} paused work items", crate::show::thousands(resumed.sent))
    };
    let rest = if resumed.more {
        format!(
            "; more are left: run `tablescan resume {id}` again (the app's sweep also goes on \
             every minute)"
        )
    } else {
        String::new()
    };
    format!(
        "scan {id}: {} again; {items} sent again{rest}\n`tablescan status {id} --watch` follows it\n",
        resumed.state
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::VecDeque;
    use std::sync::Mutex;

    #[tokio::test]
    async fn a_resume_is_called_again_while_the_app_says_there_is_more() {
        let answers = Mutex::new(VecDeque::from([
            json!({"id": "s1", "state": "running", "sent": 500, "more": true}),
            json!({"id": "s1", "state": "running", "sent": 12, "more": false}),
        ]));
        let mut seen = Vec::new();
        let resumed = until_done(
            || {
                let next = answers.lock().unwrap().pop_front().unwrap();
                async move { Ok(serde_json::from_value(next).unwrap()) }
            },
            |sent| seen.push(sent),
        )
        .await
        .unwrap();
        assert_eq!(resumed.sent, 512);
        assert_eq!(resumed.rounds, 2);
        assert!(!resumed.more);
        assert_eq!(seen, vec![500]);
        assert_eq!(
            serde_json::to_value(resumed.as_answer("s1")).unwrap(),
            json!({"id": "s1", "state": "running", "sent": 512, "more": false})
        );
        let said = text("s1", &resumed);
        assert!(
            said.starts_with("scan s1: running again; 512 paused work items sent again\n"),
            "{said}"
        );
    }
}
