"""JSON Schemas of the site files (sites/<site>/...), checked with jsonschema."""
from __future__ import annotations

# Kubernetes label: optional DNS-subdomain prefix + "/" + name (<= 63 chars), "=", value (<= 63 chars, may be empty).
_LABEL_KEY = r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?"
LABEL_PATTERN = rf"^{_LABEL_KEY}={_LABEL_VALUE}$"
TAINT_PATTERN = rf"^{_LABEL_KEY}(={_LABEL_VALUE})?:(NoSchedule|PreferNoSchedule|NoExecute)$"
_NAME = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}
_NONEMPTY = {"type": "string", "minLength": 1}

VARS_SCHEMA: dict = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "rke2_cluster_name", "rke2_target_name", "rke2_context_name", "rke2_node_labels",
        "rke2_node_taints", "rke2_cni", "rke2_disable_kube_proxy", "rke2_cilium",
    ],
    "properties": {
        "rke2_cluster_name": _NAME,
        "rke2_target_name": _NAME,
        "rke2_context_name": {"type": "string", "pattern": r"^[^\s]+$"},
        "rke2_version": {"type": "string", "pattern": r"^v\d+\.\d+\.\d+\+rke2r\d+$"},
        "rke2_node_labels": {"type": "array", "items": {"type": "string", "pattern": LABEL_PATTERN}},
        "rke2_node_taints": {"type": "array", "items": {"type": "string", "pattern": TAINT_PATTERN}},
        "rke2_kubelet_args": {"type": "array", "items": {"type": "string", "pattern": r"^[a-z][a-z0-9-]*=\S+$"}},
        # RKE2's S3 upload of every etcd snapshot (config.yaml etcd-s3, etcd-s3-<key>; rke2-docs
        # datastore/backup_restore.md); its credentials never live here (a vault variable: rke2_etcd_s3_credentials)
        "rke2_etcd_s3": {
            "type": "object",
            "additionalProperties": False,
            "anyOf": [{"required": ["bucket"]}, {"required": ["config_secret"]}],
            "properties": {
                "endpoint": _NONEMPTY, "bucket": _NONEMPTY, "region": _NONEMPTY, "folder": _NONEMPTY,
                "endpoint_ca": _NONEMPTY, "skip_ssl_verify": {"type": "boolean"}, "insecure": {"type": "boolean"},
                "config_secret": _NAME,
            },
        },
        # a copy of the etcd snapshots off the node that is not RKE2's S3 upload (SPARK.etcd-snapshots): how and where
        "etcd_snapshot_offnode_copy": {
            "type": "object",
            "additionalProperties": False,
            "required": ["method", "destination"],
            "properties": {"method": _NONEMPTY, "destination": _NONEMPTY},
        },
        "rke2_cni": {"enum": ["cilium", "canal", "calico", "flannel", "none"]},
        "rke2_disable_kube_proxy": {"type": "boolean"},
        "rke2_cilium": {
            "type": "object",
            "additionalProperties": False,
            "required": ["hubble_enabled", "kube_proxy_replacement", "wireguard_enabled"],
            "properties": {
                "hubble_enabled": {"type": "boolean"},
                "kube_proxy_replacement": {"type": "boolean"},
                "wireguard_enabled": {"type": "boolean"},
            },
        },
        "rke2_tls_san": {"type": "array", "items": _NONEMPTY},
        "rke2_profile": {"enum": ["cis", "etcd", ""]},
        "rke2_secrets_encryption": {"type": "boolean"},
        # the forecast (catalog/beyond.yaml): advise (default) reports it; enforce rejects a run it advises on
        "forecast": {"enum": ["advise", "enforce"]},
        # the longest the box may stay switched off (holidays): certificates must outlast it
        "forecast_longest_shutdown_days": {"type": "integer", "minimum": 1, "maximum": 3650},
        # hardening the servers get (site/hardening.py): files relative to sites/<site>/rke2/
        "rke2_audit_policy": _NONEMPTY,
        "rke2_pod_security_admission_config": _NONEMPTY,
        "rke2_airgap_artifacts": _NONEMPTY,
        "rke2_api_address": _NONEMPTY,
        "rke2_install_script_src": _NONEMPTY,
        # provisioning pins (docs/provisioning.md); registry credentials never live here (a vault file, -e @...)
        "rke2_install_script_sha256": {"type": "string", "pattern": r"^[0-9a-f]{64}$"},
        "rke2_airgap_checksums_sha256": {"type": "string", "pattern": r"^[0-9a-f]{64}$"},
        "rke2_airgap_checksum_file": _NONEMPTY,
        "rke2_airgap_extra_images": {"type": "array", "items": _NONEMPTY},
        "rke2_mirrored_registries": {"type": "array", "items": _NONEMPTY},
        "rke2_registry_mirrors": {"type": "object", "additionalProperties": {"type": "array", "items": _NONEMPTY}},
        "rke2_registry_tls": {"type": "object"},
        "rke2_system_default_registry": {"type": "string"},
        "argocd_context": {"type": "string", "pattern": r"^[^\s]+$"},
        "argocd_namespace": _NAME,
        "argocd_cluster_name": _NONEMPTY,
        "airgap": {"type": "boolean"},
        "mirror_registry": {"type": "string", "pattern": r"^[A-Za-z0-9.-]+(:\d+)?(/[A-Za-z0-9._/-]+)?$"},
        "cuda_sample_image": _NONEMPTY,
        "cuda_sample_timeout": {"type": "integer", "minimum": 10, "maximum": 3600},
    },
}

_HOSTVARS = {
    "type": ["object", "null"],
    "patternProperties": {r"^ansible_[a-z_]+$": {}},
    "properties": {
        "ansible_host": _NONEMPTY,
        "ansible_port": {"type": "integer", "minimum": 1, "maximum": 65535},
        "ansible_user": _NONEMPTY,
        "ansible_ssh_private_key_file": _NONEMPTY,
        "dgxspark_gpu": {"type": "boolean"},
        "dgxspark_model": _NONEMPTY,
        "dgxspark_gpu_product": _NONEMPTY,
        "dgxspark_gpu_count": {"type": "integer", "minimum": 0},
        # a host's own node metadata, overriding the site's (which describes the GPU target)
        "rke2_node_labels": {"type": "array", "items": {"type": "string", "pattern": LABEL_PATTERN}},
        "rke2_node_taints": {"type": "array", "items": {"type": "string", "pattern": TAINT_PATTERN}},
    },
    "additionalProperties": False,
}

_GROUP: dict = {
    "type": ["object", "null"],
    "additionalProperties": False,
    "properties": {
        "hosts": {"type": ["object", "null"], "additionalProperties": _HOSTVARS},
        "vars": {"type": ["object", "null"]},
        "children": {"type": ["object", "null"], "additionalProperties": {"$ref": "#/$defs/group"}},
    },
}

INVENTORY_SCHEMA: dict = {
    "$defs": {"group": _GROUP},
    "type": "object",
    "additionalProperties": False,
    "required": ["all"],
    "properties": {"all": {"$ref": "#/$defs/group"}},
}

HELMCHART_SCHEMA: dict = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "helm.cattle.io/v1"},
        "kind": {"const": "HelmChart"},
        "metadata": {
            "type": "object",
            "required": ["name", "namespace"],
            "properties": {"name": _NAME, "namespace": _NAME, "labels": {"type": "object"},
                           "annotations": {"type": "object"}},
            "additionalProperties": False,
        },
        "spec": {
            "type": "object",
            "required": ["chart"],
            "additionalProperties": False,
            "properties": {
                "chart": _NONEMPTY, "repo": _NONEMPTY, "version": {"type": "string"},
                "targetNamespace": _NAME, "createNamespace": {"type": "boolean"},
                "valuesContent": {"type": "string"}, "set": {"type": "object"},
                "helmVersion": {"type": "string"}, "bootstrap": {"type": "boolean"},
                "jobImage": {"type": "string"}, "chartContent": {"type": "string"},
                "repoCA": {"type": "string"}, "repoCAConfigMap": {"type": "object"},
                "authSecret": {"type": "object"}, "authPassCredentials": {"type": "boolean"},
                "dockerRegistrySecret": {"type": "object"}, "plainHTTP": {"type": "boolean"},
                "insecureSkipTLSVerify": {"type": "boolean"}, "timeout": {"type": "string"},
                "failurePolicy": {"enum": ["abort", "reinstall"]}, "backOffLimit": {"type": "integer"},
                "takeOwnership": {"type": "boolean"}, "valuesSecrets": {"type": "array"},
                "podSecurityContext": {"type": "object"}, "securityContext": {"type": "object"},
            },
        },
    },
}

_DATE = {"type": "string", "format": "date", "pattern": r"^\d{4}-\d{2}-\d{2}$"}

WAIVERS_SCHEMA: dict = {
    "type": "object",
    "additionalProperties": False,
    "required": ["waivers"],
    "properties": {
        "waivers": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["rule", "reason", "approver", "role", "ticket", "expires", "site_digest"],
                "properties": {
                    "rule": _NONEMPTY, "reason": _NONEMPTY, "approver": _NONEMPTY, "role": _NONEMPTY,
                    "ticket": _NONEMPTY, "expires": _DATE,
                    # the site the waiver was granted against (pytest --site ... --dgxspark-plan prints it)
                    "site_digest": {"type": "string", "pattern": r"^sha256:[0-9a-f]{64}$"},
                },
            },
        },
    },
}

APPROVERS_SCHEMA: dict = {
    "type": "object",
    "additionalProperties": False,
    "required": ["approvers"],
    "properties": {
        "approvers": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "role", "key"],
                "properties": {"name": _NONEMPTY, "role": _NONEMPTY, "key": _NONEMPTY},
            },
        },
    },
}

MANUAL_CHECKS_SCHEMA: dict = {
    "type": "object",
    "additionalProperties": False,
    "required": ["checks"],
    "properties": {
        "checks": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["id", "title_en", "title_ko"],
                "properties": {
                    "id": {"type": "string", "pattern": r"^[a-z0-9][-a-z0-9.]*$"},
                    "title_en": _NONEMPTY, "title_ko": _NONEMPTY,
                    "attester": {"type": ["string", "null"]}, "date": {"oneOf": [_DATE, {"type": "null"}]},
                    "note": {"type": ["string", "null"]},
                },
            },
        },
    },
}
