"""A device-plugin stand-in that talks to a real kubelet (docs/tasks/e2e.md "The offline kind cluster") — test machinery only.

accelpolicy ships no device plugin (decision 11; docs/index.md "Not in this release"): on a real node the vendor plugin
advertises the accelerator tokens and the kubelet assigns devices to containers; the agent then reads
the kubelet's PodResources. On the kind cluster the kubelets are real, so this stand-in is a real
v1beta1 device plugin: per resource name one gRPC ``DevicePlugin`` server on a unix socket in the
kubelet's device-plugins directory, registered through the kubelet's ``Registration`` service
(``kubelet.sock``), advertising the devices of a recorded facts document (probes/recorded/), so the
kubelet itself allocates them to containers and reports them through PodResources.

Device IDs follow what the agent maps back (rules/agent.yaml ``podResources.deviceIdSeparator``,
docs/agent.md "The Devices object and its ledger"): ``<base>`` serves one device per healthy, non-MIG accelerator, ID = its UUID;
``<base>.shared`` serves ``sharesPerAccelerator`` (rules/constants.yaml) devices per such accelerator,
IDs ``<uuid>::<n>``. Sliced and partitioned tokens are not served (no seed node needs them on kind).

The stubs ``api_pb2.py``/``api_pb2_grpc.py`` are generated from k8s.io/kubelet's
``pkg/apis/deviceplugin/v1beta1/api.proto`` (committed as ``api.proto``) by ``regenerate.sh``.
"""
