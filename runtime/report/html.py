"""`accelpolicy audit -o html`: one self-contained page (no network, no external file; docs/audit.md).

Sections: the summary counts; per-rule counts; the result table (click a header to sort, type to
filter, choose a result kind; a link may carry the view: ``#sort=OBJECT:desc&kind=fail&filter=pod``); and the
pools: for every InstanceType, grouped by accelerator, its four views (EX exclusive, SH shared, SL sliced, PT
partitioned) and the CPU view as capacity bars (used = capacity - remaining), so a full pool shows at a
glance. Every text is HTML-escaped.
"""
from __future__ import annotations

import html
from collections import Counter
from dataclasses import dataclass

from runtime.engine.policy import Policy
from runtime.engine.pools import derive
from runtime.engine.snapshot import Snapshot, name_of
from runtime.report.results import RESULT_KINDS, Result, summary

# The four accelerator views (docs/concepts/four-views.md "The four views"), then the CPU view
# (docs/concepts/pools-and-flavors.md "InstanceType status"): accelerated pools show the first four, CPU pools
# only the last, as the InstanceType's status publishes them.
VIEWS = (("EX", "accelerator"), ("SH", "acceleratorShared"), ("SL", "acceleratorSliced"),
         ("PT", "acceleratorPartitioned"), ("CPU", "cpu"))

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:3px 7px;text-align:left}
th{background:#eee;cursor:pointer;user-select:none}
.pass{color:#1a7f37}.fail{color:#c62828;font-weight:bold}.warn{color:#b26a00}
.error{color:#6a1b9a;font-weight:bold}
.skip{color:#777}
.counts span{display:inline-block;margin-right:1.2em;font-size:1.1em}
.group{margin:.6em 0 1.2em}.type{margin:.3em 0 .6em 1em}
.bar{display:inline-block;width:260px;height:14px;background:#e8f5e9;border:1px solid #9e9e9e;
vertical-align:middle}
.bar i{display:block;height:100%;background:#ef6c00}
.bar.full i{background:#c62828}
.view{display:inline-block;width:3em;font-family:monospace}
.num{font-family:monospace;margin-left:.5em}
"""

# Click a header of a ``table.sortable`` to sort by it (also the usage report's, runtime/report/usagehtml.py).
SORT_JS = """
function cellValue(row, i){return row.children[i].textContent;}
document.querySelectorAll('table.sortable th').forEach(function(th){
  var i = Array.prototype.indexOf.call(th.parentNode.children, th);
  th.addEventListener('click', function(){
    var table = th.closest('table'), body = table.tBodies[0];
    var asc = th.dataset.order !== 'asc';
    table.querySelectorAll('th').forEach(function(h){delete h.dataset.order;});
    th.dataset.order = asc ? 'asc' : 'desc';
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function(a, b){
      var x = cellValue(a, i), y = cellValue(b, i), numeric = {numeric: true};
      return asc ? x.localeCompare(y, undefined, numeric) : y.localeCompare(x, undefined, numeric);
    });
    rows.forEach(function(r){body.appendChild(r);});
  });
});
"""
_JS = SORT_JS + """
function applyFilter(){
  var text = document.getElementById('filter').value.toLowerCase();
  var kind = document.getElementById('kind').value;
  var shown = 0;
  document.querySelectorAll('#results tbody tr').forEach(function(r){
    var ok = (!kind || r.dataset.result === kind) && r.textContent.toLowerCase().indexOf(text) >= 0;
    r.style.display = ok ? '' : 'none'; if (ok) shown++;
  });
  document.getElementById('shown').textContent = shown;
}
document.getElementById('filter').addEventListener('input', applyFilter);
document.getElementById('kind').addEventListener('change', applyFilter);
// a shareable view: #sort=HEADER[:desc]&kind=fail&filter=text (results table)
var params = new URLSearchParams(location.hash.slice(1));
if (params.get('kind')) document.getElementById('kind').value = params.get('kind');
if (params.get('filter')) document.getElementById('filter').value = params.get('filter');
if (params.get('sort')) {
  var want = params.get('sort').split(':');
  document.querySelectorAll('#results th').forEach(function(th){
    if (th.textContent === want[0].toUpperCase()) { th.click(); if (want[1] === 'desc') th.click(); }
  });
}
applyFilter();
"""


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _int(value) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


@dataclass(frozen=True)
class Bar:
    """One view of one pool as its InstanceType status publishes it (integers; an unreadable value
    reads 0): ``used`` = capacity - remaining (never below 0)."""

    view: str
    capacity: int
    remaining: int
    once_max: int

    @property
    def used(self) -> int:
        return max(self.capacity - self.remaining, 0)


def pool_bars(policy: Policy, snapshot: Snapshot) -> list[tuple[str, list[tuple[str, list[Bar]]]]]:
    """``[(accelerator group or 'CPU', [(InstanceType, [Bar])])]`` in name order: EX, SH, SL and PT of an
    accelerated pool, the CPU view of a CPU pool (the figures `get instancetypes` prints)."""
    groups: dict[str, list] = {}
    for it in derive(policy, snapshot).instance_types:
        spec, status = it.get("spec") or {}, it.get("status") or {}
        group = spec.get("acceleratorGroup") or ("accelerated" if spec.get("acceleratable") else "CPU")
        bars = []
        for short, key in (VIEWS[-1:] if group == "CPU" else VIEWS[:-1]):
            view = status.get(key)
            if not isinstance(view, dict):
                continue
            bars.append(Bar(short, _int(view.get("capacity")), _int(view.get("remaining")),
                            _int(view.get("onceMaxRequest"))))
        groups.setdefault(group, []).append((name_of(it), bars))
    return [(g, sorted(groups[g])) for g in sorted(groups, key=lambda g: (g == "CPU", g))]


def render_page(policy: Policy, snapshot: Snapshot, results: list[Result],
                title: str = "accelpolicy audit") -> str:
    """The whole HTML page as a string (UTF-8, no external reference)."""
    counts = summary(results)
    out = [f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{_e(title)}</title>",
           f"<style>{_CSS}</style></head><body><h1>{_e(title)}</h1>", "<div class=counts id=summary>"]
    out += [f"<span class={k}>{counts[k]} {k}</span>" for k in RESULT_KINDS]
    out.append(
        "</div><h2>Per rule</h2><table id=rules class=sortable><thead><tr><th>POLICY</th><th>RULE</th>")
    out += [f"<th>{k.upper()}</th>" for k in RESULT_KINDS]
    out.append("</tr></thead><tbody>")
    per_rule: dict[tuple[str, str], Counter] = {}
    for r in results:
        per_rule.setdefault((r.policy, r.rule), Counter())[r.result] += 1
    for (policy_name, rule), c in sorted(per_rule.items()):
        out.append(f"<tr><td>{_e(policy_name)}</td><td>{_e(rule)}</td>"
                   + "".join(f"<td>{c[k]}</td>" for k in RESULT_KINDS) + "</tr>")
    out.append("</tbody></table><h2>Results</h2><p><input id=filter placeholder='filter' size=40> "
               "<select id=kind><option value=''>all</option>"
               + "".join(f"<option value={k}>{k}</option>" for k in RESULT_KINDS)
               + "</select> <span id=shown></span> shown</p>")
    out.append("<table id=results class=sortable><thead><tr><th>RESULT</th><th>POLICY</th><th>RULE</th>"
               "<th>OBJECT</th><th>FIELD</th><th>MESSAGE</th></tr></thead><tbody>")
    for r in results:
        out.append(f"<tr data-result={r.result}><td class={r.result}>{r.result}</td><td>{_e(r.policy)}</td>"
                   f"<td>{_e(r.rule)}</td><td>{_e(r.resource)}</td><td>{_e(r.field)}</td>"
                   f"<td>{_e(r.message)}</td></tr>")
    out.append("</tbody></table><h2>Pools</h2><div id=pools>")
    for group, types in pool_bars(policy, snapshot):
        out.append(f"<div class=group><h3>{_e(group)}</h3>")
        for name, bars in types:
            out.append(f"<div class=type data-type='{_e(name)}'><b>{_e(name)}</b><br>")
            for bar in bars:
                pct = 0 if bar.capacity == 0 else round(100 * bar.used / bar.capacity)
                full = " full" if bar.capacity and bar.used >= bar.capacity else ""
                out.append(f"<span class=view>{bar.view}</span><span class='bar{full}' "
                           f"title='{bar.used} of {bar.capacity} used'><i style='width:{pct}%'></i></span>"
                           f"<span class=num data-view={bar.view} data-capacity={bar.capacity} "
                           f"data-remaining={bar.remaining} "
                           f"data-once-max={bar.once_max}>{bar.used}/{bar.capacity} used, {bar.remaining} "
                           f"free, at most {bar.once_max} at once</span><br>")
            out.append("</div>")
        out.append("</div>")
    out.append(f"</div><script>{_JS}</script></body></html>")
    return "\n".join(out)
