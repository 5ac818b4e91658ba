//! `olderThan`: an age given as an ISO 8601 duration, resolved once to the moment it names.

use super::refusal::{refuse, SpecError};
use super::OlderThan;
use tablescan_storage::table::entity::EdmDateTime;

/// The longest `olderThan` accepted: a little over 100 years.
const MAX_AGE_DAYS: i64 = 36_600;

/// Resolves an ISO 8601 duration of days, hours, minutes and seconds (`P90D`, `PT12H`,
/// `P1DT6H30M`) against `now`. Months and years are refused: their length depends on the
/// calendar, and a retention rule must mean one thing.
pub(super) fn resolve_age(text: &str, now: time::OffsetDateTime) -> Result<OlderThan, SpecError> {
    let seconds = iso_duration_seconds(text).or_else(|why| refuse("olderThan", why))?;
    if seconds > MAX_AGE_DAYS * 86_400 {
        return refuse(
            "olderThan",
            format!(
                "is longer than 100 years; write an ISO 8601 duration such as \"P90D\", not \
                 {text:?}"
            ),
        );
    }
    let before = now - time::Duration::seconds(seconds);
    Ok(OlderThan {
        age: text.to_string(),
        before: EdmDateTime::new(before).to_string(),
    })
}

/// The seconds of an ISO 8601 duration of days, hours, minutes and seconds (`P90D`, `PT12H`,
/// `P1DT30M`), longer than zero; what is wrong with it otherwise, said for a user.
pub fn iso_duration_seconds(text: &str) -> Result<i64, String> {
    let bad = |why: &str| {
        Err(format!(
            "{why}; write an ISO 8601 duration of days, hours, minutes or seconds, such as \
             \"P90D\" (90 days) or \"PT12H\" (12 hours), not {text:?}"
        ))
    };
    let Some(rest) = text.strip_prefix('P') else {
        return bad("must start with P");
    };
    let (date, time_part) = match rest.split_once('T') {
        Some((date, time_part)) => (date, Some(time_part)),
        None => (rest, None),
    };
    let mut seconds: i64 = 0;
    let mut any = false;
    let mut read = |part: &str, units: &[(char, i64)]| -> Result<(), &'static str> {
        let mut number = String::new();
        let mut allowed = units.iter();
        for c in part.chars() {
            if c.is_ascii_digit() {
                number.push(c);
                continue;
            }
            if matches!(c, 'Y' | 'W') || (c == 'M' && units[0].0 == 'D') {
                return Err("months, weeks and years are not accepted");
            }
            let Some((_, size)) = allowed.by_ref().find(|(unit, _)| *unit == c) else {
                return Err("has a unit out of place or unknown");
            };
            let n: i64 = number
                .parse()
                .map_err(|_| "needs a number before each unit")?;
            seconds = n
                .checked_mul(*size)
                .and_then(|s| seconds.checked_add(s))
                .ok_or("is too long")?;
            number.clear();
            any = true;
        }
        if number.is_empty() {
            Ok(())
        } else {
            Err("ends with a number without a unit")
        }
    };
    if let Err(why) = read(date, &[('D', 86_400)]) {
        return bad(why);
    }
    if let Some(time_part) = time_part {
        if time_part.is_empty() {
            return bad("has nothing after T");
        }
        if let Err(why) = read(time_part, &[('H', 3_600), ('M', 60), ('S', 1)]) {
            return bad(why);
        }
    }
    if !any || seconds == 0 {
        return bad("must be longer than zero");
    }
    Ok(seconds)
}
