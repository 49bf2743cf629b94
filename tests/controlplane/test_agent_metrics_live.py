"""The agent's metrics (runtime/agent/metrics.py) on its health port: the ledger of the last pass
(seed step 3: sliced-demo's 20 % slice on node-a10g, from the Pod's allocation annotation), health,
probe errors, and PodResources read errors. The agent runs against the local control plane
(tests/controlplane/agentlive.py): the Pods it charges exist there."""
from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from runtime.agent.health import PassClock, serve_health
from runtime.agent.metrics import AgentMetrics
from tests.agent.helpers import A10G, entry, group, pod
from tests.controlplane.agentlive import live, make_agent  # noqa: F401 - fixtures

LABELS = (("accelerator", A10G), ("group", "a10g"), ("node", "node-a10g"))


def _agent(make_agent, pods=(), **kw):
    agent, backend = make_agent(pods=list(pods), **kw)
    return agent, backend, AgentMetrics().bind(agent)


def _samples(metrics: AgentMetrics) -> dict[tuple, float]:
    from prometheus_client import generate_latest
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_ledger_of_the_step3_slice(make_agent):
    agent, _, metrics = _agent(make_agent, [pod("sliced-demo", [group("a10g", entry(A10G, 0, 3, 320000))])])
    assert agent.reconcile() is not None
    samples = _samples(metrics)
    assert samples[("accelpolicy_agent_accelerator_mode", LABELS)] == 3
    assert samples[("accelpolicy_agent_ledger_remaining_credits", LABELS)] == 1280000
    assert samples[("accelpolicy_agent_accelerator_healthy", LABELS)] == 1
    assert samples[("accelpolicy_agent_probe_seconds_count", ())] == 1
    assert ("accelpolicy_agent_probe_errors_total", (("probe", "accelerator"),)) not in samples


def test_a_failed_probe_counts_each_pass_and_keeps_the_last_ledger(make_agent):
    agent, backend, metrics = _agent(make_agent)
    agent.reconcile()
    backend.fail("driver", "NVML_ERROR_DRIVER_NOT_LOADED")
    for _ in range(3):
        agent.reconcile()
    samples = _samples(metrics)
    assert samples[("accelpolicy_agent_probe_errors_total", (("probe", "accelerator"),))] == 3
    assert samples[("accelpolicy_agent_ledger_remaining_credits", LABELS)] == 1600000
    assert samples[("accelpolicy_agent_accelerator_mode", LABELS)] == 0
    backend.recover()
    backend.lose(A10G)
    agent.reconcile()
    samples = _samples(metrics)
    assert samples[("accelpolicy_agent_accelerator_healthy", LABELS)] == 0
    assert ("accelpolicy_agent_ledger_remaining_credits", LABELS) not in samples  # no ledger entry when lost


def test_podresources_read_errors_count_but_auto_without_a_socket_does_not(make_agent, tmp_path):
    agent, _, metrics = _agent(make_agent, allocation_source="podresources",
                               podresources_socket=str(tmp_path / "absent.sock"))
    agent.reconcile()
    agent.reconcile()
    assert _samples(metrics)[("accelpolicy_agent_podresources_errors_total", ())] == 2
    agent, _, metrics = _agent(make_agent, allocation_source="auto", podresources_socket=str(tmp_path / "absent.sock"))
    agent.reconcile()
    assert _samples(metrics)[("accelpolicy_agent_podresources_errors_total", ())] == 0


def test_served_on_the_health_port(make_agent):
    agent, _, metrics = _agent(make_agent)
    agent.reconcile()
    server = serve_health(PassClock(60), host="127.0.0.1", port=0, metrics=metrics.registry)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
        assert f'accelpolicy_agent_ledger_remaining_credits{{accelerator="{A10G}",group="a10g",node="node-a10g"}} ' \
               "1.6e+06" in text
        assert urllib.request.urlopen(url + "/healthz", timeout=5).read() == b"starting\n"
    finally:
        server.shutdown()
        server.server_close()
