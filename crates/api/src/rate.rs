//! The rate cap: how fast a scan may move entities, the app's default for a request that names
//! none (and the setting that changes it), and a request's `maxRowsPerSecond`.

use serde::de::{self, Deserialize, Deserializer};
use serde_json::Value;

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

/// A request's `maxRowsPerSecond`: a whole number from 1 to [`MAX_RATE_CAP`], or `"unlimited"`.
#[derive(Debug)]
pub(crate) enum Cap {
    Limit(u32),
    Unlimited,
}

impl Cap {
    /// The cap a scan gets: the one its request names, or `default_cap` when it names none.
    pub(crate) fn or_default(cap: Option<Cap>, default_cap: Option<u32>) -> Option<u32> {
        match cap {
            None => default_cap,
            Some(Cap::Limit(cap)) => Some(cap),
            Some(Cap::Unlimited) => None,
        }
    }
}

impl<'de> Deserialize<'de> for Cap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::String(text) if text == "unlimited" => Ok(Cap::Unlimited),
            Value::Number(n) => match n.as_u64() {
                Some(cap) if (1..=u64::from(MAX_RATE_CAP)).contains(&cap) => {
                    Ok(Cap::Limit(cap as u32))
                }
                _ => Err(de::Error::custom(format!(
                    "must be a whole number from 1 to {MAX_RATE_CAP}, not {n}"
                ))),
            },
            _ => Err(de::Error::custom(
                "must be a whole number of entities per second, or \"unlimited\"",
            )),
        }
    }
}
