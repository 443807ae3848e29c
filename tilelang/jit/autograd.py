"""``tilelang.autograd_function``: a forward/backward pair of kernels as a ``torch.autograd.Function``.

::

    Attention = tilelang.autograd_function(
        forward=fwd_kernel,        # (q, k, v) -> (O, LSE)
        backward=attention_bwd,    # (q, k, v, O, LSE, dO) -> (dq, dk, dv)
        returns=[0],               # the caller gets O; LSE is only kept for backward
    )
    out = Attention.apply(q, k, v)

The forward and backward may be ``JITKernel``s (registered as torch custom ops, see
``tilelang.jit.torch_op``), ``TorchOp``s, or Python callables built from them (and torch ops),
so the resulting function also runs inside ``torch.compile(fullgraph=True)``.
"""

from __future__ import annotations

from .. import errors


def _as_callable(fn, what: str):
    """``fn`` as something to call: kernels become torch ops, callables stay."""
    from .kernel import JITKernel
    from .torch_op import torch_op

    if isinstance(fn, JITKernel):
        return torch_op(fn)
    if not callable(fn):
        raise errors.KernelArgumentError(
            f"autograd_function: argument {what!r} must be a JITKernel, a TorchOp or a callable, "
            f"got {type(fn).__name__}"
        )
    return fn


def _as_tuple(value) -> tuple:
    if isinstance(value, tuple | list):
        return tuple(value)
    return (value,)


def _check_returns(returns):
    if returns is None:
        return None
    if isinstance(returns, int) and not isinstance(returns, bool):
        returns = [returns]
    if not isinstance(returns, list | tuple) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in returns
    ):
        raise errors.KernelArgumentError(
            f"autograd_function: argument 'returns' must be an int or a list of ints, got {returns!r}"
        )
    if not returns:
        raise errors.KernelArgumentError("autograd_function: argument 'returns' must not be empty")
    return list(returns)


def autograd_function(forward, backward, *, returns=None, name: str | None = None):
    """A ``torch.autograd.Function`` subclass running ``forward`` and ``backward``.

    - ``forward(*inputs)`` returns one tensor or a tuple of tensors (the forward outputs).
    - ``returns``: indices of the forward outputs the caller gets (default: all of them); the
      others (e.g. FlashAttention's log-sum-exp) are only kept for the backward pass.
    - ``backward(*inputs, *outputs, *grad_outputs)`` receives the forward inputs, every forward
      output, and the gradient of each returned output (zeros for unused ones); it returns one
      gradient per input (a tensor or None; non-tensor inputs get None whatever it returns).

    Call the result with ``.apply(*inputs)``: one tensor when one output is returned, else a tuple.
    """
    import torch

    fwd = _as_callable(forward, "forward")
    bwd = _as_callable(backward, "backward")
    picks = _check_returns(returns)
    if name is not None and not (isinstance(name, str) and name.isidentifier()):
        raise errors.KernelArgumentError(
            f"autograd_function: argument 'name' must be a Python identifier, got {name!r}"
        )

    def _forward(ctx, *inputs):
        outputs = _as_tuple(fwd(*inputs))
        chosen = picks if picks is not None else list(range(len(outputs)))
        for i in chosen:
            if not -len(outputs) <= i < len(outputs):
                raise errors.KernelArgumentError(
                    f"autograd_function: 'returns' index {i} is out of range for the "
                    f"{len(outputs)} forward outputs"
                )
        tensors = [x for x in (*inputs, *outputs) if isinstance(x, torch.Tensor)]
        ctx.save_for_backward(*tensors)
        # where each input/output sits: ("t", position in saved tensors) or ("v", the value)
        layout, k = [], 0
        for x in (*inputs, *outputs):
            if isinstance(x, torch.Tensor):
                layout.append(("t", k))
                k += 1
            else:
                layout.append(("v", x))
        ctx.tl_layout = layout
        ctx.tl_n_inputs = len(inputs)
        ctx.tl_tensor_input = [isinstance(x, torch.Tensor) for x in inputs]
        result = tuple(outputs[i] for i in chosen)
        # auxiliary outputs are not returned: nothing to mark
        return result[0] if len(result) == 1 else result

    def _backward(ctx, *grads):
        saved = ctx.saved_tensors
        values = [saved[v] if kind == "t" else v for kind, v in ctx.tl_layout]
        result = bwd(*values, *grads)
        n = ctx.tl_n_inputs
        result = _as_tuple(result) if n != 1 or isinstance(result, tuple | list) else (result,)
        if len(result) != n:
            raise errors.KernelArgumentError(
                f"autograd_function: backward returned {len(result)} gradients for {n} inputs"
            )
        return tuple(g if is_t else None for g, is_t in zip(result, ctx.tl_tensor_input))

    return type(
        name or "TileLangFunction",
        (torch.autograd.Function,),
        {
            "forward": staticmethod(_forward),
            "backward": staticmethod(_backward),
            "__doc__": f"tilelang.autograd_function of {forward!r} and {backward!r}",
        },
    )
