"""torch's own distributed test suite (torch/testing/_internal/distributed/distributed_test.py) on hier.

Usage: python tests/torch_suite/run_torch_suite.py [unittest arguments, e.g. -k test_all_reduce]
The suite runs on CPU tensors with WORLD_SIZE ranks (default 3: many tests use ranks 1 and 2 as a
subgroup). Every test hier does not run is listed, with the reason, in skips.py.
"""

import collections
import os
import re
import sys
import tempfile
import unittest

os.environ.setdefault("BACKEND", "hier")
os.environ.setdefault("WORLD_SIZE", "3")
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="hier-torch-suite-"))
os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")
for sub in ("barrier", "test_dir", "init_dir"):
    os.makedirs(os.path.join(os.environ["TEMP_DIR"], sub), exist_ok=True)

import torch  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

# What hier supports, told to the suite before it is imported (its decorators read these tables).
BACKEND = os.environ["BACKEND"]
for feature in ("plugin", "ddp", "subgroup", "gpu", "cuda"):
    DistTestCases.backend_feature[feature].add(BACKEND)

import torch_hier  # noqa: E402,F401
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from skips import SKIPS, SUITE_SKIPS  # noqa: E402


class TestDistBackendWithHier(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        # Forked ranks start in milliseconds; spawned ones import torch again (seconds each, 300 times).
        # The parent never makes a group, so no UCX or thread state is inherited.
        self._start_processes(torch.multiprocessing.get_context("fork").Process)


# Tests the suite hard-wires to Gloo or MPI (a literal `BACKEND != "gloo"` in a skip decorator, which
# only sets attributes on the test): hier has these features, so they run on hier too. Whatever of them
# hier does not pass is in skips.py with its reason.
LIFTED = [
    r"^Only gloo backend supports timeouts$",
    r"^GLOO Batch Send Recv CPU$",
    r"^Only Gloo backend supports sparse all reduce$",
    r"^get_future is only supported on mpi, nccl and gloo$",
    r"^Only MPI supports (CPU all_to_all_single|all_to_all)$",
    r"^Only Nccl & Gloo backend support DistributedDataParallel$",
    r"^Test requires backend hier to be one of \{'gloo'\}$",
]
for name in dir(TestDistBackendWithHier):
    test = getattr(TestDistBackendWithHier, name)
    why = getattr(test, "__unittest_skip_why__", "")
    if name.startswith("test_") and getattr(test, "__unittest_skip__", False) and any(re.search(p, why) for p in LIFTED):
        test.__unittest_skip__ = False
        if os.environ.get("HIER_SUITE_LIST_LIFTED"):
            print("lifted:", name, "--", why)

for name, reason in SKIPS.items():
    if not hasattr(TestDistBackendWithHier, name):
        raise SystemExit(f"skips.py names {name}, which the suite no longer has: remove it")
    setattr(TestDistBackendWithHier, name, unittest.skip(reason)(getattr(TestDistBackendWithHier, name)))


class RecordingResult(unittest.TextTestResult):
    """Keeps every skip's reason, to hold it against skips.py at the end."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.skip_reasons = {}

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.skip_reasons[test.id().split(".")[-1]] = reason


def check_skips(result):
    unexplained = {}
    for name, reason in result.skip_reasons.items():
        if name in SKIPS:
            continue
        if not any(re.search(pattern, reason) for pattern, _ in SUITE_SKIPS):
            unexplained[name] = reason
    counts = collections.Counter()
    for name, reason in result.skip_reasons.items():
        counts["hier: " + SKIPS[name] if name in SKIPS else reason] += 1
    print("\nSkipped tests by reason:")
    for reason, count in counts.most_common():
        print(f"  {count:4d}  {reason}")
    ran = result.testsRun - len(result.skipped)
    print(f"\nRan {ran} of {result.testsRun} tests: {ran - len(result.failures) - len(result.errors)} passed, "
          f"{len(result.failures) + len(result.errors)} failed, {len(result.skipped)} skipped")
    report = os.environ.get("HIER_SUITE_SKIP_REPORT")
    if report:
        with open(report, "w") as f:
            for name, reason in sorted(result.skip_reasons.items()):
                f.write(f"{name}\t{reason}\n")
    if unexplained:
        print("\nSkips that skips.py does not justify:")
        for name, reason in sorted(unexplained.items()):
            print(f"  {name}: {reason}")
    return not unexplained


if __name__ == "__main__":
    assert not torch.cuda.is_available() or os.environ.get("CUDA_VISIBLE_DEVICES") == "", (
        "run on CPU tensors: set CUDA_VISIBLE_DEVICES= (the suite skips everything when there are fewer GPUs than ranks)")
    program = unittest.main(
        testRunner=unittest.TextTestRunner(resultclass=RecordingResult, verbosity=1), exit=False)
    result = program.result
    skips_justified = check_skips(result)
    sys.exit(0 if result.wasSuccessful() and skips_justified else 1)
