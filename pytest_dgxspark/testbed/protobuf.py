"""Request bodies in Kubernetes' protobuf encoding, for the kinds kubectl's typed clients send.

`kubectl create namespace|configmap|secret|serviceaccount`, `kubectl drain` (Eviction) and `kubectl auth can-i|whoami`
(the self-reviews) encode their request as
`k8s\\x00` + runtime.Unknown{typeMeta, raw}. Field numbers are those of k8s.io/api's generated.proto, checked
against bodies kubectl v1.32 sent. Other kinds are refused (415) rather than guessed.
"""

from __future__ import annotations

import base64
from typing import Any

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"

# message -> field number -> (JSON name, type); a type is a scalar kind or another message's name
MESSAGES: dict[str, dict[int, tuple[str, str]]] = {
    "Unknown": {1: ("typeMeta", "TypeMeta"), 2: ("raw", "bytes"), 3: ("contentEncoding", "str"), 4: ("contentType", "str")},
    "TypeMeta": {1: ("apiVersion", "str"), 2: ("kind", "str")},
    "ObjectMeta": {1: ("name", "str"), 2: ("generateName", "str"), 3: ("namespace", "str"), 5: ("uid", "str"),
                   6: ("resourceVersion", "str"), 7: ("generation", "int"), 11: ("labels", "map"), 12: ("annotations", "map"),
                   14: ("finalizers", "strs")},
    "ConfigMap": {1: ("metadata", "ObjectMeta"), 2: ("data", "map"), 3: ("binaryData", "bytesmap"), 4: ("immutable", "bool")},
    "Secret": {1: ("metadata", "ObjectMeta"), 2: ("data", "bytesmap"), 3: ("type", "str"), 4: ("stringData", "map"),
               5: ("immutable", "bool")},
    "Namespace": {1: ("metadata", "ObjectMeta"), 2: ("spec", "NamespaceSpec")},
    "NamespaceSpec": {1: ("finalizers", "strs")},
    "ServiceAccount": {1: ("metadata", "ObjectMeta"), 3: ("imagePullSecrets", "LocalObjectReference*"),
                       4: ("automountServiceAccountToken", "bool")},
    "LocalObjectReference": {1: ("name", "str")},
    "Eviction": {1: ("metadata", "ObjectMeta"), 2: ("deleteOptions", "DeleteOptions")},
    "DeleteOptions": {1: ("gracePeriodSeconds", "int"), 4: ("propagationPolicy", "str"), 5: ("dryRun", "strs")},
    "SelfSubjectAccessReview": {1: ("metadata", "ObjectMeta"), 2: ("spec", "SelfSubjectAccessReviewSpec")},
    "SelfSubjectAccessReviewSpec": {1: ("resourceAttributes", "ResourceAttributes"),
                                    2: ("nonResourceAttributes", "NonResourceAttributes")},
    "ResourceAttributes": {1: ("namespace", "str"), 2: ("verb", "str"), 3: ("group", "str"), 4: ("version", "str"),
                           5: ("resource", "str"), 6: ("subresource", "str"), 7: ("name", "str")},
    "NonResourceAttributes": {1: ("path", "str"), 2: ("verb", "str")},
    "SelfSubjectRulesReview": {1: ("metadata", "ObjectMeta"), 2: ("spec", "SelfSubjectRulesReviewSpec")},
    "SelfSubjectRulesReviewSpec": {1: ("namespace", "str")},
    "SelfSubjectReview": {1: ("metadata", "ObjectMeta")},
}
KINDS = ("ConfigMap", "Secret", "Namespace", "ServiceAccount", "Eviction", "SelfSubjectAccessReview", "SelfSubjectRulesReview",
         "SelfSubjectReview")


class ProtobufError(ValueError):
    """A body this module cannot decode faithfully (an unsupported kind, or not protobuf at all)."""


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    out: list[tuple[int, int | bytes]] = []
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
            out.append((number, value))
        elif wire == 2:
            length, i = _varint(data, i)
            out.append((number, data[i:i + length]))
            i += length
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
    return out


def _message(name: str, data: bytes) -> dict[str, Any]:
    spec = MESSAGES[name]
    out: dict[str, Any] = {}
    for number, value in _fields(data):
        if number not in spec:
            continue  # fields the JSON form would also omit when unset (timestamps, selfLink)
        key, kind = spec[number]
        if kind == "str":
            out[key] = bytes(value).decode() if isinstance(value, bytes) else ""
        elif kind == "bytes":
            out[key] = value
        elif kind == "int":
            out[key] = int(value)  # type: ignore[arg-type]
        elif kind == "bool":
            out[key] = bool(value)
        elif kind == "strs":
            out.setdefault(key, []).append(bytes(value).decode())  # type: ignore[arg-type]
        elif kind in ("map", "bytesmap"):
            entry = dict(_fields(value))  # type: ignore[arg-type]
            raw = entry.get(2, b"")
            text = base64.b64encode(raw).decode() if kind == "bytesmap" else bytes(raw).decode()  # type: ignore[arg-type]
            out.setdefault(key, {})[bytes(entry.get(1, b"")).decode()] = text  # type: ignore[arg-type]
        elif kind.endswith("*"):
            out.setdefault(key, []).append(_message(kind[:-1], value))  # type: ignore[arg-type]
        else:
            out[key] = _message(kind, value)  # type: ignore[arg-type]
    return {k: v for k, v in out.items() if v not in ("", None, {}, []) and not (k == "generation" and v == 0)}


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf request body; ProtobufError for a kind outside KINDS."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the body does not start with the k8s protobuf magic number")
    unknown = _message("Unknown", body[len(MAGIC):])
    type_meta = unknown.get("typeMeta") or {}
    kind = type_meta.get("kind", "")
    if kind not in KINDS:
        raise ProtobufError(f"the testbed decodes protobuf bodies of {', '.join(KINDS)} only, not {kind or 'this body'}")
    obj = _message(kind, unknown.get("raw", b""))
    return {"apiVersion": type_meta.get("apiVersion", ""), "kind": kind, **obj}
