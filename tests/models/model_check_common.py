"""What the torchvision model checks (check_models.py, check_pipeline.py) share: command line, running tessel."""
import argparse
import os
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = ("resnet18", "resnet50", "mobilenet_v2", "squeezenet1_1")


def model_arg_parser(description, keep_help):
    """--tessel, --models, --only and --keep; callers may add more options."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--tessel", default=os.path.join(REPO_ROOT, "build", "tessel"))
    parser.add_argument("--models", required=True, help="OUTDIR of scripts/export-models.py")
    parser.add_argument("--only", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--keep", help=keep_help)
    return parser


def inputs_ready(args, exported_suffix):
    """True when --tessel runs and every model in --only was exported; prints why not otherwise."""
    if not os.access(args.tessel, os.X_OK):
        print(f"error: --tessel '{args.tessel}' is not executable", file=sys.stderr)
        return False
    missing = [n for n in args.only if not os.path.exists(os.path.join(args.models, f"{n}{exported_suffix}"))]
    if missing:
        print(f"error: {', '.join(missing)} not exported in '{args.models}' "
              "(run scripts/export-models.py first)", file=sys.stderr)
        return False
    return True


def run_command(command, timeout):
    """Runs a command; returns (ok, seconds, message) with the last line of its output on failure."""
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, timeout, f"timed out after {timeout} s: {' '.join(command)}"
    seconds = time.monotonic() - started
    if done.returncode != 0:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        return False, seconds, f"exit {done.returncode}: {lines[-1] if lines else 'no message'}"
    return True, seconds, ""
