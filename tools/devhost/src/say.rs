//! devhost's output lines, each stamped with the time (UTC, to the millisecond) as the
//! Functions host stamps its own, so that they can be read next to the handler's.

/// The time now, as `2026-11-24T10:36:52.123Z`.
pub fn stamp() -> String {
    let now = time::OffsetDateTime::now_utc();
    let format = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    now.format(&format).unwrap_or_default()
}

/// A line on stdout (what the host logs at Information), stamped.
macro_rules! say {
    ($($arg:tt)*) => {
        println!("{} {}", $crate::say::stamp(), format_args!($($arg)*))
    };
}

/// A line on stderr (what the host logs as an error or warning), stamped.
macro_rules! say_err {
    ($($arg:tt)*) => {
        eprintln!("{} {}", $crate::say::stamp(), format_args!($($arg)*))
    };
}

pub(crate) use {say, say_err};

#[cfg(test)]
mod tests {
    #[test]
    fn a_stamp_is_utc_to_the_millisecond() {
        let stamp = super::stamp();
        assert_eq!(stamp.len(), "2026-11-24T10:36:52.123Z".len(), "{stamp}");
        assert!(
            stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T',
            "{stamp}"
        );
    }
}
