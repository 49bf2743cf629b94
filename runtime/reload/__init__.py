"""How a rules change goes live, in one place (docs/rule-authoring.md "How a rules change goes live").

- :mod:`runtime.reload.watcher`: the rules directory's content hash (a generation's name everywhere) and
  the watcher that loads a changed set;
- :mod:`runtime.reload.trial`: the reload gate's trial (compile, rule suites, existing objects, recent
  reviews) and the verdicts a generation changes;
- :mod:`runtime.reload.consequences`: what a generation does to the pools and the work on them, and the
  hold;
- :mod:`runtime.reload.board`: the one verdict per generation on the rules ConfigMap, and approvals;
- :mod:`runtime.reload.replicas`: the serving replicas' own reports (``/generation``);
- :mod:`runtime.reload.holder`: the one holder every host uses (decide or follow, install, report);
- :mod:`runtime.reload.hosts`: what the controller, an admission replica, the standalone webhook and an
  agent each try and install;
- :mod:`runtime.reload.report`: metrics, messages and Events; :mod:`runtime.reload.costs`: the cost
  estimates ``accelpolicy diff`` compares.
"""
