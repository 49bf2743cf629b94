"""Pydantic models: rule-file kinds (rulefiles), and the kinds other modules register.

A module that defines more rule kinds adds them to ``rulefiles.SPEC_MODELS`` at import time and is
imported here, so the loader knows every kind.
"""
from runtime.model import rulefiles  # noqa: F401
from runtime.model import kueue  # noqa: F401  (kind KueueConfiguration)
from runtime.model import agent  # noqa: F401  (kind NodeAgent)
from runtime.model import instancepod  # noqa: F401  (kind InstancePod)
from runtime.model import admission  # noqa: F401,E402
from runtime.model import audit  # noqa: F401,E402  (kind AuditPolicy)
from runtime.model import dra  # noqa: F401,E402  (kinds DraDriver, DraPolicy)
from runtime.model import cellimits  # noqa: F401,E402  (kind CelLimits)
from runtime.model import exceptions  # noqa: F401,E402  (kind ExceptionPolicy)
from runtime.model import health  # noqa: F401,E402  (kind AcceleratorHealth)
from runtime.model import reloadgate  # noqa: F401,E402  (kind ReloadGate)
from runtime.model import poolqueues  # noqa: F401,E402  (kind PoolQueues)
from runtime.model import controllerpolicy  # noqa: F401,E402  (kind ControllerPolicy)
