//! The null server: an MQTT endpoint that acknowledges everything and does nothing else, so a bench
//! against it measures the physical limit of the box (loopback TCP, the codec, the load generator
//! itself) that any real server's numbers should be read against.
//!
//! It is kept as cheap as the real server's I/O path and no cheaper: one task per connection, a 64 KiB
//! read buffer, every complete packet of a read decoded, all answers of that read encoded into one buffer
//! and written with a single `write_all`. No storage, no routing, no authentication.
//!
//! With a journal (`--fsync-dir`) it is the *durable* null server: the payloads of a read's PUBLISHes are
//! appended to a group-committed file (see `null_journal`) and the read's answers wait until they are on
//! disk, so a bench against it measures what the box makes any fsync-acknowledging server pay.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use fleetwire_mqtt::{decode, encode, ConnAck, Packet, Protocol, PubAck, QoS, SubAck, UnsubAck};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::null_journal::Journal;

/// Read buffer size, and the room made before each read.
const READ_BYTES: usize = 64 * 1024;
/// Largest packet accepted: well above any bench payload, small enough that a garbage length cannot make
/// a connection buffer hundreds of megabytes.
const PACKET_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Pause after running out of file descriptors, before accepting again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// What the null server saw, shared with whoever reports it.
#[derive(Debug, Default)]
pub struct NullServerStats {
    /// Connections accepted so far.
    pub connections: AtomicU64,
    /// Connections open now.
    pub connections_open: AtomicU64,
    /// PUBLISH packets received (any QoS).
    pub publishes: AtomicU64,
    /// Bytes read from all connections.
    pub bytes_read: AtomicU64,
}

impl NullServerStats {
    pub fn new() -> Arc<NullServerStats> {
        Arc::new(NullServerStats::default())
    }
}

/// Accepts MQTT connections on `listener` until accepting fails: answers CONNECT with CONNACK accepted
/// (in the client's protocol version), QoS 1 PUBLISH with PUBACK (QoS 2 with PUBREC, PUBREL with
/// PUBCOMP), PINGREQ with PINGRESP, SUBSCRIBE with SUBACK granting the requested QoS, UNSUBSCRIBE with
/// UNSUBACK, and closes on DISCONNECT or any error.
///
/// With a `journal`, the answers to a read that carried PUBLISHes are written only once their payloads are
/// on disk.
///
/// Running out of file descriptors is waited out rather than returned, since a fleet bench may push the
/// box to that limit on purpose.
pub async fn serve(
    listener: TcpListener,
    stats: Arc<NullServerStats>,
    journal: Option<Arc<Journal>>,
) -> io::Result<()> {
    if let Some(journal) = &journal {
        tokio::spawn(journal.dispatch());
    }
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _peer)) => stream,
            Err(e) if is_transient_accept_error(&e) => {
                tracing::debug!(error = %e, "accept failed, continuing");
                continue;
            }
            Err(e) if is_out_of_files(&e) => {
                tracing::warn!(error = %e, "out of file descriptors, pausing accept");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        stats.connections.fetch_add(1, Ordering::Relaxed);
        stats.connections_open.fetch_add(1, Ordering::Relaxed);
        let stats = Arc::clone(&stats);
        let journal = journal.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(stream, &stats, journal.as_deref()).await {
                tracing::debug!(error = %e, "null server connection ended");
            }
            stats.connections_open.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// Errors of one incoming connection that say nothing about the listener.
fn is_transient_accept_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

fn is_out_of_files(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// What to do after the packets of one read.
enum Next {
    Read,
    Close,
}

/// One connection: read, answer every complete packet, write the answers once (after the read's
/// PUBLISHes are durable, with a journal), until the client leaves.
async fn connection(
    mut stream: TcpStream,
    stats: &NullServerStats,
    journal: Option<&Journal>,
) -> io::Result<()> {
    // Answers are small and written at once: Nagle would only delay them.
    stream.set_nodelay(true)?;
    let mut buf = BytesMut::with_capacity(READ_BYTES);
    let mut out = BytesMut::with_capacity(READ_BYTES / 4);
    // The payloads of one read's PUBLISHes, for the journal (left empty without one).
    let mut records = Vec::new();
    // Unknown until CONNECT, whose own header carries its version.
    let mut protocol: Option<Protocol> = None;
    loop {
        if buf.capacity() - buf.len() < READ_BYTES / 4 {
            // Reclaims the space of packets already decoded (their `Bytes` are gone by now), so in steady
            // state this does not allocate.
            buf.reserve(READ_BYTES);
        }
        let read_bytes = stream.read_buf(&mut buf).await?;
        if read_bytes == 0 {
            return Ok(());
        }
        stats
            .bytes_read
            .fetch_add(read_bytes as u64, Ordering::Relaxed);

        let mut publishes = 0u64;
        let keep = journal.is_some().then_some(&mut records);
        let next = answer(&mut buf, &mut protocol, &mut out, &mut publishes, keep);
        // One atomic add per read, not per packet: these counters are shared by every connection.
        if publishes > 0 {
            stats.publishes.fetch_add(publishes, Ordering::Relaxed);
            if let Some(journal) = journal {
                let seq = journal.append(&records, publishes);
                records.clear();
                journal.durable(seq).await?;
            }
        }
        if !out.is_empty() {
            stream.write_all(&out).await?;
            out.clear();
        }
        match next {
            Ok(Next::Read) => {}
            Ok(Next::Close) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// Decodes every complete packet in `buf` and appends the answers to `out`, and each PUBLISH's payload,
/// behind its length, to `records` if given.
fn answer(
    buf: &mut BytesMut,
    protocol: &mut Option<Protocol>,
    out: &mut BytesMut,
    publishes: &mut u64,
    mut records: Option<&mut Vec<u8>>,
) -> io::Result<Next> {
    loop {
        // Before CONNECT any version decodes the CONNECT itself (it carries its own level), and nothing
        // else is accepted.
        let decode_as = protocol.unwrap_or(Protocol::V311);
        let packet = match decode(buf, decode_as, PACKET_BYTES_MAX) {
            Ok(Some(packet)) => packet,
            Ok(None) => return Ok(Next::Read),
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
        };
        let Some(version) = *protocol else {
            let Packet::Connect(connect) = packet else {
                return Err(protocol_error("the first packet must be CONNECT"));
            };
            *protocol = Some(connect.protocol);
            push(&Packet::ConnAck(ConnAck::default()), connect.protocol, out)?;
            continue;
        };
        let reply = match packet {
            Packet::Publish(publish) => {
                *publishes += 1;
                if let Some(records) = records.as_deref_mut() {
                    // Payloads are at most PACKET_BYTES_MAX, which fits in a u32.
                    records.extend_from_slice(&(publish.payload.len() as u32).to_le_bytes());
                    records.extend_from_slice(&publish.payload);
                }
                match publish.qos {
                    QoS::AtMostOnce => None,
                    QoS::AtLeastOnce => Some(Packet::PubAck(PubAck::new(publish.pkid))),
                    QoS::ExactlyOnce => Some(Packet::PubRec(PubAck::new(publish.pkid))),
                }
            }
            Packet::PubRel(release) => Some(Packet::PubComp(PubAck::new(release.pkid))),
            Packet::PingReq => Some(Packet::PingResp),
            Packet::Subscribe(subscribe) => Some(Packet::SubAck(SubAck {
                pkid: subscribe.pkid,
                return_codes: subscribe.filters.iter().map(|f| f.qos as u8).collect(),
                ..SubAck::default()
            })),
            Packet::Unsubscribe(unsubscribe) => Some(Packet::UnsubAck(UnsubAck {
                pkid: unsubscribe.pkid,
                // MQTT 5 wants one reason per filter (0 = success); 3.x encodes none.
                reasons: vec![0; unsubscribe.filters.len()],
                ..UnsubAck::default()
            })),
            Packet::Disconnect(_) => return Ok(Next::Close),
            Packet::Connect(_) => return Err(protocol_error("second CONNECT")),
            // Acknowledgements of messages we never send, AUTH, and server-to-client packets: ignored.
            _ => None,
        };
        if let Some(reply) = reply {
            push(&reply, version, out)?;
        }
    }
}

fn push(packet: &Packet, protocol: Protocol, out: &mut BytesMut) -> io::Result<()> {
    // Only a client's own bad packet identifier (0) can make an answer unencodable.
    encode(packet, protocol, out)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
}

fn protocol_error(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use fleetwire_mqtt::{Connect, ConnectProperties, Publish, Subscribe, SubscribeFilter, Topic};

    async fn start() -> (std::net::SocketAddr, Arc<NullServerStats>) {
        start_with(None).await
    }

    async fn start_with(
        journal: Option<Arc<Journal>>,
    ) -> (std::net::SocketAddr, Arc<NullServerStats>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stats = NullServerStats::new();
        tokio::spawn(serve(listener, Arc::clone(&stats), journal));
        (addr, stats)
    }

    fn connect_packet(protocol: Protocol) -> Packet {
        Packet::Connect(Connect {
            protocol,
            clean_start: true,
            keep_alive_s: 60,
            client_id: "bench".into(),
            username: Some("DW00000001".into()),
            password: None,
            will: None,
            properties: ConnectProperties::default(),
        })
    }

    /// Reads until `count` packets are decoded.
    async fn read_packets(
        stream: &mut TcpStream,
        buf: &mut BytesMut,
        protocol: Protocol,
        count: usize,
    ) -> Vec<Packet> {
        let mut packets = Vec::new();
        while packets.len() < count {
            while let Some(packet) = decode(buf, protocol, PACKET_BYTES_MAX).unwrap() {
                packets.push(packet);
            }
            if packets.len() < count {
                let n = stream.read_buf(buf).await.unwrap();
                assert!(n > 0, "server closed after {} packets", packets.len());
            }
        }
        packets
    }

    async fn handshake(addr: std::net::SocketAddr, protocol: Protocol) -> (TcpStream, BytesMut) {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let mut out = BytesMut::new();
        encode(&connect_packet(protocol), protocol, &mut out).unwrap();
        stream.write_all(&out).await.unwrap();
        let mut buf = BytesMut::new();
        let packets = read_packets(&mut stream, &mut buf, protocol, 1).await;
        match &packets[0] {
            Packet::ConnAck(connack) => assert_eq!(connack.code, 0),
            other => panic!("expected CONNACK, got {}", other.name()),
        }
        (stream, buf)
    }

    async fn publishes_are_acknowledged(protocol: Protocol) {
        publishes_are_acknowledged_by(protocol, None).await;
    }

    async fn publishes_are_acknowledged_by(protocol: Protocol, journal: Option<Arc<Journal>>) {
        let (addr, stats) = start_with(journal).await;
        let (mut stream, mut buf) = handshake(addr, protocol).await;
        let mut out = BytesMut::new();
        for pkid in 1..=100u16 {
            let publish = Publish {
                qos: QoS::AtLeastOnce,
                topic: Topic::from_static("v1/devices/me/telemetry"),
                pkid,
                payload: Bytes::from_static(b"{\"batteryLevel\":50}"),
                ..Publish::default()
            };
            encode(&Packet::Publish(publish), protocol, &mut out).unwrap();
        }
        stream.write_all(&out).await.unwrap();
        let acks = read_packets(&mut stream, &mut buf, protocol, 100).await;
        let pkids: Vec<u16> = acks
            .iter()
            .map(|packet| match packet {
                Packet::PubAck(ack) => ack.pkid,
                other => panic!("expected PUBACK, got {}", other.name()),
            })
            .collect();
        assert_eq!(pkids, (1..=100).collect::<Vec<u16>>());
        assert_eq!(stats.publishes.load(Ordering::Relaxed), 100);
        assert_eq!(stats.connections.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn publishes_are_acknowledged_in_3_1_1() {
        publishes_are_acknowledged(Protocol::V311).await;
    }

    #[tokio::test]
    async fn publishes_are_acknowledged_in_5() {
        publishes_are_acknowledged(Protocol::V5).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_durable_null_server_acknowledges_what_its_journal_holds() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Arc::new(
            Journal::open(dir.path(), 1 << 20, std::time::Duration::from_millis(1)).unwrap(),
        );
        publishes_are_acknowledged_by(Protocol::V311, Some(Arc::clone(&journal))).await;
        // Every PUBACK came after its payload was synced: all 100 are in the journal, behind their lengths.
        let stats = journal.stats();
        assert_eq!(stats.records.load(Ordering::Relaxed), 100);
        assert!(stats.commits.load(Ordering::Relaxed) >= 1);
        let payload = b"{\"batteryLevel\":50}";
        let mut record = (payload.len() as u32).to_le_bytes().to_vec();
        record.extend_from_slice(payload);
        let on_disk = std::fs::read(journal.path()).unwrap();
        assert_eq!(on_disk[..record.len() * 100], record.repeat(100));
        assert!(on_disk[record.len() * 100..].iter().all(|&b| b == 0));
    }

    #[tokio::test]
    async fn ping_subscribe_and_disconnect() {
        let (addr, stats) = start().await;
        let protocol = Protocol::V5;
        let (mut stream, mut buf) = handshake(addr, protocol).await;
        let mut out = BytesMut::new();
        encode(&Packet::PingReq, protocol, &mut out).unwrap();
        let subscribe = Subscribe {
            pkid: 7,
            filters: vec![
                SubscribeFilter::new("v1/devices/me/rpc/request/+", QoS::AtLeastOnce),
                SubscribeFilter::new("v1/devices/me/attributes", QoS::AtMostOnce),
            ],
            ..Subscribe::default()
        };
        encode(&Packet::Subscribe(subscribe), protocol, &mut out).unwrap();
        stream.write_all(&out).await.unwrap();
        let answers = read_packets(&mut stream, &mut buf, protocol, 2).await;
        assert_eq!(answers[0], Packet::PingResp);
        match &answers[1] {
            Packet::SubAck(suback) => {
                assert_eq!(suback.pkid, 7);
                assert_eq!(suback.return_codes, [1, 0]);
            }
            other => panic!("expected SUBACK, got {}", other.name()),
        }

        out.clear();
        encode(&Packet::Disconnect(Default::default()), protocol, &mut out).unwrap();
        stream.write_all(&out).await.unwrap();
        let n = stream.read_buf(&mut buf).await.unwrap();
        assert_eq!(n, 0, "the server closes after DISCONNECT");
        assert_eq!(stats.publishes.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_first_packet_other_than_connect_closes() {
        let (addr, stats) = start().await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let mut out = BytesMut::new();
        encode(&Packet::PingReq, Protocol::V311, &mut out).unwrap();
        stream.write_all(&out).await.unwrap();
        let mut buf = BytesMut::new();
        let n = stream.read_buf(&mut buf).await.unwrap_or(0);
        assert_eq!(n, 0, "no answer, just a close");
        assert_eq!(stats.connections.load(Ordering::Relaxed), 1);
    }
}
