"""Why a target could not be reached or read: one cause per kind of fault, each with its own fix (EN and KO).

A cause is never a finding about the site: it says the run could not observe, and what to do so that it can.
"""

from __future__ import annotations

import re
import socket
import ssl
from dataclasses import dataclass

import urllib3

from pytest_dgxspark.data.yamlload import loads_json


@dataclass(frozen=True)
class Cause:
    """A kind of connectivity fault: `kind` (stable id), what it means, and the one-line fix in English and Korean."""

    kind: str
    meaning: str
    fix: str
    fix_ko: str


SSH_CAUSES: dict[str, Cause] = {c.kind: c for c in (
    Cause("name-resolution", "the host name does not resolve",
          "Fix ansible_host of this host in the inventory (or its DNS entry); the suite connects to that name.",
          "인벤토리의 ansible_host(또는 DNS 항목)를 고친다. 점검은 그 이름으로 접속한다."),
    Cause("refused", "nothing accepts SSH connections on that address and port",
          "Start sshd on the host (systemctl status ssh) or fix ansible_port in the inventory.",
          "호스트에서 sshd를 기동하거나(systemctl status ssh) 인벤토리의 ansible_port를 고친다."),
    Cause("unreachable", "the address does not answer (no route, or the connection attempt timed out)",
          "Check that the host is powered on and on the network, that ansible_host is its address, and the firewall.",
          "호스트 전원과 네트워크 연결, ansible_host 주소, 방화벽을 확인한다."),
    Cause("host-key-unknown", "the host's SSH key is not in known_hosts, so the host's identity cannot be verified",
          "Compare the host key fingerprint on the console (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub) with "
          "ssh-keyscan's, then add it to the known_hosts the run uses; never disable host key checking.",
          "콘솔에서 호스트 키 지문(ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub)을 ssh-keyscan 결과와 대조한 뒤 "
          "실행에 쓰는 known_hosts에 추가한다. 호스트 키 검사를 끄지 않는다."),
    Cause("host-key-changed", "the host presented a key that differs from the one in known_hosts",
          "If the host was reinstalled, verify its new fingerprint on the console and replace the entry "
          "(ssh-keygen -R <host>); otherwise treat it as a possible interception and stop.",
          "호스트를 재설치했다면 콘솔에서 새 지문을 확인하고 항목을 교체한다(ssh-keygen -R <host>). "
          "그렇지 않다면 가로채기 가능성으로 보고 중단한다."),
    Cause("auth-refused", "the host refused the SSH credentials",
          "Install the run's public key in ~<user>/.ssh/authorized_keys on the host, or fix ansible_user and the "
          "identity file.",
          "실행에 쓰는 공개 키를 호스트의 ~<user>/.ssh/authorized_keys에 넣거나 ansible_user와 키 파일을 고친다."),
    Cause("sudo-password", "sudo on the host asks for a password (the run never types one)",
          "Give the SSH user passwordless sudo for every command ('<user> ALL=(ALL) NOPASSWD: ALL' in "
          "/etc/sudoers.d/dgxspark: the run and Ansible use sudo -n /bin/sh -c ..., so a rule limited to a few "
          "commands does not work), or log in as root with a key (README, \"SSH user and sudo\").",
          "SSH 사용자에게 모든 명령의 비밀번호 없는 sudo('<user> ALL=(ALL) NOPASSWD: ALL'을 /etc/sudoers.d/dgxspark에)를 "
          "준다. 점검과 Ansible은 sudo -n /bin/sh -c ...로 실행하므로 몇 개 명령만 허용하는 규칙은 통하지 않는다. 또는 "
          "키로 root 접속한다(README \"SSH user and sudo\")."),
    Cause("banner-timeout", "the host accepted the connection but sshd never greeted (overloaded or frozen host)",
          "Look at the host's console: load, memory, and journalctl -u ssh; restart sshd or the host.",
          "호스트 콘솔에서 부하, 메모리, journalctl -u ssh를 확인하고 sshd 또는 호스트를 재시작한다."),
    Cause("dropped", "the SSH connection was closed or reset while the run used it",
          "Check the host's sshd log (journalctl -u ssh), the network path and any firewall or IPS between; rerun.",
          "호스트의 sshd 로그(journalctl -u ssh), 네트워크 경로, 사이의 방화벽·IPS를 확인하고 다시 실행한다."),
    Cause("timeout", "the host stopped answering during the run (the SSH session did not return in time)",
          "Look at the host's console (frozen, out of memory, network lost) and rerun once it answers.",
          "호스트 콘솔에서 멈춤, 메모리 부족, 네트워크 단절을 확인하고 응답하면 다시 실행한다."),
    Cause("ssh-failed", "ssh itself failed (exit status 255)",
          "Run ssh -v with the run's ssh_config to this host and fix what it reports.",
          "실행에 쓰는 ssh_config로 ssh -v 접속을 해 보고 보고된 문제를 고친다."),
)}

API_CAUSES: dict[str, Cause] = {c.kind: c for c in (
    Cause("name-resolution", "the API server's name in the kubeconfig does not resolve",
          "Fix the server URL of the context (make rke2/kubeconfig writes the server node's address).",
          "컨텍스트의 server URL을 고친다(make rke2/kubeconfig가 서버 노드 주소를 쓴다)."),
    Cause("refused", "nothing accepts connections on the API server address",
          "Check rke2-server on the server node (systemctl status rke2-server, journalctl -u rke2-server) and that "
          "port 6443 is open.",
          "서버 노드의 rke2-server(systemctl status rke2-server, journalctl -u rke2-server)와 6443 포트 개방을 확인한다."),
    Cause("unreachable", "the API server address does not answer (no route, or the connection timed out)",
          "Check that the server node is up and reachable from here, and the firewall in between.",
          "서버 노드가 켜져 있고 여기서 도달 가능한지, 사이의 방화벽을 확인한다."),
    Cause("certificate", "the API server's certificate does not match the kubeconfig's certificate authority or "
          "server name",
          "Fetch the kubeconfig again (make rke2/kubeconfig) so its certificate-authority-data is the cluster's CA; "
          "never disable TLS verification.",
          "kubeconfig를 다시 받아(make rke2/kubeconfig) certificate-authority-data를 클러스터 CA로 맞춘다. "
          "TLS 검증을 끄지 않는다."),
    Cause("credentials-rejected", "the API rejected the kubeconfig's credentials (HTTP 401 Unauthorized)",
          "Fetch fresh credentials with make rke2/kubeconfig (or a fresh suite token with make rke2/suite/rbac).",
          "make rke2/kubeconfig로 자격 증명을 새로 받는다(스위트 토큰은 make rke2/suite/rbac로 새로 받는다)."),
    Cause("forbidden", "the API refused the request",
          "Read the server's reason in the message and rerun once the request is allowed.",
          "메시지의 서버 사유를 읽고 요청이 허용되면 다시 실행한다."),
    Cause("server-error", "the API answered with server errors after bounded retries",
          "Read the kube-apiserver and etcd logs on the server node (/var/log/pods/kube-system_kube-apiserver-*).",
          "서버 노드의 kube-apiserver와 etcd 로그(/var/log/pods/kube-system_kube-apiserver-*)를 확인한다."),
    Cause("throttled", "the API kept answering 429 Too Many Requests (it throttles this client) after bounded retries",
          "The API server's flow control rejected the run's requests: check the server node's load and which clients "
          "flood kube-apiserver (kubectl get --raw /metrics | grep apiserver_flowcontrol_rejected_requests_total); "
          "rerun when it answers.",
          "API 서버의 flow control이 실행의 요청을 거절했다. 서버 노드 부하와 kube-apiserver에 요청을 쏟아내는 클라이언트"
          "(kubectl get --raw /metrics | grep apiserver_flowcontrol_rejected_requests_total)를 확인하고 응답하면 다시 "
          "실행한다."),
    Cause("timeout", "the API accepted the connection but did not answer in time",
          "Check the server node's load and the API server's health (kubectl get --raw /readyz?verbose).",
          "서버 노드 부하와 API 서버 상태(kubectl get --raw /readyz?verbose)를 확인한다."),
    Cause("dropped", "the API connection was closed or reset while the run used it",
          "Check rke2-server on the server node (it may have restarted) and the network path; rerun.",
          "서버 노드의 rke2-server(재시작 여부)와 네트워크 경로를 확인하고 다시 실행한다."),
    Cause("kubeconfig", "the kubeconfig cannot be used for the site's context",
          "Run make rke2/kubeconfig, or give --dgxspark-kubeconfig with the site's context.",
          "make rke2/kubeconfig를 실행하거나 사이트 컨텍스트가 있는 --dgxspark-kubeconfig를 준다."),
)}

# OpenSSH's own words (ssh.c, sshconnect.c, sshconnect2.c, mux.c), most specific first.
_SSH_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((kind, re.compile(p, re.IGNORECASE)) for kind, p in (
    ("host-key-changed", r"REMOTE HOST IDENTIFICATION HAS CHANGED|Host key for .* has changed"),
    ("host-key-unknown", r"No \S+ host key is known for|Host key verification failed"),
    ("name-resolution", r"Could not resolve hostname|Name or service not known|Temporary failure in name resolution"),
    ("refused", r"Connection refused"),
    ("banner-timeout", r"timed out during banner exchange|banner exchange"),
    ("unreachable", r"No route to host|Network is unreachable|Connection timed out|Operation timed out"),
    ("auth-refused", r"Permission denied \(|Too many authentication failures|Authentication failed"),
    ("sudo-password", r"sudo: (a password is required|a terminal is required|\d+ incorrect password)"),
    ("dropped", r"Connection (closed|reset)|kex_exchange_identification|Broken pipe|mux_client|control socket|"
                r"Shared connection to .* closed|client_loop: send disconnect"),
))
SUDO_PASSWORD = _SSH_PATTERNS[7][1]


def ssh_cause(stderr: str) -> Cause:
    """The cause of a failed SSH exchange, from ssh's (or sudo's) stderr."""
    for kind, pattern in _SSH_PATTERNS:
        if pattern.search(stderr or ""):
            return SSH_CAUSES[kind]
    return SSH_CAUSES["ssh-failed"]


def api_cause(error: BaseException) -> Cause:
    """The cause of a failed API request, from the exception the client raised."""
    status = getattr(error, "status", None)
    if isinstance(status, int) and status:
        if status == 401:
            return API_CAUSES["credentials-rejected"]
        if status == 403:
            return forbidden_cause(error)
        if status == 429:
            return API_CAUSES["throttled"]
        return API_CAUSES["server-error"]
    chain = _chain(error)
    if any(isinstance(e, (ssl.SSLError, urllib3.exceptions.SSLError)) for e in chain):
        return API_CAUSES["certificate"]
    if any(isinstance(e, (socket.gaierror, urllib3.exceptions.NameResolutionError)) for e in chain):
        return API_CAUSES["name-resolution"]
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return API_CAUSES["refused"]
    if any(isinstance(e, urllib3.exceptions.ReadTimeoutError) for e in chain):
        return API_CAUSES["timeout"]
    if any(isinstance(e, (urllib3.exceptions.ConnectTimeoutError, TimeoutError)) for e in chain):
        return API_CAUSES["unreachable"]
    if any(isinstance(e, urllib3.exceptions.NewConnectionError) for e in chain):
        text = " ".join(str(e) for e in chain)
        if "refused" in text.lower():
            return API_CAUSES["refused"]
        return API_CAUSES["unreachable"]
    if any(isinstance(e, OSError) and "No route to host" in str(e) for e in chain):
        return API_CAUSES["unreachable"]
    return API_CAUSES["dropped"]


# kube-apiserver's words for an authorization denial (endpoints/handlers/responsewriters/errors.go forbiddenMessage)
_DENIED = re.compile(r'User "(?P<user>[^"]*)" cannot (?P<verb>[a-z]+) (?:resource "(?P<resource>[^"]+)" in API group '
                     r'"(?P<group>[^"]*)"(?: in the namespace "(?P<namespace>[^"]*)"| at the cluster scope)|'
                     r'path "(?P<path>[^"]+)")')


@dataclass(frozen=True)
class Denied:
    """What RBAC denied: the user, the verb and the resource (or non-resource path), where (namespace or cluster)."""

    user: str
    verb: str
    resource: str | None
    group: str
    namespace: str | None
    path: str | None = None

    @property
    def what(self) -> str:
        """'list pods (API group "") at the cluster scope' / 'get path /version'."""
        if self.path is not None:
            return f"{self.verb} path {self.path}"
        where = f'in namespace "{self.namespace}"' if self.namespace else "at the cluster scope"
        return f'{self.verb} {self.resource} (API group "{self.group}") {where}'


def status_message(error: BaseException) -> str:
    """The `message` of the metav1.Status an API error carried ('' without one)."""
    body = getattr(error, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    try:
        document = loads_json(body, "an API error's Status") if body else {}
    except ValueError:
        return ""
    return str(document.get("message") or "") if isinstance(document, dict) else ""


def observed_status(error: BaseException) -> str:
    """'HTTP 403 Forbidden: <the Status message>' (the server's own words, for a message), 'HTTP 500 ...' otherwise."""
    status = getattr(error, "status", None)
    text = f"HTTP {status} {getattr(error, 'reason', '') or ''}".strip()
    message = status_message(error) if status == 403 else ""
    return f"{text}: {message}" if message else text


def denied(error: BaseException) -> Denied | None:
    """The RBAC denial a 403's Status names, or None (a 403 from admission, or without a Status body)."""
    found = _DENIED.search(status_message(error))
    if found is None:
        return None
    return Denied(found["user"], found["verb"], found["resource"], found["group"] or "", found["namespace"],
                  found["path"])


def forbidden_cause(error: BaseException) -> Cause:
    """The cause of an HTTP 403: RBAC's denial names the user, verb and resource missing and how to grant it (the
    suite's least-privilege role); another 403 (admission) quotes the server. Never a finding about the site."""
    message = status_message(error)
    refusal = denied(error)
    if refusal is None:
        return Cause("forbidden", API_CAUSES["forbidden"].meaning + (" (not by RBAC: admission or the namespace's state)"
                                                                     if message else ""),
                     API_CAUSES["forbidden"].fix, API_CAUSES["forbidden"].fix_ko)
    role = ("apply the suite's least-privilege role with make rke2/suite/rbac and run as the kubeconfig it writes "
            "(README: least privilege), or add this verb and resource to the role bound to this user")
    return Cause(
        "forbidden",
        f"RBAC denies {refusal.user} {refusal.what} (no role bound to it grants that)",
        f'Grant {refusal.user} "{refusal.verb}" on {refusal.what.split(" ", 1)[1]}: {role}. A 403 says the run may '
        "not read, never that the site is wrong.",
        f'{refusal.user}에게 {refusal.what.split(" ", 1)[1]}에 대한 "{refusal.verb}" 권한을 준다: make rke2/suite/rbac로 '
        "스위트 최소 권한 역할을 적용하고 그것이 쓰는 kubeconfig로 실행하거나, 이 사용자에 바인딩된 역할에 이 동사와 "
        "리소스를 추가한다. 403은 실행이 읽을 수 없다는 뜻이지 사이트가 틀렸다는 뜻이 아니다.")


def _chain(error: BaseException) -> list[BaseException]:
    """The error, its urllib3 `reason`, causes and contexts (a MaxRetryError wraps the real one)."""
    seen: list[BaseException] = []
    stack: list[BaseException | None] = [error]
    while stack:
        current = stack.pop()
        if current is None or any(current is s for s in seen):
            continue
        seen.append(current)
        stack.extend([getattr(current, "reason", None) if isinstance(getattr(current, "reason", None), BaseException)
                      else None, current.__cause__, current.__context__])
    return seen


def is_transport_error(error: BaseException) -> bool:
    """Whether an exception that reached a check is a failure to reach or read the API (not an answer)."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(error, ApiException):
        return error.status in (0, 401, 403, 429) or (error.status or 0) >= 500
    return isinstance(error, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError, socket.gaierror,
                              ssl.SSLError))


# The causes whose fix names the site's rke2-server and port 6443: for the Argo CD management cluster (k3s,
# argocd_context) the fix names that cluster instead.
_SERVER_SIDE = frozenset({"refused", "unreachable", "dropped", "server-error", "timeout", "throttled"})


def for_management(cause: Cause, context: str) -> Cause:
    """The cause of a fault of the management API (argocd_context): the fix points at the management cluster."""
    if cause.kind not in _SERVER_SIDE:
        return cause
    return Cause(cause.kind, cause.meaning,
                 f"This is the Argo CD management cluster (context {context}), not the site's RKE2: check k3s on the "
                 "management host (systemctl status k3s, journalctl -u k3s), that its API port is open from here, and "
                 "the context's server URL in the kubeconfig; rerun.",
                 f"사이트의 RKE2가 아닌 Argo CD 관리 클러스터(컨텍스트 {context})다. 관리 호스트의 k3s(systemctl status k3s, "
                 "journalctl -u k3s), 여기서 API 포트 접근, kubeconfig 컨텍스트의 server URL을 확인하고 다시 실행한다.")
