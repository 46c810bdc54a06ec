// what: dim3's constructor takes unsigned int: the long long converts modulo 2^32
// verdict: value 2115098112
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    dim3 g(x.numel() * 1000000000LL);
    return g.x;
}
