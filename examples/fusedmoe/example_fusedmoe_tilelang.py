"""Fused MoE (routed experts, SwiGLU): tokens are routed to their top-k experts on the host
(torch: router GEMM, top-k, sort by expert); the TileLang kernel then runs every expert's
``down(silu(x @ gate^T) * (x @ up^T))`` over its own contiguous group of token rows -- two
grouped GEMM stages in one program, gate and up fused in the first, the routing weight
applied in the second's epilogue -- and the host sums each token's k results.
"""

import argparse
import math

import torch

import tilelang
import tilelang.language as T

LOG2E = 1.44269504


@tilelang.jit(out_idx=[-1])
def moe_forward_tilelang_routed(group_sum, group_count, n_routed_experts, dhidden, dexpert,
                                block_token=64, block_dhidden=64, block_dexpert=64,
                                threads=128, num_stages=1, dtype="float16"):  # fmt: skip
    """Kernel factory. ``kernel(input, W_gate, W_up, W_down, weights, group_sizes,
    group_offsets, group_padded_offsets, group_idx_for_bx, up_logits) -> output``: input /
    output ``(group_sum, dhidden)`` hold the routed rows sorted by expert, W_gate/W_up
    ``(E, dexpert, dhidden)``, W_down ``(E, dhidden, dexpert)``, ``up_logits`` a
    ``(group_sum, dexpert)`` workspace; ``group_idx_for_bx[bx]`` is the expert of row tile bx."""
    M = math.ceil(group_sum / block_token) + group_count  # row tiles, groups padded
    accum_dtype = "float"
    E = n_routed_experts

    @T.prim_func
    def main(
        input: T.Tensor((group_sum, dhidden), dtype),
        W_gate: T.Tensor((E, dexpert, dhidden), dtype),
        W_up: T.Tensor((E, dexpert, dhidden), dtype),
        W_down: T.Tensor((E, dhidden, dexpert), dtype),
        routed_weights: T.Tensor((group_sum,), dtype),
        group_sizes: T.Tensor((E,), "int32"),
        group_offsets: T.Tensor((E,), "int32"),
        group_padded_offsets: T.Tensor((E,), "int32"),
        group_idx_for_bx: T.Tensor((M,), "int32"),
        up_logits: T.Tensor((group_sum, dexpert), dtype),
        output: T.Tensor((group_sum, dhidden), dtype),
    ):
        # stage 1: up_logits = silu(x @ gate^T) * (x @ up^T), per expert group
        with T.Kernel(M, T.ceildiv(dexpert, block_dexpert), threads=threads) as (bx, by):
            x_shared = T.alloc_shared((block_token, block_dhidden), dtype)
            gate_shared = T.alloc_shared((block_dexpert, block_dhidden), dtype)
            up_shared = T.alloc_shared((block_dexpert, block_dhidden), dtype)
            gate_local = T.alloc_fragment((block_token, block_dexpert), accum_dtype)
            up_local = T.alloc_fragment((block_token, block_dexpert), accum_dtype)

            g = group_idx_for_bx[bx]
            m_start = bx * block_token - group_padded_offsets[g] + group_offsets[g]
            rows = group_sizes[g] - (bx * block_token - group_padded_offsets[g])
            T.clear(gate_local)
            T.clear(up_local)
            for k in T.Pipelined(T.ceildiv(dhidden, block_dhidden), num_stages=num_stages):
                T.copy(input[m_start, k * block_dhidden], x_shared)
                T.copy(W_gate[g, by * block_dexpert, k * block_dhidden], gate_shared)
                T.copy(W_up[g, by * block_dexpert, k * block_dhidden], up_shared)
                T.gemm(x_shared, gate_shared, gate_local, transpose_B=True)
                T.gemm(x_shared, up_shared, up_local, transpose_B=True)
            for i, j in T.Parallel(block_token, block_dexpert):
                gate_local[i, j] = gate_local[i, j] / (1.0 + T.exp2(-gate_local[i, j] * LOG2E))
                up_local[i, j] = up_local[i, j] * gate_local[i, j]
            for i, j in T.Parallel(block_token, block_dexpert):
                if i < rows and by * block_dexpert + j < dexpert:
                    up_logits[m_start + i, by * block_dexpert + j] = up_local[i, j]

        # stage 2: output = weight * (up_logits @ down^T), per expert group
        with T.Kernel(M, T.ceildiv(dhidden, block_dhidden), threads=threads) as (bx, by):
            h_shared = T.alloc_shared((block_token, block_dexpert), dtype)
            down_shared = T.alloc_shared((block_dhidden, block_dexpert), dtype)
            out_local = T.alloc_fragment((block_token, block_dhidden), accum_dtype)

            g = group_idx_for_bx[bx]
            m_start = bx * block_token - group_padded_offsets[g] + group_offsets[g]
            rows = group_sizes[g] - (bx * block_token - group_padded_offsets[g])
            T.clear(out_local)
            for k in T.Pipelined(T.ceildiv(dexpert, block_dexpert), num_stages=num_stages):
                T.copy(up_logits[m_start, k * block_dexpert], h_shared)
                T.copy(W_down[g, by * block_dhidden, k * block_dexpert], down_shared)
                T.gemm(h_shared, down_shared, out_local, transpose_B=True)
            for i, j in T.Parallel(block_token, block_dhidden):
                if i < rows and by * block_dhidden + j < dhidden:
                    output[m_start + i, by * block_dhidden + j] = (
                        out_local[i, j] * routed_weights[m_start + i]
                    )

    return main


def route(x, router_weight, top_k, n_experts, block_token):
    """Host routing: top-k softmax weights, the (token, expert) pairs sorted by expert, and
    the group tables the kernel reads (sizes, offsets, padded offsets, tile -> expert)."""
    probs = torch.softmax(x.float() @ router_weight.float().T, dim=-1)
    weights, experts = torch.topk(probs, top_k, dim=-1)
    flat_experts = experts.flatten()
    order = torch.argsort(flat_experts, stable=True)
    tokens = order // top_k
    sizes = torch.bincount(flat_experts, minlength=n_experts).cpu().tolist()
    offsets, padded, tile_group = [], [], []
    for g, size in enumerate(sizes):
        offsets.append(sum(sizes[:g]))
        padded.append(len(tile_group) * block_token)
        tile_group += [g] * math.ceil(size / block_token)
    n_tiles = math.ceil(len(flat_experts) / block_token) + n_experts
    tile_group += [n_experts - 1] * (n_tiles - len(tile_group))  # spare tiles: no rows

    def as_int32(values):
        return torch.tensor(values, dtype=torch.int32, device=x.device)

    tables = [as_int32(v) for v in (sizes, offsets, padded, tile_group)]
    return tokens, weights.flatten()[order], tables


def moe_forward(x, router_weight, W_gate, W_up, W_down, top_k, block_token=64,
                block_dhidden=64, block_dexpert=64, threads=128):  # fmt: skip
    """Routed-expert MoE layer ``x (tokens, dhidden) -> (tokens, dhidden)`` with the kernel."""
    n_experts, dexpert, dhidden = W_gate.shape
    tokens, weights, tables = route(x, router_weight, top_k, n_experts, block_token)
    kernel = moe_forward_tilelang_routed(len(tokens), n_experts, n_experts, dhidden, dexpert,
                                         block_token, block_dhidden, block_dexpert, threads,
                                         dtype=str(x.dtype).removeprefix("torch."))  # fmt: skip
    up_logits = torch.empty(len(tokens), dexpert, dtype=x.dtype, device=x.device)
    rows = kernel(x[tokens].contiguous(), W_gate, W_up, W_down, weights.to(x.dtype), *tables,
                  up_logits)  # fmt: skip
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    return out.index_add_(0, tokens, rows.float()).to(x.dtype)


def ref_program(x, router_weight, W_gate, W_up, W_down, top_k):
    """Float64 reference: every token through its top-k experts, weighted and summed."""
    x64 = x.double()
    probs = torch.softmax(x.float() @ router_weight.float().T, dim=-1)
    weights, experts = torch.topk(probs, top_k, dim=-1)
    out = torch.zeros_like(x64)
    for e in range(W_gate.shape[0]):
        token, slot = torch.nonzero(experts == e, as_tuple=True)
        h = x64[token]
        act = torch.nn.functional.silu(h @ W_gate[e].double().T) * (h @ W_up[e].double().T)
        out.index_add_(0, token, (act @ W_down[e].double().T) * weights[token, slot, None].double())
    return out


def make_inputs(num_tokens, dhidden, dexpert, n_experts, device="cpu", dtype=torch.float16):
    """Random activations, router and expert weights scaled so the activations stay O(1)."""
    x = torch.randn(num_tokens, dhidden, device=device).to(dtype)
    router = torch.randn(n_experts, dhidden, device=device).to(dtype)
    W_gate, W_up = (
        (torch.randn(n_experts, dexpert, dhidden, device=device) / dhidden**0.5).to(dtype)
        for _ in range(2)
    )
    W_down = (torch.randn(n_experts, dhidden, dexpert, device=device) / dexpert**0.5).to(dtype)
    return x, router, W_gate, W_up, W_down


def main(num_tokens=300, dhidden=256, dexpert=128, n_experts=8, top_k=2, device=None):
    """Run the MoE layer on random inputs and check it against ``ref_program``."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    inputs = make_inputs(num_tokens, dhidden, dexpert, n_experts, device)
    out = moe_forward(*inputs, top_k)
    ref = ref_program(*inputs, top_k)
    torch.testing.assert_close(out.double(), ref, rtol=2e-2, atol=2e-2)
    print(f"fused MoE tokens={num_tokens} dhidden={dhidden} dexpert={dexpert} "
          f"experts={n_experts} top_k={top_k} on {device}: matches torch")  # fmt: skip
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--num_tokens", type=int, default=300)
    parser.add_argument("--dhidden", type=int, default=256)
    parser.add_argument("--dexpert", type=int, default=128)
    parser.add_argument("--n_experts", type=int, default=8)
    parser.add_argument("--top_k", type=int, default=2)
    args = parser.parse_args()
    main(args.num_tokens, args.dhidden, args.dexpert, args.n_experts, args.top_k)
