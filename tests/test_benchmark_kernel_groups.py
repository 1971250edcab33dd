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
