// what: inline assembly
// verdict: refused inline assembly
// native: 1
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    int v = 1;
    asm volatile("" : "+r"(v));
    return v;
}
