// what: short wraps on ++
// verdict: value -32768
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    short s = 32767;
    s++;
    return s;
}
