"""The message catalog of the handover summary: every label in Korean and English."""
from __future__ import annotations

from markupsafe import Markup, escape

LANGS = ("ko", "en", "both")

# key -> (Korean, English)
MESSAGES: dict[str, tuple[str, str]] = {
    "doc_title": ("DGX Spark 클러스터 인수 확인서", "DGX Spark cluster handover summary"),
    "verdict": ("판정", "Verdict"),
    "verdict.ACCEPTED": ("합격", "ACCEPTED"),
    "verdict.REJECTED": ("불합격", "REJECTED"),
    "verdict.INCOMPLETE": ("미완료", "INCOMPLETE"),
    "verdict_reasons": ("판정 사유", "Reasons"),
    "simulated": ("모의 환경 (테스트베드) 실행 — 인수 승인으로 사용할 수 없음",
                  "SIMULATED (testbed) run — never a handover acceptance"),
    "handover_mode": ("인수 모드", "Handover mode"),
    "run": ("실행 정보", "Run"),
    "site": ("사이트", "Site"),
    "cluster": ("클러스터", "Cluster"),
    "nodes": ("노드", "Nodes"),
    "run_id": ("실행 ID", "Run id"),
    "testbed": ("테스트베드 시나리오", "Testbed scenario"),
    "started": ("시작", "Started"),
    "finished": ("종료", "Finished"),
    "operator": ("수행자", "Operator"),
    "runner": ("실행 호스트", "Runner host"),
    "counts": ("상태별 규칙 수", "Rules by status"),
    "yes": ("예", "yes"),
    "no": ("아니오", "no"),
    "none": ("없음", "none"),
    "scope": ("판정 범위", "Scope"),
    "scope_all": ("전체 규칙", "all rules"),
    "passed_total": ("통과/전체", "passed/total"),
    "detail": ("규칙 상세 (ADR 문장과 테스트)", "Rule detail (ADR sentences and tests)"),
    "remediation_ko_missing": ("(한국어 조치 문구 없음)", "(no Korean remediation)"),
    "observed": ("관찰", "Observed"),
    "no_root_causes_named": ("판정된 실패에서 근본 원인을 찾지 못했습니다: 위의 판정 사유와 매트릭스를 보십시오",
                             "No root cause among the judged failures: see the verdict reasons above and the matrix"),
    "more_reasons": ("나머지 사유 (매트릭스 참조)", "more reasons (see the matrix)"),
    "no_root_causes": ("근본 원인 없음: 모든 판정 규칙이 통과했거나 면제되었습니다",
                       "No root causes: every judged rule passed or is waived"),
    "leftovers": ("이전 실행이 남긴 네임스페이스", "Namespaces left by earlier runs"),
    "forecast": ("예보: 다음에 깨질 것", "Forecast: what will break next"),
    "forecast_advisory": ("권고 (판정에 들어가지 않음)", "advisory (not part of the verdict)"),
    "forecast_enforced": ("강제 (rke2/vars.yml forecast: enforce)", "enforced (rke2/vars.yml forecast: enforce)"),
    "forecast_none": ("권고 없음", "Nothing advised"),
    "more_forecast": ("나머지 예보 (results.json forecast[])", "more forecast (results.json forecast[])"),
    "pdf_note": ("인쇄본: summary.pdf", "Print: summary.pdf"),
    "node_count": ("대", "nodes"),
    "ladder": ("계층 사다리 (아래에서 위로)", "Layer ladder (bottom-up)"),
    "layer": ("계층", "Layer"),
    "state": ("상태", "State"),
    "lowest_broken": ("가장 낮은 고장 계층", "Lowest broken layer"),
    "unverified": ("검증되지 않은 선행 규칙", "unverified prerequisites"),
    "target": ("대상", "target"),
    "kind.unreachable": ("대상을 읽지 못함", "target not reachable"),
    "kind.not-verifiable": ("검증할 방법 없음", "not verifiable"),
    "kind.unreadable": ("증거를 읽지 못함", "evidence not readable"),
    "not_judged": ("판정하지 못한 규칙 (오류, 근본 원인 아님)", "Not judged (an error kept these rules from being judged; never a root cause)"),
    "other_cluster": ("다른 클러스터의 기준 실행", "Baseline of another cluster"),
    "not_compared": ("비교하지 않은 규칙 (한쪽 실행에서 판정되지 않음)", "Rules not compared (not judged in one of the runs)"),
    "lowest_mark": ("최저 고장 계층", "lowest broken"),
    "more_root_causes": ("그 밖의 근본 원인 (조치는 규칙 상세에)", "More root causes (remediation in the rule detail)"),
    "root_causes": ("근본 원인", "Root causes"),
    "remediation": ("조치", "Remediation"),
    "matrix": ("추적성 매트릭스", "Traceability matrix"),
    "rule": ("규칙", "Rule"),
    "adr_section": ("ADR 절", "ADR section"),
    "statement": ("ADR 문장 / 제목", "ADR sentence / title"),
    "status": ("상태", "Status"),
    "tests": ("테스트", "Tests"),
    "evidence": ("증거", "evidence"),
    "blocked_by": ("차단 원인", "blocked by"),
    "waived_by": ("면제", "waiver"),
    "provenance": ("구성 정보 (노드별)", "Provenance (per node)"),
    "all_nodes": ("모든 노드 공통", "Same on every node"),
    "cluster_level": ("클러스터 공통", "Cluster"),
    "waivers": ("면제 대장", "Waiver register"),
    "reason": ("사유", "Reason"),
    "approver": ("승인자", "Approver"),
    "role": ("직무", "Role"),
    "ticket": ("티켓 / ADR", "Ticket / ADR"),
    "expires": ("만료일", "Expires"),
    "expired": ("만료됨", "expired"),
    "valid": ("유효", "valid"),
    "manual_checks": ("수동 점검", "Manual checks"),
    "check": ("점검 항목", "Check"),
    "attester": ("확인자", "Attester"),
    "date": ("날짜", "Date"),
    "note": ("비고", "Note"),
    "attested": ("확인됨", "attested"),
    "not_attested": ("미확인", "not attested"),
    "drift": ("기준 대비 변경 (드리프트)", "Drift since baseline"),
    "baseline": ("기준 실행", "Baseline run"),
    "regressed": ("퇴행", "Regressed"),
    "recovered": ("회복", "Recovered"),
    "newly_waived": ("신규 면제", "Newly waived"),
    "status_changes": ("상태 변경", "Status changes"),
    "provenance_changes": ("구성 변경", "Provenance changes"),
    "from": ("이전", "from"),
    "to": ("현재", "to"),
    "key": ("항목", "Key"),
    "no_changes": ("변경 없음", "no changes"),
    "signoff": ("서명", "Sign-off"),
    "signoff.vendor": ("공급사 엔지니어", "Vendor engineer"),
    "signoff.it": ("병원 IT 담당", "Hospital IT"),
    "signoff.security": ("정보보호 책임자", "Security officer"),
    "name": ("성명", "Name"),
    "signature": ("서명", "Signature"),
    "verify_covers": ("매니페스트, in-toto 증명, CTRF, 서명", "manifest, in-toto attestation, CTRF, signature"),
    "integrity": ("무결성: 이 번들은 MANIFEST.sha256으로 검증합니다",
                  "Integrity: verify this bundle against MANIFEST.sha256"),
    "status.passed": ("통과", "passed"),
    "status.failed": ("실패", "failed"),
    "status.blocked": ("차단됨", "blocked"),
    "status.error": ("오류", "error"),
    "status.not-applicable": ("해당 없음", "not applicable"),
    "status.waived": ("면제", "waived"),
    "status.untested": ("미시험", "untested"),
    "status.skipped": ("건너뜀", "skipped"),
    "status.recorded": ("기록됨 (정보)", "recorded"),
    "status.not-selected": ("선택 안 됨", "not selected"),
    "status.mixed": ("혼합", "mixed"),
    "status.xfailed": ("예상된 실패", "xfailed"),
    "status.xpassed": ("예상 밖 통과", "xpassed"),
    "prov.dgx_os": ("DGX OS", "DGX OS"),
    "prov.os": ("운영체제", "OS"),
    "prov.kernel": ("커널", "Kernel"),
    "prov.arch": ("아키텍처", "Architecture"),
    "prov.driver": ("NVIDIA 드라이버", "NVIDIA driver"),
    "prov.driver_flavour": ("드라이버 종류", "Driver flavour"),
    "prov.cuda": ("CUDA 버전", "CUDA version"),
    "prov.rke2": ("RKE2", "RKE2"),
    "prov.containerd": ("containerd", "containerd"),
    "prov.cilium": ("Cilium", "Cilium"),
    "prov.gpu_operator_chart": ("GPU Operator 차트", "GPU Operator chart"),
    "prov.gpu_operator": ("GPU Operator", "GPU Operator"),
    "prov.device_plugin": ("디바이스 플러그인", "Device plugin"),
    "prov.cluster_uid": ("클러스터 UID", "Cluster UID"),
    "prov.uid": ("클러스터 UID", "Cluster UID"),
    "prov.kubernetes": ("Kubernetes", "Kubernetes"),
    "prov.os_image": ("OS 이미지", "OS image"),
    "prov.nvidia_driver": ("NVIDIA 드라이버", "NVIDIA driver"),
    "prov.nvidia_driver_flavour": ("드라이버 종류", "Driver flavour"),
    "prov.cuda_version": ("CUDA 버전", "CUDA version"),
    "prov.rke2_version": ("RKE2 (kubelet)", "RKE2 (kubelet)"),
    "prov.containerd_version": ("컨테이너 런타임", "Container runtime"),
    "prov.cilium_version": ("Cilium", "Cilium"),
    "prov.gpu_operator_chart_version": ("GPU Operator 차트", "GPU Operator chart"),
    "prov.gpu_operator_image": ("GPU Operator 이미지", "GPU Operator image"),
    "prov.device_plugin_version": ("디바이스 플러그인", "Device plugin"),
    "prov.gpu_product": ("GPU 제품", "GPU product"),
    "prov.server": ("API 서버", "API server"),
    "prov.address": ("주소", "Address"),
}


def text(key: str, lang: str) -> str:
    """The plain-text label of key in one language ('both' joins them with ' / ')."""
    ko, en = MESSAGES[key]
    if lang == "ko":
        return ko
    if lang == "en":
        return en
    return en if ko == en else f"{ko} / {en}"


def markup(key: str, lang: str) -> Markup:
    """The HTML label of key: one language, or both with their lang attributes."""
    ko, en = MESSAGES[key]
    if lang == "ko":
        return Markup('<span lang="ko">{}</span>').format(ko)
    if lang == "en" or ko == en:
        return Markup('<span lang="en">{}</span>').format(en)
    return Markup('<span lang="ko">{}</span><span class="sep"> / </span><span lang="en">{}</span>').format(
        escape(ko), escape(en)
    )


def has(key: str) -> bool:
    """Whether the catalog has a label for key."""
    return key in MESSAGES
