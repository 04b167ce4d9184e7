//! A blocking MQTT client over `std::net::TcpStream`, built on `fleetwire_mqtt`: it sends exactly the
//! packets (or raw bytes) a test asks for and reports exactly what comes back, including the close.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use fleetwire_mqtt::{
    decode, encode, ConnAck, Connect, Disconnect, Packet, Protocol, PubAck, Publish, QoS, Topic,
};
use serde_json::Value;

/// How long a test waits for the server's next packet (or its close) before failing.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest packet the client decodes: the server's answers are far smaller.
const CLIENT_PACKET_BYTES_MAX: usize = 1 << 20;

/// What the server did next.
#[derive(Debug, Clone, PartialEq, Eq)]
// One per received packet in a test: boxing the packet would only make the tests' matches noisier.
#[allow(clippy::large_enum_variant)]
pub enum Event {
    Packet(Packet),
    /// EOF or connection reset, with no partial packet pending.
    Closed,
}

pub struct MqttClient {
    stream: TcpStream,
    buf: BytesMut,
    /// The version packets are encoded and decoded in.
    pub protocol: Protocol,
}

impl MqttClient {
    /// A TCP connection to the broker, nothing sent yet.
    pub fn open(port: u16, protocol: Protocol) -> MqttClient {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let stream =
            TcpStream::connect_timeout(&addr, READ_TIMEOUT).expect("TCP connect to the broker");
        stream
            .set_read_timeout(Some(READ_TIMEOUT))
            .expect("read timeout");
        stream
            .set_write_timeout(Some(READ_TIMEOUT))
            .expect("write timeout");
        stream.set_nodelay(true).expect("nodelay");
        MqttClient {
            stream,
            buf: BytesMut::new(),
            protocol,
        }
    }

    /// Sends CONNECT and returns the client with the server's CONNACK (whatever its code).
    pub fn connect(
        port: u16,
        protocol: Protocol,
        client_id: &str,
        username: Option<&str>,
        password: Option<&[u8]>,
    ) -> (MqttClient, ConnAck) {
        let mut client = MqttClient::open(port, protocol);
        client.send(&connect_packet(protocol, client_id, username, password));
        match client.recv() {
            Packet::ConnAck(ack) => (client, ack),
            other => panic!("expected CONNACK, got {other:?}"),
        }
    }

    /// Connects with `token` as the user name and asserts CONNACK 0 (session present 0, no properties).
    pub fn connect_ok(port: u16, protocol: Protocol, token: &str) -> MqttClient {
        let (client, ack) = MqttClient::connect(
            port,
            protocol,
            &format!("client-{token}"),
            Some(token),
            None,
        );
        assert_eq!(
            ack,
            ConnAck::default(),
            "CONNACK for token {token} ({protocol:?})"
        );
        client
    }

    pub fn send(&mut self, packet: &Packet) {
        self.send_all(std::slice::from_ref(packet));
    }

    /// Encodes all `packets` and sends them in one write.
    pub fn send_all(&mut self, packets: &[Packet]) {
        let mut out = BytesMut::new();
        for packet in packets {
            encode(packet, self.protocol, &mut out).expect("encode a test packet");
        }
        self.write_raw(&out);
    }

    pub fn try_send_all(&mut self, packets: &[Packet]) -> io::Result<()> {
        let mut out = BytesMut::new();
        for packet in packets {
            encode(packet, self.protocol, &mut out).expect("encode a test packet");
        }
        self.stream.write_all(&out)
    }

    pub fn write_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write to the broker");
    }

    /// The next packet or the close; `Err` on a read timeout or on bytes that do not decode.
    pub fn try_next(&mut self) -> io::Result<Event> {
        loop {
            match decode(&mut self.buf, self.protocol, CLIENT_PACKET_BYTES_MAX) {
                Ok(Some(packet)) => return Ok(Event::Packet(packet)),
                Ok(None) => {}
                Err(e) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("undecodable bytes from the server: {e}"),
                    ))
                }
            }
            let mut chunk = [0u8; 16 * 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) => return self.closed(),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
                    ) =>
                {
                    return self.closed()
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn closed(&self) -> io::Result<Event> {
        if self.buf.is_empty() {
            Ok(Event::Closed)
        } else {
            Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("closed inside a packet: {:02x?}", &self.buf[..]),
            ))
        }
    }

    /// The next packet or the close; panics on a timeout.
    pub fn next(&mut self) -> Event {
        self.try_next()
            .unwrap_or_else(|e| panic!("waiting for the server ({:?}): {e}", self.protocol))
    }

    /// The next packet; panics if the server closed the connection instead.
    pub fn recv(&mut self) -> Packet {
        match self.next() {
            Event::Packet(packet) => packet,
            Event::Closed => panic!("the server closed the connection; a packet was expected"),
        }
    }

    /// Asserts that the server closes the connection without sending anything more.
    pub fn expect_closed(&mut self) {
        match self.next() {
            Event::Closed => {}
            Event::Packet(packet) => panic!("expected the connection to close, got {packet:?}"),
        }
    }

    /// Sends PINGREQ and asserts the next packet is PINGRESP: proves the connection is usable and
    /// that nothing else was queued before the ping's answer.
    pub fn ping(&mut self) {
        self.send(&Packet::PingReq);
        assert_eq!(self.recv(), Packet::PingResp);
    }

    /// The next packet must be a PUBLISH from the server on `topic` with QoS `qos` (and a packet id
    /// exactly when QoS > 0); returns its packet id and JSON payload.
    pub fn expect_publish(&mut self, topic: &str, qos: QoS) -> (u16, Value) {
        match self.recv() {
            Packet::Publish(p) => {
                assert_eq!(p.topic.as_str(), topic);
                assert_eq!(p.qos, qos, "QoS of the server's PUBLISH on {topic}");
                assert_eq!(
                    p.pkid == 0,
                    qos == QoS::AtMostOnce,
                    "packet id {} for QoS {qos:?}",
                    p.pkid
                );
                let json = serde_json::from_slice(&p.payload).unwrap_or_else(|e| {
                    panic!(
                        "payload is not JSON ({e}): {:?}",
                        String::from_utf8_lossy(&p.payload)
                    )
                });
                (p.pkid, json)
            }
            other => panic!("expected PUBLISH on {topic}, got {other:?}"),
        }
    }
}

pub fn connect_packet(
    protocol: Protocol,
    client_id: &str,
    username: Option<&str>,
    password: Option<&[u8]>,
) -> Packet {
    Packet::Connect(Connect {
        protocol,
        clean_start: true,
        keep_alive_s: 60,
        client_id: client_id.to_string(),
        username: username.map(str::to_string),
        password: password.map(Bytes::copy_from_slice),
        will: None,
        properties: Default::default(),
    })
}

/// A PUBLISH of `payload` on `topic`; `pkid` must be 0 for QoS 0.
pub fn publish(topic: &str, qos: QoS, pkid: u16, payload: impl Into<Bytes>) -> Packet {
    Packet::Publish(Publish {
        dup: false,
        qos,
        retain: false,
        topic: Topic::try_from(topic).expect("valid test topic"),
        pkid,
        payload: payload.into(),
        properties: Default::default(),
    })
}

/// A PUBACK (`reason` is only encoded for MQTT 5).
pub fn puback(pkid: u16, reason: u8) -> Packet {
    Packet::PubAck(PubAck {
        pkid,
        reason,
        properties: Default::default(),
    })
}

/// An MQTT 5 DISCONNECT with `reason`.
pub fn disconnect(reason: u8) -> Packet {
    Packet::Disconnect(Disconnect {
        reason,
        properties: Default::default(),
    })
}
