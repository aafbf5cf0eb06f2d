"""The root side of the remote update trigger: install the spooled request, record the outcome.

How this works: outpost-update.path starts outpost-update.service (root) when the gateway has
written the spool's request file; the service runs `outpost update run-request`, which is
`run_request` here. It checks the request again (the gateway's user wrote it), refuses an id
that already completed, then fetches, checks and installs with `update.install`, writing
every progress line into the spool's state file (the gateway reads that file and reports it to
the cloud). The outcome joins the list of completed ids in the same file before the request
file is removed, so the gateway, which refuses a command while a request file exists and
refuses a completed id, never sees a gap in which the same id would be taken again. After a
successful install the device reboots into the new slot (the outcome is on the data partition
and is reported again after the reboot).

A request found with its id already started in the state file was interrupted (power loss, a
killed runner): it is recorded as failed rather than tried again behind the sender's back.

`record_running` (run by the health check after each boot) writes the booted slot and the
version in it, with the boot's id, which the gateway reports as the running slot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from outpost import update
from outpost.update_command import (
    DONE_KEPT,
    Spool,
    UpdateCommand,
    boot_id,
    now_text,
    read_json,
    write_json,
)

IN_PROGRESS = ("downloading", "installing")


def run_request(spool: Spool, device: update.Device, ca_file: Path | None, reboot: bool,
                say: update.Progress) -> int:
    """Install the spooled request, if any. Returns 0 (installed, or nothing to do) or 1."""
    state = _read_state(spool, say)
    try:
        raw = read_json(spool.request)
    except ValueError as exc:
        return _finish(spool, state, {"id": None, "state": "failed",
                                      "error": f"unreadable request: {exc}"}, say)
    if raw is None:
        say(f"no update request ({spool.request})")
        return 0
    try:
        # The gateway adds when it accepted the command; the command's own fields are checked.
        command = UpdateCommand.model_validate({key: value for key, value in raw.items()
                                                if key != "accepted"})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'request'}: {e['msg']}"
                             for e in exc.errors())
        request_id = raw.get("id") if isinstance(raw.get("id"), str) else None
        return _finish(spool, state, {"id": request_id, "state": "failed",
                                      "error": f"invalid request: {problems}"}, say)
    request: dict[str, Any] = {"id": command.id, "url": command.url, "sha256": command.sha256}
    done = {entry.get("id"): entry for entry in state["done"]}
    if command.id in done:
        entry = done[command.id]
        spool.request.unlink(missing_ok=True)  # nothing else to record: it did not run again
        say(f"request {command.id} already completed ({entry.get('result')}): not run again")
        return 1
    previous = state.get("request") or {}
    if previous.get("id") == command.id and previous.get("state") in IN_PROGRESS:
        request.update(state="failed", started=previous.get("started"),
                       error="interrupted during the "
                       f"{'download' if previous['state'] == 'downloading' else 'install'} "
                       "(restart or power loss); send the command again with a new id")
        return _finish(spool, state, request, say)
    request.update(state="downloading", started=now_text(), detail="", ts=now_text())
    state["request"] = request
    write_json(spool.state, state)

    def progress(line: str) -> None:
        say(line)
        if line.startswith("installing "):
            request["state"] = "installing"
        request.update(detail=line, ts=now_text())
        write_json(spool.state, state, durable=False)  # progress: the outcome is fsync'd

    try:
        info = update.install(command.url, device, progress, ca_file=ca_file,
                              sha256=command.sha256, reboot=False,
                              allow_downgrade=command.allow_downgrade)
    except update.UpdateError as exc:
        request.update(state="failed", error=str(exc))
        return _finish(spool, state, request, say)
    except Exception as exc:  # settle the request whatever failed: the path unit would loop
        request.update(state="failed", error=f"{type(exc).__name__}: {exc}")
        _finish(spool, state, request, say)
        raise
    request.update(state="installed", version=info.version,
                   detail=f"installed {info.version}" + ("; rebooting into it" if reboot else
                                                           "; active after the next reboot"))
    code = _finish(spool, state, request, say)
    if reboot:
        update.reboot_into_new_slot(device, say)
    return code


def fail_request(spool: Spool, error: str, say: update.Progress) -> int:
    """Settle the spooled request (if any) as failed with `error`, without running it."""
    state = _read_state(spool, say)
    try:
        raw = read_json(spool.request) or {}
    except ValueError:
        raw = {}
    if not spool.request.exists() and not spool.request.is_symlink():
        say(f"no update request ({spool.request})")
        return 0
    request_id = raw.get("id") if isinstance(raw.get("id"), str) else None
    return _finish(spool, state, {"id": request_id, "url": raw.get("url"), "state": "failed",
                                  "error": error}, say)


def _read_state(spool: Spool, say: update.Progress) -> dict[str, Any]:
    try:
        state = read_json(spool.state) or {}
    except ValueError as exc:  # start afresh: the completed ids are lost, nothing else
        say(f"ignoring {exc}")
        state = {}
    if not isinstance(state.get("done"), list):
        state["done"] = []
    return state


def _finish(spool: Spool, state: dict[str, Any], request: dict[str, Any],
            say: update.Progress) -> int:
    """Record the outcome and the completed id, then remove the request (in that order)."""
    request.update(finished=now_text(), ts=now_text())
    request.setdefault("detail", request.get("error", ""))
    state["request"] = request
    if request.get("id") is not None:
        state["done"] = [*state["done"], {"id": request["id"], "result": request["state"],
                                          "finished": request["finished"]}][-DONE_KEPT:]
    write_json(spool.state, state)
    spool.request.unlink(missing_ok=True)
    if request["state"] == "failed":
        say(f"request {request.get('id')}: failed: {request.get('error')}")
        return 1
    say(f"request {request['id']}: {request['detail']}")
    return 0


def record_running(spool: Spool, device: update.Device, say: update.Progress) -> None:
    """Write the booted slot, its version and whether it is committed for the gateway to
    report (after the health check marked the slot)."""
    try:
        status = update.read_status(device)
    except (update.UpdateError, OSError, ValueError) as exc:
        say(f"the running slot is not recorded: {exc}")
        return
    booted = next((slot for slot in status.slots if slot.state == "booted"), None)
    write_json(spool.running, {
        "slot": status.booted, "slot_version": booted.version if booted else "",
        "committed": status.committed, "compatible": status.compatible, "checked": now_text(),
        "boot_id": boot_id(),
    })
