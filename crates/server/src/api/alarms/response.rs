//! ThingsBoard's Alarm and AlarmInfo JSON, as every alarm endpoint answers.

use fleetwire_entities::{Alarm, AlarmInfo};
use serde_json::{json, Value};

use crate::api::json::{entity_id, opt_entity_id};

/// ThingsBoard's Alarm JSON: every field, nulls included; `name` is the type, `status` is derived.
pub fn alarm_json(a: &Alarm) -> Value {
    json!({
        "id": entity_id("ALARM", a.id),
        "createdTime": a.created_time,
        "tenantId": entity_id("TENANT", a.tenant_id),
        "customerId": entity_id("CUSTOMER", a.customer_id),
        "type": a.alarm_type,
        "originator": entity_id(&a.originator.entity_type, a.originator.id),
        "severity": a.severity.as_str(),
        "acknowledged": a.acknowledged,
        "cleared": a.cleared,
        "assigneeId": opt_entity_id("USER", a.assignee_id),
        "startTs": a.start_ts,
        "endTs": a.end_ts,
        "ackTs": a.ack_ts,
        "clearTs": a.clear_ts,
        "assignTs": a.assign_ts,
        "details": a.details,
        "propagate": a.propagation.propagate,
        "propagateToOwner": a.propagation.to_owner,
        "propagateToTenant": a.propagation.to_tenant,
        "propagateRelationTypes": a.propagation.relation_types,
        "name": a.alarm_type,
        "status": a.status().as_str(),
    })
}

/// AlarmInfo = Alarm + originator name, label, display name, and the assignee (or null).
pub fn alarm_info_json(info: &AlarmInfo) -> Value {
    let mut out = alarm_json(&info.alarm);
    out["originatorName"] = json!(info.originator_name);
    out["originatorLabel"] = json!(info.originator_label);
    out["originatorDisplayName"] = json!(info.originator_display_name());
    out["assignee"] = info.assignee.as_ref().map_or(Value::Null, |a| {
        json!({
            "id": entity_id("USER", a.id),
            "firstName": a.first_name,
            "lastName": a.last_name,
            "email": a.email,
        })
    });
    out
}

#[cfg(test)]
mod tests {
    use fleetwire_entities::{AlarmSeverity, Originator, Propagation};
    use uuid::Uuid;

    use super::*;

    #[test]
    fn alarm_json_has_every_field() {
        let alarm = Alarm {
            id: Uuid::new_v4(),
            created_time: 1,
            tenant_id: Uuid::new_v4(),
            customer_id: fleetwire_entities::NULL_UUID,
            alarm_type: "battery low".into(),
            originator: Originator::device(Uuid::new_v4()),
            severity: AlarmSeverity::Critical,
            acknowledged: true,
            cleared: false,
            assignee_id: None,
            start_ts: 2,
            end_ts: 3,
            ack_ts: 4,
            clear_ts: 0,
            assign_ts: 0,
            details: Value::Null,
            propagation: Propagation::default(),
        };
        let out = alarm_json(&alarm);
        assert_eq!(out.as_object().unwrap().len(), 22);
        assert_eq!(
            (out["name"].clone(), out["status"].clone()),
            (json!("battery low"), json!("ACTIVE_ACK"))
        );
        assert_eq!(
            (out["assigneeId"].clone(), out["details"].clone()),
            (Value::Null, Value::Null)
        );
        assert_eq!(out["propagateRelationTypes"], json!([]));
        let info = alarm_info_json(&AlarmInfo {
            alarm,
            originator_name: Some("meter".into()),
            originator_label: Some(" ".into()),
            assignee: None,
        });
        assert_eq!(info.as_object().unwrap().len(), 26);
        assert_eq!(
            info["originatorDisplayName"], "meter",
            "a blank label falls back to the name"
        );
    }
}
