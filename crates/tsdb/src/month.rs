//! Calendar months (UTC) as partition ids: chunks are stored in one fjall keyspace per month so
//! that retention drops a whole keyspace instead of deleting keys one by one.
//!
//! A month id is `year * 12 + (month - 1)`, so ids are consecutive and ordered like time.
//!
//! Only the months of 2000-2099 get a keyspace each. Everything before 2000-01-01 shares the keyspace
//! of December 1999 and everything from 2100-01-01 on shares that of January 2100: timestamps come from
//! devices, and one sending random timestamps must not create a keyspace (a directory, files, a memtable)
//! per distinct month it names. So at most 1,202 chunk keyspaces exist, whatever the input.

const MS_PER_DAY: i64 = 86_400_000;

/// The first month with a keyspace of its own (2000-01); earlier months share the one before it.
const FIRST_MONTH: i64 = 2000 * 12;
/// The last month id (2100-01): it holds everything from its start on.
const LAST_MONTH: i64 = 2100 * 12;

/// The calendar month holding epoch-millisecond `ts`.
fn calendar_month(ts_ms: i64) -> i64 {
    let (year, month, _) = civil_from_days(ts_ms.div_euclid(MS_PER_DAY));
    year * 12 + (month - 1)
}

/// The month (keyspace) holding epoch-millisecond `ts`, with far-away months folded as described above.
pub(crate) fn month_of(ts_ms: i64) -> i64 {
    calendar_month(ts_ms).clamp(FIRST_MONTH - 1, LAST_MONTH)
}

/// The first millisecond of `month`, clamped to the i64 range.
#[cfg(test)]
pub(crate) fn month_start_ms(month: i64) -> i64 {
    let year = month.div_euclid(12);
    let m = month.rem_euclid(12) + 1;
    let ms = i128::from(days_from_civil(year, m)) * i128::from(MS_PER_DAY);
    ms.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// The first millisecond after `month`, or `None` when that is past `i64::MAX` (so every ts
/// from the month's start on belongs to it).
pub(crate) fn next_month_start_ms(month: i64) -> Option<i64> {
    if month >= LAST_MONTH {
        return None;
    }
    let year = (month + 1).div_euclid(12);
    let m = (month + 1).rem_euclid(12) + 1;
    let ms = i128::from(days_from_civil(year, m)) * i128::from(MS_PER_DAY);
    i64::try_from(ms).ok()
}

/// The keyspace name of a month: `chunks_2024_01`.
pub(crate) fn keyspace_name(month: i64) -> String {
    format!(
        "chunks_{}_{:02}",
        month.div_euclid(12),
        month.rem_euclid(12) + 1
    )
}

/// Inverse of [`keyspace_name`]; `None` for other keyspaces.
pub(crate) fn parse_keyspace_name(name: &str) -> Option<i64> {
    let rest = name.strip_prefix("chunks_")?;
    let (year, month) = rest.rsplit_once('_')?;
    let year: i64 = year.parse().ok()?;
    let month: i64 = month.parse().ok()?;
    if !(1..=12).contains(&month) {
        return None;
    }
    year.checked_mul(12)?.checked_add(month - 1)
}

/// Days since 1970-01-01 of the first day of `month` in `year` (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5; // day 1 of the month
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month, day) of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(calendar_month(0), 1970 * 12);
        assert_eq!(calendar_month(-1), 1969 * 12 + 11);
        // 2024-02-29T23:59:59.999Z and 2024-03-01T00:00:00Z
        assert_eq!(month_of(1_709_251_199_999), 2024 * 12 + 1);
        assert_eq!(month_of(1_709_251_200_000), 2024 * 12 + 2);
        assert_eq!(month_start_ms(2024 * 12 + 2), 1_709_251_200_000);
        assert_eq!(keyspace_name(2024 * 12 + 2), "chunks_2024_03");
        assert_eq!(next_month_start_ms(2024 * 12 + 1), Some(1_709_251_200_000));
        assert_eq!(next_month_start_ms(month_of(i64::MAX)), None);
    }

    #[test]
    fn far_away_months_share_two_keyspaces() {
        let y2000 = month_start_ms(FIRST_MONTH);
        let y2100 = month_start_ms(LAST_MONTH);
        for ts in [i64::MIN, -1, 0, y2000 - 1] {
            assert_eq!(month_of(ts), FIRST_MONTH - 1, "{ts}");
        }
        assert_eq!(keyspace_name(FIRST_MONTH - 1), "chunks_1999_12");
        assert_eq!(next_month_start_ms(FIRST_MONTH - 1), Some(y2000));
        assert_eq!(month_of(y2000), FIRST_MONTH);
        for ts in [y2100, y2100 + 1, i64::MAX] {
            assert_eq!(month_of(ts), LAST_MONTH, "{ts}");
        }
        assert_eq!(month_of(y2100 - 1), LAST_MONTH - 1);
        assert_eq!(next_month_start_ms(LAST_MONTH), None);
    }

    #[test]
    fn month_boundaries_are_consistent() {
        for month in [FIRST_MONTH, FIRST_MONTH + 1, 24_013, 24_290, LAST_MONTH - 1] {
            let start = month_start_ms(month);
            assert_eq!(month_of(start), month, "start of {month}");
            assert_eq!(month_of(start - 1), month - 1, "before {month}");
            assert_eq!(next_month_start_ms(month), Some(month_start_ms(month + 1)));
            assert_eq!(parse_keyspace_name(&keyspace_name(month)), Some(month));
        }
    }

    #[test]
    fn extreme_timestamps_do_not_overflow() {
        for ts in [i64::MIN, i64::MAX] {
            let m = month_of(ts);
            assert!(next_month_start_ms(m).is_none_or(|next| next > ts));
        }
        assert_eq!(parse_keyspace_name("series"), None);
        assert_eq!(parse_keyspace_name("chunks_2024_13"), None);
    }
}
