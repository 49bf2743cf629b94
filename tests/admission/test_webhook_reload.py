"""Hot reload of the standalone `accelpolicy webhook` server (docs/rule-authoring.md "4. Hot reload"), end to end.

The real command serves over HTTPS from a rules directory laid out as kubelet mounts a ConfigMap
(``..<timestamp>/``, ``..data`` swapped by one rename, entries linked through it). A new version with
an edited denial message is served from the next review on, with no restart; a broken version is
refused with its ``file:line:col`` problem while the working generation keeps answering, and both
outcomes show on ``/metrics``.
"""
from __future__ import annotations

import re
import ssl
import subprocess
import threading
from pathlib import Path

import httpx
import pytest

from runtime.engine.admission import review_for
from runtime.reload.watcher import content_hash, generation_id
from runtime.webhook.app import Generation, WebhookState
from testing.localcluster.testing import wait_for
from testing.localcluster.walkthrough import accelpolicy_argv
from tests.builders import pod
from tests.unit.test_rules_reload import _version

SEED = "tests/fixtures/seed/common"
A10G_QUEUE = "gpustack-fnv64-c4680bb149644f1c"
OLD = "a logical slice request is always a single accelerator; multi-accelerator logical slicing is not supported yet"
NEW = "a logical slice request is one accelerator in this cluster"


def _pod() -> dict:
    """A Pod asking for two logical slices: denied by pods-validation sliced-single-accelerator."""
    return pod(queue=A10G_QUEUE, image="x",
               limits={"nvidia.com/gpu.sliced": "2", "nvidia.com/gpu.sliced.memory-percentage": "20"})


def _edit(old: str, new: str):
    """Replace the text ``old`` of admission/pods.yaml, however its lines are folded there, with ``new``."""
    def edit(target: Path) -> None:
        path = target / "admission" / "pods.yaml"
        text = path.read_text()
        spelled = re.compile(r"\s+".join(map(re.escape, old.split())))
        assert len(spelled.findall(text)) == 1, old
        path.write_text(spelled.sub(lambda _: new, text))
    return edit


class Server:
    """`accelpolicy webhook` in a subprocess; its stderr lines are collected by a thread."""

    def __init__(self, rules: Path, workdir: Path):
        argv = accelpolicy_argv() + ["webhook", "--rules", str(rules), "--webhook-self-signed", str(workdir / "tls"),
                                     "--webhook-port", "0", "--snapshot", SEED, "--watch-rules-seconds", "0.1"]
        self.proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        _, line = wait_for(lambda: next((ln for ln in self.lines if "/validate-pods" in ln), None), bool,
                           timeout=60, what="the server's serving line")
        self.base = re.search(r"(https://127\.0\.0\.1:\d+)/validate-pods", line).group(1)
        self.client = httpx.Client(verify=ssl.create_default_context(cafile=workdir / "tls" / "ca.crt"), timeout=10)

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def denial(self) -> str:
        """The message of pods-validation's answer to :func:`_pod`."""
        resp = self.client.post(f"{self.base}/validate-pods", json=review_for(_pod(), uid="u")).json()["response"]
        assert resp["uid"] == "u" and resp["allowed"] is False
        return resp["status"]["details"]["causes"][0]["message"]

    def line(self, matches, what: str) -> str:
        """The first log line ``matches`` accepts, waited for (it follows the metric it explains)."""
        return wait_for(lambda: next((ln for ln in list(self.lines) if matches(ln)), None),
                        lambda ln: ln is not None, what=what)[1]

    def metric(self, name: str) -> float:
        text = self.client.get(f"{self.base}/metrics").text
        return float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))

    def generation(self) -> str:
        """The generation in force, as ``accelpolicy_rules_generation`` names it (its content hash id)."""
        text = self.client.get(f"{self.base}/metrics").text
        return re.search(r'^accelpolicy_rules_generation\{generation="([0-9a-f]{12})"\} 1\.0$', text, re.M).group(1)

    def stop(self) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(15)
        self.reader.join(5)
        self.proc.stderr.close()


@pytest.fixture
def server(tmp_path):
    mount = tmp_path / "rules"
    mount.mkdir()
    _version(mount, "2026_12_01_00_00_00.1")
    srv = Server(mount, tmp_path)
    srv.mount = mount
    yield srv
    srv.stop()


def test_an_edited_rules_copy_is_served_without_a_restart_and_a_broken_one_is_refused(server):
    assert server.denial() == f'Invalid value: "2": {OLD}'
    first = server.generation()
    assert first == generation_id(content_hash(server.mount))

    _version(server.mount, "2026_12_01_00_01_00.2", _edit(OLD, NEW))       # kubelet's atomic ..data swap
    wait_for(server.denial, lambda m: m == f'Invalid value: "2": {NEW}', what="the edited message served")
    served = server.generation()
    assert served == generation_id(content_hash(server.mount)) != first
    swapped = server.line(lambda ln: re.search(rf"rules generation {served} from .* in force", ln), "the swap's log line")
    print(swapped)   # the reload time, for the note

    broken = "expression: \"!(variables.key.sliced in item.keys) || qIsOne(item.keys[variables.key.sliced])\""
    _version(server.mount, "2026_12_01_00_02_00.3",
             _edit(broken, broken.replace("qIsOne(", "qIsUno(")))
    wait_for(lambda: server.metric("accelpolicy_rules_reload_failures_total"), lambda n: n == 1.0,
             what="the broken set refused")
    text = (server.mount / "admission" / "pods.yaml").read_text()
    line = text[: text.index("qIsUno(")].count("\n") + 1
    column = text.splitlines()[line - 1].index("qIsUno(") + 1
    refusal = server.line(lambda ln: "refused; generation" in ln, "the refusal's log line")
    assert f"generation {served} keeps serving" in refusal
    problem = f"rules/admission/pods.yaml:{line}:{column} "
    assert any(ln.startswith(problem) and "unknown function 'qIsUno'" in ln for ln in server.lines), server.lines[-5:]
    assert server.denial() == f'Invalid value: "2": {NEW}'                # the working generation answers
    assert server.generation() == served


def test_a_new_policy_path_is_served_after_a_reload_and_a_dropped_one_is_not(server):
    """Paths follow the generation served (no restart): a policy copied under a new path answers there from
    the reload on; once the copy is removed again, the path answers 404."""
    review = review_for(_pod(), uid="u")
    assert server.client.post(f"{server.base}/validate-pods-copy", json=review).status_code == 404

    from tests.controller.test_registration_both_ways import add_copy
    _version(server.mount, "2026_12_01_00_01_00.2", add_copy)
    answer = wait_for(lambda: server.client.post(f"{server.base}/validate-pods-copy", json=review),
                      lambda r: r.status_code == 200, what="the new path served")[1]
    assert answer.json()["response"]["allowed"] is False
    _version(server.mount, "2026_12_01_00_02_00.3")                    # the shipped rules again: no copy
    wait_for(lambda: server.client.post(f"{server.base}/validate-pods-copy", json=review).status_code,
             lambda code: code == 404, what="the dropped path gone")
    assert server.denial() == f'Invalid value: "2": {OLD}'


def test_a_generation_is_swapped_as_one_object():
    """A review reads the served generation once: the engine and view it is judged with belong together."""
    state = WebhookState()
    state.set_ready("engine-1", "view-1")
    held = state.served
    state.set_ready("engine-2", "view-2")
    assert (held.engine, held.view) == ("engine-1", "view-1")
    assert state.served == Generation("engine-2", "view-2", None, {}) and state.current_view() == "view-2"
    live = [0]
    state.set_ready("engine-3", lambda: live[0])
    assert (state.engine, state.view, state.current_view()) == ("engine-3", None, 0)
    state.engine = "engine-4"             # the controller's reload replaces the rules alone
    assert (state.served.engine, state.current_view()) == ("engine-4", 0)
