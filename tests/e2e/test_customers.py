"""Issue 5, customers and device assignment (reference 4.2, 4.3) through tb-rest-client where it speaks the CE API
(save, list, find by title, delete) and plain REST for assignment (tb-rest-client 4.x assigns through the PE-only
owner API).
"""

from __future__ import annotations

import time

import pytest
from tb_rest_client.models.customer import Customer
from tb_rest_client.models.customer_id import CustomerId
from tb_rest_client.rest_client import RestClient

from harness import TENANT_PASSWORD, TENANT_USER, unique

NULL_UUID = "13814000-1dd2-11b2-8080-808080808080"


@pytest.fixture
def rest_client(server):
    client = RestClient(base_url=server.base_url)
    client.login(username=TENANT_USER, password=TENANT_PASSWORD)
    yield client
    client.stop()


def test_customers_and_device_assignment(server, rest_client):
    title = unique("Customer A")
    saved = rest_client.save_customer(Customer(title=title, email="a@example.com", country="NL"))
    customer_id = saved.id.id
    assert saved.title == title and saved.email == "a@example.com" and saved.country == "NL"
    assert rest_client.get_tenant_customer(title).id.id == customer_id
    assert rest_client.get_customer_by_id(CustomerId(customer_id, "CUSTOMER")).title == title
    listed = rest_client.get_customers(page_size=100, page=0, text_search=title)
    assert [c.id.id for c in listed.data] == [customer_id]
    # Titles are unique per tenant.
    resp = server.rest("POST", "/api/customer", json={"title": title})
    assert resp.status_code == 400 and resp.json()["message"] == "Customer with such title already exists!"

    device = server.create_device()
    resp = server.rest("POST", f"/api/customer/{customer_id}/device/{device.id}")
    assert resp.status_code == 200, resp.text
    assert resp.json()["customerId"] == {"entityType": "CUSTOMER", "id": customer_id}
    page = server.rest("GET", f"/api/customer/{customer_id}/devices", params={"pageSize": 10, "page": 0}).json()
    assert [d["id"]["id"] for d in page["data"]] == [device.id]
    assert server.rest("GET", f"/api/device/info/{device.id}").json()["customerTitle"] == title
    resp = server.rest("DELETE", f"/api/customer/device/{device.id}")
    assert resp.status_code == 200 and resp.json()["customerId"]["id"] == NULL_UUID

    # Deleting a customer gives its devices back to the tenant.
    assert server.rest("POST", f"/api/customer/{customer_id}/device/{device.id}").status_code == 200
    rest_client.delete_customer(CustomerId(customer_id, "CUSTOMER"))
    assert server.rest("GET", f"/api/customer/{customer_id}").status_code == 404
    assert server.rest("GET", f"/api/device/{device.id}").json()["customerId"]["id"] == NULL_UUID
    assert server.rest("POST", f"/api/customer/{customer_id}/device/{device.id}").status_code == 404


def test_a_customer_user_is_activated_and_sees_only_its_devices(server):
    import requests

    customer_id = server.rest("POST", "/api/customer", json={"title": unique("Customer B")}).json()["id"]["id"]
    mine, theirs = server.create_device(), server.create_device()
    assert server.rest("POST", f"/api/customer/{customer_id}/device/{mine.id}").status_code == 200
    email = f"{unique('user')}@example.com"
    resp = server.rest("POST", "/api/user", params={"sendActivationMail": "false"},
                       json={"email": email, "authority": "CUSTOMER_USER", "firstName": "Ann",
                             "customerId": {"entityType": "CUSTOMER", "id": customer_id}})
    assert resp.status_code == 200, resp.text
    user = resp.json()
    assert user["authority"] == "CUSTOMER_USER" and user["customerId"]["id"] == customer_id
    # Not activated yet: no login.
    login = requests.post(f"{server.base_url}/api/auth/login", json={"username": email, "password": "pw-1"}, timeout=10)
    assert login.status_code == 401
    link = server.rest("GET", f"/api/user/{user['id']['id']}/activationLink")
    assert link.status_code == 200 and "activateToken=" in link.text, link.text
    token = link.text.rsplit("activateToken=", 1)[1]
    activated = requests.post(f"{server.base_url}/api/noauth/activate",
                              json={"activateToken": token, "password": "pw-1"}, timeout=10)
    assert activated.status_code == 200 and activated.json()["token"], activated.text
    again = requests.post(f"{server.base_url}/api/noauth/activate",
                          json={"activateToken": token, "password": "pw-2"}, timeout=10)
    assert again.status_code == 404

    login = requests.post(f"{server.base_url}/api/auth/login", json={"username": email, "password": "pw-1"}, timeout=10)
    assert login.status_code == 200, login.text
    customer = requests.Session()
    customer.headers["X-Authorization"] = f"Bearer {login.json()['token']}"

    def get(path: str, **params) -> requests.Response:
        return customer.get(f"{server.base_url}{path}", params=params, timeout=10)

    assert get(f"/api/device/{mine.id}").status_code == 200
    assert get(f"/api/device/{theirs.id}").status_code == 403
    assert get(f"/api/plugins/telemetry/DEVICE/{mine.id}/values/timeseries", keys="x").status_code == 200
    assert get(f"/api/plugins/telemetry/DEVICE/{theirs.id}/values/timeseries", keys="x").status_code == 403
    page = get(f"/api/customer/{customer_id}/devices", pageSize=10, page=0).json()
    assert [d["id"]["id"] for d in page["data"]] == [mine.id]
    assert get("/api/tenant/devices", pageSize=10, page=0).status_code == 403
    # Its customer's attributes (what CURRENT_CUSTOMER alarm thresholds read): readable, not writable.
    base = f"{server.base_url}/api/plugins/telemetry/CUSTOMER/{customer_id}"
    assert get(f"/api/plugins/telemetry/CUSTOMER/{customer_id}/values/attributes/SERVER_SCOPE").status_code == 200
    assert customer.post(f"{base}/attributes/SERVER_SCOPE", json={"maxTemp": 99}, timeout=10).status_code == 403
    rpc = customer.post(f"{server.base_url}/api/rpc/oneway/{theirs.id}", json={"method": "m", "params": {}}, timeout=10)
    assert rpc.status_code == 403
    rpc = customer.post(f"{server.base_url}/api/rpc/oneway/{mine.id}",
                        json={"method": "m", "params": {}, "timeout": 5000}, timeout=20)
    assert rpc.status_code == 504, "allowed, but the device is offline"

    users = server.rest("GET", f"/api/customer/{customer_id}/users", params={"pageSize": 10, "page": 0}).json()
    assert [u["email"] for u in users["data"]] == [email]
    assert server.rest("DELETE", f"/api/user/{user['id']['id']}").status_code == 200
    login = requests.post(f"{server.base_url}/api/auth/login", json={"username": email, "password": "pw-1"}, timeout=10)
    assert login.status_code == 401


def customer_user_session(server, customer_id: str):
    """A new, activated user of the customer, logged in: a requests session with its token."""
    import requests

    email = f"{unique('claimer')}@example.com"
    user = server.rest("POST", "/api/user", json={"email": email, "authority": "CUSTOMER_USER",
                                                  "customerId": {"entityType": "CUSTOMER", "id": customer_id}}).json()
    link = server.rest("GET", f"/api/user/{user['id']['id']}/activationLink").text
    pair = requests.post(f"{server.base_url}/api/noauth/activate",
                         json={"activateToken": link.rsplit("activateToken=", 1)[1], "password": "pw"}, timeout=10)
    session = requests.Session()
    session.headers["X-Authorization"] = f"Bearer {pair.json()['token']}"
    return session


def test_claiming_from_a_device_the_http_api_and_a_gateway(server):
    """A device announces it may be claimed (tb-mqtt-client `claim`, the HTTP device API, a gateway's `gw_claim`);
    a customer user who knows the key claims it by name and it becomes the customer's; a second claim answers
    CLAIMED, a wrong key FAILURE; the customer can give it back."""
    import requests
    from tb_device_mqtt import TBDeviceMqttClient
    from tb_gateway_mqtt import TBGatewayMqttClient

    customer_id = server.rest("POST", "/api/customer", json={"title": unique("Claimers")}).json()["id"]["id"]
    user = customer_user_session(server, customer_id)

    def claim(name: str, key: str) -> requests.Response:
        return user.post(f"{server.base_url}/api/customer/device/{name}/claim", json={"secretKey": key}, timeout=10)

    # Over MQTT with ThingsBoard's SDK.
    device = server.create_device()
    client = TBDeviceMqttClient(server.host, port=server.mqtt_port, username=device.token)
    client.connect()
    try:
        info = client.claim(secret_key="abc", duration=60000)
        infos = info.message_info if isinstance(info.message_info, list) else [info.message_info]
        for message_info in infos:
            message_info.wait_for_publish(timeout=10)
            assert message_info.is_published(), "no PUBACK for the claim announcement"
        ok = None
        for _ in range(50):
            ok = claim(device.name, "abc")
            if ok.status_code == 200:
                break
            time.sleep(0.1)
        assert ok.status_code == 200, ok.text
        assert ok.json()["response"] == "SUCCESS"
        assert ok.json()["device"]["customerId"]["id"] == customer_id
    finally:
        client.stop()
        client.disconnect()
    again = claim(device.name, "abc")
    assert again.status_code == 400 and again.json() == "CLAIMED"

    # Over HTTP; a wrong key fails and does not use the announcement up.
    other = server.create_device()
    assert requests.post(f"{server.base_url}/api/v1/{other.token}/claim", json={"secretKey": "k2"},
                         timeout=10).status_code == 200
    wrong = claim(other.name, "nope")
    assert wrong.status_code == 400 and wrong.json() == "FAILURE"
    assert claim(other.name, "k2").status_code == 200

    # A gateway announces one of its devices.
    gateway_token = unique("GW_CLAIM")
    resp = server.rest("POST", "/api/device", params={"accessToken": gateway_token},
                       json={"name": unique("claim-gateway"), "additionalInfo": {"gateway": True}})
    assert resp.status_code == 200
    gateway = TBGatewayMqttClient(server.host, port=server.mqtt_port, username=gateway_token)
    gateway.connect()
    try:
        sub = unique("claimable")
        gateway.gw_connect_device(sub)
        gateway.gw_claim(sub, "gwkey", 60000)
        result = None
        for _ in range(50):
            result = claim(sub, "gwkey")
            if result.status_code == 200:
                break
            time.sleep(0.1)
        assert result.status_code == 200, result.text
    finally:
        gateway.stop()
        gateway.disconnect()

    # The customer gives a device back.
    assert user.delete(f"{server.base_url}/api/customer/device/{other.name}/claim", timeout=10).status_code == 200
    assert server.rest("GET", f"/api/device/{other.id}").json()["customerId"]["id"] == NULL_UUID
