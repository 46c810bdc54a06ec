// what: char is signed on x86-64: 127 + 1 wraps to -128
// verdict: value -128
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    char c = 127;
    c += 1;
    return c;
}
