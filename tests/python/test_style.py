"""The C++ sources are what clang-format makes of them (.clang-format at the root: Google's style, 120
columns), so the code keeps one style and one line length. packaging/install.sh installs clang-format."""

import os
import shutil
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDERS = ("transport", "plugin", "registry", "tests", "packaging")


def _sources():
    listed = subprocess.run(["git", "ls-files", *FOLDERS], cwd=ROOT, capture_output=True, text=True, check=True)
    return [p for p in listed.stdout.split() if p.endswith((".h", ".hpp", ".cpp", ".c"))]


def test_cpp_sources_follow_clang_format():
    tool = shutil.which("clang-format")
    assert tool, "clang-format is not installed; packaging/install.sh installs it (apt-get install clang-format)"
    sources = _sources()
    assert len(sources) > 100, f"found only {len(sources)} C++ sources under {FOLDERS}"
    result = subprocess.run([tool, "--dry-run", "--Werror", *sources], cwd=ROOT, capture_output=True, text=True)
    drifted = sorted({line.split(":")[0] for line in result.stderr.splitlines() if ": error:" in line})
    assert result.returncode == 0, (
        f"{len(drifted)} file(s) differ from clang-format's layout (run `clang-format -i` on them): {drifted}"
    )
