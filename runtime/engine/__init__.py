"""Pure evaluation of the rules against a snapshot: no I/O, no clock, no environment.

Rooms, top to bottom (the import-linter contract in pyproject.toml keeps them so):
:mod:`.admission` (the webhooks' ``decide()``), :mod:`.admissioncheck` (Kueue Workloads) and
:mod:`.instances` (an Instance's Pod, Service, claim) use :mod:`.pools` (``derive()``: flavors,
InstanceTypes and their four views, queues), which uses :mod:`.devices` (the node agent's pure side);
all stand on :mod:`.settings`, :mod:`.resourcekeys`, :mod:`.policy` (typed access to a RuleSet),
:mod:`.snapshot`, :mod:`.decisions` and :mod:`.backends` (decision tables).
"""
