"""The leader-epoch rule (txmq.store.replica.epochs): where two replicas' logs stop agreeing.

Method: the pure rule on hand-made histories for each shape a failover leaves (an old leader's
unreplicated tail, a follower that missed a whole epoch, no shared epoch, an empty epoch), then
the history file on real files: durable appends, a follower's adoption of its leader's pairs,
the cut, and a load that drops pairs past the log end (a truncation stopped half-way).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from txmq import limits
from txmq.store.files.disk import OsDisk
from txmq.store.files.sim_disk import SimDisk
from txmq.store.replica.epochs import FILE_NAME, EpochFile, divergence_point, epoch_end


def test_an_old_leaders_unreplicated_tail_is_cut_at_the_new_leaders_start() -> None:
    # Epoch 5 led from 0 and wrote to 900; the follower had 600 when it took over as epoch 9.
    old = [(5, 0)]
    new = [(5, 0), (9, 600)]
    assert divergence_point(old, 900, new, 1500) == 600
    # The new leader sees it the same way round (the rule is symmetric).
    assert divergence_point(new, 1500, old, 900) == 600


def test_a_follower_behind_the_shared_epochs_end_keeps_its_whole_log() -> None:
    assert divergence_point([(5, 0)], 400, [(5, 0), (9, 600)], 1500) == 400


def test_the_largest_shared_epoch_decides_not_the_first() -> None:
    # Both copied epochs 3 and 5; the old leader then led epoch 7 (its own tail from 700);
    # the other replica led epoch 8 from 650.
    mine = [(3, 0), (5, 300), (7, 700)]
    theirs = [(3, 0), (5, 300), (8, 650)]
    assert divergence_point(mine, 1000, theirs, 2000) == 650
    assert epoch_end(mine, 5, 1000) == 700 and epoch_end(theirs, 5, 2000) == 650


def test_a_replica_that_missed_a_whole_epoch_cuts_at_the_last_one_it_shares() -> None:
    # Leader went 3 -> 5 -> 8; this replica led 6 (its own tail) after copying part of 5.
    mine = [(3, 0), (5, 300), (6, 500)]
    theirs = [(3, 0), (5, 300), (8, 800)]
    assert divergence_point(mine, 900, theirs, 1200) == 500


def test_no_shared_epoch_means_nothing_is_known_to_agree() -> None:
    assert divergence_point([(4, 0)], 900, [(5, 0)], 700) == 0
    assert divergence_point([], 900, [(5, 0)], 700) == 0


def test_an_empty_epoch_ends_where_it_starts() -> None:
    # Epoch 6 was stamped at 400 and wrote nothing before epoch 7 took over at 400.
    theirs = [(5, 0), (6, 400), (7, 400)]
    assert epoch_end(theirs, 6, 1000) == 400
    assert divergence_point([(5, 0), (6, 400)], 700, theirs, 1000) == 400


def test_the_file_is_durable_ordered_and_bounded(tmp_path: Path) -> None:
    disk = OsDisk()
    f = EpochFile(disk, tmp_path, log_end=0)
    assert f.history == [] and f.latest == 0
    f.append(7, 0)
    f.append(9, 100)
    assert EpochFile(disk, tmp_path, log_end=100).history == [(7, 0), (9, 100)]
    with pytest.raises(AssertionError, match="epoch 8 after epoch 9"):
        f.append(8, 200)
    with pytest.raises(AssertionError, match="start went back"):
        f.append(10, 50)
    many = EpochFile(SimDisk(), tmp_path, log_end=0)  # in memory: a thousand fsyncs is slow
    for i in range(limits.REPLICA_EPOCHS_MAX + 5):
        many.append(10 + i, 200 + i)
    assert len(many.history) == limits.REPLICA_EPOCHS_MAX
    assert many.history[0] == (15, 205)


def test_a_follower_adopts_the_pairs_that_start_in_what_it_appends(tmp_path: Path) -> None:
    disk = OsDisk()
    f = EpochFile(disk, tmp_path, log_end=0)
    leaders = [(3, 0), (5, 300), (8, 800)]
    f.adopt(leaders, 0, 300)  # records [0, 300): epoch 3 only
    assert f.history == [(3, 0)]
    f.adopt(leaders, 300, 300 + 100)
    f.adopt(leaders, 300, 400)  # fetched again (a retry): nothing twice
    assert f.history == [(3, 0), (5, 300)]
    f.adopt(leaders, 400, 900)
    assert EpochFile(disk, tmp_path, log_end=900).history == leaders


def test_a_cut_and_a_short_log_drop_later_pairs(tmp_path: Path) -> None:
    disk = OsDisk()
    f = EpochFile(disk, tmp_path, log_end=0)
    for epoch, start in [(3, 0), (5, 300), (8, 800)]:
        f.append(epoch, start)
    f.cut(800)
    assert f.history == [(3, 0), (5, 300)]
    assert EpochFile(disk, tmp_path, log_end=800).history == [(3, 0), (5, 300)]
    # A truncation that cut the log to 200 but stopped before cutting this file: the log is the
    # truth, so the load drops what starts past its end (and saves that).
    assert EpochFile(disk, tmp_path, log_end=200).history == [(3, 0)]
    doc = json.loads((tmp_path / FILE_NAME).read_bytes())
    assert doc["epochs"] == [[3, 0]]


def test_an_unreadable_file_is_no_history(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_bytes(b"{not json")
    assert EpochFile(OsDisk(), tmp_path, log_end=10).history == []
