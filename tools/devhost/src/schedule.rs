//! Timer-trigger schedules as the host reads them: an NCRONTAB expression of six fields
//! (`second minute hour day month day-of-week`), or on dedicated plans a TimeSpan interval
//! (`hh:mm:ss`). Times are UTC, as in Azure unless WEBSITE_TIME_ZONE says otherwise.
//!
//! Each field is `*`, a number, a range `a-b`, any of those with a step `/n`, or a list of them
//! separated by commas. As in NCrontab, a day must match both the day of the month and the day
//! of the week (0 or 7 = Sunday).

use std::time::Duration;

use time::{Date, OffsetDateTime, Time};

/// When a timer fires.
#[derive(Debug, Clone, PartialEq)]
pub enum Schedule {
    Cron(Cron),
    Every(Duration),
}

/// The values each field of a cron expression allows, as bit sets.
#[derive(Debug, Clone, PartialEq)]
pub struct Cron {
    seconds: u64,
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
}

/// Reads one field: `*`, `n`, `a-b`, with an optional `/step`, comma-separated.
fn field(text: &str, min: u32, max: u32, what: &str) -> Result<u64, String> {
    let mut set = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => (
                range,
                step.parse::<u32>()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("{what}: bad step in {part:?}"))?,
            ),
            None => (part, 1),
        };
        let number = |n: &str| {
            n.parse::<u32>()
                .ok()
                .filter(|n| (min..=max).contains(n))
                .ok_or_else(|| format!("{what}: {n:?} is not a number from {min} to {max}"))
        };
        let (low, high) = match range {
            "*" => (min, max),
            _ => match range.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                // `n/step` runs from n to the end of the field.
                None if part.contains('/') => (number(range)?, max),
                None => {
                    let n = number(range)?;
                    (n, n)
                }
            },
        };
        if low > high {
            return Err(format!("{what}: the range {range:?} runs backwards"));
        }
        for value in (low..=high).step_by(step as usize) {
            set |= 1 << value;
        }
    }
    Ok(set)
}

fn has(set: u64, value: u8) -> bool {
    set & (1 << value) != 0
}

impl Schedule {
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let fields: Vec<&str> = text.split_whitespace().collect();
        if fields.len() == 1 && fields[0].contains(':') {
            return crate::config::parse_timespan(fields[0])
                .filter(|d| !d.is_zero() && *d != Duration::MAX)
                .map(Schedule::Every)
                .ok_or_else(|| format!("{text:?} is not a TimeSpan interval"));
        }
        let [s, m, h, d, mo, w] = fields.as_slice() else {
            return Err(format!(
                "{text:?} is not an NCRONTAB expression of six fields (second minute hour day month day-of-week)"
            ));
        };
        let mut weekdays = field(w, 0, 7, "day of week")?;
        if has(weekdays, 7) {
            weekdays |= 1;
        }
        Ok(Schedule::Cron(Cron {
            seconds: field(s, 0, 59, "second")?,
            minutes: field(m, 0, 59, "minute")?,
            hours: field(h, 0, 23, "hour")?,
            days: field(d, 1, 31, "day")?,
            months: field(mo, 1, 12, "month")?,
            weekdays,
        }))
    }

    /// The first occurrence strictly after `after`, if there is one within five years.
    pub fn next_after(&self, after: OffsetDateTime) -> Option<OffsetDateTime> {
        let cron = match self {
            Schedule::Every(every) => return Some(after + *every),
            Schedule::Cron(cron) => cron,
        };
        let after = after.replace_nanosecond(0).ok()?;
        let mut day: Date = after.date();
        for _ in 0..(5 * 366) {
            if cron.matches_day(day) {
                for hour in (0..24).filter(|h| has(cron.hours, *h)) {
                    for minute in (0..60).filter(|m| has(cron.minutes, *m)) {
                        for second in (0..60).filter(|s| has(cron.seconds, *s)) {
                            let time = Time::from_hms(hour, minute, second).ok()?;
                            let at = day.with_time(time).assume_utc();
                            if at > after {
                                return Some(at);
                            }
                        }
                    }
                }
            }
            day = day.next_day()?;
        }
        None
    }
}

impl Cron {
    fn matches_day(&self, day: Date) -> bool {
        has(self.days, day.day())
            && has(self.months, u8::from(day.month()))
            && has(self.weekdays, day.weekday().number_days_from_sunday())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn next(schedule: &str, after: OffsetDateTime) -> OffsetDateTime {
        Schedule::parse(schedule)
            .unwrap()
            .next_after(after)
            .unwrap()
    }

    #[test]
    fn every_five_minutes_on_the_minute() {
        let at = datetime!(2026-11-22 10:02:30 UTC);
        assert_eq!(
            next("0 */5 * * * *", at),
            datetime!(2026-11-22 10:05:00 UTC)
        );
        assert_eq!(
            next("0 */5 * * * *", datetime!(2026-11-22 10:05:00 UTC)),
            datetime!(2026-11-22 10:10:00 UTC),
            "strictly after"
        );
        assert_eq!(
            next("0 */5 * * * *", datetime!(2026-11-22 23:59:59.5 UTC)),
            datetime!(2026-11-23 00:00:00 UTC)
        );
    }

    #[test]
    fn seconds_lists_ranges_and_steps() {
        let at = datetime!(2026-11-22 10:00:00 UTC);
        assert_eq!(
            next("*/2 * * * * *", at),
            datetime!(2026-11-22 10:00:02 UTC)
        );
        assert_eq!(
            next("5,40 * * * * *", at),
            datetime!(2026-11-22 10:00:05 UTC)
        );
        assert_eq!(
            next("10-12/2 * * * * *", datetime!(2026-11-22 10:00:10 UTC)),
            datetime!(2026-11-22 10:00:12 UTC)
        );
        assert_eq!(
            next("30/15 * * * * *", datetime!(2026-11-22 10:00:46 UTC)),
            datetime!(2026-11-22 10:01:30 UTC)
        );
    }

    #[test]
    fn days_must_match_both_fields() {
        // 2026-11-22 is a Sunday; the next Monday the 1st is 2027-02-01.
        let at = datetime!(2026-11-22 10:00:00 UTC);
        assert_eq!(next("0 0 9 * * 1", at), datetime!(2026-11-23 09:00:00 UTC));
        assert_eq!(next("0 0 9 1 * 1", at), datetime!(2027-02-01 09:00:00 UTC));
        assert_eq!(
            next("0 0 0 * * 7", at),
            datetime!(2026-11-29 00:00:00 UTC),
            "7 is Sunday"
        );
        assert_eq!(next("0 0 0 29 2 *", at), datetime!(2028-02-29 00:00:00 UTC));
    }

    #[test]
    fn timespan_intervals() {
        assert_eq!(
            Schedule::parse("00:00:03").unwrap(),
            Schedule::Every(Duration::from_secs(3))
        );
        assert!(Schedule::parse("00:00:00").is_err());
    }

    #[test]
    fn bad_expressions_say_what_is_wrong() {
        for (text, says) in [
            ("0 */5 * * *", "six fields"),
            ("60 * * * * *", "second"),
            ("0 0 25 * * *", "hour"),
            ("0 0 0 0 * *", "day"),
            ("*/0 * * * * *", "step"),
            ("0 0 0 * * 5-1", "backwards"),
            ("0 0 0 * * MON", "day of week"),
        ] {
            let why = Schedule::parse(text).unwrap_err();
            assert!(why.contains(says), "{text}: {why}");
        }
    }
}
