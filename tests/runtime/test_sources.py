import pyarrow as pa
import pyarrow.parquet as pq

from splice.io.sources import file_source, round_robin, table_source
from splice.runtime import Engine, Query
from tests.runtime.opkit import CountAll


def test_sources_feed_the_engine_and_resume_from_a_position(tmp_path):
    t = pa.table({"x": pa.array(range(10), pa.int64())})
    pq.write_table(t, tmp_path / "x.parquet")
    eng = Engine()
    eng.define_stream("a", t.schema)
    eng.define_stream("b", t.schema)
    eng.deploy(Query.chain("n", ["a", "b"], CountAll()))
    eng.run(round_robin(table_source("a", t, 3), file_source("b", tmp_path / "x.parquet", 4, skip=1)))
    assert eng.results("n").column("n").to_pylist() == [10 + 6]
    order = [s for s, _ in round_robin(table_source("a", t, 5), table_source("b", t, 3))]
    assert order == ["a", "b", "a", "b", "b", "b"]
