"""Alarms (reference §4.8) through ThingsBoard's Python REST SDK, tb-rest-client 4.4.

The SDK deserializes every answer into its generated models (`Alarm`, `AlarmInfo`, `PageDataAlarmInfo`,
`PageDataEntitySubtype`), whose constructors raise when a required field (type, originator, severity,
acknowledged, cleared, name, status) is missing; getting the models back with the right values is the proof that
the client parses Fleetwire's JSON."""

from __future__ import annotations

import json
import time

import pytest
from tb_rest_client.models.alarm import Alarm
from tb_rest_client.models.alarm_info import AlarmInfo
from tb_rest_client.models.device import Device as TbDevice
from tb_rest_client.models.entity_id import EntityId
from tb_rest_client.rest import ApiException
from tb_rest_client.rest_client import RestClient

from harness import TENANT_PASSWORD, TENANT_USER, unique


@pytest.fixture
def rest_client(server):
    client = RestClient(base_url=server.base_url)
    client.login(username=TENANT_USER, password=TENANT_PASSWORD)
    yield client
    client.stop()


def error_message(err: ApiException) -> str:
    """The `message` of ThingsBoard's JSON error body (the SDK keeps the body as bytes)."""
    return json.loads(err.body)["message"]


def new_device(client: RestClient) -> TbDevice:
    return client.save_device(TbDevice(name=unique("alarm-device"), label="Boiler room", type="default"))


def new_alarm(device: TbDevice, alarm_type: str, severity: str, **fields) -> Alarm:
    # `name` and `status` are read-only on the server, but the SDK's model refuses to be built without them.
    return Alarm(type=alarm_type, originator=EntityId(id=device.id.id, entity_type="DEVICE"), severity=severity,
                 acknowledged=False, cleared=False, name=alarm_type, status="ACTIVE_UNACK", **fields)


def test_alarm_lifecycle(rest_client):
    device = new_device(rest_client)
    before_ms = int(time.time() * 1000)
    alarm = rest_client.save_alarm(new_alarm(device, "battery low", "CRITICAL",
                                             details={"data": "battery = 10"}))
    assert isinstance(alarm, Alarm)
    assert alarm.id.entity_type == "ALARM" and alarm.id.id
    assert (alarm.type, alarm.name, alarm.severity, alarm.status) == \
        ("battery low", "battery low", "CRITICAL", "ACTIVE_UNACK")
    assert alarm.originator.id == device.id.id and alarm.originator.entity_type == "DEVICE"
    assert alarm.details == {"data": "battery = 10"}
    assert alarm.start_ts >= before_ms and alarm.end_ts == alarm.start_ts
    assert (alarm.ack_ts, alarm.clear_ts, alarm.acknowledged, alarm.cleared) == (0, 0, False, False)
    assert alarm.assignee_id is None

    # Saving the same type again updates the active alarm instead of creating a second one.
    again = rest_client.save_alarm(new_alarm(device, "battery low", "MAJOR"))
    assert again.id.id == alarm.id.id and again.severity == "MAJOR"

    fetched = rest_client.get_alarm_by_id(alarm.id)
    assert fetched.id.id == alarm.id.id and fetched.severity == "MAJOR"
    info = rest_client.get_alarm_info_by_id(alarm.id)
    assert isinstance(info, AlarmInfo)
    assert (info.originator_name, info.originator_label, info.originator_display_name) == \
        (device.name, "Boiler room", "Boiler room")
    assert info.assignee is None

    acked = rest_client.ack_alarm(alarm.id)
    assert isinstance(acked, AlarmInfo)
    assert (acked.acknowledged, acked.status) == (True, "ACTIVE_ACK") and acked.ack_ts >= before_ms
    with pytest.raises(ApiException) as err:
        rest_client.ack_alarm(alarm.id)
    assert (err.value.status, error_message(err.value)) == (400, "Alarm was already acknowledged!")

    me = rest_client.get_user()
    assigned = rest_client.assign_alarm(alarm.id, me.id.id)
    assert assigned.assignee_id.id == me.id.id and assigned.assign_ts > 0
    info = rest_client.get_alarm_info_by_id(alarm.id)
    assert info.assignee.email == TENANT_USER and info.assignee.id.id == me.id.id
    unassigned = rest_client.unassign_alarm(alarm.id)
    assert unassigned.assignee_id is None

    cleared = rest_client.clear_alarm(alarm.id)
    assert (cleared.cleared, cleared.status) == (True, "CLEARED_ACK") and cleared.clear_ts >= before_ms
    with pytest.raises(ApiException) as err:
        rest_client.clear_alarm(alarm.id)
    assert (err.value.status, error_message(err.value)) == (400, "Alarm was already cleared!")

    # Once cleared, the same type makes a new alarm.
    fresh = rest_client.save_alarm(new_alarm(device, "battery low", "WARNING"))
    assert fresh.id.id != alarm.id.id and fresh.status == "ACTIVE_UNACK"

    assert rest_client.delete_alarm(alarm.id) is True
    with pytest.raises(ApiException) as err:
        rest_client.get_alarm_by_id(alarm.id)
    assert err.value.status == 404


def test_alarm_pages_highest_severity_and_types(rest_client):
    device = new_device(rest_client)
    quiet = new_device(rest_client)
    prefix = unique("type")
    ids = {}
    for suffix, severity in [("a", "CRITICAL"), ("b", "MINOR"), ("c", "MAJOR")]:
        ids[suffix] = rest_client.save_alarm(new_alarm(device, f"{prefix}-{suffix}", severity)).id
    rest_client.ack_alarm(ids["b"])
    rest_client.clear_alarm(ids["c"])

    page = rest_client.get_alarms(device.id, page_size=10, page=0, sort_property="createdTime", sort_order="ASC")
    assert [a.type for a in page.data] == [f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"]
    assert (page.total_elements, page.total_pages, page.has_next) == (3, 1, False)
    assert all(isinstance(a, AlarmInfo) and a.originator_name == device.name for a in page.data)

    active = rest_client.get_alarms(device.id, page_size=10, page=0, search_status="ACTIVE")
    assert sorted(a.type for a in active.data) == [f"{prefix}-a", f"{prefix}-b"]
    acked = rest_client.get_alarms(device.id, page_size=10, page=0, status="ACTIVE_ACK")
    assert [a.type for a in acked.data] == [f"{prefix}-b"]
    with pytest.raises(ApiException) as err:
        rest_client.get_alarms(device.id, page_size=10, page=0, search_status="ACTIVE", status="ACTIVE_ACK")
    assert err.value.status == 400

    first = rest_client.get_alarms(device.id, page_size=2, page=0, sort_property="severity", sort_order="ASC")
    assert [a.severity for a in first.data] == ["CRITICAL", "MAJOR"] and first.has_next
    assert first.total_pages == 2

    everything = rest_client.get_all_alarms(page_size=100, page=0, text_search=prefix)
    assert everything.total_elements == 3

    # v2: the SDK sends each list item as its own parameter (statusList=A&statusList=B).
    v2 = rest_client.get_alarms_v2(device.id, page_size=10, page=0, status_list=["ACTIVE", "UNACK"])
    assert [a.type for a in v2.data] == [f"{prefix}-a"]
    v2 = rest_client.get_all_alarms_v2(page_size=10, page=0, severity_list=["MINOR", "MAJOR"],
                                       type_list=[f"{prefix}-b", f"{prefix}-c"])
    assert sorted(a.type for a in v2.data) == [f"{prefix}-b", f"{prefix}-c"]

    assert rest_client.get_highest_alarm_severity(device.id) == "CRITICAL"
    assert rest_client.get_highest_alarm_severity(device.id, search_status="CLEARED") == "MAJOR"
    assert rest_client.get_highest_alarm_severity(quiet.id) is None

    types = rest_client.get_alarm_types(page_size=100, page=0, text_search=prefix)
    assert [t.type for t in types.data] == [f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"]
    assert all(t.entity_type == "ALARM" and t.tenant_id.id for t in types.data)
    second = rest_client.get_alarm_types(page_size=2, page=1, text_search=prefix, sort_order="DESC")
    assert [t.type for t in second.data] == [f"{prefix}-a"] and not second.has_next


def test_deleting_a_device_deletes_its_alarms(rest_client):
    device = new_device(rest_client)
    alarm = rest_client.save_alarm(new_alarm(device, "door open", "WARNING"))
    rest_client.delete_device(device.id)
    with pytest.raises(ApiException) as err:
        rest_client.get_alarm_info_by_id(alarm.id)
    assert err.value.status == 404


@pytest.mark.crash
def test_active_alarm_survives_kill9_without_duplicate(fresh_server):
    """A REST write that returned is durable (SQLite, synchronous = FULL), and the active-alarm index is rebuilt at
    start: after kill -9, creating the same type updates the stored alarm instead of adding a second one."""
    client = RestClient(base_url=fresh_server.base_url)
    client.login(username=TENANT_USER, password=TENANT_PASSWORD)
    device = new_device(client)
    alarm = client.save_alarm(new_alarm(device, "battery low", "MAJOR"))
    client.ack_alarm(alarm.id)
    client.stop()

    fresh_server.kill9()
    fresh_server.start()

    client = RestClient(base_url=fresh_server.base_url)
    client.login(username=TENANT_USER, password=TENANT_PASSWORD)
    try:
        again = client.save_alarm(new_alarm(device, "battery low", "CRITICAL"))
        assert again.id.id == alarm.id.id
        assert (again.severity, again.acknowledged) == ("CRITICAL", True)
        page = client.get_alarms(device.id, page_size=10, page=0)
        assert page.total_elements == 1
    finally:
        client.stop()
