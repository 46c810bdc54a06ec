// what: a kernel is launched with <<<>>>, not called
// verdict: error a __global__ function call must be configured
#include <torch/extension.h>
__global__ void k() {}
int64_t f(torch::Tensor x) {
    k();
    return 0;
}
