"""The admission webhook server: :mod:`.app` (Starlette ASGI app, metrics, limits) and :mod:`.server`
(uvicorn over HTTPS, self-signed development CA). Decisions come from :mod:`runtime.engine.admission`.
"""
