"""Issue 13 item 2: many unique large reviews do not grow the server without bound.

The real server in its own process (``accelpolicy webhook``), unique ~1 MB Instance reviews over HTTPS,
the resident set size read from /proc before and after. Before the fix 200 such reviews added ~400 MiB
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
        for i in range(5):  # warm-up: first-use allocations are not growth
            client.post("/validate-instances", content=large_instance_review(1_000_000 + i, MiB), headers=headers)
        before = server.rss_bytes()
        for i in range(200):
            r = client.post("/validate-instances", content=large_instance_review(i, MiB), headers=headers)
            assert r.status_code == 200 and r.json()["response"]["uid"] == f"big-{i}"
        grown = server.rss_bytes() - before
    assert grown < 160 * MiB, f"RSS grew by {grown / MiB:.0f} MiB after 200 unique 1 MiB reviews"
