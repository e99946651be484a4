"""The code that ran, read for the code rules: the script a command line names and the modules it
imports from its own folder (never the libraries'), located through a live process's cmdline and cwd."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from oomwatch.agent.sample.jobcode import locate_code, read_code
from oomwatch.scripts import MAX_FILES, read_program, script_of, scripts_named


def test_the_script_of_a_command_line() -> None:
    assert script_of(["python", "-u", "train.py", "--lr", "1"]) == ("train.py", None)
    assert script_of(["torchrun", "--nproc-per-node", "4", "src/train.py", "--epochs", "3"]) == ("src/train.py", None)
    assert script_of(["python", "-m", "torch.distributed.run", "--nproc_per_node=2", "t.py"]) == ("t.py", None)
    assert script_of(["accelerate", "launch", "--num_processes", "2", "ft.py"]) == ("ft.py", None)
    assert script_of(["python", "-m", "mypkg.train", "--x"]) == (None, "mypkg.train")
    assert script_of(["python", "-c", "print(1)"]) == (None, None)


def test_local_imports_two_deep_and_never_the_libraries(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "data.py").write_text("from . import cache\nimport numpy\n")
    (tmp_path / "pkg" / "cache.py").write_text("from .deep import x\n")
    (tmp_path / "pkg" / "deep.py").write_text("x = 1\n")
    (tmp_path / "train.py").write_text("import os, torch\nfrom pkg.data import Loader\nimport utils\n")
    (tmp_path / "utils.py").write_text("import json\n")
    program = read_program(["python", "train.py"], tmp_path)
    names = [f.path for f in program.files]
    assert names[0] == "train.py" and "utils.py" in names and "pkg/data.py" in names
    assert "pkg/deep.py" not in names  # three imports away
    assert all(not n.startswith("/") for n in names)  # shown relative to the working directory
    assert program.argv == ("python", "train.py")
    many = [f"import m{i}\n" for i in range(30)]
    (tmp_path / "big.py").write_text("".join(many))
    for i in range(30):
        (tmp_path / f"m{i}.py").write_text("")
    assert len(read_program(["python", "big.py"], tmp_path).files) == MAX_FILES


def test_scripts_a_log_names() -> None:
    lines = [
        "scenarios/workloads/keep_in_memory.py FAILED",
        '  File "/work/train.py", line 12, in <module>',
        '  File "/usr/lib/python3.11/site-packages/torch/serialization.py", line 1, in load',
    ]
    assert scripts_named(lines) == ["scenarios/workloads/keep_in_memory.py", "/work/train.py"]


def test_the_code_of_a_running_process_is_located_and_read_after_it_exits(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import time\ntime.sleep(30)\n")
    p = subprocess.Popen([sys.executable, "train.py", "--epochs", "1"], cwd=tmp_path)
    try:
        deadline = time.monotonic() + 10
        ref = None
        while ref is None and time.monotonic() < deadline:
            ref = locate_code([p.pid])
            time.sleep(0.05)
        assert ref is not None and ref.cwd == str(tmp_path) and ref.argv[1:] == ("train.py", "--epochs", "1")
    finally:
        p.kill()
        p.wait()
    program = read_code(ref)  # the process is gone; its file is not
    assert program is not None and program.files[0].text.startswith("import time")
    assert locate_code([2**22 + 7]) is None
