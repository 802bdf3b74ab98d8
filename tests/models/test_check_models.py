#!/usr/bin/python3
"""Tests check_models.py with a fake tessel: exact answers pass, a 1e-3 relative error or an unstable IR fails."""
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER = os.path.join(HERE, "check_models.py")
MODELS = ("resnet18", "resnet50", "mobilenet_v2", "squeezenet1_1")

# Answers `run` with the PyTorch output beside the model, scaled by (1 + $FAKE_ERROR) for $FAKE_BAD;
# answers `ir` with a .tir and its side file, whose weights differ between calls when $FAKE_BAD_IR names the model.
FAKE_TESSEL = textwrap.dedent("""\
    #!/usr/bin/python3
    import os, sys, time
    import numpy as np
    command, model = sys.argv[1], sys.argv[2]
    name = os.path.basename(model).split(".")[0]
    if command == "run":
        out_dir = sys.argv[sys.argv.index("--output-dir") + 1]
        expected = np.load(os.path.join(os.path.dirname(model), name + ".torch_output.npy"))
        if name == os.environ.get("FAKE_BAD"):
            expected = expected * (1 + float(os.environ["FAKE_ERROR"]))
        np.save(os.path.join(out_dir, "output.npy"), expected)
    elif command == "ir":
        out = sys.argv[sys.argv.index("-o") + 1]
        text = "graph " + name + " side_file " + os.path.basename(out) + ".bin\\n"
        weights = "weights"
        if name == os.environ.get("FAKE_BAD_IR") and model.endswith(".tir"):
            weights += " unstable"
        open(out, "w").write(text)
        open(out + ".bin", "w").write(weights)
    """)


class CheckModelsTest(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.TemporaryDirectory(prefix="tessel-check-models-test-")
        self.models = os.path.join(self.work.name, "models")
        os.makedirs(self.models)
        rng = np.random.default_rng(1)
        for name in MODELS:
            open(os.path.join(self.models, f"{name}.onnx"), "wb").close()
            np.save(os.path.join(self.models, f"{name}.input.npy"), np.zeros((1, 3, 2, 2), np.float32))
            np.save(os.path.join(self.models, f"{name}.torch_output.npy"),
                    rng.standard_normal((1, 1000)).astype(np.float32))
        self.tessel = os.path.join(self.work.name, "tessel")
        with open(self.tessel, "w") as f:
            f.write(FAKE_TESSEL)
        os.chmod(self.tessel, 0o755)

    def tearDown(self):
        self.work.cleanup()

    def check(self, **env):
        return subprocess.run([sys.executable, CHECKER, "--tessel", self.tessel, "--models", self.models],
                              capture_output=True, text=True, env={**os.environ, **env})

    def test_exact_outputs_pass(self):
        done = self.check()
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("4 of 4 models ok", done.stdout)
        self.assertEqual(done.stdout.count("IR round trip identical"), 4)

    def test_small_error_passes(self):
        done = self.check(FAKE_BAD="resnet50", FAKE_ERROR="1e-5")
        self.assertEqual(done.returncode, 0, done.stdout)

    def test_large_error_fails(self):
        done = self.check(FAKE_BAD="mobilenet_v2", FAKE_ERROR="1e-3")
        self.assertEqual(done.returncode, 1)
        self.assertIn("FAIL mobilenet_v2: max error", done.stdout)
        self.assertIn("3 of 4 models ok", done.stdout)

    def test_unstable_ir_fails(self):
        done = self.check(FAKE_BAD_IR="squeezenet1_1")
        self.assertEqual(done.returncode, 1)
        self.assertIn("FAIL squeezenet1_1: text IR round trip differs", done.stdout)
        self.assertIn("squeezenet1_1.tir.bin", done.stdout)

    def test_missing_export_is_reported(self):
        os.remove(os.path.join(self.models, "resnet18.torch_output.npy"))
        done = self.check()
        self.assertEqual(done.returncode, 2)
        self.assertIn("resnet18 not exported", done.stderr)


if __name__ == "__main__":
    unittest.main()
