"""Connectors: Kafka topics as sources and exactly-once sinks of a job.

:class:`~splice.connectors.kafka_source.KafkaSource` reads a topic into Arrow batches with a
watermark per partition and its offsets in the job's checkpoints;
:class:`~splice.connectors.kafka_sink.KafkaSink` writes a query's results into a topic in one
transaction per checkpoint epoch; :class:`~splice.connectors.file_source.FileSource` reads a
file or tails a directory; :class:`~splice.connectors.live.PolledSources` hands several sources to
the checkpoint coordinator. Kafka needs the ``kafka`` extra (``confluent-kafka``).
"""

__all__: list[str] = []
