"""JSON schemas of the two Prometheus Operator objects the Kubernetes base uses, for which
kubernetes-validate has none (they are custom resources). Each is the subset of the
operator's CRD schema (monitoring.coreos.com/v1, openAPIV3Schema) covering the fields we
set, with its types, required fields and duration pattern; unknown fields are refused, as
the API server's pruning would silently drop them."""

from __future__ import annotations

from typing import Any

DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?"
                                         r"(([0-9]+)s)?(([0-9]+)ms)?)$"}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string", "minLength": 1}, "namespace": {"type": "string"},
                   "labels": STRING_MAP, "annotations": STRING_MAP},
    "additionalProperties": False,
}
LABEL_SELECTOR = {
    "type": "object",
    "properties": {"matchLabels": STRING_MAP, "matchExpressions": {"type": "array"}},
    "additionalProperties": False,
}


def _resource(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {"apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": kind},
                       "metadata": METADATA, "spec": spec},
        "additionalProperties": False,
    }


RULE = {
    "type": "object",
    "required": ["expr"],
    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
    "properties": {
        "alert": {"type": "string"}, "record": {"type": "string"},
        "expr": {"anyOf": [{"type": "integer"}, {"type": "string", "minLength": 1}]},
        "for": DURATION, "keep_firing_for": DURATION, "labels": STRING_MAP, "annotations": STRING_MAP,
    },
    "additionalProperties": False,
}
PROMETHEUS_RULE = _resource("PrometheusRule", {
    "type": "object",
    "properties": {"groups": {"type": "array", "items": {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string", "minLength": 1}, "interval": DURATION,
                       "rules": {"type": "array", "items": RULE}},
        "additionalProperties": False,
    }}},
    "additionalProperties": False,
})
SERVICE_MONITOR = _resource("ServiceMonitor", {
    "type": "object",
    "required": ["selector"],
    "properties": {
        "selector": LABEL_SELECTOR,
        "jobLabel": {"type": "string"},
        "namespaceSelector": {"type": "object"},
        "endpoints": {"type": "array", "items": {
            "type": "object",
            "properties": {"port": {"type": "string"}, "path": {"type": "string"}, "interval": DURATION,
                           "scrapeTimeout": DURATION, "scheme": {"enum": ["http", "https"]}},
            "additionalProperties": False,
        }},
    },
    "additionalProperties": False,
})
SCHEMAS = {"PrometheusRule": PROMETHEUS_RULE, "ServiceMonitor": SERVICE_MONITOR}
