"""tessel.from_torch: a PyTorch module exported through torch.onnx, compiled, and compared with PyTorch."""
import numpy as np
import pytest
import torch

import tessel


class SmallNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return torch.softmax(self.fc(y.flatten(1)), dim=1)


def test_from_torch_matches_pytorch_on_every_target():
    torch.manual_seed(0)
    net = SmallNet()
    net.train()  # from_torch exports in eval mode and restores the mode
    x = torch.randn(2, 3, 8, 8)
    model = tessel.from_torch(net, x, input_names=["x"], output_names=["probs"])
    assert net.training
    assert model.name == "<torch SmallNet>"
    assert [(i.name, i.shape) for i in model.inputs] == [("x", (2, 3, 8, 8))]
    net.eval()
    with torch.no_grad():
        expected = net(x).numpy()
    for target in ("ref", "cpu", "npu"):
        got = tessel.compile(model, target).run({"x": x.numpy()})["probs"]
        assert np.allclose(got, expected, atol=1e-5, rtol=1e-4), target
        assert tessel.compare({"probs": expected}, tessel.compile(model, target), inputs={"x": x},
                              atol=1e-5, rtol=1e-4)["pass"]


def test_from_torch_takes_a_tuple_and_default_names():
    class AddMul(torch.nn.Module):
        def forward(self, a, b):
            return a * b + a

    model = tessel.from_torch(AddMul(), (torch.ones(3), torch.ones(3)))
    assert len(model.inputs) == 2
    names = [i.name for i in model.inputs]
    a, b = np.arange(3, dtype=np.float32), np.full(3, 2, np.float32)
    (out,) = tessel.compile(model, "cpu").run({names[0]: a, names[1]: b}).values()
    assert np.array_equal(out, a * b + a)


def test_from_torch_reports_export_failures_as_torch_does():
    class Bad(torch.nn.Module):
        def forward(self, x):
            return x.numpy()  # not traceable

    with pytest.raises(Exception) as e:
        tessel.from_torch(Bad(), torch.ones(2))
    assert not isinstance(e.value, tessel.InternalError)
