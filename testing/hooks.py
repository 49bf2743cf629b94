"""Test-only subclasses of product classes: the hooks tests and benchmarks need, kept out of the product.

* :class:`ObservedController` — :class:`runtime.controller.reconciler.Controller` plus :meth:`wait_idle`
  (tests wait for the controller to settle before asserting on the cluster).
* :class:`AllowAllState` — a :class:`runtime.webhook.app.WebhookState` that answers every review
  "allowed" without evaluating rules: the benchmark floor (same server, TLS and parsing).
  ``python -m testing.hooks webhook-floor <accelpolicy webhook options>`` serves it.
* ``python -m testing.hooks webhook-uncounted <accelpolicy webhook options>``: ``accelpolicy webhook``
  with the CEL run-time budget off (:class:`runtime.rules.cel.runtime.CelRuntime` ``counting=False``), the
  baseline benchmarks/cel_budget.py measures the budget's cost against.
"""
from __future__ import annotations

import sys
import time

from runtime.cli.webhook import webhook_command
from runtime.controller.reconciler import Controller
from runtime.engine.admission import Outcome, build_response
from runtime.webhook.app import WebhookState


class ObservedController(Controller):
    """A Controller tests can wait on (:meth:`wait_idle`)."""

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """True once no event is pending and the last reconcile planned (and deferred) nothing; False
        after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            last = self.reconciles[-1] if self.reconciles else None
            if not self._dirty.is_set() and last is not None and not last.planned and not last.deferred:
                return True
            time.sleep(0.05)
        return False


class AllowAllState(WebhookState):
    """Every review answered "allowed" (uid echoed) without evaluating rules: the benchmark floor."""

    def decide(self, data: dict, name: str, cancel=None, served=None, view=None) -> tuple[dict, Outcome]:
        request = data.get("request") if isinstance(data, dict) else None
        uid = request.get("uid") if isinstance(request, dict) else None
        outcome = Outcome(policy=name)
        return build_response(uid if isinstance(uid, str) else "", outcome), outcome


webhook_floor = webhook_command(AllowAllState)

if __name__ == "__main__":
    if sys.argv[1:2] == ["webhook-uncounted"]:
        from runtime.cli.webhook import webhook_command as _plain
        from runtime.rules.cel.runtime import CelRuntime, install_runtime

        install_runtime(CelRuntime(counting=False))
        _plain(WebhookState)(sys.argv[2:], prog_name="testing.hooks webhook-uncounted")
    elif sys.argv[1:2] != ["webhook-floor"]:
        sys.exit("usage: python -m testing.hooks webhook-floor|webhook-uncounted [accelpolicy webhook options]")
    else:
        webhook_floor(sys.argv[2:], prog_name="testing.hooks webhook-floor")
