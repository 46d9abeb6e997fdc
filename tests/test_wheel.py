"""The distribution as a user installs it: ``pip wheel .`` builds a wheel with the compiled
kernels; installed into a fresh virtual environment outside the checkout, the library runs
the README's examples with numpy alone, and the ``service`` extra brings the ``psmatch``
command.

One test, in steps that share the wheel and the environment (building and installing is
most of its cost). pip's own cache serves the pinned packages the checkout's environment
already downloaded.
"""

from __future__ import annotations

import doctest
import subprocess
import sys
import venv
from pathlib import Path

from tests.docblocks import ROOT, blocks
from tests.test_docs import is_doctest

SERVICE_MODULES = ("psmatch.service", "psmatch.adapters", "psmatch.devservers")


def run(*command: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(part) for part in command], cwd=cwd, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, f"{command}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def library_examples() -> str:
    """The README's doctest blocks that use the library alone, as one session."""
    chosen = [block.text for block in blocks(ROOT / "README.md")
              if is_doctest(block) and not any(m in block.text for m in SERVICE_MODULES)]
    assert chosen, "the README has no library examples"
    return "\n".join(chosen)


def test_the_wheel_installs_the_library_alone_then_the_service(tmp_path: Path) -> None:
    wheels, env, outside = tmp_path / "wheels", tmp_path / "env", tmp_path / "elsewhere"
    outside.mkdir()
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", wheels,
        ROOT, cwd=outside)
    (wheel,) = wheels.glob("psmatch-*.whl")
    listed = run(sys.executable, "-m", "zipfile", "-l", wheel, cwd=outside).stdout
    assert "psmatch/core/_kernels" in listed and "psmatch/py.typed" in listed

    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", wheel, cwd=outside)
    installed = run(python, "-m", "pip", "list", "--format=freeze", cwd=outside).stdout
    names = {line.split("==")[0].lower() for line in installed.splitlines()}
    assert {"psmatch", "numpy"} <= names
    assert not names & {"pyspark", "pyarrow", "confluent-kafka", "redis", "orjson"}

    examples = outside / "examples.txt"
    examples.write_text(library_examples())
    located = run(python, "-c", "import psmatch; print(psmatch.__file__, psmatch.__version__)",
                  cwd=outside).stdout
    assert str(env) in located and str(ROOT) not in located
    checked = run(python, "-c",
                  "import doctest, sys; r = doctest.testfile(sys.argv[1], module_relative=False,"
                  f" optionflags={doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE});"
                  " print(r.attempted, r.failed)", examples, cwd=outside).stdout
    attempted, failed = map(int, checked.split())
    assert attempted > 0 and failed == 0, checked

    run(python, "-m", "pip", "install", "--quiet", f"psmatch[service] @ {wheel.as_uri()}",
        cwd=outside)
    helped = run(env / "bin" / "psmatch", "--help", cwd=outside).stdout
    assert "usage: psmatch" in helped and "run" in helped
    assert run(python, "-m", "psmatch", "--help", cwd=outside).stdout == helped
