//! When a rule is active (`schedule`, reference section 5.1): ANY_TIME, SPECIFIC_TIME (days of week
//! and one window per day) and CUSTOM (a window per day of week), in a time zone, optionally replaced
//! at evaluation time by a JSON attribute named by the schedule's `dynamicValue`.

use jiff::tz::{Offset, TimeZone};
use jiff::Timestamp;
use serde_json::{Map, Value as Json};

use fleetwire_model::Value;

use crate::error::RuleError;
use crate::json::{self, invalid, join};
use crate::predicate::{DynamicValue, Scope};
use crate::profile::KeyTable;

const DAY_MS: i64 = 86_400_000;

/// A rule's schedule with its optional dynamic replacement.
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    kind: ScheduleKind,
    /// Resolved at evaluation time; a JSON attribute value that parses as the same schedule type
    /// replaces the static one (ThingsBoard's `getSchedule`), anything else is ignored.
    dynamic: Option<DynamicValue>,
}

#[derive(Debug, Clone)]
enum ScheduleKind {
    AnyTime,
    Specific(SpecificTime),
    Custom(CustomTime),
}

#[derive(Debug, Clone)]
struct SpecificTime {
    /// `None` when the zone name is unknown: the rule is then never active (ThingsBoard throws).
    zone: Option<TimeZone>,
    /// Distinct days, 1 = Monday … 7 = Sunday; all seven (in any order) means every day.
    days: Vec<i64>,
    starts_on_ms: i64,
    ends_on_ms: i64,
}

#[derive(Debug, Clone)]
struct CustomTime {
    zone: Option<TimeZone>,
    items: Vec<CustomItem>,
}

#[derive(Debug, Clone)]
struct CustomItem {
    enabled: bool,
    day_of_week: i64,
    starts_on_ms: i64,
    ends_on_ms: i64,
}

impl Schedule {
    pub(crate) const ANY_TIME: Schedule = Schedule {
        kind: ScheduleKind::AnyTime,
        dynamic: None,
    };

    /// Parses `schedule`; null means ANY_TIME.
    pub(crate) fn parse(
        json: Option<&Json>,
        path: &str,
        keys: &mut KeyTable,
    ) -> Result<Schedule, RuleError> {
        let Some(json) = json.filter(|j| !j.is_null()) else {
            return Ok(Schedule::ANY_TIME);
        };
        let obj = json::object(json, path)?;
        let kind = match json::required_str(obj, "type", path)? {
            "ANY_TIME" => ScheduleKind::AnyTime,
            "SPECIFIC_TIME" => ScheduleKind::Specific(parse_specific(obj, path)?),
            "CUSTOM" => ScheduleKind::Custom(parse_custom(obj, path)?),
            other => {
                return Err(invalid(
                    &join(path, "type"),
                    format!(
                    "unknown schedule type {other:?}; expected ANY_TIME, SPECIFIC_TIME or CUSTOM"
                ),
                ))
            }
        };
        let dynamic = match kind {
            ScheduleKind::AnyTime => None,
            _ => DynamicValue::parse(
                json::field(obj, "dynamicValue"),
                &join(path, "dynamicValue"),
                keys,
                None,
            )?,
        };
        Ok(Schedule { kind, dynamic })
    }

    /// Whether the rule is active at `ts` (epoch ms), as ThingsBoard's `AlarmRuleState.isActive`.
    pub(crate) fn is_active(&self, ts: i64, scope: &Scope<'_>) -> bool {
        match &self.kind {
            ScheduleKind::AnyTime => true,
            ScheduleKind::Specific(fixed) => match self.dynamic_json(scope) {
                Some(obj) => match parse_specific(&obj, "dynamicValue") {
                    Ok(dynamic) => dynamic.is_active(ts),
                    Err(_) => fixed.is_active(ts),
                },
                None => fixed.is_active(ts),
            },
            ScheduleKind::Custom(fixed) => match self.dynamic_json(scope) {
                Some(obj) => match parse_custom(&obj, "dynamicValue") {
                    Ok(dynamic) => dynamic.is_active(ts),
                    Err(_) => fixed.is_active(ts),
                },
                None => fixed.is_active(ts),
            },
        }
    }

    /// The dynamic value's JSON object, if it resolves to a JSON attribute (ThingsBoard reads
    /// `getJsonValue()`, which is null for every other type).
    fn dynamic_json(&self, scope: &Scope<'_>) -> Option<Map<String, Json>> {
        let value = self.dynamic.as_ref()?.resolve(scope)?;
        match value.as_ref() {
            Value::Json(text) => match serde_json::from_str::<Json>(text) {
                Ok(Json::Object(obj)) => Some(obj),
                _ => None,
            },
            _ => None,
        }
    }
}

impl SpecificTime {
    fn is_active(&self, ts: i64) -> bool {
        let Some((weekday, ms_of_day)) = local_day(self.zone.as_ref(), ts) else {
            return false;
        };
        if self.days.len() != 7 && !self.days.contains(&weekday) {
            return false;
        }
        in_window(ms_of_day, self.starts_on_ms, self.ends_on_ms)
    }
}

impl CustomTime {
    fn is_active(&self, ts: i64) -> bool {
        let Some((weekday, ms_of_day)) = local_day(self.zone.as_ref(), ts) else {
            return false;
        };
        // The first item for the day decides, enabled or not.
        match self.items.iter().find(|item| item.day_of_week == weekday) {
            Some(item) if item.enabled => in_window(ms_of_day, item.starts_on_ms, item.ends_on_ms),
            _ => false,
        }
    }
}

/// The day of week (1 = Monday) and the milliseconds since local midnight of `ts` in `zone`.
fn local_day(zone: Option<&TimeZone>, ts: i64) -> Option<(i64, i64)> {
    let zoned = Timestamp::from_millisecond(ts)
        .ok()?
        .to_zoned(zone?.clone());
    let weekday = i64::from(zoned.weekday().to_monday_one_offset());
    let start_of_day = zoned.start_of_day().ok()?.timestamp().as_millisecond();
    Some((weekday, ts - start_of_day))
}

/// ThingsBoard's window test, quirks included: `endsOn` 0 means 24 h; a window that wraps midnight
/// (`startsOn > endsOn`) excludes its exact start and local midnight itself.
fn in_window(ms_of_day: i64, starts_on: i64, ends_on: i64) -> bool {
    let ends_on = if ends_on == 0 { DAY_MS } else { ends_on };
    if starts_on <= ends_on {
        starts_on <= ms_of_day && ends_on > ms_of_day
    } else {
        starts_on < ms_of_day || (0 < ms_of_day && ms_of_day < ends_on)
    }
}

fn parse_specific(obj: &Map<String, Json>, path: &str) -> Result<SpecificTime, RuleError> {
    let days_path = join(path, "daysOfWeek");
    let mut days = Vec::new();
    match json::field(obj, "daysOfWeek") {
        None => {}
        Some(Json::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let day =
                    json::opt_i64(Some(item), &format!("{days_path}[{i}]"))?.ok_or_else(|| {
                        invalid(&format!("{days_path}[{i}]"), "expected a day number")
                    })?;
                if !days.contains(&day) {
                    days.push(day);
                }
            }
        }
        Some(other) => {
            return Err(invalid(
                &days_path,
                format!("expected an array, got {}", json::kind(other)),
            ))
        }
    }
    Ok(SpecificTime {
        zone: parse_zone(obj, path)?,
        days,
        starts_on_ms: ms_field(obj, "startsOn", path)?,
        ends_on_ms: ms_field(obj, "endsOn", path)?,
    })
}

fn parse_custom(obj: &Map<String, Json>, path: &str) -> Result<CustomTime, RuleError> {
    let items_path = join(path, "items");
    let mut items = Vec::new();
    match json::field(obj, "items") {
        None => {}
        Some(Json::Array(list)) => {
            for (i, item) in list.iter().enumerate() {
                let item_path = format!("{items_path}[{i}]");
                let item = json::object(item, &item_path)?;
                items.push(CustomItem {
                    enabled: json::opt_bool(item, "enabled", &item_path)?,
                    day_of_week: json::opt_i64(
                        json::field(item, "dayOfWeek"),
                        &join(&item_path, "dayOfWeek"),
                    )?
                    .unwrap_or(0),
                    starts_on_ms: ms_field(item, "startsOn", &item_path)?,
                    ends_on_ms: ms_field(item, "endsOn", &item_path)?,
                });
            }
        }
        Some(other) => {
            return Err(invalid(
                &items_path,
                format!("expected an array, got {}", json::kind(other)),
            ))
        }
    }
    Ok(CustomTime {
        zone: parse_zone(obj, path)?,
        items,
    })
}

fn ms_field(obj: &Map<String, Json>, name: &str, path: &str) -> Result<i64, RuleError> {
    Ok(json::opt_i64(json::field(obj, name), &join(path, name))?.unwrap_or(0))
}

fn parse_zone(obj: &Map<String, Json>, path: &str) -> Result<Option<TimeZone>, RuleError> {
    let name = json::opt_string(obj, "timezone", path)?;
    Ok(zone_by_name(name.as_deref().unwrap_or("")))
}

/// Java's `ZoneId.of` as ThingsBoard calls it: empty means UTC; IANA names from the bundled
/// database; `Z`, `UTC`, `GMT`, `UT` and fixed offsets such as `+02:00`, `-0530`, `UTC+3`, `GMT-08:00`.
pub(crate) fn zone_by_name(name: &str) -> Option<TimeZone> {
    if name.is_empty() || name == "Z" {
        return Some(TimeZone::UTC);
    }
    if let Ok(zone) = TimeZone::get(name) {
        return Some(zone);
    }
    let offset = ["UTC", "GMT", "UT"]
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))
        .unwrap_or(name);
    if offset.is_empty() {
        return Some(TimeZone::UTC);
    }
    parse_offset_seconds(offset)
        .and_then(|seconds| Offset::from_seconds(seconds).ok())
        .map(TimeZone::fixed)
}

/// `+h`, `+hh`, `+hh:mm`, `+hhmm`, `+hh:mm:ss`, `+hhmmss` (and `-`), within ±18 h.
fn parse_offset_seconds(text: &str) -> Option<i32> {
    let (sign, digits) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => return None,
    };
    // ASCII only, so the fixed-width slicing below stays on character boundaries.
    if !digits.bytes().all(|b| b.is_ascii_digit() || b == b':') {
        return None;
    }
    let parts: Vec<&str> = if digits.contains(':') {
        digits.split(':').collect()
    } else if digits.len() <= 2 {
        vec![digits]
    } else if digits.len() == 4 || digits.len() == 6 {
        (0..digits.len())
            .step_by(2)
            .map(|i| &digits[i..i + 2])
            .collect()
    } else {
        return None;
    };
    if parts.is_empty() || parts.len() > 3 || parts.iter().any(|p| p.is_empty() || p.len() > 2) {
        return None;
    }
    let mut fields = [0i32; 3];
    for (slot, part) in fields.iter_mut().zip(&parts) {
        if !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *slot = part.parse().ok()?;
    }
    let [hours, minutes, seconds] = fields;
    if hours > 18 || minutes > 59 || seconds > 59 {
        return None;
    }
    let total = hours * 3600 + minutes * 60 + seconds;
    (total <= 18 * 3600).then_some(sign * total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_resolve_like_java_zone_id() {
        assert!(zone_by_name("Europe/Kiev").is_some());
        assert!(zone_by_name("America/Los_Angeles").is_some());
        assert!(zone_by_name("").is_some());
        assert!(zone_by_name("Mars/Olympus").is_none());
        let plus2 = zone_by_name("+02:00").map(|z| z.to_offset(Timestamp::UNIX_EPOCH));
        assert_eq!(plus2, Offset::from_seconds(7200).ok());
        let utc_minus = zone_by_name("UTC-0530").map(|z| z.to_offset(Timestamp::UNIX_EPOCH));
        assert_eq!(utc_minus, Offset::from_seconds(-(5 * 3600 + 30 * 60)).ok());
        assert!(zone_by_name("+19:00").is_none());
        assert!(zone_by_name("+é12").is_none());
        assert!(zone_by_name("GMT+3").is_some());
    }

    #[test]
    fn windows_follow_thingsboard_quirks() {
        // endsOn 0 is the end of the day.
        assert!(in_window(DAY_MS - 1, 0, 0));
        assert!(in_window(0, 0, 0));
        // A plain window is [start, end).
        assert!(in_window(1000, 1000, 2000));
        assert!(!in_window(2000, 1000, 2000));
        // A window over midnight excludes its start and midnight itself.
        assert!(!in_window(80_000_000, 80_000_000, 3_600_000));
        assert!(in_window(80_000_001, 80_000_000, 3_600_000));
        assert!(!in_window(0, 80_000_000, 3_600_000));
        assert!(in_window(1, 80_000_000, 3_600_000));
        assert!(!in_window(3_600_000, 80_000_000, 3_600_000));
    }
}
