"""A device connection through paho-mqtt (2.x API) that waits for and records every acknowledgement.

paho's callbacks run on its network thread; this wrapper turns them into blocking calls with deadlines
(connect → CONNACK code, publish → PUBACK reason, subscribe → SUBACK codes) so tests read top to bottom.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from harness import unique

PROTOCOLS = {"3.1": mqtt.MQTTv31, "3.1.1": mqtt.MQTTv311, "5": mqtt.MQTTv5}
ACK_TIMEOUT_S = 10.0


def reason_value(code: Any) -> int:
    """paho hands out ReasonCode objects on both 3.x and 5; older paths give plain ints."""
    return code.value if hasattr(code, "value") else int(code)


class PahoDevice:
    def __init__(self, host: str, port: int, token: str | None, protocol: str = "3.1.1", client_id: str | None = None,
                 max_inflight: int = 20):
        self.protocol = protocol
        self.is_v5 = protocol == "5"
        # MQTT 3.1 allows at most 23 characters of client id.
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id or unique("e2e")[:23],
                                  protocol=PROTOCOLS[protocol])
        if token is not None:
            self.client.username_pw_set(token)
        self.client.max_inflight_messages_set(max_inflight)
        self.host, self.port = host, port
        self.lock = threading.Lock()
        self.connected = threading.Event()
        self.connack_code: int | None = None
        self.disconnected = threading.Event()
        self.disconnect_code: int | None = None
        self.puback_reasons: dict[int, int] = {}
        self.suback_events: dict[int, threading.Event] = {}
        self.suback_codes: dict[int, list[int]] = {}
        self.messages: list[mqtt.MQTTMessage] = []
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_publish = self._on_publish
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message

    # ---- callbacks (paho's thread) ---------------------------------------------------------------------------

    def _on_connect(self, client, userdata, flags, reason_code, properties):
        self.connack_code = reason_value(reason_code)
        self.connected.set()

    def _on_disconnect(self, client, userdata, flags, reason_code, properties):
        self.disconnect_code = reason_value(reason_code)
        self.disconnected.set()

    def _on_publish(self, client, userdata, mid, reason_code, properties):
        with self.lock:
            self.puback_reasons[mid] = reason_value(reason_code)

    def _on_subscribe(self, client, userdata, mid, reason_code_list, properties):
        with self.lock:
            self.suback_codes[mid] = [reason_value(c) for c in reason_code_list]
            event = self.suback_events.setdefault(mid, threading.Event())
        event.set()

    def _on_message(self, client, userdata, message):
        with self.lock:
            self.messages.append(message)

    # ---- blocking API ----------------------------------------------------------------------------------------

    def connect(self, expect_success: bool = True) -> int:
        """Connect and wait for the CONNACK; returns its code (0 = accepted)."""
        self.client.reconnect_delay_set(1, 2)
        self.client.connect(self.host, self.port, keepalive=60)
        self.client.loop_start()
        assert self.connected.wait(ACK_TIMEOUT_S), "no CONNACK"
        if expect_success:
            assert self.connack_code == 0, f"CONNACK code {self.connack_code:#x}"
        return self.connack_code

    def close(self) -> None:
        try:
            self.client.disconnect()
        finally:
            self.client.loop_stop()

    def publish(self, topic: str, payload: Any, qos: int = 1) -> int:
        """Publish and, for QoS 1, wait for the PUBACK; returns its reason code (always 0 on 3.x)."""
        data = payload if isinstance(payload, (bytes, str)) else json.dumps(payload)
        info = self.client.publish(topic, data, qos=qos)
        assert info.rc == mqtt.MQTT_ERR_SUCCESS, f"paho refused to queue the publish: rc={info.rc}"
        if qos == 0:
            return 0
        info.wait_for_publish(timeout=ACK_TIMEOUT_S)
        assert info.is_published(), f"no PUBACK within {ACK_TIMEOUT_S} s for {topic}"
        with self.lock:
            return self.puback_reasons[info.mid]

    def publish_ok(self, topic: str, payload: Any) -> None:
        reason = self.publish(topic, payload)
        assert reason == 0, f"PUBACK reason {reason:#x} for {topic}"

    def subscribe(self, filters: list[tuple[str, int]]) -> list[int]:
        """Subscribe and wait for the SUBACK; returns the granted QoS / reason code per filter."""
        rc, mid = self.client.subscribe(filters)
        assert rc == mqtt.MQTT_ERR_SUCCESS, f"paho refused to send SUBSCRIBE: rc={rc}"
        with self.lock:
            event = self.suback_events.setdefault(mid, threading.Event())
        assert event.wait(ACK_TIMEOUT_S), "no SUBACK"
        with self.lock:
            return self.suback_codes[mid]
