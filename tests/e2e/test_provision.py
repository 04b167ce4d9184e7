"""Issue 5, device provisioning (reference 1.11): tb-mqtt-client's `TBDeviceMqttClient.provision` over an MQTT
`provision` session, and `POST /api/v1/provision`, against profiles with ALLOW_CREATE_NEW_DEVICES and
CHECK_PRE_PROVISIONED_DEVICES; ACCESS_TOKEN and MQTT_BASIC credentials; the NOT_FOUND and FAILURE answers; and
what a provisioning session may not do.
"""

from __future__ import annotations

import requests
from tb_device_mqtt import TBDeviceMqttClient

from harness import unique
from mqtt_device import PahoDevice


def create_profile(server, provision_type: str) -> tuple[dict, str, str]:
    key, secret = unique("key"), unique("secret")
    body = {"name": unique("provision-profile"), "type": "DEFAULT", "transportType": "DEFAULT",
            "provisionType": provision_type, "provisionDeviceKey": key,
            "profileData": {"configuration": {"type": "DEFAULT"}, "transportConfiguration": {"type": "DEFAULT"},
                            "provisionConfiguration": {"type": provision_type, "provisionDeviceSecret": secret},
                            "alarms": None}}
    resp = server.rest("POST", "/api/deviceProfile", json=body)
    assert resp.status_code == 200, resp.text
    return resp.json(), key, secret


def provision_http(server, body: dict) -> dict:
    resp = requests.post(f"{server.base_url}/api/v1/provision", json=body, timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()


def server_attribute(server, device_id: str, key: str):
    resp = server.rest("GET", f"/api/plugins/telemetry/DEVICE/{device_id}/values/attributes/SERVER_SCOPE",
                       params={"keys": key})
    assert resp.status_code == 200, resp.text
    return {a["key"]: a["value"] for a in resp.json()}.get(key)


def test_allow_create_new_devices_with_the_thingsboard_sdk(server):
    profile, key, secret = create_profile(server, "ALLOW_CREATE_NEW_DEVICES")
    name, token = unique("provisioned"), unique("PROV_TOKEN")
    credentials = TBDeviceMqttClient.provision(server.host, key, secret, port=server.mqtt_port, device_name=name,
                                               access_token=token)
    assert credentials == {"credentialsValue": token, "credentialsType": "ACCESS_TOKEN", "status": "SUCCESS"}
    device = server.rest("GET", "/api/tenant/devices", params={"deviceName": name}).json()
    assert device["deviceProfileId"]["id"] == profile["id"]["id"]
    assert server_attribute(server, device["id"]["id"], "provisionState") == "provisioned"
    # The device works with what it got.
    paho = PahoDevice(server.host, server.mqtt_port, token)
    paho.connect()
    paho.publish_ok("v1/devices/me/telemetry", {"provisioned": 1})
    paho.close()

    # The same name again fails; a wrong secret or key is not found.
    again = provision_http(server, {"deviceName": name, "provisionDeviceKey": key, "provisionDeviceSecret": secret})
    assert again == {"errorMsg": "Failed to provision device!", "status": "FAILURE"}
    for bad in ({"provisionDeviceKey": key, "provisionDeviceSecret": "wrong"},
                {"provisionDeviceKey": "no-such-key", "provisionDeviceSecret": secret}, {}):
        assert provision_http(server, {"deviceName": unique("x"), **bad}) == {
            "errorMsg": "Provision data was not found!", "status": "NOT_FOUND"}

    # MQTT_BASIC credentials, then a CONNECT with them; a gateway flag makes a gateway; no name: a random one.
    basic = provision_http(server, {"deviceName": unique("basic"), "provisionDeviceKey": key,
                                    "provisionDeviceSecret": secret, "credentialsType": "MQTT_BASIC",
                                    "clientId": unique("c"), "username": unique("u"), "password": "p1",
                                    "gateway": True})
    assert basic["status"] == "SUCCESS" and basic["credentialsType"] == "MQTT_BASIC", basic
    value = basic["credentialsValue"]
    assert value["password"] == "p1"
    device = PahoDevice(server.host, server.mqtt_port, value["userName"], client_id=value["clientId"])
    device.client.username_pw_set(value["userName"], value["password"])
    assert device.connect() == 0
    device.close()
    anonymous = provision_http(server, {"provisionDeviceKey": key, "provisionDeviceSecret": secret})
    assert anonymous["status"] == "SUCCESS" and len(anonymous["credentialsValue"]) == 20


def test_check_pre_provisioned_devices_once(server):
    profile, key, secret = create_profile(server, "CHECK_PRE_PROVISIONED_DEVICES")
    name, token = unique("pre"), unique("PRE_TOKEN")
    resp = server.rest("POST", "/api/device", params={"accessToken": token},
                       json={"name": name, "deviceProfileId": profile["id"]})
    assert resp.status_code == 200, resp.text
    body = {"deviceName": name, "provisionDeviceKey": key, "provisionDeviceSecret": secret}
    assert provision_http(server, body) == {"credentialsValue": token, "credentialsType": "ACCESS_TOKEN",
                                            "status": "SUCCESS"}
    assert provision_http(server, body)["status"] == "FAILURE", "a device is provisioned once"
    assert provision_http(server, {**body, "deviceName": unique("absent")})["status"] == "NOT_FOUND"
    # A device of another profile is not this profile's to hand out.
    other = server.create_device()
    assert provision_http(server, {**body, "deviceName": other.name})["status"] == "NOT_FOUND"


def test_a_provisioning_session_may_only_provision(server):
    paho = PahoDevice(server.host, server.mqtt_port, "provision", protocol="5")
    assert paho.connect() == 0
    assert paho.subscribe([("/provision/response", 1), ("v1/devices/me/attributes", 1)]) == [1, 0x8F]
    assert paho.publish("v1/devices/me/telemetry", {"x": 1}) == 0x90
    assert paho.disconnected.wait(10)
    paho.close()
