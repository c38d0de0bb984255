"""MLX's CPU quantized_matmul in bfloat16 loses precision with the reduction length, far beyond bf16.

Project: ml-explore/mlx 0.32.4 (mlx-cpu, Linux), as mlx-lm 0.32.2 runs a 4-bit model in bf16.
Finding: mx.quantized_matmul(x, w, scales, biases) with bf16 x and bf16 scales/biases lands
  3.7x (K = 256) to 20x (K = 8192) as far from the exact product as a bf16 matmul on the same
  dequantized weights (mx.dequantize, then x @ w.T), with a relative error that grows with K
  (about 2%, 5% and 10% of the output's RMS): what an accumulator kept in bf16 does. The dense
  bf16 matmul's own error stays at bf16's rounding.
Where it shows: the scoreboard's mlx-lm 4-bit row passes at 0.807 of its bound on the reduced E2B
  (projections of K <= 2048); the same MLX model unquantized in bf16 lands at the bf16 family's error
  (1.0x), and the 4-bit model in fp32 (fp32 scales and activations) at 0.13 of the bound. Released
  widths reduce over up to 21504 elements, so the error there is expected to be larger (not measured).
Source: mlx/backend/cpu/quantized.cpp (the CPU qmm kernels), not read line by line: the accumulator
  type is inferred from the error's growth, not from the code.
Public: none found (ml-explore/mlx #963 is about the Metal kernels accumulating in fp32): ready to file.
Run: PYTHONPATH=.cache/pinned/mlx-lm python tools/scoreboard/repro/mlx_quantized_matmul_bf16_cpu.py
"""
import sys

import mlx.core as mx
import numpy as np

rng = np.random.default_rng(0)
ratios = []
for k in (256, 2048, 8192):
    w = mx.array(rng.normal(0, 0.02, (256, k)).astype(np.float32)).astype(mx.bfloat16)
    x = mx.array(rng.normal(0, 1, (64, k)).astype(np.float32)).astype(mx.bfloat16)
    wq, scales, biases = mx.quantize(w, group_size=64, bits=4)
    dequantized = mx.dequantize(wq, scales, biases, group_size=64, bits=4)  # bf16, as the kernel's weights
    exact = np.array(x.astype(mx.float32)).astype(np.float64) @ np.array(
        mx.dequantize(wq, scales.astype(mx.float32), biases.astype(mx.float32), group_size=64, bits=4)).T
    quantized = np.array(mx.quantized_matmul(x, wq, scales, biases, transpose=True, group_size=64, bits=4).astype(mx.float32))
    dense = np.array((x @ dequantized.T).astype(mx.float32))
    rms = lambda y: float(np.sqrt(((y - exact) ** 2).mean()))  # noqa: E731
    size = float(np.sqrt((exact ** 2).mean()))
    ratios.append(rms(quantized) / rms(dense))
    print(f"K {k:5d}: quantized_matmul error {rms(quantized):.3e} ({rms(quantized) / size:.1%} of the output), "
          f"bf16 matmul on the dequantized weights {rms(dense):.3e}: {ratios[-1]:.1f}x")
if ratios[-1] > 4:
    print(f"REPRODUCED: mlx {mx.__version__} ({mx.default_device()}): bf16 quantized_matmul {ratios[-1]:.1f}x the bf16 "
          f"matmul's error at K 8192, growing with K")
    sys.exit(1)
print(f"NOT REPRODUCED: mlx {mx.__version__}: quantized_matmul within {ratios[-1]:.1f}x of a bf16 matmul")
