"""The order test files run in, for every suite of the repository (tests/, rules/tests/, e2e/).

``--file-order=reversed`` runs the test files last to first, ``--file-order=shuffled`` in an order drawn
from ``--file-order-seed`` (printed in the header, so a failing order can be run again). Tests inside one
file keep their order: a file's module-scoped fixtures are its own, while any dependence between files
(a cluster object left behind, a process-wide setting changed) shows up as a failure in another order.
The default, ``given``, keeps pytest's collection order.
"""
from __future__ import annotations

import random

ORDERS = ("given", "reversed", "shuffled")


def pytest_addoption(parser):
    group = parser.getgroup("file order")
    group.addoption("--file-order", choices=ORDERS, default="given",
                    help="run the test files in collection order (given, the default), last to first "
                         "(reversed) or in an order drawn from --file-order-seed (shuffled); the tests "
                         "inside a file keep their order")
    group.addoption("--file-order-seed", type=int, default=None,
                    help="seed of --file-order=shuffled (default: drawn at random and printed)")


def pytest_configure(config):
    if config.getoption("file_order") == "shuffled" and config.getoption("file_order_seed") is None:
        config.option.file_order_seed = random.randrange(1_000_000)


def pytest_report_header(config):
    order = config.getoption("file_order")
    if order == "shuffled":
        return f"file order: shuffled, --file-order-seed={config.getoption('file_order_seed')}"
    return f"file order: {order}"


def pytest_collection_modifyitems(session, config, items):
    order = config.getoption("file_order")
    if order == "given":
        return
    files: dict = {}
    for item in items:
        files.setdefault(item.path, []).append(item)
    paths = list(files)
    if order == "reversed":
        paths.reverse()
    else:
        random.Random(config.getoption("file_order_seed")).shuffle(paths)
    items[:] = [item for path in paths for item in files[path]]
