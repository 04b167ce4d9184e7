//! A provisioning session (reference 1.11): CONNECT as `provision`, subscribe `/provision/response`, publish
//! `/provision/request`; the answer comes after the PUBACK, and the server closes the connection 60 s later.
//! Nothing else is allowed: another topic gets PUBACK 0x90 and the connection is closed (MQTT 5: with a
//! DISCONNECT). The session holds no device and registers nowhere.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use fleetwire_mqtt::{
    decode, encode, reason, Packet, Protocol, PubAck, Publish, QoS, SubAck, Topic, UnsubAck,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::disconnect_bytes;
use crate::AppState;

const REQUEST_TOPIC: &str = "/provision/request";
const RESPONSE_TOPIC: &str = "/provision/response";
/// How long the session stays open after it was answered, or after it connected while it asks nothing.
const SESSION_TIMEOUT: Duration = Duration::from_secs(60);

pub(super) async fn serve(
    state: &AppState,
    mut stream: TcpStream,
    mut buf: BytesMut,
    protocol: Protocol,
    max: usize,
    peer: SocketAddr,
) {
    let v5 = protocol == Protocol::V5;
    let mut deadline = tokio::time::Instant::now() + SESSION_TIMEOUT;
    let mut response_qos = None;
    let mut out = BytesMut::new();
    loop {
        loop {
            let packet = match decode(&mut buf, protocol, max) {
                Ok(Some(packet)) => packet,
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "malformed packet in a provisioning session");
                    return;
                }
            };
            let mut close = false;
            match packet {
                Packet::Subscribe(subscribe) => {
                    let codes = subscribe
                        .filters
                        .iter()
                        .map(|filter| {
                            if filter.path == RESPONSE_TOPIC {
                                let qos = filter.qos.min(QoS::AtLeastOnce);
                                response_qos = Some(qos);
                                qos as u8
                            } else if v5 {
                                reason::TOPIC_FILTER_INVALID
                            } else {
                                0x80
                            }
                        })
                        .collect();
                    push(
                        &mut out,
                        protocol,
                        Packet::SubAck(SubAck {
                            pkid: subscribe.pkid,
                            return_codes: codes,
                            properties: Default::default(),
                        }),
                    );
                }
                Packet::Unsubscribe(unsubscribe) => push(
                    &mut out,
                    protocol,
                    Packet::UnsubAck(UnsubAck {
                        pkid: unsubscribe.pkid,
                        reasons: if v5 {
                            vec![0; unsubscribe.filters.len()]
                        } else {
                            Vec::new()
                        },
                        properties: Default::default(),
                    }),
                ),
                Packet::Publish(publish) if publish.topic.as_str() == REQUEST_TOPIC => {
                    if publish.qos != QoS::AtMostOnce {
                        push(&mut out, protocol, puback(publish.pkid, 0));
                    }
                    // The PUBACK goes first, then the answer.
                    if !write(&mut stream, &mut out).await {
                        return;
                    }
                    let answer = crate::provision::provision(state, &publish.payload).await;
                    // Closed 60 s after the answer, as ThingsBoard does.
                    deadline = tokio::time::Instant::now() + SESSION_TIMEOUT;
                    let qos = response_qos.unwrap_or(QoS::AtLeastOnce);
                    let Ok(topic) = Topic::try_from(RESPONSE_TOPIC.to_string()) else {
                        return;
                    };
                    push(
                        &mut out,
                        protocol,
                        Packet::Publish(Publish {
                            qos,
                            topic,
                            pkid: if qos == QoS::AtMostOnce { 0 } else { 1 },
                            payload: Bytes::from(answer.to_string()),
                            ..Publish::default()
                        }),
                    );
                }
                Packet::Publish(publish) => {
                    tracing::debug!(%peer, topic = publish.topic.as_str(), "provisioning session published elsewhere");
                    if publish.qos != QoS::AtMostOnce && v5 {
                        push(
                            &mut out,
                            protocol,
                            puback(publish.pkid, reason::TOPIC_NAME_INVALID),
                        );
                    }
                    close = true;
                }
                Packet::PingReq => push(&mut out, protocol, Packet::PingResp),
                Packet::Disconnect(_) => return,
                Packet::PubAck(_) => {}
                _ => close = true,
            }
            if close {
                if v5 {
                    out.extend_from_slice(&disconnect_bytes(reason::TOPIC_NAME_INVALID));
                }
                let _ = write(&mut stream, &mut out).await;
                return;
            }
        }
        if !write(&mut stream, &mut out).await {
            return;
        }
        buf.reserve(1024);
        match tokio::time::timeout_at(deadline, stream.read_buf(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return,
        }
    }
}

fn puback(pkid: u16, code: u8) -> Packet {
    Packet::PubAck(PubAck {
        pkid,
        reason: code,
        properties: Default::default(),
    })
}

fn push(out: &mut BytesMut, protocol: Protocol, packet: Packet) {
    if let Err(e) = encode(&packet, protocol, out) {
        tracing::error!(error = %e, "cannot encode a provisioning packet");
    }
}

async fn write(stream: &mut TcpStream, out: &mut BytesMut) -> bool {
    if out.is_empty() {
        return true;
    }
    let written = tokio::time::timeout(SESSION_TIMEOUT, stream.write_all(out)).await;
    out.clear();
    matches!(written, Ok(Ok(())))
}
