//! Device-profile alarm rules in the processors (reference section 5): every applied record of a device
//! whose profile has `profileData.alarms` goes through the `rules` crate's evaluator, and the transitions
//! it returns are written to the alarm store (one active alarm per device and type).
//!
//! Rule state lives with the processor of the device's partition, like the records it is built from: in
//! memory, rebuilt by the replay after a restart (ThingsBoard does not persist it either unless told to).
//! Alarms themselves are stored by the entity store as they change, so a replay that re-evaluates a
//! record finds the alarm it raised and updates it instead of raising a second one.
//!
//! Devices without alarm rules cost one map lookup per record. Profiles are parsed once and cached until a
//! profile changes (a generation counter the REST handlers bump, `Ingest::profiles_changed`); a saved or
//! deleted device is forgotten by its own processor (`Ingest::device_changed`), so its next record reads
//! its profile again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fleetwire_entities::{AlarmSeverity, Entities, Propagation};
use fleetwire_model::record::AttributeScope;
use fleetwire_model::Value;
use fleetwire_rules::{
    evaluate, ActiveAlarm, DeviceState, EntityField, Environment, Input, KeyKind, ProfileAlarms,
    Severity, Transition,
};
use fleetwire_tsdb::Tsdb;
use uuid::Uuid;

use super::attributes::AttributeStore;
use crate::activity::Activity;

/// How often DURATION rules are re-checked without new data (ThingsBoard: 60 s).
pub const TICK_INTERVAL_MS: i64 = 60_000;

/// A device the processor has seen: a null pointer when its profile has no rules (most devices), the rule
/// state behind a box otherwise.
struct Tracked {
    /// `None`: the device's profile has no alarm rules.
    rules: Option<Box<WithRules>>,
}

struct WithRules {
    tenant: Uuid,
    rules: Arc<ProfileAlarms>,
    state: DeviceState,
}

pub(super) struct AlarmRules {
    entities: Entities,
    activity: Arc<Activity>,
    /// Bumped when a device profile changes.
    profiles_generation: Arc<AtomicU64>,
    seen_profiles: u64,
    profiles: HashMap<Uuid, Option<Arc<ProfileAlarms>>>,
    devices: HashMap<Uuid, Tracked>,
    last_tick: i64,
}

fn to_store(severity: Severity) -> AlarmSeverity {
    match severity {
        Severity::Critical => AlarmSeverity::Critical,
        Severity::Major => AlarmSeverity::Major,
        Severity::Minor => AlarmSeverity::Minor,
        Severity::Warning => AlarmSeverity::Warning,
        Severity::Indeterminate => AlarmSeverity::Indeterminate,
    }
}

fn from_store(severity: AlarmSeverity) -> Severity {
    match severity {
        AlarmSeverity::Critical => Severity::Critical,
        AlarmSeverity::Major => Severity::Major,
        AlarmSeverity::Minor => Severity::Minor,
        AlarmSeverity::Warning => Severity::Warning,
        AlarmSeverity::Indeterminate => Severity::Indeterminate,
    }
}

impl AlarmRules {
    pub fn new(
        entities: Entities,
        profiles_generation: Arc<AtomicU64>,
        activity: Arc<Activity>,
    ) -> AlarmRules {
        AlarmRules {
            entities,
            activity,
            seen_profiles: profiles_generation.load(Ordering::Acquire),
            profiles_generation,
            profiles: HashMap::new(),
            devices: HashMap::new(),
            last_tick: 0,
        }
    }

    /// The parsed alarm rules of a profile; a profile whose rules do not parse has none (and says so once).
    fn profile(&mut self, profile_id: Uuid) -> Option<Arc<ProfileAlarms>> {
        if let Some(cached) = self.profiles.get(&profile_id) {
            return cached.clone();
        }
        let rules = match self.entities.device_profile(profile_id) {
            Ok(Some(profile)) => match profile.profile_data.get("alarms") {
                None | Some(serde_json::Value::Null) => None,
                Some(alarms) => match ProfileAlarms::parse(alarms) {
                    Ok(rules) if rules.is_empty() => None,
                    Ok(rules) => Some(Arc::new(rules)),
                    Err(e) => {
                        tracing::warn!(profile = %profile_id, error = %e, "alarm rules of a device profile do not parse; ignoring them");
                        None
                    }
                },
            },
            Ok(None) => None,
            Err(e) => {
                // Not cached: the next record asks again.
                tracing::warn!(profile = %profile_id, error = %e, "cannot read a device profile");
                return None;
            }
        };
        self.profiles.insert(profile_id, rules.clone());
        rules
    }

    /// Applies one input of `device` and writes the alarm transitions it causes.
    pub fn on_input(
        &mut self,
        tsdb: &Tsdb,
        attributes: &AttributeStore,
        device: Uuid,
        input: Input<'_>,
        now: i64,
    ) {
        self.follow_changes();
        // The common case, a known device without rules, costs one lookup.
        if let Some(Tracked { rules: None, .. }) = self.devices.get(&device) {
            return;
        }
        if !self.devices.contains_key(&device) {
            // First record of this device since start or since its rules changed.
            let Some(auth) = self.entities.device_auth(device) else {
                return;
            };
            let rules = self.profile(auth.profile_id);
            let reads_activity = rules
                .as_ref()
                .is_some_and(|r| r.references(KeyKind::Attribute, crate::activity::ACTIVE));
            if matches!(input, Input::Activity { .. }) && !reads_activity {
                // A connecting device is not remembered here unless its rules read `active`: idle
                // connections stay cheap. Its first telemetry adds it.
                return;
            }
            let rules = rules.map(|rules| {
                Box::new(WithRules {
                    tenant: auth.tenant_id,
                    rules,
                    state: DeviceState::default(),
                })
            });
            self.devices.insert(device, Tracked { rules });
        }
        let Some(Tracked {
            rules: Some(with_rules),
            ..
        }) = self.devices.get_mut(&device)
        else {
            return;
        };
        let WithRules {
            tenant,
            rules,
            state,
        } = &mut **with_rules;
        let env = Env {
            device,
            tenant: *tenant,
            entities: &self.entities,
            activity: &self.activity,
            tsdb,
            attributes,
        };
        let transitions = evaluate(rules, state, &env, now, input);
        for transition in transitions {
            apply(&self.entities, device, transition, now);
        }
    }

    /// A profile changed: its rules are parsed again and every device's rule state starts over.
    fn follow_changes(&mut self) {
        let profiles = self.profiles_generation.load(Ordering::Acquire);
        if profiles != self.seen_profiles {
            self.seen_profiles = profiles;
            self.profiles.clear();
            self.devices.clear();
        }
    }

    /// A device was saved or deleted: it starts over with the profile it has now at its next record.
    pub fn forget(&mut self, device: Uuid) {
        self.devices.remove(&device);
    }

    /// The periodic re-check of DURATION rules, at most once per [`TICK_INTERVAL_MS`].
    pub fn tick(&mut self, tsdb: &Tsdb, attributes: &AttributeStore, now: i64) {
        if now - self.last_tick < TICK_INTERVAL_MS {
            return;
        }
        self.last_tick = now;
        let due: Vec<Uuid> = self
            .devices
            .iter()
            .filter(|(_, t)| {
                t.rules
                    .as_ref()
                    .is_some_and(|r| r.rules.has_duration_rules())
            })
            .map(|(id, _)| *id)
            .collect();
        for device in due {
            self.on_input(tsdb, attributes, device, Input::Tick, now);
        }
    }
}

/// Writes one transition to the alarm store.
fn apply(entities: &Entities, device: Uuid, transition: Transition, now: i64) {
    let result = match transition {
        Transition::Create {
            alarm_type,
            severity,
            start_ts,
            details,
            propagate,
            propagate_to_owner,
            propagate_to_tenant,
            propagate_relation_types,
        } => {
            let propagation = Propagation {
                propagate,
                to_owner: propagate_to_owner,
                to_tenant: propagate_to_tenant,
                relation_types: propagate_relation_types,
            };
            entities
                .raise_alarm(
                    &fleetwire_entities::AlarmRaise {
                        device_id: device,
                        alarm_type: &alarm_type,
                        severity: to_store(severity),
                        details: Some(details),
                        data_ts: start_ts,
                        propagation: &propagation,
                    },
                    now,
                )
                .map(|_| ())
        }
        Transition::Update {
            alarm_type,
            severity,
            details,
            end_ts,
            ..
        } => entities
            .raise_alarm(
                &fleetwire_entities::AlarmRaise {
                    device_id: device,
                    alarm_type: &alarm_type,
                    severity: to_store(severity),
                    details,
                    data_ts: end_ts,
                    propagation: &Propagation::default(),
                },
                end_ts,
            )
            .map(|_| ()),
        Transition::Clear {
            alarm_type,
            details,
            clear_ts,
        } => entities
            .clear_active_alarm(device, &alarm_type, details, clear_ts)
            .map(|_| ()),
    };
    if let Err(e) = result {
        tracing::warn!(%device, error = %e, "cannot write an alarm transition");
    }
}

/// What the evaluator reads: the device's fields, latest values and attributes, its tenant's attributes,
/// and its active alarms.
struct Env<'a> {
    device: Uuid,
    tenant: Uuid,
    entities: &'a Entities,
    activity: &'a Activity,
    tsdb: &'a Tsdb,
    attributes: &'a AttributeStore,
}

impl Environment for Env<'_> {
    fn entity_field(&self, field: EntityField) -> Option<Value> {
        let device = self.entities.device_by_id(self.device).ok()??;
        match field {
            EntityField::Name => Some(Value::Str(device.name)),
            EntityField::Type => Some(Value::Str(device.profile_name)),
            EntityField::Label => device.label.filter(|l| !l.is_empty()).map(Value::Str),
            EntityField::CreatedTime => Some(Value::Long(device.created_time)),
        }
    }

    fn latest_telemetry(&self, key: &str) -> Option<Value> {
        self.tsdb
            .latest(self.device.as_u128(), &[key])
            .into_iter()
            .next()
            .map(|l| l.value)
    }

    fn device_attribute(&self, scope: AttributeScope, key: &str) -> Option<Value> {
        if scope == AttributeScope::Server && crate::activity::is_activity_key(key) {
            return self.activity.value(self.device, key);
        }
        self.attributes
            .get(self.device.as_u128(), scope, &[key])
            .into_iter()
            .next()
            .map(|a| a.value)
    }

    /// Customers arrive with issue 5; until then no device has one.
    fn customer_attribute(&self, _key: &str) -> Option<Value> {
        None
    }

    fn tenant_attribute(&self, key: &str) -> Option<Value> {
        self.attributes
            .get(self.tenant.as_u128(), AttributeScope::Server, &[key])
            .into_iter()
            .next()
            .map(|a| a.value)
    }

    fn current_alarm(&self, alarm_type: &str) -> Option<ActiveAlarm> {
        self.entities
            .active_alarm(self.device, alarm_type)
            .map(|a| ActiveAlarm {
                severity: from_store(a.severity),
                acknowledged: a.acknowledged,
            })
    }
}
