"""Client of kubelet's PodResources v1 gRPC API over its unix socket (docs/agent.md "The Devices object and
its ledger").

The stubs ``api_pb2.py``/``api_pb2_grpc.py`` are generated from k8s.io/kubelet's
``pkg/apis/podresources/v1/api.proto`` (committed here as ``api.proto``) by ``make podresources-stubs``
(``regenerate.sh``). Only this package imports ``grpc`` and ``google.protobuf``.
"""
from __future__ import annotations

from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict

from runtime.kube.podresources import api_pb2, api_pb2_grpc


class PodResourcesError(RuntimeError):
    """The PodResources ``List`` call failed; the message names the socket and the gRPC status."""


def list_pod_resources(socket: str, timeout: float = 10.0) -> list[dict[str, Any]]:
    """``v1.PodResourcesLister/List`` on ``unix://<socket>``.

    Returns the ``pod_resources`` as JSON-shaped dicts with lowerCamelCase keys and empty fields
    left out: ``[{name, namespace, containers: [{name, devices: [{resourceName, deviceIds}]}]}]``.
    Raises :class:`PodResourcesError` on any gRPC failure (socket missing, kubelet down, timeout of
    ``timeout`` seconds).
    """
    target = socket if socket.startswith("unix:") else f"unix://{socket}"
    try:
        with grpc.insecure_channel(target) as channel:
            stub = api_pb2_grpc.PodResourcesListerStub(channel)
            reply = stub.List(api_pb2.ListPodResourcesRequest(), timeout=timeout)
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        details = exc.details() if hasattr(exc, "details") else str(exc)
        raise PodResourcesError(f"PodResources List on {target} failed: {code}: {details}") from None
    return [MessageToDict(p) for p in reply.pod_resources]
