"""Scale-out on Ray: a query's keyed stages as subtasks on workers, rows exchanged by key group.

``Engine(cluster=RayCluster(workers=N))`` runs every query it deploys across workers
(:mod:`splice.cluster.ray_cluster`): :mod:`splice.cluster.stages` cuts the plan,
:mod:`splice.cluster.exchange` routes rows, :mod:`splice.cluster.distributed_query` drives a
query's stages, checkpoints and recovery, :mod:`splice.cluster.ray_runner` holds the subtask
actors and their channels. Needs the ``ray`` extra.
"""

from splice.cluster.ray_cluster import RayCluster

__all__ = ["RayCluster"]
