"""Connectors: Kafka topics as sources and exactly-once sinks of a job.

:class:`~splice.connectors.kafka_source.KafkaSource` reads a topic into Arrow batches with a
watermark per partition and its offsets in the job's checkpoints;
:class:`~splice.connectors.kafka_sink.KafkaSink` writes a query's results into a topic in one
transaction per checkpoint epoch; :class:`~splice.connectors.live.KafkaSources` hands several
sources to the checkpoint coordinator. They need the ``kafka`` extra (``confluent-kafka``).
"""

__all__: list[str] = []
