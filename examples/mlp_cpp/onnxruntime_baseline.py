#!/usr/bin/env python3
"""ONNX Runtime's time for mlp_cpp's forward on this machine: the baseline of the MLP goal.

The same model as examples/mlp_cpp (64x256 -> 512 -> 10, bias, ReLU, softmax, f32), built as an
ONNX graph (Gemm, Relu, Gemm, Softmax; weights as initializers, which ONNX Runtime pre-packs),
run on one intra-op thread with I/O binding (inputs and outputs bound once, as a host that
keeps its tensors would), median microseconds per forward over `iterations` runs after a
warm-up. Prints one line in the form mlp_cpp prints, so the two can be put side by side:

    python3 -m venv /tmp/ort && /tmp/ort/bin/pip install onnxruntime onnx numpy
    /tmp/ort/bin/python examples/mlp_cpp/onnxruntime_baseline.py 3000

ONNX Runtime fuses Gemm + Relu itself (its graph optimizations are left at their default, all).
"""
import statistics
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

BATCH, IN, HIDDEN, OUT = 64, 256, 512, 10


def pattern(n, scale, seed):
    """mlp_cpp's pattern(): the same inputs and weights, bit for bit."""
    v = np.empty(n, dtype=np.float32)
    x = seed
    for i in range(n):
        x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
        v[i] = scale * (np.float32((x >> 9) & 0xFFFF) / np.float32(65535.0) - np.float32(0.5))
    return v


def model():
    w1 = pattern(IN * HIDDEN, 0.1, 2).reshape(IN, HIDDEN)
    b1 = pattern(HIDDEN, 0.1, 3)
    w2 = pattern(HIDDEN * OUT, 0.1, 4).reshape(HIDDEN, OUT)
    b2 = pattern(OUT, 0.1, 5)
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h0"]),
        helper.make_node("Relu", ["h0"], ["h"]),
        helper.make_node("Gemm", ["h", "w2", "b2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, IN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, OUT])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m, (w1, b1, w2, b2)


def main():
    iterations = max(1, int(sys.argv[1])) if len(sys.argv) > 1 else 2000
    m, (w1, b1, w2, b2) = model()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])

    x = pattern(BATCH * IN, 2.0, 1).reshape(BATCH, IN)
    y = np.empty((BATCH, OUT), dtype=np.float32)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("y", "cpu", 0, np.float32, y.shape, y.ctypes.data)

    # The result against plain float64 arithmetic, as mlp_cpp checks its own.
    sess.run_with_iobinding(binding)
    h = np.maximum(x.astype(np.float64) @ w1 + b1, 0.0)
    logits = h @ w2 + b2
    ref = np.exp(logits - logits.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    err = float(np.abs(y - ref).max())
    if err > 1e-4:
        sys.exit(f"onnxruntime_baseline: result differs from the reference by {err}")

    for _ in range(max(50, iterations // 10)):
        sess.run_with_iobinding(binding)
    samples = []
    for _ in range(iterations):
        t = time.perf_counter()
        sess.run_with_iobinding(binding)
        samples.append((time.perf_counter() - t) * 1e6)
    print(
        f"ONNX Runtime {ort.__version__} MLP forward (Gemm, Relu, Gemm, Softmax; 1 thread, I/O binding): "
        f"median {statistics.median(samples):.1f} us over {iterations} runs (max |err| {err:.1e})"
    )


if __name__ == "__main__":
    main()
