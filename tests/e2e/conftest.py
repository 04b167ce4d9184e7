"""Fixtures: one shared Fleetwire process for the functional tests, a private one for tests that kill or restart
it, and the server log attached to every failing test's report."""

from __future__ import annotations

import pytest

import harness
from harness import Device, FleetwireServer


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> FleetwireServer:
    """The shared server. Tests using it create their own devices, so they do not see each other's data."""
    srv = FleetwireServer(tmp_path_factory.mktemp("fleetwire-shared"), name="shared")
    srv.start()
    yield srv
    code = srv.stop()
    assert code == 0, f"shared server did not exit cleanly on SIGTERM (exit {code}); log tail:\n{srv.log_tail(4000)}"


@pytest.fixture
def fresh_server(tmp_path) -> FleetwireServer:
    """A private server for tests that kill -9 or restart it."""
    srv = FleetwireServer(tmp_path, name="private")
    srv.start()
    yield srv
    if srv.is_running():
        srv.stop()


@pytest.fixture
def device(server) -> Device:
    return server.create_device()


@pytest.fixture(autouse=True)
def _mark_server_logs(request):
    """Remember how long each server log was when the test started, to attach only what the test produced."""
    request.node._fleetwire_log_marks = {id(s): s.log_size() for s in harness.SERVERS}
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    marks = getattr(item, "_fleetwire_log_marks", {})
    for srv in harness.SERVERS:
        text = srv.log_text(marks.get(id(srv), 0))
        if not text.strip():
            continue
        if len(text) > 30000:
            text = "[... earlier output cut ...]\n" + text[-30000:]
        report.sections.append((f"fleetwire log ({srv.name}, {srv.log_path})", text))
