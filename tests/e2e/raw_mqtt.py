"""Raw MQTT over a plain socket, for the cases a real client library refuses to express.

paho will not send a PUBLISH before CONNECT, a topic that is not UTF-8, a packet larger than the server's limit
on purpose, or let us read the exact CONNACK/PUBACK/DISCONNECT reason bytes of every protocol level. This module
builds packets byte by byte (MQTT 3.1 = level 3 "MQIsdp", 3.1.1 = level 4, 5.0 = level 5) and reads whole packets
back, so the bad-input tests can assert exactly what the server answered, or that it closed the connection.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

MQTT31 = 3
MQTT311 = 4
MQTT5 = 5

CONNECT = 1
CONNACK = 2
PUBLISH = 3
PUBACK = 4
SUBSCRIBE = 8
SUBACK = 9
PINGREQ = 12
PINGRESP = 13
DISCONNECT = 14

PACKET_NAMES = {
    1: "CONNECT", 2: "CONNACK", 3: "PUBLISH", 4: "PUBACK", 5: "PUBREC", 6: "PUBREL", 7: "PUBCOMP",
    8: "SUBSCRIBE", 9: "SUBACK", 10: "UNSUBSCRIBE", 11: "UNSUBACK", 12: "PINGREQ", 13: "PINGRESP",
    14: "DISCONNECT", 15: "AUTH",
}


def encode_varint(value: int) -> bytes:
    """MQTT "variable byte integer" (remaining length, property lengths): 7 bits per byte, at most 4 bytes."""
    if not 0 <= value <= 268_435_455:
        raise ValueError(f"variable byte integer out of range: {value}")
    out = bytearray()
    while True:
        byte = value % 128
        value //= 128
        if value:
            byte |= 0x80
        out.append(byte)
        if not value:
            return bytes(out)


def encode_str(value: str | bytes) -> bytes:
    """Two-byte length prefix + bytes; bytes are sent as given so tests can send invalid UTF-8."""
    raw = value.encode("utf-8") if isinstance(value, str) else value
    return struct.pack("!H", len(raw)) + raw


def fixed_header(packet_type: int, flags: int, remaining_bytes: int) -> bytes:
    return bytes([(packet_type << 4) | flags]) + encode_varint(remaining_bytes)


def packet(packet_type: int, flags: int, body: bytes) -> bytes:
    return fixed_header(packet_type, flags, len(body)) + body


def connect(version: int, client_id: str, username: str | None = None, password: str | None = None,
            keepalive_s: int = 60, clean: bool = True, properties: bytes = b"") -> bytes:
    """CONNECT for protocol level 3 (MQTT 3.1, "MQIsdp"), 4 (3.1.1) or 5 (with encoded `properties`)."""
    name = "MQIsdp" if version == MQTT31 else "MQTT"
    flags = 0x02 if clean else 0
    if username is not None:
        flags |= 0x80
    if password is not None:
        flags |= 0x40
    body = encode_str(name) + bytes([version, flags]) + struct.pack("!H", keepalive_s)
    if version == MQTT5:
        body += encode_varint(len(properties)) + properties
    body += encode_str(client_id)
    if username is not None:
        body += encode_str(username)
    if password is not None:
        body += encode_str(password)
    return packet(CONNECT, 0, body)


def receive_maximum(value: int) -> bytes:
    """The MQTT 5 CONNECT property Receive Maximum (0x21)."""
    return bytes([0x21]) + struct.pack("!H", value)


def publish(version: int, topic: str | bytes, payload: bytes | str, qos: int = 1, packet_id: int = 1) -> bytes:
    body = publish_body(version, topic, payload, qos, packet_id)
    return packet(PUBLISH, qos << 1, body)


def publish_body(version: int, topic: str | bytes, payload: bytes | str, qos: int = 1, packet_id: int = 1) -> bytes:
    data = payload.encode("utf-8") if isinstance(payload, str) else payload
    body = encode_str(topic)
    if qos > 0:
        body += struct.pack("!H", packet_id)
    if version == MQTT5:
        body += encode_varint(0)  # no PUBLISH properties
    return body + data


def subscribe(version: int, packet_id: int, filters: list[tuple[str, int]]) -> bytes:
    body = struct.pack("!H", packet_id)
    if version == MQTT5:
        body += encode_varint(0)
    for topic_filter, qos in filters:
        body += encode_str(topic_filter) + bytes([qos])
    return packet(SUBSCRIBE, 0x02, body)


def disconnect(version: int, reason: int = 0) -> bytes:
    if version == MQTT5 and reason:
        return packet(DISCONNECT, 0, bytes([reason]))
    return packet(DISCONNECT, 0, b"")


@dataclass
class Packet:
    """One packet read off the wire: type, the low nibble of the first byte, and the body after the header."""

    kind: int
    flags: int
    body: bytes

    @property
    def name(self) -> str:
        return PACKET_NAMES.get(self.kind, f"type {self.kind}")

    def __repr__(self) -> str:
        return f"Packet({self.name}, flags={self.flags:#x}, body={self.body[:64].hex()})"


def connack_code(pkt: Packet) -> int:
    """Return code (3.x) or reason code (5) of a CONNACK: the second byte either way."""
    assert pkt.kind == CONNACK, f"expected CONNACK, got {pkt}"
    return pkt.body[1]


def puback_reason(pkt: Packet) -> tuple[int, int]:
    """(packet id, reason code); 3.x PUBACKs and MQTT 5 PUBACKs with only an id mean success (0)."""
    assert pkt.kind == PUBACK, f"expected PUBACK, got {pkt}"
    packet_id = struct.unpack("!H", pkt.body[:2])[0]
    reason = pkt.body[2] if len(pkt.body) > 2 else 0
    return packet_id, reason


def suback_codes(version: int, pkt: Packet) -> tuple[int, list[int]]:
    """(packet id, one granted QoS / reason code per filter)."""
    assert pkt.kind == SUBACK, f"expected SUBACK, got {pkt}"
    packet_id = struct.unpack("!H", pkt.body[:2])[0]
    rest = pkt.body[2:]
    if version == MQTT5:
        props_len, used = decode_varint(rest)
        rest = rest[used + props_len:]
    return packet_id, list(rest)


def disconnect_reason(pkt: Packet) -> int:
    assert pkt.kind == DISCONNECT, f"expected DISCONNECT, got {pkt}"
    return pkt.body[0] if pkt.body else 0


def decode_varint(data: bytes) -> tuple[int, int]:
    """(value, bytes used); raises ValueError if the encoding is longer than 4 bytes or truncated."""
    value = 0
    for i, byte in enumerate(data[:4]):
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, i + 1
    raise ValueError("bad or truncated variable byte integer")


class Closed(Exception):
    """The peer closed (EOF) or reset the connection."""


class RawClient:
    """A blocking socket speaking whole MQTT packets; every read has a deadline so a test can never hang."""

    def __init__(self, host: str, port: int, timeout_s: float = 5.0, source: str | None = None):
        self.sock = socket.create_connection((host, port), timeout=timeout_s,
                                             source_address=(source, 0) if source else None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout_s = timeout_s
        self._buf = b""

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "RawClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        """sendall that reports a closed/reset peer as Closed."""
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as err:
            raise Closed(str(err)) from err

    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no complete packet from the server before the deadline")
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout as err:
            raise TimeoutError("no complete packet from the server before the deadline") from err
        except ConnectionResetError as err:
            raise Closed("connection reset") from err
        if not chunk:
            raise Closed("connection closed (EOF)")
        self._buf += chunk

    def read_packet(self, timeout_s: float | None = None) -> Packet:
        """Next whole packet. Raises Closed on EOF/reset and TimeoutError when nothing complete arrives in time."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while True:
            if len(self._buf) >= 2:
                try:
                    remaining, used = decode_varint(self._buf[1:])
                except ValueError:
                    if len(self._buf) >= 5:
                        raise
                    remaining, used = -1, 0
                if remaining >= 0 and len(self._buf) >= 1 + used + remaining:
                    first = self._buf[0]
                    body = self._buf[1 + used:1 + used + remaining]
                    self._buf = self._buf[1 + used + remaining:]
                    return Packet(first >> 4, first & 0x0F, body)
            self._fill(deadline)

    def expect(self, kind: int, timeout_s: float | None = None) -> Packet:
        pkt = self.read_packet(timeout_s)
        assert pkt.kind == kind, f"expected {PACKET_NAMES[kind]}, got {pkt}"
        return pkt

    def wait_closed(self, timeout_s: float | None = None) -> list[Packet]:
        """Read until the server closes the connection; returns the packets it sent before closing.

        Raises AssertionError if the connection is still open when the deadline passes."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        packets = []
        while True:
            try:
                packets.append(self.read_packet(max(0.0, deadline - time.monotonic())))
            except Closed:
                return packets
            except TimeoutError:
                raise AssertionError(f"server kept the connection open; it sent {packets}") from None

    def connect(self, version: int, token: str | None, client_id: str = "raw-e2e", password: str | None = None,
                timeout_s: float | None = None, properties: bytes = b"") -> int:
        """Send CONNECT, return the CONNACK code."""
        self.send(connect(version, client_id, username=token, password=password, properties=properties))
        return connack_code(self.expect(CONNACK, timeout_s))

    def publish_qos1(self, version: int, topic: str | bytes, payload: bytes | str, packet_id: int) -> int:
        """QoS 1 PUBLISH, return the PUBACK reason code (0 on 3.x) after checking the packet id."""
        self.send(publish(version, topic, payload, 1, packet_id))
        got_id, reason = puback_reason(self.expect(PUBACK))
        assert got_id == packet_id, f"PUBACK for packet id {got_id}, sent {packet_id}"
        return reason
