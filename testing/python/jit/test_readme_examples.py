"""README's first two code blocks (the eager form, then the factory form) run as written."""

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[3] / "README.md"


def test_readme_examples_run(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[:2]
    assert "@tilelang.jit\ndef matmul_relu(A, B" in blocks[0]
    assert "@T.prim_func" in blocks[1]
    # tracing reads the source of the decorated functions: run it from a file
    script = tmp_path / "readme_example.py"
    script.write_text("\n".join(blocks))
    namespace = {"__name__": "readme_example"}
    exec(compile(script.read_text(), str(script), "exec"), namespace)  # noqa: S102
    a, b, c = namespace["a"], namespace["b"], namespace["c"]
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=1e-2, rtol=1e-2)
    assert namespace["matmul_relu"].mode == "eager"
    assert "matmul_relu" in namespace["kernel"].get_kernel_source()
    assert namespace["kernel"] is namespace["matmul_relu"].compile(M=1024, N=1024, K=1024)
