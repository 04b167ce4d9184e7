//! Device-profile alarm rules in the processors (reference section 5): every applied record of a device
//! whose profile has `profileData.alarms` goes through the `rules` crate's evaluator, and the transitions
//! it returns are written to the alarm store (one active alarm per device and type).
//!
//! Rule state lives with the processor of the device's partition, like the records it is built from: in
//! memory, rebuilt by the replay after a restart (ThingsBoard does not persist it either unless told to).
//!
//! Transitions are written in batches, not one SQLite commit per message: they wait in `pending` (and
//! the evaluator sees them through an overlay on the store's active alarms) until the batch is 100 ms
//! old, the processor has caught up with the log, a device event arrives, or the log is checkpointed.
//! Each batch is one transaction that also moves the partition's watermark, the log offset below which
//! records have had their transitions written. A batch that cannot be written stays pending and is retried,
//! and the log is not checkpointed past it meanwhile. A replay after a crash evaluates the records below the
//! watermark again, to rebuild the rule state, but writes nothing they cause: an alarm a user cleared
//! after it was raised is not raised again, and none is raised twice.
//!
//! Devices without alarm rules cost one map lookup per record. Profiles are parsed once and cached until a
//! profile changes (a generation counter the REST handlers bump, `Ingest::profiles_changed`); a saved or
//! deleted device is forgotten by its own processor (`Ingest::device_changed`), so its next record reads
//! its profile again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fleetwire_entities::{AlarmSeverity, Entities, EntityError, Propagation, RuleWrite};
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

/// The oldest a batch of transitions gets while the processor is busy.
const BATCH_AGE_MAX_MS: i64 = 100;

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

/// Of one device: alarm type → the active alarm its pending transitions leave (`None`: cleared).
type PendingAlarms = Vec<(Arc<str>, Option<ActiveAlarm>)>;

type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

pub(super) struct AlarmRules {
    entities: Entities,
    activity: Arc<Activity>,
    /// Bumped when a device profile changes.
    profiles_generation: Arc<AtomicU64>,
    seen_profiles: u64,
    profiles: HashMap<Uuid, Option<Arc<ProfileAlarms>>>,
    /// Looked up for every record applied; device ids are server-made UUIDs, so foldhash, not SipHash.
    devices: FastMap<Uuid, Tracked>,
    last_tick: i64,
    partition: u16,
    /// Transitions not yet written, in order.
    pending: Vec<RuleWrite>,
    /// When the oldest pending transition was made (wall clock, ms).
    pending_since: i64,
    /// What `pending` will make of the store's active alarms: device → (type, active alarm or none).
    overlay: FastMap<Uuid, PendingAlarms>,
    /// Records below this offset had their transitions written before a restart.
    watermark: u64,
    /// The log offset after the last applied record: the watermark the next batch writes.
    position: u64,
    /// The input being evaluated is a record below `watermark`: its transitions are not written again.
    replayed: bool,
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
        partition: u16,
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
            devices: FastMap::default(),
            last_tick: 0,
            partition,
            pending: Vec::new(),
            pending_since: 0,
            overlay: FastMap::default(),
            watermark: 0,
            position: 0,
            replayed: false,
        }
    }

    /// The processor (re)starts reading the log at `from`: writes what an earlier run left pending and
    /// reads how far transitions were written before.
    pub fn start(&mut self, from: u64) -> Result<(), EntityError> {
        // What an earlier run could not write is replayed from the log instead.
        self.pending.clear();
        self.overlay.clear();
        self.watermark = self.entities.rule_watermark(self.partition)?;
        self.position = from;
        self.replayed = false;
        Ok(())
    }

    /// The next inputs come from the record at `offset`, followed by `next_offset`.
    pub fn at_record(&mut self, offset: u64, next_offset: u64) {
        self.replayed = offset < self.watermark;
        self.position = next_offset;
    }

    /// The next inputs are not records (device events, the periodic tick): they are always written.
    pub fn at_event(&mut self) {
        self.replayed = false;
    }

    /// Writes the pending transitions if the oldest is [`BATCH_AGE_MAX_MS`] old.
    pub fn flush_if_due(&mut self, now: i64) {
        if !self.pending.is_empty() && now - self.pending_since >= BATCH_AGE_MAX_MS && !self.flush()
        {
            // Not again for another batch age.
            self.pending_since = now;
        }
    }

    /// Writes the pending transitions in one transaction with the watermark. On failure they stay pending
    /// (and the overlay with them) and are tried again at the next flush; the caller must not checkpoint the
    /// log past them meanwhile, so even a crash before the retry replays them. Returns whether nothing is
    /// pending any more.
    pub fn flush(&mut self) -> bool {
        if self.pending.is_empty() {
            return true;
        }
        match self
            .entities
            .write_rule_batch(self.partition, self.position, &self.pending)
        {
            Ok(_) => {
                count_transitions(&self.pending);
                self.pending.clear();
                self.overlay.clear();
                true
            }
            Err(e) => {
                tracing::warn!(partition = self.partition, transitions = self.pending.len(), error = %e, "cannot write alarm transitions; retrying at the next flush");
                false
            }
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

    /// Starts loading `device`'s tracked state, for an input a few records from now; then
    /// [`AlarmRules::prefetch_state`], a little later, what evaluating it reads. A hint only.
    pub fn prefetch_device(&self, device: Uuid) {
        if let Some(Tracked {
            rules: Some(with_rules),
        }) = self.devices.get(&device)
        {
            fleetwire_model::hint::prefetch_object(&**with_rules);
        }
    }

    /// See [`AlarmRules::prefetch_device`].
    pub fn prefetch_state(&self, device: Uuid) {
        if let Some(Tracked {
            rules: Some(with_rules),
        }) = self.devices.get(&device)
        {
            with_rules.state.prefetch();
        }
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
        let known = match self.devices.get(&device) {
            Some(Tracked { rules: None, .. }) => return,
            Some(_) => true,
            None => false,
        };
        if !known {
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
            overlay: self.overlay.get(&device).map(Vec::as_slice),
            tsdb,
            attributes,
        };
        let transitions = evaluate(rules, state, &env, now, input);
        if transitions.is_empty() || self.replayed {
            return;
        }
        if self.pending.is_empty() {
            self.pending_since = now;
        }
        for transition in transitions {
            let (alarm_type, active) = self.queue(device, transition, now);
            let types = self.overlay.entry(device).or_default();
            match types.iter_mut().find(|(t, _)| *t == alarm_type) {
                Some(entry) => entry.1 = active,
                None => types.push((alarm_type, active)),
            }
        }
    }

    /// The active alarm of (device, type) once the pending transitions are written.
    fn current(&self, device: Uuid, alarm_type: &str) -> Option<ActiveAlarm> {
        if let Some((_, pending)) = self
            .overlay
            .get(&device)
            .and_then(|types| types.iter().find(|(t, _)| &**t == alarm_type))
        {
            return *pending;
        }
        self.entities
            .active_alarm(device, alarm_type)
            .map(|a| ActiveAlarm {
                severity: from_store(a.severity),
                acknowledged: a.acknowledged,
            })
    }

    /// Queues the write of one transition; returns its alarm type and the active alarm it leaves.
    fn queue(
        &mut self,
        device: Uuid,
        transition: Transition,
        now: i64,
    ) -> (Arc<str>, Option<ActiveAlarm>) {
        match transition {
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
                self.pending.push(RuleWrite::Raise {
                    device_id: device,
                    alarm_type: alarm_type.to_string(),
                    severity: to_store(severity),
                    details: Some(details),
                    data_ts: start_ts,
                    propagation: Propagation {
                        propagate,
                        to_owner: propagate_to_owner,
                        to_tenant: propagate_to_tenant,
                        relation_types: propagate_relation_types,
                    },
                    now_ms: now,
                });
                let active = ActiveAlarm {
                    severity,
                    acknowledged: false,
                };
                (alarm_type, Some(active))
            }
            Transition::Update {
                alarm_type,
                severity,
                details,
                end_ts,
                ..
            } => {
                self.pending.push(RuleWrite::Update {
                    device_id: device,
                    alarm_type: alarm_type.to_string(),
                    severity: to_store(severity),
                    details,
                    end_ts,
                });
                let acknowledged = self
                    .current(device, &alarm_type)
                    .is_some_and(|a| a.acknowledged);
                let active = ActiveAlarm {
                    severity,
                    acknowledged,
                };
                (alarm_type, Some(active))
            }
            Transition::Clear {
                alarm_type,
                details,
                clear_ts,
            } => {
                self.pending.push(RuleWrite::Clear {
                    device_id: device,
                    alarm_type: alarm_type.to_string(),
                    details,
                    clear_ts,
                });
                (alarm_type, None)
            }
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

/// What the evaluator reads: the device's fields, latest values and attributes, its tenant's attributes,
/// and its active alarms.
struct Env<'a> {
    device: Uuid,
    tenant: Uuid,
    entities: &'a Entities,
    activity: &'a Activity,
    /// Transitions of this device not yet written.
    overlay: Option<&'a [(Arc<str>, Option<ActiveAlarm>)]>,
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

    /// The SERVER attribute of the customer the device is assigned to (none without a customer).
    fn customer_attribute(&self, key: &str) -> Option<Value> {
        let customer = self.entities.device_auth(self.device)?.customer_id;
        if customer == fleetwire_entities::NULL_UUID {
            return None;
        }
        self.attributes
            .get(customer.as_u128(), AttributeScope::Server, &[key])
            .into_iter()
            .next()
            .map(|a| a.value)
    }

    fn tenant_attribute(&self, key: &str) -> Option<Value> {
        self.attributes
            .get(self.tenant.as_u128(), AttributeScope::Server, &[key])
            .into_iter()
            .next()
            .map(|a| a.value)
    }

    fn current_alarm(&self, alarm_type: &str) -> Option<ActiveAlarm> {
        if let Some((_, pending)) = self
            .overlay
            .and_then(|types| types.iter().find(|(t, _)| &**t == alarm_type))
        {
            return *pending;
        }
        self.entities
            .active_alarm(self.device, alarm_type)
            .map(|a| ActiveAlarm {
                severity: from_store(a.severity),
                acknowledged: a.acknowledged,
            })
    }
}
/// Counts written transitions for `/metrics`. A batch replayed after a crash counts again: the counter is
/// of transitions written by this process.
fn count_transitions(written: &[RuleWrite]) {
    use crate::metrics::{alarm_transitions, AlarmTransition};
    for write in written {
        let transition = match write {
            RuleWrite::Raise { .. } => AlarmTransition::Created,
            RuleWrite::Update { .. } => AlarmTransition::Updated,
            RuleWrite::Clear { .. } => AlarmTransition::Cleared,
        };
        alarm_transitions(transition, 1);
    }
}
