"""Evidence is recorded redacted: no token, key, certificate or Secret data reaches a report."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from pytest_dgxspark.judge.evidence import REDACTED, Evidence, evidence_key, for_item, redact, redact_text

KUBECONFIG = """apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJU
    server: https://192.168.10.21:6443
  name: tirosh-home/rke2/gpu
users:
- name: tirosh-home/rke2/gpu
  user:
    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0t
    client-key-data: LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0t
    token: abcdef.0123456789abcdef
"""


def test_secret_data_values_are_redacted_keys_kept() -> None:
    secret = {"kind": "Secret", "metadata": {"name": "c"}, "data": {"server": "aHR0cHM6Ly94", "config": "eyJiZWFyZXJUb2tlbiI6Inh5eiJ9"}}
    assert redact(secret)["data"] == {"server": REDACTED, "config": REDACTED}
    assert secret["data"]["server"] == "aHR0cHM6Ly94"  # the original is untouched


def test_kubeconfig_text_keeps_server_and_loses_keys_and_token() -> None:
    text = redact_text(KUBECONFIG)
    assert "https://192.168.10.21:6443" in text
    for secret in ("LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0t", "LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0t", "abcdef.0123456789abcdef"):
        assert secret not in text


def test_bearer_join_token_and_pem_are_redacted() -> None:
    text = redact_text(
        "Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.payload.sig\n"
        "K10d41d8cd98f00b204e9800998ecf8427e::server:3f5a2b1c9d\n"
        "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBx\n-----END EC PRIVATE KEY-----\n"
        "rke2 server --token=s3cr3t --agent-token s3cr3t2\n"
    )
    for secret in ("eyJhbGciOiJSUzI1NiJ9", "K10d41d8cd98f00b204e9800998ecf8427e", "MHcCAQEEIBx", "s3cr3t"):
        assert secret not in text


def test_mapping_keys_named_like_secrets_are_redacted() -> None:
    value = redact({"bearerToken": "xyz", "tlsClientConfig": {"keyData": "k", "caData": "ca", "insecure": False}, "password": "p"})
    assert value == {"bearerToken": REDACTED, "tlsClientConfig": {"keyData": REDACTED, "caData": "ca", "insecure": False},
                     "password": REDACTED}


def test_argocd_config_json_string_is_redacted() -> None:
    text = redact_text('{"bearerToken": "abc.def", "tlsClientConfig": {"insecure": false}}')
    assert "abc.def" not in text and '"insecure": false' in text


def test_values_become_json_able() -> None:
    value = json.loads(json.dumps(redact({"a": (1, 2), "b": b"bytes", "c": {1, 2}, "d": ValueError("x")})))
    assert {**value, "c": sorted(value["c"])} == {"a": [1, 2], "b": "bytes", "c": [1, 2], "d": "x"}


def test_record_stores_label_and_redacted_value_in_the_items_stash() -> None:
    item = SimpleNamespace(stash=pytest.Stash())
    evidence = for_item(item)
    evidence.record("kubeconfig", KUBECONFIG)
    evidence.warn("careful")
    stored = item.stash[evidence_key]
    assert [e["label"] for e in stored] == ["kubeconfig", "warning"]
    assert "client-key-data: " + REDACTED in stored[0]["value"]


def test_command_records_command_exit_status_and_output() -> None:
    result = SimpleNamespace(rc=3, stdout="token: hunter2\nok\n", stderr="")
    target = SimpleNamespace(name="gpu-01", run=lambda cmd, timeout=None: result)
    store: list = []
    returned = Evidence(store).command(target, "cat /etc/rancher/rke2/config.yaml", timeout=5)
    assert returned is result
    assert store[0]["value"]["exit_status"] == 3
    assert store[0]["value"]["command"] == "cat /etc/rancher/rke2/config.yaml"
    assert "hunter2" not in store[0]["value"]["stdout"] and "ok" in store[0]["value"]["stdout"]


def test_evidence_files_are_made_durable_by_one_filesystem_sync_not_one_fsync_each(tmp_path, monkeypatch):
    import os

    from pytest_dgxspark.report import results

    fsyncs, syncs = [], []
    real_fsync = os.fsync
    monkeypatch.setattr(results.os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd)))
    monkeypatch.setattr(results, "_sync_filesystem", lambda directory: syncs.append(directory))
    with results.one_sync(tmp_path):
        for i in range(3):
            results.write_atomic(tmp_path / f"{i}.json", "{}\n")
    assert (fsyncs, syncs) == ([], [tmp_path])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.json", "1.json", "2.json"]
    results.write_atomic(tmp_path / "results.json", "{}\n")  # outside: its own fsync, as before
    assert len(fsyncs) == 1
