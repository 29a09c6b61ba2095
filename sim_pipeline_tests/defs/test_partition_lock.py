"""Partition locks (sim_pipeline/defs/partition_lock.py): all or none, naming the holder, free once released."""

import os

import pytest

from sim_pipeline.defs.partition_lock import PartitionClaim
from sim_pipeline.errors import PartitionBusy


def test_a_busy_name_refuses_the_whole_claim_names_its_holder_and_takes_nothing(tmp_path):
    first, second, third = (PartitionClaim(tmp_path) for _ in range(3))
    first.acquire(["retail+agent-v1+0"])
    with pytest.raises(PartitionBusy, match=f"held by pid {os.getpid()} on .*Fix: wait for it") as refused:
        second.acquire(["retail+0", "retail+agent-v1+0"])
    assert refused.value.name == "retail+agent-v1+0" and refused.value.holder["pid"] == os.getpid()
    assert not second.holds("retail+0")
    third.acquire(["retail+0"])  # the name the refused claim took on its way was given back
    first.release()
    second.acquire(["retail+agent-v1+0"])
    assert second.holds("retail+agent-v1+0")
