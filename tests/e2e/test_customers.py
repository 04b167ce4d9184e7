"""Issue 5, customers and device assignment (reference 4.2, 4.3) through tb-rest-client where it speaks the CE API
(save, list, find by title, delete) and plain REST for assignment (tb-rest-client 4.x assigns through the PE-only
owner API).
"""

from __future__ import annotations

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
