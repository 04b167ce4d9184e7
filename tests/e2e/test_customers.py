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
