//! Rate limits (reference 7) and the failed-authentication limit per source address (reference 1.2).
//!
//! [`rate`] is the pure part: the `capacity:seconds` syntax and the token buckets. This module holds the
//! buckets of every tenant, device, gateway and customer in shared sharded tables, so a connection's task
//! carries none of it and the HTTP device API (a session per request) shares the same state. A table exists
//! only for a level whose limits are configured: with the default (unlimited) configuration a check is one
//! branch. An entry idle for the longest period of its limits is full again, the same as no entry, so it is
//! dropped when its shard is swept; memory follows the entities active within that period.

pub mod rate;

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};
use std::net::IpAddr;
use std::sync::OnceLock;
use std::time::Instant;

use parking_lot::Mutex;
use uuid::Uuid;

use crate::config::RateLimitsConfig;
use rate::{Buckets, RateSpec};

/// Nanoseconds on a process-wide monotonic scale (the limits' clock).
pub fn now_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The level whose limit refused a message (reference 7's check order: tenant first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Tenant,
    /// A directly connected device.
    Device,
    /// A gateway's own messages.
    GatewayDevice,
    /// Messages of the devices behind a gateway.
    Gateway,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Tenant => "tenant",
            Level::Device => "device",
            Level::GatewayDevice => "gateway_device",
            Level::Gateway => "gateway",
        }
    }
}

/// Who sent a transport message, which decides the second level checked after the tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    /// A directly connected device: the device level.
    Device(Uuid),
    /// A gateway on its own behalf (`v1/devices/me/...`): the gateway-device level.
    GatewayItself(Uuid),
    /// A device behind this gateway (`v1/gateway/...`): the gateway level.
    BehindGateway(Uuid),
}

impl Sender {
    fn id(self) -> Uuid {
        match self {
            Sender::Device(id) | Sender::GatewayItself(id) | Sender::BehindGateway(id) => id,
        }
    }
}

/// The three limits of one level.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LevelSpecs {
    pub msg: RateSpec,
    pub telemetry_msg: RateSpec,
    pub telemetry_data_points: RateSpec,
}

impl LevelSpecs {
    fn parse(msg: &str, telemetry_msg: &str, points: &str) -> LevelSpecs {
        // `Config::validate` refused bad specs at start; a config built in code without it gets unlimited.
        let parse = |text: &str| RateSpec::parse(text).unwrap_or_default();
        LevelSpecs {
            msg: parse(msg),
            telemetry_msg: parse(telemetry_msg),
            telemetry_data_points: parse(points),
        }
    }

    fn is_unlimited(&self) -> bool {
        self.msg.is_unlimited()
            && self.telemetry_msg.is_unlimited()
            && self.telemetry_data_points.is_unlimited()
    }

    fn longest_period_ns(&self) -> u64 {
        self.msg
            .longest_period_ns()
            .max(self.telemetry_msg.longest_period_ns())
            .max(self.telemetry_data_points.longest_period_ns())
    }

    /// The getSessionLimits form: `{"messages":…,"telemetryMessages":…,"telemetryDataPoints":…}`, null
    /// for unlimited (reference 1.9).
    pub fn session_limits_json(&self) -> serde_json::Value {
        let value = |spec: &RateSpec| {
            if spec.is_unlimited() {
                serde_json::Value::Null
            } else {
                serde_json::Value::String(spec.to_string())
            }
        };
        serde_json::json!({
            "messages": value(&self.msg),
            "telemetryMessages": value(&self.telemetry_msg),
            "telemetryDataPoints": value(&self.telemetry_data_points),
        })
    }
}

/// One entity's buckets for the three limits of its level.
struct LevelBuckets {
    msg: Buckets,
    telemetry_msg: Buckets,
    telemetry_data_points: Buckets,
}

impl LevelBuckets {
    fn new(specs: &LevelSpecs, now_ns: u64) -> LevelBuckets {
        LevelBuckets {
            msg: specs.msg.buckets(now_ns),
            telemetry_msg: specs.telemetry_msg.buckets(now_ns),
            telemetry_data_points: specs.telemetry_data_points.buckets(now_ns),
        }
    }

    /// Reference 7: N > 0 data points take 1 telemetry message and N data points (both or neither); any
    /// other message takes 1 message.
    fn try_take(&mut self, specs: &LevelSpecs, data_points: u64, now_ns: u64) -> bool {
        if data_points == 0 {
            return self.msg.try_take(&specs.msg, 1, now_ns);
        }
        if !self.telemetry_msg.can_take(&specs.telemetry_msg, 1, now_ns)
            || !self.telemetry_data_points.can_take(
                &specs.telemetry_data_points,
                data_points,
                now_ns,
            )
        {
            return false;
        }
        self.telemetry_msg.take(&specs.telemetry_msg, 1);
        self.telemetry_data_points
            .take(&specs.telemetry_data_points, data_points);
        true
    }
}

const SHARDS: usize = 16;
/// A shard is not swept before it holds this many entries.
const SWEEP_MIN: usize = 256;

/// A map from entity (or address) to its state, in shards behind their own locks. Entries not touched for
/// `idle_ns` are dropped when their shard is swept, which happens when it has doubled since its last sweep.
struct Table<K, V> {
    shards: Box<[Mutex<Shard<K, V>>]>,
    hasher: RandomState,
    idle_ns: u64,
    /// Most entries a shard holds; a new key beyond it (after a sweep) is not recorded.
    shard_entries_max: usize,
}

struct Shard<K, V> {
    entries: HashMap<K, (V, u64)>,
    sweep_at: usize,
    /// When a full shard was last swept: at most once per FULL_SWEEP_INTERVAL_NS, so that new keys arriving
    /// at a full shard do not each cost a scan of it.
    full_swept_ns: u64,
}

const FULL_SWEEP_INTERVAL_NS: u64 = 1_000_000_000;

impl<K: Hash + Eq + Copy, V> Table<K, V> {
    fn new(idle_ns: u64) -> Table<K, V> {
        Table::capped(idle_ns, usize::MAX)
    }

    /// A table of at most `entries_max` entries (over all shards).
    fn capped(idle_ns: u64, entries_max: usize) -> Table<K, V> {
        Table {
            shard_entries_max: (entries_max / SHARDS).max(1),
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        entries: HashMap::new(),
                        sweep_at: SWEEP_MIN,
                        full_swept_ns: 0,
                    })
                })
                .collect(),
            hasher: RandomState::new(),
            idle_ns,
        }
    }

    fn shard(&self, key: &K) -> &Mutex<Shard<K, V>> {
        let hash = self.hasher.hash_one(key) as usize;
        &self.shards[hash % SHARDS]
    }

    /// Runs `f` on the entry of `key`, created by `make` if absent, and marks it used at `now_ns`. None when
    /// the key is new and its shard is full (only for a capped table).
    fn with<R>(
        &self,
        key: K,
        now_ns: u64,
        make: impl FnOnce() -> V,
        f: impl FnOnce(&mut V) -> R,
    ) -> Option<R> {
        let mut shard = self.shard(&key).lock();
        if !shard.entries.contains_key(&key) {
            let full = shard.entries.len() >= self.shard_entries_max;
            if shard.entries.len() >= shard.sweep_at
                || full && now_ns.saturating_sub(shard.full_swept_ns) >= FULL_SWEEP_INTERVAL_NS
            {
                let idle_ns = self.idle_ns;
                shard
                    .entries
                    .retain(|_, (_, used)| now_ns.saturating_sub(*used) < idle_ns);
                shard.sweep_at = (shard.entries.len() * 2).max(SWEEP_MIN);
                if full {
                    shard.full_swept_ns = now_ns;
                }
            }
            if shard.entries.len() >= self.shard_entries_max {
                return None;
            }
        }
        let (value, used) = shard.entries.entry(key).or_insert_with(|| (make(), now_ns));
        *used = now_ns;
        Some(f(value))
    }

    /// Runs `f` on the entry of `key` if there is one, without creating or touching it.
    fn peek<R>(&self, key: &K, f: impl FnOnce(&mut V, u64) -> R) -> Option<R> {
        let mut shard = self.shard(key).lock();
        shard
            .entries
            .get_mut(key)
            .map(|(value, used)| f(value, *used))
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().entries.len()).sum()
    }
}

/// One level's limits and, if any is set, its entities' buckets.
struct LevelTable {
    specs: LevelSpecs,
    table: Option<Table<Uuid, LevelBuckets>>,
}

impl LevelTable {
    fn new(specs: LevelSpecs) -> LevelTable {
        let table = (!specs.is_unlimited()).then(|| Table::new(specs.longest_period_ns()));
        LevelTable { specs, table }
    }

    fn try_take(&self, id: Uuid, data_points: u64, now_ns: u64) -> bool {
        let Some(table) = &self.table else {
            return true;
        };
        table
            .with(
                id,
                now_ns,
                || LevelBuckets::new(&self.specs, now_ns),
                |buckets| buckets.try_take(&self.specs, data_points, now_ns),
            )
            .unwrap_or(true) // not capped: always Some
    }
}

/// The transport limits of reference 7: tenant, device, gateway-device and gateway levels.
pub struct TransportLimits {
    /// Whether any transport limit is set: when not, `check` is this one branch.
    active: bool,
    tenant: LevelTable,
    device: LevelTable,
    gateway_device: LevelTable,
    gateway: LevelTable,
}

impl TransportLimits {
    pub fn new(config: &RateLimitsConfig) -> TransportLimits {
        let c = config;
        let tenant = LevelTable::new(LevelSpecs::parse(
            &c.transport_tenant_msg,
            &c.transport_tenant_telemetry_msg,
            &c.transport_tenant_telemetry_data_points,
        ));
        let device = LevelTable::new(LevelSpecs::parse(
            &c.transport_device_msg,
            &c.transport_device_telemetry_msg,
            &c.transport_device_telemetry_data_points,
        ));
        let gateway_device = LevelTable::new(LevelSpecs::parse(
            &c.transport_gateway_device_msg,
            &c.transport_gateway_device_telemetry_msg,
            &c.transport_gateway_device_telemetry_data_points,
        ));
        let gateway = LevelTable::new(LevelSpecs::parse(
            &c.transport_gateway_msg,
            &c.transport_gateway_telemetry_msg,
            &c.transport_gateway_telemetry_data_points,
        ));
        let active = [&tenant, &device, &gateway_device, &gateway]
            .iter()
            .any(|level| level.table.is_some());
        TransportLimits {
            active,
            tenant,
            device,
            gateway_device,
            gateway,
        }
    }

    /// Whether any transport limit is configured.
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// Whether the tenant level has limits (only then does a check need the sender's tenant).
    pub fn limits_tenants(&self) -> bool {
        self.tenant.table.is_some()
    }

    /// Accounts one message of `sender` carrying `data_points` (0: not a data message) at `now_ns`; the
    /// tenant (looked up through `tenant` only when the tenant level is limited) is checked first, then
    /// the sender's own level. The first level that refuses is returned; the levels before it keep what
    /// they took, as in ThingsBoard.
    #[inline]
    pub fn check(
        &self,
        tenant: impl FnOnce() -> Option<Uuid>,
        sender: Sender,
        data_points: usize,
        now_ns: u64,
    ) -> Result<(), Level> {
        if !self.active {
            return Ok(());
        }
        self.check_slow(tenant, sender, data_points as u64, now_ns)
    }

    fn check_slow(
        &self,
        tenant: impl FnOnce() -> Option<Uuid>,
        sender: Sender,
        data_points: u64,
        now_ns: u64,
    ) -> Result<(), Level> {
        if self.tenant.table.is_some() {
            if let Some(tenant) = tenant() {
                if !self.tenant.try_take(tenant, data_points, now_ns) {
                    return Err(Level::Tenant);
                }
            }
        }
        let (level, table) = match sender {
            Sender::Device(_) => (Level::Device, &self.device),
            Sender::GatewayItself(_) => (Level::GatewayDevice, &self.gateway_device),
            Sender::BehindGateway(_) => (Level::Gateway, &self.gateway),
        };
        if !table.try_take(sender.id(), data_points, now_ns) {
            return Err(level);
        }
        Ok(())
    }

    /// The limits getSessionLimits reports: `rateLimits` for the session itself (a device's, or a gateway's
    /// own), `gatewayRateLimits` for the devices behind a gateway.
    pub fn session_limits(&self, gateway: bool) -> (&LevelSpecs, Option<&LevelSpecs>) {
        if gateway {
            (&self.gateway_device.specs, Some(&self.gateway.specs))
        } else {
            (&self.device.specs, None)
        }
    }
}

/// REST request limits per tenant and per customer (`tenantServerRestLimitsConfiguration`,
/// `customerServerRestLimitsConfiguration`).
pub struct RestLimits {
    tenant: Option<(RateSpec, Table<Uuid, Buckets>)>,
    customer: Option<(RateSpec, Table<Uuid, Buckets>)>,
}

/// Whose REST limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestLevel {
    Tenant,
    Customer,
}

impl RestLimits {
    pub fn new(config: &RateLimitsConfig) -> RestLimits {
        let table = |text: &str| {
            let spec = RateSpec::parse(text).unwrap_or_default();
            (!spec.is_unlimited()).then(|| {
                let idle = spec.longest_period_ns();
                (spec, Table::new(idle))
            })
        };
        RestLimits {
            tenant: table(&config.rest_tenant),
            customer: table(&config.rest_customer),
        }
    }

    pub fn is_active(&self) -> bool {
        self.tenant.is_some() || self.customer.is_some()
    }

    /// Accounts one request of a user of `tenant` (and `customer`, for a customer user).
    pub fn check(
        &self,
        tenant: Option<Uuid>,
        customer: Option<Uuid>,
        now_ns: u64,
    ) -> Result<(), RestLevel> {
        let take = |limit: &Option<(RateSpec, Table<Uuid, Buckets>)>, id: Option<Uuid>| match (
            limit, id,
        ) {
            (Some((spec, table)), Some(id)) => table
                .with(
                    id,
                    now_ns,
                    || spec.buckets(now_ns),
                    |buckets| buckets.try_take(spec, 1, now_ns),
                )
                .unwrap_or(true), // not capped: always Some
            _ => true,
        };
        if !take(&self.tenant, tenant) {
            return Err(RestLevel::Tenant);
        }
        if !take(&self.customer, customer) {
            return Err(RestLevel::Customer);
        }
        Ok(())
    }
}

/// Failed device authentications per source address (reference 1.2, ThingsBoard's
/// `DefaultTransportRateLimitService` IP limits): `failures_max` failures without a success in between block
/// the address for `block_ns`. A blocked address is refused before its credentials are looked at. After the
/// block ends the count is kept, so the next failure blocks again at once; a success clears it. Addresses
/// without a failure are never stored.
pub struct FailedAuthLimit {
    enabled: bool,
    failures_max: u32,
    block_ns: u64,
    table: Table<IpAddr, AddressFailures>,
}

struct AddressFailures {
    count: u32,
    /// When the address was blocked, while it is.
    blocked_at_ns: Option<u64>,
}

/// How long an address's failure count is kept without new failures: ThingsBoard keeps it for its
/// session inactivity timeout (600 s) or the block, whichever is longer.
const FAILURES_KEPT_NS: u64 = 600_000_000_000;
/// Most addresses with failures remembered at once (about 100 bytes each): an attacker rotating through more
/// source addresses than this (an IPv6 prefix) is not tracked beyond it rather than growing the table.
const FAILED_ADDRESSES_MAX: usize = 1 << 20;

impl FailedAuthLimit {
    pub fn new(config: &RateLimitsConfig) -> FailedAuthLimit {
        let block_ns = config.failed_auth_block_s.saturating_mul(1_000_000_000);
        FailedAuthLimit {
            enabled: config.failed_auth_limit_enabled,
            failures_max: config.failed_auth_per_ip_max.max(1),
            block_ns,
            table: Table::capped(block_ns.max(FAILURES_KEPT_NS), FAILED_ADDRESSES_MAX),
        }
    }

    /// Whether `address` may try to authenticate now.
    #[inline]
    pub fn allows(&self, address: IpAddr, now_ns: u64) -> bool {
        if !self.enabled {
            return true;
        }
        let block_ns = self.block_ns;
        self.table
            .peek(&address, |failures, _| match failures.blocked_at_ns {
                Some(at) if now_ns.saturating_sub(at) < block_ns => false,
                Some(_) => {
                    failures.blocked_at_ns = None;
                    true
                }
                None => true,
            })
            .unwrap_or(true)
    }

    /// Records a failed authentication; true if it blocked the address.
    pub fn failed(&self, address: IpAddr, now_ns: u64) -> bool {
        if !self.enabled {
            return false;
        }
        let failures_max = self.failures_max;
        self.table
            .with(
                address,
                now_ns,
                || AddressFailures {
                    count: 0,
                    blocked_at_ns: None,
                },
                |failures| {
                    failures.count = failures.count.saturating_add(1);
                    if failures.count >= failures_max && failures.blocked_at_ns.is_none() {
                        failures.blocked_at_ns = Some(now_ns);
                        return true;
                    }
                    false
                },
            )
            .unwrap_or(false)
    }

    /// Records a successful authentication: the address's failures are forgotten.
    pub fn succeeded(&self, address: IpAddr) {
        if !self.enabled {
            return;
        }
        self.table.peek(&address, |failures, _| {
            failures.count = 0;
            failures.blocked_at_ns = None;
        });
    }
}

/// Everything this module keeps, built once from the config.
pub struct Limits {
    pub transport: TransportLimits,
    pub rest: RestLimits,
    pub failed_auth: FailedAuthLimit,
}

impl Limits {
    pub fn new(config: &RateLimitsConfig) -> Limits {
        Limits {
            transport: TransportLimits::new(config),
            rest: RestLimits::new(config),
            failed_auth: FailedAuthLimit::new(config),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn limits(edit: impl FnOnce(&mut RateLimitsConfig)) -> TransportLimits {
        let mut config = RateLimitsConfig::default();
        edit(&mut config);
        TransportLimits::new(&config)
    }

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    #[test]
    fn unlimited_by_default_and_never_asks_for_the_tenant() {
        let l = limits(|_| {});
        assert!(!l.is_active());
        for _ in 0..1000 {
            let tenant = || -> Option<Uuid> { panic!("tenant looked up") };
            assert_eq!(l.check(tenant, Sender::Device(id(1)), 5, 0), Ok(()));
        }
        assert!(l.device.table.is_none());
    }

    #[test]
    fn data_messages_and_other_messages_use_different_buckets() {
        let l = limits(|c| {
            c.transport_device_msg = "2:1".into();
            c.transport_device_telemetry_msg = "3:1".into();
            c.transport_device_telemetry_data_points = "10:1".into();
        });
        let d = Sender::Device(id(1));
        let none = || None;
        // Two non-data messages, then the third is refused...
        assert_eq!(l.check(none, d, 0, 0), Ok(()));
        assert_eq!(l.check(none, d, 0, 0), Ok(()));
        assert_eq!(l.check(none, d, 0, 0), Err(Level::Device));
        // ...while data messages still pass: 4 + 4 points, then 4 more points is over 10.
        assert_eq!(l.check(none, d, 4, 0), Ok(()));
        assert_eq!(l.check(none, d, 4, 0), Ok(()));
        assert_eq!(l.check(none, d, 4, 0), Err(Level::Device));
        // A refused data message took no telemetry message: 2 points still fit, and that is the 3rd message.
        assert_eq!(l.check(none, d, 2, 0), Ok(()));
        assert_eq!(l.check(none, d, 0, 0), Err(Level::Device));
        assert_eq!(l.check(none, d, 1, S / 10), Err(Level::Device));
        // Another device has its own buckets.
        assert_eq!(l.check(none, Sender::Device(id(2)), 0, 0), Ok(()));
        // Refill: a second later all is back.
        assert_eq!(l.check(none, d, 10, S), Ok(()));
    }

    #[test]
    fn the_tenant_is_checked_first_and_shared() {
        let l = limits(|c| {
            c.transport_tenant_telemetry_msg = "3:60".into();
            c.transport_device_telemetry_msg = "2:60".into();
        });
        let t = || Some(id(100));
        assert_eq!(l.check(t, Sender::Device(id(1)), 1, 0), Ok(()));
        assert_eq!(l.check(t, Sender::Device(id(1)), 1, 0), Ok(()));
        assert_eq!(l.check(t, Sender::Device(id(1)), 1, 0), Err(Level::Device));
        // The device level refused, but the tenant's token was taken (ThingsBoard checks level by level).
        assert_eq!(l.check(t, Sender::Device(id(2)), 1, 0), Err(Level::Tenant));
        // Another tenant is not affected.
        assert_eq!(
            l.check(|| Some(id(200)), Sender::Device(id(3)), 1, 0),
            Ok(())
        );
    }

    #[test]
    fn gateways_use_their_own_levels() {
        let l = limits(|c| {
            c.transport_device_msg = "1:60".into();
            c.transport_gateway_device_msg = "2:60".into();
            c.transport_gateway_msg = "3:60".into();
        });
        let none = || None;
        let g = id(9);
        assert_eq!(l.check(none, Sender::GatewayItself(g), 0, 0), Ok(()));
        assert_eq!(l.check(none, Sender::GatewayItself(g), 0, 0), Ok(()));
        assert_eq!(
            l.check(none, Sender::GatewayItself(g), 0, 0),
            Err(Level::GatewayDevice)
        );
        for _ in 0..3 {
            assert_eq!(l.check(none, Sender::BehindGateway(g), 0, 0), Ok(()));
        }
        assert_eq!(
            l.check(none, Sender::BehindGateway(g), 0, 0),
            Err(Level::Gateway)
        );
        let (own, behind) = l.session_limits(true);
        assert_eq!(own.session_limits_json()["messages"], "2:60");
        assert_eq!(behind.unwrap().session_limits_json()["messages"], "3:60");
        assert_eq!(
            behind.unwrap().session_limits_json()["telemetryMessages"],
            serde_json::Value::Null
        );
        assert_eq!(l.session_limits(false).0.msg.to_string(), "1:60");
    }

    #[test]
    fn idle_entries_are_dropped_and_memory_stays_bounded() {
        let l = limits(|c| c.transport_device_msg = "1:1".into());
        let table = l.device.table.as_ref().unwrap();
        for round in 0..20u64 {
            for n in 0..1000u128 {
                let now = round * 2 * S;
                assert_eq!(
                    l.check(
                        || None,
                        Sender::Device(id(u128::from(round) * 1000 + n)),
                        0,
                        now
                    ),
                    Ok(())
                );
            }
        }
        // Only about the last round's devices are live; the rest were swept as their shards grew.
        assert!(table.len() <= 3 * 1000, "{} entries", table.len());
    }

    #[test]
    fn rest_limits_per_tenant_and_customer() {
        let c = RateLimitsConfig {
            rest_tenant: "3:1".into(),
            rest_customer: "1:1".into(),
            ..Default::default()
        };
        let l = RestLimits::new(&c);
        assert!(l.is_active());
        let (t, cu) = (Some(id(1)), Some(id(2)));
        assert_eq!(l.check(t, cu, 0), Ok(()));
        assert_eq!(l.check(t, cu, 0), Err(RestLevel::Customer));
        assert_eq!(l.check(t, None, 0), Ok(()));
        assert_eq!(l.check(t, None, 0), Err(RestLevel::Tenant));
        assert_eq!(l.check(t, None, S), Ok(()));
        assert!(!RestLimits::new(&RateLimitsConfig::default()).is_active());
    }

    #[test]
    fn failed_authentications_block_an_address_for_a_while() {
        let mut c = RateLimitsConfig::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        // Off by default: nothing is recorded.
        let off = FailedAuthLimit::new(&c);
        for _ in 0..100 {
            assert!(!off.failed(a, 0));
        }
        assert!(off.allows(a, 0));
        c.failed_auth_limit_enabled = true;
        let l = FailedAuthLimit::new(&c);
        for i in 0..9 {
            assert!(l.allows(a, i));
            assert!(!l.failed(a, i));
        }
        assert!(l.failed(a, 9));
        assert!(!l.allows(a, 10));
        assert!(l.allows(b, 10));
        assert!(!l.allows(a, 59 * S));
        assert!(l.allows(a, 9 + 60 * S));
        // The count is kept: one more failure blocks again; a success forgets it all.
        assert!(l.failed(a, 61 * S));
        assert!(!l.allows(a, 62 * S));
        l.succeeded(a);
        assert!(l.allows(a, 62 * S));
        assert!(!l.failed(a, 62 * S));
    }

    #[test]
    fn a_capped_table_stops_recording_new_keys_until_old_ones_expire() {
        let table: Table<u32, u32> = Table::capped(10, SHARDS * 2);
        let mut recorded = 0;
        for key in 0..10_000u32 {
            recorded += usize::from(table.with(key, 0, || 0, |v| *v += 1).is_some());
        }
        assert!(
            recorded <= SHARDS * 2,
            "{recorded} entries in a table capped at {}",
            SHARDS * 2
        );
        assert_eq!(table.len(), recorded);
        // A known key is always served; once the old entries are idle, new keys fit again.
        let known = (0..10_000u32)
            .find(|k| table.peek(k, |_, _| ()).is_some())
            .unwrap();
        assert!(table.with(known, 5, || 0, |v| *v).is_some());
        assert!((20_000..30_000u32).any(|k| table.with(k, 2 * S, || 0, |_| ()).is_some()));
    }
}
