"""Shared by the CLI tests: run the real `tessel`, record named checks, print one line each and a summary."""
import os
import subprocess


class Checks:
    def __init__(self, tessel):
        self.tessel, self.failures, self.count = tessel, [], 0

    def run(self, args, env=None):
        """Runs tessel ARGS; returns (exit status, stdout, stderr)."""
        p = subprocess.run([self.tessel] + args, capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, **(env or {})))
        return p.returncode, p.stdout, p.stderr

    def check(self, name, ok, detail=""):
        self.count += 1
        print(("ok   " if ok else "FAIL ") + name + ("" if ok else f": {str(detail)[:800]}"))
        if not ok:
            self.failures.append(name)

    def summary(self):
        """Prints "N passed, M failed"; returns the exit status of the test."""
        print(f"{self.count - len(self.failures)} passed, {len(self.failures)} failed")
        return 1 if self.failures else 0
