//! The rate cap: how fast a scan may move entities, the app's default for a request that names
//! none (and the setting that changes it), and a request's `maxRowsPerSecond`.

use serde_json::Value;

use super::fields::{refuse, Fields, SpecError};

/// The cap of a scan whose request names none, unless the app setting
/// [`MAX_ROWS_PER_SECOND_SETTING`] says otherwise: none. A scan goes as fast as its accounts
/// take, backing off to just under where an account starts refusing (the storage client's
/// per-account back-off), as other bulk tools do; a cap is for those who want a hard limit.
pub const DEFAULT_MAX_ROWS_PER_SECOND: Option<u32> = None;
/// The app setting with the default cap: a whole number, or `unlimited`.
pub const MAX_ROWS_PER_SECOND_SETTING: &str = "TABLESCAN_MAX_ROWS_PER_SECOND";
/// The highest cap a request may name (far above what one account takes).
pub const MAX_RATE_CAP: u32 = 10_000_000;

/// A cap as the app setting gives it: a whole number from 1 to [`MAX_RATE_CAP`], or
/// `unlimited` (`None`).
pub fn parse_rate_cap(text: &str) -> Result<Option<u32>, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("unlimited") {
        return Ok(None);
    }
    match text.parse::<u32>() {
        Ok(n) if (1..=MAX_RATE_CAP).contains(&n) => Ok(Some(n)),
        _ => Err(format!(
            "must be a whole number of entities per second from 1 to {MAX_RATE_CAP}, or \"unlimited\"; not {text:?}"
        )),
    }
}

/// A request's `maxRowsPerSecond`: a whole number from 1 to [`MAX_RATE_CAP`], `"unlimited"`
/// (`None`), or `default_cap` when the request names none.
pub(super) fn requested_cap(
    fields: &mut Fields,
    default_cap: Option<u32>,
) -> Result<Option<u32>, SpecError> {
    match fields.take("maxRowsPerSecond") {
        None | Some(Value::Null) => Ok(default_cap),
        Some(Value::String(text)) if text == "unlimited" => Ok(None),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(cap) if (1..=u64::from(MAX_RATE_CAP)).contains(&cap) => Ok(Some(cap as u32)),
            _ => refuse(
                "maxRowsPerSecond",
                format!("must be a whole number from 1 to {MAX_RATE_CAP}, not {n}"),
            ),
        },
        Some(_) => refuse(
            "maxRowsPerSecond",
            "must be a whole number of entities per second, or \"unlimited\"",
        ),
    }
}
