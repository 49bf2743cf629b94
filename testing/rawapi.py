"""Raw Kubernetes API requests with one bearer token: what an attacker holding a component's token can
send. No client-side GET before a write, no schema, no retries: one HTTP request, one answer.

:class:`RawClient` ``(server, ca_pem, token)``; :meth:`RawClient.for_token` takes the server and CA of an
admin kubeconfig. :meth:`RawClient.request` returns an :class:`Answer` (HTTP status, the Status
message of a refusal, the decoded body); it never raises for a non-2xx answer.
"""
from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True)
class Answer:
    """``status`` (HTTP code), ``message`` (a refusal's Status message, "" when allowed), ``body``."""

    status: int
    message: str
    body: dict

    @property
    def allowed(self) -> bool:
        return 200 <= self.status < 300


class RawClient:
    """Requests to ``server`` (``https://host:port``) verified with ``ca_pem``, as ``token``."""

    def __init__(self, server: str, ca_pem: bytes, token: str):
        self.server, self.token = server.rstrip("/"), token.strip()
        self.context = ssl.create_default_context(cadata=ca_pem.decode())

    @classmethod
    def for_token(cls, kubeconfig: Path | str, token: str) -> "RawClient":
        """The server and CA of ``kubeconfig``'s current cluster (inline data or a file), with ``token``."""
        config = yaml.safe_load(Path(kubeconfig).read_text())
        cluster = config["clusters"][0]["cluster"]
        if "certificate-authority-data" in cluster:
            ca = base64.b64decode(cluster["certificate-authority-data"])
        else:
            ca = Path(cluster["certificate-authority"]).read_bytes()
        return cls(cluster["server"], ca, token)

    def request(self, method: str, path: str, body: dict | list | None = None, content_type: str = "application/json",
                dry_run: bool = False, timeout: float = 30.0) -> Answer:
        """One request; ``dry_run`` adds ``?dryRun=All`` (admission runs, nothing is stored)."""
        url = self.server + path + (("&" if "?" in path else "?") + "dryRun=All" if dry_run else "")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method.upper(),
                                     headers={"Authorization": f"Bearer {self.token}", "Content-Type": content_type,
                                              "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=timeout) as resp:
                text = resp.read().decode()
                return Answer(resp.status, "", json.loads(text) if text else {})
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")
            try:
                status = json.loads(text)
            except ValueError:
                status = {"message": text}
            return Answer(exc.code, str(status.get("message", "")), status)

    def patch(self, path: str, patch: dict | list, content_type: str = MERGE_PATCH, dry_run: bool = False) -> Answer:
        return self.request("PATCH", path, patch, content_type, dry_run)

    def create(self, path: str, obj: dict, dry_run: bool = False) -> Answer:
        return self.request("POST", path, obj, dry_run=dry_run)

    def delete(self, path: str, dry_run: bool = False) -> Answer:
        return self.request("DELETE", path, dry_run=dry_run)
