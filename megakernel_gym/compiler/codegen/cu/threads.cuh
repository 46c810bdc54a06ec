#define WS_PRODUCER_WARP %(producer_warp)d   // a warp of its own issues the weight ring's copies
// maxnreg: the producer's warp comes with a whole warpgroup (warps 8-11), which gives registers back
// (setmaxnreg.dec, to MK_PRODUCER_REGS) so that the compute warps can take MK_MAXNREG (setmaxnreg.inc)
// where ptxas otherwise caps the kernel at 168 (three warps share each of the SM's four register files).
// Hopper's arch-specific sm_90a only; compiled for another arch the kernel runs with the cap.
#define MK_MAXNREG %(maxnreg)d
#define MK_PRODUCER_REGS %(producer_regs)d
#if MK_MAXNREG && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MK_SETMAXNREG 1
#else
#define MK_SETMAXNREG 0
#endif
#if WS_PRODUCER_WARP   // task bodies run on the block less that warp, and sync on barrier 1 alone
#define MK_NT %(nt)d
#define MK_SYNC() asm volatile("bar.sync 1, %(nt)d;" ::: "memory")
#else
#define MK_NT blockDim.x
#define MK_SYNC() __syncthreads()
#endif
