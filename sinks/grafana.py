"""Push fencewatch's dashboards, and optionally its alerts as annotations, to a live Grafana.

What lives here: thin functions over `grafana-client` (`GrafanaApi`), no CLI. Dashboards are
upserted by uid (`overwrite: true`) into one folder, created when missing. Alerts (contract §8
alert records) become Grafana annotations tagged `fencewatch`, the kind, `cluster:<c>`,
`group:<g>`, `severity:<s>` and `alert_id:<id>`; an alert whose id is already annotated is
not posted again, so re-running a push is harmless (alert ids are deterministic).

Credentials: a service-account token (Bearer) or `user:password@` in the URL. Neither is
ever logged; URLs are logged without their user-info.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:  # the client and its HTTP stack are slow to import: loaded when a push runs, not with every command
    from grafana_client import GrafanaApi

log = logging.getLogger(__name__)

TAG = "fencewatch"
ANNOTATION_LOOKUP_LIMIT = 10_000


class GrafanaPushError(Exception):
    """Grafana refused or could not be reached; the message says which and why."""


@dataclass(frozen=True, slots=True)
class PushResult:
    dashboards: tuple[str, ...] = ()  # uids upserted
    folder_uid: str | None = None
    annotations_posted: int = 0
    annotations_skipped: int = 0  # already present (same alert_id)


def redact(url: str) -> str:
    """`url` without user-info, for logs and messages."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if _port(parts) is False:  # shown as given, so the message names what is wrong
        host = parts.netloc.rpartition("@")[2]
    elif _port(parts):
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def _port(parts) -> int | None | bool:
    """The URL's port; False when it is not one (``:99999``, ``:x``), where urllib raises."""
    try:
        return parts.port
    except ValueError:
        return False


def connect(url: str, token: str | None = None, timeout: float = 10.0) -> GrafanaApi:
    """A client for `url` (`http(s)://[user:password@]host[:port][/prefix]`), checked with one request."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or _port(parts) is False:
        raise GrafanaPushError(f"invalid Grafana URL {redact(url)!r}: expected http(s)://host[:port][/path]")
    if parts.path and not parts.path.endswith("/"):
        # grafana-client appends "api" to the path as is: /grafana -> /grafanaapi
        url = urlunsplit(parts._replace(path=parts.path + "/"))
    from grafana_client import GrafanaApi

    api = GrafanaApi.from_url(url, credential=token or None, timeout=timeout)
    info = _call(lambda: api.health.check(), f"reach Grafana at {redact(url)}")
    version = info.get("version", "unknown") if isinstance(info, Mapping) else "unknown"
    log.info("connected to Grafana %s at %s", version, redact(url))
    return api


def ensure_folder(api: GrafanaApi, title: str) -> str:
    """The uid of the folder titled `title`, created (uid = slug of the title) when missing."""
    folders = _call(lambda: api.folder.get_all_folders(), "list folders")
    for folder in folders or []:
        if folder.get("title") == title:
            return folder["uid"]
    uid = _slug(title)
    created = _call(lambda: api.folder.create_folder(title, uid=uid), f"create folder {title!r}")
    log.info("created Grafana folder %r (uid %s)", title, created.get("uid", uid))
    return created.get("uid", uid)


def push_dashboards(api: GrafanaApi, dashboards: Iterable[Mapping[str, Any]], folder_uid: str,
                    message: str) -> tuple[str, ...]:
    """Upsert every dashboard by uid into the folder; returns the uids pushed."""
    pushed = []
    for dashboard in dashboards:
        model = {k: v for k, v in dashboard.items() if k != "id"}
        model["id"] = None  # match by uid, never by the target's numeric id
        uid = model.get("uid")
        if not uid:
            raise GrafanaPushError(f"dashboard {model.get('title')!r} has no uid; refusing to create duplicates")
        response = _call(
            lambda: api.dashboard.update_dashboard(
                {"dashboard": model, "folderUid": folder_uid, "overwrite": True, "message": message}
            ),
            f"push dashboard {uid}",
        )
        log.info("pushed dashboard %s (%s) -> %s", uid, model.get("title"), response.get("url", "?"))
        pushed.append(uid)
    return tuple(pushed)


def annotation_for(alert: Mapping[str, Any]) -> dict[str, Any]:
    """The Grafana annotation of one alert record (contract §8)."""
    details = alert.get("details") or {}
    tags = [
        TAG,
        str(alert["kind"]),
        f"cluster:{alert.get('cluster') or 'default'}",
        f"group:{alert.get('group_id') or ''}",
        f"severity:{alert.get('severity') or 'info'}",
        f"alert_id:{alert['alert_id']}",
    ]
    if details.get("status"):
        tags.append(f"status:{details['status']}")
    text = f"{alert['kind']}: {alert.get('summary') or ''}"
    if details:
        text += "\n" + ", ".join(f"{k}={v}" for k, v in sorted(details.items()))
    return {"time": int(alert["ts"]), "tags": tags, "text": text}


def push_annotations(api: GrafanaApi, alerts: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """Post alerts as annotations, skipping alert ids already annotated; returns (posted, skipped)."""
    annotations = [annotation_for(a) for a in alerts]
    if not annotations:
        return 0, 0
    start = min(a["time"] for a in annotations)
    end = max(a["time"] for a in annotations)
    existing = _call(
        lambda: api.annotations.find_annotations(
            time_from=start, time_to=end, tags=[TAG], limit=ANNOTATION_LOOKUP_LIMIT
        ),
        "list existing annotations",
    )
    seen = {t for a in existing or [] for t in a.get("tags", []) if t.startswith("alert_id:")}
    posted = skipped = 0
    for annotation in annotations:
        alert_tag = next(t for t in annotation["tags"] if t.startswith("alert_id:"))
        if alert_tag in seen:
            skipped += 1
            continue
        _call(
            lambda: api.annotations.add_annotation(
                time_from=annotation["time"], tags=annotation["tags"], text=annotation["text"]
            ),
            f"post annotation for {alert_tag}",
        )
        seen.add(alert_tag)
        posted += 1
    log.info("annotations: %d posted, %d already present", posted, skipped)
    return posted, skipped


def _call(fn, what: str):
    from grafana_client.client import GrafanaException

    try:
        return fn()
    except GrafanaException as exc:
        status = getattr(exc, "status_code", 0)
        if status == 401:
            raise GrafanaPushError(f"could not {what}: Grafana refused the credentials (401)") from None
        if status == 403:
            raise GrafanaPushError(f"could not {what}: the token lacks permission (403)") from None
        raise GrafanaPushError(f"could not {what}: {exc.message}") from None
    except OSError as exc:  # connection refused, DNS, TLS
        raise GrafanaPushError(f"could not {what}: {os_reason(exc)}") from None


def os_reason(exc: BaseException) -> str:
    """The cause of a failed request in a few words (``[Errno 111] Connection refused``), not
    urllib3's nest of wrappers with object addresses in it."""
    text = str(exc)
    found = re.findall(r"\[Errno -?\d+\] [^'\")(]+", text)
    if found:
        return found[-1].strip().rstrip(".,")
    for words in ("timed out", "certificate verify failed", "Name or service not known"):
        if words in text:
            return words
    return type(exc).__name__


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", title.lower()).strip("-")[:40] or TAG
