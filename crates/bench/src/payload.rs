//! Telemetry payloads after ThingsBoard's performance-tests device profiles: smart meters, smart
//! trackers and industrial PLCs, written as ThingsBoard's `{"ts":..,"values":{..}}` JSON.
//!
//! The generator sits on the load generator's hot path (one message per PUBLISH), so it writes straight
//! into the caller's buffer: numbers are formatted by hand from integers (decimals as fixed point), and
//! randomness comes from a SplitMix64 stream seeded per device, so a run is reproducible and costs no
//! allocation per message.

use crate::scenario::Profile;

/// The `batteryLevel` of an alarm message; the alarm rule fires at `batteryLevel <= 20`.
pub const ALARM_BATTERY_LEVEL: u64 = 10;
/// Normal messages keep `batteryLevel` in this range, well above the alarm threshold.
const BATTERY_MIN: u64 = 30;
const BATTERY_MAX: u64 = 100;

/// Where trackers start (Kyiv, as in ThingsBoard's examples), in micro-degrees.
const LATITUDE_BASE_MICRO: i64 = 50_450_000;
const LONGITUDE_BASE_MICRO: i64 = 30_523_000;
/// Trackers wander at most this far from the base, so coordinates stay valid whatever the run length.
const WANDER_MICRO: i64 = 500_000;
/// Largest step a tracker moves per message.
const STEP_MICRO: i64 = 200;

/// Generates one device's messages. Cheap to create: one per device.
#[derive(Debug, Clone)]
pub struct PayloadGen {
    profile: Profile,
    plc_values: u32,
    rng: SplitMix64,
    /// Smart meter: grows with every message, as a real pulse counter does.
    pulse_counter: u64,
    /// Smart tracker position, in micro-degrees.
    latitude_micro: i64,
    longitude_micro: i64,
    /// Smart tracker fuel, in hundredths of a litre.
    fuel_centi: i64,
}

impl PayloadGen {
    /// A generator for `profile`; `plc_values` is the number of doubles per industrial-plc message
    /// (ignored by the other profiles). The same seed gives the same messages.
    pub fn new(profile: Profile, plc_values: u32, seed: u64) -> PayloadGen {
        let mut rng = SplitMix64(seed);
        let pulse_counter = rng.below(1_000_000);
        let latitude_micro = LATITUDE_BASE_MICRO + rng.signed(WANDER_MICRO / 5);
        let longitude_micro = LONGITUDE_BASE_MICRO + rng.signed(WANDER_MICRO / 5);
        let fuel_centi = 2_000 + rng.below(8_000) as i64;
        PayloadGen {
            profile,
            plc_values,
            rng,
            pulse_counter,
            latitude_micro,
            longitude_micro,
            fuel_centi,
        }
    }

    /// Appends one message `{"ts":<ts_ms>,"values":{...}}` to `out` (does not clear it).
    /// `alarm` makes `batteryLevel` exactly [`ALARM_BATTERY_LEVEL`]; industrial-plc has no battery and
    /// ignores it.
    pub fn write(&mut self, ts_ms: i64, alarm: bool, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"ts\":");
        write_i64(out, ts_ms);
        out.extend_from_slice(b",\"values\":{");
        match self.profile {
            Profile::SmartMeter => self.write_smart_meter(alarm, out),
            Profile::SmartTracker => self.write_smart_tracker(alarm, out),
            Profile::IndustrialPlc => self.write_industrial_plc(out),
        }
        out.extend_from_slice(b"}}");
    }

    /// Appends a JSON array of messages, one per timestamp of `ts_ms_list`, none of them alarms:
    /// how a day of history is loaded in few requests.
    pub fn write_batch(&mut self, ts_ms_list: &[i64], out: &mut Vec<u8>) {
        out.push(b'[');
        for (i, &ts_ms) in ts_ms_list.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            self.write(ts_ms, false, out);
        }
        out.push(b']');
    }

    /// How many time-series points (keys) each message carries.
    pub fn points_per_message(&self) -> u32 {
        match self.profile {
            Profile::SmartMeter => 3,
            Profile::SmartTracker => 5,
            Profile::IndustrialPlc => self.plc_values,
        }
    }

    /// The telemetry keys of every message, in the order they are written.
    pub fn keys(&self) -> Vec<String> {
        match self.profile {
            Profile::SmartMeter => ["pulseCounter", "leakage", "batteryLevel"]
                .map(String::from)
                .to_vec(),
            Profile::SmartTracker => ["latitude", "longitude", "speed", "fuel", "batteryLevel"]
                .map(String::from)
                .to_vec(),
            Profile::IndustrialPlc => (1..=self.plc_values).map(|i| format!("value{i}")).collect(),
        }
    }

    fn write_smart_meter(&mut self, alarm: bool, out: &mut Vec<u8>) {
        self.pulse_counter += 1 + self.rng.below(10);
        out.extend_from_slice(b"\"pulseCounter\":");
        write_u64(out, self.pulse_counter);
        // A leak is rare: about one message in a hundred.
        let leakage = self.rng.below(100) == 0;
        out.extend_from_slice(if leakage {
            b",\"leakage\":true"
        } else {
            b",\"leakage\":false"
        });
        self.write_battery(alarm, out);
    }

    fn write_smart_tracker(&mut self, alarm: bool, out: &mut Vec<u8>) {
        self.latitude_micro = wander(&mut self.rng, self.latitude_micro, LATITUDE_BASE_MICRO);
        self.longitude_micro = wander(&mut self.rng, self.longitude_micro, LONGITUDE_BASE_MICRO);
        // Trackers burn fuel slowly and refill when nearly empty.
        self.fuel_centi -= self.rng.below(5) as i64;
        if self.fuel_centi < 500 {
            self.fuel_centi = 10_000;
        }
        let speed_deci = self.rng.below(1_201) as i64;

        // ThingsBoard's tracker profile sends the coordinates and speed as strings.
        out.extend_from_slice(b"\"latitude\":\"");
        write_fixed(out, self.latitude_micro, 6);
        out.extend_from_slice(b"\",\"longitude\":\"");
        write_fixed(out, self.longitude_micro, 6);
        out.extend_from_slice(b"\",\"speed\":\"");
        write_fixed(out, speed_deci, 1);
        out.extend_from_slice(b"\",\"fuel\":");
        write_fixed(out, self.fuel_centi, 2);
        self.write_battery(alarm, out);
    }

    fn write_industrial_plc(&mut self, out: &mut Vec<u8>) {
        for i in 1..=self.plc_values {
            if i > 1 {
                out.push(b',');
            }
            out.extend_from_slice(b"\"value");
            write_u64(out, u64::from(i));
            out.extend_from_slice(b"\":");
            write_fixed(out, self.rng.below(1_000_000) as i64, 3);
        }
    }

    fn write_battery(&mut self, alarm: bool, out: &mut Vec<u8>) {
        let level = if alarm {
            ALARM_BATTERY_LEVEL
        } else {
            BATTERY_MIN + self.rng.below(BATTERY_MAX - BATTERY_MIN + 1)
        };
        out.extend_from_slice(b",\"batteryLevel\":");
        write_u64(out, level);
    }
}

/// One random-walk step of a coordinate, kept within [`WANDER_MICRO`] of `base`.
fn wander(rng: &mut SplitMix64, value: i64, base: i64) -> i64 {
    (value + rng.signed(STEP_MICRO)).clamp(base - WANDER_MICRO, base + WANDER_MICRO)
}

/// SplitMix64 (Steele, Lea, Flood 2014): one add and three multiply-xorshifts per number, good enough
/// statistics for synthetic telemetry, and any seed (0 included) works.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`); the modulo bias is far below what telemetry cares about.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A number in `-max..=max`.
    fn signed(&mut self, max: i64) -> i64 {
        self.below(2 * max as u64 + 1) as i64 - max
    }
}

/// Appends the decimal digits of `value`.
fn write_u64(out: &mut Vec<u8>, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[start..]);
}

fn write_i64(out: &mut Vec<u8>, value: i64) {
    if value < 0 {
        out.push(b'-');
    }
    write_u64(out, value.unsigned_abs());
}

/// Appends `scaled / 10^decimals` with exactly `decimals` fraction digits. The decimal point is always
/// there, so ThingsBoard (and Fleetwire) type the value as a double even when the fraction is zero.
fn write_fixed(out: &mut Vec<u8>, scaled: i64, decimals: u32) {
    let scale = 10u64.pow(decimals);
    if scaled < 0 {
        out.push(b'-');
    }
    let magnitude = scaled.unsigned_abs();
    write_u64(out, magnitude / scale);
    out.push(b'.');
    let fraction = magnitude % scale;
    // Leading zeros of the fraction: 5 thousandths is ".005", not ".5".
    let mut pad = scale / 10;
    while pad > 1 && fraction < pad {
        out.push(b'0');
        pad /= 10;
    }
    write_u64(out, fraction);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn message(generator: &mut PayloadGen, ts_ms: i64, alarm: bool) -> Value {
        let mut out = Vec::new();
        generator.write(ts_ms, alarm, &mut out);
        serde_json::from_slice(&out).unwrap()
    }

    fn value_keys(message: &Value) -> Vec<String> {
        message["values"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    }

    #[test]
    fn fixed_point_numbers_keep_their_zeros() {
        let cases: [(i64, u32, &str); 7] = [
            (0, 3, "0.000"),
            (5, 3, "0.005"),
            (1_050, 2, "10.50"),
            (-1_234_567, 6, "-1.234567"),
            (50_450_123, 6, "50.450123"),
            (1_000_000, 6, "1.000000"),
            (7, 1, "0.7"),
        ];
        for (scaled, decimals, text) in cases {
            let mut out = Vec::new();
            write_fixed(&mut out, scaled, decimals);
            assert_eq!(String::from_utf8(out).unwrap(), text);
        }
        let mut out = Vec::new();
        write_i64(&mut out, i64::MIN);
        write_u64(&mut out, u64::MAX);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("{}{}", i64::MIN, u64::MAX)
        );
    }

    #[test]
    fn smart_meter_messages_have_the_profile_types() {
        let mut generator = PayloadGen::new(Profile::SmartMeter, 0, 7);
        assert_eq!(generator.points_per_message(), 3);
        let mut previous_counter = 0;
        for i in 0..1_000 {
            let m = message(&mut generator, 1_700_000_000_000 + i, false);
            assert_eq!(m["ts"].as_i64(), Some(1_700_000_000_000 + i));
            let mut keys = value_keys(&m);
            keys.sort();
            let mut expected = generator.keys();
            expected.sort();
            assert_eq!(keys, expected);
            let values = &m["values"];
            let counter = values["pulseCounter"].as_u64().unwrap();
            assert!(counter > previous_counter, "pulseCounter must increase");
            previous_counter = counter;
            assert!(values["leakage"].is_boolean());
            let battery = values["batteryLevel"].as_u64().unwrap();
            assert!(
                (30..=100).contains(&battery),
                "battery {battery} would trigger or miss the rule"
            );
        }
        let alarm = message(&mut generator, 1, true);
        assert_eq!(alarm["values"]["batteryLevel"].as_u64(), Some(10));
    }

    #[test]
    fn smart_tracker_sends_coordinates_as_decimal_strings() {
        let mut generator = PayloadGen::new(Profile::SmartTracker, 0, 42);
        assert_eq!(generator.points_per_message(), 5);
        for _ in 0..1_000 {
            let m = message(&mut generator, 5, false);
            let values = &m["values"];
            assert_eq!(value_keys(&m).len(), 5);
            for key in ["latitude", "longitude", "speed"] {
                let text = values[key]
                    .as_str()
                    .unwrap_or_else(|| panic!("{key} not a string"));
                assert!(text.contains('.'), "{key} = {text}");
                let number: f64 = text.parse().unwrap();
                assert!(number.is_finite() && number >= 0.0);
            }
            let latitude: f64 = values["latitude"].as_str().unwrap().parse().unwrap();
            assert!((49.9..=51.0).contains(&latitude), "latitude {latitude}");
            assert!(values["fuel"].is_f64(), "fuel must be a double");
            let battery = values["batteryLevel"].as_u64().unwrap();
            assert!(battery > 20);
        }
        let alarm = message(&mut generator, 5, true);
        assert_eq!(alarm["values"]["batteryLevel"].as_u64(), Some(10));
    }

    #[test]
    fn industrial_plc_sends_n_doubles_and_ignores_alarms() {
        let mut generator = PayloadGen::new(Profile::IndustrialPlc, 12, 1);
        assert_eq!(generator.points_per_message(), 12);
        assert_eq!(generator.keys()[11], "value12");
        let m = message(&mut generator, -3, true);
        assert_eq!(m["ts"].as_i64(), Some(-3));
        let values = m["values"].as_object().unwrap();
        assert_eq!(values.len(), 12);
        for key in generator.keys() {
            assert!(values[&key].is_f64(), "{key} must be a double");
        }
        assert!(!values.contains_key("batteryLevel"));
    }

    #[test]
    fn same_seed_same_messages_and_write_appends() {
        let mut a = PayloadGen::new(Profile::SmartTracker, 0, 99);
        let mut b = PayloadGen::new(Profile::SmartTracker, 0, 99);
        let mut c = PayloadGen::new(Profile::SmartTracker, 0, 100);
        let (mut out_a, mut out_b, mut out_c) =
            (b"prefix".to_vec(), b"prefix".to_vec(), Vec::new());
        for ts in 0..10 {
            a.write(ts, false, &mut out_a);
            b.write(ts, false, &mut out_b);
            c.write(ts, false, &mut out_c);
        }
        assert_eq!(out_a, out_b);
        assert!(out_a.starts_with(b"prefix{\"ts\":0,"));
        assert_ne!(out_a[6..], out_c[..]);
    }

    #[test]
    fn batches_are_arrays_of_messages() {
        let mut generator = PayloadGen::new(Profile::SmartMeter, 0, 3);
        let mut out = Vec::new();
        generator.write_batch(&[10, 20, 30], &mut out);
        let batch: Value = serde_json::from_slice(&out).unwrap();
        let messages = batch.as_array().unwrap();
        let ts: Vec<i64> = messages.iter().map(|m| m["ts"].as_i64().unwrap()).collect();
        assert_eq!(ts, [10, 20, 30]);
        assert!(messages
            .iter()
            .all(|m| m["values"]["batteryLevel"].as_u64().unwrap() >= 30));

        let mut empty = Vec::new();
        generator.write_batch(&[], &mut empty);
        assert_eq!(empty, b"[]");
    }
}
