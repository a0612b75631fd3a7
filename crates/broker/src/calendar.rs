//! Calendar dates and the times written with them: days since the epoch of a Gregorian date and
//! back (Howard Hinnant's algorithms), and RFC 3339 times read as epoch milliseconds (the
//! `x-delay-until` header, semantics §3). Used by the SQS endpoint's signatures too.

/// Days since 1970-01-01 of a proleptic Gregorian date.
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The Gregorian date (year, month, day) `days` after 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (year_of_era + era * 400 + i64::from(month <= 2), month, day)
}

/// An RFC 3339 time (`2026-12-02T05:00:00Z`, `2026-12-02T06:00:00.250+01:00`; `t`, `z` and a
/// space for `T` accepted) as milliseconds since the epoch (fractions past milliseconds cut);
/// `None` if it is not one, or lies before 1970.
pub fn rfc3339_epoch_ms(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(range)?;
        part.iter().all(u8::is_ascii_digit).then(|| std::str::from_utf8(part).ok()?.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let (hour, minute, second) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    let month_days = [31, if is_leap(year) { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !(1..=12).contains(&month) || day < 1 || day > month_days[(month - 1) as usize] {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut at = 19;
    let mut millis = 0;
    if b[at] == b'.' {
        let start = at + 1;
        at = start;
        while at < b.len() && b[at].is_ascii_digit() {
            at += 1;
        }
        if at == start {
            return None;
        }
        let fraction = &text[start..at.min(start + 3)];
        millis = fraction.parse::<i64>().ok()? * 10_i64.pow(3 - fraction.len() as u32);
    }
    let offset_minutes = match b.get(at..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let hours = digits(at + 1..at + 3)?;
            let minutes = digits(at + 4..at + 6)?;
            if hours > 23 || minutes > 59 {
                return None;
            }
            let total = hours * 60 + minutes;
            if *sign == b'+' {
                total
            } else {
                -total
            }
        }
        _ => return None,
    };
    let seconds =
        days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset_minutes * 60;
    u64::try_from(seconds * 1000 + millis).ok()
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip_through_days() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        for days in [-1, 0, 59, 11_016, 20_424, 100_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn rfc3339_times_read_as_epoch_milliseconds() {
        assert_eq!(rfc3339_epoch_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(rfc3339_epoch_ms("2026-12-02T05:00:00Z"), Some(1_796_187_600_000));
        assert_eq!(rfc3339_epoch_ms("2026-12-02T06:00:00.250+01:00"), Some(1_796_187_600_250));
        assert_eq!(rfc3339_epoch_ms("2026-12-02t04:30:00.1234567-00:30"), Some(1_796_187_600_123));
        assert_eq!(rfc3339_epoch_ms("2026-12-02 05:00:00z"), Some(1_796_187_600_000));
        assert_eq!(rfc3339_epoch_ms("2024-02-29T00:00:00Z"), Some(1_709_164_800_000));
    }

    #[test]
    fn anything_else_is_not_a_time() {
        for text in [
            "",
            "2026-12-02",
            "2026-12-02T05:00:00",
            "2026-12-02T05:00:00+0100",
            "2026-13-02T05:00:00Z",
            "2025-02-29T05:00:00Z",
            "2026-12-02T24:00:00Z",
            "2026-12-02T05:00:00.Z",
            "2026-12-02T05:00:00Zjunk",
            "+026-12-02T05:00:00Z",
            "1969-12-31T23:59:59Z",
            "soon",
        ] {
            assert_eq!(rfc3339_epoch_ms(text), None, "{text}");
        }
    }
}
