"""Timings of PyTorch under the interposer (gpu/preload/run.sh's bench mode).

    torch_bench.py step STEPS          a training step of an 8-layer 4096-wide MLP (batch 512):
                                       prints "step_ms MS"
    torch_bench.py bursts N K SLEEP_MS N rounds of a GPU burst (K 4096x4096 matmuls, then a
                                       synchronize) and a CPU phase (SLEEP_MS without the GPU):
                                       prints "bursts N wall_s S gpu_s G\""""

import sys
import time

import torch


def step_bench(steps: int) -> None:
    torch.manual_seed(0)
    layers = []
    for _ in range(8):
        layers += [torch.nn.Linear(4096, 4096), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(512, 4096, device="cuda")
    y = torch.randn(512, 4096, device="cuda")

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(20):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    print(f"step_ms {(time.perf_counter() - start) / steps * 1000:.4f}", flush=True)


def bursts(n: int, k: int, sleep_ms: float) -> None:
    a = torch.randn(4096, 4096, device="cuda")
    b = a @ a
    torch.cuda.synchronize()
    gpu = 0.0
    start = time.perf_counter()
    for _ in range(n):
        t = time.perf_counter()
        for _ in range(k):
            b = a @ a
        torch.cuda.synchronize()
        gpu += time.perf_counter() - t
        # The CPU phase (a prover's synthesis): the GPU is not used.
        time.sleep(sleep_ms / 1000)
    wall = time.perf_counter() - start
    print(f"bursts {n} wall_s {wall:.3f} gpu_s {gpu:.3f} check {float(b[0, 0]):.1f}", flush=True)


def main() -> int:
    if sys.argv[1] == "step":
        step_bench(int(sys.argv[2]))
    elif sys.argv[1] == "bursts":
        bursts(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    else:
        print(f"unknown mode {sys.argv[1]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
