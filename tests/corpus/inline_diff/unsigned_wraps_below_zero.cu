// what: unsigned arithmetic wraps modulo 2^32
// verdict: value 4294967295
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    unsigned u = 0;
    u -= 1;
    return u;
}
