//! The device topics of ThingsBoard's MQTT API (reference sections 1.4 and 1.13): what a device PUBLISH
//! means, and which SUBSCRIBE filters are granted.

/// What a device's PUBLISH topic asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceTopic<'a> {
    /// `v1/devices/me/telemetry`, `v2/t`, `v2/t/j`.
    Telemetry,
    /// `v1/devices/me/attributes`, `v2/a`, `v2/a/j`: client-scope attributes.
    Attributes,
    /// `v1/devices/me/attributes/request/{id}` (v1) or `v2/a/req/{id}`.
    AttributesRequest { id: &'a str, v2: bool },
    /// `v1/devices/me/rpc/request/{id}` (v1) or `v2/r/req/{id}`: client-side RPC.
    RpcRequest { id: &'a str, v2: bool },
    /// `v1/devices/me/rpc/response/{id}` (v1) or `v2/r/res/{id}`: reply to a server-side RPC.
    RpcResponse { id: &'a str, v2: bool },
    /// `v1/devices/me/claim`.
    Claim,
    /// Any other topic: PUBACK 0x90 on MQTT 5, a plain PUBACK on 3.x (as ThingsBoard does).
    Unknown,
}

/// What a gateway's PUBLISH on `v1/gateway/...` asks for (reference 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatewayTopic {
    Connect,
    Disconnect,
    Telemetry,
    Attributes,
    AttributesRequest,
    Rpc,
    Claim,
}

/// The gateway topic a PUBLISH names, if any.
pub fn gateway_topic(topic: &str) -> Option<GatewayTopic> {
    Some(match topic {
        "v1/gateway/connect" => GatewayTopic::Connect,
        "v1/gateway/disconnect" => GatewayTopic::Disconnect,
        "v1/gateway/telemetry" => GatewayTopic::Telemetry,
        "v1/gateway/attributes" => GatewayTopic::Attributes,
        "v1/gateway/attributes/request" => GatewayTopic::AttributesRequest,
        "v1/gateway/rpc" => GatewayTopic::Rpc,
        "v1/gateway/claim" => GatewayTopic::Claim,
        _ => return None,
    })
}

/// Classifies a PUBLISH topic. Protobuf variants (`.../p`) are not supported and count as unknown.
pub fn classify(topic: &str) -> DeviceTopic<'_> {
    match topic {
        "v1/devices/me/telemetry" | "v2/t" | "v2/t/j" => return DeviceTopic::Telemetry,
        "v1/devices/me/attributes" | "v2/a" | "v2/a/j" => return DeviceTopic::Attributes,
        "v1/devices/me/claim" => return DeviceTopic::Claim,
        _ => {}
    }
    let id_after = |prefix: &str| {
        topic
            .strip_prefix(prefix)
            .filter(|id| !id.is_empty() && !id.contains('/'))
    };
    if let Some(id) = id_after("v1/devices/me/attributes/request/") {
        return DeviceTopic::AttributesRequest { id, v2: false };
    }
    if let Some(id) = id_after("v1/devices/me/rpc/request/") {
        return DeviceTopic::RpcRequest { id, v2: false };
    }
    if let Some(id) = id_after("v1/devices/me/rpc/response/") {
        return DeviceTopic::RpcResponse { id, v2: false };
    }
    if let Some(id) = id_after("v2/a/req/").or_else(|| id_after("v2/a/req/j/")) {
        return DeviceTopic::AttributesRequest { id, v2: true };
    }
    if let Some(id) = id_after("v2/r/req/").or_else(|| id_after("v2/r/req/j/")) {
        return DeviceTopic::RpcRequest { id, v2: true };
    }
    if let Some(id) = id_after("v2/r/res/").or_else(|| id_after("v2/r/res/j/")) {
        return DeviceTopic::RpcResponse { id, v2: true };
    }
    DeviceTopic::Unknown
}

/// The filters a device may subscribe to (matched by exact string, as ThingsBoard does).
const DEVICE_FILTERS: &[&str] = &[
    "v1/devices/me/attributes",
    "v1/devices/me/attributes/response/+",
    "v1/devices/me/rpc/request/+",
    "v1/devices/me/rpc/response/+",
    "v2/fw/response/+/chunk/+",
    "v2/fw/error",
    "v2/sw/response/+/chunk/+",
    "v2/sw/error",
    "v2/a",
    "v2/a/j",
    "v2/a/res/+",
    "v2/a/res/j/+",
    "v2/r/req/+",
    "v2/r/req/j/+",
    "v2/r/res/+",
    "v2/r/res/j/+",
];

/// Filters a gateway may subscribe to in addition to the device filters.
const GATEWAY_FILTERS: &[&str] = &[
    "v1/gateway/attributes",
    "v1/gateway/rpc",
    "v1/gateway/attributes/response",
];

/// Whether a SUBSCRIBE filter is granted for a device (or gateway) session.
/// The subscriptions that receive SHARED attribute updates (reference 1.4, 1.13).
pub fn is_attribute_updates(filter: &str) -> bool {
    matches!(filter, "v1/devices/me/attributes" | "v2/a" | "v2/a/j")
}

/// The subscriptions that receive server-side RPC requests (reference 1.8, 1.13).
pub fn is_rpc_requests(filter: &str) -> bool {
    matches!(
        filter,
        "v1/devices/me/rpc/request/+" | "v2/r/req/+" | "v2/r/req/j/+"
    )
}

pub fn subscription_allowed(filter: &str, gateway: bool) -> bool {
    DEVICE_FILTERS.contains(&filter) || (gateway && GATEWAY_FILTERS.contains(&filter))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_device_topics() {
        assert_eq!(classify("v1/devices/me/telemetry"), DeviceTopic::Telemetry);
        assert_eq!(classify("v2/t"), DeviceTopic::Telemetry);
        assert_eq!(classify("v2/a/j"), DeviceTopic::Attributes);
        assert_eq!(
            classify("v1/devices/me/rpc/request/7"),
            DeviceTopic::RpcRequest { id: "7", v2: false }
        );
        assert_eq!(
            classify("v2/a/req/3"),
            DeviceTopic::AttributesRequest { id: "3", v2: true }
        );
        assert_eq!(classify("v1/devices/me/rpc/request/"), DeviceTopic::Unknown);
        assert_eq!(
            classify("v1/devices/me/rpc/request/1/2"),
            DeviceTopic::Unknown
        );
        assert_eq!(classify("v2/t/p"), DeviceTopic::Unknown);
        assert_eq!(classify("some/topic"), DeviceTopic::Unknown);
    }

    #[test]
    fn subscriptions_by_exact_filter() {
        assert!(subscription_allowed("v1/devices/me/rpc/request/+", false));
        assert!(!subscription_allowed("v1/devices/me/#", false));
        assert!(!subscription_allowed("v1/gateway/rpc", false));
        assert!(subscription_allowed("v1/gateway/rpc", true));
    }
}
