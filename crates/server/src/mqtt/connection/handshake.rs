//! The start of a connection: read the CONNECT (within 10 s), authenticate the device (reference 1.2),
//! register its session and answer CONNACK; and the DISCONNECT a server-side close sends on MQTT 5.

use std::net::SocketAddr;

use bytes::BytesMut;
use fleetwire_entities::{AuthRefusal, DeviceAuth, MqttAuth};
use fleetwire_mqtt::{
    decode, encode, reason, ConnAck, Connect, DecodeError, Disconnect, Packet, Protocol,
};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use uuid::Uuid;

use super::super::sessions::SessionGuard;
use super::{CONNECT_READ_CHUNK, CONNECT_TIMEOUT};
use crate::ingest::now_ms;
use crate::limits::Sender;
use crate::metrics::{self, Reason, Transport};
use crate::AppState;

/// An accepted session: what the handshake hands to the packet loop.
pub(super) struct Session<'a> {
    pub(super) stream: TcpStream,
    /// Bytes read after the CONNECT, if the client pipelined packets behind it.
    pub(super) buf: BytesMut,
    pub(super) protocol: Protocol,
    pub(super) device_id: Uuid,
    pub(super) gateway: bool,
    /// Most QoS 1 publishes to the device unacknowledged at once: the client's Receive Maximum (MQTT 5),
    /// at most [`super::OUTBOUND_INFLIGHT_MAX`].
    pub(super) send_window: u16,
    /// The CONNECT's Keep Alive, seconds (0: none).
    pub(super) keep_alive_s: u16,
    pub(super) guard: SessionGuard<'a>,
}

/// Reads the CONNECT, authenticates the device, registers its session and answers CONNACK.
pub(super) async fn handshake(
    state: &AppState,
    mut stream: TcpStream,
    peer: SocketAddr,
) -> Option<Session<'_>> {
    let _ = stream.set_nodelay(true);
    let mut buf = BytesMut::new();
    let max = packet_limit(state);
    let read =
        tokio::time::timeout(CONNECT_TIMEOUT, read_connect(&mut stream, &mut buf, max)).await;
    let connect = match read {
        Ok(Ok(Some(connect))) => connect,
        Ok(Ok(None)) => return None,
        Err(_) => {
            tracing::debug!(%peer, "no CONNECT within the connect timeout; closing");
            metrics::refused(Transport::Mqtt, Reason::Timeout);
            return None;
        }
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "bad CONNECT");
            metrics::refused(Transport::Mqtt, metrics::decode_reason(&e));
            // An unsupported version is answered (in 3.1.1 form, which every client reads); other
            // malformed CONNECTs are closed without an answer.
            if let Some(code) = e.connack_code(Protocol::V311) {
                let _ = send_connack(&mut stream, Protocol::V311, code).await;
            }
            return None;
        }
    };
    let protocol = connect.protocol;
    let v5 = protocol == Protocol::V5;
    let now_ns = crate::limits::now_ns();
    // A blocked address is refused before its credentials are looked at (reference 1.2's IP limit).
    if !state.limits.failed_auth.allows(peer.ip(), now_ns) {
        tracing::debug!(%peer, "CONNECT refused: address blocked after failed authentications");
        metrics::refused(Transport::Mqtt, Reason::Auth);
        let code = if v5 { reason::NOT_AUTHORIZED } else { 5 };
        let _ = send_connack(&mut stream, protocol, code).await;
        return None;
    }
    let device = match authenticate(state, &connect) {
        Ok(Authenticated::Device(device)) => {
            state.limits.failed_auth.succeeded(peer.ip());
            device
        }
        Ok(Authenticated::Provision) => {
            if send_connack(&mut stream, protocol, 0).await.is_ok() {
                super::provision::serve(state, stream, buf, protocol, max, peer).await;
            }
            return None;
        }
        Err(Refused {
            code,
            bad_credentials,
        }) => {
            if bad_credentials && state.limits.failed_auth.failed(peer.ip(), now_ns) {
                tracing::info!(%peer, "address blocked after repeated failed authentications");
            }
            tracing::debug!(%peer, client_id = %connect.client_id, code, "CONNECT refused");
            let _ = send_connack(&mut stream, protocol, code).await;
            return None;
        }
    };
    // Opening the session is a message for the rate limits (reference 7): 0x9F / 3.x 0x03 when refused.
    if state.limits.transport.is_active() {
        let sender = if device.gateway {
            Sender::GatewayItself(device.device_id)
        } else {
            Sender::Device(device.device_id)
        };
        let tenant = device.tenant_id;
        if let Err(level) = state
            .limits
            .transport
            .check(|| Some(tenant), sender, 0, now_ns)
        {
            tracing::debug!(%peer, device = %device.device_id, level = level.as_str(), "CONNECT refused: rate limit exceeded");
            metrics::refused(Transport::Mqtt, Reason::RateLimited);
            let code = if v5 {
                reason::CONNECTION_RATE_EXCEEDED
            } else {
                3
            };
            let _ = send_connack(&mut stream, protocol, code).await;
            return None;
        }
    }
    // Register before CONNACK, then look the device up again: a delete or credentials change that landed
    // after `authenticate` found no session to close, so it is caught here instead.
    let guard = state.sessions.register(device.device_id);
    if state.entities.device_auth(device.device_id).is_none() {
        let code = if protocol == Protocol::V5 {
            reason::NOT_AUTHORIZED
        } else {
            5
        };
        metrics::refused(Transport::Mqtt, Reason::Auth);
        let _ = send_connack(&mut stream, protocol, code).await;
        return None;
    }
    send_connack(&mut stream, protocol, 0).await.ok()?;
    metrics::mqtt_connected(protocol);
    state
        .activity
        .connected(&state.ingest, device.device_id, now_ms());
    let send_window = connect
        .properties
        .receive_maximum
        .unwrap_or(u16::MAX)
        .min(super::OUTBOUND_INFLIGHT_MAX);
    Some(Session {
        stream,
        buf,
        protocol,
        device_id: device.device_id,
        gateway: device.gateway,
        send_window,
        keep_alive_s: connect.keep_alive_s,
        guard,
    })
}

/// An MQTT 5 DISCONNECT with `reason`, encoded.
pub(super) fn disconnect_bytes(reason: u8) -> BytesMut {
    let mut out = BytesMut::new();
    let packet = Packet::Disconnect(Disconnect {
        reason,
        properties: Default::default(),
    });
    if let Err(e) = encode(&packet, Protocol::V5, &mut out) {
        tracing::error!(error = %e, "cannot encode DISCONNECT");
    }
    out
}

/// The codec limits whole packets; the configured limit, like ThingsBoard's (Netty's `maxBytesInMessage`),
/// applies to the remaining length. So the whole-packet limit adds the fixed header of a packet whose
/// remaining length is exactly the configured limit: one type byte and the variable-byte length.
pub(super) fn packet_limit(state: &AppState) -> usize {
    let remaining_max = state.config.mqtt.packet_bytes_max;
    let length_bytes = match remaining_max {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    };
    remaining_max + 1 + length_bytes
}

async fn read_connect(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    max: usize,
) -> Result<Option<Connect>, DecodeError> {
    loop {
        match decode(buf, Protocol::V311, max)? {
            Some(Packet::Connect(connect)) => return Ok(Some(connect)),
            // Anything before CONNECT is a protocol violation: close without an answer.
            Some(_) => return Ok(None),
            None => {}
        }
        buf.reserve(CONNECT_READ_CHUNK);
        match tokio::io::AsyncReadExt::read_buf(stream, buf).await {
            Ok(0) | Err(_) => return Ok(None),
            Ok(_) => {}
        }
    }
}

/// Who a CONNECT authenticates as.
enum Authenticated {
    Device(DeviceAuth),
    /// A provisioning session (username or client id `provision`, reference 1.11).
    Provision,
}

/// A refused CONNECT: the CONNACK code, and whether the credentials were wrong (which counts against the
/// address's failed-authentication limit).
struct Refused {
    code: u8,
    bad_credentials: bool,
}

/// Device authentication (reference 1.2): returns the device, or how to refuse.
fn authenticate(state: &AppState, connect: &Connect) -> Result<Authenticated, Refused> {
    let v5 = connect.protocol == Protocol::V5;
    if state.sessions.connection_count() > state.config.mqtt.connections_max {
        metrics::refused(Transport::Mqtt, Reason::ConnectionsMax);
        return Err(Refused {
            code: if v5 { reason::QUOTA_EXCEEDED } else { 3 },
            bad_credentials: false,
        });
    }
    let outcome = state.entities.authenticate_mqtt(
        &connect.client_id,
        connect.username.as_deref(),
        connect.password.as_deref(),
    );
    match outcome {
        MqttAuth::Device(device) => Ok(Authenticated::Device(device)),
        MqttAuth::Provision => Ok(Authenticated::Provision),
        MqttAuth::Refused(refusal) => {
            metrics::refused(Transport::Mqtt, Reason::Auth);
            Err(Refused {
                code: match (refusal, v5) {
                    (AuthRefusal::BadUserNameOrPassword, true) => reason::BAD_USER_NAME_OR_PASSWORD,
                    (AuthRefusal::ClientIdNotValid, true) => reason::CLIENT_IDENTIFIER_NOT_VALID,
                    (AuthRefusal::NotAuthorized, true) => reason::NOT_AUTHORIZED,
                    (AuthRefusal::ClientIdNotValid, false) => 2,
                    (_, false) => 5,
                },
                bad_credentials: true,
            })
        }
    }
}

async fn send_connack(stream: &mut TcpStream, protocol: Protocol, code: u8) -> std::io::Result<()> {
    let mut out = BytesMut::new();
    let packet = Packet::ConnAck(ConnAck {
        session_present: false,
        code,
        properties: Default::default(),
    });
    encode(&packet, protocol, &mut out).map_err(std::io::Error::other)?;
    stream.write_all(&out).await
}
