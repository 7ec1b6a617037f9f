"""Issue 38, defect 2: a critic run resumed on a GPU crashed. DeepSpeed hands back the saved client state on the
CPU, and ForkCritic.load_state_dict kept its fork buffer there, to meet the device's tensors in the next fit/add.
No GPU here: the critic is built on the "meta" device, so a buffer left on the CPU shows as a device mismatch."""

from __future__ import annotations

import pytest
import torch

from heads.head import HeadConfig
from train.trainer import ForkCritic


def _saved_state_on_cpu() -> dict:
    cfg = HeadConfig(hidden_q=6, hidden_p=8, num_features=3)
    critic = ForkCritic(cfg, torch.device("cpu"), lr=1e-2, buffer=16)
    g = torch.Generator().manual_seed(0)
    critic.add(torch.randn(5, 6, generator=g), torch.randn(5, 8, generator=g), torch.rand(5, 3, generator=g),
               torch.randn(5, generator=g))
    critic.fit(2)
    return critic.state_dict()


@pytest.mark.filterwarnings("ignore:for out.*meta parameter:UserWarning")  # meta params: the copy is a no-op
def test_resumed_critic_moves_its_buffer_and_state_to_its_own_device():
    state = _saved_state_on_cpu()  # as DeepSpeed's load_checkpoint returns client state: on the CPU
    critic = ForkCritic(HeadConfig(hidden_q=6, hidden_p=8, num_features=3), torch.device("meta"), lr=1e-2, buffer=16)
    critic.load_state_dict(state)
    assert len(critic) == 5
    on = {k: v.device.type for k, v in critic.data.items()}
    assert set(on.values()) == {"meta"}, f"fork buffer left on {on} after a resume onto the critic's device"
    assert all(v.dtype == torch.float32 for v in critic.data.values())
    assert all(p.device.type == "meta" for p in critic.net.parameters())
    for s in critic.opt.state.values():
        assert all(v.device.type == "meta" for k, v in s.items() if torch.is_tensor(v) and k != "step")


def test_resumed_critic_keeps_adding_and_fitting_on_cpu():
    """The same resume on the CPU is unchanged: the buffer round-trips exactly and grows by the next add."""
    state = _saved_state_on_cpu()
    critic = ForkCritic(HeadConfig(hidden_q=6, hidden_p=8, num_features=3), torch.device("cpu"), lr=1e-2, buffer=16)
    critic.load_state_dict(state)
    assert all(torch.equal(critic.data[k], state["data"][k]) for k in state["data"])
    critic.add(torch.zeros(2, 6), torch.zeros(2, 8), torch.zeros(2, 3), torch.zeros(2))
    assert len(critic) == 7 and critic.fit(1)["critic_buffer"] == 7.0
