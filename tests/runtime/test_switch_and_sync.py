from hypothesis import given
from hypothesis import strategies as st

from splice.core.records import Instruction
from splice.runtime.switch import GlobalSwitch, LocalSwitch
from splice.runtime.synchronizer import Synchronizer


def test_switch_programs_only_through_addressed_instructions():
    sw = LocalSwitch(block_id=7, ports=4)
    assert sw.route(3) == 0
    assert not sw.accepts(Instruction(8, 3, 0b1))
    sw.program(Instruction(7, 3, 0b0101))
    assert sw.route(3) == 0b0101
    sw.program(Instruction(7, 3, 0))
    assert sw.route(3) == 0 and 3 not in sw.table


def test_switch_rejects_masks_beyond_its_ports():
    sw = GlobalSwitch(block_id=1)
    try:
        sw.program(Instruction(1, 5, 0b100))
    except ValueError as exc:
        assert "ports" in str(exc)
    else:
        raise AssertionError("a mask beyond the ports was accepted")


@given(st.permutations(list(range(40))), st.integers(0, 39))
def test_synchronizer_releases_in_token_order(order, pop_every):
    sync: Synchronizer[int] = Synchronizer()
    released: list[int] = []
    for i, token in enumerate(order):
        sync.push(token, token * 10)
        if pop_every and i % pop_every == 0:
            released += sync.pop_ready()
    released += sync.pop_ready()
    assert released == [t * 10 for t in range(40)]
    assert len(sync) == 0


def test_synchronizer_refuses_a_released_token():
    sync: Synchronizer[str] = Synchronizer()
    sync.push(0, "a")
    assert sync.pop_ready() == ["a"]
    try:
        sync.push(0, "again")
    except ValueError:
        pass
    else:
        raise AssertionError("a released token was accepted twice")
