//! Where a range's rest may be cut: the characters a step has seen past a prefix in the keys of
//! the last page it read, and the cut points drawn from them.

/// Characters at which a range may be cut into pieces: digits and ASCII letters, the usual
/// material of keys. Pieces that turn out empty cost one query each.
pub const CUT_POINTS: &str = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The kinds of character a step has seen at one position of the keys of the last page it
/// read: where the rest of a range is cut, the cut points are drawn from these kinds. Keys often
/// keep to one kind at a position (upper-case names, lower-case words, numbers), and cuts spread
/// over every digit and letter then put most of a table into a few pieces and leave others
/// empty: the benchmark's NuGet-like table (upper-case package ids and some lower-case ones)
/// cut at `O`, `b` and `n` gave pieces of 45,961, 33,822, 4,631 and no rows; cut among the
/// upper-case letters, 22,500, 23,461, 19,025 and 19,428 (pinned by a test in `scan::step`).
/// Rows of a kind not seen still fall into some piece: the pieces cover the range whatever the
/// cut points.
///
/// Keys written in hexadecimal (hashes, GUIDs) are a kind of their own: every character past
/// the prefix a digit or a letter `a` to `f` (or `A` to `F`; dashes allowed), in a page of at
/// least [`HEX_SEEN_IN`] keys, a digit and a letter among them. Cut among every digit and
/// lower-case letter, most pieces of such a range held nothing: the cut points past `f` lie
/// where no key is (devhost's pacing tests, whose PartitionKeys are eight hexadecimal digits:
/// a step's rest handed on as six items, four of them empty, the rows in the other two, read
/// page after page at a small scan's tail).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CutKinds {
    digits: bool,
    upper: bool,
    lower: bool,
    /// A character that is none of those: no narrowing.
    other: bool,
    /// The keys past the prefix are hexadecimal, in lower case or upper case.
    hex: Option<HexCase>,
}

/// The case of keys written in hexadecimal (see [`CutKinds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HexCase {
    Lower,
    Upper,
}

impl CutKinds {
    /// The kinds of the character that follows `prefix` in each of `keys` (keys that do not
    /// extend `prefix` are left out), and whether all of them are hexadecimal past it.
    pub fn after_prefix<'a>(prefix: &str, keys: impl IntoIterator<Item = &'a str>) -> Self {
        let mut kinds = CutKinds::default();
        let mut hex = HexSeen::default();
        for key in keys {
            let Some(rest) = key.strip_prefix(prefix) else {
                continue;
            };
            if let Some(c) = rest.chars().next() {
                match c {
                    '0'..='9' => kinds.digits = true,
                    'A'..='Z' => kinds.upper = true,
                    'a'..='z' => kinds.lower = true,
                    _ => kinds.other = true,
                }
            }
            hex.see(rest);
        }
        kinds.hex = hex.case();
        kinds
    }

    /// The cut points to choose among: the hexadecimal digits for hexadecimal keys, else
    /// [`CUT_POINTS`] of the kinds seen, or all of them when nothing was seen or something
    /// other than a digit or a letter was.
    pub fn candidates(self) -> impl Iterator<Item = char> {
        let narrow = !self.other && (self.digits || self.upper || self.lower);
        CUT_POINTS.chars().filter(move |c| match self.hex {
            Some(HexCase::Lower) => c.is_ascii_digit() || ('a'..='f').contains(c),
            Some(HexCase::Upper) => c.is_ascii_digit() || ('A'..='F').contains(c),
            None => {
                !narrow
                    || (c.is_ascii_digit() && self.digits)
                    || (c.is_ascii_uppercase() && self.upper)
                    || (c.is_ascii_lowercase() && self.lower)
            }
        })
    }
}

/// What the characters past a prefix showed of hexadecimal keys (see [`CutKinds`]).
#[derive(Debug, Clone, Copy)]
struct HexSeen {
    /// Keys seen.
    keys: usize,
    /// Every character seen is a digit, a dash or a letter `a` to `f`; likewise `A` to `F`.
    fits_lower: bool,
    fits_upper: bool,
    /// A digit was seen.
    digit: bool,
    /// A letter `a` to `f` was seen past the first character of a key; likewise `A` to `F`.
    lower_letter: bool,
    upper_letter: bool,
}

/// The fewest keys that show hexadecimal ones: a page of a few keys shows little.
const HEX_SEEN_IN: usize = 8;

impl Default for HexSeen {
    fn default() -> Self {
        HexSeen {
            keys: 0,
            fits_lower: true,
            fits_upper: true,
            digit: false,
            lower_letter: false,
            upper_letter: false,
        }
    }
}

impl HexSeen {
    fn see(&mut self, rest: &str) {
        self.keys += 1;
        for (i, c) in rest.chars().enumerate() {
            match c {
                '0'..='9' => self.digit = true,
                '-' => {}
                'a'..='f' => {
                    self.lower_letter |= i > 0;
                    self.fits_upper = false;
                }
                'A'..='F' => {
                    self.upper_letter |= i > 0;
                    self.fits_lower = false;
                }
                _ => {
                    self.fits_lower = false;
                    self.fits_upper = false;
                }
            }
        }
    }

    /// The case of the hexadecimal keys seen, if they were: at least [`HEX_SEEN_IN`] keys, with
    /// a digit and a letter past a key's first character among them (digits alone are numbers,
    /// letters alone words like `cafe`, a letter first and digits after codes like `A0001`).
    fn case(self) -> Option<HexCase> {
        if self.keys < HEX_SEEN_IN || !self.digit {
            None
        } else if self.fits_lower && self.lower_letter {
            Some(HexCase::Lower)
        } else if self.fits_upper && self.upper_letter {
            Some(HexCase::Upper)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_points_come_from_the_kinds_of_character_seen_after_the_prefix() {
        let kinds = |prefix: &str, keys: &[&str]| {
            CutKinds::after_prefix(prefix, keys.iter().copied())
                .candidates()
                .collect::<String>()
        };
        assert_eq!(
            kinds("", &["AWSSDK.Core", "Akka", "Bjson"]),
            "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        );
        assert_eq!(
            kinds("p/", &["p/07", "p/3g", "p/a9"]),
            "0123456789abcdefghijklmnopqrstuvwxyz"
        );
        // Hexadecimal keys (hashes, GUIDs), eight or more: the sixteen digits of their case,
        // whatever the first character past the prefix showed.
        let hashes = [
            "p/07", "p/3f", "p/19", "p/22", "p/4e", "p/51", "p/60", "p/78",
        ];
        assert_eq!(kinds("p/", &hashes), "0123456789abcdef");
        assert_eq!(kinds("p/", &hashes[..7]), "0123456789");
        let guids: Vec<String> = (0..8).map(|i| format!("{i}F2504E0-4F89-11D3")).collect();
        let guids: Vec<&str> = guids.iter().map(String::as_str).collect();
        assert_eq!(kinds("", &guids), "0123456789ABCDEF");
        // Not hexadecimal: words that keep to a-f (no digit), codes of a letter and digits (no
        // letter past the first character), mixed case, a letter past f.
        let words = [
            "cafe", "dead", "beef", "face", "fade", "bead", "deaf", "abed",
        ];
        assert_eq!(kinds("", &words), "abcdefghijklmnopqrstuvwxyz");
        let codes = [
            "A0001", "A0002", "B0003", "B1004", "C2005", "C3006", "D4007", "F5008",
        ];
        assert_eq!(kinds("", &codes), "ABCDEFGHIJKLMNOPQRSTUVWXYZ");
        let mixed = ["1aB", "2c1", "3e", "4f", "5a", "6b", "7c", "8d"];
        assert_eq!(kinds("", &mixed), "0123456789");
        let past_f = ["1ag", "2c1", "3e", "4f", "5a", "6b", "7c", "8d"];
        assert_eq!(kinds("", &past_f), "0123456789");
        assert_eq!(kinds("", &["12", "9"]), "0123456789");
        // Anything but a digit or a letter, nothing seen, or only the prefix itself: no narrowing.
        assert_eq!(kinds("", &["Abc", "_x"]), CUT_POINTS);
        assert_eq!(kinds("", &[]), CUT_POINTS);
        assert_eq!(kinds("p", &["p"]), CUT_POINTS);
        // Keys that do not extend the prefix say nothing about it.
        assert_eq!(kinds("p", &["q_", "pZ"]), "ABCDEFGHIJKLMNOPQRSTUVWXYZ");
    }
}
