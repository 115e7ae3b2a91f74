"""Scale-out on Ray: a query's keyed stage as subtasks on workers, rows exchanged by key group.

:mod:`splice.cluster.stages` cuts the plan, :mod:`splice.cluster.exchange` routes rows,
:mod:`splice.cluster.ray_runner` runs the subtasks as Ray actors. Needs the ``ray`` extra.
"""

__all__: list[str] = []
