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
        Ok(Ok(None)) | Err(_) => return None,
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
    let device = match authenticate(state, &connect) {
        Ok(Authenticated::Device(device)) => device,
        Ok(Authenticated::Provision) => {
            if send_connack(&mut stream, protocol, 0).await.is_ok() {
                super::provision::serve(state, stream, buf, protocol, max, peer).await;
            }
            return None;
        }
        Err(code) => {
            tracing::debug!(%peer, client_id = %connect.client_id, code, "CONNECT refused");
            let _ = send_connack(&mut stream, protocol, code).await;
            return None;
        }
    };
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
    Some(Session {
        stream,
        buf,
        protocol,
        device_id: device.device_id,
        gateway: device.gateway,
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

/// Device authentication (reference 1.2): returns the device, or the CONNACK code to refuse with.
fn authenticate(state: &AppState, connect: &Connect) -> Result<Authenticated, u8> {
    let v5 = connect.protocol == Protocol::V5;
    if state.sessions.connection_count() > state.config.mqtt.connections_max {
        metrics::refused(Transport::Mqtt, Reason::ConnectionsMax);
        return Err(if v5 { reason::QUOTA_EXCEEDED } else { 3 });
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
            Err(match (refusal, v5) {
                (AuthRefusal::BadUserNameOrPassword, true) => reason::BAD_USER_NAME_OR_PASSWORD,
                (AuthRefusal::ClientIdNotValid, true) => reason::CLIENT_IDENTIFIER_NOT_VALID,
                (AuthRefusal::NotAuthorized, true) => reason::NOT_AUTHORIZED,
                (AuthRefusal::ClientIdNotValid, false) => 2,
                (_, false) => 5,
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
