//! Alarm rules of device profiles, evaluated as ThingsBoard (≤ 4.2) evaluates `profileData.alarms`
//! in its "Device Profile" rule node (reference `thingsboard-api.md` section 5).
//!
//! The crate is a pure, deterministic state machine: no I/O, no clock, no global state. Time is an
//! argument, the server's stores are behind the [`Environment`] trait, and the result of every input
//! is a list of [`Transition`]s for the server to apply to its alarm store.
//!
//! # API
//!
//! - [`ProfileAlarms::parse`] turns the `alarms` JSON array of a device profile into rules, or a
//!   [`RuleError`] whose message a REST API returns as a 400. Parse once per profile version and share
//!   it between the profile's devices.
//! - [`DeviceState`] is what one device remembers: the snapshot of the latest values of every key the
//!   rules read and each rule's counters (`eventCount`, `lastEventTs`, `duration`). Start with
//!   `DeviceState::default()`; the first input that touches a referenced key seeds the snapshot from
//!   the environment ([`Environment::latest_telemetry`], [`Environment::device_attribute`] for the
//!   three scopes, [`Environment::entity_field`]), as ThingsBoard loads it from the database on the
//!   first message of a device.
//! - [`evaluate`] takes one [`Input`] (a telemetry message, an attribute update or delete, an
//!   activity change, the periodic tick, an alarm event) at time `now` and returns the transitions:
//!   [`Transition::Create`], [`Transition::Update`] or [`Transition::Clear`].
//! - The "current alarm" of (device, alarm type) is not kept here: the server's alarm store owns it
//!   and [`Environment::current_alarm`] reports it. Within one call (a telemetry message with several
//!   timestamps) the evaluator remembers what it has just proposed.
//!
//! ```
//! use fleetwire_model::record::AttributeScope;
//! use fleetwire_model::{Kv, TsRecord, Value};
//! use fleetwire_rules::{evaluate, ActiveAlarm, DeviceState, EntityField, Environment, Input,
//!     ProfileAlarms, Severity, Transition};
//!
//! struct NoAlarms;
//! impl Environment for NoAlarms {
//!     fn entity_field(&self, _: EntityField) -> Option<Value> { None }
//!     fn latest_telemetry(&self, _: &str) -> Option<Value> { None }
//!     fn device_attribute(&self, _: AttributeScope, _: &str) -> Option<Value> { None }
//!     fn customer_attribute(&self, _: &str) -> Option<Value> { None }
//!     fn tenant_attribute(&self, _: &str) -> Option<Value> { None }
//!     fn current_alarm(&self, _: &str) -> Option<ActiveAlarm> { None }
//! }
//!
//! let alarms = serde_json::json!([{
//!     "id": "1", "alarmType": "battery low",
//!     "createRules": {"CRITICAL": {"condition": {"condition": [{
//!         "key": {"type": "TIME_SERIES", "key": "batteryLevel"}, "valueType": "NUMERIC",
//!         "predicate": {"type": "NUMERIC", "operation": "LESS_OR_EQUAL",
//!                       "value": {"defaultValue": 20}}}]}}}
//! }]);
//! let rules = ProfileAlarms::parse(&alarms).unwrap();
//! let mut state = DeviceState::default();
//! let record = TsRecord { ts: 1_000, kvs: vec![Kv { key: "batteryLevel".into(), value: Value::Long(15) }] };
//! let out = evaluate(&rules, &mut state, &NoAlarms, 1_000, Input::Telemetry(&[record]));
//! assert!(matches!(&out[..], [Transition::Create { severity: Severity::Critical, start_ts: 1_000, .. }]));
//! ```
//!
//! # Cost
//!
//! Parsing maps every key to a slot of the snapshot and gives each rule a bit mask of the keys that
//! trigger it. An input whose keys no rule reads returns after a scan of the referenced keys, without
//! allocating. A relevant telemetry value costs a slot lookup, a compare and (if it changed) a clone
//! of the value; evaluation allocates only for string predicates, dynamic values from the customer or
//! tenant, and the transitions it returns.
//!
//! Architecture invariant: no tokio, no I/O, no clock; depends only on `fleetwire-model`, serde and
//! jiff (with its bundled time-zone database, so schedules do not depend on the host).

mod convert;
mod error;
mod evaluate;
mod json;
mod predicate;
mod profile;
mod rule;
mod schedule;
mod state;

pub use error::RuleError;
pub use evaluate::{evaluate, ActiveAlarm, AlarmEvent, Environment, Input, Transition};
pub use profile::{EntityField, KeyKind, ProfileAlarms, Severity};
pub use state::{DeviceState, RuleCounters};
