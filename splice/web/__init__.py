"""A web page for a running engine: the data path, the queries and their live figures, deploy
and undeploy from the browser, and Prometheus metrics (``splice serve``, ``--serve``).

Needs the ``web`` extra (Starlette, uvicorn, prometheus-client)."""

__all__: list[str] = []
