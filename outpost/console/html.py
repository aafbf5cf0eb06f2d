"""The console's HTML: the page frame, escaping, and the small pieces every page uses.

How this works: pages are rendered on the server as plain strings; every value that comes
from the configuration, the devices or the user goes through `esc` (or `attr`). The frame
links one stylesheet and two scripts (charts.js loads the vendored uPlot where a chart is),
all served by the console itself (outpost/console/static/), so nothing is fetched from
elsewhere and the Content-Security-Policy can forbid inline code. Forms that change something
carry the session's CSRF token (`csrf_input`); a viewer gets the same pages without their
forms (`can_change`).
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import Any

NAV = (("overview", "/console/"), ("devices", "/console/devices"),
       ("alarms", "/console/alarms"), ("uplink", "/console/uplink"),
       ("broker", "/console/broker"), ("history", "/console/history"))


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def attr(name: str, value: object) -> str:
    return f' {name}="{esc(value)}"'


def csrf_input(token: str) -> str:
    return f'<input type="hidden" name="csrf"{attr("value", token)}>'


def frame(title: str, body: str, *, user: str | None = None, role: str | None = None,
          active: str = "", gateway: str = "", csrf: str = "", notice: str = "",
          error: str = "", alarms: int = 0) -> str:
    """A whole page: header with navigation and user, a notice or error line, the body
    (`alarms`: the unacknowledged alarms, counted beside the alarms link; alarms.js keeps
    the count current)."""
    nav = ""
    account = ""
    if user is not None:
        count = (f'<span class="count" id="alarm-count"{"" if alarms else " hidden"}>'
                 f"{alarms}</span>")
        nav = "".join(f'<a href="{href}"{" class=active" if name == active else ""}>'
                      f'{name}{count if name == "alarms" else ""}</a>' for name, href in NAV)
        account = (f'<form method="post" action="/console/logout" class="account">'
                   f"{csrf_input(csrf)}<span>{esc(user)} · {esc(role)}</span>"
                   f'<button type="submit" class="link">log out</button></form>')
    banner = ""
    if notice:
        banner += f'<div class="notice" id="notice">{esc(notice)}</div>'
    if error:
        banner += f'<div class="error" id="error">{esc(error)}</div>'
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · outpost</title>"
        '<link rel="stylesheet" href="/console/static/console.css">'
        '<script src="/console/static/console.js" defer></script>'
        '<script src="/console/static/charts.js" defer></script>'
        '<script src="/console/static/alarms.js" defer></script></head><body>'
        f'<header><h1>outpost · {esc(gateway)}</h1><nav>{nav}</nav>{account}</header>'
        f"{banner}<main><h2>{esc(title)}</h2>{body}</main></body></html>"
    )


def table(headers: Iterable[str], rows: Iterable[Iterable[str]], empty: str = "none",
          **attrs: str) -> str:
    """A table of already-escaped cells."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
                   for row in rows)
    extra = "".join(attr(k.replace("_", "-"), v) for k, v in attrs.items())
    if not body:
        body = f'<tr><td class="empty" colspan="99">{esc(empty)}</td></tr>'
    return f"<table{extra}><tr>{head}</tr>{body}</table>"


def field(name: str, label: str, value: object = "", errors: Mapping[str, str] | None = None,
          kind: str = "text", options: Iterable[tuple[str, str]] | None = None,
          placeholder: str = "") -> str:
    """A labelled input (or select) with its error, if any, right under it."""
    problem = (errors or {}).get(name)
    invalid = ' aria-invalid="true"' if problem else ""
    ident = "f-" + name.replace(".", "-")
    if options is not None:
        choices = "".join(f'<option{attr("value", v)}{" selected" if str(v) == str(value) else ""}>'
                          f"{esc(text)}</option>" for v, text in options)
        control = f'<select{attr("name", name)}{attr("id", ident)}{invalid}>{choices}</select>'
    elif kind == "checkbox":
        checked = " checked" if value else ""
        control = (f'<input type="checkbox"{attr("name", name)}{attr("id", ident)} value="1"'
                   f"{checked}{invalid}>")
    else:
        control = (f'<input type="{kind}"{attr("name", name)}{attr("id", ident)}'
                   f'{attr("value", value)}{attr("placeholder", placeholder)}{invalid}>')
    message = (f'<div class="field-error" data-error-for="{esc(name)}">{esc(problem)}</div>'
               if problem else "")
    return f'<label class="field"><span>{esc(label)}</span>{control}{message}</label>'


def cell_input(name: str, value: object, errors: Mapping[str, str], kind: str = "text",
               size: int = 8, form: str = "",
               options: Iterable[tuple[str, str]] | None = None) -> str:
    """An input (or a select of `options`) inside a table cell, its error under it (`form`:
    the id of the form it belongs to, when that form is elsewhere)."""
    problem = errors.get(name)
    invalid = ' aria-invalid="true"' if problem else ""
    if form:
        invalid += attr("form", form)
    if options is not None:
        choices = "".join(f'<option{attr("value", v)}{" selected" if v == str(value) else ""}>'
                          f"{esc(text)}</option>" for v, text in options)
        control = f'<select{attr("name", name)}{invalid}>{choices}</select>'
    elif kind == "checkbox":
        control = (f'<input type="checkbox"{attr("name", name)} value="1"'
                   f'{" checked" if value else ""}{invalid}>')
    else:
        control = (f'<input{attr("name", name)}{attr("value", value)} size="{size}"'
                   f"{invalid}>")
    message = (f'<div class="field-error" data-error-for="{esc(name)}">{esc(problem)}</div>'
               if problem else "")
    return control + message


def general_errors(lines: Iterable[str]) -> str:
    items = "".join(f"<li>{esc(line)}</li>" for line in lines)
    return f'<ul class="errors" id="errors">{items}</ul>' if items else ""


def value_text(value: Any, unit: str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        value = round(value, 6)
    return f"{value} {unit}" if unit else str(value)


def button_form(action: str, label: str, csrf: str, hidden: Mapping[str, str] | None = None,
                css: str = "") -> str:
    fields = "".join(f'<input type="hidden"{attr("name", k)}{attr("value", v)}>'
                     for k, v in (hidden or {}).items())
    return (f'<form method="post"{attr("action", action)} class="inline">{csrf_input(csrf)}'
            f'{fields}<button type="submit"{attr("class", css)}>{esc(label)}</button></form>')


def device_badge(name: str, online: object, enabled: bool = True) -> str:
    """A device's state, kept current by the live stream (console.js)."""
    if not enabled:  # stays so until a reload enables it: nothing live to follow
        return '<span class="badge disabled">disabled</span>'
    state = "online" if online is True else "offline" if online is False else "unknown"
    return f'<span class="badge {state}"{attr("data-live-status", name)}>{state}</span>'
