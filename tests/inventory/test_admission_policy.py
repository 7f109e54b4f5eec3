"""The agent's ValidatingAdmissionPolicy (examples/kubernetes/discover-admission-policy.yaml),
attacked with recorded admission requests (tests/data/admission/*.yaml, AdmissionReview v1).

No API server runs here: ``admit`` evaluates the policy's own expressions, read from the YAML
file, with cel-python (``celpy``), the way kube-apiserver applies a policy: the
matchConstraints rules, then every matchCondition (all true, or the policy does not apply), then
the variables in order (``variables.NAME``), then every validation (a false or failing
expression denies; its messageExpression, when it evaluates to a string, else its message, is
the reason). The policy keeps to standard CEL, so both evaluators read the same text.
"""

from __future__ import annotations

from pathlib import Path

import celpy
import pytest
import yaml
from celpy import celtypes

from clihelp import ROOT, TESTS

POLICY_FILE = ROOT / "examples" / "kubernetes" / "discover-admission-policy.yaml"
DAEMONSET_FILE = ROOT / "examples" / "kubernetes" / "discover-daemonset.yaml"
REQUESTS = TESTS / "data" / "admission"

OTHER_NODE = "the rackctl agent on Node gb-r01-n01 may change that Node only, not gb-r01-n02"
NO_CLAIM = ("the rackctl agent's token names no Node (no authentication.kubernetes.io/node-name claim): the agent "
            "must run in a Pod, on Kubernetes 1.30+ with ServiceAccountTokenPodNodeInfo on")
LABELS = "the rackctl agent may not change a Node's labels"
ANNOTATIONS = "the rackctl agent may change no annotation but rackctl.dev/node-report"
FINALIZERS = "the rackctl agent may not change a Node's finalizers or owner references"
SPEC = "the rackctl agent may not change a Node's spec (taints, unschedulable, podCIDR, providerID)"
STATUS = "the rackctl agent may not change a Node's status"
NOT_AN_UPDATE = ("the rackctl agent may only update a Node's metadata: it may not create or delete a Node or "
                 "write its status")


def documents(path: Path) -> dict[str, dict]:
    return {d["kind"]: d for d in yaml.safe_load_all(path.read_text()) if d}


POLICY = documents(POLICY_FILE)["ValidatingAdmissionPolicy"]
_ENV = celpy.Environment()


def _evaluate(expression: str, activation: dict) -> object:
    """The value of one CEL ``expression``, or the exception its evaluation raised."""
    try:
        return _ENV.program(_ENV.compile(expression)).evaluate(activation)
    except Exception as exc:  # a CEL runtime error: kube-apiserver applies failurePolicy to it
        return exc


def _matches_rules(spec: dict, request: dict) -> bool:
    resource = request["resource"]
    name = resource["resource"] + (f"/{request['subResource']}" if request.get("subResource") else "")
    return any(resource["group"] in rule["apiGroups"] and {resource["version"], "*"} & set(rule["apiVersions"])
               and {request["operation"], "*"} & set(rule["operations"]) and name in rule["resources"]
               for rule in spec["matchConstraints"]["resourceRules"])


def admit(review: dict) -> list[str] | None:
    """None when the policy does not apply to ``review``'s request; else the reasons it denies
    it ([] = allowed)."""
    spec, request = POLICY["spec"], review["request"]
    assert spec["failurePolicy"] == "Fail"
    if not _matches_rules(spec, request):
        return None
    activation = {"request": celpy.json_to_cel(request), "object": celpy.json_to_cel(request.get("object")),
                  "oldObject": celpy.json_to_cel(request.get("oldObject"))}
    for condition in spec.get("matchConditions", []):
        value = _evaluate(condition["expression"], activation)
        assert isinstance(value, celtypes.BoolType), (condition, value)
        if not value:
            return None
    variables = celtypes.MapType()
    activation["variables"] = variables
    for variable in spec.get("variables", []):
        variables[celtypes.StringType(variable["name"])] = _evaluate(variable["expression"], activation)
    reasons = []
    for validation in spec["validations"]:
        value = _evaluate(validation["expression"], activation)
        if isinstance(value, celtypes.BoolType) and value:
            continue
        message = _evaluate(validation["messageExpression"], activation) if "messageExpression" in validation else None
        reasons.append(str(message) if isinstance(message, str) else validation["message"])
    return reasons


def recorded(name: str) -> dict:
    return yaml.safe_load((REQUESTS / f"{name}.yaml").read_text())


CASES = [
    ("own-report", []),
    ("own-report-first", []),
    ("other-node", [OTHER_NODE]),
    ("label", [LABELS]),
    ("taint", [SPEC]),
    ("spec-unschedulable", [SPEC]),
    ("spec-podcidr", [SPEC]),
    ("other-annotation", [ANNOTATIONS]),
    ("annotation-removed", [ANNOTATIONS]),
    ("finalizer", [FINALIZERS]),
    ("no-node-claim", [NO_CLAIM]),
    ("status", [NOT_AN_UPDATE, STATUS]),
]


@pytest.mark.parametrize("case, reasons", CASES)
def test_the_agent_may_change_only_its_own_nodes_report_annotation(case, reasons):
    assert admit(recorded(case)) == reasons


def test_another_user_is_not_matched_by_the_policy():
    review = recorded("other-user")
    assert review["request"]["userInfo"]["username"] == "system:serviceaccount:rackctl:rackctl-reconciler"
    assert admit(review) is None


def test_every_validation_is_the_reason_a_recorded_attack_is_denied():
    # One reason per validation, each seen: taking any validation out lets a recorded attack through.
    seen = {reason for _, reasons in CASES for reason in reasons}
    assert seen == {NOT_AN_UPDATE, NO_CLAIM, OTHER_NODE, LABELS, ANNOTATIONS, FINALIZERS, SPEC, STATUS}
    assert len(POLICY["spec"]["validations"]) == len(seen)


def test_the_policy_names_the_daemonsets_service_account_and_is_bound_to_deny():
    docs = documents(DAEMONSET_FILE)
    daemonset = docs["DaemonSet"]
    account = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
    username = f"system:serviceaccount:{daemonset['metadata']['namespace']}:{account}"
    (condition,) = POLICY["spec"]["matchConditions"]
    assert condition["expression"] == f"request.userInfo.username == '{username}'"
    binding = documents(POLICY_FILE)["ValidatingAdmissionPolicyBinding"]
    assert binding["apiVersion"] == POLICY["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert binding["spec"] == {"policyName": POLICY["metadata"]["name"], "validationActions": ["Deny"]}
