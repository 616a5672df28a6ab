"""Generated modules work wherever the application wrote them (the public documentation's pattern:
`generate_mcp_sources(..., root_dir=X)` then `CodeExecutor(kernel_env={"PYTHONPATH": str(X)})`
in another working directory), and a kernel cannot widen that trust itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from servers.launch import nasty_params

from ipybox import CodeExecutionError, CodeExecutor, generate_mcp_sources

CALL = "from nasty import echo\nprint(echo.run(echo.Params(message='hi')))"


@pytest.fixture
async def generated(tmp_path: Path) -> Path:
    """`nasty` generated into `tmp_path/gen/tools` (registered there and in `gen`)."""
    root = tmp_path / "gen" / "tools"
    await generate_mcp_sources("nasty", nasty_params(), root)
    return root


@pytest.mark.timeout(90)
@pytest.mark.parametrize("form", ["absolute", "relative", "second entry"])
async def test_modules_on_the_kernels_pythonpath_are_trusted(
    tmp_path: Path, generated: Path, form: str
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    entry = {
        "absolute": str(generated),
        "relative": os.path.relpath(generated, elsewhere),
        "second entry": os.pathsep.join([str(tmp_path / "nothing-here"), str(generated)]),
    }[form]
    async with CodeExecutor(
        working_dir=elsewhere, kernel_env={"PYTHONPATH": entry}, spare_kernel=False
    ) as ex:
        assert (await ex.execute(CALL)).text == "hi"


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    "widen",
    [
        "import sys; sys.path.insert(0, {root!r})",
        "import os, sys; os.environ['PYTHONPATH'] = {root!r}; sys.path.insert(0, {root!r})",
        "import os, sys; os.chdir({root!r}); sys.path.insert(0, {root!r})",
    ],
    ids=["sys.path", "os.environ", "chdir"],
)
async def test_a_kernel_cannot_make_its_executor_trust_other_places(
    tmp_path: Path, generated: Path, widen: str
) -> None:
    """Only the application's kernel_env counts; what the kernel does to its own process does not."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    async with CodeExecutor(working_dir=elsewhere, spare_kernel=False) as executor:
        await executor.execute(widen.format(root=str(generated)))
        with pytest.raises(CodeExecutionError, match=r"not registered .* in workspace .*elsewhere"):
            await executor.execute(CALL)


@pytest.mark.timeout(90)
async def test_a_pythonpath_without_a_registration_trusts_nothing(tmp_path: Path, generated: Path) -> None:
    """Modules copied to another directory on the PYTHONPATH: that directory registered nothing."""
    copy = tmp_path / "copy"
    (copy / "nasty").mkdir(parents=True)
    for module in (generated / "nasty").glob("*.py"):
        (copy / "nasty" / module.name).write_text(module.read_text())
    async with CodeExecutor(
        working_dir=tmp_path, kernel_env={"PYTHONPATH": str(copy)}, spare_kernel=False
    ) as ex:
        with pytest.raises(
            CodeExecutionError, match=r"not registered .* or in .*copy \(the kernel's PYTHONPATH\)"
        ):
            await ex.execute(CALL)
