"""How fast can one block per SM stream weights, by each way the megakernel could load them?

    python bench/stream_probe.py [--out DIR]

The megakernel's matmul tasks are one 256-thread block per SM, each reading its own run of weight
rows once. This probe runs just that access pattern, with no dependencies and no other work, so
the measured rate is the ceiling a task body can reach by each load path:
  regs U=n    every thread keeps n 16-byte ld.global.nc loads in flight (two register buffers, as
              the megakernel's register path does with n=8); also with 512 threads
  ring S x B  thread 0 keeps S stages of B bytes in flight as cp.async.bulk copies into shared
              memory (one copy per 4 KB row segment, as the weight ring does), every warp sums
              its segment, then the block syncs and refills the stage
  ring ... producer warp   a 9th warp issues the copies; each compute warp releases a stage (an
              arrival on its empty barrier) and goes on, with no block barrier
Per variant: the median over repetitions of bytes / time, for per-block runs of 512 KB (a gate+up
task) and 4 MB (steady state). Writes bench/results/stream_probe.json.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from judge_bench import write  # noqa: E402
from megakernel_gym.cuda.nvrtc import load_cuda  # noqa: E402

SRC = r"""
extern __shared__ float4 smem[];
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ float fold(uint4 v) {
  return __uint_as_float(v.x) + __uint_as_float(v.y) + __uint_as_float(v.z) + __uint_as_float(v.w);
}

template <int U>
__device__ void regs(const uint4* w, long long nvec, float* out) {
  float acc = 0.f;
  uint4 a[U], b[U];
  const long long step = (long long)blockDim.x * U;
  long long base = threadIdx.x;
#pragma unroll
  for (int j = 0; j < U; ++j) a[j] = ld_stream(w + base + j * blockDim.x);
  for (; base < nvec; base += 2 * step) {
    if (base + step < nvec) {
#pragma unroll
      for (int j = 0; j < U; ++j) b[j] = ld_stream(w + base + step + j * blockDim.x);
    }
#pragma unroll
    for (int j = 0; j < U; ++j) acc += fold(a[j]);
    if (base + 2 * step < nvec) {
#pragma unroll
      for (int j = 0; j < U; ++j) a[j] = ld_stream(w + base + 2 * step + j * blockDim.x);
    }
    if (base + step < nvec) {
#pragma unroll
      for (int j = 0; j < U; ++j) acc += fold(b[j]);
    }
  }
  if (acc == 12345.f) out[threadIdx.x] = acc;
}

extern "C" __global__ void __launch_bounds__(256) stream_regs8(const uint4* w, long long per_block, float* out) {
  regs<8>(w + blockIdx.x * (per_block / 16), per_block / 16, out);
}
extern "C" __global__ void __launch_bounds__(256) stream_regs16(const uint4* w, long long per_block, float* out) {
  regs<16>(w + blockIdx.x * (per_block / 16), per_block / 16, out);
}
extern "C" __global__ void __launch_bounds__(512) stream_regs8_512(const uint4* w, long long per_block, float* out) {
  regs<8>(w + blockIdx.x * (per_block / 16), per_block / 16, out);
}

__shared__ __align__(8) unsigned long long bar[16];
__device__ __forceinline__ unsigned sa(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
// stage g of a block's run into buffer g % S, as copies of `piece` bytes completing on its full barrier
__device__ __forceinline__ void issue_stage(const char* src, int g, int S, int stage, int piece) {
  const unsigned b = sa(&bar[g % S]);
  const unsigned dst = sa((char*)smem + (g % S) * stage);
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(stage) : "memory");
  for (int p = 0; p < stage; p += piece)
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst + p), "l"(src + (long long)g * stage + p), "r"(piece), "r"(b) : "memory");
}

// stages of `stage` bytes, issued as copies of `piece` bytes; S stages in flight
extern "C" __global__ void __launch_bounds__(256) stream_ring(const char* w, long long per_block, float* out,
                                                               int S, int stage, int piece) {
  const char* src = w + blockIdx.x * per_block;
  const int nst = (int)(per_block / stage);
  if (threadIdx.x == 0) {
    for (int b = 0; b < S; ++b) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sa(&bar[b])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int g = 0; g < S && g < nst; ++g) issue_stage(src, g, S, stage, piece);
  float acc = 0.f;
  for (int g = 0; g < nst; ++g) {
    const unsigned b = sa(&bar[g % S]), parity = (g / S) & 1u;
    unsigned ok = 0;
    while (!ok)
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                   : "=r"(ok) : "r"(b), "r"(parity) : "memory");
    const uint4* s4 = (const uint4*)((char*)smem + (g % S) * stage);
    for (int v = threadIdx.x; v < stage / 16; v += blockDim.x) acc += fold(s4[v]);
    __syncthreads();
    if (threadIdx.x == 0 && g + S < nst) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      issue_stage(src, g + S, S, stage, piece);
    }
  }
  if (acc == 12345.f) out[threadIdx.x] = acc;
}

// the same stages fed by a producer warp (warp 8 of 288 threads): each of the 8 compute warps sums
// its 4 KB segment of a stage and releases it (an arrival on the stage's empty barrier), with no
// block barrier; the producer refills a buffer once all 8 have released it
__shared__ __align__(8) unsigned long long empty_bar[16];
__device__ __forceinline__ void bar_wait(unsigned b, unsigned parity) {
  unsigned ok = 0;
  while (!ok)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(ok) : "r"(b), "r"(parity) : "memory");
}
extern "C" __global__ void __launch_bounds__(288, 1) stream_ring_ws(const char* w, long long per_block, float* out,
                                                                     int S, int stage, int piece) {
  const char* src = w + blockIdx.x * per_block;
  const int nst = (int)(per_block / stage), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int b = 0; b < S; ++b) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sa(&bar[b])) : "memory");
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 8;" :: "r"(sa(&empty_bar[b])) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  if (warp == 8) {
    if (lane == 0)
      for (int g = 0; g < nst; ++g) {
        if (g >= S) bar_wait(sa(&empty_bar[g % S]), (g / S - 1) & 1u);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        issue_stage(src, g, S, stage, piece);
      }
    return;
  }
  float acc = 0.f;
  const int seg = stage / 8 / 16;   // 16-byte vectors of a warp's segment
  for (int g = 0; g < nst; ++g) {
    bar_wait(sa(&bar[g % S]), (g / S) & 1u);
    const uint4* s4 = (const uint4*)((char*)smem + (g % S) * stage) + warp * seg;
    for (int v = lane; v < seg; v += 32) acc += fold(s4[v]);
    __syncwarp();
    if (lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(sa(&empty_bar[g % S])) : "memory");
  }
  if (acc == 12345.f) out[threadIdx.x] = acc;
}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    mod = load_cuda(SRC, "stream_probe.cu")
    out = torch.zeros(256, device="cuda")
    rows = []
    variants = [("regs U=8", "stream_regs8", ()), ("regs U=16", "stream_regs16", ()),
                ("regs U=8, 512 threads", "stream_regs8_512", ())]
    for s, stage, piece in [(4, 32768, 4096), (6, 32768, 4096), (4, 32768, 32768), (2, 65536, 4096),
                            (3, 65536, 65536), (8, 16384, 4096), (12, 16384, 16384)]:
        variants.append((f"ring {s} x {stage // 1024} KB ({piece // 1024} KB copies)", "stream_ring", (s, stage, piece)))
    for s, stage, piece in [(2, 32768, 32768), (4, 32768, 32768), (6, 32768, 32768), (8, 16384, 16384)]:
        variants.append((f"ring {s} x {stage // 1024} KB ({piece // 1024} KB copies), producer warp", "stream_ring_ws",
                         (s, stage, piece)))
    for per_block in (512 * 1024, 4 * 1024 * 1024):
        w = torch.empty(sms * per_block + 4096, dtype=torch.uint8, device="cuda").random_()
        for name, fn_name, extra in variants:
            fn = mod.get_function(fn_name)
            smem = extra[0] * extra[1] if extra else 0
            if smem > 48 * 1024:
                mod.set_max_dynamic_smem(fn_name, smem)
            args_ = (w, per_block, out) + tuple(extra)
            times = []
            for r in range(args.reps + 3):
                torch.cuda.synchronize()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn((sms,), (512 if fn_name.endswith("_512") else 288 if fn_name.endswith("_ws") else 256,), args_,
                   shared_mem=smem)
                b.record()
                torch.cuda.synchronize()
                if r >= 3:
                    times.append(a.elapsed_time(b) * 1e3)
            times.sort()
            med = times[len(times) // 2]
            gbs = sms * per_block / (med * 1e-6) / 1e9
            rows.append({"variant": name, "per_block_bytes": per_block, "blocks": sms, "median_us": med,
                         "p10_us": times[len(times) // 10], "p90_us": times[len(times) * 9 // 10], "gb_per_s": gbs})
            print(f"{name:40s} {per_block // 1024:5d} KB/block  {med:8.1f} us  {gbs:7.0f} GB/s", flush=True)
        del w
    write("probe", rows, [], Path(args.out), prefix="stream_",
          notes=f"one 256-thread block per SM ({sms}), each streaming its own run of bytes once; launch overhead "
                "included (a few us), so the 512 KB rows understate the steady rate")


if __name__ == "__main__":
    main()
