"""Server-rendered HTML: every value escaped, every link relative (so the app works under any mount).

All pages live at the app's root level (``./``, ``elements?name=...``), so one relative form of
each link is right wherever the app is mounted. The one script is inline, carries the response's
CSP nonce, and does two things: it applies the server-sent samples to the page, and it submits
the action forms with ``fetch`` so the page does not reload (without it the forms still work).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from html import escape
from typing import Any
from urllib.parse import urlencode

import attrs

from rehydrate import DeadLetter, ElementInfo
from rehydrate._core._durations import format_duration
from rehydrate._core._triggers import trigger_from_dict
from rehydrate._schedules import (
    ScheduleInfo,
    is_envelope,
    is_removed,
    is_schedule,
    schedule_info,
    schedule_row,
)
from rehydrate.errors import RehydrateError
from rehydrate.web._history import Point, iso

__all__ = [
    "ScheduleRow",
    "dead_page",
    "element_page",
    "elements_page",
    "error_page",
    "login_page",
    "overview_page",
    "relative",
    "schedules_page",
    "workers_section",
]

_STYLE = """
:root{--fg:#1d232a;--muted:#5c6670;--line:#d9dee3;--bg:#f6f8fa;--accent:#0b6bcb;--bad:#b42318;--ok:#1a7f37}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,sans-serif;color:var(--fg);background:#fff}
header{display:flex;gap:1em;align-items:baseline;padding:.6em 1.2em;background:var(--fg);color:#fff}
header a{color:#fff;font-weight:600;text-decoration:none}header .crumb{color:#c9d1d9}
#status{margin-left:auto;font-size:12px;color:#c9d1d9}#status.down{color:#ffb4a8}
header a.nav{font-weight:400;font-size:13px}
main{padding:1em 1.2em;max-width:1200px}h1{font-size:18px;margin:.2em 0 .6em}
table{border-collapse:collapse;width:100%;margin:.4em 0 1em}
th,td{text-align:left;padding:.35em .6em;border-bottom:1px solid var(--line);vertical-align:middle}
th{font-size:12px;text-transform:uppercase;letter-spacing:.03em;color:var(--muted);background:var(--bg)}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}td.acts,td.state{white-space:nowrap}th.n{text-align:right}
td code,pre{font:12px/1.4 ui-monospace,monospace}pre{background:var(--bg);padding:.8em;overflow:auto}
a{color:var(--accent)}.muted{color:var(--muted)}.bad{color:var(--bad)}.overdue{color:var(--bad);font-weight:600}
form.act{display:inline}button{font:inherit;font-size:12px;padding:.2em .6em;cursor:pointer;
border:1px solid var(--line);border-radius:4px;background:#fff}button:hover{border-color:var(--accent)}
button.danger:hover{border-color:var(--bad);color:var(--bad)}
svg.spark{display:block}svg.spark polyline{fill:none;stroke:var(--accent);stroke-width:1.5}
svg.spark.late polyline{stroke:var(--bad)}.pager{display:flex;gap:1em;align-items:center}
#notice{min-height:1.4em}#notice.ok{color:var(--ok)}#notice.bad{color:var(--bad)}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2em 1em}dt{color:var(--muted)}dd{margin:0}
footer{padding:1em 1.2em;color:var(--muted);font-size:12px;max-width:1200px}
tr.expired td{color:var(--muted)}td.wstate{color:var(--ok)}
tr.expired td.wstate{color:var(--bad);font-weight:600}
"""

_SCRIPT = r"""
(() => {
  const hist = {};
  const keep = %(keep)d;
  const fmtSeconds = (s) => {
    if (s === null || s === undefined) return '-';
    const a = Math.abs(s);
    const t = a < 1 ? (a * 1000).toFixed(0) + 'ms' : a < 120 ? a.toFixed(1) + 's'
      : a < 7200 ? (a / 60).toFixed(1) + 'm' : a < 172800 ? (a / 3600).toFixed(1) + 'h'
      : (a / 86400).toFixed(1) + 'd';
    return s === 0 ? 'now' : s < 0 ? t + ' overdue' : 'in ' + t;
  };
  const fmt = {
    next_due_in: fmtSeconds,
    left_rate: (r) => r === null ? '-' : (r * 60).toFixed(r * 60 < 10 ? 1 : 0) + '/min',
    oldest_due: (s) => s > 0 ? fmtSeconds(-s) : '-',
  };
  const status = document.getElementById('status');
  const spark = (svg, points, key) => {
    const w = +svg.getAttribute('width'), h = +svg.getAttribute('height');
    const vals = points.filter((p) => p[key] !== null).map((p) => p[key]);
    const max = Math.max(...vals, key === 'left_rate' ? 1 / 60 : 1);
    // Until the history fills, the points spread over the whole width (the title says how many).
    const step = w / Math.max(vals.length - 1, 1);
    const x0 = 0;
    svg.querySelector('polyline').setAttribute('points',
      vals.map((v, i) => (x0 + i * step).toFixed(1) + ',' + (h - 1 - (v / max) * (h - 2)).toFixed(1))
        .join(' '));
    svg.querySelector('title').textContent = key === 'left_rate'
      ? 'left per minute, last ' + vals.length + ' samples; peak ' + (max * 60).toFixed(1) + '/min'
      : 'oldest due element waiting, last ' + vals.length + ' samples; peak ' + max.toFixed(1) + 's';
  };
  const addRow = (name) => {
    const body = document.querySelector('#overview tbody');
    const tpl = document.getElementById('row-template');
    if (!body || !tpl) return;
    const row = tpl.content.firstElementChild.cloneNode(true);
    row.dataset.name = name;
    const q = new URLSearchParams({name: name}).toString();
    row.querySelector('a.name').textContent = name;
    row.querySelector('a.name').href = 'elements?' + q;
    row.querySelector('a.dead').href = 'dead?' + q;
    row.querySelectorAll('[data-k]').forEach((el) => { el.dataset.live = name; });
    body.appendChild(row);
    const empty = document.getElementById('empty');
    if (empty) empty.remove();
  };
  const show = (name, point) => {
    const h = hist[name];
    document.querySelectorAll('[data-live]').forEach((el) => {
      if (el.dataset.live !== name) return;
      const k = el.dataset.k;
      if (el.tagName.toLowerCase() === 'svg') { spark(el, h, k); return; }
      const v = point[k];
      el.textContent = (k === 'left_rate' && v !== null && !point.exact ? '≥ ' : '')  // a lower bound
        + (fmt[k] ? fmt[k](v) : String(v));
      if (k === 'next_due_in') el.classList.toggle('overdue', v !== null && v < 0);
    });
  };
  const apply = (dehydrators, full) => {
    const names = Object.keys(dehydrators);
    for (const name of names) {
      if (full) hist[name] = dehydrators[name];
      else (hist[name] = hist[name] || []).push(dehydrators[name]);
      if (hist[name].length > keep) hist[name].splice(0, hist[name].length - keep);
      if (!document.querySelector('#overview tr[data-name="' + CSS.escape(name) + '"]')) addRow(name);
      const h = hist[name];
      if (h.length) show(name, h[h.length - 1]);
    }
    document.querySelectorAll('#overview tr[data-name]').forEach((row) => {
      if (!names.includes(row.dataset.name)) row.remove();
    });
  };
  const ago = (s) => s === null || s === undefined ? '-'
    : s < 0.001 ? 'just now' : fmtSeconds(s).replace(/^in /, '') + ' ago';
  const late = (w) => w.lateness_p50 === null || w.lateness_p50 === undefined ? '-'
    : fmtSeconds(w.lateness_p50).replace(/^in /, '') + ' / ' + fmtSeconds(w.lateness_p99).replace(/^in /, '');
  const showWorkers = (workers) => {
    const body = document.querySelector('#workers tbody');
    if (!body || !workers) return;
    body.replaceChildren(...workers.map((w) => {
      const row = document.createElement('tr');
      row.dataset.worker = w.id;
      row.className = w.alive ? 'alive' : 'expired';
      const handlers = Object.entries(w.handlers).map(([n, h]) => n + ' ' + (h.in_flight ?? 0) + '/'
        + (h.concurrency ?? '-') + (late(h) === '-' ? '' : ' · ' + late(h)));
      const cells = [[w.alive ? 'alive' : 'expired', 'wstate'], [w.id, ''], [w.host ?? '-', ''],
        [String(w.pid ?? '-'), 'n'], [handlers.join(', ') || '-', ''], [String(w.in_flight ?? '-'), 'n'],
        [late(w), 'n'], [ago(w.last_seen_ago), 'n']];
      for (const [text, css] of cells) {
        const td = document.createElement('td'); td.textContent = text; if (css) td.className = css;
        row.appendChild(td);
      }
      return row;
    }));
    const empty = document.getElementById('no-workers');
    if (empty) empty.hidden = workers.length > 0;
  };
  const stamp = (at) => new Date(at).toLocaleTimeString();
  // Times of the store (a schedule's next run): the browser's local time, and relative to the
  // store's clock as the page was served (data-now), moved on by the time since.
  const served = Date.now() / 1000;
  const pad = (n) => String(n).padStart(2, '0');
  const localTime = (d) => {
    const zone = new Intl.DateTimeFormat(undefined, {timeZoneName: 'short'}).formatToParts(d)
      .find((part) => part.type === 'timeZoneName');
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' '
      + pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds())
      + (zone ? ' ' + zone.value : '');
  };
  const twoUnits = (a) => {  // whole seconds: '42s', '4m 10s', '3h 20m', '2d 3h'
    const units = [['d', 86400], ['h', 3600], ['m', 60], ['s', 1]];
    const i = units.findIndex(([, n]) => a >= n);
    if (i < 0) return '0s';
    const [u, n] = units[i];
    const first = Math.floor(a / n);
    if (i === units.length - 1) return first + u;
    const [v, m] = units[i + 1];
    const second = Math.floor((a - first * n) / m);
    return first + u + (second ? ' ' + second + v : '');
  };
  const fromNow = (s) => Math.abs(s) < 1 ? 'now' : s > 0 ? 'in ' + twoUnits(Math.round(s))
    : twoUnits(Math.round(-s)) + ' ago';
  const showTimes = () => {
    document.querySelectorAll('[data-now]').forEach((scope) => {
      const now = +scope.dataset.now + (Date.now() / 1000 - (+scope.dataset.loaded || served));
      scope.querySelectorAll('time[data-at]').forEach((el) => {
        const at = +el.dataset.at;
        el.textContent = localTime(new Date(at * 1000));
        el.title = el.getAttribute('datetime');
        const rel = el.parentElement.querySelector('.rel');
        if (rel) rel.textContent = '(' + fromNow(at - now) + ')';
      });
    });
  };
  showTimes();
  setInterval(showTimes, 1000);
  // After an action, the tables marked data-refresh are served again (the notice stays).
  const refresh = async () => {
    const reply = await fetch(window.location.href,
      {credentials: 'same-origin', headers: {'Accept': 'text/html'}});
    if (!reply.ok) { window.location.reload(); return; }
    // Only <main>, parsed inert in a template: the page's own style and script (whose nonce is
    // the new response's, not this page's) would be a CSP violation even in a parsed document.
    const text = await reply.text();
    const start = text.indexOf('<main>'), end = text.indexOf('</main>');
    const holder = document.createElement('template');
    holder.innerHTML = start < 0 || end < 0 ? '' : text.slice(start, end + '</main>'.length);
    const fresh = holder.content;
    document.querySelectorAll('[data-refresh]').forEach((old) => {
      const found = fresh.getElementById(old.id);
      if (found) {
        const node = document.importNode(found, true);
        node.dataset.loaded = String(Date.now() / 1000);
        old.replaceWith(node);
      } else old.remove();
    });
    showTimes();
  };
  if (window.EventSource) {
    const source = new EventSource('events');
    source.addEventListener('history', (e) => {
      const d = JSON.parse(e.data); apply(d.dehydrators, true); showWorkers(d.workers);
      status.textContent = 'live · ' + stamp(d.at); status.className = '';
    });
    source.addEventListener('sample', (e) => {
      const d = JSON.parse(e.data); apply(d.dehydrators, false); showWorkers(d.workers);
      status.textContent = 'live · ' + stamp(d.at); status.className = '';
    });
    source.addEventListener('trouble', (e) => {
      status.textContent = 'store trouble: ' + JSON.parse(e.data).error; status.className = 'down';
    });
    source.onerror = () => { status.textContent = 'reconnecting…'; status.className = 'down'; };
  }
  const notice = document.getElementById('notice');
  document.addEventListener('submit', async (ev) => {
    const form = ev.target;
    if (!form.matches('form.act')) return;
    ev.preventDefault();
    if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) return;
    let reply, body;
    try {
      reply = await fetch(form.getAttribute('action'), {
        method: 'POST', body: new URLSearchParams(new FormData(form)),
        headers: {'Accept': 'application/json'}, credentials: 'same-origin',
      });
      body = await reply.json();
    } catch (err) { body = {error: String(err)}; }
    notice.textContent = body.message || body.error || '';
    notice.className = reply && reply.ok ? 'ok' : 'bad';
    if (!(reply && reply.ok)) return;
    const then = form.dataset.then;
    if (then === 'refresh') await refresh();
    else if (then === 'row') form.closest('tr').remove();
    else if (then === 'rows') document.querySelectorAll('tr[data-row]').forEach((r) => r.remove());
    else if (then === 'due') {
      const row = form.closest('tr');
      row.querySelector('.due').textContent = 'now';
      row.querySelector('.state').textContent = 'due';
    } else if (body.next) window.location.assign(body.next);
  });
})();
"""


def relative(page: str, **params: object) -> str:
    """A link to one of the app's pages, relative to the app's root (``page`` has no slash)."""
    shown = {key: value for key, value in params.items() if value is not None}
    return (page or "./") + ("?" + urlencode(shown) if shown else "")


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "now"
    a = abs(value)
    if a < 1:
        text = f"{a * 1000:.0f}ms"
    elif a < 120:
        text = f"{a:.1f}s"
    elif a < 7200:
        text = f"{a / 60:.1f}m"
    elif a < 172800:
        text = f"{a / 3600:.1f}h"
    else:
        text = f"{a / 86400:.1f}d"
    return f"{text} overdue" if value < 0 else f"in {text}"


def from_now(seconds: float) -> str:
    """``in 4m 10s``, ``3h 20m ago``, ``now``: a time relative to now, to two units (the page's
    script writes the same as the clock moves on)."""
    whole = round(abs(seconds))
    if whole < 1:
        return "now"
    units = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
    i = next(k for k, (_, size) in enumerate(units) if whole >= size)
    unit, size = units[i]
    first, rest = divmod(whole, size)
    text = f"{first}{unit}"
    if i < len(units) - 1 and rest // units[i + 1][1]:
        text += f" {rest // units[i + 1][1]}{units[i + 1][0]}"
    return f"in {text}" if seconds > 0 else f"{text} ago"


def _preview(element: Any, width: int = 120) -> str:
    try:
        text = json.dumps(element, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        text = repr(element)
    return text if len(text) <= width else text[: width - 1] + "…"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


#: The most of one payload a page shows (a browser chokes on megabytes of text).
_PAYLOAD_CHARS = 200_000


def _pretty(element: Any) -> str:
    try:
        text = json.dumps(element, ensure_ascii=False, indent=2, sort_keys=True)
    except (TypeError, ValueError):
        text = repr(element)
    if len(text) > _PAYLOAD_CHARS:
        return text[:_PAYLOAD_CHARS] + f"\n… ({len(text) - _PAYLOAD_CHARS:,} more characters not shown)"
    return text


def _layout(
    *, title: str, body: str, nonce: str, keep: int, crumbs: Sequence[tuple[str, str]] = (), live: bool = True
) -> str:
    trail = "".join(f' <span class="crumb">/</span> <a href="{escape(h)}">{escape(t)}</a>' for t, h in crumbs)
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'  # no /favicon.ico request, which a mounted app may not serve
        f"<title>{escape(title)} · rehydrate</title>"
        f'<style nonce="{escape(nonce)}">{_STYLE}</style></head><body>'
        f'<header><a href="./">rehydrate</a>{trail}'
        f'<span id="status">{"connecting…" if live else ""}</span>'
        '<a class="nav" href="limits">limits</a>'
        '<a class="nav" href="schedules">schedules</a></header>'
        f'<main><div id="notice" role="status"></div>{body}</main>'
        "<footer>Counts come from the store at each sample. <b>Left/min</b>: elements that left a "
        "dehydrator between two samples (acked, cancelled or dead-lettered), counted by id while it "
        "holds at most 10,000 elements, else its net fall in size (a lower bound). <b>Oldest due</b>: how "
        "long the earliest due element has waited, a floor on lateness. <b>Workers</b>: from the "
        "heartbeats each scheduler serving handlers sends (every 5 s by default; one that only defers "
        "sends none); lateness there is p50 / p99 of its recent deliveries, and a worker that died shows "
        "as expired for an hour.</footer>"
        + (f'<script nonce="{escape(nonce)}">{_SCRIPT % {"keep": keep}}</script>' if live else "")
        + "</body></html>"
    )


def _button(
    action: str,
    label: str,
    *,
    csrf: str,
    fields: dict[str, str],
    then: str = "",
    confirm: str = "",
    danger: bool = False,
) -> str:
    hidden = "".join(
        f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">'
        for k, v in {"csrf": csrf, **fields}.items()
    )
    attributes = f' data-then="{escape(then)}"' if then else ""
    attributes += f' data-confirm="{escape(confirm)}"' if confirm else ""
    css = ' class="danger"' if danger else ""
    return (
        f'<form class="act" method="post" action="{escape(action)}"{attributes}>{hidden}'
        f'<button type="submit"{css}>{escape(label)}</button></form>'
    )


def _spark(name: str | None, key: str, *, late: bool = False) -> str:
    live = f' data-live="{escape(name)}"' if name is not None else ""
    css = "spark late" if late else "spark"
    return (
        f'<svg class="{css}" width="140" height="28" data-k="{key}"{live} role="img">'
        '<title></title><polyline points=""></polyline></svg>'
    )


def _left(point: Point | None) -> str:
    if point is None or point.left_rate is None:
        return "-"
    return ("" if point.exact else "≥ ") + f"{point.left_rate * 60:.1f}/min"  # inexact: a lower bound


def _stat_cells(name: str | None, point: Point | None) -> str:
    live = f' data-live="{escape(name)}"' if name is not None else ""

    def cell(key: str, text: str, css: str = "n") -> str:
        return f'<td class="{css}" data-k="{key}"{live}>{escape(text)}</td>'

    p = point
    next_css = "n overdue" if p is not None and p.next_due is not None and p.next_due < 0 else "n"
    return (
        cell("size", str(p.size) if p else "")
        + cell("due", str(p.due) if p else "")
        + cell("claimed", str(p.claimed) if p else "")
        + (
            f'<td class="n"><a class="dead" href="{escape(relative("dead", name=name))}">'
            f'<span data-k="dead"{live}>{p.dead if p else ""}</span></a></td>'
            if name is not None
            else '<td class="n"><a class="dead" href=""><span data-k="dead"></span></a></td>'
        )
        + cell("next_due_in", _seconds(p.next_due) if p else "", next_css)
        + cell("left_rate", _left(p))
        + f"<td>{_spark(name, 'left_rate')}</td>"
        + cell("oldest_due", _seconds(-p.oldest_due) if p and p.oldest_due > 0 else "-")
        + f"<td>{_spark(name, 'oldest_due', late=True)}</td>"
    )


_STAT_HEADERS = (
    '<th class="n">size</th><th class="n">due now</th><th class="n">in flight</th>'
    '<th class="n">dead letters</th><th class="n">next due</th><th class="n">left</th>'
    '<th>left/min, last minutes</th><th class="n">oldest due</th><th>oldest due, last minutes</th>'
)


def _late(entry: dict[str, Any]) -> str:
    p50, p99 = entry.get("lateness_p50"), entry.get("lateness_p99")
    if not isinstance(p50, (int, float)) or not isinstance(p99, (int, float)):
        return "-"
    return f"{_seconds(p50).removeprefix('in ')} / {_seconds(p99).removeprefix('in ')}"


def _ago(seconds: float) -> str:
    return "just now" if seconds < 0.001 else f"{_seconds(seconds).removeprefix('in ')} ago"


def _worker_handlers(handlers: dict[str, Any]) -> str:
    parts = []
    for name, entry in handlers.items():
        entry = entry if isinstance(entry, dict) else {}
        limit = entry.get("concurrency")
        text = f"{name} {entry.get('in_flight', 0)}/{'-' if limit is None else limit}"
        if _late(entry) != "-":
            text += f" · {_late(entry)}"
        parts.append(text)
    return ", ".join(parts) or "-"


def workers_section(workers: list[dict[str, Any]] | None) -> str:
    """The workers table (rows re-rendered by the script at each sample), or why there is none."""
    if workers is None:
        return (
            '<h1>Workers</h1><p class="muted">This store keeps no worker heartbeats, or they could not '
            "be read.</p>"
        )
    rows = "".join(
        f'<tr data-worker="{escape(w["id"])}" class="{"alive" if w["alive"] else "expired"}">'
        f'<td class="wstate">{"alive" if w["alive"] else "expired"}</td>'
        f"<td>{escape(w['id'])}</td><td>{escape(str(w['host'] or '-'))}</td>"
        f'<td class="n">{escape(str(w["pid"] or "-"))}</td>'
        f"<td>{escape(_worker_handlers(w['handlers']))}</td>"
        f'<td class="n">{escape(str("-" if w["in_flight"] is None else w["in_flight"]))}</td>'
        f'<td class="n">{escape(_late(w))}</td>'
        f'<td class="n">{escape(_ago(w["last_seen_ago"]))}</td></tr>'
        for w in workers
    )
    hidden = " hidden" if workers else ""
    return (
        "<h1>Workers</h1>"
        '<table id="workers"><thead><tr><th>state</th><th>id</th><th>host</th><th class="n">pid</th>'
        '<th>handlers: in flight/concurrency · lateness p50 / p99</th><th class="n">in flight</th>'
        '<th class="n">lateness p50 / p99</th><th class="n">last seen</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>"
        f'<p id="no-workers" class="muted"{hidden}>No worker has sent a heartbeat to this store: none '
        "is running, or they run with heartbeats off.</p>"
    )


def overview_page(
    *, latest: dict[str, Point], nonce: str, keep: int, workers: list[dict[str, Any]] | None = None
) -> str:
    rows = "".join(
        f'<tr data-name="{escape(name)}">'
        f'<td><a class="name" href="{escape(relative("elements", name=name))}">'
        f"{escape(name)}</a></td>{_stat_cells(name, point)}</tr>"
        for name, point in latest.items()
    )
    empty = "" if latest else '<p id="empty" class="muted">No dehydrator holds elements yet.</p>'
    body = (
        "<h1>Dehydrators</h1>"
        f'<table id="overview"><thead><tr><th>name</th>{_STAT_HEADERS}</tr></thead>'
        f"<tbody>{rows}</tbody></table>"
        f"{empty}"
        '<template id="row-template"><tr><td><a class="name" href=""></a></td>'
        f"{_stat_cells(None, None)}</tr></template>"
        f"{workers_section(workers)}"
    )
    return _layout(title="Dehydrators", body=body, nonce=nonce, keep=keep)


def _summary_table(name: str, point: Point | None) -> str:
    return (
        f'<table id="overview"><thead><tr>{_STAT_HEADERS}</tr></thead>'
        f'<tbody><tr data-name="{escape(name)}">{_stat_cells(name, point)}</tr></tbody></table>'
    )


def _pager(page: str, name: str, offset: int, limit: int, shown: int, total: int) -> str:
    parts = [f'<span class="muted">{offset + 1 if shown else 0}-{offset + shown} of {total}</span>']
    if offset > 0:
        parts.insert(
            0,
            f'<a href="{escape(relative(page, name=name, offset=max(0, offset - limit), limit=limit))}">'
            "← earlier</a>",
        )
    if offset + shown < total:
        parts.append(
            f'<a href="{escape(relative(page, name=name, offset=offset + limit, limit=limit))}">later →</a>'
        )
    return f'<div class="pager">{"".join(parts)}</div>'


def _state(info: ElementInfo, now: float) -> str:
    if info.claimed:
        return "in flight" if info.due > now else "lease expired"
    return "due" if info.due <= now else "waiting"


def _payload_cell(name: str, element: Any) -> str:
    """An element as the elements page lists it: a schedule's trigger and element (not the
    envelope it is stored in), a requeued occurrence's element, or the element itself."""
    if is_schedule(element):
        link = relative("schedules", name=name)
        info_trigger = _trigger_text(element)
        return (
            f'<a href="{escape(link)}">schedule</a> <code>{escape(info_trigger)}</code> '
            f"<code>{escape(_preview(element.get('element'), 80))}</code>"
        )
    if is_removed(element):
        return '<span class="muted">a removed schedule: it goes as its last run ends</span>'
    if is_envelope(element):  # a dead-lettered occurrence put back (requeue): no schedule behind it
        return (
            '<span class="muted">requeued occurrence</span> '
            f"<code>{escape(_preview(element.get('element'), 80))}</code>"
        )
    return f"<code>{escape(_preview(element))}</code>"


def _trigger_text(envelope: dict[str, Any]) -> str:
    try:
        return str(trigger_from_dict(envelope.get("trigger")))
    except RehydrateError:  # an envelope this version cannot read: say so, not fail the page
        return "(unreadable trigger)"


def elements_page(
    *,
    name: str,
    rows: Sequence[tuple[ElementInfo, Any]],
    now: float,
    offset: int,
    limit: int,
    total: int,
    point: Point | None,
    csrf: str,
    nonce: str,
    keep: int,
) -> str:
    lines = []
    for i, (info, element) in enumerate(rows):
        fields = {"name": name, "id": info.id}
        running = _state(info, now) == "in flight"  # a worker has it now: running it again is refused
        state = _state(info, now)
        if is_schedule(element):
            paused = bool(element.get("paused"))
            state += ", paused" if paused else ""
            actions = _schedule_actions(name, info.id, paused=paused, running=running, csrf=csrf)
        elif is_removed(element):
            actions = ""  # (it goes as its last run ends)
        else:
            actions = (
                "" if running else _button("run-now", "run now", csrf=csrf, fields=fields, then="due") + " "
            ) + _button(
                "cancel",
                "cancel",
                csrf=csrf,
                fields=fields,
                then="row",
                confirm=f"Cancel {info.id}?",
                danger=True,
            )
        lines.append(
            f'<tr data-row="{escape(info.id)}"><td class="n muted">{offset + i + 1}</td>'
            f'<td><a href="{escape(relative("element", name=name, id=info.id))}">'
            f"<code>{escape(info.id)}</code></a></td>"
            f'<td class="n due">{escape(_seconds(info.due - now))}</td><td class="n">{info.attempt}</td>'
            f'<td class="state">{state}</td><td>{_payload_cell(name, element)}</td>'
            f'<td class="acts">{actions}</td></tr>'
        )
    table = (
        '<table id="elements" data-refresh><thead><tr><th class="n">#</th><th>id</th><th class="n">due</th>'
        '<th class="n">attempt</th><th>state</th><th>payload</th><th></th></tr></thead>'
        f"<tbody>{''.join(lines)}</tbody></table>"
        if lines
        else '<p id="elements" data-refresh class="muted">No elements.</p>'
    )
    body = (
        f'<h1>{escape(name)} <span class="muted">elements in due order</span></h1>'
        f"{_summary_table(name, point)}"
        f'<p><a href="{escape(relative("dead", name=name))}">dead letters of {escape(name)}</a> · '
        f'<a href="{escape(relative("schedules", name=name))}">schedules of {escape(name)}</a></p>'
        # Straight to one element by its id (a GET: nothing changes).
        f'<form method="get" action="element"><input type="hidden" name="name" value="{escape(name)}">'
        '<label>id <input name="id" required></label> <button type="submit">look</button></form>'
        f"{_pager('elements', name, offset, limit, len(lines), total)}{table}"
        f"{_pager('elements', name, offset, limit, len(lines), total) if lines else ''}"
    )
    return _layout(
        title=name, body=body, nonce=nonce, keep=keep, crumbs=[(name, relative("elements", name=name))]
    )


def _schedule_page(*, name: str, row: ScheduleRow, csrf: str, nonce: str, keep: int) -> str:
    info, held = row.info, row.held
    policy = _policy(info)
    body = (
        f'<h1><code>{escape(info.id)}</code> <span class="muted">a schedule of {escape(name)}</span></h1>'
        f'<div id="schedule-box" data-refresh data-now="{row.wall_now!r}"><dl>'
        f"<dt>trigger</dt><dd><code>{escape(str(info.trigger))}</code></dd>"
        + (f"<dt>policy</dt><dd>{escape(policy)}</dd>" if policy else "")
        + f'<dt>next run</dt><dd class="next">{_next_run(info, row.wall_now)}</dd>'
        f'<dt>state</dt><dd class="state">{escape(row.state)}</dd>'
        f"<dt>{'lease ends' if held.claimed else 'due'}</dt>"
        f"<dd>{escape(_seconds(held.due - row.now))}</dd>"
        f"<dt>attempt</dt><dd>{held.attempt}</dd>"
        "</dl><h2>element</h2>"
        f"<pre>{escape(_pretty(info.element))}</pre><p>"
        f"{_schedule_actions(name, info.id, paused=info.paused, running=row.running, csrf=csrf)}"
        f'</p></div><p><a href="{escape(relative("schedules", name=name))}">'
        f"schedules of {escape(name)}</a></p>"
    )
    crumbs = [
        (name, relative("elements", name=name)),
        ("schedules", relative("schedules", name=name)),
        (info.id, relative("element", name=name, id=info.id)),
    ]
    return _layout(title=f"{info.id} in {name}", body=body, nonce=nonce, keep=keep, crumbs=crumbs)


def element_page(
    *,
    name: str,
    info: ElementInfo,
    element: Any,
    now: float,
    wall_now: float,
    csrf: str,
    nonce: str,
    keep: int,
) -> str:
    """One element; a schedule shows its trigger, next run, state and element (not its envelope)."""
    if is_schedule(element):
        try:
            schedule = schedule_info(info.id, element)
        except RehydrateError:
            pass  # an envelope this version cannot read: shown as it is stored
        else:
            row = ScheduleRow(name=name, info=schedule, held=info, now=now, wall_now=wall_now)
            return _schedule_page(name=name, row=row, csrf=csrf, nonce=nonce, keep=keep)
    fields = {"name": name, "id": info.id}
    body = (
        f'<h1><code>{escape(info.id)}</code> <span class="muted">in {escape(name)}</span></h1>'
        "<dl>"
        f"<dt>state</dt><dd>{_state(info, now)}</dd>"
        f"<dt>{'lease ends' if info.claimed else 'due'}</dt><dd>{escape(_seconds(info.due - now))}</dd>"
        f"<dt>filed for</dt><dd>{escape(_seconds(info.ttl).removeprefix('in '))} "
        f'<span class="muted">(its last TTL or lease)</span></dd>'
        f"<dt>attempt</dt><dd>{info.attempt}</dd>"
        f"<dt>claimed</dt><dd>{'yes' if info.claimed else 'no'}</dd>"
        "</dl><h2>payload</h2>"
        f"<pre>{escape(_pretty(element))}</pre><p>"
        + (
            ""
            if _state(info, now) == "in flight"
            else _button("run-now", "run now", csrf=csrf, fields=fields) + " "
        )
        + _button("cancel", "cancel", csrf=csrf, fields=fields, confirm=f"Cancel {info.id}?", danger=True)
        + "</p>"
    )
    crumbs = [(name, relative("elements", name=name)), (info.id, relative("element", name=name, id=info.id))]
    return _layout(title=f"{info.id} in {name}", body=body, nonce=nonce, keep=keep, crumbs=crumbs)


def dead_page(
    *,
    name: str,
    letters: Sequence[DeadLetter],
    offset: int,
    limit: int,
    total: int,
    point: Point | None,
    csrf: str,
    nonce: str,
    keep: int,
) -> str:
    from datetime import UTC, datetime

    lines = []
    for i, letter in enumerate(letters):
        fields = {"name": name, "id": letter.id}
        failed = (
            datetime.fromtimestamp(letter.failed_at, UTC).isoformat(timespec="seconds")
            if letter.failed_at
            else "-"
        )
        actions = (
            _button("requeue", "requeue", csrf=csrf, fields=fields, then="row")
            + " "
            + _button(
                "delete",
                "delete",
                csrf=csrf,
                fields=fields,
                then="row",
                confirm=f"Delete {letter.id} for good?",
                danger=True,
            )
        )
        lines.append(
            f'<tr data-row="{escape(letter.id)}"><td class="n muted">{offset + i + 1}</td>'
            f"<td><code>{escape(letter.id)}</code></td><td>{escape(failed)}</td>"
            f'<td class="n">{letter.attempts}</td>'
            f'<td class="bad"><code>{escape(_clip(letter.error, 160))}</code></td>'
            f'<td><code>{escape(_preview(letter.element))}</code></td><td class="acts">{actions}</td></tr>'
        )
    requeue_all = _button(
        "requeue",
        f"requeue all {total}",
        csrf=csrf,
        fields={"name": name, "all": "1"},
        then="rows",
        confirm=f"Requeue every dead letter of {name}?",
    )
    table = (
        '<table id="dead"><thead><tr><th class="n">#</th><th>id</th><th>failed at (UTC)</th>'
        '<th class="n">attempts</th><th>last error</th><th>payload</th><th></th></tr></thead>'
        f"<tbody>{''.join(lines)}</tbody></table>"
        if lines
        else '<p class="muted">No dead letters.</p>'
    )
    body = (
        f'<h1>{escape(name)} <span class="muted">dead letters, oldest first</span></h1>'
        f"{_summary_table(name, point)}<p>{requeue_all if lines else ''}</p>"
        f"{_pager('dead', name, offset, limit, len(lines), total)}{table}"
    )
    crumbs = [(name, relative("elements", name=name)), ("dead letters", relative("dead", name=name))]
    return _layout(title=f"dead letters of {name}", body=body, nonce=nonce, keep=keep, crumbs=crumbs)


@attrs.frozen(kw_only=True)
class ScheduleRow:
    """One schedule as the dashboard shows it: what ``Scheduler.schedules`` lists, and the state of
    its element in the store (running, due, a retry waiting...), read at ``now`` (the store's clock)
    and ``wall_now`` (Unix time by that clock)."""

    name: str
    info: ScheduleInfo
    held: ElementInfo
    now: float
    wall_now: float

    @property
    def running(self) -> bool:
        """Whether a worker holds it under a running lease (an occurrence, or an extra run, runs)."""
        return self.held.claimed and self.held.due > self.now

    @property
    def _extra(self) -> bool:
        """Due or running while its next occurrence is still ahead: an extra run (``run now``)."""
        nominal = self.info.next_run
        return nominal is not None and nominal.timestamp() + self.info.offset > self.wall_now + 1.0

    @property
    def state(self) -> str:
        held = self.held
        if self.info.paused:
            return "paused (a run ends first)" if self.running else "paused"
        if held.claimed:
            if not self.running:
                return "lease expired"  # its worker died or stalled: it runs again
            return "running (extra run)" if self._extra else "running"
        if held.attempt > 0:
            return f"retry waiting (attempt {held.attempt} failed)"
        if held.due <= self.now:
            return "extra run due" if self._extra else "due"
        return "waiting"

    @property
    def next_run_in(self) -> float | None:
        """Seconds from now to the next run's nominal time (negative while it runs or is late)."""
        nominal = self.info.next_run
        return None if nominal is None else nominal.timestamp() - self.wall_now

    def as_json(self) -> dict[str, Any]:
        """``rehydrate schedules``'s JSON row, with the trigger as written, ``next_run_in`` and the
        element's state."""
        return {
            **schedule_row(self.name, self.info),
            "trigger_text": str(self.info.trigger),
            "next_run_in": self.next_run_in,
            "state": self.state,
            "running": self.running,
            "attempt": self.held.attempt,
        }


def _policy(info: ScheduleInfo) -> str:
    """What else the trigger runs by, when it is not the default: misfire, grace, spread."""
    notes = []
    if info.misfire != "coalesce":
        notes.append(f"misfire {info.misfire}")
    if info.grace is not None:
        notes.append(f"grace {format_duration(info.grace)}")
    if info.spread:
        notes.append(f"spread {format_duration(info.spread)}, runs {format_duration(info.offset)} after")
    return ", ".join(notes)


def _schedule_actions(name: str, id: str, *, paused: bool, running: bool, csrf: str) -> str:
    """Pause or resume (whichever applies), run now (not while paused or running), remove."""
    fields = {"name": name, "id": id}
    toggle = _button(
        "resume" if paused else "pause",
        "resume" if paused else "pause",
        csrf=csrf,
        fields=fields,
        then="refresh",
    )
    run = (
        ""
        if paused or running
        else " " + _button("run-now", "run now", csrf=csrf, fields=fields, then="refresh")
    )
    remove = _button(
        "cancel",
        "remove",
        csrf=csrf,
        fields=fields,
        then="refresh",
        confirm=f"Remove the schedule {id} of {name}?",
        danger=True,
    )
    return f"{toggle}{run} {remove}"


def _next_run(info: ScheduleInfo, wall_now: float) -> str:
    """The next run: UTC as served, then the browser's local time, and relative to now."""
    if info.next_run is None:
        return '<span class="muted">- (paused)</span>'
    at = info.next_run.timestamp()
    return (
        f'<time datetime="{escape(iso(at))}" data-at="{at!r}">'
        f"{escape(info.next_run.strftime('%Y-%m-%d %H:%M:%S'))} UTC</time> "
        f'<span class="rel muted">({escape(from_now(at - wall_now))})</span>'
    )


def schedules_page(
    *,
    name: str | None,
    rows: Sequence[ScheduleRow],
    offset: int,
    limit: int,
    more: bool,
    wall_now: float,
    csrf: str,
    nonce: str,
    keep: int,
) -> str:
    lines = []
    for i, row in enumerate(rows):
        info = row.info
        policy = _policy(info)
        lines.append(
            f'<tr data-row="{escape(info.id)}" data-name="{escape(row.name)}">'
            f'<td class="n muted">{offset + i + 1}</td>'
            f'<td><a href="{escape(relative("elements", name=row.name))}">{escape(row.name)}</a></td>'
            f'<td><a href="{escape(relative("element", name=row.name, id=info.id))}">'
            f"<code>{escape(info.id)}</code></a></td>"
            f'<td class="trigger"><code>{escape(str(info.trigger))}</code>'
            + (f'<br><span class="muted">{escape(policy)}</span>' if policy else "")
            + "</td>"
            f'<td class="next">{_next_run(info, row.wall_now)}</td>'
            f'<td class="state">{escape(row.state)}</td>'
            f"<td><code>{escape(_preview(info.element, 80))}</code></td>"
            f'<td class="acts">'
            f"{_schedule_actions(row.name, info.id, paused=info.paused, running=row.running, csrf=csrf)}"
            "</td></tr>"
        )
    table = (
        '<table id="schedules"><thead><tr><th class="n">#</th><th>dehydrator</th><th>id</th>'
        "<th>trigger</th><th>next run (your time zone)</th><th>state</th><th>element</th><th></th>"
        f"</tr></thead><tbody>{''.join(lines)}</tbody></table>"
        if lines
        else '<p class="muted">No schedules'
        + (f" in {escape(name)}" if name else "")
        + ". File one with <code>Scheduler.schedule</code>, a handler's <code>schedule=</code>, or "
        "<code>rehydrate schedule</code>.</p>"
    )
    pager = []
    if offset > 0:
        earlier = relative("schedules", name=name, offset=max(0, offset - limit), limit=limit)
        pager.append(f'<a href="{escape(earlier)}">← earlier</a>')
    if lines:
        pager.append(f'<span class="muted">{offset + 1}-{offset + len(lines)}</span>')
    if more:
        later = relative("schedules", name=name, offset=offset + limit, limit=limit)
        pager.append(f'<a href="{escape(later)}">later →</a>')
    title = f"schedules of {name}" if name else "Schedules"
    body = (
        f'<h1>{escape(title)} <span class="muted">next to run first, paused last</span></h1>'
        f'<div class="pager">{"".join(pager)}</div>'
        f'<div id="schedules-box" data-refresh data-now="{wall_now!r}">{table}</div>'
    )
    crumbs = [("schedules", relative("schedules"))]
    if name:
        crumbs = [(name, relative("elements", name=name)), ("schedules", relative("schedules", name=name))]
    return _layout(title=title, body=body, nonce=nonce, keep=keep, crumbs=crumbs)


def limits_page(*, limit: str | None, rows: Sequence[dict[str, Any]], nonce: str, keep: int) -> str:
    """``/limits``: each limit key with state, fullest first (the rows of ``rehydrate limits``)."""
    lines = []
    for row in rows:
        capacity = [] if row["concurrency"] is None else [str(row["concurrency"])]
        capacity += [f"{n}/{per:g}s" for n, per in row["rates"]]
        saturation = row["saturation"]
        width = 0 if saturation is None else round(saturation * 100)
        lines.append(
            f'<tr data-limit="{escape(row["limit"])}" data-key="{escape(row["key"])}">'
            f'<td><a href="{escape(relative("limits", limit=row["limit"]))}">{escape(row["limit"])}</a></td>'
            f"<td><code>{escape(row['key'])}</code></td>"
            f'<td class="n">{row["holders"]}</td><td class="n">{row["waiting"]}</td>'
            f'<td class="n">{row["starts"]}</td>'
            f"<td>{escape(', '.join(capacity) or '-')}</td>"
            f'<td class="n" title="{width}%">'
            + ("-" if saturation is None else f"{saturation:.0%}")
            + "</td></tr>"
        )
    table = (
        '<table id="limits"><thead><tr><th>limit</th><th>key</th><th class="n">holders</th>'
        '<th class="n">waiting</th><th class="n">starts</th><th>capacity</th>'
        f'<th class="n">saturation</th></tr></thead><tbody>{"".join(lines)}</tbody></table>'
        if lines
        else '<p class="muted">No limit key holds a slot, counts a start or has waiters'
        + (f" in {escape(limit)}" if limit else "")
        + ". Declare limits with <code>handler(limits=...)</code> or use a <code>Limiter</code>.</p>"
    )
    title = f"limits of {limit}" if limit else "Limits"
    body = (
        f'<h1>{escape(title)} <span class="muted">fullest first; capacity as the live workers '
        "declare it</span></h1>"
        f'<div id="limits-box" data-refresh>{table}</div>'
    )
    crumbs = [("limits", relative("limits"))]
    if limit:
        crumbs.append((limit, relative("limits", limit=limit)))
    return _layout(title=title, body=body, nonce=nonce, keep=keep, crumbs=crumbs)


def error_page(*, status: int, message: str, nonce: str, keep: int) -> str:
    body = (
        f'<h1>{status}</h1><p class="bad">{escape(message)}</p>'
        '<p><a href="./">back to the dehydrators</a></p>'
    )
    return _layout(title=str(status), body=body, nonce=nonce, keep=keep, live=False)


def login_page(*, message: str, nonce: str, keep: int) -> str:
    body = (
        f'<h1>Token needed</h1><p class="bad">{escape(message)}</p>'
        '<form method="post" action="login"><label>token <input type="password" name="token" '
        'autocomplete="current-password" autofocus></label> <button type="submit">open</button></form>'
    )
    return _layout(title="token needed", body=body, nonce=nonce, keep=keep, live=False)
