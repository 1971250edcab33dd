"""benchmarks/accelerator/kernel_groups.py: kernels and ops told apart by name as XLA:GPU,
cuBLAS, CUTLASS, torch.compile and flash attention name them; the summary's arithmetic."""

import pytest

from benchmarks.accelerator import kernel_groups


@pytest.mark.parametrize(
    ("name", "group"),
    [
        ("cublas-gemm", "matmul"),  # XLA:GPU's cuBLAS call
        ("gemm_fusion_dot", "matmul"),  # XLA:GPU's Triton GEMM
        ("triton_gemm_dot_3", "matmul"),
        ("dot", "matmul"),  # an unfused HLO dot ("dot.12" without its number)
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", "matmul"),  # cuBLAS on Hopper
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "matmul"),
        ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64>", "matmul"),
        ("triton_tem_fused_mm_0", "matmul"),  # torch.compile's template matmul
        ("aten::mm", "matmul"),
        ("aten::addmm", "matmul"),
        ("aten::bmm", "matmul"),
        ("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>", "attention"),
        ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "attention"),
        ("loop_add_fusion", "other"),
        ("input_reduce_fusion", "other"),
        ("triton_poi_fused__to_copy_add_native_layer_norm_0", "other"),
        ("triton_red_fused_native_layer_norm_backward_1", "other"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor>", "other"),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "other"),  # "comm": no "mm" word
        ("copy_bitcast_fusion", "other"),
        ("ynn_fusion", "matmul"),  # XLA:CPU: a dot run by YNNPACK
    ],
)
def test_names_fall_in_their_group(name, group):
    assert kernel_groups.classify(name) == group


def test_summary_sums_by_group_and_bounds_the_mfu_by_the_matmul_time():
    rows = [("cublas-gemm", 30.0, 400), ("loop_fusion", 15.0, 900), ("flash_fwd", 5.0, 18)]
    out = kernel_groups.summary(rows, flops=4e12, peak=1e14, top=2)
    assert out["ms_per_step"] == {"matmul": 30.0, "attention": 5.0, "other": 15.0}
    assert out["total_ms"] == 50.0 and out["matmul_share"] == 0.7
    # 4e12 FLOPs in the 35 ms of matmul and attention kernels, against 1e14 FLOP/s.
    assert out["mfu_if_only_matmuls"] == pytest.approx(4e12 / 0.035 / 1e14)
    assert out["top"] == [["cublas-gemm", 30.0, 400, "matmul"], ["loop_fusion", 15.0, 900, "other"]]
    assert kernel_groups.summary(rows, flops=4e12, peak=None)["mfu_if_only_matmuls"] is None
    assert kernel_groups.summary([], flops=1.0, peak=1.0)["matmul_share"] is None


# An optimised HLO module as XLA:GPU prints it (shapes shortened): a Triton GEMM fusion named
# after the fusion pass ("fusion.4706") nested in an epilogue fusion, a plain elementwise
# fusion, a cuBLAS call, and the entry computation calling them.
HLO = """HloModule jit__fun, is_scheduled=true

%gemm.7 (p0: bf16[64,32], p1: bf16[32,16]) -> f32[64,16] {
  %p0 = bf16[64,32]{1,0} parameter(0)
  %p1 = bf16[32,16]{1,0} parameter(1)
  ROOT %dot.3 = f32[64,16]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%fused.12 (param_0: bf16[64,32], param_1: bf16[32,16]) -> f32[64,16] {
  %param_0 = bf16[64,32]{1,0} parameter(0)
  %param_1 = bf16[32,16]{1,0} parameter(1)
  %inner.1 = f32[64,16]{1,0} fusion(%param_0, %param_1), kind=kCustom, calls=%gemm.7
  ROOT %tanh.2 = f32[64,16]{1,0} tanh(%inner.1)
}

%fused.13 (param_0.1: f32[64,16]) -> f32[64,16] {
  %param_0.1 = f32[64,16]{1,0} parameter(0)
  ROOT %add.4 = f32[64,16]{1,0} add(%param_0.1, %param_0.1)
}

ENTRY %main.9 (Arg_0.1: bf16[64,32], Arg_1.2: bf16[32,16]) -> f32[64,16] {
  %Arg_0.1 = bf16[64,32]{1,0} parameter(0)
  %Arg_1.2 = bf16[32,16]{1,0} parameter(1)
  %fusion.4706 = f32[64,16]{1,0} fusion(%Arg_0.1, %Arg_1.2), kind=kCustom, calls=%fused.12
  %cublas-gemm.1 = f32[64,16]{1,0} custom-call(%Arg_0.1), custom_call_target="__cublas$gemm"
  ROOT %loop_add_fusion = f32[64,16]{1,0} fusion(%fusion.4706), kind=kLoop, calls=%fused.13
}
"""


def test_matmul_fusions_names_fusions_holding_a_dot_however_deep():
    # fusion.4706 holds no dot itself: its computation calls the Triton GEMM fusion.
    assert kernel_groups.matmul_fusions(HLO) == {"fusion_4706", "inner_1"}
    assert kernel_groups.matmul_fusions("") == frozenset()
    assert kernel_groups.kernel_name("gemm_fusion_dot.53") == "gemm_fusion_dot_53"


def test_real_cpu_hlo_names_its_dot_fusion():
    import jax
    import jax.numpy as jnp

    def fun(x, w):
        return jnp.tanh(x @ w + 1.0).sum(0)

    x, w = jnp.ones((64, 32)), jnp.ones((32, 16))
    text = jax.jit(fun).lower(x, w).compile().as_text()
    names = kernel_groups.matmul_fusions(text)
    # XLA:CPU fuses the dot alone; the add/tanh fusion and the reductions hold none.
    (name,) = names
    (line,) = [ln for ln in text.splitlines() if f"{name.replace('_', '.')} = " in ln or
               f"%{name} = " in ln]  # fmt: skip
    called = line.split("calls=")[1].split(",")[0].strip().lstrip("%")
    body = text.split(f"%{called} ")[1].split("\n}")[0]
    assert " dot(" in body and "tanh" not in body


def test_summary_counts_the_named_fusions_as_matmuls():
    rows = [("fusion_4706", 6.0, 24), ("loop_add_fusion", 4.0, 12), ("nvjet_tst", 10.0, 66)]
    by_name = kernel_groups.summary(rows, flops=1e12, peak=1e15)
    assert by_name["ms_per_step"] == {"matmul": 10.0, "attention": 0.0, "other": 10.0}
    hlo = kernel_groups.summary(rows, flops=1e12, peak=1e15, matmul_names={"fusion_4706"})
    assert hlo["ms_per_step"] == {"matmul": 16.0, "attention": 0.0, "other": 4.0}
    assert hlo["mfu_if_only_matmuls"] == pytest.approx(1e12 / 0.016 / 1e15)
    assert hlo["top"][0] == ["fusion_4706", 6.0, 24, "matmul"]
