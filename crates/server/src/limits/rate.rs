//! ThingsBoard's rate limits, without I/O or a clock: the `"capacity:seconds[,capacity:seconds…]"` syntax
//! ([`RateSpec`]) and Bucket4j's token buckets with greedy refill ([`Buckets`]).
//!
//! A spec like `"20:1,600:60"` is a set of bandwidths: at most 20 per second *and* at most 600 per minute.
//! Each bandwidth is a bucket that starts full and refills continuously at `capacity / seconds` (Bucket4j's
//! greedy refill: a fraction of a token appears as soon as a fraction of the period passed). Taking `n`
//! succeeds only if every bucket of the spec holds `n` tokens, and then takes `n` from each.
//!
//! Time comes in as nanoseconds on any monotonic scale, so tests drive it without sleeping. Tokens are
//! counted exactly in integers: a bucket holds `tokens × period_ns` "token-nanoseconds", and `elapsed_ns`
//! of refill adds `elapsed_ns × capacity` of them, so no rounding accumulates however often it is refilled.

use std::fmt;

const NS_PER_S: u64 = 1_000_000_000;

/// One bandwidth: `capacity` tokens per `period_s` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub capacity: u64,
    pub period_s: u64,
}

impl Rate {
    fn period_ns(self) -> u64 {
        self.period_s.saturating_mul(NS_PER_S)
    }

    /// A full bucket, in token-nanoseconds.
    fn full(self) -> u128 {
        u128::from(self.capacity) * u128::from(self.period_ns())
    }
}

/// A parsed limit: empty means unlimited.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateSpec {
    rates: Box<[Rate]>,
}

/// Why a spec does not parse; `part` is the offending `capacity:seconds` entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateSpecError {
    #[error("{part:?} is not of the form capacity:seconds")]
    Syntax { part: String },
    #[error("{part:?}: capacity and seconds must be whole numbers")]
    Number { part: String },
    #[error("{part:?}: capacity and seconds must be at least 1")]
    Zero { part: String },
    #[error("empty entry between commas")]
    EmptyEntry,
}

impl RateSpec {
    /// Parses `"capacity:seconds[,capacity:seconds…]"`. Whitespace around entries and numbers is ignored,
    /// as is one trailing comma (tb-mqtt-client's own defaults end with one: `"10:1,60:60,"`); an empty
    /// string is unlimited.
    pub fn parse(text: &str) -> Result<RateSpec, RateSpecError> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(RateSpec::default());
        }
        let text = text.strip_suffix(',').unwrap_or(text);
        let mut rates = Vec::new();
        for part in text.split(',') {
            let part = part.trim();
            if part.is_empty() {
                return Err(RateSpecError::EmptyEntry);
            }
            let Some((capacity, seconds)) = part.split_once(':') else {
                return Err(RateSpecError::Syntax { part: part.into() });
            };
            let number = |s: &str| {
                let s = s.trim();
                // `u64::from_str` accepts a leading '+'; ThingsBoard's `Long.parseLong` does too, but a sign
                // in a rate is more likely a typo than intent.
                if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(RateSpecError::Number { part: part.into() });
                }
                s.parse::<u64>()
                    .map_err(|_| RateSpecError::Number { part: part.into() })
            };
            let rate = Rate {
                capacity: number(capacity)?,
                period_s: number(seconds)?,
            };
            if rate.capacity == 0 || rate.period_s == 0 {
                return Err(RateSpecError::Zero { part: part.into() });
            }
            rates.push(rate);
        }
        Ok(RateSpec {
            rates: rates.into_boxed_slice(),
        })
    }

    pub fn is_unlimited(&self) -> bool {
        self.rates.is_empty()
    }

    pub fn rates(&self) -> &[Rate] {
        &self.rates
    }

    /// The longest period: after this long without consumption every bucket is full again, so state
    /// idle for this long is the same as no state at all.
    pub fn longest_period_ns(&self) -> u64 {
        self.rates.iter().map(|r| r.period_ns()).max().unwrap_or(0)
    }

    /// Fresh (full) buckets for this spec.
    pub fn buckets(&self, now_ns: u64) -> Buckets {
        Buckets {
            tokens: self.rates.iter().map(|r| r.full()).collect(),
            last_ns: now_ns,
        }
    }
}

/// The canonical form, `"20:1,600:60"` (empty when unlimited).
impl fmt::Display for RateSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, rate) in self.rates.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}:{}", rate.capacity, rate.period_s)?;
        }
        Ok(())
    }
}

/// The buckets of one [`RateSpec`] for one entity. The spec is passed to every call rather than kept, so a
/// table of many entities stores only their token counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buckets {
    /// Token-nanoseconds per bucket, in the order of the spec's rates.
    tokens: Box<[u128]>,
    /// When the buckets were last refilled.
    last_ns: u64,
}

impl Buckets {
    /// Refills every bucket for the time since the last call (time never runs backwards here: an earlier
    /// `now_ns` refills nothing).
    pub fn refill(&mut self, spec: &RateSpec, now_ns: u64) {
        let elapsed = now_ns.saturating_sub(self.last_ns);
        if elapsed == 0 {
            return;
        }
        self.last_ns = now_ns;
        for (tokens, rate) in self.tokens.iter_mut().zip(spec.rates.iter()) {
            let added = u128::from(elapsed) * u128::from(rate.capacity);
            *tokens = tokens.saturating_add(added).min(rate.full());
        }
    }

    /// Whether every bucket holds `n` tokens (after refilling to `now_ns`).
    pub fn can_take(&mut self, spec: &RateSpec, n: u64, now_ns: u64) -> bool {
        self.refill(spec, now_ns);
        self.tokens
            .iter()
            .zip(spec.rates.iter())
            .all(|(tokens, rate)| *tokens >= u128::from(n) * u128::from(rate.period_ns()))
    }

    /// Takes `n` from every bucket; callers check [`Buckets::can_take`] first (this saturates at zero).
    pub fn take(&mut self, spec: &RateSpec, n: u64) {
        for (tokens, rate) in self.tokens.iter_mut().zip(spec.rates.iter()) {
            *tokens = tokens.saturating_sub(u128::from(n) * u128::from(rate.period_ns()));
        }
    }

    /// Takes `n` tokens from every bucket if all of them hold `n`; otherwise takes nothing.
    pub fn try_take(&mut self, spec: &RateSpec, n: u64, now_ns: u64) -> bool {
        if !self.can_take(spec, n, now_ns) {
            return false;
        }
        self.take(spec, n);
        true
    }

    /// Whole tokens available in the emptiest bucket (`u64::MAX` for an unlimited spec).
    pub fn available(&mut self, spec: &RateSpec, now_ns: u64) -> u64 {
        self.refill(spec, now_ns);
        self.tokens
            .iter()
            .zip(spec.rates.iter())
            .map(|(tokens, rate)| {
                u64::try_from(tokens / u128::from(rate.period_ns())).unwrap_or(u64::MAX)
            })
            .min()
            .unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: u64 = NS_PER_S;

    fn spec(text: &str) -> RateSpec {
        RateSpec::parse(text).unwrap()
    }

    #[test]
    fn parses_thingsboard_syntax() {
        assert_eq!(spec("20:1,600:60").to_string(), "20:1,600:60");
        assert_eq!(spec(" 10:1 , 60 : 60 ,").to_string(), "10:1,60:60");
        assert_eq!(spec("10:1,60:60,").rates().len(), 2);
        assert!(spec("").is_unlimited());
        assert!(spec("   ").is_unlimited());
        assert_eq!(
            spec("5:2").rates(),
            &[Rate {
                capacity: 5,
                period_s: 2
            }]
        );
    }

    #[test]
    fn bad_syntax_names_the_part() {
        let check = |text: &str, expected: &str| {
            let err = RateSpec::parse(text).unwrap_err().to_string();
            assert_eq!(err, expected, "for {text:?}");
        };
        check("20", "\"20\" is not of the form capacity:seconds");
        check("20:1,600", "\"600\" is not of the form capacity:seconds");
        check("a:1", "\"a:1\": capacity and seconds must be whole numbers");
        check(
            "1:-1",
            "\"1:-1\": capacity and seconds must be whole numbers",
        );
        check(
            "1:2:3",
            "\"1:2:3\": capacity and seconds must be whole numbers",
        );
        check("1:", "\"1:\": capacity and seconds must be whole numbers");
        check(
            "99999999999999999999:1",
            "\"99999999999999999999:1\": capacity and seconds must be whole numbers",
        );
        check("0:1", "\"0:1\": capacity and seconds must be at least 1");
        check("1:0", "\"1:0\": capacity and seconds must be at least 1");
        check("1:1,,2:2", "empty entry between commas");
        check(",", "empty entry between commas");
        check("1:1,,", "empty entry between commas");
    }

    #[test]
    fn a_bucket_starts_full_and_refills_greedily() {
        let s = spec("10:1");
        let mut b = s.buckets(0);
        for _ in 0..10 {
            assert!(b.try_take(&s, 1, 0));
        }
        assert!(!b.try_take(&s, 1, 0));
        // Greedy refill: one token per 100 ms, not ten at the end of the second.
        assert!(!b.try_take(&s, 1, 99_999_999));
        assert!(b.try_take(&s, 1, 100_000_000));
        assert!(!b.try_take(&s, 1, 100_000_000));
        assert_eq!(b.available(&s, 100_000_000 + S / 2), 5);
        // Never more than the capacity.
        assert_eq!(b.available(&s, 100 * S), 10);
    }

    #[test]
    fn every_bucket_must_hold_the_tokens() {
        let s = spec("5:1,8:60");
        let mut b = s.buckets(0);
        assert!(b.try_take(&s, 5, 0));
        assert!(!b.try_take(&s, 1, 0));
        // A second later the per-second bucket is full but the per-minute one holds 3 (+ 1/7.5 s).
        assert!(!b.try_take(&s, 4, S));
        assert!(b.try_take(&s, 3, S));
        assert!(!b.try_take(&s, 1, S));
        // A failed take takes nothing from the buckets that had enough.
        let mut c = s.buckets(0);
        assert!(!c.try_take(&s, 6, 0));
        assert_eq!(c.available(&s, 0), 5);
    }

    #[test]
    fn more_than_the_capacity_never_passes() {
        let s = spec("10:1");
        let mut b = s.buckets(0);
        assert!(!b.try_take(&s, 11, 1000 * S));
        assert!(b.try_take(&s, 10, 1000 * S));
    }

    #[test]
    fn time_going_backwards_refills_nothing() {
        let s = spec("1:1");
        let mut b = s.buckets(10 * S);
        assert!(b.try_take(&s, 1, 10 * S));
        assert!(!b.try_take(&s, 1, 5 * S));
        assert!(b.try_take(&s, 1, 11 * S));
    }

    #[test]
    fn huge_values_do_not_overflow() {
        let s = spec(&format!("{}:{}", u64::MAX, u64::MAX));
        let mut b = s.buckets(0);
        assert!(b.try_take(&s, u64::MAX, u64::MAX));
        assert!(!b.try_take(&s, 1, u64::MAX));
        assert_eq!(s.longest_period_ns(), u64::MAX);
    }

    #[test]
    fn an_unlimited_spec_always_passes() {
        let s = spec("");
        let mut b = s.buckets(0);
        assert!(b.try_take(&s, u64::MAX, 0));
        assert_eq!(b.available(&s, 0), u64::MAX);
        assert_eq!(s.longest_period_ns(), 0);
    }

    proptest! {
        /// Over any window of `t` seconds starting from a full bucket, at most `capacity + capacity·t/period`
        /// tokens are taken, for every bandwidth of the spec; and a request that is refused takes nothing.
        #[test]
        fn never_more_than_the_bandwidth_allows(
            rates in proptest::collection::vec((1u64..50, 1u64..10), 1..4),
            steps in proptest::collection::vec((0u64..2 * S, 1u64..20), 1..200),
        ) {
            let text = rates.iter().map(|(c, p)| format!("{c}:{p}")).collect::<Vec<_>>().join(",");
            let s = spec(&text);
            prop_assert_eq!(s.to_string(), text.clone());
            let mut b = s.buckets(0);
            let mut now = 0u64;
            let mut taken: Vec<(u64, u64)> = Vec::new();
            for (advance, n) in steps {
                now += advance;
                let before = b.clone();
                let expected = before.clone().available(&s, now) >= n;
                let ok = b.try_take(&s, n, now);
                prop_assert_eq!(ok, expected);
                if ok {
                    taken.push((now, n));
                } else {
                    let mut refilled = before;
                    refilled.refill(&s, now);
                    prop_assert_eq!(&b, &refilled);
                }
            }
            for rate in s.rates() {
                for (i, &(start, _)) in taken.iter().enumerate() {
                    let total: u64 = taken[i..].iter().map(|&(_, n)| n).sum();
                    let window = now - start;
                    let allowed = u128::from(rate.capacity)
                        + u128::from(window) * u128::from(rate.capacity) / u128::from(rate.period_s * S);
                    prop_assert!(u128::from(total) <= allowed, "{} taken in {} ns under {}", total, window, text);
                }
            }
        }

        /// Parsing what Display prints gives the same spec back.
        #[test]
        fn display_round_trips(rates in proptest::collection::vec((1u64..u64::MAX, 1u64..u64::MAX), 0..5)) {
            let text = rates.iter().map(|(c, p)| format!("{c}:{p}")).collect::<Vec<_>>().join(",");
            let s = spec(&text);
            prop_assert_eq!(spec(&s.to_string()), s);
        }
    }
}
