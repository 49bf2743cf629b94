"""`accelpolicy usage -o html`: one self-contained page in the audit report's style (runtime/report/html.py:
its stylesheet and sortable tables; no network, no external file; docs/tasks/report-usage.md).

Sections: the window and the fleet's totals (installed = charged + idle); accelerator-hours by namespace,
pool, product and view; the pools, each with a bar of charged against installed and its idle share; the
fairness table (quota hours held by admitted Workloads against the hours charged, per ClusterQueue and
namespace, a bar of the share used). Every text is HTML-escaped; every figure is also in a ``data-*``
attribute in hours.
"""
from __future__ import annotations

from runtime.report.html import SORT_JS, _CSS, _e
from runtime.report.usage import HOUR, UsageReport, fmt_hours, fmt_share, residual


def _bar(part: float, whole: float, title: str) -> str:
    pct = 0 if whole <= 0 else min(round(100 * part / whole), 100)
    full = " full" if whole and part >= whole else ""
    return f"<span class='bar{full}' title='{_e(title)}'><i style='width:{pct}%'></i></span>"


def _row(attrs: str, texts: list, hours: list[float], tail: str = "", tag: str = "td") -> str:
    """``<tr attrs>``: escaped ``texts``, then ``hours`` as numbers, then ``tail`` (HTML) in a last cell."""
    cells = [f"<{tag}>{_e(t)}</{tag}>" for t in texts]
    cells += [f"<{tag} class=num>{fmt_hours(h)}</{tag}>" for h in hours]
    return f"<tr{attrs}>{''.join(cells)}{tail}</tr>"


def _head(table_id: str, headers: list[str]) -> str:
    return (f"<table id={table_id} class=sortable><thead><tr>"
            + "".join(f"<th>{h}</th>" for h in headers) + "</tr></thead><tbody>")


def _charged(report: UsageReport) -> list[str]:
    out = ["<h2>Accelerator-hours by namespace, pool, product and view</h2>",
           _head("charged", ["NAMESPACE", "POOL", "PRODUCT", "VIEW", "HOURS"])]
    out += [_row(f" data-hours={r.hours:.6f}", [r.namespace, r.pool, r.product, r.view], [r.hours])
            for r in report.charged]
    return out + ["</tbody></table>"]


def _pools(report: UsageReport) -> list[str]:
    out = ["<h2>Pools</h2><p>installed = charged + idle; idle includes the hours out of service.</p>",
           _head("pools", ["POOL", "PRODUCT", "INSTALLED", "CHARGED", "IDLE", "OUT-OF-SERVICE", "IDLE-SHARE",
                           "USE"])]
    for p in report.pools:
        attrs = (f" data-pool='{_e(p.pool)}' data-installed={p.installed:.6f} data-charged={p.charged:.6f} "
                 f"data-idle={p.idle:.6f}")
        use = _bar(p.charged, p.installed, f"{fmt_hours(p.charged)} of {fmt_hours(p.installed)} h charged")
        out.append(_row(attrs, [p.pool, p.product], [p.installed, p.charged, p.idle, p.out_of_service],
                        f"<td class=num>{fmt_share(p.idle_share)}</td><td>{use}</td>"))
    t = report.total()
    total = _row(" id=total", ["TOTAL", ""], [t.installed, t.charged, t.idle, t.out_of_service],
                 f"<th>{fmt_share(t.idle_share)}</th><th></th>", tag="th")
    out.append(f"</tbody><tfoot>{total}</tfoot></table>")
    return out


def _fairness(report: UsageReport) -> list[str]:
    out = ["<h2>Fairness: quota held vs hours charged, per ClusterQueue</h2>"]
    if not report.queues:
        return out + ["<p>No ClusterQueue usage in the window.</p>"]
    out.append(_head("fairness", ["CLUSTERQUEUE", "NAMESPACE", "QUOTA-HELD", "CHARGED", "HELD-UNUSED",
                                  "USED"]))
    for q in report.queues:
        used = _bar(q.charged, q.reserved,
                    f"{fmt_hours(q.charged)} of {fmt_hours(q.reserved)} held hours charged")
        out.append(_row(f" data-unused={q.unused:.6f}", [q.clusterqueue, q.namespace],
                        [q.reserved, q.charged, q.unused], f"<td>{used}</td>"))
    return out + ["</tbody></table>"]


def render_page(report: UsageReport, title: str = "accelpolicy usage") -> str:
    """The whole HTML page as a string (UTF-8, no external reference)."""
    w, t = report.window, report.total()
    start, end = _e(w.start.isoformat()), _e(w.end.isoformat())
    out = [f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{_e(title)}</title>",
           f"<style>{_CSS}</style></head><body><h1>{_e(title)}</h1>",
           f"<p id=window data-from='{start}' data-to='{end}'>From {start} to {end} "
           f"({w.seconds / HOUR:.3f} h)</p>",
           f"<div class=counts id=summary><span>{fmt_hours(t.installed)} installed</span><span class=fail>"
           f"{fmt_hours(t.charged)} charged</span><span class=pass>{fmt_hours(t.idle)} idle</span>"
           f"<span>{fmt_share(t.idle_share)} idle share</span></div>"]
    if abs(residual(report)) >= 0.0005:
        out.append(f"<p class=warn>Residual installed - charged - idle: {fmt_hours(residual(report))} h "
                   "(counters that started or stopped inside the window).</p>")
    out += _charged(report) + _pools(report) + _fairness(report)
    out.append(f"<script>{SORT_JS}</script></body></html>")
    return "\n".join(out)
