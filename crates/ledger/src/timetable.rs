//! When a schedule's occurrences fall: a cron expression in a time zone, or a fixed interval
//! from the moment the schedule was set. Pure: no clock, no storage.
//!
//! Cron expressions are parsed by `croner` (five fields, or six with seconds first; names,
//! ranges, steps, `L`, `W`, `#`) and evaluated in an IANA time zone from `chrono-tz`, so that
//! "03:00 every day in Europe/Berlin" follows daylight saving time. An occurrence is a moment;
//! the rest of tablescan works in `time`, and moments cross over as Unix nanoseconds.

use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use time::{Duration, OffsetDateTime};

use tablescan_api::SpecError;

/// The shortest interval a schedule may have: the timer that starts occurrences runs once a
/// minute by default; shorter intervals are for tests and drills (the timer sped up).
pub const SHORTEST_INTERVAL_SECONDS: i64 = 1;
/// The longest interval: a little over 100 years (as `olderThan`'s longest age), so that the
/// next occurrences stay within the calendar `time` knows (to year 9999).
pub const LONGEST_INTERVAL_SECONDS: i64 = 36_600 * 86_400;

/// A schedule's timetable.
#[derive(Debug, Clone, PartialEq)]
pub enum Timetable {
    Cron {
        expression: String,
        /// The IANA name (`UTC` when none was given).
        time_zone: String,
        cron: Box<Cron>,
        zone: Tz,
    },
    /// Every `seconds`, from `anchor` on.
    Every {
        text: String,
        seconds: i64,
        anchor: OffsetDateTime,
    },
}

fn refuse<T>(field: &str, message: impl Into<String>) -> Result<T, SpecError> {
    Err(SpecError {
        field: field.to_string(),
        message: message.into(),
    })
}

impl Timetable {
    /// A cron timetable, checked: field `cron` or `timeZone` named when one is wrong.
    pub fn cron(expression: &str, time_zone: Option<&str>) -> Result<Timetable, SpecError> {
        let cron = Cron::from_str(expression.trim()).or_else(|e| {
            refuse(
                "cron",
                format!(
                    "{expression:?} is not a cron expression ({e}); write five fields (minute \
                     hour day-of-month month day-of-week), or six with seconds first, such as \
                     \"0 3 * * *\" (03:00 every day)"
                ),
            )
        })?;
        let name = time_zone.unwrap_or("UTC");
        let zone = Tz::from_str(name).or_else(|_| {
            refuse(
                "timeZone",
                format!("{name:?} is not an IANA time zone; write one such as \"Europe/Berlin\" or \"UTC\""),
            )
        })?;
        let timetable = Timetable::Cron {
            expression: expression.trim().to_string(),
            time_zone: name.to_string(),
            cron: Box::new(cron),
            zone,
        };
        // An expression that never matches (the 30th of February) is refused now, not found
        // out at the first occurrence that never comes.
        if timetable.next_after(OffsetDateTime::now_utc()).is_none() {
            return refuse(
                "cron",
                format!("{expression:?} matches no moment in the next years"),
            );
        }
        Ok(timetable)
    }

    /// An interval timetable from `anchor` on (`every`: an ISO 8601 duration such as `PT15M`).
    pub fn every(text: &str, anchor: OffsetDateTime) -> Result<Timetable, SpecError> {
        let seconds =
            tablescan_api::iso_duration_seconds(text).or_else(|why| refuse("every", why))?;
        if seconds < SHORTEST_INTERVAL_SECONDS {
            return refuse("every", "must be at least a second");
        }
        if seconds > LONGEST_INTERVAL_SECONDS {
            return refuse(
                "every",
                "must be at most 36600 days (a little over 100 years)",
            );
        }
        Ok(Timetable::Every {
            text: text.to_string(),
            seconds,
            anchor,
        })
    }

    /// The latest occurrence at or before `now`, if any.
    pub fn latest_at_or_before(&self, now: OffsetDateTime) -> Option<OffsetDateTime> {
        match self {
            Timetable::Cron { cron, zone, .. } => {
                let at = to_zone(now, *zone)?;
                cron.find_previous_occurrence(&at, true)
                    .ok()
                    .and_then(|t| from_chrono(&t))
            }
            Timetable::Every {
                seconds, anchor, ..
            } => {
                if now < *anchor {
                    return None;
                }
                let periods = (now - *anchor).whole_seconds() / seconds;
                anchor.checked_add(Duration::seconds(periods.checked_mul(*seconds)?))
            }
        }
    }

    /// The first occurrence after `after`, if any.
    pub fn next_after(&self, after: OffsetDateTime) -> Option<OffsetDateTime> {
        match self {
            Timetable::Cron { cron, zone, .. } => {
                let at = to_zone(after, *zone)?;
                cron.find_next_occurrence(&at, false)
                    .ok()
                    .and_then(|t| from_chrono(&t))
            }
            Timetable::Every {
                seconds, anchor, ..
            } => {
                if after < *anchor {
                    return Some(*anchor);
                }
                let periods = (after - *anchor).whole_seconds() / seconds + 1;
                anchor.checked_add(Duration::seconds(periods.checked_mul(*seconds)?))
            }
        }
    }

    /// The next `n` occurrences after `after`.
    pub fn upcoming(&self, after: OffsetDateTime, n: usize) -> Vec<OffsetDateTime> {
        let mut out = Vec::with_capacity(n);
        let mut from = after;
        while out.len() < n {
            let Some(next) = self.next_after(from) else {
                break;
            };
            out.push(next);
            from = next;
        }
        out
    }

    /// How many occurrences fall strictly between `after` and `before`, counting at most
    /// `most` (the ones a downtime missed, said with the late run).
    pub fn between(&self, after: OffsetDateTime, before: OffsetDateTime, most: u32) -> u32 {
        let mut count = 0;
        let mut from = after;
        while count < most {
            match self.next_after(from) {
                Some(next) if next < before => {
                    count += 1;
                    from = next;
                }
                _ => break,
            }
        }
        count
    }
}

/// `t` in `zone`, without its fraction of a second: croner carries the fraction of the moment
/// it is asked about into the occurrence it finds, and an occurrence must be the same moment
/// at every tick (cron occurrences fall on whole seconds, so the floor loses none).
fn to_zone(t: OffsetDateTime, zone: Tz) -> Option<DateTime<Tz>> {
    Utc.timestamp_opt(t.unix_timestamp(), 0)
        .single()
        .map(|utc| utc.with_timezone(&zone))
}

fn from_chrono<Z: TimeZone>(t: &DateTime<Z>) -> Option<OffsetDateTime> {
    let nanos = i128::from(t.timestamp()) * 1_000_000_000 + i128::from(t.timestamp_subsec_nanos());
    OffsetDateTime::from_unix_timestamp_nanos(nanos).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn a_daily_cron_in_a_time_zone_follows_its_daylight_saving_time() {
        let t = Timetable::cron("0 3 * * *", Some("Europe/Berlin")).unwrap();
        // 03:00 in Berlin is 01:00 UTC in summer, 02:00 UTC in winter.
        let summer = t.next_after(datetime!(2026-07-01 12:00 UTC)).unwrap();
        assert_eq!(summer, datetime!(2026-07-02 01:00 UTC));
        let winter = t.next_after(datetime!(2026-12-01 12:00 UTC)).unwrap();
        assert_eq!(winter, datetime!(2026-12-02 02:00 UTC));
        assert_eq!(
            t.latest_at_or_before(datetime!(2026-07-02 01:00 UTC)),
            Some(datetime!(2026-07-02 01:00 UTC)),
            "an occurrence at the very moment is due"
        );
    }

    #[test]
    fn seconds_are_optional_and_occurrences_are_counted_between() {
        let t = Timetable::cron("*/5 * * * * *", None).unwrap();
        let from = datetime!(2026-01-01 00:00:00 UTC);
        assert_eq!(
            t.upcoming(from, 3),
            vec![
                datetime!(2026-01-01 00:00:05 UTC),
                datetime!(2026-01-01 00:00:10 UTC),
                datetime!(2026-01-01 00:00:15 UTC)
            ]
        );
        assert_eq!(t.between(from, datetime!(2026-01-01 00:01:00 UTC), 100), 11);
        assert_eq!(t.between(from, datetime!(2026-01-01 00:01:00 UTC), 4), 4);
    }

    #[test]
    fn an_interval_counts_from_its_anchor() {
        let anchor = datetime!(2026-01-01 00:00:07 UTC);
        let t = Timetable::every("PT10S", anchor).unwrap();
        assert_eq!(t.latest_at_or_before(anchor - Duration::SECOND), None);
        assert_eq!(
            t.latest_at_or_before(datetime!(2026-01-01 00:00:31 UTC)),
            Some(datetime!(2026-01-01 00:00:27 UTC))
        );
        assert_eq!(
            t.next_after(datetime!(2026-01-01 00:00:27 UTC)),
            Some(datetime!(2026-01-01 00:00:37 UTC))
        );
    }

    #[test]
    fn bad_timetables_name_their_field() {
        for (cron, zone, field) in [
            ("61 * * * *", None, "cron"),
            ("every day", None, "cron"),
            ("0 3 30 2 *", None, "cron"),
            ("0 3 * * *", Some("Mars/Olympus"), "timeZone"),
        ] {
            let e = Timetable::cron(cron, zone).unwrap_err();
            assert_eq!(e.field, field, "{cron} {zone:?}: {}", e.message);
        }
        for every in ["P1M", "PT0S", "15m", ""] {
            let e = Timetable::every(every, OffsetDateTime::now_utc()).unwrap_err();
            assert_eq!(e.field, "every", "{every}: {}", e.message);
        }
    }
}

#[cfg(test)]
mod dst_tests {
    use super::*;
    use time::macros::datetime;

    /// On the night clocks in Berlin go from 02:00 to 03:00 (29 March 2026), 02:30 does not
    /// exist: a 02:30 schedule runs at 03:00 that night (the first moment after the gap), and
    /// at 02:30 again the next night, as docs/schedules.md says.
    #[test]
    fn a_time_the_spring_change_skips_runs_just_after_the_gap() {
        let t = Timetable::cron("30 2 * * *", Some("Europe/Berlin")).unwrap();
        let next = t.next_after(datetime!(2026-03-28 12:00 UTC)).unwrap();
        assert_eq!(next, datetime!(2026-03-29 01:00 UTC), "03:00 CEST");
        let after = t.next_after(next).unwrap();
        assert_eq!(after, datetime!(2026-03-30 00:30 UTC), "02:30 CEST");
    }
}

#[cfg(test)]
mod moment_tests {
    use super::*;
    use time::macros::datetime;

    /// croner carries the sub-second part of the moment it is asked about into the occurrence
    /// it finds; an occurrence must not move with the clock, or one recorded at a tick is due
    /// again at a later tick whose clock has a larger fraction of a second.
    #[test]
    fn a_cron_occurrence_is_a_whole_second_whatever_the_clock() {
        let t = Timetable::cron("0 3 * * *", Some("Europe/Berlin")).unwrap();
        let first = datetime!(2026-07-02 09:00:00.25 UTC);
        let later = datetime!(2026-07-02 09:01:00.75 UTC);
        assert_eq!(
            t.latest_at_or_before(first),
            Some(datetime!(2026-07-02 01:00 UTC))
        );
        assert_eq!(t.latest_at_or_before(first), t.latest_at_or_before(later));
        assert_eq!(t.next_after(first), Some(datetime!(2026-07-03 01:00 UTC)));
        let s = Timetable::cron("*/5 * * * * *", None).unwrap();
        assert_eq!(
            s.latest_at_or_before(datetime!(2026-01-01 00:00:05.5 UTC)),
            Some(datetime!(2026-01-01 00:00:05 UTC))
        );
        assert_eq!(
            s.next_after(datetime!(2026-01-01 00:00:05.5 UTC)),
            Some(datetime!(2026-01-01 00:00:10 UTC))
        );
        assert_eq!(
            s.next_after(datetime!(2026-01-01 00:00:04.5 UTC)),
            Some(datetime!(2026-01-01 00:00:05 UTC))
        );
    }

    /// An interval so long that its occurrences pass the last moment `time` knows (year 9999)
    /// is refused naming `every`, and the arithmetic never panics on one stored before.
    #[test]
    fn an_interval_past_the_calendar_is_refused_and_never_panics() {
        let now = datetime!(2026-01-01 00:00 UTC);
        for every in ["P3650000D", "P99999999999D"] {
            let e = Timetable::every(every, now).unwrap_err();
            assert_eq!(e.field, "every", "{every}: {}", e.message);
        }
        let t = Timetable::every("P36500D", now).unwrap();
        assert_eq!(t.upcoming(now, 5).len(), 5, "100 years is fine");
        let stored = Timetable::Every {
            text: "P3650000D".into(),
            seconds: 3_650_000 * 86_400,
            anchor: now,
        };
        assert_eq!(stored.next_after(now), None);
        assert!(stored.upcoming(now, 5).is_empty());
        assert_eq!(stored.latest_at_or_before(now), Some(now));
    }
}
