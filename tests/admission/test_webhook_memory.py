"""docs/webhook-hardening.md "Bounded memory": many unique large reviews do not grow the server without bound.

The real server in its own process (``accelpolicy webhook``), unique ~1 MB Instance reviews over HTTPS,
the resident set size read from /proc after a warm-up and at the end. Before the fix 200 such reviews added ~400 MiB
(every review object kept by the memo keys); the memos are now bounded by bytes and keyed by digests.
"""
from __future__ import annotations

import pytest

from testing.webhookload import WebhookProcess, large_instance_review

MiB = 1024 * 1024


@pytest.mark.skipif(not __import__("pathlib").Path("/proc/self/status").exists(), reason="needs /proc")
def test_rss_stays_under_a_ceiling_after_many_unique_large_reviews(tmp_path):
    with WebhookProcess(tmp_path / "server") as server, server.client() as client:
        headers = {"content-type": "application/json"}
        for i in range(60):  # warm-up: fills the bounded memos (32 MiB) and the allocator's first arenas
            client.post("/validate-instances", content=large_instance_review(1_000_000 + i, MiB), headers=headers)
        before = server.rss_bytes()
        for i in range(150):
            r = client.post("/validate-instances", content=large_instance_review(i, MiB), headers=headers)
            assert r.status_code == 200 and r.json()["response"]["uid"] == f"big-{i}"
        grown = server.rss_bytes() - before
    # before the fix: about 2 MiB more per review (300 MiB here); bounded memos: flat after the warm-up
    assert grown < 100 * MiB, f"RSS grew by {grown / MiB:.0f} MiB over 150 more unique 1 MiB reviews"
