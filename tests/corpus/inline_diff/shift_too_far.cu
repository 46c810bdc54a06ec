// what: undefined behaviour: refused when it runs
// verdict: refused a shift by 40 of a 32-bit value
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    int64_t s = 40;
    int a = 1;
    return a << s;
}
