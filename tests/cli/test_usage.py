"""`accelpolicy usage` (runtime/cli/usage.py, runtime/report/usage.py, runtime/report/usagesource.py;
docs/tasks/report-usage.md): the window, the outputs, Prometheus' increase() arithmetic on a snapshot, the
HTTP API asked with one PromQL query per figure, and the errors."""
from __future__ import annotations

import csv
import io
import json
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
from click.testing import CliRunner

from runtime.cli import main
from runtime.report.usagesource import extrapolated_increase
from tests.usagecluster import A10G_POOL, EPOCH, SEED_HOUR, T4_POOL, seed_hour


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(EPOCH + seconds, timezone.utc).isoformat()


@pytest.fixture(scope="module")
def snapshot_file():
    """tests/fixtures/usage/seed-hour.om (tests/usagecluster.py ``seed_hour``): an hour of the seed in which
    team-a holds a 25 % slice of the A10G and team-b a whole T4 through the T4 pool's ClusterQueue, whose
    admitted Workload holds two accelerators of quota."""
    return SEED_HOUR


def test_the_fixture_is_what_the_meter_exports(policy):
    assert SEED_HOUR.read_text() == seed_hour(policy)


def _run(*args):
    result = CliRunner().invoke(main, ["usage", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def _hour(path, *more):
    return _run("--snapshot", str(path), "--from", _iso(0), "--to", _iso(3600), *more)


def test_the_table(snapshot_file):
    code, out, err = _hour(snapshot_file)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"# accelerator-hours from {_iso(0)} to {_iso(3600)} (1.000 h)",
        "NAMESPACE   POOL                                    PRODUCT       VIEW        HOURS",
        f"team-a      {A10G_POOL}       NVIDIA-A10G   sliced      0.250",
        f"team-b      {T4_POOL}   Tesla-T4      exclusive   1.000",
        "",
        "# pools: installed = charged + idle (idle includes out of service)",
        "POOL                                    PRODUCT       INSTALLED   CHARGED   IDLE    OUT-OF-SERVICE   IDLE-SHARE",
        f"{A10G_POOL}       NVIDIA-A10G   1.000       0.250     0.750   0.000            75.0%",
        f"{T4_POOL}   Tesla-T4      5.000       1.000     4.000   0.000            80.0%",
        "TOTAL                                                 6.000       1.250     4.750   0.000            79.2%",
        "",
        "# fairness: quota hours held by admitted Workloads vs hours charged, per ClusterQueue",
        "CLUSTERQUEUE                            NAMESPACE   QUOTA-HELD   CHARGED   HELD-UNUSED",
        "<none>                                  team-a      0.000        0.250     0.000",
        f"{T4_POOL}   team-b      2.000        1.000     1.000"]


def test_csv_json_and_html(snapshot_file):
    rows = list(csv.DictReader(io.StringIO(_hour(snapshot_file, "-o", "csv")[1])))
    assert rows[0] == {"section": "charged", "namespace": "team-a", "pool": A10G_POOL, "product": "NVIDIA-A10G",
                       "view": "sliced", "clusterqueue": "", "figure": "charged", "hours": "0.250"}
    total = {r["figure"]: r["hours"] for r in rows if r["section"] == "total"}
    assert total == {"installed": "6.000", "charged": "1.250", "idle": "4.750", "outOfService": "0.000"}
    doc = json.loads(_hour(snapshot_file, "-o", "json")[1])
    assert doc["total"]["installed"] == pytest.approx(doc["total"]["charged"] + doc["total"]["idle"])
    assert doc["fairness"][1] == {"clusterqueue": T4_POOL, "namespace": "team-b", "reserved": pytest.approx(2.0),
                                  "charged": pytest.approx(1.0), "unused": pytest.approx(1.0)}
    page = _hour(snapshot_file, "-o", "html")[1]
    assert page.startswith("<!DOCTYPE html>") and "http" not in page.replace("<!DOCTYPE html>", "")
    assert f"<tr data-pool='{T4_POOL}' data-installed=5.000000 data-charged=1.000000 data-idle=4.000000>" in page
    assert ("<tr id=total><th>TOTAL</th><th></th><th class=num>6.000</th><th class=num>1.250</th>"
            "<th class=num>4.750</th>") in page


def test_since_reads_back_from_to(snapshot_file):
    code, out, _ = _run("--snapshot", str(snapshot_file), "--since", "30m", "--to", _iso(3600), "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["window"] == {"from": _iso(1800), "to": _iso(3600), "hours": 0.5}
    assert doc["total"]["charged"] == pytest.approx(0.625)


@pytest.mark.parametrize("args, message", [
    (["--since", "30d"], "give exactly one of --prometheus URL and --snapshot FILE"),
    (["--snapshot", "x.om", "--prometheus", "http://127.0.0.1:9"], "give exactly one of"),
    (["--snapshot", "x.om", "--since", "1h", "--from", "2026-01-01T00:00:00Z"], "--since and --from are exclusive"),
    (["--snapshot", "x.om", "--since", "30 days"], "--since '30 days': expected a positive duration"),
    (["--snapshot", "x.om", "--from", "yesterday"], "--from 'yesterday': expected an RFC 3339 time"),
    (["--snapshot", "x.om", "--from", "2026-01-02T00:00:00Z", "--to", "2026-01-01T00:00:00Z"], "the window is empty"),
    (["--snapshot", "x.om", "--save", "y.om"], "--save needs --prometheus"),
    (["--snapshot", "/nonexistent/usage.om"], "snapshot /nonexistent/usage.om: No such file or directory"),
])
def test_bad_input_exits_2(args, message):
    code, out, err = _run(*args)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err, err


def test_a_snapshot_without_timestamps_or_not_openmetrics(tmp_path):
    (tmp_path / "scrape.om").write_text("# TYPE accelpolicy_accelerator_capacity_seconds counter\n"
                                        "accelpolicy_accelerator_capacity_seconds_total 5\n# EOF\n")
    (tmp_path / "junk.om").write_text("hello world\n")
    assert _run("--snapshot", str(tmp_path / "scrape.om"))[2] == (
        f"error: snapshot {tmp_path / 'scrape.om'}: sample accelpolicy_accelerator_capacity_seconds_total has no "
        "timestamp (write one with `accelpolicy usage --prometheus URL --save FILE`)\n")
    code, _, err = _run("--snapshot", str(tmp_path / "junk.om"))
    assert code == 2 and err.startswith(f"error: snapshot {tmp_path / 'junk.om'}: not OpenMetrics text: ")


def test_a_window_without_data_exits_1(snapshot_file):
    code, out, err = _run("--snapshot", str(snapshot_file), "--from", _iso(7200), "--to", _iso(9000))
    assert (code, out) == (1, "")
    assert err == (f"error: no accelerator counters between {_iso(7200)} and {_iso(9000)}: "
                   "accelpolicy_accelerator_capacity_seconds_total has fewer than two samples in the window "
                   "(is the controller scraped, and was it leading then?)\n")


def test_increase_is_prometheus_arithmetic():
    line = [(t, 2.0 * t) for t in range(0, 61, 15)]
    assert extrapolated_increase(line, 0, 60) == 120.0
    assert extrapolated_increase(line, 5, 55) == pytest.approx(100.0)   # extrapolated to the edges
    assert extrapolated_increase([(0, 10.0), (15, 40.0), (30, 5.0), (45, 35.0)], 0, 45) == 65.0   # a reset: 30 + 5 + 30
    assert extrapolated_increase([(30, 30.0), (45, 60.0), (60, 90.0)], 0, 60) == 90.0   # back to the zero point
    assert extrapolated_increase([(0, 1.0)], 0, 60) is None


class _Prometheus(BaseHTTPRequestHandler):
    """Answers /api/v1/query with ``answers[query]`` (a 400 error for an unknown one); records queries."""

    answers: dict[str, list] = {}
    asked: list[dict] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        params = {k: v[0] for k, v in parse_qs(urlparse(self.path).query).items()}
        type(self).asked.append(params)
        result = self.answers.get(params.get("query"))
        body = {"status": "success", "data": {"resultType": "vector", "result": result}} if result is not None \
            else {"status": "error", "errorType": "bad_data", "error": "parse error"}
        data = json.dumps(body).encode()
        self.send_response(200 if result is not None else 400)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def prometheus():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Prometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Prometheus.asked, _Prometheus.answers = [], {}
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_prometheus_is_asked_one_promql_query_per_counter(prometheus):
    def query(family, by):
        return f"sum by ({', '.join(by)}) (increase({family}_total[3600s]))"
    capacity = ("pool", "product", "state")
    _Prometheus.answers = {
        query("accelpolicy_accelerator_capacity_seconds", capacity): [
            {"metric": {"pool": A10G_POOL, "product": "NVIDIA-A10G", "state": "usable"}, "value": [0, "3600"]}],
        query("accelpolicy_accelerator_idle_seconds", capacity): [
            {"metric": {"pool": A10G_POOL, "product": "NVIDIA-A10G", "state": "usable"}, "value": [0, "2700"]}],
        query("accelpolicy_accelerator_charged_seconds", ("namespace", "pool", "product", "view", "clusterqueue")): [
            {"metric": {"namespace": "team-a", "pool": A10G_POOL, "product": "NVIDIA-A10G", "view": "sliced",
                        "clusterqueue": A10G_POOL}, "value": [0, "900"]}],
        query("accelpolicy_clusterqueue_reserved_seconds", ("clusterqueue", "namespace")): [
            {"metric": {"clusterqueue": A10G_POOL, "namespace": "team-a"}, "value": [0, "1800"]}]}
    code, out, err = _run("--prometheus", prometheus, "--from", "2026-05-01T00:00:00Z", "--to",
                          "2026-05-01T01:00:00+00:00", "-o", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["charged"] == [{"namespace": "team-a", "pool": A10G_POOL, "product": "NVIDIA-A10G", "view": "sliced",
                               "hours": 0.25}]
    assert doc["fairness"] == [{"clusterqueue": A10G_POOL, "namespace": "team-a", "reserved": 0.5, "charged": 0.25,
                                "unused": 0.25}]
    assert {a["time"] for a in _Prometheus.asked} == {"1777597200.000"}
    assert sorted(a["query"] for a in _Prometheus.asked) == sorted(_Prometheus.answers)   # one query per figure


def test_prometheus_errors_are_named(prometheus):
    code, out, err = _run("--prometheus", prometheus, "--since", "1h")
    assert (code, out) == (1, "")
    assert err.startswith(f"error: Prometheus at {prometheus} refused the query 'sum by (pool, product, state) "
                          "(increase(accelpolicy_accelerator_capacity_seconds_total[3600s]))': bad_data: parse error")
    with socket_closed() as url:
        code, out, err = _run("--prometheus", url, "--since", "1h")
    assert (code, out) == (1, "")
    assert err.startswith(f"error: cannot reach Prometheus at {url}: ") and "refused" in err


class socket_closed:
    """A loopback URL nothing listens on (a port bound, then closed)."""

    def __enter__(self):
        import socket
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc):
        return False
