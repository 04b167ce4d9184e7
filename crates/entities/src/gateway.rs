//! Devices behind a gateway (reference 2): created on a gateway's first message naming them, in the
//! gateway's tenant and customer, with the profile named by the message's `type` (created if missing), and
//! remembering the gateway that last connected them (`additionalInfo.lastConnectedGateway`).

use serde_json::{json, Value};
use uuid::Uuid;

use crate::{DeviceDraft, Entities, EntityError};

/// The profile of a sub-device whose gateway names no type.
pub const DEFAULT_SUB_DEVICE_TYPE: &str = "default";

impl Entities {
    /// The id of the tenant's device `name`, created if missing (with profile `type_name`, or
    /// [`DEFAULT_SUB_DEVICE_TYPE`]); its `lastConnectedGateway` is set to `gateway_id` if it was another.
    pub fn gateway_device(
        &self,
        tenant_id: Uuid,
        gateway_id: Uuid,
        name: &str,
        type_name: Option<&str>,
    ) -> Result<Uuid, EntityError> {
        if name.trim().is_empty() {
            return Err(EntityError::Invalid(
                "Device name should be specified!".into(),
            ));
        }
        let gateway = gateway_id.to_string();
        // Two gateways may name the same new device at once: the loser of the insert finds the winner's.
        for _ in 0..2 {
            if let Some(device) = self.device_by_name(tenant_id, name)? {
                let current = device
                    .additional_info
                    .as_ref()
                    .and_then(|info| info.get("lastConnectedGateway"))
                    .and_then(Value::as_str);
                if current != Some(gateway.as_str()) {
                    let mut info = match device.additional_info.clone() {
                        Some(Value::Object(map)) => map,
                        _ => Default::default(),
                    };
                    info.insert(
                        "lastConnectedGateway".into(),
                        Value::String(gateway.clone()),
                    );
                    self.save_device(
                        tenant_id,
                        &DeviceDraft {
                            id: Some(device.id),
                            version: None,
                            name: device.name.clone(),
                            label: device.label.clone(),
                            profile_id: Some(device.profile_id),
                            type_name: None,
                            device_data: Some(device.device_data.clone()),
                            firmware_id: device.firmware_id,
                            software_id: device.software_id,
                            external_id: device.external_id,
                            additional_info: Some(Value::Object(info)),
                        },
                        None,
                    )?;
                }
                return Ok(device.id);
            }
            let draft = DeviceDraft {
                type_name: Some(
                    type_name
                        .filter(|t| !t.trim().is_empty())
                        .unwrap_or(DEFAULT_SUB_DEVICE_TYPE)
                        .to_string(),
                ),
                additional_info: Some(json!({"lastConnectedGateway": gateway})),
                ..DeviceDraft::named(name)
            };
            match self.save_device(tenant_id, &draft, None) {
                Ok(device) => {
                    // A new device belongs to the gateway's customer, as in ThingsBoard.
                    let customer = self
                        .device_auth(gateway_id)
                        .map_or(crate::NULL_UUID, |g| g.customer_id);
                    if customer != crate::NULL_UUID {
                        self.assign_device(tenant_id, device.id, Some(customer))?;
                    }
                    return Ok(device.id);
                }
                Err(EntityError::AlreadyExists(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(EntityError::AlreadyExists(format!(
            "Device with name {name} was created and deleted concurrently"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_with_its_type_and_follows_the_gateway() {
        let e = Entities::open_in_memory().unwrap();
        let tenant = e.create_tenant("T").unwrap().id;
        let (gw1, gw2) = (Uuid::new_v4(), Uuid::new_v4());
        let id = e
            .gateway_device(tenant, gw1, "Device A", Some("thermostat"))
            .unwrap();
        assert_eq!(e.gateway_device(tenant, gw1, "Device A", None).unwrap(), id);
        let device = e.device_by_id(id).unwrap().unwrap();
        assert_eq!(device.profile_name, "thermostat");
        assert_eq!(
            device.additional_info.unwrap()["lastConnectedGateway"],
            gw1.to_string()
        );
        assert!(
            e.device_auth(id).is_some(),
            "the transports know it at once"
        );

        e.gateway_device(tenant, gw2, "Device A", None).unwrap();
        let moved = e.device_by_id(id).unwrap().unwrap();
        assert_eq!(
            moved.additional_info.unwrap()["lastConnectedGateway"],
            gw2.to_string()
        );
        assert_eq!(moved.profile_name, "thermostat", "the profile stays");

        let plain = e.gateway_device(tenant, gw1, "Device B", None).unwrap();
        assert_eq!(
            e.device_by_id(plain).unwrap().unwrap().customer_id,
            crate::NULL_UUID
        );

        // A gateway of a customer creates devices of that customer.
        let customer = e
            .save_customer(
                tenant,
                &crate::CustomerDraft {
                    title: "C".into(),
                    ..Default::default()
                },
            )
            .unwrap()
            .id;
        let gateway = e
            .save_device(tenant, &crate::DeviceDraft::named("gw"), None)
            .unwrap()
            .id;
        e.assign_device(tenant, gateway, Some(customer)).unwrap();
        let owned = e.gateway_device(tenant, gateway, "Device C", None).unwrap();
        assert_eq!(
            e.device_by_id(owned).unwrap().unwrap().customer_id,
            customer
        );
        assert_eq!(
            e.device_by_id(plain).unwrap().unwrap().profile_name,
            DEFAULT_SUB_DEVICE_TYPE
        );
        assert!(matches!(
            e.gateway_device(tenant, gw1, " ", None),
            Err(EntityError::Invalid(_))
        ));
    }
}
