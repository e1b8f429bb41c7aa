"""Who owns a soft fabric's folder: the caller's is left alone, the per-user default goes with
its last node (CI used to leave an empty ``/dev/shm/tent-softverbs-<uid>`` behind).

The per-user default lives under ``_shm_base()``; these tests point that at ``tmp_path`` so they
never touch (or race on) the real ``/dev/shm`` folder other processes may be using.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from tent_transport.devices.verbs import soft, soft_backend
from tent_transport.devices.verbs.soft import _hca, _shm
from verbs_rc import Pair, write_wr

e = soft.enums


@pytest.fixture
def per_user(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The per-user default fabric, relocated under ``tmp_path`` (and not yet made)."""
    monkeypatch.delenv("TENT_SOFTVERBS_FABRIC", raising=False)
    monkeypatch.setattr(_hca, "_shm_base", lambda: tmp_path)
    folder = soft.default_fabric()
    assert folder.parent == tmp_path and not folder.exists()
    return folder


def test_the_default_fabric_folder_goes_with_its_last_node(per_user: Path) -> None:
    first, second = soft.Context(), soft.Context()
    assert first.fabric == second.fabric == per_user
    assert len(list(per_user.iterdir())) == 2
    first.close()
    assert [p.name for p in per_user.iterdir()] == [second.node.path.name]  # still in use
    second.close()
    assert not per_user.exists()
    second.close()  # idempotent: nothing left to remove, nothing raised


def test_a_node_reopens_the_default_fabric_after_it_went(per_user: Path) -> None:
    soft.Context().close()
    assert not per_user.exists()
    with soft.Context() as ctx:
        assert ctx.node.path.parent == per_user and ctx.node.path.is_dir()
    assert not per_user.exists()


def test_a_node_created_while_the_last_one_removes_the_folder_still_gets_one(
    per_user: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race: a node's ``mkdir(fabric)`` runs, then the last other node's close removes the
    (empty) folder, then this node's own ``mkdir`` finds no parent. It makes the folder again."""
    draws = iter([0x111, 0x222])
    removed = []

    def randbits(_bits: int) -> int:
        if not removed:  # between the folder's mkdir and the node's: the other close wins
            per_user.rmdir()
            removed.append(True)
        return next(draws)

    monkeypatch.setattr(_shm.secrets, "randbits", randbits)
    node = _shm.NodeDir.create(per_user)
    assert removed and node.node_id == 0x223  # the second draw (| 1): the first one failed
    assert node.path.is_dir() and node.owner_pid() is not None
    node.remove()


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_a_fabric_the_caller_names_is_left_to_the_caller(
    how: str, per_user: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    named = tmp_path / "named"
    if how == "environment":
        monkeypatch.setenv("TENT_SOFTVERBS_FABRIC", str(named))
        ctx = soft.Context()
    else:
        ctx = soft.Context(fabric=named)
    assert ctx.fabric == named
    ctx.close()
    assert named.is_dir() and list(named.iterdir()) == []  # its node went, the folder stays
    assert not per_user.exists()


def test_a_closed_default_fabric_node_still_refuses_like_a_gone_hca(per_user: Path) -> None:
    """The folder's removal changes nothing a peer observes: a write to a node that closed is
    a retry-exceeded error (a gone HCA), and a good one to a live node lands, as on a caller's
    fabric (test_soft_verbs.py)."""
    pair = Pair(soft_backend(), "soft0")
    assert pair.init.ctx.fabric == per_user
    rkey, addr = pair.dst.rkey, pair.dst.buf
    try:
        assert pair.one(write_wr(pair.backend, 1, pair.src, 8, rkey, addr)) == e.IBV_WC_SUCCESS
        pair.target.close()
        assert per_user.is_dir()  # the initiator's node keeps it
        status = pair.one(write_wr(pair.backend, 2, pair.src, 8, rkey, addr))
        assert status == e.IBV_WC_RETRY_EXC_ERR
    finally:
        pair.init.close()
    assert not per_user.exists()
    with pytest.raises(soft.PyverbsRDMAError) as info:
        soft.Context("mlx5_0")
    assert info.value.error_code == errno.ENODEV
    assert not per_user.exists()  # a refused open makes no folder
