"""Issue 4, device-profile alarm rules evaluated on live data (reference section 5): a profile with ThingsBoard's
"battery low" rule plus a clear rule, devices of that profile publishing with tb-mqtt-client, and the alarms read
back through tb-rest-client. The evaluator's semantics are covered row by row by the `rules` crate's scenario files;
this checks the wiring: rules from the profile, one active alarm per device and type, escalation, clearing, a
profile edit taking effect, `active` as a rule key, and no duplicate after kill -9.
"""

from __future__ import annotations

import time

import pytest
from tb_device_mqtt import TBDeviceMqttClient, TBPublishInfo
from tb_rest_client.models.device_id import DeviceId
from tb_rest_client.rest_client import RestClient

from harness import TENANT_PASSWORD, TENANT_USER, eventually, unique


def numeric(key: str, operation: str, value, key_type: str = "TIME_SERIES") -> dict:
    return {"key": {"type": key_type, "key": key}, "valueType": "NUMERIC", "value": None,
            "predicate": {"type": "NUMERIC", "operation": operation,
                          "value": {"defaultValue": value, "userValue": None, "dynamicValue": None}}}


def rule(*conditions, details: str | None = None) -> dict:
    return {"condition": {"condition": list(conditions), "spec": {"type": "SIMPLE"}}, "schedule": None,
            "alarmDetails": details, "dashboardId": None}


BATTERY = {
    "id": "battery", "alarmType": "battery low",
    "createRules": {
        "CRITICAL": rule(numeric("batteryLevel", "LESS_OR_EQUAL", 10), details="battery = ${batteryLevel}"),
        "WARNING": rule(numeric("batteryLevel", "LESS_OR_EQUAL", 20), details="battery = ${batteryLevel}"),
    },
    "clearRule": rule(numeric("batteryLevel", "GREATER", 50)),
    "propagate": False, "propagateToOwner": False, "propagateToTenant": False, "propagateRelationTypes": None,
}


def create_profile(server, alarms: list) -> dict:
    body = {"name": unique("alarm-profile"), "type": "DEFAULT", "transportType": "DEFAULT",
            "provisionType": "DISABLED",
            "profileData": {"configuration": {"type": "DEFAULT"},
                            "transportConfiguration": {"type": "DEFAULT"},
                            "provisionConfiguration": {"type": "DISABLED", "provisionDeviceSecret": None},
                            "alarms": alarms}}
    resp = server.rest("POST", "/api/deviceProfile", json=body)
    assert resp.status_code == 200, resp.text
    return resp.json()


def create_device(server, profile: dict) -> tuple[str, str]:
    token = unique("ALARM_TOKEN")
    resp = server.rest("POST", "/api/device", params={"accessToken": token},
                       json={"name": unique("alarm-device"), "deviceProfileId": profile["id"]})
    assert resp.status_code == 200, resp.text
    return resp.json()["id"]["id"], token


def alarms_of(server, device_id: str, status: str = "ANY") -> list[dict]:
    resp = server.rest("GET", f"/api/alarm/DEVICE/{device_id}",
                       params={"pageSize": 100, "page": 0, "searchStatus": status})
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]


@pytest.fixture
def rest_client(server):
    client = RestClient(base_url=server.base_url)
    client.login(username=TENANT_USER, password=TENANT_PASSWORD)
    yield client
    client.stop()


def test_battery_rule_creates_escalates_and_clears_one_alarm(server, rest_client):
    profile = create_profile(server, [BATTERY])
    device_id, token = create_device(server, profile)
    device = TBDeviceMqttClient(server.host, port=server.mqtt_port, username=token)
    device.connect()
    try:
        def send(level: int) -> None:
            info = device.send_telemetry({"batteryLevel": level})
            assert info.get() == TBPublishInfo.TB_ERR_SUCCESS
            infos = info.message_info if isinstance(info.message_info, list) else [info.message_info]
            for message_info in infos:
                message_info.wait_for_publish(timeout=10)
                assert message_info.is_published()

        send(80)
        send(15)

        def one_warning() -> dict:
            found = alarms_of(server, device_id)
            assert len(found) == 1 and found[0]["severity"] == "WARNING", found
            return found[0]

        warning = eventually(one_warning)
        assert warning["type"] == "battery low" and warning["status"] == "ACTIVE_UNACK"
        assert warning["details"] == {"data": "battery = 15"}
        assert warning["originator"] == {"entityType": "DEVICE", "id": device_id}

        send(5)

        def escalated() -> dict:
            found = alarms_of(server, device_id)
            assert len(found) == 1 and found[0]["severity"] == "CRITICAL", found
            return found[0]

        critical = eventually(escalated)
        assert critical["id"] == warning["id"] and critical["details"] == {"data": "battery = 5"}

        # Severity never goes down while the alarm is active.
        send(18)
        send(30)
        info = rest_client.get_alarm_info_by_id(DeviceId(critical["id"]["id"], "ALARM"))
        assert info.severity == "CRITICAL"

        send(60)

        def cleared() -> None:
            found = alarms_of(server, device_id)
            assert len(found) == 1 and found[0]["cleared"] is True, found
            assert found[0]["status"] == "CLEARED_UNACK"

        eventually(cleared)
        assert alarms_of(server, device_id, "ACTIVE") == []

        # After a clear, the next low reading raises a new alarm.
        send(9)

        def second() -> None:
            active = alarms_of(server, device_id, "ACTIVE")
            assert len(active) == 1 and active[0]["id"] != critical["id"] and active[0]["severity"] == "CRITICAL"

        eventually(second)
    finally:
        device.disconnect()


def test_profile_edit_and_activity_key(server):
    profile = create_profile(server, [])
    device_id, token = create_device(server, profile)
    url = f"{server.base_url}/api/v1/{token}/telemetry"
    import requests

    assert requests.post(url, json={"temperature": 90}, timeout=10).status_code == 200
    assert alarms_of(server, device_id) == []

    # Add an overheat rule and an "online" alarm on the `active` attribute to the profile.
    online = {"key": {"type": "ATTRIBUTE", "key": "active"}, "valueType": "BOOLEAN", "value": None,
              "predicate": {"type": "BOOLEAN", "operation": "EQUAL",
                            "value": {"defaultValue": True, "userValue": None, "dynamicValue": None}}}
    profile["profileData"]["alarms"] = [
        {"id": "heat", "alarmType": "overheat", "createRules": {"MAJOR": rule(numeric("temperature", "GREATER", 80))},
         "clearRule": None, "propagate": False, "propagateToOwner": False, "propagateToTenant": False,
         "propagateRelationTypes": None},
        {"id": "on", "alarmType": "online", "createRules": {"INDETERMINATE": rule(online)},
         "clearRule": None, "propagate": False, "propagateToOwner": False, "propagateToTenant": False,
         "propagateRelationTypes": None},
    ]
    resp = server.rest("POST", "/api/deviceProfile", json=profile)
    assert resp.status_code == 200, resp.text
    assert requests.post(url, json={"temperature": 95}, timeout=10).status_code == 200

    def raised() -> None:
        types = {a["type"]: a["severity"] for a in alarms_of(server, device_id, "ACTIVE")}
        assert types.get("overheat") == "MAJOR", types

    eventually(raised)
    # The device was already active: a device that becomes active now raises "online".
    other_id, other_token = create_device(server, profile)
    assert requests.post(f"{server.base_url}/api/v1/{other_token}/telemetry", json={"temperature": 20},
                         timeout=10).status_code == 200

    def online_alarm() -> None:
        types = {a["type"] for a in alarms_of(server, other_id, "ACTIVE")}
        assert types == {"online"}, types

    eventually(online_alarm)


@pytest.mark.crash
def test_no_duplicate_alarm_after_kill_9(fresh_server):
    profile = create_profile(fresh_server, [BATTERY])
    device_id, token = create_device(fresh_server, profile)
    import requests

    url = f"{fresh_server.base_url}/api/v1/{token}/telemetry"
    for level in (50, 12, 8):
        assert requests.post(url, json={"batteryLevel": level}, timeout=10).status_code == 200
    eventually(lambda: _assert_one_active(fresh_server, device_id, "CRITICAL"))
    fresh_server.kill9()
    fresh_server.restart()
    fresh_server.login()
    # The log replays the records the processors had not persisted: the evaluator sees them again and finds the
    # alarm it already raised.
    assert requests.post(url, json={"batteryLevel": 7}, timeout=10).status_code == 200
    eventually(lambda: _assert_one_active(fresh_server, device_id, "CRITICAL", details="battery = 7"))
    assert len(alarms_of(fresh_server, device_id)) == 1


def test_replay_after_kill_9_does_not_raise_a_cleared_alarm_again(fresh_server):
    """The records that raised an alarm are replayed after kill -9 (the processors had not persisted them). If a
    user cleared the alarm in between, the replay must not raise it again: what those records caused was written
    once, and the processor's watermark says so."""
    import requests

    profile = create_profile(fresh_server, [BATTERY])
    device_id, token = create_device(fresh_server, profile)
    url = f"{fresh_server.base_url}/api/v1/{token}/telemetry"
    assert requests.post(url, json={"batteryLevel": 8}, timeout=10).status_code == 200
    alarm = eventually(lambda: _one_active(fresh_server, device_id))
    resp = fresh_server.rest("POST", f"/api/alarm/{alarm['id']['id']}/clear")
    assert resp.status_code == 200, resp.text
    fresh_server.kill9()
    fresh_server.restart()
    fresh_server.login()
    # A neutral reading, then a read that waits until the processor applied it, so the replay is done; a raise it
    # caused would be written within 100 ms.
    assert requests.post(url, json={"batteryLevel": 30}, timeout=10).status_code == 200
    resp = fresh_server.rest("GET", f"/api/plugins/telemetry/DEVICE/{device_id}/values/timeseries",
                             params={"keys": "batteryLevel"})
    assert resp.status_code == 200 and resp.json()["batteryLevel"][0]["value"] == "30", resp.text
    time.sleep(0.5)
    assert alarms_of(fresh_server, device_id, "ACTIVE") == []
    assert [a["id"] for a in alarms_of(fresh_server, device_id)] == [alarm["id"]]
    # New data after the replay is evaluated as usual.
    assert requests.post(url, json={"batteryLevel": 5}, timeout=10).status_code == 200
    again = eventually(lambda: _one_active(fresh_server, device_id))
    assert again["id"] != alarm["id"] and again["details"] == {"data": "battery = 5"}


def _assert_one_active(server, device_id: str, severity: str, details: str | None = None) -> None:
    active = alarms_of(server, device_id, "ACTIVE")
    assert len(active) == 1 and active[0]["severity"] == severity, active
    if details is not None:
        assert active[0]["details"] == {"data": details}, active


def test_rest_clear_restarts_a_repeating_rule(server, rest_client):
    """A REPEATING rule (3 matching messages) raises its alarm; clearing it through REST restarts the count, so
    the next alarm needs 3 more matching messages, not one (reference 5.2, item 6)."""
    import requests

    repeating = {
        "id": "repeat", "alarmType": "hot thrice",
        "createRules": {"MAJOR": {"condition": {"condition": [numeric("temperature", "GREATER", 50)],
                                                "spec": {"type": "REPEATING",
                                                         "predicate": {"defaultValue": 3, "userValue": None,
                                                                       "dynamicValue": None}}},
                                  "schedule": None, "alarmDetails": None, "dashboardId": None}},
        "clearRule": None, "propagate": False, "propagateToOwner": False, "propagateToTenant": False,
        "propagateRelationTypes": None,
    }
    profile = create_profile(server, [repeating])
    device_id, token = create_device(server, profile)
    url = f"{server.base_url}/api/v1/{token}/telemetry"

    def hot(times: int) -> None:
        for _ in range(times):
            assert requests.post(url, json={"temperature": 60}, timeout=10).status_code == 200

    hot(3)
    active = eventually(lambda: _one_active(server, device_id))
    resp = server.rest("POST", f"/api/alarm/{active['id']['id']}/clear")
    assert resp.status_code == 200, resp.text
    # The processor takes the clear before any record appended after it.
    assert alarms_of(server, device_id, "ACTIVE") == []
    hot(2)
    third_sent_at = int(time.time() * 1000)
    hot(1)
    second = eventually(lambda: _one_active(server, device_id))
    assert second["id"] != active["id"]
    # Had the count not restarted, the first of the two messages after the clear would have raised it.
    assert second["startTs"] >= third_sent_at, "the count did not restart after the REST clear"


def _one_active(server, device_id: str) -> dict:
    active = alarms_of(server, device_id, "ACTIVE")
    assert len(active) == 1, active
    return active[0]




def test_tenant_attribute_as_a_dynamic_threshold(server):
    """A CURRENT_TENANT dynamic value reads the tenant's SERVER attribute, saved through REST on the TENANT entity
    (reference 5.1): with the default of 100 a reading of 40 raises nothing; with the tenant's 30 it does."""
    import requests

    me = server.rest("GET", "/api/auth/user").json()
    tenant_id = me["tenantId"]["id"]
    hot = {"key": {"type": "TIME_SERIES", "key": "temperature"}, "valueType": "NUMERIC", "value": None,
           "predicate": {"type": "NUMERIC", "operation": "GREATER",
                         "value": {"defaultValue": 100, "userValue": None,
                                   "dynamicValue": {"sourceType": "CURRENT_TENANT", "sourceAttribute": "maxTemp",
                                                    "inherit": False}}}}
    alarm = {"id": "tenant-hot", "alarmType": "above tenant limit", "createRules": {"MINOR": rule(hot)},
             "clearRule": None, "propagate": False, "propagateToOwner": False, "propagateToTenant": False,
             "propagateRelationTypes": None}
    profile = create_profile(server, [alarm])
    device_id, token = create_device(server, profile)
    url = f"{server.base_url}/api/v1/{token}/telemetry"
    assert requests.post(url, json={"temperature": 40}, timeout=10).status_code == 200
    server.rest("GET", f"/api/plugins/telemetry/DEVICE/{device_id}/values/timeseries")  # waits for the processor
    assert alarms_of(server, device_id) == []

    path = f"/api/plugins/telemetry/TENANT/{tenant_id}/attributes/SERVER_SCOPE"
    resp = server.rest("POST", path, json={"maxTemp": 30})
    assert resp.status_code == 200, resp.text
    resp = server.rest("GET", f"/api/plugins/telemetry/TENANT/{tenant_id}/values/attributes/SERVER_SCOPE")
    assert [(a["key"], a["value"]) for a in resp.json()] == [("maxTemp", 30)]
    other_tenant = "13814000-1dd2-11b2-8080-808080808080"
    assert server.rest("POST", f"/api/plugins/telemetry/TENANT/{other_tenant}/attributes/SERVER_SCOPE",
                       json={"maxTemp": 1}).status_code == 403

    assert requests.post(url, json={"temperature": 41}, timeout=10).status_code == 200
    eventually(lambda: _one_active(server, device_id))


def test_customer_attribute_as_a_dynamic_threshold(server):
    """CURRENT_CUSTOMER reads the SERVER attribute of the customer the device is assigned to: 41 raises the alarm
    for the customer's device (its maxTemp is 30) and not for an unassigned one (default 100)."""
    import requests

    hot = {"key": {"type": "TIME_SERIES", "key": "temperature"}, "valueType": "NUMERIC", "value": None,
           "predicate": {"type": "NUMERIC", "operation": "GREATER",
                         "value": {"defaultValue": 100, "userValue": None,
                                   "dynamicValue": {"sourceType": "CURRENT_CUSTOMER", "sourceAttribute": "maxTemp",
                                                    "inherit": False}}}}
    alarm = {"id": "customer-hot", "alarmType": "above customer limit", "createRules": {"MINOR": rule(hot)},
             "clearRule": None, "propagate": False, "propagateToOwner": False, "propagateToTenant": False,
             "propagateRelationTypes": None}
    profile = create_profile(server, [alarm])
    assigned_id, assigned_token = create_device(server, profile)
    loose_id, loose_token = create_device(server, profile)
    customer_id = server.rest("POST", "/api/customer", json={"title": unique("Cold customer")}).json()["id"]["id"]
    assert server.rest("POST", f"/api/customer/{customer_id}/device/{assigned_id}").status_code == 200
    resp = server.rest("POST", f"/api/plugins/telemetry/CUSTOMER/{customer_id}/attributes/SERVER_SCOPE",
                       json={"maxTemp": 30})
    assert resp.status_code == 200, resp.text
    resp = server.rest("GET", f"/api/plugins/telemetry/CUSTOMER/{customer_id}/values/attributes/SERVER_SCOPE")
    assert [(a["key"], a["value"]) for a in resp.json()] == [("maxTemp", 30)]

    for token in (assigned_token, loose_token):
        url = f"{server.base_url}/api/v1/{token}/telemetry"
        assert requests.post(url, json={"temperature": 41}, timeout=10).status_code == 200
    eventually(lambda: _one_active(server, assigned_id))
    server.rest("GET", f"/api/plugins/telemetry/DEVICE/{loose_id}/values/timeseries")  # waits for the processor
    time.sleep(0.3)
    assert alarms_of(server, loose_id) == []


def test_a_device_moved_to_a_profile_with_rules_is_evaluated_by_them(server):
    import requests

    bare = create_profile(server, [])
    heat = {"id": "heat", "alarmType": "overheat", "createRules": {"MAJOR": rule(numeric("temperature", "GREATER", 80))},
            "clearRule": None, "propagate": False, "propagateToOwner": False, "propagateToTenant": False,
            "propagateRelationTypes": None}
    ruled = create_profile(server, [heat])
    device_id, token = create_device(server, bare)
    url = f"{server.base_url}/api/v1/{token}/telemetry"
    assert requests.post(url, json={"temperature": 95}, timeout=10).status_code == 200
    server.rest("GET", f"/api/plugins/telemetry/DEVICE/{device_id}/values/timeseries")  # waits for the processor
    assert alarms_of(server, device_id) == []

    device = server.rest("GET", f"/api/device/{device_id}").json()
    device["deviceProfileId"] = ruled["id"]
    resp = server.rest("POST", "/api/device", json=device)
    assert resp.status_code == 200, resp.text
    assert requests.post(url, json={"temperature": 96}, timeout=10).status_code == 200
    active = eventually(lambda: _one_active(server, device_id))
    assert active["type"] == "overheat"
