//! Acceptance check of the chunk format's density on smart-meter-like data.

use fleetwire_model::Value;
use fleetwire_tsdb::{Source, Tsdb, TsdbConfig};

const POINTS_PER_SERIES: i64 = 100_000;

fn bytes_per_point(chunk_points_max: usize) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let db = Tsdb::open(
        dir.path(),
        TsdbConfig {
            chunk_points_max,
            ..TsdbConfig::default()
        },
    )
    .unwrap();
    let device = 0x5eed_u128;
    let start_ms = 1_700_000_000_000i64;
    let mut battery = 100i64;
    let mut pulses = 144_120i64;
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..POINTS_PER_SERIES {
        let ts = start_ms + i * 1000;
        let source = Source {
            partition: 0,
            pos: i as u64,
        };
        // A meter counting 0-3 pulses a second, a battery losing a percent every ~15 minutes
        // and a leak flag raised for a minute twice a day.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        pulses += (rng % 4) as i64;
        if i % 900 == 899 && battery > 5 {
            battery -= 1;
        }
        let leak = i % 43_200 < 60;
        db.write(source, device, "pulseCounter", ts, &Value::Long(pulses))
            .unwrap();
        db.write(source, device, "batteryLevel", ts, &Value::Long(battery))
            .unwrap();
        db.write(source, device, "leakage", ts, &Value::Bool(leak))
            .unwrap();
    }
    db.seal_all().unwrap();
    db.persist().unwrap();
    let stats = db.chunk_stats().unwrap();
    assert_eq!(stats.point_count, 3 * POINTS_PER_SERIES as u64);
    stats.bytes as f64 / stats.point_count as f64
}

#[test]
fn smart_meter_points_take_under_four_bytes() {
    let default_max = TsdbConfig::default().chunk_points_max;
    for chunk_points_max in [256, default_max, 4096] {
        let bpp = bytes_per_point(chunk_points_max);
        println!("chunk_points_max={chunk_points_max}: {bpp:.3} bytes/point");
        if chunk_points_max == default_max {
            assert!(bpp < 4.0, "{bpp} bytes/point");
        }
    }
}
