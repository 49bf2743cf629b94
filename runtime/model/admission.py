"""Rule kind ``AdmissionPolicy``: one webhook as data (docs/reference/rule-kinds.md "`AdmissionPolicy`").

A policy says what it matches (``match``: the request's kind, operations, required labels), which
cluster objects it reads (``lookups``), named CEL ``variables`` computed once per review, and then
either ``validations`` (a validating webhook: field errors collected in order) or ``mutations`` (a
mutating webhook: writes whose values are CEL, turned into a JSONPatch; ``denials`` answer 403/500).

CEL activation names: ``object``, ``oldObject`` (``{}`` when absent), ``request`` (``operation``,
``namespace``, ``name``), ``params`` (the policy's own data plus the shared tables the engine adds:
``manufacturers``, ``constants``), ``settings`` (resolved setting values), ``lookups``,
``variables`` and, inside ``forEach``, ``item`` (its local ``variables`` are merged into
``variables``). Spec: docs/reference/controller.md "Pod admission" and "Pod accelerator requests",
docs/concepts/instances.md "Defaulting" and "Additional volumes and host access" and "Validation",
docs/concepts/pools-and-flavors.md "InstanceType admission", docs/concepts/settings.md "Setting admission".
"""
from __future__ import annotations

from typing import Any, Iterator, Literal, Optional

from pydantic import ConfigDict, Field, model_validator

from runtime.model import rulefiles
from runtime.model.rulefiles import Expr, Strict

SHARED_PARAMS = ("manufacturers", "constants", "settingCatalog")
"""The tables the admission engine adds to every policy's ``params`` (runtime.engine.admission)."""

#: Validation fields removed in chart 0.3.0 (deprecated since the Pod validations were renamed): refused by
#: name. A rule test naming a former validation name fails like any unknown name.
REMOVED_VALIDATION_FIELDS = ("specRule", "formerNames")

Reason = Literal["Forbidden", "Required", "Invalid", "NotFound", "Unsupported", "TooMany", "TooLong",
                 "InternalError"]


class Match(Strict):
    """Which AdmissionReview requests the policy judges (docs/reference/controller.md "Controller and
    webhooks" webhook table)."""

    group: str = Field("", description="API group of the object ('' for core)")
    kind: str = Field(min_length=1, description="object kind, e.g. Pod")
    resource: str = Field(min_length=1, description="plural resource, e.g. pods")
    operations: list[Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]] = Field(min_length=1)
    versions: list[str] = Field(["*"], min_length=1,
                                description="API versions registered (rules[].apiVersions)")
    labelsExist: list[str] = Field([],
                                   description="objectSelector: each label key must exist (filled at load "
                                                    "from labelRolesExist)")
    labelRolesExist: list[str] = Field([], description="roles of rules/labels.yaml keys that must exist")
    excludeNamespaces: list[str] = Field([], description="namespaceSelector: requests in these namespaces "
                                                          "are not sent (and not judged offline)")
    excludeReservedNamespaces: bool = Field(False,
                                            description="add rules/controller.yaml reservedNamespaces "
                                                               "to excludeNamespaces (at load)")
    skipDeleting: bool = Field(
        False, description="UPDATE of an object with a deletionTimestamp is allowed untouched")


class Variable(Strict):
    """A named CEL value, computed once per review (or once per ``forEach`` item); or, with ``builtin``,
    the value of a named engine function (``runtime.engine.admission.builtins.VARIABLES``: what CEL cannot
    compute, e.g. the static check of a CEL expression an object carries)."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    expression: Optional[Expr] = None
    builtin: Optional[str] = Field(None, description="a named built-in value (runtime.engine.admission."
                                                     "builtins.VARIABLES) instead of an expression")

    @model_validator(mode="after")
    def _one_source(self) -> "Variable":
        if (self.expression is None) == (self.builtin is None):
            raise ValueError("a variable needs exactly one of expression, builtin")
        return self


class Lookup(Strict):
    """Cluster objects a policy reads: by name, or listed by one label's value.

    Bound as ``lookups.<name>``: a list of objects (0 or 1 for a by-name lookup). ``when`` false (or
    the name/value expression yielding ``""``) binds an empty list without reading.
    """

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    kind: str
    namespaced: bool = False
    nameExpression: Optional[Expr] = None
    labelKey: str = ""
    labelRole: str = Field("", description="role of a rules/labels.yaml key; fills labelKey at load")
    labelValueExpression: Optional[Expr] = None
    when: Optional[Expr] = None

    @model_validator(mode="after")
    def _one_selector(self) -> "Lookup":
        if (self.nameExpression is None) == (self.labelValueExpression is None):
            raise ValueError("a lookup needs exactly one of nameExpression, labelValueExpression")
        if self.labelValueExpression is not None and not (self.labelKey or self.labelRole):
            raise ValueError("labelValueExpression needs labelKey or labelRole")
        return self


class Validation(Strict):
    """One field-error rule, or a group of them (``validations``) run per ``forEach`` item.

    ``expression`` is true when the object is valid (Kubernetes ValidatingAdmissionPolicy sense);
    ``when`` false skips the rule. A failing rule yields one error at ``field``/``fieldExpression``
    with ``reason`` and ``message``/``messageExpression``; ``value`` is the offending value rendered
    after ``Invalid value:`` (strings quoted, numbers bare). ``alone: true`` answers this error alone
    and stops; reason ``InternalError`` always does (decision 16); an alone
    ``Forbidden`` without a field is a guard answered ``403 Forbidden`` with the bare message.
    """

    name: str = Field("", description="the rule's id: the `rule` of audit results, PolicyReports and the "
                                       "rule-hit metric; descriptive kebab-case (what it checks)")
    forEach: Optional[Expr] = Field(None, description="a list: the rule (or group) runs once per element, "
                                                      "bound as `item`")
    variables: list[Variable] = Field([], description="local variables (per item), merged into `variables`")
    when: Optional[Expr] = Field(None, description="false skips the rule or group")
    expression: Optional[Expr] = Field(None, description="true means valid")
    reason: Optional[Reason] = None
    field: str = Field("", description="the field path of the error, e.g. spec.initContainers")
    fieldExpression: Optional[Expr] = Field(None, description="the field path, computed")
    message: str = Field("", description="the detail text (NotFound may have none)")
    messageExpression: Optional[Expr] = Field(None, description="the detail text, computed")
    value: Optional[Expr] = Field(None, description="the offending value after `Invalid value:` (strings "
                                                    "quoted, numbers bare)")
    alone: bool = Field(False, description="a failure answers alone and stops (docs/concepts/instances.md "
                                           "\"Validation\")")
    exceptable: bool = Field(True, description="false: no PolicyException may lift this validation (or the "
                                               "rules inside it): a host-access or privileged gate, a trust "
                                               "boundary (docs/concepts/exceptions.md "
                                               "\"What may be excepted\")")
    validations: list["Validation"] = []
    validationsFrom: str = Field("", description="a group whose validations are those of the "
                                                 "AdmissionValidations document of this name (another file: "
                                                 "a policy split by concern); they see this group's "
                                                 "variables and item")

    @model_validator(mode="before")
    @classmethod
    def _removed_fields(cls, data):
        """``specRule`` and ``formerNames`` (deprecated since the Pod validations were renamed after chart
        0.2.0) are removed: a clear error naming them, never a silent ignore."""
        if isinstance(data, dict) and (removed := [k for k in REMOVED_VALIDATION_FIELDS if k in data]):
            raise ValueError(f"{', '.join(removed)}: removed (a validation is known by its name alone; "
                             "docs/rule-authoring.md \"Naming a rule\"): delete "
                             f"{'them' if len(removed) > 1 else 'it'}")
        return data

    @model_validator(mode="after")
    def _shape(self) -> "Validation":
        if self.validationsFrom and self.validations:
            raise ValueError("a validation group gives validations or validationsFrom, not both")
        if self.validations or self.validationsFrom:
            if self.expression is not None:
                raise ValueError("a validation group has no expression of its own")
            return self
        if self.expression is None or self.reason is None:
            raise ValueError("a validation needs expression and reason")
        if not self.message and self.messageExpression is None and self.reason != "NotFound":
            raise ValueError("a validation needs message or messageExpression (only NotFound may go without)")
        return self


class Denial(Strict):
    """A mutating-webhook refusal: ``expression`` true denies with ``reason`` (403 Forbidden or 500)."""

    name: str = ""
    expression: Expr = Field(description="true denies")
    message: str = ""
    messageExpression: Optional[Expr] = None
    reason: Literal["Forbidden", "InternalError"] = "Forbidden"


class Write(Strict):
    """Set ``value`` at each path of ``paths`` (a CEL list of paths; a path is a list of keys/indexes)."""

    when: Optional[Expr] = None
    paths: Expr = Field(description="a list of paths, each a list of keys and indexes")
    value: Expr = Field(description="the value written at each path")


class Mutation(Strict):
    """A step of a mutating webhook: denials first (in order), then writes; optionally per item."""

    name: str
    forEach: Optional[Expr] = None
    variables: list[Variable] = []
    when: Optional[Expr] = None
    denials: list[Denial] = Field([], description="in order: the first whose expression is true answers")
    writes: list[Write] = Field([], description="applied to a copy of the object; the JSONPatch is the "
                                                "difference at the written places")
    builtin: Optional[str] = Field(
        None, description="a named built-in mutation (runtime.engine.admission.builtins)")


class Schema(Strict):
    """A node of an OpenAPI v3 structural schema, the subset a shape check needs (type, nesting,
    size caps, the ``quantity`` format); other keywords a CRD schema carries (``description``, ``enum``,
    ``default``, ``x-kubernetes-list-*``) are accepted and ignored, so a CRD's schema can be used as it is."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    type: Optional[Literal["object", "array", "string", "integer", "number", "boolean"]] = None
    properties: dict[str, "Schema"] = {}
    items: Optional["Schema"] = None
    additionalProperties: Optional["Schema"] = None
    maxItems: Optional[int] = Field(None, ge=0)
    maxProperties: Optional[int] = Field(None, ge=0)
    maxLength: Optional[int] = Field(None, ge=0)
    maxLengthFrom: Optional[str] = Field(
        None, description="the name of a number in rules/constants.yaml (e.g. maxNameLength) that sets "
                          "maxLength when the rules load: the number's one home")
    format: Optional[str] = Field(
        None,
        description="``quantity``: a string must parse as a Kubernetes quantity exactly (no surrounding "
                          "spaces), as the API server's ParseQuantity does; other formats (``int32``, ...) "
                          "are ignored")
    nullable: bool = False
    intOrString: bool = Field(False, alias="x-kubernetes-int-or-string")
    preserveUnknownFields: bool = Field(False, alias="x-kubernetes-preserve-unknown-fields")


class ObjectShapeSpec(Strict):
    """``kind: ObjectShape``: the structure of an object the admission rules read (docs/webhook-hardening.md).

    ``openAPIV3Schema`` is checked before any rule of a policy naming this shape (``spec.shape``);
    a value of the wrong type, a list over ``maxItems`` or a string over ``maxLength`` is answered
    with a field error in Kubernetes' words and the rules do not run.
    """

    openAPIV3Schema: Schema


class AdmissionParamsSpec(Strict):
    """``kind: AdmissionParams``: data tables shared by policies (``paramsFrom``), under ``values``."""

    values: dict[str, Any]


class AdmissionValidationsSpec(Strict):
    """``kind: AdmissionValidations``: validations of one AdmissionPolicy kept in a file of their own, so a
    policy reads by concern. A group of the policy names the document in ``validationsFrom``; its
    validations run there, in order, with the group's variables and ``item``, exactly as if written in
    place (one webhook, one answer). A document no policy names is a load problem."""

    validations: list[Validation] = Field(min_length=1)


class AdmissionPolicySpec(Strict):
    """``kind: AdmissionPolicy``: one webhook (mutating when it has ``mutations``).

    ``webhook`` is the registered webhook name, ``path`` its HTTPS path; ``objectKind`` renders the
    Invalid message (``Pod "x" is invalid: ...``); ``patchOrder`` ranks path segments for the
    canonical JSONPatch order (unranked strings sort after ranked ones, then lexically; indexes
    numerically).
    """

    webhook: str = Field(min_length=1, description="the registered webhook name")
    path: str = Field(pattern=r"^/[A-Za-z0-9/_.-]+$", description="the HTTPS path the webhook serves")
    type: Literal["validating", "mutating"]
    objectKind: str = Field(min_length=1, description="the kind in the answer: `Pod \"x\" is invalid: ...`")
    match: Match
    failurePolicy: Literal["Fail", "Ignore"] = "Fail"
    enforcement: Literal["deny", "warn", "dryrun"] = Field(
        "deny",
        description="deny: a denial is answered (spec behaviour); warn: allowed, the denial's message "
                            "returned as an AdmissionReview warning; dryrun: allowed silently, the would-be "
                            "denial counted (verdict metric) and reported by `accelpolicy audit`")
    audit: Optional[Literal["CREATE", "UPDATE", "skip"]] = Field(
        None, description="how `accelpolicy audit` judges an existing object: as a CREATE (rules about the "
                          "object), an UPDATE onto itself (rules about transitions), or not at all; unset: "
                          "CREATE when the policy matches CREATE, else UPDATE")
    paramsFrom: list[str] = Field([], description="AdmissionParams documents merged into params, in order")
    params: dict[str, Any] = Field({}, description="this policy's own data (messages, thresholds, patterns)")
    shape: str = Field("", description="the ObjectShape checked before the rules ('' = none)")
    lookups: list[Lookup] = Field([], description="cluster objects read, in order, as `lookups.<name>`")
    variables: list[Variable] = Field([], description="computed once per review, in order")
    validations: list[Validation] = Field([], description="a validating policy's rules, in order")
    mutations: list[Mutation] = Field([], description="a mutating policy's steps, in order")
    patchOrder: dict[str, int] = Field({}, description="path segment -> rank in the JSONPatch's order")

    @property
    def audit_operation(self) -> str:
        """``audit`` or its default (see the field)."""
        return self.audit or ("CREATE" if "CREATE" in self.match.operations else "UPDATE")

    @model_validator(mode="after")
    def _kind_body(self) -> "AdmissionPolicySpec":
        if self.type == "validating" and self.mutations:
            raise ValueError("a validating policy has no mutations")
        if self.type == "mutating" and self.validations:
            raise ValueError("a mutating policy has no validations (use denials)")
        return self


def all_validations(validations: list[Validation]) -> Iterator[Validation]:
    """Every validation of ``validations``, groups and the rules inside them, depth first in order."""
    for v in validations:
        yield v
        yield from all_validations(v.validations)


class WebhookConfigurationNames(Strict):
    """The two configuration objects every policy is registered in, by policy ``type``."""

    mutating: str = Field(min_length=1, description="MutatingWebhookConfiguration name")
    validating: str = Field(min_length=1, description="ValidatingWebhookConfiguration name")


class MatchCondition(Strict):
    """A webhook ``matchConditions`` entry: CEL the API server evaluates before calling the webhook
    (false: not called, the request passes whether or not the webhook is up)."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    expression: str = Field(min_length=1)


class WebhookRegistrationSpec(Strict):
    """``kind: WebhookRegistration`` (rules/admission/registration.yaml): how the controller registers
    the AdmissionPolicies as Mutating/ValidatingWebhookConfigurations (docs/reference/controller.md
    "Controller and webhooks").

    ``configurations`` names the two objects (mutating policies in one, validating in the other, each
    webhook in policy-name order); ``labels`` mark them as accelpolicy's (the only configurations it
    writes or deletes); ``sideEffects``, ``admissionReviewVersions``, ``timeoutSeconds`` (1-30, the
    API server's bounds) and ``matchPolicy`` go into every webhook; ``skipDeletingCondition`` into
    those whose policy skips objects being deleted.
    """

    configurations: WebhookConfigurationNames
    labels: dict[str, str] = Field(min_length=1)
    sideEffects: Literal["None", "NoneOnDryRun"] = "None"
    admissionReviewVersions: list[Literal["v1"]] = Field(["v1"], min_length=1)
    timeoutSeconds: int = Field(10, ge=1, le=30)
    matchPolicy: Literal["Exact", "Equivalent"] = "Equivalent"
    namespaceLabel: str = Field("kubernetes.io/metadata.name",
                                description="the Namespace label excludeNamespaces selects on")
    skipDeletingCondition: Optional[MatchCondition] = Field(
        None,
        description="the matchCondition of every policy with match.skipDeleting: the API server does not "
                          "call the webhook for an UPDATE of an object being deleted (its finalizers can "
                          "always be removed, even while the webhooks are down); None: the webhook is called "
                          "and allows it")


rulefiles.SPEC_MODELS["AdmissionPolicy"] = AdmissionPolicySpec
rulefiles.SPEC_MODELS["WebhookRegistration"] = WebhookRegistrationSpec
rulefiles.SPEC_MODELS["AdmissionParams"] = AdmissionParamsSpec
rulefiles.SPEC_MODELS["AdmissionValidations"] = AdmissionValidationsSpec
rulefiles.SPEC_MODELS["ObjectShape"] = ObjectShapeSpec
