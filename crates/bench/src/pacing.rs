//! Open-loop pacing: when each device's k-th message is due, and the shared budget of alarm messages.
//!
//! The schedule is open loop on purpose: a message's due time does not depend on when the previous one
//! was acknowledged, so a slow server shows up as latency (measured from the due time) instead of
//! quietly lowering the offered load (coordinated omission). Devices are interleaved so that the fleet
//! as a whole sends evenly spaced messages, rather than every device firing at the same instant.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The due times of one device's messages: device `slot` of `devices` at a fleet-wide `rate_per_s` sends
/// its k-th message at `(slot + k * devices) / rate_per_s` seconds from the start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    device_slot: u32,
    devices: u32,
    /// `None` when the device never sends (a rate of 0, or not a usable number).
    rate_per_s: Option<f64>,
}

impl Schedule {
    /// Device `device_slot` (0-based) of `devices` sending at a total of `rate_per_s` messages per
    /// second. A rate of 0 (or a negative or NaN one) means never due; `devices` of 0 counts as 1.
    pub fn new(device_slot: u32, devices: u32, rate_per_s: f64) -> Schedule {
        let rate_per_s = (rate_per_s > 0.0).then_some(rate_per_s);
        Schedule {
            device_slot,
            devices: devices.max(1),
            rate_per_s,
        }
    }

    /// Offset from the run start of message number `k` (from 0), or `None` if the device never sends
    /// (or the offset is too far away to represent).
    pub fn due(&self, k: u64) -> Option<Duration> {
        let rate_per_s = self.rate_per_s?;
        // The fleet-wide sequence number of this message; f64 holds it exactly up to 2^53.
        let n = u64::from(self.device_slot) as f64 + k as f64 * f64::from(self.devices);
        Duration::try_from_secs_f64(n / rate_per_s).ok()
    }

    /// Time between two messages of this device, or `None` if it never sends.
    pub fn interval(&self) -> Option<Duration> {
        Duration::try_from_secs_f64(f64::from(self.devices) / self.rate_per_s?).ok()
    }

    /// The number of the first message due at or after `elapsed` since the start: where a device that
    /// joins late (or fell behind and skips) picks up. `None` if the device never sends.
    pub fn first_due_at_or_after(&self, elapsed: Duration) -> Option<u64> {
        let rate_per_s = self.rate_per_s?;
        let n = elapsed.as_secs_f64() * rate_per_s - f64::from(self.device_slot);
        if n <= 0.0 {
            return Some(0);
        }
        let mut k = (n / f64::from(self.devices)).floor() as u64;
        // Rounding may land one message early; step until the due time is really not before `elapsed`.
        while self.due(k).is_some_and(|due| due < elapsed) {
            k += 1;
        }
        Some(k)
    }
}

/// The whole fleet's open-loop messages in due order, restricted to one slice of devices: what a
/// process's pacer walks to wake each device when its next message is due, instead of every device
/// keeping a timer of its own (a timer per message costs tokio's wheel a registration and an expiry;
/// one pacer ticking every millisecond costs a wake-up per message). The due times are
/// [`Schedule::due`]'s own, so a device woken for message `k` finds it due by its own reckoning.
#[derive(Debug, Clone)]
pub struct FleetCursor {
    devices: u32,
    rate_per_s: f64,
    first_slot: u32,
    count: u32,
    /// The fleet-wide number of the next message to hand out: device `next % devices`, its message
    /// `next / devices`.
    next: u64,
}

impl FleetCursor {
    /// The messages of devices `first_slot .. first_slot + count` of a fleet of `devices` sending
    /// `rate_per_s` in total, from the first.
    pub fn new(devices: u32, rate_per_s: f64, first_slot: u32, count: u32) -> FleetCursor {
        let devices = devices.max(1);
        let first_slot = first_slot.min(devices);
        FleetCursor {
            devices,
            rate_per_s,
            first_slot,
            count: count.min(devices - first_slot),
            next: u64::from(first_slot),
        }
    }

    /// Calls `due(slot)` once for every message of the slice due at or before `elapsed` since the
    /// start that was not handed out before, in due order.
    pub fn advance(&mut self, elapsed: Duration, mut due: impl FnMut(u32)) {
        if self.count == 0 {
            return;
        }
        let devices = u64::from(self.devices);
        let end = u64::from(self.first_slot) + u64::from(self.count);
        loop {
            let slot = self.next % devices;
            let first = u64::from(self.first_slot);
            if slot < first {
                // Before the slice (a round starts at device 0): on to its first device.
                self.next += first - slot;
                continue;
            }
            if slot >= end {
                // Past the slice: on to its first device in the next round.
                self.next += devices - slot + first;
                continue;
            }
            let schedule = Schedule::new(slot as u32, self.devices, self.rate_per_s);
            match schedule.due(self.next / devices) {
                Some(at) if at <= elapsed => {
                    due(slot as u32);
                    self.next += 1;
                }
                _ => return,
            }
        }
    }
}

/// How early an open-loop message may leave. tokio's timer fires on whole-millisecond ticks, rounding a
/// deadline up to the next one, so a device that sleeps until a message is due wakes up to a millisecond
/// after it, and a tick's worth of devices then send one after the other (measured at 50k msg/s: send lag
/// p50 1.12 ms, and 1.16 of the 1.20 ms p50 latency at 1,000 msg/s against the null server). Sleeping until
/// [`wake_at`] and sending what is due within the slack puts each message within about a millisecond of its
/// due time, on either side; [`latency_origin`] keeps the latency of an early message honest.
pub const TIMER_SLACK: Duration = Duration::from_millis(1);

/// Whether a message due at `due` leaves at `now` (it is due, or due within [`TIMER_SLACK`]).
pub fn is_due(due: Instant, now: Instant) -> bool {
    due <= now + TIMER_SLACK
}

/// When a device sleeps until, for a message due at `due`: a slack earlier, so the timer's rounding up
/// lands it on time rather than late.
pub fn wake_at(due: Instant) -> Instant {
    due.checked_sub(TIMER_SLACK).unwrap_or(due)
}

/// Where an open-loop message's latency counts from: when it was due, or when it left if that was
/// earlier. A late message (the generator fell behind, or its window was full) still counts from its due
/// time, so a slow server shows; an early one counts from the moment it left, never from a due time the
/// answer may have beaten. Either way the latency is never less than the server took.
pub fn latency_origin(due: Instant, sent: Instant) -> Instant {
    due.min(sent)
}

/// Lets `per_s` messages per second, across all devices of a process, be alarm messages. Share it through
/// an `Arc`; devices ask with [`AlarmBudget::take`] before each message.
///
/// Alarms due while nobody asked are not lost: the next askers get them, so over a run the count handed
/// out is exactly `floor(elapsed * per_s)`.
#[derive(Debug)]
pub struct AlarmBudget {
    start: Instant,
    per_s: f64,
    handed_out: AtomicU64,
}

impl AlarmBudget {
    /// A budget counted from `start`. A `per_s` of 0 (or negative, or NaN) never hands out an alarm.
    pub fn new(start: Instant, per_s: f64) -> AlarmBudget {
        AlarmBudget {
            start,
            per_s: if per_s > 0.0 { per_s } else { 0.0 },
            handed_out: AtomicU64::new(0),
        }
    }

    /// True if an alarm message is due at `now`; each due alarm is handed out exactly once, whichever
    /// thread asks.
    pub fn take(&self, now: Instant) -> bool {
        let due = self.due(now);
        let mut handed_out = self.handed_out.load(Ordering::Relaxed);
        while handed_out < due {
            // Only the counter matters (no other memory is published through it), so Relaxed is enough.
            match self.handed_out.compare_exchange_weak(
                handed_out,
                handed_out + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(current) => handed_out = current,
            }
        }
        false
    }

    /// How many alarms were handed out so far.
    pub fn handed_out(&self) -> u64 {
        self.handed_out.load(Ordering::Relaxed)
    }

    /// How many alarms are due by `now` in total.
    fn due(&self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.start).as_secs_f64();
        // `as` saturates, so an absurd rate cannot wrap.
        (elapsed * self.per_s).floor() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn messages_leave_within_the_slack_and_count_from_the_earlier_of_due_and_sent() {
        let t0 = Instant::now();
        let due = t0 + Duration::from_millis(10);
        // The timer rounds a wake-up up to the next tick: one a slack early lands on the due time.
        assert_eq!(wake_at(due), due - TIMER_SLACK);
        assert!(!is_due(due, t0));
        assert!(!is_due(due, due - TIMER_SLACK - Duration::from_micros(1)));
        assert!(is_due(due, due - TIMER_SLACK));
        assert!(is_due(due, due + Duration::from_millis(5)));
        // Early: from when it left. Late: from when it was due (the lag is part of the latency).
        let early = due - Duration::from_micros(400);
        assert_eq!(latency_origin(due, early), early);
        let late = due + Duration::from_millis(3);
        assert_eq!(latency_origin(due, late), due);
    }

    #[test]
    fn fleet_sends_evenly_spaced_messages_at_the_rate() {
        let (devices, rate_per_s) = (7u32, 1_000.0);
        let horizon = Duration::from_secs(10);
        let mut all = Vec::new();
        for slot in 0..devices {
            let schedule = Schedule::new(slot, devices, rate_per_s);
            assert_eq!(
                schedule.interval(),
                Some(Duration::from_secs_f64(7.0 / 1_000.0))
            );
            let mut k = 0;
            while let Some(due) = schedule.due(k).filter(|due| *due < horizon) {
                all.push(due);
                k += 1;
            }
        }
        all.sort();
        let expected = (rate_per_s * 10.0) as usize;
        assert!(
            all.len().abs_diff(expected) <= devices as usize,
            "{} messages in 10 s, expected {expected}",
            all.len()
        );
        assert_eq!(all[0], Duration::ZERO);
        let gap = Duration::from_secs_f64(1.0 / rate_per_s);
        for pair in all.windows(2) {
            let step = pair[1] - pair[0];
            assert!(
                step.abs_diff(gap) < Duration::from_micros(1),
                "uneven step {step:?} between {:?} and {:?}",
                pair[0],
                pair[1]
            );
        }
    }

    /// Every message of every device in the slice, each once, exactly when `Schedule` says it is due.
    #[test]
    fn the_cursor_hands_out_each_message_of_the_slice_once_when_due() {
        let (devices, rate_per_s) = (10u32, 1_000.0);
        for (first_slot, count) in [(0, 10), (0, 4), (3, 4), (7, 3), (9, 1)] {
            let mut cursor = FleetCursor::new(devices, rate_per_s, first_slot, count);
            let mut handed: Vec<(u32, u64)> = Vec::new();
            let mut per_slot = vec![0u64; devices as usize];
            // Uneven steps, some shorter than the gap between messages, some many gaps long.
            let mut elapsed = Duration::ZERO;
            for step_us in [0u64, 300, 700, 1_000, 2_500, 13, 40_000, 999, 1]
                .iter()
                .cycle()
                .take(60)
            {
                elapsed += Duration::from_micros(*step_us);
                cursor.advance(elapsed, |slot| {
                    let k = per_slot[slot as usize];
                    per_slot[slot as usize] += 1;
                    handed.push((slot, k));
                });
                // Whatever is due by now has been handed out, and nothing later.
                for slot in first_slot..first_slot + count {
                    let schedule = Schedule::new(slot, devices, rate_per_s);
                    let k = per_slot[slot as usize];
                    assert!(
                        schedule.due(k).unwrap() > elapsed,
                        "slot {slot} message {k} overdue"
                    );
                    if k > 0 {
                        assert!(schedule.due(k - 1).unwrap() <= elapsed);
                    }
                }
            }
            // Several rounds of the fleet went by.
            assert!(
                handed.len() >= 20 * count as usize,
                "{first_slot}+{count}: {}",
                handed.len()
            );
            assert!(
                handed
                    .iter()
                    .all(|(slot, _)| (first_slot..first_slot + count).contains(slot)),
                "{first_slot}+{count}: {handed:?}"
            );
            // In due order.
            let dues: Vec<Duration> = handed
                .iter()
                .map(|&(slot, k)| Schedule::new(slot, devices, rate_per_s).due(k).unwrap())
                .collect();
            assert!(dues.windows(2).all(|w| w[0] <= w[1]));
        }
        // An empty slice, or one past the fleet, hands out nothing.
        let mut none = 0;
        FleetCursor::new(10, 1_000.0, 4, 0).advance(Duration::from_secs(5), |_| none += 1);
        FleetCursor::new(10, 1_000.0, 12, 5).advance(Duration::from_secs(5), |_| none += 1);
        FleetCursor::new(10, 0.0, 0, 10).advance(Duration::from_secs(5), |_| none += 1);
        assert_eq!(none, 0);
    }

    #[test]
    fn zero_rate_is_never_due() {
        let schedule = Schedule::new(0, 10, 0.0);
        assert_eq!(schedule.due(0), None);
        assert_eq!(schedule.interval(), None);
        assert_eq!(schedule.first_due_at_or_after(Duration::from_secs(1)), None);
        assert_eq!(Schedule::new(0, 10, f64::NAN).due(3), None);
    }

    #[test]
    fn late_devices_resume_at_the_next_due_message() {
        let schedule = Schedule::new(3, 10, 100.0);
        assert_eq!(schedule.first_due_at_or_after(Duration::ZERO), Some(0));
        // Message k is due at (3 + 10k) / 100 s: k = 5 at 0.53 s.
        let k = schedule
            .first_due_at_or_after(Duration::from_millis(500))
            .unwrap();
        assert_eq!(k, 5);
        assert_eq!(
            schedule.first_due_at_or_after(schedule.due(5).unwrap()),
            Some(5)
        );
    }

    #[test]
    fn alarm_budget_hands_out_what_is_due_once() {
        let start = Instant::now();
        let budget = AlarmBudget::new(start, 10.0);
        assert!(!budget.take(start));
        assert!(!budget.take(start + Duration::from_millis(99)));
        let half = start + Duration::from_millis(500);
        let taken = (0..20).filter(|_| budget.take(half)).count();
        assert_eq!(taken, 5);
        assert!(!budget.take(half));
        // An instant before the start counts as the start.
        if let Some(before) = start.checked_sub(Duration::from_secs(1)) {
            assert!(!budget.take(before));
        }
        assert!(budget.take(start + Duration::from_millis(600)));
        assert_eq!(budget.handed_out(), 6);
    }

    #[test]
    fn alarm_budget_is_shared_exactly_across_threads() {
        let start = Instant::now();
        let budget = Arc::new(AlarmBudget::new(start, 7.5));
        let now = start + Duration::from_secs(10);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let budget = Arc::clone(&budget);
                std::thread::spawn(move || (0..100).filter(|_| budget.take(now)).count())
            })
            .collect();
        let taken: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(taken, 75);
        assert_eq!(budget.handed_out(), 75);
        assert!(!AlarmBudget::new(start, 0.0).take(now));
    }
}
