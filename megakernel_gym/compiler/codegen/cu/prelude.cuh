// megakernel-gym: one persistent kernel for a whole plan (generated; see compiler/codegen.py)
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif

__device__ __forceinline__ float bf2f(unsigned short v) { return __uint_as_float(((unsigned)v) << 16); }
__device__ __forceinline__ unsigned short f2bf(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);   // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                                    // round to nearest even
  return (unsigned short)(u >> 16);
}
__device__ __forceinline__ float mk_silu(float x) { return x / (1.f + expf(-x)); }
__device__ __forceinline__ float mk_gelu(float x) { return 0.5f * x * (1.f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float mk_gelu_tanh(float x) {
  return 0.5f * x * (1.f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// weights: read once per step, so 16 bytes through the non-coherent path without allocating in L1
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ float bf_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float dot_bf16x8(uint4 w, float4 a, float4 b) {
  float s = bf_lo(w.x) * a.x;
  s = fmaf(bf_hi(w.x), a.y, s); s = fmaf(bf_lo(w.y), a.z, s); s = fmaf(bf_hi(w.y), a.w, s);
  s = fmaf(bf_lo(w.z), b.x, s); s = fmaf(bf_hi(w.z), b.y, s); s = fmaf(bf_lo(w.w), b.z, s);
  return fmaf(bf_hi(w.w), b.w, s);
}
// the same sums with x as 8 bf16 values (x_bf16): each converted exactly, in the same order
__device__ __forceinline__ float dot_bf16x8_x(uint4 w, uint4 x) {
  float s = bf_lo(w.x) * bf_lo(x.x);
  s = fmaf(bf_hi(w.x), bf_hi(x.x), s); s = fmaf(bf_lo(w.y), bf_lo(x.y), s); s = fmaf(bf_hi(w.y), bf_hi(x.y), s);
  s = fmaf(bf_lo(w.z), bf_lo(x.z), s); s = fmaf(bf_hi(w.z), bf_hi(x.z), s); s = fmaf(bf_lo(w.w), bf_lo(x.w), s);
  return fmaf(bf_hi(w.w), bf_hi(x.w), s);
}
__device__ __forceinline__ float dot_f32x4(uint4 w, float4 a) {
  return __uint_as_float(w.x) * a.x + __uint_as_float(w.y) * a.y + __uint_as_float(w.z) * a.z
         + __uint_as_float(w.w) * a.w;
}
__device__ __forceinline__ void unpack_bf16x8(uint4 w, float* f) {
  f[0] = bf_lo(w.x); f[1] = bf_hi(w.x); f[2] = bf_lo(w.y); f[3] = bf_hi(w.y);
  f[4] = bf_lo(w.z); f[5] = bf_hi(w.z); f[6] = bf_lo(w.w); f[7] = bf_hi(w.w);
}
__device__ __forceinline__ void unpack_f32x4(uint4 w, float* f) {
  f[0] = __uint_as_float(w.x); f[1] = __uint_as_float(w.y); f[2] = __uint_as_float(w.z); f[3] = __uint_as_float(w.w);
}
// a task's weight tile into L2 ahead of its turn (sm_90 bulk prefetch; 16-byte aligned, multiple of 16)
__device__ __forceinline__ void prefetch_l2(const void* p, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p), "r"(bytes) : "memory");
}
// where element e of rows of k floats (k % 8 == 0) sits in the two-plane layout of batched x (_x_split):
// each group of 8 split into its first 4, in the row's first half, and its last 4, in the second
__device__ __forceinline__ int mk_xp(int e, int k) {
  const int r = e / k, c = e - r * k;
  return r * k + ((c & 4) ? (k >> 1) : 0) + ((c >> 3) << 2) + (c & 3);
}
__device__ float block_sum(float v, float* red) {
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  MK_SYNC();
  float t = 0.f;
  for (int w = 0; w < (int)(MK_NT / 32); ++w) t += red[w];
  MK_SYNC();
  return t;
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// LL words (hops.py; NCCL's LL protocol, with the flag beside the data): a bf16 activation element
// as one 4-byte word, the value in the low half and the launch's epoch in the high half (float32: 8
// bytes, a word each), written by one store, so a reader that sees this launch's epoch sees the
// value: no fence, no counter, no second trip. mk_ep: this launch's epoch (1-65535, never 0: a
// zeroed word is no launch's).
#define MK_LL_SLEEP 32   // ns between polls of a word not there yet: every thread of a block may poll
__shared__ unsigned mk_ep;
__shared__ unsigned long long mk_spins;   // polls before a word that never comes traps the kernel
__device__ __forceinline__ void ll_st(unsigned* p, unsigned short v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" :: "l"(p), "r"((mk_ep << 16) | v) : "memory");
}
// a float32 element: 8 bytes, the value in the low word and the epoch in the high one
__device__ __forceinline__ void ll_st(unsigned long long* p, float v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;"
               :: "l"(p), "l"(((unsigned long long)mk_ep << 32) | __float_as_uint(v)) : "memory");
}
__device__ __forceinline__ unsigned long long ll_ld1(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ ulonglong2 ll_ld2(const ulonglong2* p) {
  ulonglong2 v;
  asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ unsigned ll_ld1(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 ll_ld4(const uint4* p) {
  uint4 v;
  asm volatile("ld.relaxed.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ float ll_bf(const unsigned* p) {
  unsigned w = ll_ld1(p);
  for (unsigned long long tries = 0; (w >> 16) != mk_ep; w = ll_ld1(p))
    if (++tries > mk_spins) __trap(); else __nanosleep(MK_LL_SLEEP);
  return __uint_as_float(w << 16);
}
// a float32 LL word already loaded once (w): polled again until this launch's is there, so that a
// thread can issue many loads together and wait on each only where it was early
__device__ __forceinline__ float ll_f32_from(const unsigned long long* p, unsigned long long w) {
  for (unsigned long long tries = 0; (unsigned)(w >> 32) != mk_ep; w = ll_ld1(p))
    if (++tries > mk_spins) __trap(); else __nanosleep(MK_LL_SLEEP);
  return __uint_as_float((unsigned)w);
}
__device__ __forceinline__ float ll_f32(const unsigned long long* p) { return ll_f32_from(p, ll_ld1(p)); }
__device__ __forceinline__ bool ll_ok2(ulonglong2 w) { return (unsigned)(w.x >> 32) == mk_ep && (unsigned)(w.y >> 32) == mk_ep; }
__device__ __forceinline__ bool ll_ok4(uint4 w) {
  return (w.x >> 16) == mk_ep && (w.y >> 16) == mk_ep && (w.z >> 16) == mk_ep && (w.w >> 16) == mk_ep;
}