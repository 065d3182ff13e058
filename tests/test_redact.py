"""The one redaction layer: every kind of secret a site, a host or a cluster holds, in every text form it comes in."""
from __future__ import annotations

import json

import pytest

from pytest_dgxspark.data import redact as redaction
from pytest_dgxspark.data.redact import REDACTED, redact, redact_args, redact_text
from pytest_dgxspark.site.model import HostSpec, load_site


@pytest.fixture(autouse=True)
def fresh_log():
    yield redaction.reset()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("repo: https://alice:s3cr3t-pw@charts.example.com/nvidia", "repo: https://<redacted>@charts.example.com/nvidia"),
        ("env:\n  - name: AWS_SECRET_ACCESS_KEY\n    value: wJalrXUtnFEMIK7MDENG\n",
         "env:\n  - name: AWS_SECRET_ACCESS_KEY\n    value: <redacted>\n"),
        ('- {name: NGC_API_KEY, value: "nvapi-abcdef123456"}', "- {name: NGC_API_KEY, value: <redacted>}"),
        ("{token: K10abcdef0123456789abcdef::server:deadbeefcafe, server: https://10.0.0.1:9345}",
         "{token: <redacted>, server: https://10.0.0.1:9345}"),
        ("agent-token: agentsecret99\netcd-s3-access-key: AKIAABCDEFG\netcd-s3-secret-key: abc/def+gh\n",
         "agent-token: <redacted>\netcd-s3-access-key: <redacted>\netcd-s3-secret-key: <redacted>\n"),
        ("HostSpec(vars={'ansible_become_password': 'hunter2x', 'ansible_password': 'pw12345'})",
         "HostSpec(vars={'ansible_become_password': '<redacted>', 'ansible_password': '<redacted>'})"),
        ("Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.abc.def", "Authorization: <redacted>"),
        ("curl -H 'bearer eyJhbGciOiJSUzI1NiJ9.abc.def'", "curl -H 'bearer <redacted>'"),
        ('{"auths":{"reg.local":{"auth":"dXNlcjpwYXNz","password":"regpass1"}}}',
         '{"auths":{"reg.local":{"auth":"<redacted>","password":"<redacted>"}}}'),
        ("RUN CommandResult(stdout=b'token: K10aaaabbbbccccdddd0000::server:zzzz\\nagent-token: agent99\\nnode-name: n\\n')",
         "RUN CommandResult(stdout=b'token: <redacted>\\nagent-token: <redacted>\\nnode-name: n\\n')"),
        ("annotations:\n  example.com/api-key: sk-live-1234567890\n", "annotations:\n  example.com/api-key: <redacted>\n"),
        ("rke2 server --token=abc123456 --etcd-s3-secret-key mysecretkey1",
         "rke2 server --token=<redacted> --etcd-s3-secret-key <redacted>"),
        ("CI_DB_PASSWORD=ci-pass-9999\nexport NGC_API_KEY=nvapi-xyz987654\n",
         "CI_DB_PASSWORD=<redacted>\nexport NGC_API_KEY=<redacted>\n"),
        ("set:\n  ngc.apiKey: nvapi-setvalue777\n  driver.enabled: 'true'\n",
         "set:\n  ngc.apiKey: <redacted>\n  driver.enabled: 'true'\n"),
        ("users:\n- name: admin\n  user:\n    client-key-data: LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0t\n",
         "users:\n- name: admin\n  user:\n    client-key-data: <redacted>\n"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n", "<redacted>\n"),
        ("DEBUG kubernetes.client.rest:rest.py:244 response body: {\"kind\":\"Secret\",\"data\":{\"x\":\"eHl6\"}}",
         "DEBUG kubernetes.client.rest:rest.py:244 response body: <redacted: 37 characters>"),
    ],
    ids=["url-userinfo", "env-block", "env-flow", "join-token-flow", "rke2-block", "python-repr", "bearer-header",
         "bearer-lower", "registry-auth", "bytes-repr", "annotation", "cli-flags", "env-file", "spec-set",
         "kubeconfig-key", "pem", "api-debug-body"],
)
def test_every_secret_kind_is_redacted_in_its_text_forms(text, expected):
    assert redact_text(text) == expected


@pytest.mark.parametrize(
    "text",
    ["rke2_secrets_encryption: true", "secretName: gpu-operator-tls", "token-file: /var/lib/rancher/rke2/server/token",
     "write-kubeconfig-mode: \"0600\"", "assert 'nvidia' in {'name': 'x', 'value': 'y'}",
     "spec.repo must be https://helm.ngc.nvidia.com/nvidia", "/srv/secrets-planted/site/vars.yml: rke2_cni: cilium"],
)
def test_what_only_names_or_switches_a_secret_is_kept(text):
    assert redact_text(text) == text


def test_structured_values_lose_secret_keys_env_values_and_secret_data_but_keep_references():
    doc = {"kind": "HelmChart", "metadata": {"annotations": {"example.com/api-key": "k-1234567"}},
           "spec": {"set": {"global.password": "p-1234567"}, "authSecret": {"name": "chart-auth"},
                    "env": [{"name": "NGC_API_KEY", "value": "nvapi-1234567"}, {"name": "LOG_LEVEL", "value": "debug"}]}}
    assert redact(doc) == {
        "kind": "HelmChart", "metadata": {"annotations": {"example.com/api-key": REDACTED}},
        "spec": {"set": {"global.password": REDACTED}, "authSecret": {"name": "chart-auth"},
                 "env": [{"name": "NGC_API_KEY", "value": REDACTED}, {"name": "LOG_LEVEL", "value": "debug"}]}}
    assert redact({"kind": "Secret", "data": {"config": "eyJ4Ijp9"}})["data"] == {"config": REDACTED}


def test_the_log_says_what_kind_was_removed_where_never_the_value():
    redact_text("token: abcdef123456", "evidence of t::x: config")
    redact({"password": "hunter2-xyz"}, "inventory")
    entries = redaction.LOG.entries()
    assert entries == [{"kind": "secret-key-value", "where": "evidence of t::x: config", "count": 1},
                       {"kind": "secret-key-value", "where": "inventory.password", "count": 1}]
    assert "abcdef123456" not in repr(entries) and "hunter2-xyz" not in repr(entries)
    assert set(redaction.LOG.secrets()) == {"hunter2-xyz"}  # free text redacts without remembering


def test_a_command_line_loses_the_value_after_a_secret_name():
    assert redact_args(["suites", "--metadata", "DB_PASSWORD", "pw-123456", "--token=abc1234567", "-q"]) == [
        "suites", "--metadata", "DB_PASSWORD", REDACTED, "--token=<redacted>", "-q"]


def test_site_and_host_reprs_carry_no_host_vars(tmp_path):
    from tests.conftest import SITE

    host = HostSpec("gpu-01", "192.0.2.1", vars={"ansible_become_password": "Become-Pass-1"})
    assert "Become-Pass-1" not in repr(host)
    site = load_site(SITE)
    assert repr(site) == f"Site(name='tirosh-home', root={str(SITE)!r}, hosts=['gpu-01'])"


def test_the_password_of_url_userinfo_and_join_tokens_is_scanned_for_on_its_own():
    redact_text("repo: https://chartuser:Chart-Pass-4417@charts.example.com", "chart", remember=True)
    redact_text("token: K10abcdef0123456789abcdef::server:0c4a6f2ed5a1", "config", remember=True)
    assert set(redaction.LOG.secrets()) == {"chartuser:Chart-Pass-4417", "Chart-Pass-4417",
                                            "K10abcdef0123456789abcdef::server:0c4a6f2ed5a1", "0c4a6f2ed5a1"}


def test_a_kubeconfig_ca_is_public_and_kept_while_its_client_key_and_token_go():
    text = "    certificate-authority-data: LS0tQ0EtcHVibGljLWNlcnQ=\n    token: abcdef.0123456789abcdef\n"
    assert redact_text(text, "kubeconfig", remember=True) == (
        "    certificate-authority-data: LS0tQ0EtcHVibGljLWNlcnQ=\n    token: <redacted>\n")
    redact({"users": [{"user": {"client-key-data": "LS0tcHJpdmF0ZS1rZXk="}}]}, "kubeconfig")
    assert set(redaction.LOG.secrets()) == {"abcdef.0123456789abcdef", "LS0tcHJpdmF0ZS1rZXk="}


def test_an_evidence_label_holding_a_secret_is_redacted_before_it_names_a_place_in_the_log():
    from pytest_dgxspark.judge.evidence import Evidence

    store: list = []
    Evidence(store, "evidence of t").record("curl -H 'Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.abc.def'", "x")
    assert "eyJhbGci" not in json.dumps(store) and "eyJhbGci" not in json.dumps(redaction.LOG.entries())


@pytest.mark.parametrize(("text", "secret"), [
    ("repo: https://charts.example.org/nvidia?access_token=Acc-Tok-99887766&x=1", "Acc-Tok-99887766"),
    ("GIT_URL=https://git.example.org/a.git?private_token=Priv-Tok-5566778", "Priv-Tok-5566778"),
    ("JENKINS_URL=https://jenkins.example.org/?token=Jen-Tok-1122334", "Jen-Tok-1122334"),
    ("see http://h.example/?password=abc%40def123", "abc%40def123"),
    ("pushing with ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8 done", "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"),
    ("key glpat-PlantedGitlabToken007403 here", "glpat-PlantedGitlabToken007403"),
    ("aws AKIAPLANTEDCUDA00079 ok", "AKIAPLANTEDCUDA00079"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefgh, next", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefgh"),
], ids=["access_token", "private_token", "token", "password-query", "github", "gitlab", "aws", "jwt"])
def test_url_credentials_and_token_shapes_are_redacted_anywhere(text, secret):
    assert secret not in redact_text(text)


def test_a_secret_inside_a_base64_run_is_redacted_and_the_run_re_encoded():
    import base64

    out = b"token: K10abcdef0123456789abcdef::server:deadbeefcafe\nnode-name: gpu-01\n"
    line = '@@dgxspark-gather [[0, "%s", "", 0.1]]' % base64.b64encode(out).decode()
    clean = redact_text(f"RUN CommandResult(stdout={line!r})")
    encoded = clean.split('"')[1]
    assert base64.b64decode(encoded) == b"token: <redacted>\nnode-name: gpu-01\n"


def test_a_known_secret_is_removed_in_every_form():
    import base64
    import html
    from urllib.parse import quote

    value = "Planted-Value-123&<x>"
    redaction.LOG.remember(value, "password", "vars.yml")
    forms = [value, json.dumps(value)[1:-1], html.escape(value), quote(value, safe=""),
             *(base64.b64encode(prefix + value.encode()).decode() for prefix in (b"", b"x", b"ab", b"lead: "))]
    for form in forms:
        clean = redact_text(f"[{form}]")
        assert form not in clean and "<redacted>" in clean, (form, clean)


def test_a_word_that_merely_contains_a_token_prefix_is_kept():
    path = "/tmp/test_a_billion_laughs_scenario_file_is_a_usage_error_naming_the_file0/bomb/scenario.yaml"
    assert redact_text(path) == path


def test_log_records_are_redacted_before_a_handler_keeps_them():
    import logging

    from pytest_dgxspark.report.bundleguard import REDACTING_FILTER

    kept: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            kept.append(self.format(record))

    handler = Keep()
    handler.addFilter(REDACTING_FILTER)
    log = logging.getLogger("urllib3.connectionpool.test")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        log.debug("GET %s", "https://api.example:6443/x?access_token=Log-Tok-445566")
        log.debug("RUN %s", "agent-token: Agent-Log-778899")
    finally:
        log.removeHandler(handler)
    assert kept == ["GET https://api.example:6443/x?access_token=<redacted>", "RUN agent-token: <redacted>"]


@pytest.mark.parametrize(
    ("text", "expected", "secrets"),
    [
        # a block scalar: the line pattern took its `>-` alone and left the value on the next line
        ("ngc:\n  password: >-\n    Fold-Pass-0071\n    and-its-second-line\n  keep: me\n",
         "ngc:\n  password: <redacted>\n  keep: me\n", ["Fold-Pass-0071", "and-its-second-line"]),
        ("wifi:\n  password: |2-\n      Lit-Pass-0072\n\n  dhcp4: true\n", "wifi:\n  password: <redacted>\n\n  dhcp4: true\n",
         ["Lit-Pass-0072"]),
        # a double-quoted value going on over a line break
        ('ap:\n  password: "Quoted-0073\\\n    -More-0074"\n  band: 5GHz\n', 'ap:\n  password: "<redacted>"\n  band: 5GHz\n',
         ["Quoted-0073", "-More-0074"]),
        # an env entry written value first, and a *_CREDS name
        ("env:\n  - value: Rev-Pass-0075\n    name: REGISTRY_PASS\n", "env:\n  - value: <redacted>\n    name: REGISTRY_PASS\n",
         ["Rev-Pass-0075"]),
        ("- {name: NGC_CREDS, value: Creds-0076}", "- {name: NGC_CREDS, value: <redacted>}", ["Creds-0076"]),
        # a flow list under a secret key: each item is known on its own (a message quotes ['x'], not [x])
        ("apiKeys: [List-Key-0077, 'List-Key-0078']", "apiKeys: <redacted>", ["List-Key-0077", "List-Key-0078"]),
    ],
)
def test_multi_line_listed_and_reordered_secrets_are_redacted_and_known(text, expected, secrets):
    assert redact_text(text, "t", remember=True) == expected
    assert set(secrets) <= set(redaction.LOG.secrets())
    assert redaction.scrub_known(f"live {secrets!r}") == f"live {[REDACTED] * len(secrets)!r}"


def test_a_list_under_a_secret_key_and_an_env_entry_are_redacted_in_structured_values():
    assert redact({"ngc": {"apiKeys": ["List-Key-0079", ""], "password": ["Pw-0080"]},
                   "env": [{"value": "Creds-0081", "name": "NGC_CREDS"}]}) == {
        "ngc": {"apiKeys": [REDACTED, ""], "password": [REDACTED]}, "env": [{"value": REDACTED, "name": "NGC_CREDS"}]}


def test_the_live_helmcharts_message_quotes_no_secret_value():
    import importlib.util

    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location("helmchart_live", REPO / "suites/gpu_operator/test_helmchart_live.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    site = {"ngc": {"password": None}, "toolkit": {"env": []}, "driver": {"version": "580.95.05"}}
    live = {"ngc": {"password": "Live-Pass-0082", "apiKeys": ["Live-Key-0083"]},
            "toolkit": {"env": [{"value": "Live-Env-0084", "name": "REGISTRY_PASS"}]}, "driver": {"version": "580.82.07"}}
    said = module._difference("valuesContent", {"site": site, "live": live})
    assert not any(secret in said for secret in ("Live-Pass-0082", "Live-Key-0083", "Live-Env-0084")), said
    assert "ngc.password (site unset, live '<redacted>')" in said and "ngc.apiKeys (site unset, live ['<redacted>'])" in said
    assert "driver.version (site '580.95.05', live '580.82.07')" in said  # what is no secret is still named
