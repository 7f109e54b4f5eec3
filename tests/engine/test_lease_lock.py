"""The Lease that ``rackctl reconcile --lease`` holds (``reconciler/engine/leaselock.py``): first the
Kubernetes behaviour it relies on (contract tests through the real ``kubernetes`` client, as in
``test_kube_contract.py``), then acquire, the held-by message, take-over of a lapsed or released
Lease, 409 races, renewal, a lost Lease and release, against the fake API server over HTTP.

By default against the fake API server in ``tests/fakekube`` (one per module). With
``RACKCTL_E2E_KUBECONFIG`` naming a kubeconfig, the tests marked ``any_server`` run against that
real cluster instead, in namespace ``default`` with unique Lease names, deleted afterwards.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import secrets
import socket
import threading
import time

import kubernetes
import pytest
from kubehelp import contract_backend
from kubernetes.client import ApisApi, CoordinationV1Api
from kubernetes.client.exceptions import ApiException

from reconciler.engine.leaselock import (DEFAULT_DURATION_S, LeaseHeld, LeaseLock, LeaseRef, holder_identity,
                                         micro_time, parse_ref, parse_time)
from reconciler.errors import InputError, TargetError

E2E_KUBECONFIG = os.environ.get("RACKCTL_E2E_KUBECONFIG")
GROUP = "coordination.k8s.io"
NAMESPACE = "default"
MICRO = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")

fake_only = pytest.mark.skipif(bool(E2E_KUBECONFIG), reason="pins the fake API server itself")


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    """(api_client, FakeKube or None) shared by the module's tests."""
    yield from contract_backend(tmp_path_factory)


class Leases:
    """The raw client for one test, a unique Lease name, and cleanup."""

    def __init__(self, api_client) -> None:
        self.api_client = api_client
        self.api = CoordinationV1Api(api_client)
        self.names: list[str] = []

    def name(self) -> str:
        name = f"rackctl-test-{secrets.token_hex(4)}"
        self.names.append(name)
        return name

    def ref(self) -> LeaseRef:
        return LeaseRef(NAMESPACE, self.name())

    def get(self, name: str) -> dict:
        """The Lease as raw JSON (the times exactly as the server serves them)."""
        return json.loads(self.api.read_namespaced_lease(name, NAMESPACE, _preload_content=False).data)

    def spec(self, ref: LeaseRef) -> dict:
        return self.get(ref.name)["spec"]

    def create(self, name: str, **spec) -> dict:
        body = {"apiVersion": f"{GROUP}/v1", "kind": "Lease", "metadata": {"name": name}, "spec": spec}
        return json.loads(self.api.create_namespaced_lease(NAMESPACE, body, _preload_content=False).data)

    def cleanup(self) -> None:
        for name in self.names:
            try:
                self.api.delete_namespaced_lease(name, NAMESPACE)
            except ApiException as exc:
                if exc.status != 404:
                    raise


@pytest.fixture
def leases(backend):
    api_client, _ = backend
    out = Leases(api_client)
    try:
        yield out
    finally:
        out.cleanup()


def lock(leases: Leases, ref: LeaseRef, who: str, **kwargs) -> LeaseLock:
    return LeaseLock(leases.api_client, ref, identity=who, **kwargs)


def ago(seconds: float) -> str:
    return micro_time(dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds))


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.05)


# --- the API server's Lease behaviour (contract) ------------------------------------------------

def test_discovery_serves_namespaced_leases_with_create_get_update(backend):
    api_client, _ = backend
    groups = {g.name: g for g in ApisApi(api_client).get_api_versions().groups}
    assert "v1" in [v.version for v in groups[GROUP].versions]
    resources = {r.name: r for r in CoordinationV1Api(api_client).get_api_resources().resources}
    assert resources["leases"].namespaced is True and resources["leases"].kind == "Lease"
    assert {"create", "get", "update", "list", "delete"} <= set(resources["leases"].verbs)


def test_create_read_replace_and_a_stale_resource_version(leases):
    name = leases.name()
    created = leases.create(name, holderIdentity="a", leaseDurationSeconds=30, leaseTransitions=0)
    assert created["metadata"]["namespace"] == NAMESPACE
    with pytest.raises(ApiException) as exc:
        leases.create(name, holderIdentity="b")
    assert (exc.value.status, json.loads(exc.value.body)["reason"]) == (409, "AlreadyExists")
    stale = leases.get(name)
    fresh = leases.get(name)
    fresh["spec"]["holderIdentity"] = "b"
    replaced = json.loads(leases.api.replace_namespaced_lease(name, NAMESPACE, fresh, _preload_content=False).data)
    assert replaced["metadata"]["resourceVersion"] != stale["metadata"]["resourceVersion"]
    stale["spec"]["holderIdentity"] = "c"
    with pytest.raises(ApiException) as exc:
        leases.api.replace_namespaced_lease(name, NAMESPACE, stale)
    assert (exc.value.status, json.loads(exc.value.body)["reason"]) == (409, "Conflict")
    assert leases.get(name)["spec"]["holderIdentity"] == "b"
    listed = leases.api.list_namespaced_lease(NAMESPACE, field_selector=f"metadata.name={name}").items
    assert [item.spec.holder_identity for item in listed] == ["b"]


def test_micro_times_need_six_fractional_digits_and_come_back_in_utc(leases):
    name = leases.name()
    # The client re-serializes a time with isoformat(): a whole second loses its fraction, and
    # the server's MicroTime decoder refuses that.
    with pytest.raises(ApiException) as exc:
        leases.create(name, renewTime="2025-06-01T10:00:00Z")
    assert exc.value.status == 400
    leases.create(name, renewTime="2025-06-01T12:00:00.123456+02:00", acquireTime=micro_time(
        dt.datetime(2025, 6, 1, 10, 0, tzinfo=dt.timezone.utc)))
    spec = leases.get(name)["spec"]
    assert spec["renewTime"] == "2025-06-01T10:00:00.123456Z"
    assert spec["acquireTime"] == "2025-06-01T10:00:00.000001Z"


def test_a_lease_in_a_missing_namespace_is_404(backend):
    api_client, _ = backend
    body = {"apiVersion": f"{GROUP}/v1", "kind": "Lease", "metadata": {"name": "x"}, "spec": {}}
    with pytest.raises(ApiException) as exc:
        CoordinationV1Api(api_client).create_namespaced_lease(f"no-such-ns-{secrets.token_hex(3)}", body)
    assert exc.value.status == 404


@fake_only
def test_lease_spec_validation_as_the_real_server(leases):
    for spec in ({"leaseDurationSeconds": 0}, {"leaseTransitions": -1}):
        with pytest.raises(ApiException) as exc:
            leases.create(leases.name(), **spec)
        assert (exc.value.status, json.loads(exc.value.body)["reason"]) == (422, "Invalid")


# --- acquire, held, take-over, release ------------------------------------------------------------

def test_acquire_creates_the_lease_as_client_go_keeps_it(leases):
    ref = leases.ref()
    before = dt.datetime.now(dt.timezone.utc)
    lock(leases, ref, "pass A").acquire()
    spec = leases.spec(ref)
    assert spec["holderIdentity"] == "pass A"
    assert spec["leaseDurationSeconds"] == DEFAULT_DURATION_S == 300
    assert spec["leaseTransitions"] == 0
    assert MICRO.fullmatch(spec["acquireTime"]) and MICRO.fullmatch(spec["renewTime"])
    acquired, renewed = parse_time(spec["acquireTime"]), parse_time(spec["renewTime"])
    assert before - dt.timedelta(seconds=1) <= acquired <= renewed <= dt.datetime.now(dt.timezone.utc)


def test_a_second_holder_is_refused_with_the_holder_and_times(leases):
    ref = leases.ref()
    lock(leases, ref, "rackctl reconcile, PID 42 on ctl01").acquire()
    spec = leases.spec(ref)
    with pytest.raises(LeaseHeld) as exc:
        lock(leases, ref, "pass B").acquire()
    assert exc.value.message == (f"lease {NAMESPACE}/{ref.name} is held by rackctl reconcile, PID 42 on ctl01 "
                                 f"since {spec['acquireTime']} (renewed {spec['renewTime']})")
    assert "300 s after its last renewal" in exc.value.hint
    assert leases.spec(ref) == spec  # the refused pass wrote nothing


def test_a_lapsed_lease_is_taken_over_and_counts_a_transition(leases):
    ref = leases.ref()
    leases.create(ref.name, holderIdentity="killed pass", leaseDurationSeconds=60, leaseTransitions=3,
                  acquireTime=ago(3600), renewTime=ago(61))
    lock(leases, ref, "pass B").acquire()
    spec = leases.spec(ref)
    assert (spec["holderIdentity"], spec["leaseTransitions"], spec["leaseDurationSeconds"]) == ("pass B", 4, 300)
    assert dt.datetime.now(dt.timezone.utc) - parse_time(spec["acquireTime"]) < dt.timedelta(seconds=30)


def test_a_lease_renewed_within_its_duration_is_still_held(leases):
    ref = leases.ref()
    leases.create(ref.name, holderIdentity="busy pass", leaseDurationSeconds=60, leaseTransitions=3,
                  acquireTime=ago(3600), renewTime=ago(50))
    with pytest.raises(LeaseHeld, match="is held by busy pass since"):
        lock(leases, ref, "pass B").acquire()
    assert leases.spec(ref)["holderIdentity"] == "busy pass"


def test_release_clears_the_holder_and_the_next_pass_takes_it(leases):
    ref = leases.ref()
    first = lock(leases, ref, "pass A")
    first.acquire()
    first.release()
    spec = leases.spec(ref)
    assert spec["holderIdentity"] == "" and spec["leaseTransitions"] == 0
    lock(leases, ref, "pass B").acquire()
    spec = leases.spec(ref)
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("pass B", 1)


def stale_first_read(monkeypatch, lease_lock: LeaseLock, first) -> None:
    """Make ``lease_lock``'s first read answer ``first`` (what it would have read a moment
    earlier), and later reads the real Lease."""
    real_get, reads = lease_lock._get, []

    def get():
        reads.append(1)
        return first if len(reads) == 1 else real_get()

    monkeypatch.setattr(lease_lock, "_get", get)


def test_a_take_over_that_loses_the_race_reports_the_winner(leases, monkeypatch):
    ref = leases.ref()
    leases.create(ref.name, holderIdentity="", leaseDurationSeconds=300, leaseTransitions=0)
    loser = lock(leases, ref, "pass B")
    stale_first_read(monkeypatch, loser, leases.get(ref.name))  # B read it free, then A took it
    lock(leases, ref, "pass A").acquire()
    with pytest.raises(LeaseHeld, match=f"lease {NAMESPACE}/{ref.name} is held by pass A since"):
        loser.acquire()  # its update carries the resourceVersion B read: 409
    assert leases.spec(ref)["holderIdentity"] == "pass A"


def test_a_create_that_loses_the_race_reports_the_winner(leases, monkeypatch):
    ref = leases.ref()
    loser = lock(leases, ref, "pass B")
    stale_first_read(monkeypatch, loser, None)  # B found no Lease, then A created it
    lock(leases, ref, "pass A").acquire()
    with pytest.raises(LeaseHeld, match="is held by pass A since"):
        loser.acquire()  # its create is 409 AlreadyExists
    assert leases.spec(ref)["holderIdentity"] == "pass A"


@fake_only
def test_a_missing_namespace_is_a_target_error_naming_the_request_and_server(backend):
    api_client, fake = backend
    with pytest.raises(TargetError) as exc:
        LeaseLock(api_client, LeaseRef("no-such-ns", "rackctl-reconcile"), identity="A").acquire()
    assert not isinstance(exc.value, LeaseHeld)
    assert exc.value.message == (f"kubernetes: create Lease no-such-ns/rackctl-reconcile: HTTP 404 from {fake.url}: "
                                 'namespaces "no-such-ns" not found')


def test_an_unreachable_server_is_a_target_error(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig.write_text(f"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: "
                          f"http://127.0.0.1:{port}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  "
                          "context: {cluster: c, user: u}\ncurrent-context: c\n")
    api_client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    api_client.configuration.retries = 0
    with pytest.raises(TargetError, match=f"kubernetes: get Lease a/b: cannot reach http://127.0.0.1:{port}"):
        LeaseLock(api_client, LeaseRef("a", "b"), identity="A").acquire()


# --- renewal --------------------------------------------------------------------------------------

def test_held_renews_every_third_of_the_duration_and_releases_at_the_end(leases):
    ref = leases.ref()
    events: list[tuple[str, str]] = []
    holder = lock(leases, ref, "pass A", duration_s=1)  # renewed every 1/3 s
    with holder.held(lambda event, message: events.append((event, message))):
        first = leases.spec(ref)
        wait_for(lambda: leases.spec(ref)["renewTime"] != first["renewTime"], timeout=5)
        renewed = leases.spec(ref)
        assert parse_time(renewed["renewTime"]) > parse_time(first["renewTime"])
        assert renewed["acquireTime"] == first["acquireTime"] and renewed["holderIdentity"] == "pass A"
        time.sleep(1.2)  # longer than the duration: renewed meanwhile, so still held
        with pytest.raises(LeaseHeld):
            lock(leases, ref, "pass B").acquire()
    assert events == [] and holder.problems == []
    assert leases.spec(ref)["holderIdentity"] == ""


def test_a_lease_taken_by_another_is_reported_lost_and_not_released(leases):
    ref = leases.ref()
    events: list[tuple[str, str]] = []
    lost = threading.Event()

    def report(event: str, message: str) -> None:
        events.append((event, message))
        lost.set()

    holder = lock(leases, ref, "pass A", duration_s=1)
    with holder.held(report):
        for _ in range(10):  # a renewal may land between this read and write: 409, read again
            lease = leases.get(ref.name)
            lease["spec"]["holderIdentity"] = "intruder"
            try:
                leases.api.replace_namespaced_lease(ref.name, NAMESPACE, lease)
                break
            except ApiException as exc:
                assert exc.status == 409
        assert lost.wait(5), "the loss was not reported"
    assert events == [("lease-lost", f"lease {NAMESPACE}/{ref.name} was lost: it is now held by intruder")]
    assert holder.problems == [events[0][1]]
    assert leases.spec(ref)["holderIdentity"] == "intruder"  # another's hold is never cleared


def test_a_failed_renewal_is_reported_and_kept_for_the_record(leases, monkeypatch):
    ref = leases.ref()
    events: list[tuple[str, str]] = []
    holder = lock(leases, ref, "pass A", duration_s=1)
    real_write = holder._write

    def failing(verb, body):
        if verb == "renew":
            raise TargetError("kubernetes: renew Lease: HTTP 503 from the API server: unavailable")
        return real_write(verb, body)

    monkeypatch.setattr(holder, "_write", failing)
    with holder.held(lambda event, message: events.append((event, message))):
        wait_for(lambda: events, timeout=5)
    assert events[0] == ("lease-renew-failed", f"lease {NAMESPACE}/{ref.name} not renewed: kubernetes: renew "
                         "Lease: HTTP 503 from the API server: unavailable")
    assert holder.problems[0] == events[0][1]
    assert leases.spec(ref)["holderIdentity"] == ""  # released all the same


# --- names, identity, times -----------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    ("rackctl/rackctl-reconcile", LeaseRef("rackctl", "rackctl-reconcile")),
    ("kube-system/rackctl.reconcile.dc1", LeaseRef("kube-system", "rackctl.reconcile.dc1")),
])
def test_parse_ref(value, expected):
    assert parse_ref(value) == expected and str(expected) == value


@pytest.mark.parametrize("value, words", [
    ("rackctl-reconcile", "is not NAMESPACE/NAME"),
    ("/x", "is not NAMESPACE/NAME"),
    ("x/", "is not NAMESPACE/NAME"),
    ("Rackctl/x", "namespace 'Rackctl' is not a DNS-1123 label"),
    ("rack.ctl/x", "namespace 'rack.ctl' is not a DNS-1123 label"),
    ("a" * 64 + "/x", "is not a DNS-1123 label"),
    ("rackctl/a/b", "Lease name 'a/b' is not a DNS-1123 subdomain"),
    ("rackctl/-x", "Lease name '-x' is not a DNS-1123 subdomain"),
    ("rackctl/" + "a" * 254, "is not a DNS-1123 subdomain"),
])
def test_parse_ref_refuses_what_kubernetes_would(value, words):
    with pytest.raises(InputError) as exc:
        parse_ref(value)
    assert exc.value.field == "--lease" and words in exc.value.message


def test_holder_identity_names_the_process_host_and_pod():
    host = socket.gethostname()
    assert holder_identity({}) == f"rackctl reconcile, PID {os.getpid()} on {host}"
    assert holder_identity({"POD_NAME": "rackctl-reconcile-29170-x2k4q"}) == \
        f"rackctl reconcile, PID {os.getpid()} on {host}, pod rackctl-reconcile-29170-x2k4q"
    assert holder_identity({"HOSTNAME": "pod-b", "KUBERNETES_SERVICE_HOST": "10.0.0.1"}).endswith(", pod pod-b")
    assert holder_identity({"HOSTNAME": "pod-b"}) == f"rackctl reconcile, PID {os.getpid()} on {host}"
    assert holder_identity({"POD_NAME": host}) == f"rackctl reconcile, PID {os.getpid()} on {host}"


def test_micro_time_and_parse_time():
    t = dt.datetime(2025, 6, 1, 12, 0, 0, 123456, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert micro_time(t) == "2025-06-01T10:00:00.123456Z"
    assert micro_time(t.replace(microsecond=0)) == "2025-06-01T10:00:00.000001Z"  # never a bare second
    assert parse_time("2025-06-01T10:00:00.123456Z") == t
    assert parse_time("2025-06-01T12:00:00.123456789+02:00") == t
    assert parse_time("2025-06-01T10:00:00Z") == t.replace(microsecond=0)
    assert parse_time("yesterday") is None and parse_time(None) is None and parse_time("2025-13-01T00:00:00Z") is None
