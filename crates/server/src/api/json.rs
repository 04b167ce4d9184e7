//! Pieces of ThingsBoard's JSON shared by the resources: entity ids in and out.

use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

/// `{"entityType":"DEVICE","id":"<uuid>"}`.
pub fn entity_id(entity_type: &str, id: Uuid) -> Value {
    json!({"entityType": entity_type, "id": id})
}

/// An entity id, or `null`.
pub fn opt_entity_id(entity_type: &str, id: Option<Uuid>) -> Value {
    id.map_or(Value::Null, |id| entity_id(entity_type, id))
}

/// An entity id as clients send it; only `id` is read (`entityType` is implied by the field).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct IdIn {
    pub id: Option<Uuid>,
}

/// The UUID of an optional id object (`null`, `{}` and `{"id":null}` all mean none).
pub fn uuid_of(id: &Option<IdIn>) -> Option<Uuid> {
    id.as_ref().and_then(|i| i.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_in_and_out() {
        let id = Uuid::new_v4();
        let out = entity_id("DEVICE", id);
        assert_eq!(out["entityType"], "DEVICE");
        assert_eq!(out["id"], id.to_string());
        assert_eq!(opt_entity_id("DASHBOARD", None), Value::Null);
        let parsed: Option<IdIn> = serde_json::from_value(out).unwrap();
        assert_eq!(uuid_of(&parsed), Some(id));
        let null: Option<IdIn> = serde_json::from_value(Value::Null).unwrap();
        assert_eq!(uuid_of(&null), None);
        assert!(serde_json::from_value::<IdIn>(json!({"id": "nope"})).is_err());
    }
}
